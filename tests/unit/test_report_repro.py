"""repro.py: the PEP 723 script, its block, and what it prints and exits with, run by a real interpreter.

The scripts run here with this project's Python and a library of the test's own in a folder named
site-packages (what a signature blames), not through uv: `tests/integration/test_report_regression.py`
runs the real ones with `uv run` in a fresh environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.analysis import repro, signature
from harness.analysis.repro import ReproSpec, build_index, pep723_script
from harness.analysis.signature import Frame, make_signature

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(signature.__file__).read_text()
KIT = (REPO / "scenarios" / "_kit.py").read_text()
LIBRARY = """def boom(key):
    raise KeyError(key)


def fine():
    return 1
"""
#: what the harness stores for `fakelib.boom(22)` raised in a scenario (interpret.py) or a test (testsuite.meaning)
SIGNATURE = "KeyError: <key> @ fakelib/__init__.py:boom"
#: PEP 723's reference reader of a `# /// script` block
BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


def metadata(script: str) -> dict[str, object]:
    [match] = [m for m in BLOCK.finditer(script) if m["type"] == "script"]
    content = "".join(line[2:] if line.startswith("# ") else line[1:] for line in match["content"].splitlines(keepends=True))
    return tomllib.loads(content)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder named as an env's site-packages, holding `fakelib`."""
    folder = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    (folder / "fakelib").mkdir(parents=True)
    (folder / "fakelib" / "__init__.py").write_text(LIBRARY)
    return folder


def spec(**changes: object) -> ReproSpec:
    base: dict[str, object] = {
        "title": "KeyError: 22",
        "signature": SIGNATURE,
        "kind": "scenario",
        "run": "s.py",
        "pins": ("torch==2.13.0+cpu", "peft==0.19.1"),
        "python": "3.11",
        "files": (("s.py", "import fakelib\n\nfakelib.boom(22)\n"),),
        "constraints": ("numpy==2.4.6", "torch==2.13.0+cpu", "peft==0.19.1"),
        "libraries": ("torch", "fakelib"),
    }
    return ReproSpec(**{**base, **changes})  # type: ignore[arg-type]


def run(script: str, folder: Path, site: Path, name: str = "repro.py") -> subprocess.CompletedProcess[str]:
    path = folder / name
    path.write_text(script)
    scratch = folder / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(site), "TMPDIR": str(scratch)}
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=folder, env=env)
    assert not [p for p in scratch.iterdir() if p.name.startswith("repro-")]  # the script leaves no folder behind
    return proc


def test_the_block_pins_the_set_and_holds_the_rest_and_names_no_local_folder() -> None:
    script = pep723_script(spec(), SOURCE)
    found = metadata(script)
    assert found["requires-python"] == "==3.11.*"
    # a build of the PyTorch index: its release pinned, taken from that index (explicit: for torch only); the rest exactly
    assert found["dependencies"] == ["torch==2.13.0", "peft==0.19.1"]
    assert found["tool"] == {
        "uv": {
            "constraint-dependencies": ["numpy==2.4.6"],
            "index": [{"name": "pytorch-cpu", "url": "https://download.pytorch.org/whl/cpu", "explicit": True}],
            "sources": {"torch": {"index": "pytorch-cpu"}},
        }
    }
    assert "# # torch 2.13.0+cpu, the build that ran it: the PyTorch index's CPU build, for torch only" in script
    assert "UV_FIND_LINKS=/path/to/wheels uv run --no-sources repro.py" in script
    assert "On a machine without that GPU" not in script  # a CPU build runs anywhere
    compile(script, "repro.py", "exec")


def test_a_cuda_build_is_taken_from_its_index_and_the_script_says_how_to_run_it_without_the_gpu() -> None:
    gpu = "NVIDIA H100 80GB HBM3 · linux-x86_64 · Python 3.12 · CUDA 13.0"
    script = pep723_script(spec(pins=("torch==2.11.0+cu130", "peft==0.19.1"), python="3.12", machine=gpu, cuda="13.0", gpus=1), SOURCE)
    found = metadata(script)
    assert found["requires-python"] == "==3.12.*" and found["dependencies"] == ["torch==2.11.0", "peft==0.19.1"]
    uv = found["tool"]["uv"]  # type: ignore[index]
    assert uv["index"] == [{"name": "pytorch-cu130", "url": "https://download.pytorch.org/whl/cu130", "explicit": True}]
    assert uv["sources"] == {"torch": {"index": "pytorch-cu130"}}
    assert "# # torch 2.11.0+cu130, the build that ran it: the PyTorch index's build for CUDA 13.0, for torch only" in script
    assert f"It failed on {gpu}." in script and "the scenario needs 1 GPU(s) (its REQUIRES)" in script
    # without that GPU: the same release's CPU build, the index's url changed and nothing else
    cpu = script.replace('whl/cu130"', 'whl/cpu"')
    assert "sed 's#whl/cu130\"#whl/cpu\"#' repro.py > repro-cpu.py && uv run repro-cpu.py" in script
    assert metadata(cpu)["tool"]["uv"]["index"][0]["url"] == "https://download.pytorch.org/whl/cpu"  # type: ignore[index]


def test_the_default_build_needs_no_index_and_no_python_is_written_that_is_not_a_version() -> None:
    script = pep723_script(spec(pins=("torch==2.11.0", "peft==0.19.1"), constraints=(), python="", cuda="13.0"), SOURCE)
    found = metadata(script)
    assert "requires-python" not in found and "tool" not in found and found["dependencies"] == ["torch==2.11.0", "peft==0.19.1"]
    assert "It ran with torch 2.11.0, PyPI's build (for CUDA 13.0 on Linux)" in script


