"""Reports and repros of failures found on the GPU runner (#49 items 1 and 2), through the real CLI.

The runner's matrix names its interpreter by path (`python = "/opt/torch/.venv/bin/python3"`)
and its torch is inherited from that interpreter. A report of its results, and the one-file
repro beside it, must name the Python the cells ran (`3.12`), no path of the runner, and the
torch build that failed with where to get it:

- a results file as the runner writes it, its torch the PyTorch index's CUDA 13.0 build
  (`2.11.0+cu130`: the shard of a real one trip, its torch renamed so), merged and reported:
  `requires-python` parses with `packaging` and with uv's own reader (`uv python find
  --script`), the build is named and its index is in the script's block (explicit, torch only),
  and the report says how to run it without that GPU;
- the real one trips (results/gpu/*/one-trip.jsonl, merged), reported: every script's metadata
  parses, and with torch's CPU build put in its place, `uv run` resolves it here and runs it.
  The only CPU build at hand here is torch 2.13.0 for Python 3.11 (PIP_FIND_LINKS), and the
  runner's freeze holds numpy 2.5.2, which needs Python 3.12: so the test puts torch 2.13.0 and
  Python 3.11 in place of the runner's torch 2.11.0 and Python 3.12, and leaves out the block's
  held packages (`constraint-dependencies`); the pinned set (transformers, accelerate, peft,
  bitsandbytes) stays as written. The GPU scenario says it needs a GPU (exit 125); the split
  4-bit load, which needs none, fails on this CPU with the runner's signature (exit 1).

The last test needs uv, PIP_FIND_LINKS with the CPU torch wheel and the index (PyPI); it skips,
saying which is missing, without them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from harness.running.envs import uv_binary
from tests.conftest import REPO, run_cli

TRIPS = sorted((REPO / "results" / "gpu").glob("*/one-trip.jsonl"))
LINES = REPO / "results" / "gpu" / "h100-lines-2026-11-27" / "one-trip.jsonl"
RUNNER_PYTHON = "/opt/torch/.venv/bin/python3"
#: every folder of the runner its results name: its interpreter, its checkout, its env root and temporary folder
RUNNER_FOLDERS = ("/opt/torch", "/work/main", "/tmp/", "/root")
BLOCK = re.compile(r"(?m)^# /// script$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
LOAD_SIG = (
    "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
    " @ accelerate/utils/modeling.py:set_module_tensor_to_device"
)


def metadata(script: str) -> dict[str, object]:
    """The `# /// script` block, read as PEP 723's reference reader does."""
    found = BLOCK.search(script)
    assert found is not None, script[:500]
    return tomllib.loads("".join(line[2:] if line.startswith("# ") else line[1:] for line in found["content"].splitlines(True)))


