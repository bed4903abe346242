"""One seam for results files (storage/resultsfile.py, opened by storage/opening.py): a DuckDB file (store.Store) and a JSON-lines shard
(shardfile.ShardStore) behind one Protocol, picked in one place by the path's suffix."""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.errors import StoreError
from harness.running import live
from harness.running.sweep import ResultStore, SilentReporter
from harness.storage import queries
from harness.storage.opening import open_results
from harness.storage.resultsfile import ResultsFile
from harness.storage.shardfile import ShardStore
from harness.storage.store import Store

REPO = Path(__file__).resolve().parents[2]
RUN = "r-seam"
HOST = {"platform": "linux-x86_64", "gpu": "NVIDIA H200", "python": "3.11.7"}
KINDS = pytest.mark.parametrize("name", ["results.duckdb", "results.jsonl"])


def cell(cell_id: str, transformers: str) -> CellRecord:
    pins = {"transformers": transformers}
    return CellRecord(RUN, cell_id, "3.11", pins, [f"transformers=={transformers}"], pins, {}, {}, "ready", "", 1.0, False)


def outcome(cell_id: str, scenario: str, status: Status, repeat: int = 0) -> Outcome:
    return Outcome(RUN, cell_id, scenario, repeat, status, message=f"{scenario} {status}", started_at="2026-11-23T10:00:00")


def write(results: ResultsFile) -> list[bool]:
    """What a sweep does, typed against the Protocol only."""
    results.ensure_run(RUN, "m.toml", "[axes]\n", {"jobs": 1}, "0.0", HOST)
    results.record_releases(RUN, {"transformers": [("5.7.0", datetime(2026, 2, 1)), ("5.6.2", None)]})
    results.record_cell(cell("tf5.6.2", "5.6.2"))
    results.record_cell(cell("tf5.7.0", "5.7.0"))
    results.report(queued=3, computed=0, running=[], state="running")
    made = [outcome("tf5.6.2", "lora", Status.PASS), outcome("tf5.7.0", "lora", Status.FAIL), outcome("tf5.6.2", "lora", Status.FAIL)]
    return [results.add_outcome(o) for o in made]


def read(results: ResultsFile) -> tuple[list[tuple[Any, ...]], dict[str, list[str]]]:
    """What `harness summary` and refinement read back, typed against the Protocol only."""
    columns = ("run_id", "cell_id", "scenario", "repeat", "status", "message", "transformers", "platform", "gpu", "origin")
    rows = [tuple(r[c] for c in columns) for r in results.outcome_rows(RUN)]
    assert results.outcome_rows() == results.outcome_rows(RUN)  # one run in the file
    assert results.outcome_rows("r-none") == []
    return rows, results.known_releases()


EXPECTED = (
    [
        (RUN, "tf5.6.2", "lora", 0, "pass", "lora pass", "5.6.2", "linux-x86_64", "NVIDIA H200", "matrix"),
        (RUN, "tf5.7.0", "lora", 0, "fail", "lora fail", "5.7.0", "linux-x86_64", "NVIDIA H200", "matrix"),
    ],
    {"transformers": ["5.6.2", "5.7.0"]},
)


@KINDS
def test_one_function_typed_against_the_protocol_works_on_both_kinds(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with open_results(path) as results:
        assert write(results) == [True, True, False]  # the third repeats the first one's key: kept as first stored
        assert results.done_keys(RUN) == {("tf5.6.2", "lora", 0), ("tf5.7.0", "lora", 0)}
        assert results.done_keys("r-other") == set()
        assert read(results) == EXPECTED  # while it is written
    assert results.left_journal == ""
    with open_results(path, read_only=True) as again:  # and from the file alone
        assert read(again) == EXPECTED
        assert again.done_keys(RUN) == {("tf5.6.2", "lora", 0), ("tf5.7.0", "lora", 0)}
    with open_results(path) as resumed:  # a rerun: nothing stored twice
        assert resumed.add_outcome(outcome("tf5.7.0", "lora", Status.PASS)) is False
        assert resumed.add_outcome(outcome("tf5.7.0", "lora", Status.PASS, repeat=1)) is True
        assert len(resumed.outcome_rows(RUN)) == 3


def test_the_duckdb_methods_are_the_named_queries(tmp_path: Path) -> None:
    with Store(tmp_path / "r.duckdb") as store:
        write(store)
        assert store.outcome_rows(RUN) == queries.outcome_rows(store, RUN)
        assert store.known_releases() == queries.known_releases(store) == EXPECTED[1]


@pytest.mark.parametrize(
    ("name", "kind"),
    [("r.jsonl", ShardStore), ("r.duckdb", Store), ("r.db", Store), ("results", Store), ("r.jsonl.duckdb", Store)],
)
def test_open_results_picks_the_kind_by_suffix(tmp_path: Path, name: str, kind: type) -> None:
    results = open_results(tmp_path / name)
    try:
        assert type(results) is kind
    finally:
        results.close()
    assert ResultStore is ResultsFile  # what a sweep writes through is the same seam


@KINDS
def test_a_missing_file_opened_to_read_is_refused_by_either_kind(tmp_path: Path, name: str) -> None:
    with pytest.raises(StoreError, match="does not exist; run a sweep first"):
        open_results(tmp_path / name, read_only=True)
    assert not (tmp_path / name).exists()


def test_only_a_duckdb_file_on_disk_is_watched(tmp_path: Path) -> None:
    inner = SilentReporter()
    with Store(tmp_path / "r.duckdb") as store:
        reporter = live.watched(store, inner)
        assert isinstance(reporter, live.LiveReporter) and reporter.inner is inner
        store.ensure_run(RUN, "m.toml", "", {}, "0.0", HOST)  # the journal, and its status file
        reporter.start(7)
        (writer,) = live.writers(tmp_path / "r.duckdb")
        assert (writer.alive, writer.run_id, writer.queued, writer.state) == (True, RUN, 7, "running")
    assert live.writers(tmp_path / "r.duckdb") == []  # closed: folded, nothing left beside the file
    with Store(":memory:") as memory:
        assert live.watched(memory, inner) is inner
    with ShardStore(tmp_path / "r.jsonl") as shard:
        assert live.watched(shard, inner) is inner
        assert live.watched(shard, None) is None


def test_a_shard_report_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with ShardStore(path) as shard:
        shard.ensure_run(RUN, "m.toml", "", {}, "0.0", HOST)
        before = path.read_bytes()
        shard.report(queued=3, computed=1, running=[], state="running")
        assert path.read_bytes() == before
        assert list(tmp_path.iterdir()) == [path]  # no journal, no status file


def test_no_class_of_the_results_files_exceeds_300_lines() -> None:
    # Issue #23: Store was one 600-line class (connections, journal folds, locking, snapshots, writes, merges).
    paths = [
        *(REPO / "harness" / "storage").glob("*.py"),
        REPO / "harness" / "running" / "live.py",
    ]
    sizes = {
        f"{path.name}:{node.name}": node.end_lineno - node.lineno + 1
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }
    assert "store.py:Store" in sizes and "store_writing.py:Writer" in sizes
    assert {name: n for name, n in sizes.items() if n > 300} == {}
