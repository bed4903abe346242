"""GPU faults on a CPU machine, through a real sweep: stand-ins raise what torch raises on the GPU
runner (tests/gpu_faults/ holds the real ones, run by scripts/gpu_faults.sh), and an `nvidia-smi`
on PATH reports one GPU so that the harness runs the GPU scenarios. Each fault gets its status,
the scenario after it in the same cell still runs, and the run's outcome count is complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from harness.inputs.scenarios import load_scenario
from tests.conftest import REPO, run_cli
from tests.integration.test_sweep_light import write_matrix

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu*) echo "NVIDIA H200 (stand-in), 143771 MiB, 9.0, 580.00";;
  *) echo "stand-in nvidia-smi: one GPU";;
esac
"""

#: scenario -> (body, status it must get, fragment of its message); run in this order, in one cell.
STAND_INS = {
    "oom_class": (
        'REQUIRES = {"gpus": 1}\nclass OutOfMemoryError(RuntimeError):\n    pass\n'
        'raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.81 GiB total capacity)")\n',
        "oom",
        "CUDA out of memory",
    ),
    "wedge": (
        # stuck in a driver call: deaf to SIGTERM, with a child of its own
        'REQUIRES = {"gpus": 1}\nTIMEOUT = 3\nimport signal, subprocess, sys, time\n'
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])\n'
        "while True:\n    time.sleep(1)\n",
        "timeout",
        "process group was killed",
    ),
    "vanish": ('REQUIRES = {"gpus": 1}\nraise RuntimeError("No CUDA GPUs are available")\n', "not_applicable", "saw none"),
    "oom_words": ('REQUIRES = {"gpus": 1}\nraise RuntimeError("CUDA error: out of memory")\n', "oom", "out of memory"),
    "cpu_insists_on_cuda": ('raise RuntimeError("No CUDA GPUs are available")\n', "error", "No CUDA GPUs"),
    "healthy": ('REQUIRES = {"gpus": 1}\nprint("the GPU is still there")\n', "pass", ""),
}


@pytest.mark.parametrize("isolation", ["fork", "process"])
def test_gpu_faults_are_classified_and_the_cell_goes_on(tmp_path: Path, env_root: Path, isolation: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    matrix = write_matrix(tmp_path / "matrix.toml", ["24.0"], isolation=isolation)
    args = ["sweep", "--matrix", str(matrix), "--db", str(tmp_path / "faults.duckdb"), "--env-root", str(env_root), "--no-progress"]
    for name, (body, _, _) in STAND_INS.items():
        path = tmp_path / f"{name}.py"
        path.write_text(body)
        args += ["--scenario", str(path)]
    proc = run_cli(*args, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    con = duckdb.connect(str(tmp_path / "faults.duckdb"), read_only=True)
    rows = con.execute("SELECT scenario, status, message, started_at FROM outcomes ORDER BY started_at").fetchall()
    host = json.loads(con.execute("SELECT host FROM runs").fetchone()[0])
    con.close()
    assert host["gpu_count"] == 1  # the stand-in GPU was counted: the GPU scenarios ran
    assert [r[0] for r in rows] == list(STAND_INS)  # complete, and in order: each fault's successor ran
    for scenario, status, message, _ in rows:
        want, fragment = STAND_INS[scenario][1:]
        assert (status, fragment in message) == (want, True), (scenario, status, message)


def test_the_runner_fault_scenarios_declare_a_gpu_and_a_timeout() -> None:
    folder = REPO / "tests" / "gpu_faults"
    names = ["gpu_oom", "gpu_wedge", "gpu_vanish", "gpu_healthy"]
    for name in names:
        scenario = load_scenario(folder / f"{name}.py")
        assert scenario.requires.gpus == 1 and scenario.timeout, name
        assert "What the harness must say" in scenario.doc, name
    script = (REPO / "scripts" / "gpu_faults.sh").read_text()
    assert f"for name in {' '.join(names)}; do" in script  # the runner's order: each fault, then a scenario after it
