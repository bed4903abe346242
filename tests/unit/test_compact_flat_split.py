"""`harness compact` of a file an older harness wrote (every night's rows in `outcomes`): the split
written afresh within DuckDB's memory limit, with the same rows as the split that deleted row by row.

Issue #48: the split of 30 nights of 20,000 tests x 20 cells deleted 95 % of 12,660,000 rows from a
table with a primary key and needed 20 GB. `history.settle(rewrite=True)` writes both tables afresh
from what stays instead, in the writer's copy of the file, under `HARNESS_DUCKDB_MEMORY`. These
tests hold it to the rows the deleting settle leaves, on a small flat file from
`benchmarks/make_large_store.py` with a second machine, repeats, a bisection's probe, flaky flips,
regressions, a new cell and a file that stops importing (its tests `not_collected`) added.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from harness.storage import history, store_schema
from harness.storage.store import Store

REPO = Path(__file__).resolve().parents[2]
GPU = {"hostname": "gpu-1", "platform": "linux-x86_64", "gpu_count": 1, "gpu": "NVIDIA H100", "gpus": [], "python": "3.11.11"}


@pytest.fixture(scope="module")
def flat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flat") / "flat.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "400", "--cells", "4", "--runs", "12"]
    made += ["--drift", "0.05", "--flat", "--broken-file", "15", "--out", str(path)]
    done = subprocess.run(made, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(path)) as con:
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()]
        # the same nights on a second machine, its newest night a day late and one cell short
        for run in runs:
            con.execute(
                "INSERT INTO runs SELECT * REPLACE ('gpu-' || run_id AS run_id, ?::JSON AS host, "
                "started_at + INTERVAL 1 HOUR AS started_at) FROM runs WHERE run_id = ?",
                [json.dumps(GPU), run],
            )
            con.execute("INSERT INTO cells SELECT * REPLACE ('gpu-' || run_id AS run_id) FROM cells WHERE run_id = ?", [run])
            con.execute(
                "INSERT INTO outcomes SELECT * REPLACE ('gpu-' || run_id AS run_id, "
                "CASE WHEN hash(scenario, run_id) % 7 = 0 THEN 'fail' ELSE status END AS status) FROM outcomes WHERE run_id = ?",
                [run],
            )
        newest = runs[-1]
        con.execute(
            "DELETE FROM outcomes WHERE run_id = ? AND cell_id = (SELECT min(cell_id) FROM cells WHERE run_id = ?)",
            [f"gpu-{newest}", f"gpu-{newest}"],
        )
        # a second repeat of some tests on every night, flipping now and then
        con.execute(
            "INSERT INTO outcomes SELECT * REPLACE (1 AS repeat, CASE WHEN hash(run_id, scenario) % 3 = 0 THEN 'fail' ELSE status END "
            "AS status) FROM outcomes WHERE hash(scenario) % 11 = 0 AND repeat = 0"
        )
        # a bisection's probe between the two newest nights: a row of its own
        probe, before = "bisect-probe-1", runs[-2]
        con.execute(
            "INSERT INTO runs SELECT * REPLACE (? AS run_id, started_at + INTERVAL 2 HOUR AS started_at) FROM runs WHERE run_id = ?",
            [probe, before],
        )
        con.execute("INSERT INTO cells SELECT * REPLACE (? AS run_id) FROM cells WHERE run_id = ?", [probe, before])
        con.execute(
            "INSERT INTO outcomes SELECT * REPLACE (? AS run_id) FROM outcomes WHERE run_id = ? AND hash(scenario) % 5 = 0 AND repeat = 0",
            [probe, before],
        )
    return path


def _split(source: Path, target: Path, *, rewrite: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The migrations applied to a copy of `source`, with the whole-file settles written afresh or
    deleting row by row (the split before issue #48)."""
    shutil.copyfile(source, target)
    original, wanted = history.settle, rewrite

    def settle(con: duckdb.DuckDBPyConnection, keys: object = None, cells: object = (), *, rewrite: bool = False) -> None:
        original(con, keys, cells, rewrite=rewrite and wanted)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:
        patched.setattr(history, "settle", settle)
        with duckdb.connect(str(target)) as con:
            store_schema.migrate(con)


def _tables(path: Path) -> dict[str, list[tuple[str, ...]]]:
    """Every table's rows as sorted text (when a migration was applied aside)."""
    found: dict[str, list[tuple[str, ...]]] = {}
    with duckdb.connect(str(path), read_only=True) as con:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall():
            columns = [r[0] for r in con.execute(f'DESCRIBE "{table}"').fetchall() if r[0] not in ("applied_at", "computed_at")]
            text = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in columns)
            found[table] = sorted(con.execute(f'SELECT {text} FROM "{table}"').fetchall(), key=repr)
    return found


