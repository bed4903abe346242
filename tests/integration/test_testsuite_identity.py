"""A test's identity across two releases of a suite, end to end: the real worker and controller
collect and run both releases (release 2 inserts parametrized cases with unprintable values, so
pytest renumbers every later case), the outcomes go into a real DuckDB results file, and the
answers read them back: identities match across the releases where the node ids do not, so the
known-good set and attribution see the same tests. And a results file written before the
identity column (migration 0009) still opens and reads, its node ids as identities."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import duckdb
from rich.console import Console

from harness.analysis.outcome import CellRecord, Outcome
from harness.analysis.status import Status
from harness.render.summary import render_known_good
from harness.running.checks import suite_outcome
from harness.running.runner import CellRunner
from harness.running.testsuite import make_suite, run_suite
from harness.storage import queries
from harness.storage.shardfile import ShardStore, read_records
from harness.storage.store import Store
from harness.storage.store_schema import MIGRATIONS, OUTCOME_COLUMNS
from harness.workflows.answering import answer

RELEASE_1 = """
import pytest

class Model:  # no __name__ on an instance, and its repr holds a memory address
    pass

CASES = [{"r": 8}, {"target_modules": {"lin1", "lin0"}}, {"fails": True}]

@pytest.mark.parametrize("config_kwargs", CASES)
def test_config(config_kwargs):
    assert not config_kwargs.get("fails"), "this case fails in every release"

@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("cfg, dtype", [({"a": 1}, "fp16"), (Model(), "bf16")])
def test_stacked(cfg, dtype, n):
    pass

def test_removed_in_release_2():
    pass
"""
RELEASE_2 = """
import pytest

class Model:
    pass

CASES = [{"new": 1}, {"r": 8}, {"target_modules": {"lin0", "lin1"}}, {"fails": True}]

@pytest.mark.parametrize("config_kwargs", CASES)
def test_config(config_kwargs):
    assert not config_kwargs.get("fails"), "this case fails in every release"

@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("cfg, dtype", [({"b": 2}, "fp32"), ({"a": 1}, "fp16"), (Model(), "bf16")])
def test_stacked(cfg, dtype, n):
    pass

def test_added_in_release_2():
    pass
