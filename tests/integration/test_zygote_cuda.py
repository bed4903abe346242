"""The zygote is probed exactly like a fork server: after each preloaded module, a forked
probe asks torch whether a child would be in a bad fork (on a GPU runner, importing
torch._inductor poisoned fork without initialising CUDA). Here a tiny installed `torch`
distribution (a real RECORD, so the zygote takes it) plays a CUDA build whose submodule
`torch.poisoner` poisons fork at import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.running.envs import uv_binary
from harness.running.runner import CellRunner
from harness.running.zygote import ZygotePool

FORK_AWARE_TORCH = """
import os, types
_bad = [False]
_poisoned = [False]
def _is_in_bad_fork():
    return _bad[0]
def _poison():
    if not _poisoned[0]:
        _poisoned[0] = True
        os.register_at_fork(after_in_child=lambda: _bad.__setitem__(0, True))
cuda = types.SimpleNamespace(is_initialized=lambda: False)
_C = types.SimpleNamespace(_cuda_isInBadFork=_is_in_bad_fork)
"""


def _env_with_fake_torch(tmp: Path) -> str:
    src = tmp / "src"
    (src / "torch").mkdir(parents=True)
    (src / "torch" / "__init__.py").write_text(FORK_AWARE_TORCH)
    (src / "torch" / "poisoner.py").write_text("import torch\ntorch._poison()\n")
    (src / "torch" / "after.py").write_text("")
    (src / "pyproject.toml").write_text(
        '[project]\nname = "torch"\nversion = "0.0.1"\n[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    venv = tmp / "venv"
    uv = uv_binary()
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin/python"), str(src)], check=True)
    return str(venv / "bin/python")


def test_a_module_that_poisons_fork_is_dropped_from_the_zygote(tmp_path: Path) -> None:
    python = _env_with_fake_torch(tmp_path)
    scenario = tmp_path / "where.py"
    scenario.write_text(
        "import sys, torch\nprint(torch._is_in_bad_fork(), 'torch.poisoner' in sys.modules, 'torch.after' in sys.modules)\n"
    )
    pool = ZygotePool(workdir=tmp_path)
    try:
        with CellRunner(python, preload=["torch", "torch.poisoner", "torch.after"], zygotes=pool) as runner:
            raw = runner.run(scenario, timeout=60)
            assert runner.server.zygote is not None
            assert runner.server.zygote.cuda_culprits == ["torch.poisoner"]
            assert runner.server.zygote.preloaded == ["torch", "torch.after"]
            assert runner.server.cuda_culprits == ["torch.poisoner"]  # the sweep remembers it (cuda-culprits.json)
            assert "torch.poisoner" not in runner.preload  # and the forked server does not try it again
    finally:
        pool.close()
    assert raw.output_tail.strip() == "False False True"  # the scenario's process is not in a bad fork
    assert pool.stats.starts == 2  # started again without the culprit
