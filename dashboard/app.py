"""The compat-harness dashboard.

    streamlit run dashboard/app.py -- --db results/compat.duckdb
    harness dashboard --db results/compat.duckdb        # the same
    nox -s dashboard                                     # the shipped results/default.duckdb

Pages: Matrix, Failures, History, Cell, Compare, Pin, Support (dashboard/views/). Every number comes from a query
function in harness/storage/queries.py; the file is opened read-only. See docs/dashboard.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run` puts dashboard/ on sys.path, not the folder that holds it: the repository
# root in a checkout, harness/_bundled/ in an installed wheel (harness/inputs/bundled.py).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402

from dashboard import common  # noqa: E402

st.set_page_config(page_title="compat-harness", page_icon=":material/grid_on:", layout="wide")

pages = [
    st.Page(common.PAGES["matrix"], title="Matrix", icon=":material/grid_on:", default=True),  # at /
    st.Page(common.PAGES["failures"], title="Failures", icon=":material/bug_report:", url_path="failures"),
    st.Page(common.PAGES["history"], title="History", icon=":material/history:", url_path="history"),
    st.Page(common.PAGES["cell"], title="Cell", icon=":material/deployed_code:", url_path="cell"),
    st.Page(common.PAGES["compare"], title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page(common.PAGES["pin"], title="Pin", icon=":material/push_pin:", url_path="pin"),
    st.Page(common.PAGES["support"], title="Support", icon=":material/table_chart:", url_path="support"),
]
page = st.navigation(pages)
common.source_picker()
page.run()
