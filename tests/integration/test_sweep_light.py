"""The whole sweep path on real, light cells: real uv envs (packaging as the axis), real
scenario processes, a real DuckDB file, through the real CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import duckdb
import pytest

from tests.conftest import run_cli

SCENARIOS = {
    "ok": "import packaging\nprint('fine', packaging.__version__)\n",
    "keyerror": "shared = {}\nshared[22]\n",
    "segfault": "import ctypes\nctypes.string_at(0)\n",
    "hard_exit": "import os\nos._exit(3)\n",
    "hang": "import time\ntime.sleep(600)\n",
    "memory": "x = bytearray(10**14)\n",
    "flood": "import sys\nfor _ in range(50):\n    sys.stdout.write('y' * (2**20 - 1) + '\\n')\nprint('END-OF-FLOOD')\n",
    "check_fails": "from _kit import check, metric\nmetric('parity', 0.25)\ncheck(False, 'merged output differs by 0.25')\n",
    "needs_new_packaging": "REQUIRES = {'packages': {'packaging': '>=24'}}\nprint('ran')\n",
}
EXPECTED = {
    "ok": "pass",
    "keyerror": "error",
    "segfault": "crash",
    "hard_exit": "crash",
    "hang": "timeout",
    "memory": "oom",
    "flood": "pass",
    "check_fails": "fail",
}


def write_scenarios(folder: Path) -> list[str]:
    folder.mkdir(exist_ok=True)
    paths = []
    for name, body in SCENARIOS.items():
        header = "TIMEOUT = 4\n" if name == "hang" else ""
        path = folder / f"{name}.py"
        path.write_text(header + body)
        paths.append(str(path))
    return paths


def write_matrix(path: Path, versions: list[str], isolation: str = "fork") -> Path:
    quoted = ", ".join(f'"{v}"' for v in versions)
    path.write_text(
        textwrap.dedent(f"""
        [matrix]
        python = "3.11"
        timeout = 60
        isolation = "{isolation}"
        preload = []

        [axes]
        packaging = [{quoted}]
    """)
    )
    return path


@pytest.fixture(scope="module")
def light_sweep(tmp_path_factory: pytest.TempPathFactory, env_root: Path) -> tuple[Path, Path, list[str]]:
    work = tmp_path_factory.mktemp("light")
    matrix = write_matrix(work / "matrix.toml", ["23.2", "24.0"])
    scenarios = write_scenarios(work / "scen")
    db = work / "out.duckdb"
    args = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress"]
    for s in scenarios:
        args += ["--scenario", s]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return db, matrix, args


def outcomes(db: Path) -> dict[tuple[str, str], dict]:
    con = duckdb.connect(str(db), read_only=True)
    cur = con.execute("SELECT * FROM outcomes_v")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    con.close()
    return {(json.loads(r["installed"])["packaging"], r["scenario"]): r for r in rows}


@pytest.mark.parametrize("scenario,status", sorted(EXPECTED.items()))
def test_each_failure_mode_gets_its_own_status(light_sweep: tuple[Path, Path, list[str]], scenario: str, status: str) -> None:
    rows = outcomes(light_sweep[0])
    for version in ("23.2", "24.0"):
        assert rows[(version, scenario)]["status"] == status, rows[(version, scenario)]


def test_versions_in_the_view_come_from_the_real_env(light_sweep: tuple[Path, Path, list[str]]) -> None:
    rows = outcomes(light_sweep[0])
    assert {v for v, _ in rows} == {"23.2", "24.0"}
    con = duckdb.connect(str(light_sweep[0]), read_only=True)
    tails = dict(con.execute("SELECT cell_id, output_tail FROM outcomes WHERE scenario = 'ok'").fetchall())
    con.close()
    # the scenario printed the version it imported: each env really has its own release
    assert tails == {"packaging23.2": "fine 23.2\n", "packaging24.0": "fine 24.0\n"}


def test_signature_names_the_exception_and_masks_the_key(light_sweep: tuple[Path, Path, list[str]]) -> None:
    row = outcomes(light_sweep[0])[("24.0", "keyerror")]
    assert row["signature"] == "KeyError: <key>"
    assert row["exception_type"] == "KeyError"


def test_crashes_keep_the_signal_and_the_exit_code(light_sweep: tuple[Path, Path, list[str]]) -> None:
    rows = outcomes(light_sweep[0])
    assert rows[("24.0", "segfault")]["signature"].startswith("crash: SIGSEGV")
    assert rows[("24.0", "hard_exit")]["signature"] == "crash: exit <n>"
    assert "3" in rows[("24.0", "hard_exit")]["message"]


def test_flood_keeps_only_a_bounded_tail(light_sweep: tuple[Path, Path, list[str]]) -> None:
    con = duckdb.connect(str(light_sweep[0]), read_only=True)
    tail = con.execute("SELECT output_tail FROM outcomes WHERE scenario = 'flood' LIMIT 1").fetchone()[0]
    con.close()
    assert tail.rstrip().endswith("END-OF-FLOOD")
    assert len(tail) < 64 * 1024


def test_check_failure_keeps_its_metric(light_sweep: tuple[Path, Path, list[str]]) -> None:
    row = outcomes(light_sweep[0])[("24.0", "check_fails")]
    assert '"parity": 0.25' in row["metrics"]
    assert "merged output differs" in row["message"]


def test_requirements_make_old_cells_not_applicable(light_sweep: tuple[Path, Path, list[str]]) -> None:
    rows = outcomes(light_sweep[0])
    assert rows[("23.2", "needs_new_packaging")]["status"] == "not_applicable"
    assert "packaging>=24" in rows[("23.2", "needs_new_packaging")]["message"]
    assert rows[("24.0", "needs_new_packaging")]["status"] == "pass"


def test_the_exact_freeze_is_stored_with_the_cell(light_sweep: tuple[Path, Path, list[str]]) -> None:
    con = duckdb.connect(str(light_sweep[0]), read_only=True)
    rows = con.execute("SELECT cell_id, installed->>'packaging', env_status FROM cells ORDER BY cell_id").fetchall()
    con.close()
    assert rows == [("packaging23.2", "23.2", "ready"), ("packaging24.0", "24.0", "ready")]


def test_rerun_resumes_and_recomputes_nothing(light_sweep: tuple[Path, Path, list[str]]) -> None:
    db, _, args = light_sweep
    before = len(outcomes(db))
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert "0 outcome(s) computed" in proc.stdout
    assert len(outcomes(db)) == before


def test_process_isolation_gives_the_same_statuses(tmp_path: Path, env_root: Path) -> None:
    matrix = write_matrix(tmp_path / "matrix.toml", ["24.0"], isolation="process")
    scenarios = write_scenarios(tmp_path / "scen")
    db = tmp_path / "p.duckdb"
    args = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress"]
    for name in ("segfault", "hang", "memory", "keyerror"):
        args += ["--scenario", next(s for s in scenarios if s.endswith(f"/{name}.py"))]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    rows = outcomes(db)
    assert {s: r["status"] for (_, s), r in rows.items()} == {"segfault": "crash", "hang": "timeout", "memory": "oom", "keyerror": "error"}


def test_the_matrix_scenarios_key_chooses_what_runs(tmp_path: Path) -> None:
    # the GPU runner's matrices name their scenarios; without --scenario, those run, not all
    from harness.running.plan import SweepOptions, plan

    matrix = tmp_path / "m.toml"
    scenarios = '["gemma4_lora_inner_linear", "gpu_attn_sdpa_load"]'
    matrix.write_text(f'[matrix]\npython = "3.11"\nscenarios = {scenarios}\n\n[axes]\npackaging = ["24.0"]\n')
    chosen = plan(SweepOptions(matrix, tmp_path / "out.duckdb")).scenarios
    assert sorted(s.name for s in chosen) == ["gemma4_lora_inner_linear", "gpu_attn_sdpa_load"]
    named = plan(SweepOptions(matrix, tmp_path / "out.duckdb", scenarios=["gemma4_lora_broad_targets"])).scenarios
    assert [s.name for s in named] == ["gemma4_lora_broad_targets"]  # the command line's win
