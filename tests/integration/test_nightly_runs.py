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
    from harness.commands import publish
    from harness.storage import cached
    from harness.storage.store import Store

    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        kept = cached.read(store, publish.SUPPORT, cached.state_key(store))
        assert kept is not None and publish.support_of(store) == publish._support_now(store)
