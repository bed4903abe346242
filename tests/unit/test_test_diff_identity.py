"""The dashboard's two-cell diff matches a test across the suite's releases by its identity.

Two releases of a package's own suite: the second inserted a case, so pytest numbered the same
dict-valued case `config_kwargs1` in one and `config_kwargs2` in the other. Compared by node
id they are two tests, each missing on one side; by identity, one test that fails in B.
"""

from __future__ import annotations

from pathlib import Path

from harness.analysis.outcome import CellRecord
from harness.storage import suites
from harness.storage.store import Store

SAME = "tests/test_m.py::test_x[config_kwargs#75b93f48]"


def _suite(path: Path) -> Path:
    with Store(path) as store:
        store.ensure_run("r", "matrix.toml", "", {}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu", "gpu_count": 0})
        rows = [
            ("A", "tests/test_m.py::test_x[config_kwargs1]", SAME, "pass", ""),
            ("B", "tests/test_m.py::test_x[config_kwargs2]", SAME, "fail", "AssertionError: x"),
            ("A", "tests/test_m.py::test_y", None, "pass", ""),
            ("B", "tests/test_m.py::test_y", None, "pass", ""),
            ("B", "tests/test_m.py::test_x[config_kwargs1]", "tests/test_m.py::test_x[config_kwargs#0c1d2e3f]", "pass", ""),
        ]
        for cell, version in (("A", "0.19.1"), ("B", "0.20.0")):
            versions = {"torch": "2.13.0", "peft": version}
            store.record_cell(CellRecord("r", cell, "3.11", versions, [], versions, {}, {}, "ready", "", 1.0, False))
        for cell, node, identity, status, signature in rows:
            store.con.execute(
                "INSERT INTO outcomes (run_id, cell_id, scenario, repeat, status, signature, test_id) VALUES ('r', ?, ?, 0, ?, ?, ?)",
                [cell, node, status, signature, identity],
            )
    return path


def test_the_diff_compares_identities_and_shows_a_node_id(tmp_path: Path) -> None:
    with Store(_suite(tmp_path / "s.duckdb"), read_only=True) as store:
        diff = suites.test_diff(store, "A", "B")
    # test_y; the renumbered dict case (one test, fails in B); B's new case (missing in A)
    assert (diff["tests"], diff["differ"]) == (3, 2)
    shown = sorted((r["scenario"], r["A"], r["B"]) for r in diff["rows"])
    # the same node id twice: A's renumbered case (the same test as B's config_kwargs2, failing
    # there), and B's new case under the number A's case had (not run in A)
    assert shown == [
        ("tests/test_m.py::test_x[config_kwargs1]", "pass", "fail"),
        ("tests/test_m.py::test_x[config_kwargs1]", "—", "pass"),
    ]
