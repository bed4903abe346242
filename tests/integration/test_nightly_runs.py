"""A team's suite swept night after night into one file, through the real CLI on a real cell.

The team's repository holds its package and its tests (the tests import the package from the
repository's root, as pytest does). Night after night:

1. the first sweep runs both tests;
2. a fresh checkout (new file times, the same contents) resumes: nothing runs again;
3. the package's source changes, the tests do not: a new run, every test runs again, and
   `harness changes` calls the failure a regression of that code;
4. a scheduled run (`--run-tag`) with nothing changed, where a test flips (it reads the
   environment, which no input records): `harness changes` calls it flaky, never a regression;
5. the next night it passes again: flaky again, and `harness pin` will not rest on it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.conftest import git, run_cli

MATRIX = """
[matrix]
python = "3.11"
timeout = 60

[axes]
packaging = ["24.0"]

[tests]
root = "{root}"
paths = ["tests"]
"""
TESTS = """
import os

from teampkg import VALUE


def test_value():
    assert VALUE == 1


def test_environment():
    assert os.environ.get("TEAM_FLIP", "0") == "0", "the environment flipped"
"""


def _team(root: Path) -> None:
    (root / "teampkg").mkdir(parents=True)
    (root / "teampkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_team.py").write_text(TESTS)
    (root / "conftest.py").write_text("")  # the root's conftest: pytest puts the root on sys.path
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "the team's package and tests")


def _sweep(tmp_path: Path, env_root: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    args = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(tmp_path / "r.duckdb"), "--env-root", str(env_root)]
    proc = run_cli(*args, "--no-progress", "--no-refine", *extra, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    run = re.search(r"^run (\S+):", proc.stdout, re.M)
    assert run is not None, proc.stdout
    return run.group(1), proc.stdout


def _changes(tmp_path: Path) -> dict:
    proc = run_cli("changes", "--db", str(tmp_path / "r.duckdb"), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_change_to_the_code_under_test_starts_a_new_run_and_a_flip_with_nothing_changed_is_flaky(tmp_path: Path, env_root: Path) -> None:
    team = tmp_path / "team"
    _team(team)
    (tmp_path / "m.toml").write_text(MATRIX.format(root=team))

    first, out = _sweep(tmp_path, env_root)
    assert "2 outcome(s) computed" in out

    # a fresh checkout: the same contents, new times
    for path in team.rglob("*.py"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    again, out = _sweep(tmp_path, env_root)
    assert again == first and "0 outcome(s) computed, 2 already stored (resumed)" in out

    # the package changes under unchanged tests: a new run, everything runs again
    (team / "teampkg" / "__init__.py").write_text("VALUE = 2\n")
    changed, out = _sweep(tmp_path, env_root)
    assert changed != first and "2 outcome(s) computed" in out
    assert out.splitlines()[0].startswith("run ") and "Changes since " in out and "+1 failing" in out, out
    found = _changes(tmp_path)
    assert found["since"]["run_id"] == first and found["newest"]["run_id"] == changed
    assert [(c["kind"], c["test"].split("::")[-1]) for c in found["changes"]] == [("regressed", "test_value")]

    # the next night runs afresh with nothing changed (its own tag), and one test flips
    night, out = _sweep(tmp_path, env_root, "--run-tag", "night-4", env={"TEAM_FLIP": "1"})
    assert night == f"{changed}-night-4" and "2 outcome(s) computed" in out
    found = _changes(tmp_path)
    assert found["since"]["run_id"] == changed
    assert [(c["kind"], c["test"].split("::")[-1]) for c in found["changes"]] == [("flaky", "test_environment")]
    assert "1 flaky" in found["headline"] and "+0 failing" in found["headline"]

    # the night after, it passes again with nothing changed: flaky again, and no pin rests on it
    _sweep(tmp_path, env_root, "--run-tag", "night-5", env={"TEAM_FLIP": "0"})
    found = _changes(tmp_path)
    assert [(c["kind"], c["before"], c["after"]) for c in found["changes"]] == [("flaky", "fail", "pass")]
    pin = run_cli("pin", "--db", str(tmp_path / "r.duckdb"), "--test", "tests/test_team.py::test_environment")
    said = pin.stdout + pin.stderr
    assert pin.returncode == 1 and "flaky across runs: passed in" in said and "with nothing changed" in said, said

    # each sweep kept the Support page's tables of the file it left (storage/cached.py): current, and as computed
    from harness.storage import cached
    from harness.storage.store import Store
    from harness.workflows import support as publish

    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        kept = cached.read(store, publish.SUPPORT, cached.state_key(store))
        assert kept is not None and publish.support_of(store) == publish._support_now(store)


# -- a file that stops importing, then a revert with a deleted test (#45) ---------------------------
THREE_CELLS = MATRIX.replace('packaging = ["24.0"]', 'packaging = ["23.2", "24.0", "24.1"]')
TEAM_TESTS = """
import packaging

