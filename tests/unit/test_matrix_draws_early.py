"""A suite's Matrix draws its parts in places kept for them, in reading order, but not in that order
(`suite.matrix`): what needs no tally (the colour legend, the heatmap's caption, the columns' legend)
goes to the browser before the files are tallied, so that it is drawn while DuckDB works; the table
goes before the heatmap, above which it is shown, so that its rows are in while the heatmap is drawn.
And the heatmap's strips carry no text layer with nothing to write (`logic.lighter`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from streamlit.delta_generator import DeltaGenerator
from streamlit.testing.v1 import AppTest

from dashboard import logic
from harness.analysis import heatmap
from harness.storage import store
from harness.storage.store import Store
from tests.unit.test_dashboard_app import APP, run, suite_db

__all__ = ["suite_db"]  # the fixture, shared with test_dashboard_app
TALLIES = "count(*) AS tests"  # the files' tallies (`suites.test_group_tallies`)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every element the page sends and every SQL statement it runs, in the order they happen:
    ("sql", statement) or (delta type, its text where it has one)."""
    seen: list[tuple[str, str]] = []
    fetch, enqueue = store.Store.fetch, DeltaGenerator._enqueue

    def logging_fetch(self: Store, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        seen.append(("sql", sql))
        return fetch(self, sql, params)

    def logging_enqueue(self: DeltaGenerator, delta_type: str, element_proto: Any, *args: Any, **kwargs: Any) -> DeltaGenerator:
        seen.append((delta_type, str(getattr(element_proto, "body", ""))))
        return enqueue(self, delta_type, element_proto, *args, **kwargs)

    monkeypatch.setattr(store.Store, "fetch", logging_fetch)
    monkeypatch.setattr(DeltaGenerator, "_enqueue", logging_enqueue)
    return seen


def _layout(node: Any) -> list[str]:
    """The page's elements in reading order, as their types."""
    children = getattr(node, "children", None)
    if children is None:
        return [node.type]
    return [t for key in sorted(children) for t in _layout(children[key])]


def _open(path: Path, monkeypatch: pytest.MonkeyPatch, **params: str) -> AppTest:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    return run(AppTest.from_file(APP, default_timeout=60), **params)


def _first(sent: list[tuple[str, str]], kind: str, text: str = "") -> int:
    return next(i for i, (k, body) in enumerate(sent) if k == kind and text in body)


def test_what_needs_no_tally_is_sent_before_the_tallies_and_the_table_before_the_heatmap(
    suite_db: Path, monkeypatch: pytest.MonkeyPatch, sent: list[tuple[str, str]]
) -> None:
    at = _open(suite_db, monkeypatch)
    tallies = _first(sent, "sql", TALLIES)
    assert _first(sent, "markdown", "<span style=") < tallies  # the colour legend
    assert _first(sent, "markdown", "Every test file × every cell") < tallies  # the heatmap's caption
    assert _first(sent, "markdown", "- **A** ") < tallies  # the columns' legend
    assert tallies < _first(sent, "markdown", "test(s) in")  # the counts line waits for them
    assert _first(sent, "dataframe") < _first(sent, "vega_lite_chart")
    # shown in reading order all the same: the counts, the colours, the heatmap, then the table
    layout = _layout(at.main)
    assert layout.index("vega_lite_chart") < layout.index("dataframe")
    texts = [m.value for m in at.main.get("markdown")]
    assert texts.index(next(t for t in texts if "test(s) in" in t)) < texts.index(next(t for t in texts if "<span" in t))


def test_a_search_that_finds_nothing_draws_nothing_else(suite_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _open(suite_db, monkeypatch)
    at.text_input(key="f_search").set_value("no_such_test_anywhere").run()
    assert [i.value for i in at.info] == ["No test matches `no_such_test_anywhere`."]
    assert not at.dataframe and not at.get("vega_lite_chart") and not at.expander
    assert not [m for m in at.markdown if "<span" in m.value]  # not even the colour legend


def test_the_strips_drop_only_the_text_layers_with_nothing_to_write() -> None:
    cols = [
        heatmap.Column(f"c{t}{a}", f"c{t}{a}", (("torch", "2.13.0"), ("transformers", tf), ("accelerate", a)))
        for t, tf in enumerate(("5.6.2", "5.10.4"))
        for a in ("1.13.0", "1.14.0")
    ]
    words = {(c.key, row): "pass" for c in cols for row in ("a.py", "b.py")}
    edge = heatmap.Edge("a.py", "fixed", "fixed in accelerate 1.14.0 (after 1.13.0)", "accelerate", "c01.13.0", "c01.14.0", "sig")
    spec = heatmap.layout(["a.py", "b.py"], cols, words, [edge], "accelerate", width=300)
    whole = copy.deepcopy(spec)
    light = logic.lighter(spec)
    assert spec == whole  # the published spec is not touched
    fields = [[layer["encoding"].get("text", {}).get("field") for layer in view["layer"]] for view in light["vconcat"]]
    # tf's versions fit across their two columns; accelerate's are written up their one column each
    assert fields[:2] == [[None, "t"], [None, "r"]]
    assert light["vconcat"][-1] == spec["vconcat"][-1]  # the squares, ticks and triangles (and their clicks) whole
    assert light["datasets"] == spec["datasets"]
    assert [view["layer"][0] for view in light["vconcat"][:-1]] == [view["layer"][0] for view in spec["vconcat"][:-1]]
