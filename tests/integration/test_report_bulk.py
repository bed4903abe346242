"""`harness report --all`, `--repro` and `--test` through the real CLI over a real DuckDB file (#39).

The file is test_pin_report_cli's: the thread's `_is_hf_initialized` failure of the split 4-bit
load (accelerate 1.13.0 fails, 1.14.0 passes) and the broad-targets LoRA that fails everywhere,
in a temporary folder, so any path of it in what the report writes is a leak.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.integration.test_pin_report_cli import BROAD, LOAD, SIG, cell_id, db  # noqa: F401  (db: the fixture)

BLOCK = re.compile(r"(?m)^# /// script$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


def block(script: str) -> dict[str, object]:
    content = BLOCK.search(script)
    assert content is not None
    return tomllib.loads("".join(line[2:] if line.startswith("# ") else line[1:] for line in content["content"].splitlines(True)))


def test_all_writes_one_report_per_failure_an_index_and_the_repros(db: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "reports"
    proc = run_cli("report", "--db", str(db), "--all", "--repro", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote 2 report(s) and 3 repro script(s) into {out}; the index: {out / 'index.md'}"
    load, broad = "accelerate-6c43cf7c6f32", "peft-0d1e2f3a4b5c"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["index.md", f"{load}.md", f"{load}.py", f"{load}-passing.py", f"{broad}.md", f"{broad}.py"]
    )  # the broad-targets failure passes nowhere: no passing twin
    index = (out / "index.md").read_text()
    assert index.startswith("# Failures in `compat.duckdb`\n\n2 failure families, one report each")
    assert f"| [{load}]({load}.md) | huggingface/accelerate | `{SIG}` | 1 | 2 | fixed in accelerate 1.14.0 (after 1.13.0) |" in index
    assert f"| [{broad}]({broad}.md) | huggingface/peft |" in index and "| 1 | 6 | no exact answer |" in index
    report = (out / f"{load}.md").read_text()
    assert f"uv run {load}-passing.py   # accelerate 1.14.0 instead of 1.13.0: passes (exit 0)" in report
    # nothing of this machine in anything written: the results file lies in the test's temporary folder
    for path in out.iterdir():
        assert str(tmp_path) not in path.read_text() and "/tmp/" not in path.read_text(), path.name


def test_the_repro_of_a_scenario_carries_its_code_and_helpers_and_pins_the_set(db: Path, tmp_path: Path) -> None:  # noqa: F811
    repro = tmp_path / "issue" / "repro.py"
    proc = run_cli("report", "--db", str(db), "--signature", "_is_hf_initialized", "--repro", str(repro))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"wrote {repro}, {repro.with_name('repro-passing.py')}: `uv run repro.py` reproduces it"
    script, twin = repro.read_text(), repro.with_name("repro-passing.py").read_text()
    failing, passing = block(script), block(twin)
    pins = ["torch==2.13.0", "transformers==5.23.0", "accelerate=={}", "peft==0.19.1", "bitsandbytes==0.49.2"]
    assert failing["dependencies"] == [p.format("1.13.0") for p in pins]
    assert passing["dependencies"] == [p.format("1.14.0") for p in pins]
    held = failing["tool"]["uv"]["constraint-dependencies"]  # type: ignore[index]
    assert "numpy==2.4.6" in held and not any(c.startswith(("torch", "accelerate")) for c in held)
    # the CPU build that ran it, from the PyTorch index (explicit: for torch only), or from a folder of wheels
    assert failing["tool"]["uv"]["sources"] == {"torch": {"index": "pytorch-cpu"}}  # type: ignore[index]
    assert "UV_FIND_LINKS=/path/to/wheels uv run --no-sources repro.py" in script
    # the scenario, inlined with every helper it imports (the kit, the tiny Gemma 4, the offload helpers)
    files = re.findall(r'^    "([^"]+)": r', script, re.MULTILINE)
    assert files == [f"{LOAD}.py", "_gemma4.py", "_kit.py", "_offload.py"]
    assert f'SIGNATURE = "{SIG}"' in script and "SETUP = True" in script
    assert str(tmp_path) not in script and "/opt/wheels" not in script
    # the report printed on stdout shows the same script, collapsed
    assert f"```python\n{script.rstrip()}\n```" in proc.stdout


def test_a_test_that_never_failed_and_a_repro_of_a_cell_are_bad_input(db: Path, tmp_path: Path) -> None:  # noqa: F811
    proc = run_cli("report", "--db", str(db), "--test", "tests/test_x.py::test_y")
    assert proc.returncode == 2 and proc.stderr.startswith("harness: error: --test 'tests/test_x.py::test_y' never failed in")


#: (arguments after `report --db DB`, a fragment of the one line); each is bad input: exit 2, nothing written
BAD = [
    pytest.param(["--all"], "--all writes every failure's report into a folder: pass --out DIR", id="all-without-out"),
    pytest.param(["--all", "--out", "{tmp}/r", "--signature", "x"], "nothing else", id="all-with-a-signature"),
    pytest.param(["--all", "--out", "{tmp}/r", "--repro", "{tmp}/x.py"], "--repro, without FILE", id="all-with-a-repro-file"),
    pytest.param(["--cell", cell_id("5.6.2", "1.13.0"), "--repro", "{tmp}/x.py"], "pass --signature or --test with it", id="cell-repro"),
    pytest.param(["--signature", "_is_hf", "--repro"], "--repro without FILE writes the script beside --out", id="repro-nowhere"),
    pytest.param(["--signature", "x", "--cell", "y"], "pass exactly one of --signature", id="signature-and-cell"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD)
def test_bad_input_is_one_line_and_exit_2(db: Path, tmp_path: Path, args: list[str], fragment: str) -> None:  # noqa: F811
    proc = run_cli("report", "--db", str(db), *(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: ") and fragment in lines[0], proc.stderr
    assert proc.stdout == "" and not (tmp_path / "r").exists() and not (tmp_path / "x.py").exists()
