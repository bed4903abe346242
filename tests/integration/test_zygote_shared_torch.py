"""The torch modules a cell's fork server imports (a learned `torch.*` group, or what its
libraries pulled in) are imported once more in the zygote, before the next fork of that torch
build, so later servers find them loaded. They are checked there as the zygote's own preload is:
one that poisons fork makes that zygote unusable, the cell gets a plain server, and the next
zygote of the build imports no more of torch. The fake torch of test_zygote_cuda plays a CUDA
build whose `torch.poisoner` poisons fork at import."""

from __future__ import annotations

from pathlib import Path

from harness.running.runner import CellRunner
from harness.running.zygote import ZygotePool
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
