"""Learned preloads and modules that initialise CUDA: found in one pass, never costing a later
sweep more server starts than the first.

What the GPU runner's second sweep hit (issue #22): peft and transformers' learned group both
import bitsandbytes, whose import initialises CUDA. The server restarted once per module of
each group (23 bitsandbytes modules, then transformers' one by one): 357.8 s of starts against
25.5 s in the first sweep. Here a stand-in torch plays a CUDA build: `torch._C._cuda_init` and
`torch._C._cuda_getDeviceCount` poison fork, as the real ones do, and three stand-in libraries
play bitsandbytes (`bnb_like`: asks the device capability at import), peft (`peft_like`:
imports it from a submodule) and transformers (`tf_like`: one module imports it).
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from harness.running.envs import uv_binary
from harness.running.runner import CellRunner
from tests.conftest import run_cli

CUDA_TORCH = """
import os, types
_bad = [False]
def _poison():
    os.register_at_fork(after_in_child=lambda: _bad.__setitem__(0, True))
def _cuda_init():
    _poison()
def _cuda_getDeviceCount():
    _poison()
    return 1
_C = types.SimpleNamespace(_cuda_init=_cuda_init, _cuda_getDeviceCount=_cuda_getDeviceCount, _cuda_isInBadFork=lambda: _bad[0])
class _Cuda:
    _initialized = False
    def is_initialized(self):
        return self._initialized and not _bad[0]
    def _lazy_init(self):
        if not self.is_initialized():
            _C._cuda_init()  # looked up at call time, as torch.cuda does
            self._initialized = True
    def get_device_capability(self, device=None):
        self._lazy_init()
        return (9, 0)
    def is_available(self):
        if os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1":
            return True  # NVML: fork stays usable
        return _C._cuda_getDeviceCount() > 0
cuda = _Cuda()
"""
LIBRARIES = {
    "bnb_like/__init__.py": "from . import cext\n",
    "bnb_like/cext.py": "import torch\nCAPABILITY = torch.cuda.get_device_capability()\n",
    "peft_like/__init__.py": "from .tuners import lora\n",
    "peft_like/tuners/__init__.py": "from . import lora\n",
    "peft_like/tuners/lora.py": "import bnb_like\n",
    "tf_like/__init__.py": "",
    "tf_like/clean_a.py": "",
    "tf_like/integrations_bnb.py": "import bnb_like as bnb\n",
    "tf_like/clean_b.py": "",
    "acc_like/__init__.py": "import torch\nAVAILABLE = torch.cuda.is_available()\n",
}
NAMES = ("tf_like.clean_a", "tf_like.clean_b", "tf_like.integrations_bnb", "peft_like", "bnb_like", "acc_like")
# What the scenario saw already loaded (preloaded), then that its own imports work in its fork.
SCENARIO = f"""
import sys, torch
print(sorted(m for m in {NAMES!r} if m in sys.modules))
import peft_like, tf_like.integrations_bnb, tf_like.clean_a, tf_like.clean_b, acc_like
print(torch._C._cuda_isInBadFork(), peft_like.tuners.lora.bnb_like.cext.CAPABILITY)
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture
def libs(tmp_path: Path) -> Path:
    _write(tmp_path / "site", {"torch.py": CUDA_TORCH, **LIBRARIES})
    (tmp_path / "where.py").write_text(SCENARIO)
    return tmp_path


def _run(libs: Path, **kwargs: object) -> tuple[CellRunner, list[str]]:
    with CellRunner(sys.executable, isolation="fork", env={"PYTHONPATH": str(libs / "site")}, **kwargs) as runner:  # type: ignore[arg-type]
        raw = runner.run(libs / "where.py", timeout=30)
    assert raw.record == {"status": "pass"}, raw.output_tail
    return runner, raw.output_tail.strip().splitlines()


def test_every_culprit_is_found_in_one_restart_and_the_clean_modules_stay(libs: Path) -> None:
    preload = ["torch", "tf_like.clean_a", "peft_like", "tf_like.integrations_bnb", "tf_like.clean_b", "acc_like"]
    runner, lines = _run(libs, preload=preload)
    # peft_like's chain names the library that touched CUDA; the module that imports it later
    # is caught at its import statement, in the same (doomed) server
    assert runner.server.cuda_culprits == ["peft_like", "bnb_like", "tf_like.integrations_bnb"]
    # each is a culprit through bnb_like: remembered with its version, for cells that have it
    assert runner.server.cuda_via == dict.fromkeys(runner.server.cuda_culprits, "bnb_like")
    assert runner.server.cuda_chains[0] == ["peft_like", "peft_like.tuners", "peft_like.tuners.lora", "bnb_like", "bnb_like.cext"]
    assert (runner.server.starts, runner.server.cuda_restarts) == (2, 1)
    # asking availability (NVML while preloading) is fine: acc_like is preloaded
    assert runner.server.preloaded == ["torch", "tf_like.clean_a", "tf_like.clean_b", "acc_like"]
    assert lines == ["['acc_like', 'tf_like.clean_a', 'tf_like.clean_b']", "False (9, 0)"]


