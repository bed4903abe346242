"""The torch modules a cell's fork server imports (a learned `torch.*` group, or what its
libraries pulled in) are imported once more in the zygote, before the next fork of that torch
build, so later servers find them loaded. They are checked there as the zygote's own preload is:
one that poisons fork makes that zygote unusable, the cell gets a plain server, and the next
zygote of the build imports no more of torch. The fake torch of test_zygote_cuda plays a CUDA
build whose `torch.poisoner` poisons fork at import."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from harness.running.runner import CellRunner
from harness.running.zygote import FIRST_REPORT_WAIT, LEARN_SCENARIOS_ENV, ZygotePool
from tests.integration.test_zygote_cuda import _env_with_fake_torch

WHERE = "import sys, torch\nprint(torch._is_in_bad_fork(), 'torch.after' in sys.modules)\n"


def test_a_servers_torch_modules_are_imported_once_in_the_zygote(tmp_path: Path) -> None:
    python = _env_with_fake_torch(tmp_path)
    # a library of the cell that imports a torch module the zygote's preload does not hold
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    (site / "usestorch.py").write_text("import torch.after\n")
    scenario = tmp_path / "where.py"
    scenario.write_text(WHERE)
    pool = ZygotePool(workdir=tmp_path)
    try:
        with CellRunner(python, preload=["torch", "usestorch"], zygotes=pool) as first:
            assert first.run(scenario, timeout=60).output_tail.strip() == "False True"
            assert first.server.zygote is not None and not first.server.zygote.shared
        # what the first server imported of torch is imported in the zygote before the next fork
        with CellRunner(python, preload=["torch", "usestorch"], zygotes=pool) as second:
            raw = second.run(scenario, timeout=60)
            assert second.server.zygote is first.server.zygote
            assert "torch.after" in second.server.zygote.shared
    finally:
        pool.close()
    assert raw.output_tail.strip() == "False True"
    assert "torch.* (shared)" in pool.stats.preload_seconds
    assert pool.stats.starts == 1 and not pool.stats.fallbacks


def test_a_shared_torch_module_that_poisons_fork_retires_the_zygote(tmp_path: Path) -> None:
    python = _env_with_fake_torch(tmp_path)
    scenario = tmp_path / "where.py"
    scenario.write_text(WHERE)
    pool = ZygotePool(workdir=tmp_path)
    try:
        # learned before torch.poisoner was known to poison fork: the zygote tries it first
        with CellRunner(python, preload=["torch"], learned=["torch.poisoner", "torch.after"], zygotes=pool) as first:
            first_out = first.run(scenario, timeout=60).output_tail.strip()
            # a plain server found the culprit itself; started again without it, the server came
            # from a new zygote that imports no more of torch than its preload
            assert "torch.poisoner" in first.server.cuda_culprits
            assert first.server.zygote is not None and not first.server.zygote.shared
        with CellRunner(python, preload=["torch"], learned=["torch.after"], zygotes=pool) as second:
            second_out = second.run(scenario, timeout=60).output_tail.strip()
            # its torch build's zygotes import no more of torch than their preload
            assert second.server.zygote is not None and not second.server.zygote.shared
    finally:
        pool.close()
    assert first_out == "False True"  # no scenario process is in a bad fork
    assert second_out == "False True"
    assert any("made fork unusable" in why for why in pool.stats.fallbacks), pool.stats.fallbacks


SEES = "import sys, torch\nprint(torch._is_in_bad_fork(), 'torch.after' in sys.modules)\nimport torch.after\n"


def test_what_a_scenario_imported_of_torch_is_loaded_for_the_next_cells(tmp_path: Path) -> None:
    """#38: on the GPU runner each scenario's import of bitsandbytes pulled in torch._dynamo
    (1-2 s), in every cell; now the zygote imports it once, for the cells forked after."""
    python = _env_with_fake_torch(tmp_path)
    scenario = _scenario(tmp_path, SEES)
    pool = ZygotePool(workdir=tmp_path)
    try:
        with CellRunner(python, preload=["torch"], zygotes=pool) as first:
            first_out = first.run(scenario, timeout=60).output_tail.strip()
            assert first.imports[str(scenario.resolve())] == ["torch.after"]
        with CellRunner(python, preload=["torch"], zygotes=pool) as second:
            second_out = second.run(scenario, timeout=60).output_tail.strip()
            assert second.server.zygote is first.server.zygote
            assert second.server.zygote is not None and "torch.after" in second.server.zygote.shared
    finally:
        pool.close()
    assert first_out == "False False"  # the first cell's scenario imported it itself
    assert second_out == "False True"  # the next cell's found it loaded, and no bad fork
    assert pool.stats.starts == 1 and not pool.stats.fallbacks


def test_scenarios_imports_stay_out_of_the_zygote_when_turned_off(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv(LEARN_SCENARIOS_ENV, "0")  # the baseline of the first-sweep measurements
    python = _env_with_fake_torch(tmp_path)
    scenario = _scenario(tmp_path, SEES)
    pool = ZygotePool(workdir=tmp_path)
    try:
        outs = []
        for _ in range(2):
            with CellRunner(python, preload=["torch"], zygotes=pool) as runner:
                outs.append(runner.run(scenario, timeout=60).output_tail.strip())
    finally:
        pool.close()
    assert outs == ["False False", "False False"]


def test_a_named_module_that_poisons_fork_in_the_zygote_is_left_out_next_time(tmp_path: Path) -> None:
    """A scenario imported a torch module that asks the driver at import: in the zygote the
    watch names it, that zygote is retired (the cell gets a plain server), and the next zygote
    imports the scenario's other torch modules without it."""
    python = _env_with_fake_torch(tmp_path)
    torch_dir = next((tmp_path / "venv" / "lib").glob("python*/site-packages")) / "torch"
    with (torch_dir / "__init__.py").open("a") as fh:  # the driver call the CUDA watch wraps
        fh.write("_C._cuda_getDeviceCount = lambda: (_poison(), 1)[1]\n")
    (torch_dir / "driver.py").write_text("import torch\ntorch._C._cuda_getDeviceCount()\n")
    scenario = _scenario(tmp_path, SEES + "import torch.driver\n")
    pool = ZygotePool(workdir=tmp_path)
    outs = []
    try:
        for _ in range(3):
            with CellRunner(python, preload=["torch"], zygotes=pool) as runner:
                outs.append(runner.run(scenario, timeout=60).output_tail.strip())
                zygote = runner.server.zygote
    finally:
        pool.close()
    # cell 2's zygote imported torch.driver for it and became unusable: cell 2 got a plain
    # server; cell 3's zygote imported torch.after alone
    assert [n for why, n in pool.stats.fallbacks.items() if "torch.driver" in why] == [1], pool.stats.fallbacks
    assert zygote is not None and "torch.after" in zygote.shared and "torch.driver" not in zygote.shared
    assert outs == ["False False", "False False", "False True"]


