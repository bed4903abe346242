"""Support: for one library, its releases as columns and the scenarios (or test groups) as rows, per machine.

On each machine class's known-good line: every other library at that machine's known-good
version, so two columns differ in this library alone. A square is the folded outcome there;
a column of releases the index lists between two that ran says *not built*; ★ (fixed) and
▲ (introduced) mark the exact answers of attribution on that line. The same tables as
`harness publish` writes (`harness.analysis.support`, through `harness.workflows.support.support_of`).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import common, logic
from harness.analysis.support import SupportTable
from harness.workflows import support as publish

st.title("Support")
common.data_banner()
with st.spinner("Reading every outcome and choosing each machine's known-good set (seconds on a large file)…"):
    tables, rows_are = common.query(publish.support_of)
libraries = list(dict.fromkeys(t.library for t in tables))
if not libraries:
    st.info("No machine has a known-good set (nothing passes anywhere), so there is no line to tabulate.")
    st.stop()
default = next((lib for lib in libraries if any(t.library == lib and t.marked for t in tables)), libraries[0])
library = common.select_kept("Library", libraries, "support_library", default, help="its releases become the columns")


def frame(table: SupportTable) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the words, with ★/▲ where an exact answer changed the row; the colours) for one table."""
    labels = [c.label if c.built else f"{c.label} not built" for c in table.columns]
    words, colours = {}, {}
    for i, (column, label) in enumerate(zip(table.columns, labels)):
        entries = [table.entry(row, i) for row in table.rows]
        marks = ["" if not e.mark else (" ▲" if e.kind == "introduced" else " ★") for e in entries]
        words[label] = [(e.word or "—") + m if column.built else "not built" for e, m in zip(entries, marks)]
        colours[label] = [logic.colour_of(e.word) if column.built else "color: #8c959f" for e in entries]
    index = pd.Index(table.rows, name=rows_are)
    return pd.DataFrame(words, index=index), pd.DataFrame(colours, index=index)


for table in [t for t in tables if t.library == library]:
    held = ", ".join(f"{a} {v}" for a, v in table.held)
    st.subheader(f"{library} on {table.machine}")
    if table.built < 2:
        st.caption(f"Only {library} {table.known_good} ran on this machine's known-good line ({held}).")
        continue
    st.caption(
        f"With {held} (the known-good set's other versions; {library} {table.known_good} in it). ★ fixed in, ▲ introduced in "
        "that release: an exact answer (it and the release before it both ran on this line)."
    )
    words, colours = frame(table)
    st.dataframe(words.style.apply(lambda _, shades=colours: shades, axis=None), width="content")
    answers = sorted({e.mark for e in table.entries.values() if e.mark})
    if answers:
        st.markdown("\n".join(f"- {a}" for a in answers))