"""
RUN = "run-identity"


def _sweep_release(tmp_path: Path, name: str, source: str) -> list[Outcome]:
    root = tmp_path / name
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_models.py").write_text(textwrap.dedent(source))
    suite = make_suite(root, ["tests"])
    events = tmp_path / f"{name}-events.jsonl"
    made = []
    with CellRunner(sys.executable, isolation="process") as runner:
        start = lambda skip: runner.run_suite_worker(suite.root, suite.args(), events, skip, tmp_path / f"{name}.log", {})  # noqa: E731
        for event in run_suite(start, runner.kill_running, events, timeout=60.0):
            found = suite_outcome(RUN, name, event, ["mypkg"], [], suite)
            if found is not None:
                made.append(found)
    return made


def _cell(name: str, version: str) -> CellRecord:
    versions = {"mypkg": version}
    return CellRecord(RUN, name, "3.11", versions, [f"mypkg=={version}"], versions, {}, {}, "ready", "", 1.0, False)


def test_identities_match_across_releases_that_renumber_and_the_answers_see_the_same_tests(tmp_path: Path) -> None:
    first, second = _sweep_release(tmp_path, "rel1", RELEASE_1), _sweep_release(tmp_path, "rel2", RELEASE_2)
    ids_1 = {o.scenario: o.test_id or o.scenario for o in first}
    ids_2 = {o.scenario: o.test_id or o.scenario for o in second}
    # pytest renumbered: the failing case is config_kwargs2 in release 1 and config_kwargs3 in release 2 ...
    failing_1 = next(n for n, o in ((o.scenario, o) for o in first) if o.status == Status.FAIL)
    failing_2 = next(n for n, o in ((o.scenario, o) for o in second) if o.status == Status.FAIL)
    assert failing_1.endswith("test_config[config_kwargs2]") and failing_2.endswith("test_config[config_kwargs3]")
    # ... and release 2's config_kwargs2 is another case, which passes; the identities say which is which
    assert ids_1[failing_1] == ids_2[failing_2] != ids_2[failing_1]
    shared = set(ids_1.values()) & set(ids_2.values())
    # every case of release 1 but its removed test is in release 2, set order and memory addresses notwithstanding
    assert len(shared) == len(first) - 1 == 3 + 4
    assert len(set(ids_1) & set(ids_2)) < len(shared)  # by node id, fewer would have matched

    db = tmp_path / "results.duckdb"
    with Store(db) as store:
        store.ensure_run(RUN, "matrix.toml", "", {}, "test", {"platform": "linux-x86_64", "gpu": "cpu"})
        store.record_cell(_cell("rel1", "1.0"))
        store.record_cell(_cell("rel2", "2.0"))
        for made in [*first, *second]:
            store.add_outcome(made)
    shard, merged = _as_shard(tmp_path, first, second)
    for results in (Store(db, read_only=True), shard, Store(merged, read_only=True)):
        with results:
            found = answer(results)
        rows = found.rows
        assert {r["node_id"] for r in rows} == set(ids_1) | set(ids_2)
        # the test that fails in both releases is one test failing in both: no fix, no regression
        assert [t for t in found.attribution.transitions if t.kind in ("introduced", "fixed")] == []
        (known,) = found.known_good
        assert dict(known.result.versions) == {"mypkg": "2.0"}
        assert known.dropped == () and set(known.failing) == {ids_1[failing_1]}
        out = io.StringIO()
        render_known_good(rows, Console(file=out, width=200), found.known_good)
        assert "passes all 10 of its own tests (1 more pass elsewhere on it, tests its suite does not collect)" in out.getvalue()
    with Store(db, read_only=True) as store:  # a report's rows: the cell's own node id beside the identity
        traced = queries.outcome_rows_with_traces(store, [ids_1[failing_1]])
        assert {(r["cell_id"], r["node_id"]) for r in traced} == {("rel1", failing_1), ("rel2", failing_2)}


def _as_shard(tmp_path: Path, *releases: list[Outcome]) -> tuple[ShardStore, Path]:
    shard = ShardStore(tmp_path / "results.jsonl")
    shard.ensure_run(RUN, "matrix.toml", "", {}, "test", {"platform": "linux-x86_64", "gpu": "cpu"})
    shard.record_cell(_cell("rel1", "1.0"))
    shard.record_cell(_cell("rel2", "2.0"))
    for made in [o for outcomes in releases for o in outcomes]:
        shard.add_outcome(made)
    shard.close()
    merged = tmp_path / "merged.duckdb"
    with Store(merged) as store:  # `harness merge` keeps the identities
        assert store.merge_records(read_records(shard.path)) == sum(len(o) for o in releases)
    return ShardStore(shard.path, read_only=True), merged


def test_a_results_file_written_before_the_identity_column_still_opens_and_reads(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
    for name, sql in MIGRATIONS[: [n for n, _ in MIGRATIONS].index("0009_test_identity")]:
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, now())", [name])
    columns = [c for c in OUTCOME_COLUMNS if c != "test_id"]
    values = {"run_id": RUN, "cell_id": "rel1", "scenario": "t.py::test_x[cfg0]", "repeat": 0, "status": "pass", "metrics": "{}"}
    con.execute(f"INSERT INTO outcomes ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})", list(values.values()))
    assert "test_id" not in [r[0] for r in con.execute("DESCRIBE outcomes").fetchall()] and columns
    con.close()
    with Store(db, read_only=True) as store:  # a reader: not migrated
        (row,) = queries.outcome_rows(store)
        assert row["scenario"] == row["node_id"] == "t.py::test_x[cfg0]"
        assert queries.pin_rows(store, ["t.py::test_x[cfg0]"])[0]["node_id"] == "t.py::test_x[cfg0]"
    with Store(db) as store:  # a writer migrates it: NULL identities read as the node id
        (row,) = queries.outcome_rows(store)
        assert row["test_id"] == row["scenario"] == "t.py::test_x[cfg0]"
