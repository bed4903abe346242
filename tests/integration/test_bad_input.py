"""Bad input: one line that names the bad value and the fix, exit code 2, nothing written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_cli

GOOD_AXES = '[axes]\npackaging = ["24.0"]\n'

#: (matrix text, fragments the one-line message must contain)
BAD_MATRICES = [
    pytest.param("[axes\npackaging = 1\n", ["malformed TOML"], id="malformed-toml"),
    # a typo in a setting must not be silently ignored
    pytest.param("[matrix]\ntimeot = 5\n" + GOOD_AXES, ["unknown key 'timeot'"], id="unknown-setting"),
    pytest.param("[matricks]\n" + GOOD_AXES, ["unknown top-level key 'matricks'"], id="unknown-table"),
    # not a PEP 440 version at all
    pytest.param('[axes]\npackaging = ["twenty-four"]\n', ["invalid version 'twenty-four'"], id="invalid-version"),
    # a well-formed version that was never released: the message offers the neighbours
    pytest.param('[axes]\npackaging = ["24.99"]\n', ["'24.99' is not on the index", "available near it"], id="unreleased-version"),
    # missing '://'
    pytest.param('[axes]\npackaging = ["git+https//example.invalid/x"]\n', ["bad git source"], id="bad-git-url"),
    # every mistake at once, from parsing and from the index
    # the [tests] table: a key pytest would not know, and a value of the wrong type
    pytest.param(GOOD_AXES + '[tests]\npaths = "tests"\n', ["[tests] paths = 'tests'", "give a list of strings"], id="tests-paths-type"),
    pytest.param(GOOD_AXES + "[tests]\nkeyword = 'x'\n", ["unknown key 'keyword' in [tests]"], id="tests-unknown-key"),
    pytest.param(
        '[matrix]\nrepeats = 0\nbogus = 1\n[axes]\npackaging = ["24.99", "nope!"]\n',
        ["4 problem(s)", "repeats = 0", "'bogus'", "'24.99'", "'nope!'"],
        id="several-mistakes",
    ),
]


def _assert_clean_failure(proc_stderr: str, returncode: int, fragments: list[str]) -> None:
    assert returncode == 2, proc_stderr
    lines = [line for line in proc_stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc_stderr
    assert lines[0].startswith("harness: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(("text", "fragments"), BAD_MATRICES)
def test_bad_matrix(tmp_path: Path, text: str, fragments: list[str]) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(text)
    db = tmp_path / "out.duckdb"
    proc = run_cli("sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(tmp_path / "envs"))
    _assert_clean_failure(proc.stderr, proc.returncode, fragments)
    assert not db.exists()
    assert not (tmp_path / "envs").exists()


def _good_matrix(tmp_path: Path) -> Path:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text("[matrix]\npreload = []\n" + GOOD_AXES)
    return matrix


def test_unknown_scenario(tmp_path: Path) -> None:
    db = tmp_path / "out.duckdb"
    proc = run_cli("sweep", "--matrix", str(_good_matrix(tmp_path)), "--db", str(db), "--scenario", "no_such_scenario")
    _assert_clean_failure(proc.stderr, proc.returncode, ["'no_such_scenario'", "known:"])
    assert not db.exists()


def test_missing_matrix_file(tmp_path: Path) -> None:
    proc = run_cli("sweep", "--matrix", str(tmp_path / "absent.toml"), "--db", str(tmp_path / "x.duckdb"))
    _assert_clean_failure(proc.stderr, proc.returncode, ["absent.toml", "--matrix"])


def test_non_duckdb_file_is_left_untouched(tmp_path: Path) -> None:
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    db = tmp_path / "notes.duckdb"
    db.write_text("my precious notes\n")
    proc = run_cli("sweep", "--matrix", str(_good_matrix(tmp_path)), "--db", str(db), "--scenario", str(scenario))
    _assert_clean_failure(proc.stderr, proc.returncode, ["notes.duckdb", "not a valid DuckDB"])
    assert db.read_text() == "my precious notes\n"


def test_database_in_a_missing_folder(tmp_path: Path) -> None:
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    db = tmp_path / "no" / "such" / "out.duckdb"
    proc = run_cli("sweep", "--matrix", str(_good_matrix(tmp_path)), "--db", str(db), "--scenario", str(scenario))
    _assert_clean_failure(proc.stderr, proc.returncode, ["does not exist", "--db"])
    assert not (tmp_path / "no").exists()


def test_unwritable_database_folder(tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root can write anywhere; the missing-folder and non-DuckDB cases cover the path checks")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    proc = run_cli("sweep", "--matrix", str(_good_matrix(tmp_path)), "--db", str(locked / "x.duckdb"), "--scenario", str(scenario))
    _assert_clean_failure(proc.stderr, proc.returncode, ["is read-only", "writable folder"])


def test_unknown_cell_id(tmp_path: Path) -> None:
    db = tmp_path / "out.duckdb"
    proc = run_cli("sweep", "--matrix", str(_good_matrix(tmp_path)), "--db", str(db), "--cell", "packaging99")
    _assert_clean_failure(proc.stderr, proc.returncode, ["'packaging99'", "harness list"])
    assert not db.exists()


def test_bad_scenario_declaration(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.py"
    scenario.write_text(
        textwrap.dedent("""
        REQUIRES = {"packages": {"packaging": "not a specifier"}}
        print("never runs")
    """)
    )
    db = tmp_path / "out.duckdb"
    proc = run_cli("sweep", "--matrix", str(_good_matrix(tmp_path)), "--db", str(db), "--scenario", str(scenario))
    _assert_clean_failure(proc.stderr, proc.returncode, ["invalid specifier", "'not a specifier'"])
    assert not db.exists()


@pytest.mark.parametrize(
    ("good", "bad", "fragments"),
    [
        # not a version at all
        pytest.param("banana", "23.2", ["--good 'banana' is not a version"], id="good-not-a-version"),
        # a version the index never had
        pytest.param("24.99", "23.2", ["24.99 is not a release on the index"], id="good-not-released"),
    ],
)
def test_bisect_bad_end_writes_nothing(tmp_path: Path, good: str, bad: str, fragments: list[str]) -> None:
    # the ends are checked before the results file is opened: no empty file is left behind
    db = tmp_path / "out.duckdb"
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    args = ["bisect", "--matrix", str(_good_matrix(tmp_path)), "--db", str(db), "--scenario", str(scenario), "--axis", "packaging"]
    proc = run_cli(*args, "--good", good, "--bad", bad)
    _assert_clean_failure(proc.stderr, proc.returncode, fragments)
    assert not db.exists()


def test_refine_limit_must_not_be_negative(tmp_path: Path) -> None:
    db = tmp_path / "out.duckdb"
    db.write_bytes(b"")
    proc = run_cli("refine", "--db", str(db), "--matrix", str(_good_matrix(tmp_path)), "--limit", "-1")
    _assert_clean_failure(proc.stderr, proc.returncode, ["--limit -1"])


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        # the folder where the team types pytest must exist
        pytest.param(["--tests", "tests", "--tests-root", "/no/such/folder"], ["tests root '/no/such/folder' is not a folder"], id="root"),
        # a test path outside that folder would collect nothing, silently
        pytest.param(["--tests", "no_such_test.py"], ["test path 'no_such_test.py' is not under"], id="path"),
    ],
)
def test_bad_test_suite(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    db = tmp_path / "out.jsonl"
    matrix = _good_matrix(tmp_path)
    proc = run_cli("sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(tmp_path / "envs"), *args, cwd=tmp_path)
    _assert_clean_failure(proc.stderr, proc.returncode, fragments)
    assert not db.exists()
    assert not (tmp_path / "envs").exists()