#: (pin, what the block says, the index of its build)
BUILDS = [
    ("torch==2.13.0+cpu", "torch==2.13.0", "https://download.pytorch.org/whl/cpu"),
    ("torch==2.11.0+cu130", "torch==2.11.0", "https://download.pytorch.org/whl/cu130"),
    ("torch==2.8.0+rocm6.4", "torch==2.8.0", "https://download.pytorch.org/whl/rocm6.4"),
    ("torch==2.13.0", "torch==2.13.0", ""),
    ("mylib==1.0+local", "mylib==1.0+local", ""),  # not a build of the PyTorch index: left as it is
    ("peft @ git+https://github.com/huggingface/peft@abc", "peft @ git+https://github.com/huggingface/peft@abc", ""),
]


@pytest.mark.parametrize(("pin", "plain", "index"), BUILDS)
def test_build_index(pin: str, plain: str, index: str) -> None:
    assert build_index(pin) == (plain, index)


def test_the_scenario_script_fails_with_the_harness_signature(tmp_path: Path, site: Path) -> None:
    proc = run(pep723_script(spec(), SOURCE), tmp_path, site)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == [f"signature: {SIGNATURE}", "repro: fails with the reported signature"]
    assert "Traceback (most recent call last)" in proc.stderr  # the maintainer sees the traceback too
    # the same signature the harness computes from the frames it records
    frames = [Frame(str(site / "fakelib" / "__init__.py"), 2, "boom")]
    assert make_signature("builtins.KeyError", "22", frames, ("torch", "fakelib")).text == SIGNATURE


def test_the_passing_script_passes_and_another_failure_says_nothing(tmp_path: Path, site: Path) -> None:
    passing = spec(files=(("s.py", "import fakelib\n\nassert fakelib.fine() == 1\n"),), expect="passes")
    proc = run(pep723_script(passing, SOURCE), tmp_path, site)
    assert (proc.returncode, proc.stdout.splitlines()[-1]) == (0, "repro: passes"), proc.stderr
    other = spec(files=(("s.py", "raise ValueError('something else')\n"),))
    proc = run(pep723_script(other, SOURCE), tmp_path, site)
    assert proc.returncode == 125, proc.stdout + proc.stderr  # `git bisect run`'s "cannot tell"
    assert "signature: ValueError: something else" in proc.stdout


def test_a_scenario_that_never_reaches_its_setup_says_nothing(tmp_path: Path, site: Path) -> None:
    code = "from _kit import reached\n\nSETUP = 'a layer on the CPU'\nreached(False, 'none')\n"
    proc = run(pep723_script(spec(files=(("s.py", code), ("_kit.py", KIT)), setup=True), SOURCE), tmp_path, site)
    assert proc.returncode == 125 and "repro: inconclusive" in proc.stdout, proc.stdout + proc.stderr
    quiet = "from _kit import metric\n\nSETUP = 'a layer on the CPU'\nmetric('x', 1)\n"  # passes without confirming its setup
    proc = run(pep723_script(spec(files=(("s.py", quiet), ("_kit.py", KIT)), setup=True), SOURCE), tmp_path, site)
    assert proc.returncode == 125 and "never confirmed its setup" in proc.stdout, proc.stdout + proc.stderr


SUITE = (
    ("pyproject.toml", '[tool.pytest.ini_options]\nmarkers = ["lib: calls the library"]\naddopts = "--strict-markers"\n'),
    ("conftest.py", "import pytest\n\n\n@pytest.fixture\ndef key():\n    return 22\n"),
    (
        "tests/test_lib.py",
        "import fakelib\nimport pytest\n\n\n@pytest.mark.lib\ndef test_boom(key):\n    fakelib.boom(key)\n\n\n"
        "def test_fine():\n    assert fakelib.fine() == 1\n",
    ),
)


def test_the_test_script_runs_pytest_on_the_node_id_with_the_suite_configuration(tmp_path: Path, site: Path) -> None:
    failing = spec(kind="test", run="tests/test_lib.py::test_boom", files=SUITE, pins=("pytest==9.2.0",))
    proc = run(pep723_script(failing, SOURCE), tmp_path, site)
    # the marker needs the suite's configuration (--strict-markers) and the fixture its conftest.py
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"signature: {SIGNATURE}" in proc.stdout and "1 failed" in proc.stdout
    passing = spec(kind="test", run="tests/test_lib.py::test_fine", files=SUITE, expect="passes")
    proc = run(pep723_script(passing, SOURCE), tmp_path, site)
    assert (proc.returncode, proc.stdout.splitlines()[-1]) == (0, "repro: passes"), proc.stdout + proc.stderr
    missing = spec(kind="test", run="tests/test_lib.py::test_nope", files=SUITE)
    assert run(pep723_script(missing, SOURCE), tmp_path, site).returncode == 125


def test_files_that_hold_quotes_and_backslashes_come_back_exactly(tmp_path: Path, site: Path) -> None:
    tricky = "x = '''a'''\ny = \"\"\"b\"\"\"\nz = r'\\n\\\\'\nassert (x, y, z) == ('a', 'b', '\\\\n\\\\\\\\')\n"
    proc = run(pep723_script(spec(files=(("s.py", tricky),), expect="passes"), SOURCE), tmp_path, site)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_doctests() -> None:
    import doctest

    assert doctest.testmod(repro).failed == 0
