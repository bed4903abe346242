"""Which distribution version a preloaded module belongs to: the key under which a sweep
remembers, across cells, that importing it initialised CUDA."""

from __future__ import annotations

import pytest

from harness.inputs.matrix import DEFAULT_PRELOAD
from harness.running.culprits import dist_version as _dist_version

FREEZE = {"torch": "2.11.0", "bitsandbytes": "0.49.2", "huggingface-hub": "1.33.0", "peft": "0.21.0"}


@pytest.mark.parametrize(
    ("module", "version"),
    [
        ("torch", "2.11.0"),
        ("torch._inductor.compile_fx", "2.11.0"),  # a submodule belongs to its top-level package
        ("bitsandbytes", "0.49.2"),
        ("huggingface_hub", "1.33.0"),  # import name with "_", distribution name with "-"
        ("accelerate", ""),  # not installed: no version, never confused with another cell's
    ],
)
def test_dist_version(module: str, version: str) -> None:
    assert _dist_version(module, FREEZE) == version


def test_default_preload_puts_the_compile_stack_before_what_may_initialise_cuda() -> None:
    # bitsandbytes initialises CUDA at import on a GPU and is then dropped; the torch.compile
    # modules it pulls in must come earlier, or every scenario would import them again.
    order = list(DEFAULT_PRELOAD)
    assert order[0] == "torch"
    assert order.index("torch._inductor.compile_fx") < order.index("bitsandbytes")
    assert order[-1] == "bitsandbytes"


def test_cuda_runtime_is_read_without_importing_torch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    from harness.running.envs import _CUDA_PROBE

    def probe(version_line: str) -> str:
        site = tmp_path / str(len(list(tmp_path.iterdir())))
        (site / "torch").mkdir(parents=True)
        # importing this torch would fail loudly: the probe must only read version.py
        (site / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
        (site / "torch" / "version.py").write_text(f"from typing import Optional\n__version__ = '2.11.0'\n{version_line}\n")
        env = {**os.environ, "PYTHONPATH": str(site)}
        return subprocess.run([sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, env=env, check=True).stdout.strip()

    assert probe("cuda: Optional[str] = '13.0'") == "13.0"
    assert probe("cuda = '12.1'") == "12.1"
    assert probe("cuda: Optional[str] = None") == ""


def test_culprits_outlive_the_sweep_and_merge_with_a_parallel_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from harness.running.culprits import load as load_culprits
    from harness.running.culprits import save as save_culprits

    path = tmp_path / "envs" / "cuda-culprits.json"
    assert load_culprits(path) == set()  # none yet
    save_culprits(path, {("bitsandbytes", "0.49.2", "bitsandbytes", "0.49.2")})
    # another sweep on the same env root, started before the first saved, adds its own
    save_culprits(path, {("peft", "0.21.0", "bitsandbytes", "0.49.2")})
    assert load_culprits(path) == {("bitsandbytes", "0.49.2", "bitsandbytes", "0.49.2"), ("peft", "0.21.0", "bitsandbytes", "0.49.2")}
    assert [p.name for p in path.parent.iterdir()] == ["cuda-culprits.json"]  # no temp files left
    path.write_text("{not json")
    assert load_culprits(path) == set()  # a damaged file costs one restart, not the sweep
    # a file written before culprits named the library they reach the driver through
    path.write_text('[["peft", "0.21.0"]]')
    assert load_culprits(path) == {("peft", "0.21.0", "peft", "0.21.0")}
