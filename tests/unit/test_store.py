"""store.py against real DuckDB files: migrations, append-only outcomes, the outcomes_v view, bad paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.outcome import Outcome, Status
from harness.errors import EXIT_BAD_INPUT, StoreError
from harness.storage import queries
from harness.storage.store import MIGRATIONS, CellRecord, Store

RUN = "r-0123456789"
CELL_A = "torch2.13.0-tf5.6.2-acc1.13.0-peft0.19.1-bnb0.49.2"
CELL_B = "torch2.13.0-tf-git-main-acc1.15.0-peft0.21.2-bnb0.49.2"
TF_GIT = "git+https://github.com/huggingface/transformers@0123456789abcdef0123456789abcdef01234567"


def outcome(
    cell: str = CELL_A, scenario: str = "lora", repeat: int = 0, status: Status = Status.PASS, run: str = RUN, **extra: object
) -> Outcome:
    return Outcome(run, cell, scenario, repeat, status, started_at="2026-04-24T10:00:00", **extra)  # type: ignore[arg-type]


def cell_record(cell: str, versions: dict[str, str], freeze: dict[str, str], run: str = RUN) -> CellRecord:
    return CellRecord(run, cell, "3.11", versions, [f"{k}=={v}" for k, v in versions.items()], freeze, {}, {}, "ready", "", 12.0, False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.duckdb"


def test_migrations_applied_once_and_recorded(db: Path) -> None:
    with Store(db) as store:
        assert store.applied_migrations() == [name for name, _ in MIGRATIONS]
        first = store.con.execute("SELECT name, applied_at FROM schema_migrations ORDER BY name").fetchall()
        assert store.migrate() == []
    with Store(db) as store:
        assert store.migrate() == []
        assert store.con.execute("SELECT name, applied_at FROM schema_migrations ORDER BY name").fetchall() == first
        assert queries.row_count(store, "outcomes") == 0


def test_migrate_applies_only_the_missing_ones(db: Path) -> None:
    with Store(db) as store:
        store.con.execute("DELETE FROM schema_migrations WHERE name = ?", [MIGRATIONS[-1][0]])
        assert store.migrate() == [MIGRATIONS[-1][0]]
        assert store.applied_migrations() == [name for name, _ in MIGRATIONS]


def test_add_outcome_is_append_only(db: Path) -> None:
    with Store(db) as store:
        assert store.add_outcome(outcome(status=Status.FAIL, message="first")) is True
        assert store.add_outcome(outcome(status=Status.PASS, message="second")) is False
        rows = store.con.execute("SELECT status, message FROM outcomes").fetchall()
        assert rows == [("fail", "first")]
        assert store.add_outcome(outcome(repeat=1)) is True  # another key is another row
        assert queries.row_count(store, "outcomes") == 2
        assert queries.duplicate_key_count(store) == 0


def test_outcomes_survive_reopening(db: Path) -> None:
    with Store(db) as store:
        store.add_outcome(outcome(metrics={"max_abs_logit_diff": 0.0132}))
    with Store(db, read_only=True) as store:
        rows = queries.outcome_rows(store, RUN)
        assert len(rows) == 1 and rows[0]["status"] == "pass"
        assert store.con.execute("SELECT metrics->>'max_abs_logit_diff' FROM outcomes").fetchone() == ("0.0132",)


def test_done_keys_for_one_run(db: Path) -> None:
    with Store(db) as store:
        store.add_outcome(outcome(scenario="lora", repeat=0))
        store.add_outcome(outcome(scenario="lora", repeat=1))
        store.add_outcome(outcome(cell=CELL_B, scenario="merge"))
        store.add_outcome(outcome(run="r-other", scenario="other"))
        assert store.done_keys(RUN) == {(CELL_A, "lora", 0), (CELL_A, "lora", 1), (CELL_B, "merge", 0)}
        assert store.done_keys("r-none") == set()


def test_outcomes_view_takes_axes_from_the_freeze(db: Path) -> None:
    versions_a = {"torch": "2.13.0", "transformers": "5.6.2", "accelerate": "1.13.0", "peft": "0.19.1", "bitsandbytes": "0.49.2"}
    # accelerate is missing from the freeze: the view falls back to the requested version
    freeze_a = {"torch": "2.13.0+cpu", "transformers": "5.6.2", "peft": "0.19.1", "bitsandbytes": "0.49.2", "safetensors": "0.6.2"}
    versions_b = {**versions_a, "transformers": TF_GIT, "accelerate": "1.15.0", "peft": "0.21.2"}
    freeze_b = {**freeze_a, "transformers": TF_GIT, "accelerate": "1.15.0", "peft": "0.21.2"}
    with Store(db) as store:
        store.ensure_run(RUN, "matrix.toml", "[axes]", {"timeout": 300}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu"})
        store.ensure_run(RUN, "matrix.toml", "[axes]", {"timeout": 300}, "0.1.0", {"platform": "other", "gpu": "other"})
        store.record_cell(cell_record(CELL_A, versions_a, {}))
        store.record_cell(cell_record(CELL_A, versions_a, freeze_a))  # a rebuild replaces, it does not add a row
        store.record_cell(cell_record(CELL_B, versions_b, freeze_b))
        for o in (outcome(), outcome(repeat=1, status=Status.FAIL), outcome(cell=CELL_B, status=Status.ERROR, signature="KeyError: <key>")):
            store.add_outcome(o)
        rows = queries.outcome_rows(store, RUN)
        assert queries.row_count(store, "runs") == 1 and queries.row_count(store, "cells") == 2
    assert len(rows) == 3
    # ordered by cell id ("tf-git" sorts before "tf5"), scenario, repeat
    assert [(r["cell_id"], r["repeat"], r["status"]) for r in rows] == [(CELL_B, 0, "error"), (CELL_A, 0, "pass"), (CELL_A, 1, "fail")]
    a = rows[1]
    assert (a["torch"], a["transformers"], a["accelerate"], a["peft"], a["bitsandbytes"]) == (
        "2.13.0+cpu",
        "5.6.2",
        "1.13.0",
        "0.19.1",
        "0.49.2",
    )
    assert (a["platform"], a["gpu"], a["python"]) == ("linux-x86_64", "cpu", "3.11")
    b = rows[0]
    assert (b["transformers"], b["accelerate"], b["signature"]) == (TF_GIT, "1.15.0", "KeyError: <key>")


def test_outcomes_view_without_a_cell_record_has_null_axes(db: Path) -> None:
    with Store(db) as store:
        store.add_outcome(outcome())
        (row,) = queries.outcome_rows(store)
    assert row["status"] == "pass" and row["torch"] is None


def test_read_only_store_refuses_writes(db: Path) -> None:
    with Store(db) as store:
        store.add_outcome(outcome())
    with Store(db, read_only=True) as store, pytest.raises(StoreError, match="read-only"):
        store.add_outcome(outcome(repeat=1))
    with Store(db, read_only=True) as store:
        assert queries.row_count(store, "outcomes") == 1


def test_read_only_store_needs_an_existing_file(db: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(db, read_only=True)
    assert not db.exists()


def test_a_text_file_is_not_a_database(db: Path) -> None:
    db.write_text("run_id,cell_id\nr-1,torch2.13.0\n")
    with pytest.raises(StoreError) as info:
        Store(db)
    assert str(db) in str(info.value)
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert db.read_text() == "run_id,cell_id\nr-1,torch2.13.0\n"  # left as it was


def test_a_directory_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)


def test_a_missing_folder_is_not_created(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "results.duckdb"
    with pytest.raises(StoreError, match="does not exist"):
        Store(target)
    assert not (tmp_path / "no").exists()


def test_count_rejects_unknown_tables(db: Path) -> None:
    with Store(db) as store, pytest.raises(ValueError):
        queries.row_count(store, "schema_migrations; DROP TABLE outcomes")


def test_in_memory_store(tmp_path: Path) -> None:
    with Store(":memory:") as store:
        assert store.add_outcome(outcome()) is True
        assert store.done_keys(RUN) == {(CELL_A, "lora", 0)}
    assert list(tmp_path.iterdir()) == []


# -- Outcome (outcome.py) ---------------------------------------------------------------------


def test_outcome_round_trip() -> None:
    o = outcome(status=Status.OOM, message="CUDA out of memory", metrics={"peak_mb": 12.5}, seconds=3.25)
    data = o.serialize()
    assert data["status"] == "oom" and isinstance(data["status"], str)
    assert Outcome.from_dict(data) == o


STATUS_KINDS = [
    (Status.PASS, False, False),
    (Status.FAIL, True, False),
    (Status.ERROR, True, False),
    (Status.CRASH, True, False),
    (Status.TIMEOUT, True, False),
    (Status.OOM, True, False),
    (Status.UNRESOLVABLE, False, True),
    (Status.INSTALL_FAILED, False, True),
    (Status.NOT_APPLICABLE, False, False),
]


@pytest.mark.parametrize(("status", "failure", "env_problem"), STATUS_KINDS)
def test_status_kinds(status: Status, failure: bool, env_problem: bool) -> None:
    assert (status.is_failure, status.is_env_problem) == (failure, env_problem)


def test_cuda_runtime_reaches_the_view_and_old_records_default_to_empty(db: Path) -> None:
    from dataclasses import replace

    with Store(db) as store:
        store.record_cell(replace(cell_record("gpu-cell", {"torch": "inherit"}, {"torch": "2.11.0"}), cuda_runtime="13.0"))
        store.record_cell(cell_record("old-cell", {"torch": "2.11.0"}, {"torch": "2.11.0"}))  # as written before 0005
        for cell in ("gpu-cell", "old-cell"):
            store.add_outcome(outcome(cell=cell))
        rows = dict(store.con.execute("SELECT cell_id, cuda_runtime FROM outcomes_v").fetchall())
    assert rows == {"gpu-cell": "13.0", "old-cell": ""}
