"""`harness attribute` over a real DuckDB file: the thread's `_is_hf_initialized` failure, fixed in accelerate 1.14.0."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage import attributed, queries
from harness.storage.store import MIGRATIONS, Store
from tests.conftest import run_cli

SCENARIO = "gemma4_peft_split_4bit_load"
OTHER_SCENARIO = "gemma4_lora_broad_targets"
SIG = (
    "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
    " @ accelerate/utils/modeling.py:set_module_tensor_to_device"
)
R1, R2 = "r-0000000001", "r-0000000002"
HELD = "torch 2.13.0, transformers {tf}, peft 0.19.1, bitsandbytes 0.49.2"
CPU = "cpu · linux-x86_64 · Python 3.11"
#: what the index listed for the runs, as a sweep stores it: 1.14.0 lies between 1.13.0 and 1.15.0
RELEASES = {
    "accelerate": [("1.13.0", None), ("1.14.0", None), ("1.15.0", None)],
    "transformers": [("5.4.0", None), ("5.6.2", None), ("5.23.0", None)],
}


def versions(tf: str, acc: str) -> dict[str, str]:
    return {"torch": "2.13.0", "transformers": tf, "accelerate": acc, "peft": "0.19.1", "bitsandbytes": "0.49.2"}


def cell_id(tf: str, acc: str) -> str:
    return f"torch2.13.0-tf{tf}-acc{acc}-peft0.19.1-bnb0.49.2"


def store_cell(store: Store, run: str, tf: str, acc: str, statuses: list[Status], scenario: str = SCENARIO) -> None:
    v = versions(tf, acc)
    freeze = {**v, "torch": "2.13.0+cpu", "safetensors": "0.6.2"}
    store.record_cell(
        CellRecord(run, cell_id(tf, acc), "3.11", v, [f"{k}=={x}" for k, x in v.items()], freeze, {}, {}, "ready", "", 9.0, False)
    )
    for repeat, status in enumerate(statuses):
        failing = status == Status.ERROR
        store.add_outcome(
            Outcome(
                run,
                cell_id(tf, acc),
                scenario,
                repeat,
                status,
                message="TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'" if failing else "",
                signature=SIG if failing else "",
                signature_family="3f2a9c1d0b7e" if failing else "",
                blamed_library="accelerate" if failing else "",
                exception_type="TypeError" if failing else "",
                started_at="2026-04-26T10:00:00",
            )
        )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Run 1: accelerate 1.13.0 fails, 1.14.0 and 1.15.0 pass, with transformers 5.6.2 and 5.23.0;
    Gemma 4 is not applicable on transformers 5.4.0. Run 2: 1.14.0 with 5.6.2 failed once more."""
    path = tmp_path / "compat.duckdb"
    with Store(path) as store:
        store.ensure_run(R1, "matrix.toml", "[axes]", {}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu"})
        store.ensure_run(R2, "matrix.toml", "[axes]", {}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu"})
        for tf in ("5.6.2", "5.23.0"):
            store_cell(store, R1, tf, "1.13.0", [Status.ERROR, Status.ERROR])
            store_cell(store, R1, tf, "1.14.0", [Status.PASS, Status.PASS])
            store_cell(store, R1, tf, "1.15.0", [Status.PASS, Status.PASS])
        store_cell(store, R1, "5.4.0", "1.13.0", [Status.NOT_APPLICABLE])
        store_cell(store, R1, "5.4.0", "1.15.0", [Status.NOT_APPLICABLE])
        store_cell(store, R1, "5.6.2", "1.13.0", [Status.PASS], scenario=OTHER_SCENARIO)
        store_cell(store, R2, "5.6.2", "1.14.0", [Status.ERROR])
        store.record_releases(R1, RELEASES)
    return path


def stored(db: Path) -> list[dict[str, object]]:
    with Store(db, read_only=True) as store:
        return attributed.transitions(store)


def test_attribute_one_run_prints_and_stores_the_fix(db: Path) -> None:
    proc = run_cli("attribute", "--db", str(db), "--run-id", R1, "--offline")
    assert proc.returncode == 0, proc.stderr
    assert "transitions" in proc.stdout and "fixed in accelerate 1.14.0 (after 1.13.0)" in proc.stdout
    assert "2 transition(s) (2 exact, 0 range(s)), 0 machine difference(s), 0 flaky cell(s)" in proc.stdout
    rows = stored(db)
    assert [(r["scope"], r["scenario"], r["axis"], r["kind"], r["before"], r["after"]) for r in rows] == [
        (R1, SCENARIO, "accelerate", "fixed", "1.13.0", "1.14.0"),
        (R1, SCENARIO, "accelerate", "fixed", "1.13.0", "1.14.0"),
    ]
    # one per transformers line, each holding the other axes; not_applicable on 5.4.0 is no fix
    assert [r["held"] for r in rows] == [
        {"torch": "2.13.0", "transformers": "5.6.2", "peft": "0.19.1", "bitsandbytes": "0.49.2"},
        {"torch": "2.13.0", "transformers": "5.23.0", "peft": "0.19.1", "bitsandbytes": "0.49.2"},
    ]
    assert rows[0]["signature"] == SIG and rows[0]["signature_family"] == "3f2a9c1d0b7e"
    assert (rows[0]["before_cell"], rows[0]["after_cell"], rows[0]["runs"]) == (
        cell_id("5.6.2", "1.13.0"),
        cell_id("5.6.2", "1.14.0"),
        [R1],
    )


def test_attribute_json_over_all_runs_answers_from_the_current_state(db: Path) -> None:
    # Run 2 ran (transformers 5.6.2, accelerate 1.14.0) again, and it failed: that is the current
    # state there, run 1's two passes are history. The runs recorded nothing of what their outcomes
    # depend on, so nothing proves the flip flaky: the answers are the current state's.
    proc = run_cli("attribute", "--db", str(db), "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["description"] for r in records if r["kind"] == "fixed"] == [
        f"fixed in transformers 5.23.0 (after 5.6.2) — with torch 2.13.0, accelerate 1.14.0, peft 0.19.1, bitsandbytes 0.49.2 on {CPU}",
        f"fixed in accelerate 1.15.0 (after 1.14.0) — with {HELD.format(tf='5.6.2')} on {CPU}",
        f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD.format(tf='5.23.0')} on {CPU}",
    ]
    assert not [r for r in records if r["kind"] == "flaky"]
    rows = stored(db)
    assert [r["description"] for r in rows] == [r["description"] for r in records if r["kind"] != "requirement"]
    assert {r["scope"] for r in rows} == {""}


def test_a_flip_across_runs_with_nothing_changed_is_a_flaky_cell(tmp_path: Path) -> None:
    # The same two runs, recording the same inputs: run 2's failure of (5.6.2, 1.14.0) flipped with
    # nothing changed. That cell says nothing about the fix: the 5.6.2 line's answer is a range.
    path = tmp_path / "compat.duckdb"
    inputs = {"inputs": {"scenarios": {SCENARIO: "d1", OTHER_SCENARIO: "d2"}, "paths": {}}}
    with Store(path) as store:
        store.ensure_run(R1, "matrix.toml", "[axes]", inputs, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu"})
        for tf in ("5.6.2", "5.23.0"):
            store_cell(store, R1, tf, "1.13.0", [Status.ERROR, Status.ERROR])
            store_cell(store, R1, tf, "1.14.0", [Status.PASS, Status.PASS])
            store_cell(store, R1, tf, "1.15.0", [Status.PASS, Status.PASS])
        store.record_releases(R1, RELEASES)
    with Store(path) as store:  # the next night, after the first was folded
        store.ensure_run(R2, "matrix.toml", "[axes]", inputs, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu"})
        store_cell(store, R2, "5.6.2", "1.14.0", [Status.ERROR, Status.ERROR])
    proc = run_cli("attribute", "--db", str(path), "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["description"] for r in records if r["kind"] == "fixed"] == [
        "fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); inconclusive: 1.14.0 (flaky across runs)"
        f" — with {HELD.format(tf='5.6.2')} on {CPU}",
        f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD.format(tf='5.23.0')} on {CPU}",
    ]
    (flaky,) = [r for r in records if r["kind"] == "flaky"]
    assert (flaky["cell_id"], flaky["runs"]) == (cell_id("5.6.2", "1.14.0"), [R2])


def test_an_axis_whose_releases_were_never_listed_gives_only_ranges(tmp_path: Path, db: Path) -> None:
    # a file with no list of the index's releases, read offline: nothing can be said to lie
    # between 1.13.0 and 1.14.0, so "fixed in 1.14.0" would claim more than is known
    with Store(db) as store:
        store.con.execute("DELETE FROM releases")
    proc = run_cli("attribute", "--db", str(db), "--run-id", R1, "--offline")
    assert proc.returncode == 0, proc.stderr
    assert "fixed in accelerate" not in proc.stdout
    assert "the index's releases of accelerate, transformers could not be listed: changes along them are ranges" in proc.stdout
    assert [r["untested"] for r in stored(db)] == [["any release between (the index's releases were not listed)"]] * 2


def test_summary_of_a_file_that_never_listed_releases_prints_ranges(db: Path) -> None:
    # What an offline GPU runner's sweep (no_index) leaves: outcomes, no list of releases. The
    # summary, and the sweep's own closing print, printed "fixed in accelerate 1.14.0" there.
    listed = run_cli("summary", "--db", str(db), "--run-id", R1)
    assert listed.returncode == 0, listed.stderr
    assert "fixed in accelerate 1.14.0 (after 1.13.0)" in listed.stdout  # listed: exact
    with Store(db) as store:
        store.con.execute("DELETE FROM releases")
    proc = run_cli("summary", "--db", str(db), "--run-id", R1)
    assert proc.returncode == 0, proc.stderr
    assert "fixed in accelerate" not in proc.stdout
    flat = " ".join(proc.stdout.split())
    assert "fixed between accelerate 1.13.0 (fails) and 1.14.0 (passes); not built: any release between" in flat


def test_attribute_online_takes_the_index_list(db: Path) -> None:
    # without --offline the index is asked (PyPI here): its accelerate list has 1.14.0 between
    with Store(db) as store:
        store.con.execute("DELETE FROM releases")
    proc = run_cli("attribute", "--db", str(db), "--run-id", R1)
    assert proc.returncode == 0, proc.stderr
    assert "fixed in accelerate 1.14.0 (after 1.13.0)" in proc.stdout
    with Store(db, read_only=True) as store:
        assert "1.14.0" in queries.known_releases(store)["accelerate"]


def test_attribute_replaces_only_its_own_scope_and_scenarios(db: Path) -> None:
    assert run_cli("attribute", "--db", str(db), "--offline").returncode == 0
    assert run_cli("attribute", "--db", str(db), "--run-id", R1, "--offline").returncode == 0
    before = stored(db)
    assert len(before) == 5  # 2 + 1 flaky for all runs, 2 for run 1
    # a rerun replaces, never appends; another scenario's rerun leaves these rows alone
    assert run_cli("attribute", "--db", str(db), "--offline").returncode == 0
    proc = run_cli("attribute", "--db", str(db), "--scenario", OTHER_SCENARIO, "--offline")
    assert proc.returncode == 0, proc.stderr
    assert "no transitions" in proc.stdout
    after = stored(db)
    assert [(r["scope"], r["description"]) for r in after] == [(r["scope"], r["description"]) for r in before]


#: (extra arguments, fragments of the one-line error); each is bad input: exit 2
BAD = [
    # a run id that is not in the file
    pytest.param(["--run-id", "r-nope"], ["no outcomes", "'r-nope'", "harness summary"], id="unknown-run"),
    # a scenario with no stored outcomes names the stored ones
    pytest.param(["--scenario", "nope"], ["'nope'", SCENARIO], id="unknown-scenario"),
]


@pytest.mark.parametrize(("extra", "fragments"), BAD)
def test_attribute_bad_input(db: Path, extra: list[str], fragments: list[str]) -> None:
    proc = run_cli("attribute", "--db", str(db), *extra)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert stored(db) == []


@pytest.mark.parametrize("name", ["absent.duckdb", "shard.jsonl"])
def test_attribute_missing_or_shard_db_is_bad_input(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("")
    proc = run_cli("attribute", "--db", str(path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "harness: error:" in proc.stderr and name in proc.stderr
    assert "merge" in proc.stderr if name.endswith(".jsonl") else "run a sweep first" in proc.stderr
    assert not (tmp_path / "absent.duckdb").exists()  # nothing created


def test_attribute_has_help() -> None:
    proc = run_cli("attribute", "--help")
    assert proc.returncode == 0
    assert "--run-id" in proc.stdout and "--json" in proc.stdout and "introduced" in proc.stdout


def test_a_file_from_before_attribution_reads_as_no_transitions(tmp_path: Path) -> None:
    # the dashboard opens files read-only; one written before migration 0003 has no table yet
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
    for name, sql in MIGRATIONS[:2]:
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, now())", [name])
    con.close()
    with Store(path, read_only=True) as store:
        assert attributed.transitions(store) == []
    with Store(path) as store:  # opening it for writing adds the table
        assert "0003_transitions" in store.applied_migrations()
        assert store.replace_transitions([{"scenario": "s", "signature": "x", "axis": "peft", "kind": "fixed", "held": {}}]) == 1
        assert [(r["scope"], r["kind"], r["held"]) for r in attributed.transitions(store)] == [("", "fixed", {})]
