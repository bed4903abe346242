"""A team's pytest suite through the real CLI on real cells (uv envs of two packaging releases,
pytest installed in each as the suite needs): every node id stored with its status, resumed
without running a test twice, and the same from the matrix's [tests] table."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO, run_cli
from tests.integration.test_testsuite_worker import EXPECTED, FILE

SUITE = REPO / "tests" / "data" / "team_suite"
MATRIX = """
[matrix]
python = "3.11"
timeout = 3

[axes]
packaging = ["23.2", "24.0"]
"""


def _outcomes(db: Path) -> list[dict]:
    return [r for r in (json.loads(line) for line in db.read_text().splitlines() if line.strip()) if r["type"] == "outcome"]


def test_a_suite_swept_over_two_cells_one_outcome_per_test(tmp_path: Path, env_root: Path) -> None:
    (tmp_path / "m.toml").write_text(MATRIX)
    db = tmp_path / "out.jsonl"
    args = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    proc = run_cli(*args, "--tests", FILE, "--tests-root", str(SUITE))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    rows = _outcomes(db)
    cells = {r["cell_id"] for r in rows}
    assert len(cells) == 2
    for cell in cells:
        got = {r["scenario"].removeprefix(FILE + "::"): (r["status"], r["message"]) for r in rows if r["cell_id"] == cell}
        assert got == EXPECTED
    library = next(r for r in rows if r["scenario"].endswith("test_library_error"))
    assert library["blamed_library"] == "packaging" and library["signature"].startswith("InvalidVersion: Invalid version:")

    # a rerun of the same run resumes: nothing computed again, nothing stored twice
    again = run_cli(*args, "--tests", FILE, "--tests-root", str(SUITE))
    assert again.returncode == 0, again.stderr
    assert "0 outcome(s) computed" in again.stdout
    assert len(_outcomes(db)) == len(rows)


def test_the_matrix_tests_table_selects_like_the_command_line(tmp_path: Path, env_root: Path) -> None:
    table = f'\n[tests]\nroot = "{SUITE}"\npaths = ["{FILE}"]\nk = "param"\nrequirements = ["iniconfig"]\n'
    (tmp_path / "m.toml").write_text(MATRIX + table)
    db = tmp_path / "out.jsonl"
    args = ["--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    proc = run_cli("sweep", *args)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    got = sorted({(r["scenario"].removeprefix(FILE + "::"), r["status"]) for r in _outcomes(db)})
    assert got == [("test_param[1]", "pass"), ("test_param[2]", "pass"), ("test_param[3]", "fail")]
    cells = [json.loads(line) for line in db.read_text().splitlines() if '"type": "cell"' in line]
    assert cells and all("iniconfig" in c["freeze"] and "pytest" in c["freeze"] for c in cells)  # the suite's needs, never axes
    assert all(set(c["versions"]) == {"packaging"} for c in cells)


def test_the_sweeps_own_refinement_runs_the_tests_it_narrows(tmp_path: Path, env_root: Path) -> None:
    # packaging 23.2 and 24.1 tested; 24.0 lies between and changed Metadata's absent fields:
    # the sweep's refinement builds 24.0 and runs just the tests whose range it narrows, at once
    (tmp_path / "m.toml").write_text(MATRIX.replace('["23.2", "24.0"]', '["23.2", "24.1"]'))
    db = tmp_path / "out.duckdb"
    args = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress"]
    proc = run_cli(*args, "--tests", "checks/check_versions.py", "--tests-root", str(SUITE))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    text = " ".join(proc.stdout.split())
    # the env root is shared with other tests: 24.0's env may be there already (built or reused)
    assert "refinement: 1 probe cell(s) on 1 line(s) in 1 round(s)," in text, text[-2000:]
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        probe = sorted(con.sql("SELECT scenario, status FROM outcomes WHERE cell_id = 'packaging24.0'").fetchall())
    # the three tests whose answer changes, nothing else (test_version_parses passes everywhere)
    assert probe == [
        ("checks/check_versions.py::test_absent_field_reads_as_empty_text[author]", "fail"),
        ("checks/check_versions.py::test_absent_field_reads_as_empty_text[summary]", "fail"),
        ("checks/check_versions.py::test_metadata_optional_fields_default_to_none", "pass"),
    ]
    assert "fixed in packaging 24.0 (after 23.2)" in text and "introduced in packaging 24.0 (after 23.2)" in text


def test_harness_refine_over_a_results_file_runs_the_recorded_suites_tests(tmp_path: Path, env_root: Path) -> None:
    (tmp_path / "m.toml").write_text(MATRIX.replace('["23.2", "24.0"]', '["23.2", "24.1"]'))
    db = tmp_path / "out.duckdb"
    args = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    assert run_cli(*args, "--tests", "checks/check_versions.py", "--tests-root", str(SUITE)).returncode == 0
    # the file alone says which suite ran: refine builds 24.0 and runs its tests there
    proc = run_cli("refine", "--db", str(db), "--matrix", str(tmp_path / "m.toml"), "--env-root", str(env_root))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    text = " ".join(proc.stdout.split())
    assert "1 probe cell(s)" in text and "fixed in packaging 24.0 (after 23.2)" in text, text[-2000:]
