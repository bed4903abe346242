"""A team's pytest suite on an offline runner: `harness wheelhouse` prepares, where the index is
reachable, what every cell needs to run the suite (pytest, the plugins its configuration names,
its requirements), and the runner's sweep, with no index, runs it from those wheels alone.

Before, the wheelhouse left the suite's needs out: every cell of the runner's sweep failed to
install pytest, and no test ran."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from harness.storage.opening import open_results
from tests.conftest import run_cli

SUITE_CONFIG = """\
[tool.pytest.ini_options]
addopts = "-q --timeout=60"
"""
TESTS = """\
import six


def test_packaging_is_there():
    import packaging
    assert packaging.__version__ == "24.0"


def test_requirement_is_there():
    assert six.PY3
"""


def _matrix(path: Path, offline_wheels: Path | None = None) -> Path:
    offline = f'no_index = true\nfind_links = ["{offline_wheels}"]\n' if offline_wheels else ""
    path.write_text(
        textwrap.dedent("""
        [matrix]
        python = "3.11"
        timeout = 60
        preload = []
        refine = false
        """)
        + offline
        + textwrap.dedent("""
        [axes]
        packaging = ["24.0"]

        [tests]
        paths = ["tests"]
        requirements = ["six"]
        """)
    )
    return path


def test_the_wheelhouse_holds_what_the_suite_needs_and_the_offline_sweep_runs_it(tmp_path: Path) -> None:
    team = tmp_path / "team"
    (team / "tests").mkdir(parents=True)
    (team / "pyproject.toml").write_text(SUITE_CONFIG)
    (team / "tests" / "test_stack.py").write_text(TESTS)
    wheelhouse = tmp_path / "wheelhouse"
    here = _matrix(tmp_path / "here.toml")
    args = ["--matrix", str(here), "--out", str(wheelhouse), "--python-version", "3.11", "--no-tools", "--tests-root", str(team)]
    prepared = run_cli("wheelhouse", *args)
    assert prepared.returncode == 0, prepared.stderr + prepared.stdout
    names = sorted(p.name.split("-")[0].lower() for p in wheelhouse.glob("*.whl"))
    # pytest (and what it needs), the plugin `--timeout` in addopts names, the suite's requirement
    assert {"pytest", "pluggy", "iniconfig", "pytest_timeout", "six", "packaging"} <= set(names), names
    lock = json.loads((wheelhouse / "harness-wheelhouse.json").read_text())["locks"]
    assert all("pytest-timeout==" in text for text in lock.values()), lock

    # "on the runner": no index, the wheelhouse its only source
    runner = _matrix(tmp_path / "runner.toml", wheelhouse)
    db = tmp_path / "runner.jsonl"
    run = ["sweep", "--matrix", str(runner), "--db", str(db), "--env-root", str(tmp_path / "runner-envs"), "--no-progress"]
    proc = run_cli(*run, "--tests-root", str(team))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    with open_results(db, read_only=True) as results:
        rows = {r["scenario"]: r["status"] for r in results.outcome_rows(None)}
    assert rows == {"tests/test_stack.py::test_packaging_is_there": "pass", "tests/test_stack.py::test_requirement_is_there": "pass"}, rows
