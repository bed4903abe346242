"""The fork server and libraries that initialise CUDA at import (accelerate 1.15 on a GPU
runner did): the server must notice and restart without them, or every forked scenario
fails with "Cannot re-initialize CUDA in forked subprocess"."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.running.runner import CellRunner

FAKE_TORCH = """
import types
cuda = types.SimpleNamespace(is_initialized=lambda: False)
"""
# importing this "initialises CUDA" as far as the server can tell
GREEDY = """
import torch
torch.cuda.is_initialized = lambda: True
"""


def test_server_restarts_without_a_module_that_initialises_cuda(tmp_path: Path) -> None:
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    (tmp_path / "greedy_lib.py").write_text(GREEDY)
    (tmp_path / "after_lib.py").write_text("")
    scenario = tmp_path / "where.py"
    scenario.write_text("import sys\nprint(sorted(m for m in ('torch', 'greedy_lib', 'after_lib') if m in sys.modules))\n")
    with CellRunner(
        sys.executable, isolation="fork", preload=["torch", "greedy_lib", "after_lib"], env={"PYTHONPATH": str(tmp_path)}
    ) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.cuda_initialized_by == "greedy_lib"
        # only the culprit goes: what follows it is still preloaded; the scenario runs, forked
        assert runner.server.preloaded == ["torch", "after_lib"]
        assert runner.server.cuda_culprits == ["greedy_lib"]
    assert raw.record == {"status": "pass"}
    assert raw.output_tail.strip() == "['after_lib', 'torch']"


def test_a_known_culprit_is_not_even_tried(tmp_path: Path) -> None:
    """The sweep passes culprits found in earlier cells: no second server start for them."""
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    (tmp_path / "greedy_lib.py").write_text(GREEDY)
    scenario = tmp_path / "where.py"
    scenario.write_text("import sys\nprint('greedy_lib' in sys.modules)\n")
    with CellRunner(
        sys.executable, isolation="fork", preload=["torch", "greedy_lib"], env={"PYTHONPATH": str(tmp_path)}, avoid={"greedy_lib"}
    ) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.cuda_culprits == []
        assert runner.server.preloaded == ["torch"]
    assert raw.output_tail.strip() == "False"


def test_server_start_is_not_counted_in_the_scenarios_seconds(tmp_path: Path) -> None:
    (tmp_path / "slow_lib.py").write_text("import time\ntime.sleep(1.5)\n")
    scenario = tmp_path / "quick.py"
    scenario.write_text("print('ok')\n")
    with CellRunner(sys.executable, isolation="fork", preload=["slow_lib"], env={"PYTHONPATH": str(tmp_path)}) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.start_seconds >= 1.5
    assert raw.record == {"status": "pass"}
    assert raw.seconds < 1.5


def test_a_clean_preload_is_kept(tmp_path: Path) -> None:
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    (tmp_path / "after_lib.py").write_text("")
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    with CellRunner(
        sys.executable, isolation="fork", preload=["torch", "after_lib", "not_installed_anywhere"], env={"PYTHONPATH": str(tmp_path)}
    ) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.cuda_initialized_by == ""
        assert runner.server.preloaded == ["torch", "after_lib"]
    assert raw.record == {"status": "pass"}


# A CUDA build of torch whose fork was poisoned (as torch.cuda.is_available() does) without
# torch.cuda.is_initialized() ever becoming true: only a forked probe can tell.
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
POISONER = """
import torch
torch._poison()
"""
# What torch.cuda.is_available() does: it poisons fork unless NVML is asked instead.
CAREFUL = """
import os, torch
if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") != "1":
    torch._poison()
"""


def test_a_module_that_poisons_fork_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "torch.py").write_text(FORK_AWARE_TORCH)
    (tmp_path / "poisoner.py").write_text(POISONER)
    (tmp_path / "after_lib.py").write_text("")
    scenario = tmp_path / "where.py"
    scenario.write_text("import sys, torch\nprint(torch._is_in_bad_fork(), 'poisoner' in sys.modules)\n")
    preload = ["torch", "poisoner", "after_lib"]
    with CellRunner(sys.executable, isolation="fork", preload=preload, env={"PYTHONPATH": str(tmp_path)}) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.cuda_culprits == ["poisoner"]
        assert runner.server.preloaded == ["torch", "after_lib"]
    assert raw.output_tail.strip() == "False False"  # the scenario's process is not in a bad fork


def test_preloading_asks_nvml_and_scenarios_get_the_default_back(tmp_path: Path) -> None:
    (tmp_path / "torch.py").write_text(FORK_AWARE_TORCH)
    (tmp_path / "careful.py").write_text(CAREFUL)
    scenario = tmp_path / "env.py"
    scenario.write_text("import os\nprint(os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK', 'unset'))\n")
    env = {"PYTHONPATH": str(tmp_path)}
    os_env_had = "PYTORCH_NVML_BASED_CUDA_CHECK" in __import__("os").environ
    with CellRunner(sys.executable, isolation="fork", preload=["torch", "careful"], env=env) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.cuda_culprits == []  # it only checks availability: preloaded safely
        assert runner.server.preloaded == ["torch", "careful"]
    if not os_env_had:
        assert raw.output_tail.strip() == "unset"


def test_a_learned_group_that_initialises_cuda_loses_only_the_module_that_does(tmp_path: Path) -> None:
    # What the GPU runner's second sweep hit: transformers' learned group held a module that
    # imports bitsandbytes. Dropping the group whole left transformers unpreloaded, and every
    # scenario imported it again. Only the culprit module may go.
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    (tmp_path / "greedy_lib.py").write_text(GREEDY)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "__init__.py").write_text("")
    (lib / "clean_a.py").write_text("")
    (lib / "bridge.py").write_text("import greedy_lib\n")  # as transformers.integrations.bitsandbytes
    (lib / "clean_b.py").write_text("")
    learned = ["torch", "lib.clean_a", "lib.bridge", "lib.clean_b"]
    scenario = tmp_path / "where.py"
    names = "('lib.clean_a', 'lib.bridge', 'lib.clean_b', 'greedy_lib')"
    scenario.write_text(f"import sys\nprint(sorted(m for m in {names} if m in sys.modules))\n")
    env = {"PYTHONPATH": str(tmp_path)}
    with CellRunner(sys.executable, isolation="fork", preload=["torch"], env=env, learned=learned) as runner:
        raw = runner.run(scenario, timeout=30)
        # the group first, then its modules one by one: the culprit found, the rest kept
        assert runner.server.cuda_culprits == ["lib.*", "lib.bridge"]
        assert runner.server.preloaded == ["torch", "torch.*", "lib.clean_a", "lib.clean_b"]
        found = set(runner.server.cuda_culprits)
    assert raw.output_tail.strip() == "['lib.clean_a', 'lib.clean_b']"
    # the next cell knows both: it splits the group at once and never tries the culprit
    with CellRunner(sys.executable, isolation="fork", preload=["torch"], env=env, learned=learned, avoid=found) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server.cuda_culprits == []
        assert runner.server.preloaded == ["torch", "torch.*", "lib.clean_a", "lib.clean_b"]
    assert raw.output_tail.strip() == "['lib.clean_a', 'lib.clean_b']"
