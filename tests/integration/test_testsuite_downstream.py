"""A team's pytest suite after the sweep, through the real CLI on real uv cells: `harness bisect
--test` runs one node id per probe, `harness report` gives its `pytest NODEID` repro, and the run
records its suite so that both work from the results file alone (tests/data/team_suite)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests.conftest import REPO, run_cli

SUITE = REPO / "tests" / "data" / "team_suite"
FILE = "checks/check_versions.py"
# fails (AssertionError) with packaging 23.2, passes with 24.0; xfail with 23.1, error before
METADATA = f"{FILE}::test_metadata_optional_fields_default_to_none"
MATRIX = """
[matrix]
python = "3.11"
timeout = 60

[axes]
packaging = {axes}
"""


def _matrix(path: Path, axes: str = '["24.0"]', table: str = "") -> Path:
    path.write_text(MATRIX.format(axes=axes) + table)
    return path


def _bisect(*args: str) -> list[str]:
    return ["bisect", "--axis", "packaging", *args]


def test_bisect_one_test_over_releases_an_xfail_probe_is_neither_good_nor_bad(tmp_path: Path, env_root: Path) -> None:
    db = tmp_path / "b.duckdb"
    common = ["--matrix", str(_matrix(tmp_path / "m.toml")), "--db", str(db), "--env-root", str(env_root)]
    proc = run_cli(*_bisect("--test", METADATA, "--tests-root", str(SUITE), "--good", "24.0", "--bad", "22.0", *common))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # candidates 24.0, 23.2, 23.1, 23.0, 22.0: the middle one (23.1) is an xfail, a skip; counted
    # as good it would answer "fixed in 23.1", as bad "fixed in 24.0; still failing in 23.1"
    assert f"{METADATA}: fixed in packaging 24.0; still failing in 23.2" in proc.stdout
    assert "probe 23.1: skip" in proc.stdout
    con = duckdb.connect(str(db), read_only=True)
    probes = dict(con.execute("SELECT cell_id, status FROM outcomes ORDER BY cell_id").fetchall())
    scenarios = {s for (s,) in con.execute("SELECT DISTINCT scenario FROM outcomes").fetchall()}
    con.close()
    # only that node id ran in each probe, with the suite's statuses
    assert scenarios == {METADATA}
    assert probes == {
        "packaging22.0": "error",
        "packaging23.0": "error",
        "packaging23.1": "xfail",
        "packaging23.2": "fail",
        "packaging24.0": "pass",
    }

    # the matrix's [tests] table gives the root; stored probes are reused: nothing is built again
    table = f'\n[tests]\nroot = "{SUITE}"\npaths = ["{FILE}"]\nk = "not metadata"\n'  # -k would deselect it: the node id is the selection
    matrix = _matrix(tmp_path / "t.toml", table=table)
    again = run_cli(
        *_bisect(
            "--test", METADATA, "--good", "24.0", "--bad", "22.0", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root)
        )
    )
    assert again.returncode == 0, again.stderr + again.stdout
    assert "fixed in packaging 24.0; still failing in 23.2" in again.stdout and "0 environment(s) built" in again.stdout


def test_bisect_test_end_that_is_an_xfail_or_a_node_id_pytest_does_not_know_is_one_line(tmp_path: Path, env_root: Path) -> None:
    common = ["--matrix", str(_matrix(tmp_path / "m.toml")), "--db", str(tmp_path / "x.duckdb"), "--env-root", str(env_root)]
    proc = run_cli(*_bisect("--test", METADATA, "--tests-root", str(SUITE), "--good", "24.0", "--bad", "23.1", *common))
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert proc.stderr.strip() == "harness: error: the bad end '23.1' is skip, not bad; pick another --bad; the probes above say why"
    unknown = f"{FILE}::test_nope"
    proc = run_cli(*_bisect("--test", unknown, "--tests-root", str(SUITE), "--good", "24.0", "--bad", "23.2", *common))
    assert proc.returncode == 1 and f"pytest reported no test '{unknown}' in packaging24.0" in proc.stdout
    # a file that is not under the tests root, and --test with --scenario: bad input, nothing written
    db = tmp_path / "none.duckdb"
    bad = ["--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--good", "24.0", "--bad", "23.2"]
    proc = run_cli(*_bisect("--test", "checks/nope.py::test_x", "--tests-root", str(SUITE), *bad))
    assert proc.returncode == 2 and "test path 'checks/nope.py::test_x' is not under" in proc.stderr
    proc = run_cli(*_bisect("--test", METADATA, "--scenario", "x", *bad))
    assert proc.returncode == 2 and "pass exactly one of --scenario" in proc.stderr
    assert not db.exists()


def test_a_sweep_records_its_suite_and_bisect_and_report_take_it_from_the_results_file(tmp_path: Path, env_root: Path) -> None:
    db = tmp_path / "s.duckdb"
    matrix = _matrix(tmp_path / "m.toml", '["23.2", "24.0"]')
    sweep = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    proc = run_cli(*sweep, "--tests", FILE, "--tests-root", str(SUITE), "-k", "metadata or parses", "--test-requirement", "iniconfig")
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    con = duckdb.connect(str(db), read_only=True)
    settings = json.loads(con.execute("SELECT settings FROM runs").fetchone()[0])
    con.close()
    assert settings["tests"] == {"root": str(SUITE), "paths": [FILE], "k": "metadata or parses", "m": "", "requirements": ["iniconfig"]}

    # bisect from another folder, no --tests-root, no [tests]: the root the run recorded; --bad from the sweep's outcomes
    other = tmp_path / "elsewhere"
    other.mkdir()
    proc = run_cli(
        *_bisect("--test", METADATA, "--good", "24.0", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root)), cwd=other
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "fixed in packaging 24.0; still failing in 23.2" in proc.stdout

    # the report's repro: the cell's pins (pytest's and the suite's requirements too) and pytest NODEID from the tests
    # root, which it names by no path of this machine (#39)
    proc = run_cli("report", "--db", str(db), "--signature", "summary is")
    assert proc.returncode == 0, proc.stderr
    repro = proc.stdout.split("### Reproduce", 1)[1].split("###", 1)[0]
    assert "pip install packaging==23.2 pytest==" in repro and "iniconfig==" in repro
    assert "# the test, from the suite's root" in repro and f"python -m pytest {METADATA}" in repro and str(SUITE) not in repro
    assert "-k" not in repro and "scenarios/" not in repro and "--scenario" not in repro
    assert f"harness sweep --matrix {matrix.name} --cell packaging23.2 --tests {METADATA} --tests-root ." in repro


ABSENT = f"{FILE}::test_absent_field_reads_as_empty_text"


def test_watch_over_a_suite_reports_per_test_grouped_by_file_and_signature(tmp_path: Path, env_root: Path) -> None:
    db = tmp_path / "w.duckdb"
    matrix = _matrix(tmp_path / "m.toml", '["23.2"]')
    sweep = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    proc = run_cli(*sweep, "--tests", FILE, "--tests-root", str(SUITE))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]

    # new as of 2024-07-01: 24.0 and 24.1; the watch builds 24.1 with the suite the run recorded
    # (no flags, no [tests] table), and refinement builds 24.0 running only the tests it narrows
    watch = [
        "watch",
        "--matrix",
        str(matrix),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
        "--exclude-newer",
        "2024-07-01",
        "--no-progress",
    ]
    proc = run_cli(*watch, "--json", str(tmp_path / "watch.json"))
    assert proc.returncode == 1, proc.stderr + proc.stdout
    lines = proc.stdout.splitlines()
    assert "  guards 3 scenario(s): checks/check_versions.py (3 tests)" in lines
    regressions = [line for line in lines if line.startswith("  REGRESSION")]
    # both parametrizations fail with one signature: one line, the exact release from refinement
    assert len(regressions) == 1, proc.stdout
    assert regressions[0].startswith(f"  REGRESSION 2 tests in {FILE}: AssertionError: an absent field reads None")
    assert "introduced in packaging 24.0 (after 23.2)" in regressions[0]
    assert f"  FIXED {METADATA}: fails in the known-good set, passes with packaging 24.1" in lines
    assert lines[-1] == f"exit 1: 2 regression(s): 2 tests in {FILE} with packaging 24.0"
    assert "[summary]" not in proc.stdout
    con = duckdb.connect(str(db), read_only=True)
    probe = {s for (s,) in con.execute("SELECT scenario FROM outcomes WHERE cell_id = 'packaging24.0'").fetchall()}
    con.close()
    assert probe == {f"{ABSENT}[summary]", f"{ABSENT}[author]", METADATA}  # not test_version_parses: it passes on both ends

    # the JSON report keeps every test
    report = json.loads((tmp_path / "watch.json").read_text())
    assert sorted(f["scenario"] for f in report["regressions"]) == [f"{ABSENT}[author]", f"{ABSENT}[summary]"]
    assert all(f["release"] == "24.0" and f["exact"] for f in report["regressions"])
