"""outcomes_v across DuckDB releases: DuckDB 2.0.0 stored the view's JSON paths mangled
(`host->'gpus'->(0->>'memory.total')`), and 2.0.1 refuses that text, so every query of a file
2.0.0 wrote failed. Readers lay the current view over the file; writers migrate it."""

import shutil
from pathlib import Path

import duckdb

from harness.storage import queries
from harness.storage.store import Store

SHIPPED = Path(__file__).resolve().parents[2] / "results" / "default.duckdb"


def _view_sql(path: Path) -> str:
    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'outcomes_v'").fetchone()
    assert row is not None
    return str(row[0])


def test_a_reader_reads_the_gpu_columns_of_the_shipped_file() -> None:
    with Store(SHIPPED, read_only=True) as store:
        rows = queries.outcome_rows(store)
    gpu = [r for r in rows if r["gpu_count"]]
    assert gpu, "the shipped file holds GPU runs"
    assert {r["gpu_memory"] for r in gpu} == {"143771 MiB"}
    assert {r["gpu_compute_capability"] for r in gpu} == {"9.0"}
    assert all(r["gpu_memory"] is None for r in rows if not r["gpu_count"])


def test_a_writer_migrates_the_view_in_the_file(tmp_path: Path) -> None:
    copy = tmp_path / "old.duckdb"
    shutil.copy(SHIPPED, copy)
    with Store(copy) as store:
        assert "0008_outcomes_v_json_paths" in store.migrate() or "0008_outcomes_v_json_paths" in store.applied_migrations()
    assert "json_extract_string" in _view_sql(copy)
    # read straight from the file, no harness view laid over it
    with duckdb.connect(str(copy), read_only=True) as con:
        memory = con.execute("SELECT DISTINCT gpu_memory FROM outcomes_v WHERE gpu_count > 0").fetchall()
    assert memory == [("143771 MiB",)]