def test_a_server_started_while_the_first_scenario_runs_waits_for_its_imports(tmp_path: Path) -> None:
    """On a first sweep the next cell's server is started ahead, while the first cell's first
    scenario runs: its fork waits for that scenario's imports (FIRST_REPORT_WAIT at most)."""
    python = _env_with_fake_torch(tmp_path)
    slow = _scenario(tmp_path, "import time, torch.after\ntime.sleep(2)\n", "slow.py")
    sees = _scenario(tmp_path, SEES)
    pool = ZygotePool(workdir=tmp_path)
    try:
        with CellRunner(python, preload=["torch"], zygotes=pool) as first:
            first.start()
            running = threading.Thread(target=first.run, args=(slow, 60))
            running.start()
            time.sleep(0.5)  # the first scenario runs
            with CellRunner(python, preload=["torch"], zygotes=pool) as second:
                second.start()
                out = second.run(sees, timeout=60).output_tail.strip()
            running.join()
    finally:
        pool.close()
    assert out == "False True"  # forked once the first scenario said it imported torch.after
    assert 0.5 < pool.stats.waited < FIRST_REPORT_WAIT


def _scenario(tmp: Path, text: str, name: str = "sees.py") -> Path:
    """A scenario file outside the env's folder (modules under a scenario's folder are its own)."""
    folder = tmp / "scenarios"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder / name
