"""The known-good set per machine class through the real CLI: `harness summary` and `harness pin` over a
DuckDB file holding a CPU run and a one-GPU run, and `harness pin --test` over a team's suite swept on
real cells.

The store: transformers 5.6.2 / 5.23.0 on each machine. `cpu_roundtrip` runs on the CPU only (not
applicable on the GPU), `gpu_generate` on the GPU only (not applicable on the CPU); `shared` runs on
both and fails with 5.23.0 on the GPU alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage.store import Store
from tests.conftest import REPO, run_cli

CPU_RUN, GPU_RUN = "r-cpu", "r-gpu"
CPU_HOST = {"platform": "linux-x86_64", "gpu": "cpu", "gpu_count": 0, "gpus": []}
GPU_HOST = {"platform": "linux-x86_64", "gpu": "NVIDIA H200", "gpu_count": 1, "gpus": [{"name": "NVIDIA H200"}]}
SIG = "RuntimeError: expected all tensors on one device @ transformers/generation/utils.py:generate"
#: (run, transformers, scenario) -> status; everything not listed passes
STATUSES = {
    (CPU_RUN, "5.6.2", "gpu_generate"): Status.NOT_APPLICABLE,
    (CPU_RUN, "5.23.0", "gpu_generate"): Status.NOT_APPLICABLE,
    (GPU_RUN, "5.6.2", "cpu_roundtrip"): Status.NOT_APPLICABLE,
    (GPU_RUN, "5.23.0", "cpu_roundtrip"): Status.NOT_APPLICABLE,
    (GPU_RUN, "5.23.0", "shared"): Status.ERROR,
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "both.duckdb"
    settings = {"python": "3.12", "find_links": [], "index_url": "", "extra_index_urls": [], "no_index": False}
    with Store(path) as store:
        for run, host, torch, started in (
            (CPU_RUN, CPU_HOST, "2.13.0+cpu", "2026-11-21T10:00:00"),
            (GPU_RUN, GPU_HOST, "2.11.0+cu130", "2026-11-22T10:00:00"),
        ):
            store.ensure_run(run, "matrix.toml", "[axes]", settings, "0.1.0", host)
            for tf in ("5.6.2", "5.23.0"):
                versions = {"torch": torch.split("+")[0], "transformers": tf}
                cell = f"torch{torch}-tf{tf}"
                freeze = {"torch": torch, "transformers": tf, "numpy": "2.4.6"}
                store.record_cell(CellRecord(run, cell, "3.12", versions, [], freeze, {}, {}, "ready", "", 1.0, False))
                for scenario in ("cpu_roundtrip", "gpu_generate", "shared"):
                    status = STATUSES.get((run, tf, scenario), Status.PASS)
                    failing = status == Status.ERROR
                    message = (
                        "needs 1 GPU(s); this runner has 0" if status == Status.NOT_APPLICABLE else SIG.split(" @ ")[0] if failing else ""
                    )
                    outcome = Outcome(run, cell, scenario, 0, status, message=message, signature=SIG if failing else "", started_at=started)
                    store.add_outcome(outcome)
    return path


def test_the_summary_prints_one_known_good_set_per_machine(db: Path) -> None:
    proc = run_cli("summary", str(db))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    block = text[text.index("Known-good set per machine") : text.index("Grid")].splitlines()
    # the GPU scenario does not count against the CPU's set, nor the CPU one against the GPU's:
    # each machine's newest set passes everything that passes on it
    assert block[1:] == [
        "  cpu",
        "    torch 2.13.0+cpu, transformers 5.23.0",
        "    passes 2 of the 2 scenario(s) that pass somewhere on it (1 not applicable there), in cell",
        "    torch2.13.0+cpu-tf5.23.0",
        "  1x NVIDIA H200",
        "    torch 2.11.0+cu130, transformers 5.6.2",
        "    passes 2 of the 2 scenario(s) that pass somewhere on it (1 not applicable there), in cell",
        "    torch2.11.0+cu130-tf5.6.2",
        "",
    ]


#: (pin's arguments after --db, exit status, a line of its output): the machine is the newest run's unless named
PINS = [
    pytest.param(["--scenario", "shared"], 0, "  transformers  5.6.2", id="default-is-the-newest-run-gpu"),
    pytest.param(["--scenario", "shared"], 0, "constraints: machine 1x NVIDIA H200)", id="default-names-the-machine"),
    pytest.param(["--scenario", "shared", "--machine", "cpu"], 0, "  transformers  5.23.0", id="cpu"),
    pytest.param(["--scenario", "cpu_roundtrip", "--machine", "CPU"], 0, "  transformers  5.23.0", id="case-does-not-matter"),
    pytest.param(["--scenario", "gpu_generate", "--machine", "1xh200"], 0, "  transformers  5.23.0", id="gpu-short-name"),
    # pooled, the old way: the CPU cells lack a pass of gpu_generate and the GPU cells of cpu_roundtrip
    pytest.param(["--scenario", "gpu_generate", "--scenario", "cpu_roundtrip", "--machine", "any"], 1, "nothing passes", id="any-pools"),
]


@pytest.mark.parametrize(("args", "code", "line"), PINS)
def test_pin_chooses_on_one_machine(db: Path, args: list[str], code: int, line: str) -> None:
    proc = run_cli("pin", "--db", str(db), *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert any(line in out for out in proc.stdout.splitlines()), proc.stdout


#: (pin's arguments after --db, fragments of its one-line error): exit 2, nothing written
BAD = [
    pytest.param(
        ["--scenario", "shared", "--machine", "h100"],
        ["--machine 'h100' is not a machine class", "classes: cpu, 1x NVIDIA H200, or any"],
        id="unknown-machine",
    ),
    pytest.param(
        ["--scenario", "gpu_generate", "--machine", "cpu"],
        ["'gpu_generate' not applicable on machine cpu", "it runs on 1x NVIDIA H200"],
        id="scenario-not-applicable-there",
    ),
    pytest.param(
        ["--test", "tests/test_nothing.py"], ["--test 'tests/test_nothing.py' selects no stored test", "no test node ids"], id="no-tests"
    ),
    pytest.param(["--scenario", "shared", "-m", "gpu"], ["stores no markers", "sweep the suite again"], id="marker"),
]


@pytest.mark.parametrize(("args", "fragments"), BAD)
def test_a_bad_machine_or_selection_is_one_line_and_exit_2(db: Path, tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    out = tmp_path / "pins"
    proc = run_cli("pin", "--db", str(db), *args, "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), proc.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    assert proc.stdout == "" and not out.exists()


# -- a team's suite -------------------------------------------------------------------------------
SUITE = REPO / "tests" / "data" / "team_suite"
FILE = "checks/check_sample.py"
MATRIX = """
[matrix]
python = "3.11"
timeout = 3

