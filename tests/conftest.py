"""Shared fixtures: run the real CLI in a child process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Suites written for the harness to run inside cells, with their own pytest configuration:
# never part of this project's own run.
collect_ignore = ["data"]
# The CLI's piped output fits COLUMNS when it is set: the tests read it at its default width.
os.environ.pop("COLUMNS", None)


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
    )


@pytest.fixture(scope="session")
def env_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder of cell envs for the whole session, so light cells are built once."""
    return tmp_path_factory.mktemp("envs")


def git(repo: Path, *args: str) -> str:
    """git in `repo` with a fixed identity (CI machines have none configured)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def git_package(repo: Path, commits: list[tuple[str, str]]) -> list[str]:
    """A git repository holding the installable package `tinypkg`, one commit per
    (`tinypkg/__init__.py` body, message); returns the commit shas in order."""
    (repo / "tinypkg").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "tinypkg"\nversion = "0.1.0"\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for body, message in commits:
        (repo / "tinypkg" / "__init__.py").write_text(body)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", message)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas
