"""Shared fixtures: run the real CLI in a child process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
