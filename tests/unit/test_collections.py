"""A suite's current state in a cell is what its newest run there collected (`storage.collections`).

Nights written through the harness's own writer into a real DuckDB file, each with what its sweep
collected per cell, as a sweep records it; then what the file holds as current, what it keeps as
history (the `not_collected` marks and why), what `harness changes` classes, and that shards,
merges, narrower selections, scenarios beside a suite and files of an older harness keep to the
rule.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harness.analysis.changes import Depends, Span, compare
from harness.analysis.outcome import CellRecord, Collection, Outcome, Status
from harness.analysis.selection import Selection, covers
from harness.analysis.status import NOT_COLLECTED
from harness.storage import queries
from harness.storage.store import Store
from harness.workflows.changes import changes_of

CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": [], "python": "3.11.7"}
FILE = "tests/test_team.py"
SUITE = {"paths": ["tests"], "k": "", "m": ""}
ERROR = "SyntaxError: '(' was never closed (teampkg/__init__.py, line <n>)"
START = datetime(2026, 11, 20, 4)


def t(name: str) -> str:
    return f"{FILE}::{name}"


def night(
    path: Path,
    n: int,
    outcomes: dict[str, tuple[str, str]],
    *,
    cells: tuple[str, ...] = ("c1", "c2"),
    collected: list[str] | None = None,
    errors: dict[str, str] | None = None,
    selection: dict[str, Any] | None = None,
    env: str = "ready",
    record: bool = True,
) -> str:
    """Night `n`: one sweep of the suite in `cells` whose tests came out as `outcomes` (node id ->
    (status, signature)); `collected`: what the sweep collected (default: the tests that ran);
    `record`: False writes no collection, as the harness before the collections did."""
    run = f"night-{n}"
    inputs = {"scenarios": {}, "tests": {"config": "conf", "files": {FILE: f"file-{n}"}, "code": f"code-{n}"}, "paths": {}}
    with Store(path) as store:
        store.ensure_run(run, "m.toml", "", {"tests": {"root": ".", **(selection or SUITE)}, "inputs": inputs}, "0.1.0", CPU)
        for cell in cells:
            store.record_cell(CellRecord(run, cell, "3.11", {"packaging": cell}, [], {"packaging": cell}, {}, {}, env, "", 1.0, False))
            if env == "ready" and record:
                tests = list(outcomes) if collected is None else collected
                store.record_collection(Collection(run, cell, selection or SUITE, tests, errors or {}))
            for node, (status, signature) in outcomes.items():
                store.add_outcome(Outcome(run, cell, node, 0, Status(status), message=signature, signature=signature))
        store.con  # noqa: B018  (folds the journal)
    with duckdb.connect(str(path)) as con:  # a day apart
        con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [START + timedelta(days=n), run])
    return run


def current(path: Path, cell: str = "c1") -> dict[str, str]:
    with Store(path, read_only=True) as store:
        rows = store.fetch("SELECT scenario, status FROM outcomes WHERE cell_id = ? ORDER BY scenario", [cell])
    return {r["scenario"]: r["status"] for r in rows}


def marks(path: Path, cell: str = "c1") -> list[tuple[str, str, str]]:
    """The history's `not_collected` marks of a cell: (run, node id, why), oldest first."""
    with Store(path, read_only=True) as store:
        marked = f"cell_id = ? AND status = '{NOT_COLLECTED}'"
        rows = store.fetch(f"SELECT run_id, scenario, exception_type FROM history WHERE {marked} ORDER BY run_id, scenario", [cell])
    return [(r["run_id"], r["scenario"], r["exception_type"]) for r in rows]


def changes(path: Path) -> dict[str, Any]:
    with Store(path, read_only=True) as store:
        report = changes_of(store)
    assert report is not None
    return report.to_dict()


PASSING = {t("test_code"): ("pass", ""), t("test_stable"): ("pass", ""), t("test_gate"): ("pass", "")}


@pytest.fixture
def three_nights(tmp_path: Path) -> Path:
    """The issue's nights: all pass; a syntax error keeps the file from importing; the revert, with test_stable deleted."""
    db = tmp_path / "r.duckdb"
    night(db, 1, PASSING)
    night(db, 2, {FILE: ("error", ERROR)}, errors={FILE: ERROR})
    return db


