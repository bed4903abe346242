"""A package's own tests from its git repository, at each cell's tag, through the real CLI on
real cells: the repository (built here with git) has different tests at `23.2` and `24.0` of
packaging, and each cell runs those of the version it installed; a version without a tag is
inconclusive, not a failure; the package's source at the root never shadows the installed one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli

MATRIX = """
[matrix]
python = "3.11"
timeout = 20

[axes]
packaging = ["23.2", "24.0", "24.1"]
"""
CONFTEST = "import pytest\n\n@pytest.fixture\ndef release():\n    return '{tag}'\n"
TESTS = """
import packaging


def test_installed_matches_the_tag(release):
    assert packaging.__version__ == release


def test_only_at_{name}():
    assert {ok}
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True)


def _repo(tmp: Path) -> Path:
    """A stand-in for the package's repository: tests and a pytest.ini that change between two
    tags, and a `packaging/` source folder that would shadow the installed build if exported."""
    repo = tmp / "packaging-repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "__init__.py").write_text("")  # pytest puts the repository's root on sys.path
    (repo / "packaging").mkdir()
    (repo / "packaging" / "__init__.py").write_text("raise ImportError('the checkout shadowed the installed package')\n")
    _git(repo, "init", "-q")
    for tag, ok in (("23.2", "True"), ("24.0", "1 == 2")):
        (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly\n")
        (repo / "tests" / "conftest.py").write_text(CONFTEST.format(tag=tag))
        for old in (repo / "tests").glob("test_*.py"):
            old.unlink()
        (repo / "tests" / f"test_at_{tag.replace('.', '_')}.py").write_text(TESTS.format(name=tag.replace(".", "_"), ok=ok))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", tag)
        _git(repo, "tag", tag)
    return repo


def test_each_cell_runs_the_tests_of_its_tag(tmp_path: Path, env_root: Path) -> None:
    repo = _repo(tmp_path)
    (tmp_path / "m.toml").write_text(MATRIX)
    db = tmp_path / "out.jsonl"
    args = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    proc = run_cli(*args, "--tests-of", "packaging", "--tests-git", str(repo))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    rows = [r for r in map(json.loads, db.read_text().splitlines()) if r["type"] == "outcome"]
    by_cell: dict[str, dict[str, str]] = {}
    for r in rows:
        by_cell.setdefault(r["cell_id"].split("packaging")[1], {})[r["scenario"]] = r["status"]
    assert by_cell["23.2"] == {
        "tests/test_at_23_2.py::test_installed_matches_the_tag": "pass",
        "tests/test_at_23_2.py::test_only_at_23_2": "pass",
    }
    assert by_cell["24.0"] == {
        "tests/test_at_24_0.py::test_installed_matches_the_tag": "pass",
        "tests/test_at_24_0.py::test_only_at_24_0": "fail",
    }
    missing = next(r for r in rows if "24.1" in r["cell_id"])
    assert by_cell["24.1"] == {"packaging tests": "inconclusive"}
    assert "no tag for packaging 24.1" in missing["message"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--tests-git", "{tmp}/nowhere"], "--tests-of PACKAGE"),
        (["--tests-of", "packaging", "--tests-git", "{tmp}/nowhere"], "is not a readable git repository"),
        (["--tests-of", "packaging"], "add --tests-git PATH_OR_URL"),
    ],
)
def test_a_bad_source_is_one_line_and_writes_nothing(tmp_path: Path, extra: list[str], said: str) -> None:
    (tmp_path / "m.toml").write_text(MATRIX)
    db = tmp_path / "out.duckdb"
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    proc = run_cli("sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(tmp_path / "envs"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not db.exists()
