"""Reading a results file while real sweeps write it (light cells: packaging as the axis, tiny
scenario processes): readers of every kind work throughout, the sweeps never fail because of
them, several sweeps share one file, and every key ends up stored exactly once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from harness.running import live
from harness.storage import journal
from harness.storage.store import Store
from tests.conftest import REPO, run_cli
from tests.integration.test_sweep_light import write_matrix

SCENARIOS = 8
CELLS = ["23.2", "24.0"]
TOTAL = SCENARIOS * len(CELLS)


def slow_scenarios(folder: Path, seconds: float = 0.4) -> list[Path]:
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(SCENARIOS):
        path = folder / f"slow{i}.py"
        path.write_text(f"import time\ntime.sleep({seconds})\nprint('slow {i} done')\n")
        paths.append(path)
    return paths


def sweep_args(matrix: Path, db: Path, env_root: Path, scenarios: list[Path], *extra: str) -> list[str]:
    args = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine", *extra]
    for scenario in scenarios:
        args += ["--scenario", str(scenario)]
    return args


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)


def stored_keys(db: Path) -> tuple[int, int]:
    """(rows, distinct keys) of the outcomes table, read as a user would."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT count(*), count(DISTINCT (run_id, cell_id, scenario, repeat)) FROM outcomes").fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0]), int(row[1])


def python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


@pytest.fixture
def light(tmp_path: Path, env_root: Path) -> tuple[Path, list[Path], Path]:
    matrix = write_matrix(tmp_path / "matrix.toml", CELLS)
    scenarios = slow_scenarios(tmp_path / "scen")
    # Build the two envs first: the timing of the reads below is about scenarios, not uv.
    warm = run_cli(*sweep_args(matrix, tmp_path / "warm.duckdb", env_root, scenarios[:1]))
    assert warm.returncode == 0, warm.stdout + warm.stderr
    return matrix, scenarios, env_root


def test_readers_of_every_kind_during_a_sweep(light: tuple[Path, list[Path], Path], tmp_path: Path) -> None:
    matrix, scenarios, env_root = light
    db = tmp_path / "live.duckdb"
    Store(db).close()  # the file exists before the readers start
    raw = f"import duckdb; c = duckdb.connect({str(db)!r}, read_only=True); print(c.execute('SELECT count(*) FROM outcomes').fetchone()[0])"
    store = (
        "from harness.storage.store import Store; from harness.storage import queries; "
        f"s = Store({str(db)!r}, read_only=True); print(len(queries.outcome_rows(s))); s.close()"
    )
    readers: dict[str, Callable[[], subprocess.CompletedProcess[str]]] = {
        "raw-sql-1": lambda: python(raw),
        "raw-sql-2": lambda: python(raw),
        "store-queries": lambda: python(store),
        "summary": lambda: run_cli("summary", "--db", str(db), timeout=120),
    }
    seen: dict[str, list[tuple[int, str]]] = {name: [] for name in readers}
    proc = start(sweep_args(matrix, db, env_root, scenarios), tmp_path / "sweep.log")

    def read_until_done(name: str) -> None:
        while proc.poll() is None:
            done = readers[name]()
            count = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and name != "summary" else ""
            if name == "summary" and done.returncode == 0:
                passes = re.search(r"pass: (\d+)", done.stdout)
                count = passes[1] if passes else "0"
            seen[name].append((done.returncode, count or done.stderr.strip()[-300:]))

    threads = [threading.Thread(target=read_until_done, args=(name,)) for name in readers]
    for thread in threads:
        thread.start()
    # attribute while the sweep writes, once it has stored an outcome (a fixed 2 s was too
    # short on a loaded machine: "no outcomes" is attribute's right answer before the first)
    deadline = time.monotonic() + 120
    while stored_keys(db)[0] == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    attribute = run_cli("attribute", "--db", str(db), "--offline", timeout=120)  # writes transitions: the write lock, briefly
    assert proc.wait(timeout=300) == 0, (tmp_path / "sweep.log").read_text()
    for thread in threads:
        thread.join()

    assert attribute.returncode == 0, attribute.stderr
    for name, results in seen.items():
        failed = [r for r in results if r[0] != 0]
        assert not failed, f"{name}: {failed[:3]}"
        counts = [int(c) for _, c in results]
        assert counts == sorted(counts), f"{name} went backwards: {counts}"
    # Some reads happened while the sweep was half-way (not only before or after it).
    assert any(0 < int(c) < TOTAL for results in seen.values() for _, c in results), seen
    assert stored_keys(db) == (TOTAL, TOTAL)
    assert not journal.folder_of(db).exists()


def test_two_sweeps_into_one_file(light: tuple[Path, list[Path], Path], tmp_path: Path) -> None:
    matrix, scenarios, env_root = light
    db = tmp_path / "shared.duckdb"
    shards = [start(sweep_args(matrix, db, env_root, scenarios, "--shard", f"{i}/2"), tmp_path / f"shard{i}.log") for i in (1, 2)]
    assert [p.wait(timeout=300) for p in shards] == [0, 0], [(tmp_path / f"shard{i}.log").read_text()[-2000:] for i in (1, 2)]
    assert stored_keys(db) == (TOTAL, TOTAL)
    con = duckdb.connect(str(db), read_only=True)
    cells = con.execute("SELECT count(*) FROM cells").fetchone()
    con.close()
    assert cells == (len(CELLS),)
    assert not journal.folder_of(db).exists()


def test_a_sweep_killed_mid_way_resumes_with_one_outcome_per_key(light: tuple[Path, list[Path], Path], tmp_path: Path) -> None:
    matrix, scenarios, env_root = light
    db = tmp_path / "killed.duckdb"
    args = sweep_args(matrix, db, env_root, scenarios)
    proc = start(args, tmp_path / "first.log")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if db.exists() and _harness_count(db) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)  # no chance to fold: the journal is all there is
    proc.wait()
    before = _harness_count(db)
    assert 3 <= before < TOTAL
    (writer,) = live.writers(db)
    assert writer.stopped and not writer.alive  # the dashboard says it stopped, rerun to resume
    again = run_cli(*args, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{TOTAL - before} outcome(s) computed, {before} already stored (resumed)" in again.stdout
    assert stored_keys(db) == (TOTAL, TOTAL)
    assert not journal.folder_of(db).exists()


def _harness_count(db: Path) -> int:
    with Store(db, read_only=True) as store:
        return int(store.fetch("SELECT count(*) AS n FROM outcomes")[0]["n"])
