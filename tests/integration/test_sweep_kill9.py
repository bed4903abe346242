"""Nothing outlives the sweep: `kill -9` of a running sweep, at random moments, leaves no
zygote, fork server or scenario process behind (checked by listing processes), and the rerun
stores exactly one outcome per key.

Every process the sweep starts inherits a marker variable from it, so the listing finds them
whatever they are (a zygote, a server forked from one, a scenario forked from that)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not os.environ.get("PIP_FIND_LINKS"), reason="needs PIP_FIND_LINKS naming a folder with a CPU torch wheel")

MATRIX = """
[matrix]
python = "3.11"
find_links = ["$PIP_FIND_LINKS"]
timeout = 120
preload = ["torch"]

[axes]
torch = ["2.13.0"]
packaging = ["23.2", "24.0", "24.1"]
"""
SCENARIOS = {
    "quick": "import torch\nprint(torch.ones(2).sum())\n",
    # long while the test kills sweeps (it writes its pid), short for the rerun that must finish
    "slow": (
        "import os, time, torch\nflag = os.environ['KILL9_FLAG']\n"
        "if os.path.exists(flag):\n    open(flag, 'a').write(f'{os.getpid()}\\n')\n    time.sleep(300)\n"
    ),
    # a process of the scenario's own: it is in the scenario's group, which goes with it
    "grandchild": "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(2)'])\ntime.sleep(1)\n",
}


def marked(mark: str) -> list[int]:
    """Processes whose environment carries the marker, zombies aside (they hold nothing)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes() and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


def test_kill_9_at_random_moments_leaves_nothing_and_the_rerun_completes(tmp_path: Path, env_root: Path) -> None:
    scenarios = tmp_path / "scen"
    scenarios.mkdir()
    for name, body in SCENARIOS.items():
        (scenarios / f"{name}.py").write_text(body)
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX)
    db = tmp_path / "out.duckdb"
    mark = f"HARNESS_KILL9_TEST={uuid.uuid4().hex}"
    flag = tmp_path / "slow-pids"
    env = {**os.environ, "PYTHONPATH": str(REPO), mark.split("=")[0]: mark.split("=")[1], "KILL9_FLAG": str(flag)}

    def sweep(db_path: Path) -> list[str]:
        args = [sys.executable, "-m", "harness", "sweep", "--matrix", str(matrix), "--db", str(db_path), "--env-root", str(env_root)]
        args += ["--run-id", "t", "--no-progress", "--jobs", "2"]
        return args + [arg for name in SCENARIOS for arg in ("--scenario", str(scenarios / f"{name}.py"))]

    # build the envs first: a uv build under way is not the sweep's own process to stop
    warm = subprocess.run(sweep(tmp_path / "warm.jsonl"), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr
    flag.write_text("")
    rng = random.Random(os.environ.get("KILL9_SEED", "13"))
    # random moments (imports, forks, scenarios), then one inside the long scenario for sure
    moments: list[float | None] = [*sorted(rng.uniform(0.5, 9.0) for _ in range(3)), None]
    for moment in moments:
        proc = subprocess.Popen(sweep(db), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if moment is None:
            before = len(flag.read_text().split())
            deadline = time.monotonic() + 120
            while len(flag.read_text().split()) == before and time.monotonic() < deadline:
                time.sleep(0.1)
            assert int(flag.read_text().split()[-1]) in marked(mark), "the long scenario never started"
        else:
            time.sleep(moment)
        if proc.poll() is not None:
            continue  # finished before this moment: nothing to kill
        running = marked(mark)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200] for pid in marked(mark)}
        assert not left, f"after kill -9 at {moment or 'a scenario'} s ({len(running)} processes were running): survivors {left}"
    flag.unlink()
    again = subprocess.run(sweep(db), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT cell_id, scenario, repeat, status FROM outcomes WHERE run_id = 't'").fetchall()
    con.close()
    keys = [r[:3] for r in rows]
    assert len(keys) == 3 * len(SCENARIOS) and len(set(keys)) == len(keys), rows
    assert {r[3] for r in rows} == {"pass"}, rows
    # a completed sweep leaves nothing either: not even what a scenario started and left running
    deadline = time.monotonic() + 5
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked(mark)


def _zygote_of(mark: str) -> int | None:
    for pid in marked(mark):
        try:
            if b"incell/__main__.py\0zygote" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def test_kill_9_while_the_zygote_imports_torch_leaves_no_process_after_1_s_and_no_folder_after_the_next_run(
    tmp_path: Path, env_root: Path
) -> None:
    scenario = tmp_path / "quick.py"
    scenario.write_text(SCENARIOS["quick"])
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX.replace('["23.2", "24.0", "24.1"]', '["24.0"]'))
    temp = tmp_path / "tmp"  # the sweeps' temp directory, to list what they leave
    temp.mkdir()
    mark = f"HARNESS_KILL9_TEST={uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": str(REPO), mark.split("=")[0]: mark.split("=")[1], "TMPDIR": str(temp)}
    args = [sys.executable, "-m", "harness", "sweep", "--matrix", str(matrix), "--env-root", str(env_root), "--no-progress"]
    args += ["--scenario", str(scenario), "--no-refine"]
    warm = subprocess.run([*args, "--db", str(tmp_path / "warm.jsonl")], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr  # the env is built: what follows starts at the zygote

    proc = subprocess.Popen(
        [*args, "--db", str(tmp_path / "out.jsonl")], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while _zygote_of(mark) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _zygote_of(mark) is not None, "no zygote started"
    time.sleep(0.3)  # inside `import torch` (it takes seconds here)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120] for pid in marked(mark)}
    assert not left, f"1 s after kill -9 during the zygote's imports: {left}"
    dead = [p.name for p in temp.iterdir() if p.name.startswith(f"harness-run-{proc.pid}-")]
    assert dead, f"the killed run had no scratch folder: {sorted(p.name for p in temp.iterdir())}"

    again = subprocess.run([*args, "--db", str(tmp_path / "out.jsonl")], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in temp.iterdir() if p.name.startswith("harness")) == []  # the dead run's, and its own