def test_learned_groups_holding_culprits_cost_one_restart_not_one_per_module(libs: Path) -> None:
    # the shape of the runner's second sweep: each library's learned modules as one group
    learned = ["torch", "bnb_like.cext", "peft_like.tuners.lora", "tf_like.clean_a", "tf_like.integrations_bnb", "tf_like.clean_b"]
    runner, lines = _run(libs, preload=["torch"], learned=learned)
    assert (runner.server.starts, runner.server.cuda_restarts) == (2, 1)
    assert set(runner.server.cuda_culprits) == {"bnb_like", "peft_like", "tf_like.integrations_bnb"}
    assert runner.server.preloaded == ["torch", "torch.*", "tf_like.*"]
    assert lines[0] == "['tf_like.clean_a', 'tf_like.clean_b']"
    # what it found, remembered: the next cell (or sweep) starts once and preloads the same
    again, lines = _run(libs, preload=["torch"], learned=learned, avoid=set(runner.server.cuda_culprits))
    assert (again.server.starts, again.server.cuda_restarts, again.server.cuda_culprits) == (1, 0, [])
    assert again.server.preloaded == runner.server.preloaded
    assert lines[0] == "['tf_like.clean_a', 'tf_like.clean_b']"


def test_a_scenario_names_the_modules_it_loaded_that_import_a_known_culprit(libs: Path) -> None:
    # Read off after the scenario ran (its namespace holds `bnb`, or something defined in a
    # flagged module): the next sweep's learned groups leave them out without a restart.
    runner, lines = _run(libs, preload=["torch"], avoid={"bnb_like", "peft_like"})
    assert runner.culprit_importers == {"tf_like.integrations_bnb": "bnb_like"}
    assert lines[-1] == "False (9, 0)"
    # with nothing known to initialise CUDA, the scenario's process is not asked (and pays nothing)
    runner, _ = _run(libs, preload=["torch"])
    assert runner.culprit_importers == {}


def test_a_culprit_found_only_by_the_fork_probe_is_still_dropped(libs: Path) -> None:
    # a library that poisons fork by a way the watch does not wrap: the probe after the entry tells
    _write(libs / "site", {"sly.py": "import torch\ntorch._poison()\n"})
    runner, lines = _run(libs, preload=["torch", "sly", "tf_like.clean_a"])
    assert runner.server.cuda_culprits == ["sly"]
    assert runner.server.preloaded == ["torch", "tf_like.clean_a"]
    assert lines[-1].startswith("False")


# -- three sweeps in a row on one env root, through the real CLI and a real zygote ------------------
MATRIX = """
[matrix]
python = "{python}"
no_index = true
find_links = ["{wheels}"]
timeout = 60
preload = ["torch", "tf_like", "peft_like"]

[axes]
torch = ["2.99.0"]
bnb_like = ["1.0.0"]
peft_like = ["1.0.0"]
tf_like = ["1.0.0"]
acc_like = ["1.0.0"]
"""


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> None:
    """A minimal wheel, written by hand (no build backend, no index): the zygote serves only a
    torch that is a real distribution, with a RECORD."""
    dist = f"{name}-{version}.dist-info"
    meta = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    every = {**files, **meta}
    record = "".join(f"{path},,\n" for path in every) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in {**every, f"{dist}/RECORD": record}.items():
            whl.writestr(path, text)


def _wheels(folder: Path) -> None:
    folder.mkdir()
    _wheel(folder, "torch", "2.99.0", {"torch/__init__.py": CUDA_TORCH})
    for top in ("bnb_like", "peft_like", "tf_like", "acc_like"):
        _wheel(folder, top, "1.0.0", {name: text for name, text in LIBRARIES.items() if name.startswith(top + "/")})


def _starts(timing: str) -> tuple[float, int, int]:
    found = re.search(r"fork-server starts ([\d.]+) s \((\d+), (\d+) for CUDA", timing)
    assert found, timing
    return float(found[1]), int(found[2]), int(found[3])


@pytest.mark.skipif(not uv_binary(), reason="needs uv")
def test_a_second_and_third_sweep_start_no_more_servers_than_the_first(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _wheels(wheels)
    matrix = MATRIX.format(python=sys.executable, wheels=wheels)
    (tmp_path / "m.toml").write_text(matrix)
    scenario = tmp_path / "where.py"
    scenario.write_text(SCENARIO)
    starts, chains = [], []
    for run in ("first", "second", "third"):
        db = tmp_path / f"{run}.jsonl"
        proc = run_cli(
            "sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(tmp_path / "envs"),
            "--no-progress", "--run-id", run, "--scenario", str(scenario), "--no-refine",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
        rows = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
        outcome = next(r for r in rows if r["type"] == "outcome")
        assert outcome["status"] == "pass", outcome
        starts.append(_starts(next(line for line in proc.stdout.splitlines() if line.startswith("time:"))))
        chains.append(proc.stdout)
    (_, first, first_cuda), (_, second, second_cuda), (_, third, third_cuda) = starts
    assert first_cuda == 1  # peft_like, with bnb_like on its chain
    # the first sweep's scenario named tf_like.integrations_bnb as importing bnb_like: the
    # learned tf_like group leaves it out, and no later start finds anything new
    assert (second_cuda, third_cuda) == (0, 0)
    assert "CUDA at import: peft_like → peft_like.tuners → peft_like.tuners.lora → bnb_like → bnb_like.cext" in chains[0]
    assert second < first and third < first
