"""`harness watch` over real releases, with `--exclude-newer` dates standing in for "yesterday" and "today".

A real regression: packaging 22.0 (2022-12-07) removed LegacyVersion, so `parse("2.1.0-build_17")`,
which packaging 21.3 (2021-11) accepted, raises InvalidVersion. The project's sweep ran on
2022-12-01 (packaging 21.3, the newest then; six 1.16.0 held). "Yesterday" nothing is new; by
"today", 2023-01-10, packaging 22.0 and 23.0 (2023-01-08) are out. The watch builds 23.0 only,
sees the scenario break, builds 22.0 to narrow the range, and names 22.0 (after 21.3).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

YESTERDAY, TODAY = "2022-12-01", "2023-01-10"
BREAKS = '"""Our release tooling parses tags like 2.1.0-build_17."""\nfrom packaging.version import parse\n\nparse("2.1.0-build_17")\n'
HOLDS = '"""PEP 440 ordering."""\nfrom packaging.version import Version\n\nassert Version("1.10.0") > Version("1.9.0")\n'


def project(root: Path) -> Path:
    (root / "scenarios").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "scenarios" / "parse_build_tag.py").write_text(BREAKS)
    (root / "scenarios" / "compare_versions.py").write_text(HOLDS)
    (root / "matrix.toml").write_text(
        textwrap.dedent(f"""
        [matrix]
        python = "3.11"
        timeout = 60
        preload = []
        exclude_newer = "{YESTERDAY}"   # the night of the sweep

        [axes]
        packaging = ["21.3"]
        six = ["1.16.0"]
        """)
    )
    return root


def watch(root: Path, env_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("watch", "--env-root", str(env_root), "--no-progress", *args, cwd=root)


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory, env_root: Path) -> dict[str, Any]:
    root = project(tmp_path_factory.mktemp("watch"))
    swept = run_cli("sweep", "--env-root", str(env_root), "--no-progress", cwd=root)
    assert swept.returncode == 0, swept.stderr + swept.stdout
    found = {"root": root, "yesterday": watch(root, env_root, "--exclude-newer", YESTERDAY, "--format", "json")}
    found["today"] = watch(root, env_root, "--exclude-newer", TODAY, "--format", "json", "--markdown", "watch.md")
    found["built_today"] = built(root)
    found["again"] = watch(root, env_root, "--exclude-newer", TODAY)  # a retried CI job
    found["built_again"] = built(root)
    return found


def built(root: Path) -> list[tuple[str, str]]:
    """Every cell record (id, when its env was prepared): a cell prepared again gets a new time."""
    with duckdb.connect(str(root / "results" / "compat.duckdb"), read_only=True) as con:
        return [(c, str(t)) for c, t in con.sql("SELECT cell_id, built_at FROM cells ORDER BY cell_id, run_id").fetchall()]


def test_yesterday_nothing_is_new(nights: dict[str, Any]) -> None:
    proc = nights["yesterday"]
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["exit_status"] == 0 and report["new"] == {} and report["targets"] == []
    assert report["held"] == {"packaging": "21.3", "six": "1.16.0"}
    assert report["headline"] == "nothing new: no release newer than the results file holds"


def test_today_names_the_regression_and_the_exact_release(nights: dict[str, Any]) -> None:
    proc = nights["today"]
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["new"] == {"packaging": ["22.0", "23.0"]}  # six has nothing new until 2024
    [target] = report["targets"]
    assert (target["release"], target["statuses"]) == ("23.0", {"compare_versions": "pass", "parse_build_tag": "error"})
    [regression] = report["regressions"]
    assert regression["scenario"] == "parse_build_tag"
    assert regression["signature"].startswith("InvalidVersion: Invalid version:") and "packaging/version.py" in regression["signature"]
    # the exact release and the one before it, built on the same line (six held) and machine
    assert (regression["release"], regression["before"], regression["exact"], regression["tested"]) == ("22.0", "21.3", True, "23.0")
    assert regression["answer"] == "introduced in packaging 22.0 (after 21.3)"
    assert regression["conditions"].startswith("with six 1.16.0 on cpu · ")
    assert "refinement round 1: 1 probe cell(s)" in proc.stderr and "packaging 22.0: parse_build_tag" in proc.stderr
    markdown = (nights["root"] / "watch.md").read_text()
    assert markdown.startswith("## ❌ harness watch: 1 regression(s): parse_build_tag with packaging 22.0")
    assert "| `parse_build_tag` | `InvalidVersion: Invalid version:" in markdown and "| packaging **22.0** | 21.3 |" in markdown


def test_the_new_cells_are_ordinary_stored_outcomes(nights: dict[str, Any]) -> None:
    with duckdb.connect(str(nights["root"] / "results" / "compat.duckdb"), read_only=True) as con:
        cells = con.sql("SELECT cell_id, origin, run_id FROM cells ORDER BY cell_id").fetchall()
    built = {cell: origin for cell, origin, run in cells if run.startswith("watch-")}
    # 23.0 tested against the known-good set, 22.0 built by refinement; 22.0 only because 23.0 broke
    assert built == {"packaging22.0-six1.16.0": "refine", "packaging23.0-six1.16.0": "watch"}


def test_a_rerun_builds_nothing_and_says_the_same(nights: dict[str, Any]) -> None:
    proc = nights["again"]
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "exit 1: 1 regression(s): parse_build_tag with packaging 22.0"
    assert "introduced in packaging 22.0 (after 21.3)" in proc.stdout
    assert "refinement round" not in proc.stderr
    assert nights["built_again"] == nights["built_today"]  # no cell prepared again


def test_a_dry_run_builds_nothing(tmp_path: Path, env_root: Path) -> None:
    root = project(tmp_path)
    assert run_cli("sweep", "--env-root", str(env_root), "--no-progress", cwd=root).returncode == 0
    before = (root / "results" / "compat.duckdb").stat().st_mtime_ns
    proc = watch(root, env_root, "--exclude-newer", TODAY, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "packaging 23.0 (new: 22.0, 23.0): not built (--dry-run)" in proc.stdout
    with duckdb.connect(str(root / "results" / "compat.duckdb"), read_only=True) as con:
        assert con.sql("SELECT count(*) FROM cells WHERE run_id LIKE 'watch-%'").fetchall() == [(0,)]
    assert (root / "results" / "compat.duckdb").stat().st_mtime_ns == before


BAD = [
    # not a date
    pytest.param(["--exclude-newer", "yesterday"], "--exclude-newer 'yesterday' is not a date; write e.g. 2026-11-20", id="bad-date"),
    # an axis the matrix does not have
    pytest.param(["--axis", "numpy"], "--axis 'numpy': not an axis of 'matrix.toml'; axes: packaging, six", id="unknown-axis"),
    # no results file yet
    pytest.param(
        ["--db", "results/none.duckdb"], "results file 'results/none.duckdb' does not exist; run `harness sweep` first", id="no-db"
    ),
    pytest.param(["--format", "yaml"], "invalid choice: 'yaml'", id="bad-format"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, env_root: Path, args: list[str], fragment: str) -> None:
    root = project(tmp_path)
    proc = watch(root, env_root, *args)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    if "invalid choice" not in fragment:  # argparse prints its usage first
        assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (root / "results").iterdir()) == []  # nothing written