def merged(tmp: Path, *shards: Path) -> Path:
    db = tmp / "gpu.duckdb"
    proc = run_cli("merge", *map(str, shards), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    return db


def reports(db: Path, folder: Path) -> Path:
    """`harness report --all --repro --out reports/`, run from a folder of its own (nothing of the runner there)."""
    folder.mkdir(exist_ok=True)
    proc = run_cli("report", "--db", str(db), "--all", "--repro", "--out", "reports", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return folder / "reports"


def uv_reads(script: Path) -> subprocess.CompletedProcess[str]:
    """uv's own reader of the script's metadata: `uv python find --script` reads the whole block (a bad
    `tool.uv` table fails it as a TOML parse error), then looks for an interpreter it allows."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    return subprocess.run([uv_binary(), "python", "find", "--script", str(script)], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def cu130(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reports of a runner whose torch is the PyTorch index's CUDA 13.0 build."""
    tmp = tmp_path_factory.mktemp("cu130")
    text = LINES.read_text()
    assert f'"python": "{RUNNER_PYTHON}"' in text  # the matrix's python is the runner's interpreter
    shard = tmp / "one-trip.jsonl"
    shard.write_text(text.replace('"torch": "2.11.0"', '"torch": "2.11.0+cu130"'))
    return reports(merged(tmp, shard), tmp / "here")


def test_no_folder_of_the_runner_in_a_report_a_repro_or_the_published_page(cu130: Path) -> None:
    site = cu130.parent / "site"
    proc = run_cli("publish", "--db", str(cu130.parent.parent / "gpu.duckdb"), "--out", str(site), cwd=cu130.parent)
    assert proc.returncode == 0, proc.stderr
    written = [*sorted(cu130.iterdir()), site / "index.html"]
    assert len([p for p in written if p.suffix == ".py"]) == 6
    for path in written:
        text = path.read_text()
        for folder in RUNNER_FOLDERS:
            assert folder not in text, f"{path.name} names {folder}"


def test_the_python_is_the_version_the_cells_ran_and_uv_reads_it(cu130: Path) -> None:
    for script in sorted(cu130.glob("*.py")):
        found = metadata(script.read_text())
        assert found["requires-python"] == "==3.12.*", script.name
        assert "3.12.3" in SpecifierSet(str(found["requires-python"]))
        read = uv_reads(script)
        said = read.stdout + read.stderr
        assert "parse error" not in said and "Failed to parse" not in said, said
        assert read.returncode == 0 or "No interpreter found for Python ==3.12.*" in said, said  # 3.12 is not here: it read it
    for report in sorted(cu130.glob("*.md")):
        if report.name != "index.md":
            assert "| python | 3.12.3 |\n" in report.read_text()


def test_the_torch_build_is_named_and_its_index_is_in_the_script(cu130: Path) -> None:
    [load] = [p for p in cu130.glob("accelerate-*.md")]
    body = load.read_text()
    assert "| torch | 2.11.0+cu130 |\n" in body and "| CUDA | 13.0 |\n" in body
    assert "It ran with torch 2.11.0+cu130, the PyTorch index's build for CUDA 13.0" in body
    script = load.with_suffix(".py").read_text()
    uv = metadata(script)["tool"]["uv"]  # type: ignore[index]
    assert uv["index"] == [{"name": "pytorch-cu130", "url": "https://download.pytorch.org/whl/cu130", "explicit": True}]
    assert uv["sources"] == {"torch": {"index": "pytorch-cu130"}}
    assert "torch==2.11.0" in metadata(script)["dependencies"]  # type: ignore[operator]
    # how to run it on a machine without that GPU: the same release's CPU build
    sed = f"sed 's#whl/cu130\"#whl/cpu\"#' {load.stem}.py > {load.stem}-cpu.py && uv run {load.stem}-cpu.py"
    assert sed in script and f"`{sed}`" in body
    # the GPU scenario's repro says the failure needs the GPU
    [gpu] = [p for p in cu130.glob("transformers-3cd5b34c5c70.py")]
    assert "The failure needs the GPU: the scenario needs 1 GPU(s) (its REQUIRES)" in gpu.read_text()


# -- the real one trips -------------------------------------------------------------------------------
def _missing() -> str:
    folder = os.environ.get("PIP_FIND_LINKS", "")
    if not folder or not list(Path(folder).glob("torch-2.13.0+cpu-cp311-*.whl")):
        return "needs PIP_FIND_LINKS naming a folder with the CPU torch 2.13.0 wheel for Python 3.11"
    try:
        uv_binary()
    except FileNotFoundError as exc:
        return f"needs uv: {exc}"
    try:
        urllib.request.urlopen("https://pypi.org/simple/peft/", timeout=15).close()
    except OSError as exc:
        return f"needs the index (PyPI) for the transformers, accelerate, peft and bitsandbytes releases: {exc}"
    return ""


def on_this_cpu(script: str) -> str:
    """The script with torch's CPU build here (2.13.0, Python 3.11) in place of the runner's torch 2.11.0 and
    Python 3.12, without the runner's held packages (numpy 2.5.2 needs Python 3.12)."""
    assert '# requires-python = "==3.12.*"' in script and '#     "torch==2.11.0",' in script
    script = script.replace('# requires-python = "==3.12.*"', '# requires-python = "==3.11.*"')
    script = script.replace('#     "torch==2.11.0",', '#     "torch==2.13.0",')
    return re.sub(r"(?ms)^#\n# \[tool\.uv\]\n.*?^# \]\n", "", script, count=1)


def uv_run(script: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UV_FIND_LINKS": os.environ["PIP_FIND_LINKS"], "NO_COLOR": "1", "UV_NO_PROGRESS": "1", "UV_PYTHON": sys.executable}
    command = [uv_binary(), "run", "--isolated", "--no-sources", script.name]
    return subprocess.run(command, cwd=script.parent, capture_output=True, text=True, timeout=1500, env=env)


def test_the_real_one_trips_repros_parse_and_run_here_with_the_cpu_build(tmp_path: Path) -> None:
    assert len(TRIPS) >= 5
    written = reports(merged(tmp_path, *TRIPS), tmp_path / "here")
    scripts = sorted(written.glob("*.py"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        found = metadata(text)
        assert found["requires-python"] == "==3.12.*" and "torch==2.11.0" in found["dependencies"]  # type: ignore[operator]
        assert "tool" not in found or "sources" not in found["tool"]["uv"]  # type: ignore[index,operator]  # PyPI's build: no index
        assert not any(folder in text for folder in RUNNER_FOLDERS), script.name
    missing = _missing()
    if missing:
        pytest.skip(missing)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the GPU scenario's KeyError: on a CPU it says it needs a GPU, as its docstring says
    gpu = elsewhere / "gpu.py"
    gpu.write_text(on_this_cpu((written / "transformers-3cd5b34c5c70.py").read_text()))
    proc = uv_run(gpu)
    assert proc.returncode == 125, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "repro: not applicable (needs 1 CUDA device(s)" in proc.stdout
    # the split 4-bit load needs no GPU: the runner's failure, on this CPU
    cpu = elsewhere / "load.py"
    cpu.write_text(on_this_cpu((written / "accelerate-6c43cf7c6f32.py").read_text()))
    proc = uv_run(cpu)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-2:] == [f"signature: {LOAD_SIG}", "repro: fails with the reported signature"]
    shutil.rmtree(elsewhere)