def test_a_file_that_stops_importing_takes_its_tests_out_of_the_current_state(three_nights: Path) -> None:
    assert current(three_nights) == {FILE: "error"}  # not three stale passes beside it
    assert marks(three_nights) == [("night-2", t(n), "not_run") for n in ("test_code", "test_gate", "test_stable")]
    found = changes(three_nights)
    # the night's first regression: the file's error, with the tests it kept from running; no "new cell"
    assert found["headline"].endswith("+1 failing (3 tests not run), −0 fixed, 0 flaky") and not found["new_cells"]
    (file,) = [c for c in found["changes"] if c["cell"] == "c1"]
    assert (file["kind"], file["test"], file["signature"]) == ("regressed", FILE, ERROR)
    assert file["tests_not_run"] == sorted(PASSING)


def test_the_revert_with_a_deleted_test_ends_the_error_and_the_test(three_nights: Path) -> None:
    night(three_nights, 3, {t("test_code"): ("pass", ""), t("test_gate"): ("pass", "")})
    assert current(three_nights) == {t("test_code"): "pass", t("test_gate"): "pass"}  # no error, no test_stable
    assert ("night-3", FILE, "collected") in marks(three_nights) and ("night-3", t("test_stable"), "removed") in marks(three_nights)
    found = changes(three_nights)
    kinds = sorted((c["kind"], c["test"]) for c in found["changes"] if c["cell"] == "c1")
    assert kinds == [("fixed", FILE), ("removed", t("test_stable"))]
    fixed = next(c for c in found["changes"] if c["kind"] == "fixed" and c["cell"] == "c1")
    assert fixed["tests_run_again"] == [t("test_code"), t("test_gate")]
    assert "1 removed" in found["headline"] and "−1 fixed (2 tests run again)" in found["headline"]
    # a fourth night the same: nothing changes, and the deleted test is not marked again
    night(three_nights, 4, {t("test_code"): ("pass", ""), t("test_gate"): ("pass", "")})
    assert [c for c in changes(three_nights)["changes"]] == [] and len(marks(three_nights)) == 5


def test_a_test_that_fails_when_its_file_imports_again_is_a_regression_since_it_last_ran(three_nights: Path) -> None:
    night(three_nights, 3, {t("test_code"): ("fail", "AssertionError"), t("test_gate"): ("pass", ""), t("test_stable"): ("pass", "")})
    kinds = sorted((c["kind"], c["test"]) for c in changes(three_nights)["changes"] if c["cell"] == "c1")
    assert kinds == [("fixed", FILE), ("regressed", t("test_code"))]


