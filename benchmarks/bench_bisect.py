"""Bisection vs an exhaustive sweep of the same range, side by side; and how fast a candidate
builds from source (a git commit).

    .venv/bin/python benchmarks/bench_bisect.py [--accelerate-mirror PATH]

Range: every packaging release in [20.0, 24.0] (packaging 22.0 removed LegacyVersion: a real
breaking release). Both sides start from empty env folders and an empty results file (uv's
download cache stays warm, as on any machine that has run a sweep before).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parent.parent
SCENARIO = "from packaging.version import LegacyVersion\n"


def harness(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"harness {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - started, proc.stdout


def envs_built(db: Path, run_prefix: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    row = con.execute("SELECT count(*) FROM cells WHERE run_id LIKE ? AND NOT env_reused", [run_prefix + "%"]).fetchone()
    con.close()
    return int(row[0]) if row else 0


def bisect_vs_sweep(work: Path) -> None:
    scenario = work / "legacy.py"
    scenario.write_text(SCENARIO)
    matrix = work / "m.toml"
    matrix.write_text('[matrix]\npreload = []\n[axes]\npackaging = [{ specifier = ">=20.0,<=24.0" }]\n')
    db_b, db_s = work / "bisect.duckdb", work / "sweep.duckdb"
    t_bisect, out = harness(
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
        str(matrix),
        "--db",
        str(db_b),
        "--env-root",
        str(work / "envs-b"),
    )
    answer = next(line for line in out.splitlines() if line.startswith("broken in"))
    t_sweep, _ = harness(
        "sweep",
        "--matrix",
        str(matrix),
        "--db",
        str(db_s),
        "--env-root",
        str(work / "envs-s"),
        "--scenario",
        str(scenario),
        "--no-progress",
    )
    candidates = len(
        subprocess.run(
            [sys.executable, "-m", "harness", "list", "--matrix", str(matrix)], cwd=REPO, capture_output=True, text=True
        ).stdout.split()
    )
    b, s = envs_built(db_b, "bisect-"), envs_built(db_s, "r-")
    print(f"range: {candidates} packaging releases in [20.0, 24.0]; bisect says: {answer}")
    print(f"{'':24}{'bisect':>10}{'sweep':>10}{'sweep/bisect':>14}")
    print(f"{'environments built':24}{b:>10}{s:>10}{s / b:>13.1f}x")
    print(f"{'wall seconds':24}{t_bisect:>10.1f}{t_sweep:>10.1f}{t_sweep / t_bisect:>13.1f}x")


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@e",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@e",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def source_builds(work: Path, mirror: Path | None) -> None:
    sys.path.insert(0, str(REPO))
    from harness.inputs.matrix import Candidate, Cell, Settings
    from harness.running.envs import build_env

    repo = work / "tinypkg"
    (repo / "tinypkg").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "tinypkg"\nversion = "0.1.0"\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(5):
        (repo / "tinypkg" / "__init__.py").write_text(f"STEP = {i}\n")
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", f"step {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    settings = Settings(python="3.11", find_links=[])
    times = []
    for sha in shas:
        cell = Cell((Candidate("tinypkg", "git", f"git+file://{repo}@{sha}", sha),), "3.11")
        times.append(build_env(cell, settings, work / "envs-git", []).seconds)
    print(
        f"tiny setuptools package from a local git commit: median {statistics.median(times):.2f}s per env "
        f"(min {min(times):.2f}, max {max(times):.2f}, n={len(times)})"
    )
    if mirror is None or not (mirror / "HEAD").exists():
        print("accelerate from source: skipped (pass --accelerate-mirror PATH to a clone of huggingface/accelerate)")
        return
    import os

    wheels = os.environ.get("PIP_FIND_LINKS", "")
    commits = _git(mirror, "log", "--first-parent", "--format=%H", "-3", "v1.14.0").split()
    settings = Settings(python="3.11", find_links=[wheels] if wheels else [])
    times = []
    for sha in commits:
        cell = Cell((Candidate("torch", "version", "2.13.0"), Candidate("accelerate", "git", f"git+file://{mirror}@{sha}", sha)), "3.11")
        result = build_env(cell, settings, work / "envs-acc", [wheels] if wheels else [])
        times.append(result.seconds)
        if not result.ready:
            print(f"  {sha[:12]}: {result.status}: {result.message[-200:]}")
    print(
        f"accelerate (with torch 2.13.0 from find-links) from a git commit: median {statistics.median(times):.2f}s per env "
        f"(min {min(times):.2f}, max {max(times):.2f}, n={len(times)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accelerate-mirror", type=Path, default=Path("/work/.mirror/huggingface+accelerate/repo"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        work = Path(tmp)
        bisect_vs_sweep(work)
        source_builds(work, args.accelerate_mirror)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
