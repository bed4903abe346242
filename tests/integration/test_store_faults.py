"""A results file that cannot be written, through the real CLI: each cause its own one line and
exit 2, nothing half-written, and after the fix the same command resumes (one outcome per key).

The full disk and the read-only folder are real: a small tmpfs, remounted read-only. They need
root (CI and this machine run the tests as root); without it those tests skip and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from harness.storage import journal
from harness.storage.store import Store
from tests.conftest import run_cli
from tests.integration.test_sweep_light import write_matrix


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), proc.stderr
    return lines[0]


def sweep(matrix: Path, db: Path, env_root: Path, scenarios: list[Path], **env: str) -> subprocess.CompletedProcess[str]:
    args = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    for scenario in scenarios:
        args += ["--scenario", str(scenario)]
    return run_cli(*args, env=env or None, timeout=600)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs, unmounted after the test."""
    point = tmp_path / "disk"
    point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a small tmpfs (a real full disk, a real read-only folder)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(point)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def scenarios_printing(folder: Path, count: int, kib: int) -> list[Path]:
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"print{i:02d}.py"
        path.write_text(f"print('{i}' * {kib * 1024})\n")  # kept as the outcome's output tail
        paths.append(path)
    return paths


def test_a_full_disk_stops_the_sweep_with_whole_records_and_the_rerun_resumes(small_disk: Path, tmp_path: Path, env_root: Path) -> None:
    matrix = write_matrix(tmp_path / "matrix.toml", ["24.0"])
    scenarios = scenarios_printing(tmp_path / "scen", 30, 12)
    db = small_disk / "results.duckdb"
    Store(db).close()
    free = shutil.disk_usage(small_disk).free
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * max(0, free - 120 * 1024))  # room for a few outcomes, not for 30

    line = one_error_line(sweep(matrix, db, env_root, scenarios))
    assert "is full" in line and "free some space and rerun the same command" in line
    # Nothing half-written: every journal line is a whole record, and the file opens with whole rows.
    journaled = 0
    for path in journal.journals(db):
        records = [json.loads(text) for text in path.read_text().splitlines()]
        journaled += sum(r["type"] == "outcome" for r in records)
    con = duckdb.connect(str(db), read_only=True)
    stored = con.execute("SELECT count(*) FROM outcomes").fetchone()[0]
    con.close()
    assert 0 < stored + journaled < 30

    filler.unlink()
    again = sweep(matrix, db, env_root, scenarios)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{30 - stored - journaled} outcome(s) computed, {stored + journaled} already stored (resumed)" in again.stdout
    con = duckdb.connect(str(db), read_only=True)
    keys = con.execute("SELECT count(*), count(DISTINCT (cell_id, scenario, repeat)) FROM outcomes").fetchone()
    con.close()
    assert keys == (30, 30)
    assert not journal.folder_of(db).exists()


def test_a_read_only_folder_is_read_but_not_written(small_disk: Path, tmp_path: Path, env_root: Path) -> None:
    matrix = write_matrix(tmp_path / "matrix.toml", ["24.0"])
    scenarios = scenarios_printing(tmp_path / "scen", 2, 1)
    db = small_disk / "results.duckdb"
    assert sweep(matrix, db, env_root, scenarios[:1]).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    before = db.read_bytes()

    summary = run_cli("summary", "--db", str(db))
    assert summary.returncode == 0 and "pass: 1" in summary.stdout, summary.stderr
    line = one_error_line(sweep(matrix, db, env_root, scenarios))
    assert f"cannot write {str(db)!r}: its folder {str(small_disk)!r} is read-only" in line and "writable folder" in line
    line = one_error_line(sweep(matrix, small_disk / "new.duckdb", env_root, scenarios))
    assert "is read-only" in line
    assert db.read_bytes() == before


def test_a_file_held_open_for_writing_outside_the_harness_is_named(tmp_path: Path, env_root: Path) -> None:
    matrix = write_matrix(tmp_path / "matrix.toml", ["24.0"])
    scenarios = scenarios_printing(tmp_path / "scen", 1, 1)
    db = tmp_path / "results.duckdb"
    Store(db).close()
    code = f"import duckdb; c = duckdb.connect({str(db)!r}); print('held', flush=True); import time; time.sleep(120)"
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        line = one_error_line(sweep(matrix, db, env_root, scenarios, HARNESS_LOCK_WAIT="1"))
        summary = run_cli("summary", "--db", str(db), env={"HARNESS_LOCK_WAIT": "1"})
    finally:
        holder.kill()
        holder.wait()
    assert f"(PID {holder.pid})" in line and "for 1 s" in line and "read_only=True" in line
    assert f"(PID {holder.pid})" in one_error_line(summary)
    assert not journal.folder_of(db).exists()


def test_a_file_from_a_newer_harness_is_left_alone(tmp_path: Path, env_root: Path) -> None:
    matrix = write_matrix(tmp_path / "matrix.toml", ["24.0"])
    db = tmp_path / "results.duckdb"
    with Store(db) as store:
        store.con.execute("INSERT INTO schema_migrations VALUES ('0042_something_newer', now())")
    before = db.read_bytes()
    line = one_error_line(sweep(matrix, db, env_root, scenarios_printing(tmp_path / "scen", 1, 1)))
    assert "written by a newer harness" in line and "0042_something_newer" in line and "upgrade the harness" in line
    assert db.read_bytes() == before
