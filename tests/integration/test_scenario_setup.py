"""A scenario that declares a SETUP passes only after `_kit.reached()` confirmed it: real cells,
real scenario processes, the real CLI and DuckDB file.

The light scenarios run in a cell whose only axis is `packaging`; the last test runs the real
gemma4_peft_split_4bit_load with a memory budget that offloads nothing, in the newest CPU cell
of matrix.toml (built like tests/integration/test_forum_scenarios_cpu.py)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO, run_cli
from tests.integration.test_sweep_light import write_matrix

SETUP = "a layer is offloaded"

#: scenario -> (body after `SETUP = ...`, expected status, a fragment of the stored message)
LIGHT = {
    # the state is measured, found missing: inconclusive, saying which state and what was seen
    "misses_setup": (
        "from _kit import metric, reached\nmetric('offloaded_layers', 0)\nreached(False, '0 of 4 layers offloaded')\nprint('checked')\n",
        "inconclusive",
        f"did not reach its setup: {SETUP} (0 of 4 layers offloaded)",
    ),
    # ends without ever confirming its state: no pass, whatever the script did
    "never_confirms": ("print('checked something')\n", "inconclusive", f"never confirmed its setup ({SETUP})"),
    "reaches_setup": ("from _kit import check, reached\nreached(True, 'irrelevant')\ncheck(True, 'unused')\n", "pass", ""),
    # a confirmed setup does not soften the check that follows it
    "reaches_then_fails": ("from _kit import check, reached\nreached(True)\ncheck(False, 'parity off by 0.5')\n", "fail", "parity off"),
    # a failure before the state is reached stays a failure: only passes need the confirmation
    "errors_before_setup": ("shared = {}\nshared[22]\n", "error", "KeyError"),
    # confirmed after the load, lost after a re-dispatch: the later miss decides
    "loses_setup": (
        "from _kit import reached\nreached(True)\nreached(False, 'the re-dispatch moved it back')\n",
        "inconclusive",
        "(the re-dispatch moved it back)",
    ),
}
#: scenario -> value of the `setup_reached` metric
SETUP_METRIC = {"misses_setup": False, "reaches_setup": True, "reaches_then_fails": True, "loses_setup": False}


def _rows(db: Path) -> dict[tuple[str, str], dict]:
    con = duckdb.connect(str(db), read_only=True)
    cur = con.execute("SELECT cell_id, scenario, status, message, metrics FROM outcomes")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    con.close()
    return {(r["cell_id"], r["scenario"]): r for r in rows}


@pytest.fixture(scope="module")
def light_setups(tmp_path_factory: pytest.TempPathFactory, env_root: Path) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("setups")
    matrix = write_matrix(work / "matrix.toml", ["24.0"])
    folder = work / "scen"
    folder.mkdir()
    db = work / "out.duckdb"
    args = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress"]
    for name, (body, _, _) in LIGHT.items():
        path = folder / f"{name}.py"
        path.write_text(f"SETUP = {SETUP!r}\n{body}")
        args += ["--scenario", str(path)]
    # the control: no SETUP, no confirmation, a plain pass
    (folder / "no_setup.py").write_text("print('plain')\n")
    args += ["--scenario", str(folder / "no_setup.py")]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    return {scenario: row for (_, scenario), row in _rows(db).items()}


@pytest.mark.parametrize("scenario", sorted(LIGHT))
def test_status_and_reason_follow_the_setup(light_setups: dict[str, dict], scenario: str) -> None:
    _, status, fragment = LIGHT[scenario]
    row = light_setups[scenario]
    assert row["status"] == status, row
    assert fragment in row["message"], row["message"]


@pytest.mark.parametrize("scenario", sorted(SETUP_METRIC))
def test_the_confirmation_is_a_stored_metric(light_setups: dict[str, dict], scenario: str) -> None:
    metrics = json.loads(light_setups[scenario]["metrics"])
    assert metrics["setup_reached"] is SETUP_METRIC[scenario]


def test_numbers_behind_a_missed_setup_are_kept(light_setups: dict[str, dict]) -> None:
    assert json.loads(light_setups["misses_setup"]["metrics"])["offloaded_layers"] == 0


def test_a_scenario_without_setup_passes_as_before(light_setups: dict[str, dict]) -> None:
    assert light_setups["no_setup"]["status"] == "pass"


NEWEST = "torch2.13.0-tf5.23.0-acc1.15.0-peft0.21.2-bnb0.49.2"

# The real scenario's code, with PEFT's memory budget at ten times the model: its re-dispatch
# offloads nothing, which before SETUP was `not_applicable` and is now `inconclusive`.
ROOMY_BUDGET = '''
"""gemma4_peft_split_4bit_load with a memory budget the whole model fits in."""
SETUP = "PEFT's re-dispatch offloaded a 4-bit layer"
REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "accelerate": ">=1.14", "bitsandbytes": ">=0.49.0"}}
TIMEOUT = 120

import _offload
from gemma4_peft_split_4bit_load import main

_offload.MEMORY_BUDGET = 10.0
main()
'''


@pytest.mark.skipif(not os.environ.get("PIP_FIND_LINKS"), reason="needs PIP_FIND_LINKS naming a folder with a CPU torch wheel")
def test_a_real_scenario_that_offloads_nothing_is_inconclusive(tmp_path: Path) -> None:
    path = tmp_path / "gemma4_split_load_roomy_budget.py"
    path.write_text(textwrap.dedent(ROOMY_BUDGET).lstrip())
    db = tmp_path / "roomy.duckdb"
    proc = run_cli("sweep", "--db", str(db), "--no-progress", "--cell", NEWEST, "--scenario", str(path), cwd=REPO, timeout=1800)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    row = _rows(db)[(NEWEST, path.stem)]
    assert row["status"] == "inconclusive", row
    setup = "PEFT's re-dispatch offloaded a 4-bit layer"
    assert row["message"] == f"did not reach its setup: {setup} (the memory budget offloaded no 4-bit layer)"
    metrics = json.loads(row["metrics"])
    # the numbers behind the verdict: the load ran, and put no 4-bit weight on the offload tier
    assert metrics["params4bit"] > 0 and metrics["offloaded_params4bit"] == 0 and metrics["setup_reached"] is False