def test_a_narrower_selection_says_nothing_of_the_tests_it_did_not_ask_for(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    night(db, 1, PASSING)
    night(db, 2, {t("test_gate"): ("pass", "")}, selection={"paths": ["tests"], "k": "gate", "m": ""})
    assert current(db) == {n: "pass" for n in PASSING} and marks(db) == []
    # a sweep of the whole folder again, where test_stable is gone: it leaves
    night(db, 3, {t("test_code"): ("pass", ""), t("test_gate"): ("pass", "")})
    assert marks(db) == [("night-3", t("test_stable"), "removed")]


def test_scenarios_beside_the_suite_and_cells_the_run_did_not_sweep_keep_their_outcomes(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    night(db, 1, {**PASSING, "gemma4_lora_inner_linear": ("pass", "")}, collected=list(PASSING), cells=("c1", "c2"))
    night(db, 2, {t("test_code"): ("pass", "")}, cells=("c1",))  # the scenario not run; c2 not swept
    assert current(db) == {t("test_code"): "pass", "gemma4_lora_inner_linear": "pass"}
    assert current(db, "c2") == {**{n: "pass" for n in PASSING}, "gemma4_lora_inner_linear": "pass"}


def test_a_cell_whose_env_did_not_build_keeps_its_tests_and_its_failure_leaves_once_it_builds(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    night(db, 1, PASSING)
    night(db, 2, {"pytest": ("install_failed", "install_failed: no wheel")}, env="install_failed")
    assert current(db) == {**{n: "pass" for n in PASSING}, "pytest": "install_failed"}  # no collection: nothing left
    night(db, 3, PASSING)
    assert current(db) == {n: "pass" for n in PASSING} and ("night-3", "pytest", "collected") in marks(db)


def test_a_worker_that_died_before_it_collected_keeps_every_test_from_running(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    night(db, 1, PASSING)
    night(db, 2, {"tests": ("crash", "crash: worker")}, errors={"tests": "crash: worker"})
    assert current(db) == {"tests": "crash"} and {m[2] for m in marks(db)} == {"not_run"}
    assert changes(db)["changes"][0]["tests_not_run"] == sorted(PASSING)


def test_a_test_collected_again_is_current_again_and_a_rerun_of_a_run_does_not_count_its_marks_as_done(three_nights: Path) -> None:
    with Store(three_nights, read_only=True) as store:
        assert store.done_keys("night-2") == {("c1", FILE, 0), ("c2", FILE, 0)}  # the marks are no outcome of night 2
    night(three_nights, 3, PASSING)
    assert current(three_nights) == {n: "pass" for n in PASSING}
    with Store(three_nights, read_only=True) as store:
        assert queries.duplicate_key_count(store) == 0 and queries.outcome_count(store, "night-2") == 2


def test_shards_and_a_merge_of_files_that_began_empty_agree(tmp_path: Path) -> None:
    """Each night in a file of its own (a Slurm task's, begun empty), merged into the nightly file:
    the merge settles the whole file, so the first night's tests leave as they would in one file."""
    one = tmp_path / "one.duckdb"
    night(one, 1, PASSING)
    night(one, 2, {FILE: ("error", ERROR)}, errors={FILE: ERROR})
    first, second, merged = tmp_path / "first.duckdb", tmp_path / "second.duckdb", tmp_path / "merged.duckdb"
    night(first, 1, PASSING)
    night(second, 2, {FILE: ("error", ERROR)}, errors={FILE: ERROR})
    with Store(merged) as store:
        store.merge_database(first)
        store.merge_database(second)
    assert current(merged) == current(one) == {FILE: "error"} and marks(merged) == marks(one)


def test_a_json_lines_shard_carries_its_collections_into_the_merge(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    night(db, 1, PASSING)
    shard = tmp_path / "shard.jsonl"
    from harness.storage.shardfile import ShardStore

    with ShardStore(shard) as store:
        store.ensure_run("night-2", "m.toml", "", {"tests": {"root": ".", **SUITE}}, "0.1.0", CPU)
        store.record_cell(CellRecord("night-2", "c1", "3.11", {"packaging": "c1"}, [], {}, {}, {}, "ready", "", 1.0, False))
        store.record_collection(Collection("night-2", "c1", SUITE, [t("test_code")]))
        store.add_outcome(Outcome("night-2", "c1", t("test_code"), 0, Status.PASS))
    lines = [json.loads(line) for line in shard.read_text().splitlines()]
    for line in lines:
        if line["type"] == "run":
            line["started_at"] = (START + timedelta(days=2)).isoformat()
    with Store(db) as store:
        store.merge_records(lines)
    assert current(db) == {t("test_code"): "pass"}
    assert current(db, "c2") == {n: "pass" for n in PASSING}  # the shard did not sweep c2


# -- a file an older harness wrote: its stale rows read right after the upgrade ---------------------
def test_an_older_files_stale_rows_leave_when_a_writer_opens_it(tmp_path: Path) -> None:
    """The issue's nights in a file of the harness before the collections (no table, no marks): the
    first writer's migration reads from the rows which tests each sweep did not run."""
    new, old = tmp_path / "new.duckdb", tmp_path / "old.duckdb"
    for db, record in ((new, True), (old, False)):
        night(db, 1, PASSING, record=record)
        night(db, 2, {FILE: ("error", ERROR)}, errors={FILE: ERROR}, record=record)
        night(db, 3, {t("test_code"): ("pass", ""), t("test_gate"): ("pass", "")}, record=record)
    with duckdb.connect(str(old)) as con:  # as the harness before wrote it: no collections
        con.execute("DROP TABLE collections; DROP TABLE collected; DELETE FROM schema_migrations WHERE name = '0011_collections'")
    assert current(old) == {FILE: "error", **{n: "pass" for n in PASSING}}  # stale: the error and test_stable beside the two that ran
    with Store(old) as store:  # any writer: a sweep, a merge, `harness compact`
        store.migrate()
        assert "0011_collections" in store.applied_migrations()
    assert current(old) == current(new) == {t("test_code"): "pass", t("test_gate"): "pass"}
    # the marks the rows can tell: test_stable not run under the error on night 2, gone on night 3; test_code and
    # test_gate ran on nights 1 and 3 with one outcome, which the history kept as one span (night 2 cannot be seen)
    assert marks(old) == [
        ("night-2", t("test_stable"), "not_run"),
        ("night-3", FILE, "collected"),
        ("night-3", t("test_stable"), "removed"),
    ]


# -- pure: which selection covers which, and the classes of a change with marks ----------------------
COVERS = [
    # (new, old, covers): why
    (Selection(("tests",)), Selection(("tests",)), True),  # the same
    (Selection(("tests/",)), Selection(("tests/unit", "tests/test_a.py::test_x")), True),  # a folder holds its files and tests
    (Selection(("tests/unit",)), Selection(("tests",)), False),  # narrower: the rest of tests/ was not asked for
    (Selection(("tests",), keyword="lora"), Selection(("tests",)), False),  # a -k the old run did not have
    (Selection(("tests",)), Selection(("tests",), keyword="lora"), True),  # no -k selects what -k lora did
    (Selection(("tests",), marker="not gpu"), Selection(("tests",), marker="not gpu"), True),
    (Selection(("tests",), marker="not gpu"), Selection(("tests",), marker="not slow"), False),
    (Selection(), Selection(("tests",)), False),  # pytest's default paths: what they hold, the configuration says
    (Selection((".",)), Selection(("tests",)), True),  # the root holds everything
    (Selection(("tests/test_a.py",)), Selection(("tests/test_ab.py",)), False),  # a prefix of a name is not a folder
]


@pytest.mark.parametrize(("new", "old", "expected"), COVERS)
def test_covers(new: Selection, old: Selection, expected: bool) -> None:
    assert covers(new, old) is expected


T = [datetime(2026, 11, d) for d in range(20, 27)]
SAME = lambda run, cell, node: Depends("env", "file", run)  # noqa: E731


def _s(node: str, status: str, first: int, last: int, signature: str = "", reason: str = "") -> Span:
    return Span("m", "c", node, node, 0, status, signature, f"r{first}", f"r{last}", T[first], T[last], reason)


A, F = "f.py::a", "f.py"
GONE, NOT_RUN, AGAIN = {"reason": "removed"}, {"signature": "E", "reason": "not_run"}, {"reason": "collected"}
MARKED = [
    # (spans, since, kinds): why
    ([_s(A, "pass", 0, 1), _s(A, NOT_COLLECTED, 2, 2, **GONE)], 1, ["removed"]),  # deleted
    ([_s(A, "pass", 0, 1), _s(A, NOT_COLLECTED, 2, 2, **GONE)], 2, []),  # deleted before the moment
    ([_s(A, "pass", 0, 1), _s(A, NOT_COLLECTED, 2, 2, **NOT_RUN), _s(A, "pass", 3, 3)], 2, []),  # back as it was
    ([_s(A, "pass", 0, 1), _s(A, NOT_COLLECTED, 2, 2, **NOT_RUN), _s(A, "fail", 3, 3, "F")], 2, ["regressed"]),  # since it last ran
    ([_s(A, "pass", 0, 1), _s(A, NOT_COLLECTED, 2, 2, **GONE), _s(A, "pass", 3, 3)], 2, ["new"]),  # re-added
    ([_s(F, "error", 1, 1, "E"), _s(F, NOT_COLLECTED, 2, 2, **AGAIN)], 1, ["fixed"]),  # imports again
    ([_s(F, "error", 1, 1, "E"), _s(F, NOT_COLLECTED, 2, 2, **AGAIN), _s(F, "error", 3, 3, "E")], 2, ["regressed"]),  # and fails again
    ([_s(A, "fail", 0, 1, "F"), _s(A, NOT_COLLECTED, 2, 2, **GONE)], 1, ["removed"]),  # a failing test removed: no fix
    # not run then (its file failed), removed now: the file imported without it
    ([_s(A, "pass", 0, 0), _s(A, NOT_COLLECTED, 1, 1, **NOT_RUN), _s(A, NOT_COLLECTED, 2, 2, **GONE)], 1, ["removed"]),
]


@pytest.mark.parametrize(("spans", "since", "kinds"), MARKED)
def test_compare_with_marks(spans: list[Span], since: int, kinds: list[str]) -> None:
    assert [c.kind for c in compare(spans, T[since], SAME).items] == kinds


def test_a_file_that_stops_importing_carries_its_tests_and_a_cell_is_new_only_if_no_run_built_it() -> None:
    spans = [
        _s("f.py::a", "pass", 0, 1),
        _s("f.py::a", NOT_COLLECTED, 2, 2, "E", "not_run"),
        _s("f.py::b", "pass", 0, 1),
        _s("f.py::b", NOT_COLLECTED, 2, 2, "E", "not_run"),
        _s("f.py", "error", 2, 2, "E"),
    ]
    found = compare(spans, T[1], SAME, known_cells=[("m", "c")])
    assert [(c.kind, c.test, c.not_run) for c in found.items] == [("regressed", "f.py", ("f.py::a", "f.py::b"))]
    assert found.items[0].before_run == "r1"  # the run that last ran its tests: what moved since is read against it
    assert found.new_cells == () and found.headline() == "+1 failing (2 tests not run), −0 fixed, 0 flaky"
    assert compare(spans, T[1], SAME, known_cells=[]).new_cells == (("m", "c"),)
