"""A scheduler's time limit (Slurm, `timeout`, a CI job's cancel) sends SIGTERM: the sweep must
stop its scenario processes (they run in their own sessions, out of reach of the group
signal), store nothing for the interrupted ones, and resume on the next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.test_sweep_light import write_matrix


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def _wait_for(path: Path, count: int, seconds: float = 120) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pids = [int(p) for p in path.read_text().split()] if path.exists() else []
        if len(pids) >= count:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"{count} scenario(s) never started")


@pytest.mark.parametrize("jobs", [1, 2])
def test_sigterm_stops_the_scenarios_and_the_rerun_resumes(tmp_path: Path, env_root: Path, jobs: int) -> None:
    pids = tmp_path / "pids"
    scenarios = tmp_path / "scen"
    scenarios.mkdir()
    (scenarios / "quick.py").write_text("print('ok')\n")
    (scenarios / "stuck.py").write_text(f"import os, time\nopen({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\ntime.sleep(600)\n")
    matrix = write_matrix(tmp_path / "m.toml", ["23.2", "24.0"])
    db = tmp_path / "out.jsonl"
    args = [sys.executable, "-m", "harness", "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root)]
    args += ["--run-id", "t", "--no-progress", "--jobs", str(jobs)]
    args += ["--scenario", str(scenarios / "quick.py"), "--scenario", str(scenarios / "stuck.py")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stuck = _wait_for(pids, jobs)  # with 2 jobs, both cells are inside `stuck`
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "SIGTERM" in err and "rerun" in err
    time.sleep(0.5)
    assert not [p for p in stuck if _alive(p)], "a scenario outlived the sweep"
    rows = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
    stored = {(r["cell_id"], r["scenario"]) for r in rows if r["type"] == "outcome"}
    assert not [s for s in stored if s[1] == "stuck"]  # interrupted: no outcome, not a "crash"
    assert len([s for s in stored if s[1] == "quick"]) == jobs
    # the rerun resumes: it runs what is missing (stuck, now told to finish at once) and keeps the rest
    (scenarios / "stuck.py").write_text("print('done')\n")
    again = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    rows = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
    outcomes = [(r["cell_id"], r["scenario"], r["status"]) for r in rows if r["type"] == "outcome"]
    assert len(outcomes) == 4 and len({o[:2] for o in outcomes}) == 4
