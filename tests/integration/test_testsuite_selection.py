"""No silent empty run, and collection errors that say what failed (issue #28, items 3 and 4),
through the real CLI: an -k/-m pytest refuses is bad input (exit 2, one line, nothing stored),
found before any env is built where pytest imports in the harness, else by the cell's own
collection; a selection that keeps no test fails the sweep unless allowed; a test file that
cannot be imported is stored with its SyntaxError or ModuleNotFoundError, file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.inputs.matrix import parse_matrix_lenient
from tests.conftest import run_cli
from tests.integration.test_testsuite_sweep import SUITE
from tests.integration.test_testsuite_worker import FILE

#: One cheap cell (its env is shared with the other suite tests through `env_root`).
MATRIX = '[matrix]\npython = "3.11"\ntimeout = 30\n\n[axes]\npackaging = ["24.0"]\n'


def _rows(db: Path, kind: str = "outcome") -> list[dict]:
    if not db.exists():
        return []
    return [r for r in (json.loads(line) for line in db.read_text().splitlines() if line.strip()) if r["type"] == kind]


def _sweep(tmp_path: Path, env_root: Path, *args: str, matrix: str = MATRIX, db: str = "out.jsonl"):
    (tmp_path / "m.toml").write_text(matrix)
    flags = ["--matrix", str(tmp_path / "m.toml"), "--db", str(tmp_path / db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    return run_cli("sweep", *flags, *args)


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    ("flag", "expression", "said"),
    [
        ("-k", "and or", "Wrong expression passed to '-k': and or: at column 1: expected not OR left parenthesis OR identifier; got and"),
        ("-m", "gpu and", "Wrong expression passed to '-m': gpu and: at column 8"),
    ],
)
def test_an_expression_pytest_refuses_is_bad_input_before_any_env(tmp_path: Path, flag: str, expression: str, said: str) -> None:
    envs = tmp_path / "envs"
    proc = _sweep(tmp_path, envs, "--tests", FILE, "--tests-root", str(SUITE), flag, expression)
    assert proc.returncode == 2, proc.stderr + proc.stdout[-2000:]
    line = _one_error_line(proc.stderr)
    assert f"{flag} {expression!r}: pytest says {said}" in line, line
    assert not (tmp_path / "out.jsonl").exists() and not envs.exists()  # nothing written, nothing built


def test_the_tests_tables_expressions_are_checked_with_the_matrix(tmp_path: Path) -> None:
    table = f'\n[tests]\nroot = "{SUITE}"\npaths = ["{FILE}"]\nk = "and or"\nm = "not"\ntimeout = "soon"\n'
    envs = tmp_path / "envs"
    proc = _sweep(tmp_path, envs, matrix=MATRIX + table)
    assert proc.returncode == 2, proc.stderr + proc.stdout[-2000:]
    line = _one_error_line(proc.stderr)
    assert "3 problem(s)" in line  # every mistake of the file at once
    assert "[tests] k = 'and or': pytest says Wrong expression passed to '-k': and or: at column 1" in line, line
    assert "[tests] m = 'not': pytest says Wrong expression passed to '-m': not: at column 4" in line, line
    assert not (tmp_path / "out.jsonl").exists() and not envs.exists()
    # allow_empty is a [tests] key (true or false)
    assert parse_matrix_lenient(MATRIX + "[tests]\nallow_empty = true\n").tests == {"allow_empty": True}
    assert "give true or false" in parse_matrix_lenient(MATRIX + '[tests]\nallow_empty = "yes"\n').problems[0]


def test_a_selection_of_no_test_fails_the_sweep_unless_allowed(tmp_path: Path, env_root: Path) -> None:
    proc = _sweep(tmp_path, env_root, "--tests", FILE, "--tests-root", str(SUITE), "-k", "zzz")
    assert proc.returncode == 1, proc.stderr + proc.stdout[-2000:]
    # 17 collected: -k (and addopts' -m 'not excluded') deselect after that
    assert "harness: packaging24.0: -k 'zzz' selects 0 of 17 collected tests: no test ran there; pass --allow-empty" in proc.stderr
    assert _rows(tmp_path / "out.jsonl") == []  # no outcome: no node id ran
    assert len(_rows(tmp_path / "out.jsonl", "cell")) == 1  # the env is recorded, as always

    allowed = _sweep(tmp_path, env_root, "--tests", FILE, "--tests-root", str(SUITE), "-k", "zzz", "--allow-empty")
    assert allowed.returncode == 0, allowed.stderr + allowed.stdout[-2000:]
    assert "selects 0 of 17 collected tests: allowed (--allow-empty)" in allowed.stderr


def test_a_marker_pytest_refuses_in_the_cell_is_bad_input_and_stores_nothing(tmp_path: Path, env_root: Path) -> None:
    # a well-formed -m naming a marker the suite does not register: only the cell's pytest,
    # with the suite's --strict-markers, refuses it (exit 4 under plain pytest)
    proc = _sweep(tmp_path, env_root, "--tests", FILE, "--tests-root", str(SUITE), "-m", "nosuchmarker")
    assert proc.returncode == 2, proc.stderr + proc.stdout[-2000:]
    line = _one_error_line(proc.stderr)
    assert "pytest refuses the suite's selection (-m 'nosuchmarker') in cell packaging24.0" in line, line
    assert "Unknown marker(s) in '-m' expression: nosuchmarker" in line, line
    assert _rows(tmp_path / "out.jsonl") == []


BAD_SYNTAX = "import os\n\n\ndef test_broken(:\n    pass\n"
BAD_IMPORT = "import os\n\nimport no_such_module_for_the_harness\n\n\ndef test_never():\n    pass\n"


def test_a_file_that_cannot_be_collected_is_stored_with_its_exception_file_and_line(tmp_path: Path, env_root: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "tests").mkdir(parents=True)
    (suite / "tests" / "test_bad.py").write_text(BAD_SYNTAX)
    (suite / "tests" / "test_imp.py").write_text(BAD_IMPORT)
    (suite / "tests" / "test_ok.py").write_text("def test_fine():\n    assert True\n")
    proc = _sweep(tmp_path, env_root, "--tests", "tests", "--tests-root", str(suite))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-2000:]
    rows = {r["scenario"]: r for r in _rows(tmp_path / "out.jsonl")}
    assert sorted(rows) == ["tests/test_bad.py", "tests/test_imp.py", "tests/test_ok.py::test_fine"]
    bad, imp = rows["tests/test_bad.py"], rows["tests/test_imp.py"]
    assert (bad["status"], bad["message"]) == ("error", "SyntaxError: invalid syntax (tests/test_bad.py, line 4)")
    assert bad["signature"] == "SyntaxError: invalid syntax (tests/test_bad.py, line <n>)"  # lines are masked, as in every signature
    assert imp["status"] == "error"
    assert imp["message"] == "ModuleNotFoundError: No module named 'no_such_module_for_the_harness' (tests/test_imp.py, line 3)"
    assert imp["signature"] == "ModuleNotFoundError: No module named 'no_such_module_for_the_harness' (tests/test_imp.py, line <n>)"
    assert bad["blamed_library"] == imp["blamed_library"] == ""  # the team's own code
    assert rows["tests/test_ok.py::test_fine"]["status"] == "pass"


def test_a_watch_whose_new_cells_ran_no_test_exits_1_and_says_so() -> None:
    # `harness watch` carries the sweep's lines (commands/watch.py) into its report: no sweep here
    from harness.analysis.watch import WatchReport
    from tests.unit.test_watch import CPU, GOOD_ROWS, _good

    said = "packaging23.0: -k 'zzz' selects 0 of 17 collected tests"
    report = WatchReport("r.duckdb", CPU, "", _good(GOOD_ROWS), (("packaging", "21.3"),), (), ran_no_test=(said,))
    assert report.exit_status == 1
    assert report.headline() == f"no test ran in 1 cell(s): {said}"
    assert report.markdown().startswith("## ❌ harness watch: no test ran")
    assert json.loads(report.json())["exit_status"] == 1
