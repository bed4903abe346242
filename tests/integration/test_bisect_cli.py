"""`harness bisect` with real environments: releases from the index, and commits of a git
repository built at test time (the accelerate mirror, if present, for the thread's PR)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from tests.conftest import git, git_package, run_cli

ACCELERATE_MIRROR = Path(os.environ.get("HARNESS_ACCELERATE_MIRROR", "/work/.mirror/huggingface+accelerate/repo"))


def _light_matrix(path: Path) -> Path:
    path.write_text('[matrix]\npreload = []\n[axes]\npackaging = ["24.0"]\n')
    return path


def test_release_bisect_names_the_breaking_release(tmp_path: Path, env_root: Path) -> None:
    # packaging 22.0 removed LegacyVersion: a real breaking release on the index
    scenario = tmp_path / "legacy.py"
    scenario.write_text("from packaging.version import LegacyVersion\n")
    db = tmp_path / "b.duckdb"
    proc = run_cli(
        "bisect",
        "--scenario",
        str(scenario),
        "--axis",
        "packaging",
        "--good",
        "20.0",
        "--bad",
        "24.0",
        "--matrix",
        str(_light_matrix(tmp_path / "m.toml")),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "broken in packaging 22.0; last good 21.3" in proc.stdout
    con = duckdb.connect(str(db), read_only=True)
    probes = con.execute("SELECT cell_id, status FROM outcomes WHERE run_id = 'bisect-legacy-packaging' ORDER BY cell_id").fetchall()
    con.close()
    # every probe is an ordinary outcome; far fewer than the releases in the range
    assert ("packaging22.0", "error") in probes and ("packaging21.3", "pass") in probes
    assert len(probes) <= 6
    # a second bisection reuses the stored outcomes: no environment is built
    again = run_cli(
        "bisect",
        "--scenario",
        str(scenario),
        "--axis",
        "packaging",
        "--good",
        "20.0",
        "--bad",
        "24.0",
        "--matrix",
        str(tmp_path / "m.toml"),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
    )
    assert "0 environment(s) built" in again.stdout


def test_git_bisect_names_the_fixing_commit_and_its_pr(tmp_path: Path, env_root: Path) -> None:
    repo = tmp_path / "tinypkg"
    # commit 7 fixes it
    commits = [
        (f"BROKEN = {i < 7}\nSTEP = {i}\n", f"step {i}" + (" Fix the meta tensor (#3976)" if i == 7 else f" (#{100 + i})"))
        for i in range(12)
    ]
    shas = dict(enumerate(git_package(repo, commits)))
    git(repo, "tag", "v-old", shas[0])
    git(repo, "tag", "v-new", shas[11])
    scenario = tmp_path / "fixed.py"
    scenario.write_text("import tinypkg\nassert not tinypkg.BROKEN, f'still broken at step {tinypkg.STEP}'\n")
    db = tmp_path / "g.duckdb"
    proc = run_cli(
        "bisect",
        "--scenario",
        str(scenario),
        "--axis",
        "tinypkg",
        "--git",
        str(repo),
        "--good",
        "v-new",
        "--bad",
        "v-old",
        "--matrix",
        str(_light_matrix(tmp_path / "m.toml")),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert f"fixed in tinypkg {shas[7][:12]} step 7 Fix the meta tensor (#3976)" in proc.stdout
    assert f"still failing in {shas[6][:12]}" in proc.stdout
    assert "probe(s), " in proc.stdout and int(proc.stdout.split(" probe(s)")[0].split()[-1]) <= 2 + 4


def test_bad_ends_are_bad_input(tmp_path: Path, env_root: Path) -> None:
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    proc = run_cli(
        "bisect",
        "--scenario",
        str(scenario),
        "--axis",
        "packaging",
        "--good",
        "21.0",
        "--bad",
        "99.0",
        "--matrix",
        str(_light_matrix(tmp_path / "m.toml")),
        "--db",
        str(tmp_path / "x.duckdb"),
        "--env-root",
        str(env_root),
    )
    assert proc.returncode == 2
    assert "99.0 is not a release" in proc.stderr


@pytest.mark.skipif(
    not (ACCELERATE_MIRROR / "HEAD").exists() or not os.environ.get("HARNESS_MIRROR_TESTS"),
    reason="needs a mirror of huggingface/accelerate and HARNESS_MIRROR_TESTS=1 (about 5 minutes)",
)
def test_accelerate_commit_bisect_names_pr_3976(tmp_path: Path) -> None:
    db = tmp_path / "acc.duckdb"
    proc = run_cli(
        "bisect",
        "--scenario",
        "gemma4_peft_split_4bit_load",
        "--axis",
        "accelerate",
        "--git",
        str(ACCELERATE_MIRROR),
        "--good",
        "v1.14.0",
        "--bad",
        "v1.13.0",
        "--db",
        str(db),
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Fix is_hf_initialized attribute (#3976)" in proc.stdout.split("fixed in", 1)[1]


def test_one_end_is_taken_from_stored_outcomes(tmp_path: Path, env_root: Path) -> None:
    scenario = tmp_path / "legacy.py"
    scenario.write_text("from packaging.version import LegacyVersion\n")
    matrix = tmp_path / "m.toml"
    matrix.write_text('[matrix]\npreload = []\n[axes]\npackaging = ["21.0", "24.0"]\n')
    db = tmp_path / "s.duckdb"
    sweep = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"
    )
    assert sweep.returncode == 0, sweep.stderr
    # only --bad: the passing end comes from the sweep's outcome for 21.0
    proc = run_cli(
        "bisect",
        "--scenario",
        str(scenario),
        "--axis",
        "packaging",
        "--bad",
        "24.0",
        "--matrix",
        str(matrix),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "broken in packaging 22.0; last good 21.3" in proc.stdout
    # nothing stored on the other side: a clear error
    proc = run_cli(
        "bisect",
        "--scenario",
        str(scenario),
        "--axis",
        "packaging",
        "--good",
        "21.0",
        "--matrix",
        str(_light_matrix(tmp_path / "other.toml")),
        "--db",
        str(tmp_path / "empty.duckdb"),
        "--env-root",
        str(env_root),
    )
    assert proc.returncode == 2 and "no stored outcome" in proc.stderr