[axes]
packaging = ["23.2", "24.0"]
"""


def test_pin_over_tests_of_a_swept_suite(tmp_path: Path, env_root: Path) -> None:
    (tmp_path / "m.toml").write_text(MATRIX)
    db = tmp_path / "suite.duckdb"
    sweep = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    proc = run_cli(*sweep, "--tests", FILE, "--tests-root", str(SUITE))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]

    # a test with all its parametrizations: [3] fails in both cells
    proc = run_cli("pin", "--db", str(db), "--test", f"{FILE}::test_param", "--json")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["scenarios"] == [f"{FILE}::test_param[{i}]" for i in (1, 2, 3)] and result["selection"] == [f"{FILE}::test_param"]
    assert result["failing"] == {f"{FILE}::test_param[3]": 2}

    # two tests that pass in both cells: the newest packaging
    proc = run_cli("pin", "--db", str(db), "--test", f"{FILE}::test_fixture", "--test", f"{FILE}::test_param[1]")
    assert proc.returncode == 0, proc.stderr
    assert "  packaging  24.0" in proc.stdout.splitlines()
    assert f"  selected by {FILE}::test_fixture, {FILE}::test_param[1]" in proc.stdout.splitlines()

    # the whole file: the skipped and xfail tests are left out (never evidence here), the failing ones block
    proc = run_cli("pin", "--db", str(db), "--test", FILE, "--json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and not result["found"]
    assert {f"{FILE}::test_skipped", f"{FILE}::test_xfail", f"{FILE}::test_xpass"} <= set(result["left_out"])
    assert f"{FILE}::test_skipped" not in result["scenarios"] and f"{FILE}::test_param[3]" in result["scenarios"]

    # a test skipped everywhere on this machine: nothing to pin
    proc = run_cli("pin", "--db", str(db), "--test", f"{FILE}::test_skipped")
    assert proc.returncode == 2 and "none of which passed or failed on machine cpu" in proc.stderr

    # by marker, as pytest's -m reads it: the stored markers of each test
    proc = run_cli("pin", "--db", str(db), "-m", "slowish", "--json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["scenarios"] == [f"{FILE}::test_hang", f"{FILE}::test_segfault"], proc.stdout
    proc = run_cli("pin", "--db", str(db), "-m", "not slowish and not xfail", "--test", f"{FILE}::test_param[1]", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["scenarios"] == [f"{FILE}::test_param[1]"], proc.stdout + proc.stderr
    # the text names the selection as typed, not the node ids it expands to
    proc = run_cli("pin", "--db", str(db), "-m", "slowish")
    assert "  selected by -m 'slowish'" in proc.stdout.splitlines(), proc.stdout
    proc = run_cli("pin", "--db", str(db), "-m", "slowish and (")
    assert proc.returncode == 2 and "is not a marker expression" in proc.stderr
