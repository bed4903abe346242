"""The fork server and libraries that initialise CUDA at import (accelerate 1.15 on a GPU
runner did): the server must notice and restart without them, or every forked scenario
fails with "Cannot re-initialize CUDA in forked subprocess"."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.runner import CellRunner

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
        assert runner.cuda_initialized_by == "greedy_lib"
        # only the culprit goes: what follows it is still preloaded; the scenario runs, forked
        assert runner.preloaded == ["torch", "after_lib"]
        assert runner.cuda_culprits == ["greedy_lib"]
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
        assert runner.cuda_culprits == []
        assert runner.preloaded == ["torch"]
    assert raw.output_tail.strip() == "False"


def test_server_start_is_not_counted_in_the_scenarios_seconds(tmp_path: Path) -> None:
    (tmp_path / "slow_lib.py").write_text("import time\ntime.sleep(1.5)\n")
    scenario = tmp_path / "quick.py"
    scenario.write_text("print('ok')\n")
    with CellRunner(sys.executable, isolation="fork", preload=["slow_lib"], env={"PYTHONPATH": str(tmp_path)}) as runner:
        raw = runner.run(scenario, timeout=30)
        assert runner.server_start_seconds >= 1.5
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
        assert runner.cuda_initialized_by == ""
        assert runner.preloaded == ["torch", "after_lib"]
    assert raw.record == {"status": "pass"}
