"""A results file over many runs: the current state apart from the history, spans, and `harness changes`.

A hand-made history in a real DuckDB file, written through the harness's own writer (journal and
folds), three nights of a suite in two cells and a third cell on the last night:

    test      night 1 (code A)   night 2 (code B)   night 3 (code B, same envs)
    t_reg     pass               fail E2            fail E2      regressed on night 2 (the code changed)
    t_fix     fail E1            pass               pass         fixed on night 2
    t_flip    pass               pass               fail E3      flaky on night 3 (nothing changed)
    t_same    pass               pass               pass
    c3        -                  -                  all pass     a new cell on night 3
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from harness.analysis.changes import Depends, Span, compare, flaky_flips, state_at
from harness.analysis.knowngood import known_good_sets
from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage import history, queries
from harness.storage.store import Store

REPO = Path(__file__).resolve().parents[2]
CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": [], "python": "3.11.7"}
FILE = "tests/test_pkg.py"
NIGHTS = {  # night -> (code, {test: (status, signature)})
    1: ("code-A", {"t_reg": ("pass", ""), "t_fix": ("fail", "E1"), "t_flip": ("pass", ""), "t_same": ("pass", "")}),
    2: ("code-B", {"t_reg": ("fail", "E2"), "t_fix": ("pass", ""), "t_flip": ("pass", ""), "t_same": ("pass", "")}),
    3: ("code-B", {"t_reg": ("fail", "E2"), "t_fix": ("pass", ""), "t_flip": ("fail", "E3"), "t_same": ("pass", "")}),
}


def _cell(run: str, name: str, version: str) -> CellRecord:
    pins = {"packaging": version}
    return CellRecord(run, name, "3.11", pins, [f"packaging=={version}"], {**pins, "pytest": "9.0.1"}, {}, {}, "ready", "", 1.0, False)


def write_night(store: Store, night: int, cells: dict[str, str], run: str = "") -> None:
    code, tests = NIGHTS[night]
    run = run or f"night-{night}"
    inputs = {"scenarios": {}, "tests": {"config": "conf-1", "files": {FILE: "file-1"}, "code": code}, "paths": {}}
    store.ensure_run(run, "m.toml", "", {"tests": {"root": "."}, "inputs": inputs}, "0.1.0", CPU)
    for name, version in cells.items():
        store.record_cell(_cell(run, name, version))
        for test, (status, signature) in tests.items():
            store.add_outcome(
                Outcome(
                    run,
                    name,
                    f"{FILE}::{test}",
                    0,
                    Status(status),
                    message=signature,
                    signature=signature,
                    seconds=float(night),
                    started_at=f"2026-11-2{night}T04:00:00",
                )
            )


def build(path: Path, nights: int = 3) -> Path:
    for night in range(1, nights + 1):
        cells = {"c1": "23.2", "c2": "24.0", **({"c3": "24.1"} if night == 3 else {})}
        with Store(path) as store:
            write_night(store, night, cells)
            store.con  # noqa: B018  (folds the journal: the next night's run starts later)
        with duckdb.connect(str(path)) as con:  # the nights' start times: a day apart
            con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [datetime(2026, 11, 19 + night, 4), f"night-{night}"])
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("history") / "results.duckdb")


def test_the_current_state_is_each_tests_newest_run_and_the_rest_is_spans(db: Path) -> None:
    with Store(db, read_only=True) as store:
        current = store.fetch("SELECT run_id, cell_id, scenario, status, first_run FROM outcomes ORDER BY cell_id, scenario")
        kept = store.fetch("SELECT run_id, cell_id, scenario, status, first_run FROM history ORDER BY cell_id, scenario, run_id")
        assert {r["run_id"] for r in current} == {"night-3"} and len(current) == 12  # 3 cells x 4 tests, each once
        spans = {r["scenario"].split("::")[1]: r["first_run"] for r in current if r["cell_id"] == "c1"}
        # an outcome that held since night 1 is one row that began then; one that changed began when it changed
        assert spans == {"t_same": "night-1", "t_fix": "night-2", "t_reg": "night-2", "t_flip": "night-3"}
        # history: what no longer holds, one row per span (its newest night), never a row per night
        assert [(r["cell_id"], r["scenario"].split("::")[1], r["run_id"], r["first_run"]) for r in kept if r["cell_id"] == "c1"] == [
            ("c1", "t_fix", "night-1", "night-1"),
            ("c1", "t_flip", "night-2", "night-1"),
            ("c1", "t_reg", "night-1", "night-1"),
        ]
        assert queries.duplicate_key_count(store) == 0
        # a span counts at its newest run: night 1's t_same and t_flip live on in later rows
        assert queries.outcome_count(store, "night-1") == 4 and queries.outcome_count(store, "night-3") == 12


def test_the_shard_balance_reads_the_seconds_before_the_run_being_swept(db: Path) -> None:
    with Store(db, read_only=True) as store:
        assert queries.durations(store)["c1"][f"{FILE}::t_same"] == 3.0  # the newest run's seconds
        # resuming night 3: its own rows give the seconds of the night before (night 2), whether merged or not
        before = queries.durations(store, "night-3")
        assert before["c1"][f"{FILE}::t_same"] == 2.0 and before["c1"][f"{FILE}::t_flip"] == 2.0
        assert "c3" not in before  # new on night 3: no seconds before it


def test_changes_since_the_night_before_are_a_flaky_flip_and_a_new_cell(db: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "harness", "changes", "--db", str(db), "--json"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["since"]["run_id"] == "night-2" and found["newest"]["run_id"] == "night-3"
    kinds = {(c["kind"], c["cell"], c["test"].split("::")[1]) for c in found["changes"] if c["kind"] != "new"}
    assert kinds == {("flaky", "c1", "t_flip"), ("flaky", "c2", "t_flip")}
    assert [c["cell"] for c in found["new_cells"]] == ["c3"]
    assert found["headline"].startswith("since night-2 (2026-11-21 04:00): +0 failing, −0 fixed, 1 flaky, 1 new cell")


def test_changes_since_the_first_night_class_each_change_by_what_changed(db: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness", "changes", "--db", str(db), "--since", "night-1", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    kinds = {(c["kind"], c["test"].split("::")[1]) for c in json.loads(out.stdout)["changes"] if c["cell"] == "c1"}
    # the code under test changed between nights 1 and 2: a regression and a fix of that code
    assert kinds == {("regressed", "t_reg"), ("fixed", "t_fix"), ("flaky", "t_flip")}
    text = subprocess.run(
        [sys.executable, "-m", "harness", "changes", "--db", str(db), "--since", "2026-11-21"], capture_output=True, text=True, cwd=REPO
    )
    lines = text.stdout.splitlines()
    assert lines[0] == "Changes since night-1 (2026-11-20 04:00): +1 failing, −1 fixed, 1 flaky, 1 new cell (newest run night-3)"
    assert "    tests/test_pkg.py::t_reg: E2, in 2 cell(s) (night-1 → night-2)" in lines and "    c3 (2 fail, 2 pass)" in lines, lines


@pytest.mark.parametrize(
    ("since", "words"),
    [
        ("night-9", "neither a run of this file nor a date"),  # a run the file does not hold
        ("2026-11-01", "no run started before it"),  # before the first run
    ],
)
def test_a_since_the_file_cannot_answer_is_bad_input(db: Path, since: str, words: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness", "changes", "--db", str(db), "--since", since], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 2 and words in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_a_flip_with_nothing_changed_is_flaky_evidence_for_the_known_good_set(db: Path) -> None:
    with Store(db, read_only=True) as store:
        flaky = queries.flaky_across_runs(store)
        # c3 is new on night 3: its t_flip failure has no history, it is just a failure
        assert set(flaky) == {("night-3", "c1", f"{FILE}::t_flip"), ("night-3", "c2", f"{FILE}::t_flip")}
        why = "flaky across runs: passed in night-2, failed in night-3 (E3) with nothing changed"
        assert flaky[("night-3", "c1", f"{FILE}::t_flip")] == ("E3", why)
        rows = queries.outcome_rows(store)
    marked = {(r["cell_id"], r["scenario"]) for r in rows if r.get("flaky_across")}
    assert marked == {("c1", f"{FILE}::t_flip"), ("c2", f"{FILE}::t_flip")}
    # The known-good set does not count a flaky test as passing: rows of c1 and c2 where t_flip
    # passes now, as it will on a night it flips back, but is marked flaky across runs.
    passing = [dict(r, status="pass", signature="") if r["scenario"].endswith("t_flip") else r for r in rows if r["cell_id"] != "c3"]
    kept = known_good_sets(passing)[0].kept
    assert f"{FILE}::t_same" in kept and f"{FILE}::t_flip" not in kept
    unmarked = [{k: v for k, v in r.items() if k != "flaky_across"} for r in passing]
    assert f"{FILE}::t_flip" in known_good_sets(unmarked)[0].kept  # the mark alone keeps it out


def test_one_run_and_many_identical_runs_give_the_same_answers_and_counts(tmp_path: Path) -> None:
    # paths of one length: the header fits the width, and a longer path would wrap it otherwise
    once, thrice = tmp_path / "one" / "r.duckdb", tmp_path / "six" / "r.duckdb"
    once.parent.mkdir(), thrice.parent.mkdir()
    for path, runs in ((once, ("night-3",)), (thrice, ("older-0", "older-1", "night-3"))):
        for i, run in enumerate(runs):  # every night the same outcomes, under its own run id, a day apart
            with Store(path) as store:
                write_night(store, 3, {"c1": "23.2", "c2": "24.0"}, run)
                store.con  # noqa: B018
            with duckdb.connect(str(path)) as con:
                con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [datetime(2026, 11, 23 - len(runs) + i, 4), run])
    summary = [
        subprocess.run(
            [sys.executable, "-m", "harness", "summary", "--db", str(p)], capture_output=True, text=True, cwd=REPO, env={"COLUMNS": "120"}
        )
        for p in (once, thrice)
    ]
    assert all(s.returncode == 0 for s in summary), summary[1].stderr
    one, many = (s.stdout.replace(str(p), "FILE").splitlines() for s, p in zip(summary, (once, thrice)))
    assert many[1] == "History: 3 runs, 2026-11-20 to 2026-11-22 (`harness changes` for what changed)"
    assert many[0].startswith("Changes since older-1") and "+0 failing, −0 fixed, 0 flaky" in many[0]
    assert many[2:] == one, "\n".join(many)  # the same answers and counts (8 outcomes, not 24), byte for byte
    assert "fail: 4  pass: 4" in one  # the current state's counts: one night, never the sum of three
    with Store(thrice, read_only=True) as store:  # the dashboard's data line: every stored night, its span
        seen = queries.overview(store)
    assert (seen["outcomes"], seen["runs"], str(seen["first"])[:10], str(seen["last"])[:10]) == (8, 3, "2026-11-20", "2026-11-22")
    same = subprocess.run(
        [sys.executable, "scripts/same_answers.py", "--against", str(once), str(thrice)], capture_output=True, text=True, cwd=REPO
    )
    assert same.returncode == 0 and "same" in same.stdout, same.stdout + same.stderr


# -- pure: spans and their classes ---------------------------------------------------------------
T = [datetime(2026, 11, d) for d in range(20, 26)]


def _span(status: str, first: int, last: int, repeat: int = 0, signature: str = "") -> Span:
    return Span(
        "m", "c", "t", "t", repeat, status, signature or ("E" if status != "pass" else ""), f"r{first}", f"r{last}", T[first], T[last]
    )


SAME = lambda run, cell, node: Depends("env", "file", "code")  # noqa: E731
CHANGED = lambda run, cell, node: Depends("env", "file", run)  # noqa: E731
UNKNOWN = lambda run, cell, node: None  # noqa: E731
CASES = [
    # (spans, since, depends, kinds): why
    ([_span("pass", 0, 1), _span("fail", 2, 3)], 1, CHANGED, ["regressed"]),  # the code changed between r1 and r2
    ([_span("pass", 0, 1), _span("fail", 2, 3)], 1, SAME, ["flaky"]),  # nothing changed: flaky, never a regression
    ([_span("pass", 0, 1), _span("fail", 2, 3)], 1, UNKNOWN, ["regressed"]),  # runs that recorded nothing: not proven flaky
    ([_span("fail", 0, 1), _span("pass", 2, 3)], 1, CHANGED, ["fixed"]),
    ([_span("pass", 0, 1), _span("fail", 2, 2), _span("pass", 3, 3)], 1, CHANGED, []),  # failed and came back: the same state
    ([_span("pass", 0, 3)], 1, CHANGED, []),  # one span: nothing changed
    ([_span("pass", 2, 3)], 1, CHANGED, ["new"]),  # not run before: new
    ([_span("pass", 0, 1), _span("not_applicable", 2, 3)], 1, CHANGED, []),  # says nothing now: no change
    ([_span("fail", 0, 1, signature="A"), _span("fail", 2, 3, signature="B")], 1, CHANGED, ["regressed"]),  # fails otherwise now
    ([_span("pass", 0, 3, 0), _span("pass", 0, 1, 1), _span("fail", 2, 3, 1)], 1, CHANGED, ["regressed"]),  # one repeat of two
]


@pytest.mark.parametrize(("spans", "since", "depends", "kinds"), CASES)
def test_compare(spans: list[Span], since: int, depends: object, kinds: list[str]) -> None:
    assert [c.kind for c in compare(spans, T[since], depends).items] == kinds  # type: ignore[arg-type]


def test_state_at_a_moment_between_spans_carries_the_last_one() -> None:
    spans = [_span("pass", 0, 1), _span("fail", 4, 5)]
    assert [s.status for s in state_at(spans, T[2])] == ["pass"]  # not run on the 22nd: the last state holds
    assert [s.status for s in state_at(spans, T[4])] == ["fail"] and state_at(spans, datetime(2026, 1, 1)) == []


def test_flaky_flips_need_every_dependency_the_same() -> None:
    spans = [_span("pass", 0, 1), _span("fail", 2, 3)]
    assert flaky_flips(spans, SAME) and not flaky_flips(spans, CHANGED) and not flaky_flips(spans, UNKNOWN)
    assert not flaky_flips([_span("fail", 0, 1, signature="A"), _span("fail", 2, 3, signature="B")], SAME)  # two failures: no flip


def test_depth_says_how_many_runs_and_when(db: Path) -> None:
    with Store(db, read_only=True) as store:
        found = history.depth(store)
    assert found.describe() == "3 runs, 2026-11-20 to 2026-11-22" and found.kept == 6


# -- a file an older harness wrote ---------------------------------------------------------------
def _legacy(path: Path, runs: int) -> Path:
    """A file as the harness before the split wrote it (migrations up to 0009): every run's rows in
    `outcomes`, the same outcomes each night."""
    from harness.storage.store_rows import Rows, insert_many
    from harness.storage.store_schema import CELL_COLUMNS, MIGRATIONS, OUTCOME_COLUMNS, RUN_COLUMNS

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
    for name, sql in MIGRATIONS[:9]:
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, now())", [name])
    records: list[dict] = []
    for night in range(runs):
        run = f"old-{night}"
        records.append({"type": "run", "run_id": run, "started_at": f"2026-11-{10 + night}T04:00:00", "host": CPU, "settings": {}})
        records.append({"type": "cell", **_cell(run, "c1", "23.2").__dict__, "freeze": {"packaging": "23.2"}})
        for test, (status, signature) in NIGHTS[3][1].items():
            records.append(
                {
                    "type": "outcome",
                    "run_id": run,
                    "cell_id": "c1",
                    "scenario": f"{FILE}::{test}",
                    "repeat": 0,
                    "status": status,
                    "signature": signature,
                }
            )
    rows = Rows.of(records)
    insert_many(con, "runs", RUN_COLUMNS, rows.runs.values())
    insert_many(con, "cells", CELL_COLUMNS, rows.cells.values())
    insert_many(con, "outcomes", OUTCOME_COLUMNS[:-2], [r[:-2] for r in rows.outcomes.values()])
    con.close()
    return path


def test_a_file_from_before_the_split_reads_as_it_did_until_compact_splits_it(tmp_path: Path) -> None:
    db = _legacy(tmp_path / "old.duckdb", 3)
    said = subprocess.run([sys.executable, "-m", "harness", "summary", "--db", str(db)], capture_output=True, text=True, cwd=REPO)
    assert said.returncode == 0, said.stderr
    head = " ".join(said.stdout.split("\n\n")[0].split())  # the lines before the first blank one, unwrapped
    assert head.startswith("History: 3 runs") and "`harness compact --db" in head, head
    assert "fail: 6  pass: 6" in said.stdout  # every night folded, as the harness before the split answered
    changes = subprocess.run([sys.executable, "-m", "harness", "changes", "--db", str(db)], capture_output=True, text=True, cwd=REPO)
    assert changes.returncode == 2 and "harness compact --db" in changes.stderr
    done = subprocess.run([sys.executable, "-m", "harness", "compact", "--db", str(db)], capture_output=True, text=True, cwd=REPO)
    assert (
        done.returncode == 0
        and "applied 0010_history, 0011_collections, 0012_causes; 4 current outcome(s), 0 history row(s)" in done.stdout
    ), done.stdout + done.stderr
    with Store(db, read_only=True) as store:
        assert {r["run_id"] for r in store.fetch("SELECT run_id FROM outcomes")} == {
            "old-2"
        }  # the newest night, its spans begun on the first
        assert {r["first_run"] for r in store.fetch("SELECT first_run FROM outcomes")} == {"old-0"}
    said = subprocess.run([sys.executable, "-m", "harness", "summary", "--db", str(db)], capture_output=True, text=True, cwd=REPO)
    assert "fail: 2  pass: 2" in said.stdout and said.stdout.startswith("Changes since old-1"), said.stdout
    again = subprocess.run([sys.executable, "-m", "harness", "compact", "--db", str(db)], capture_output=True, text=True, cwd=REPO)
    assert again.returncode == 0 and "already up to date; 4 current outcome(s)" in again.stdout


def test_compact_refuses_a_file_it_cannot_compact(tmp_path: Path) -> None:
    shard = tmp_path / "shard.jsonl"
    shard.write_text("")
    for path in (tmp_path / "missing.duckdb", shard):
        out = subprocess.run([sys.executable, "-m", "harness", "compact", "--db", str(path)], capture_output=True, text=True, cwd=REPO)
        assert out.returncode == 2 and str(path) in out.stderr and out.stderr.count("\n") == 1, out.stderr