def test_the_split_written_afresh_keeps_the_rows_the_deleting_split_kept(
    flat: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    afresh, deleting = tmp_path / "afresh.duckdb", tmp_path / "deleting.duckdb"
    _split(flat, afresh, rewrite=True, monkeypatch=monkeypatch)
    _split(flat, deleting, rewrite=False, monkeypatch=monkeypatch)
    new, old = _tables(afresh), _tables(deleting)
    assert new.keys() == old.keys()
    for table in new:
        assert new[table] == old[table], table
    with duckdb.connect(str(afresh), read_only=True) as con:
        # the cases are there: spans begun nights before, both machines, repeats, the probe, marks, flaky keys
        assert con.execute("SELECT count(*) FROM outcomes WHERE first_run <> run_id").fetchone()[0] > 1000  # type: ignore[index]
        assert con.execute("SELECT count(DISTINCT starts_with(run_id, 'gpu-')) FROM outcomes").fetchone()[0] == 2  # type: ignore[index]
        assert con.execute("SELECT count(*) FROM outcomes WHERE repeat = 1").fetchone()[0] > 0  # type: ignore[index]
        assert con.execute("SELECT count(*) FROM history WHERE run_id = 'bisect-probe-1'").fetchone()[0] > 0  # type: ignore[index]
        reasons = {r[0] for r in con.execute("SELECT DISTINCT exception_type FROM history WHERE status = 'not_collected'").fetchall()}
        assert "not_run" in reasons, reasons
        assert con.execute("SELECT count(*) FROM flaky").fetchone()[0] > 0  # type: ignore[index]
        # the primary key is the table's own again
        assert "PRIMARY KEY" in con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'outcomes'").fetchone()[0]  # type: ignore[index]


def test_compact_splits_within_the_memory_limit(flat: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's copy settles under HARNESS_DUCKDB_MEMORY (it had no limit: DuckDB took 80 % of
    the machine), and the connection has its own limit back for the folds after."""
    db = tmp_path / "limited.duckdb"
    shutil.copyfile(flat, db)
    seen: list[str] = []
    original = history._rewrite

    def rewrite(con: duckdb.DuckDBPyConnection, updated: str, on: str) -> None:
        seen.append(str(con.execute("SELECT current_setting('memory_limit')").fetchone()[0]))  # type: ignore[index]
        original(con, updated, on)

    monkeypatch.setattr(history, "_rewrite", rewrite)
    monkeypatch.setenv("HARNESS_DUCKDB_MEMORY", "100MB")
    with Store(db) as store:
        store.compact()
        assert "0010_history" in store.applied_migrations()
    assert seen and all(s.endswith("MiB") and float(s.split()[0]) < 100 for s in seen), seen  # 0010's split and 0011's


def test_compact_completes_within_a_tight_memory_limit(flat: Path, tmp_path: Path) -> None:
    """Every step of the command, the split, the rewrite, the Support page's tables, under 128MB
    (the window that picks each key's row needs 60-100MB here; 512MB did at 12,660,000 rows)."""
    db = tmp_path / "small-limit.duckdb"
    shutil.copyfile(flat, db)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_DUCKDB_MEMORY": "128MB"}
    done = subprocess.run([sys.executable, "-m", "harness", "compact", "--db", str(db)], capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 0 and "applied 0010_history, 0011_collections, 0012_causes" in done.stdout, done.stdout + done.stderr


def test_a_compact_killed_midway_leaves_the_file_as_it_was(flat: Path, tmp_path: Path) -> None:
    """Killed between dropping `outcomes` and writing it again: the drop was in the writer's copy."""
    db = tmp_path / "killed.duckdb"
    shutil.copyfile(flat, db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    kill = (
        "import os, signal, sys\n"
        "from harness.storage import history\n"
        "def rewrite(con, updated, on):\n"
        "    con.execute('DROP TABLE main.outcomes')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "history._rewrite = rewrite\n"
        "from harness.cli import main\n"
        "sys.exit(main(['compact', '--db', sys.argv[1]]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", kill, str(db)], capture_output=True, text=True, cwd=REPO, env=env)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    again = subprocess.run([sys.executable, "-m", "harness", "compact", "--db", str(db)], capture_output=True, text=True, cwd=REPO, env=env)
    assert again.returncode == 0 and "applied 0010_history" in again.stdout, again.stdout + again.stderr


def test_a_memory_limit_too_small_for_the_split_is_one_line_and_loses_nothing(flat: Path, tmp_path: Path) -> None:
    db = tmp_path / "tiny.duckdb"
    shutil.copyfile(flat, db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_DUCKDB_MEMORY": "1MB"}
    out = subprocess.run([sys.executable, "-m", "harness", "compact", "--db", str(db)], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "HARNESS_DUCKDB_MEMORY" in out.stderr, out.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tiny")]  # no copy left behind