from teampkg import VALUE


def test_code():
    assert VALUE == 1


def test_stable():
    assert True


def test_version_gate():
    assert packaging.__version__ >= "23"
"""


def _summary(tmp_path: Path) -> str:
    proc = run_cli("summary", "--db", str(tmp_path / "r.duckdb"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _grid(summary: str) -> dict[str, str]:
    """The summary's grid: each row's name -> its cells' symbols."""
    lines = summary[summary.index("Grid (cells below)") :].splitlines()[2:]
    return {line.split()[0]: "".join(line.split()[1:]) for line in lines if line.startswith("tests/")}


def _page(tmp_path: Path) -> str:
    site = tmp_path / "site"
    proc = run_cli("publish", "--db", str(tmp_path / "r.duckdb"), "--out", str(site))
    assert proc.returncode == 0, proc.stderr
    return (site / "index.html").read_text()


def test_a_file_that_stops_importing_and_a_revert_with_a_deleted_test(tmp_path: Path, env_root: Path) -> None:
    """The nights of #45 on three real cells: every answer says what the newest night collected."""
    team = tmp_path / "team"
    _team(team)
    (team / "tests" / "test_team.py").write_text(TEAM_TESTS)
    git(team, "commit", "-qam", "three tests")
    (tmp_path / "m.toml").write_text(THREE_CELLS.format(root=team))
    tests = [f"tests/test_team.py::{n}" for n in ("test_code", "test_stable", "test_version_gate")]

    _sweep(tmp_path, env_root, "--run-tag", "night-1")
    assert _grid(_summary(tmp_path)) == {t: "..." for t in tests}

    # night 2: a commit puts a syntax error into the team's package; the test file cannot import
    (team / "teampkg" / "__init__.py").write_text("VALUE = (\n")
    git(team, "commit", "-qam", "a syntax error")
    _sweep(tmp_path, env_root, "--run-tag", "night-2")
    found = _changes(tmp_path)
    assert found["headline"].endswith(": +1 failing (3 tests not run), −0 fixed, 0 flaky"), found["headline"]  # not "3 new cells"
    assert not found["new_cells"] and {c["kind"] for c in found["changes"]} == {"regressed"}
    assert {(c["test"], len(c["tests_not_run"])) for c in found["changes"]} == {("tests/test_team.py", 3)}
    assert "SyntaxError" in found["changes"][0]["signature"]
    summary = _summary(tmp_path)
    assert _grid(summary) == {"tests/test_team.py": "EEE"}, summary  # no pass of a test that did not run
    assert "passes all" not in summary and "no scenario passes in any cell" in summary
    since, rest = _page(tmp_path).split('id="matrix"', 1)
    assert "3 tests not run" in since and "test_stable" not in rest and "test_code" not in rest

    # night 3: the error reverted, test_stable deleted
    (team / "teampkg" / "__init__.py").write_text("VALUE = 1\n")
    (team / "tests" / "test_team.py").write_text(TEAM_TESTS.replace("def test_stable():\n    assert True\n\n\n", ""))
    git(team, "commit", "-qam", "revert the syntax error; drop test_stable")
    _sweep(tmp_path, env_root, "--run-tag", "night-3")
    found = _changes(tmp_path)
    assert {(c["kind"], c["test"]) for c in found["changes"]} == {("fixed", "tests/test_team.py"), ("removed", tests[1])}
    assert found["headline"].endswith(": +0 failing, −1 fixed (2 tests run again), 0 flaky, 1 removed"), found["headline"]
    summary = _summary(tmp_path)
    assert _grid(summary) == {tests[0]: "...", tests[2]: "..."}, summary  # no error row left, no deleted test
    assert "passes all 2 of its own tests" in summary
    since, rest = _page(tmp_path).split('id="matrix"', 1)
    assert "1 removed" in since and "test_stable" in since  # "Since the last run" says it left
    assert "test_stable" not in rest and "test_code" in rest  # and no part of the page shows it as it was
    pin = run_cli("pin", "--db", str(tmp_path / "r.duckdb"), "--test", tests[1])
    assert pin.returncode == 2 and "tests/test_team.py::test_stable" in pin.stderr, pin.stdout + pin.stderr  # nothing to pin on

    # night 4: nothing changed
    _sweep(tmp_path, env_root, "--run-tag", "night-4")
    assert _changes(tmp_path)["changes"] == [] and _grid(_summary(tmp_path)) == {tests[0]: "...", tests[2]: "..."}
