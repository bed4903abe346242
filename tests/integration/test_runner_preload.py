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
        # only what came before the culprit is preloaded; the scenario still runs, forked
        assert runner.preloaded == ["torch"]
    assert raw.record == {"status": "pass"}
    assert raw.output_tail.strip() == "['torch']"


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
