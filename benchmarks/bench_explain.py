"""What `harness explain` costs: probes and wall time to explain one regression, against the time of
the changed test itself.

    .venv/bin/python benchmarks/bench_explain.py [--repeats 3] [--moved 1 3 10] [--commits 50]

Each case is two real nights of a team's suite in one real cell (uv envs, the suite's pytest
worker), written through the CLI, then `harness explain` run --repeats times (medians):

- `N packages moved`: N small pure-Python packages (wheels made here, served from a find-links
  folder, so the case needs no index) moved from 1.0 to 2.0 between the nights under the suite's
  requirements, and the test reads one of them whose 2.0 changed behaviour;
- `C upstream commits`: a git axis (a local repository) moved by C commits, one of which breaks the test.

Printed per case: the probes (each runs the changed test --explain-repeats times in its own env),
explain's wall seconds (the first run builds the probes' envs; the median is over warm runs as
well), and the ratio of explain's wall time to the changed test's own seconds in the night that
showed it: what finding the culprit costs against rerunning the test once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@e", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@e"}
MATRIX = """
[matrix]
python = "3.11"
timeout = 60
find_links = ["{links}"]

[axes]
{axes}

[tests]
root = "{root}"
paths = ["tests"]
requirements = [{requirements}]
"""


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=GIT_ENV)


def wheel(folder: Path, name: str, version: str, body: str) -> None:
    """A pure-Python wheel of one module `name` (its `__init__` is `body`)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{info}/RECORD", "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n")


def team(root: Path, test: str) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_it.py").write_text(test)
    (root / "conftest.py").write_text("")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "tests")


def sweep(work: Path, tag: str, env_root: Path) -> None:
    done = harness(
        "sweep",
        "--matrix",
        "m.toml",
        "--db",
        "r.duckdb",
        "--env-root",
        str(env_root),
        "--no-progress",
        "--no-refine",
        "--run-tag",
        tag,
        cwd=work,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"sweep {tag} failed: {done.stderr[-2000:]}")


def packages_case(work: Path, moved: int, env_root: Path) -> None:
    """`moved` packages move 1.0 -> 2.0 between the nights; `pkg00`'s 2.0 changed behaviour (the culprit sits in the middle)."""
    links = work / "wheels"
    links.mkdir()
    names = [f"benchpkg{i:02d}" for i in range(max(moved, 1))]
    culprit = names[len(names) // 2]
    for name in names:
        for version in ("1.0", "2.0"):
            wheel(links, name, version, f"VALUE = {2 if (name == culprit and version == '2.0') else 1}\n")
    team(work / "team", f"import {culprit}\n\n\ndef test_it():\n    assert {culprit}.VALUE == 1\n")
    for night, version in (("n1", "1.0"), ("n2", "2.0")):
        requirements = ", ".join(f'"{n}=={version}"' for n in names)
        (work / "m.toml").write_text(MATRIX.format(links=links, axes='idna = ["3.10"]', root=work / "team", requirements=requirements))
        sweep(work, night, env_root)


def commits_case(work: Path, commits: int, env_root: Path) -> None:
    """A git axis moves by `commits` commits; the one at two thirds breaks the test."""
    upstream = work / "upstream"
    (upstream / "benchup").mkdir(parents=True)
    build = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    (upstream / "pyproject.toml").write_text('[project]\nname = "benchup"\nversion = "0.1.0"\n' + build)
    (upstream / "benchup" / "__init__.py").write_text("VALUE = 1\n")
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", ".")
    git(upstream, "commit", "-qm", "start")
    team(work / "team", "import benchup\n\n\ndef test_it():\n    assert benchup.VALUE == 1\n")
    axes = f'benchup = ["git+file://{upstream}@main"]'
    (work / "m.toml").write_text(MATRIX.format(links=work, axes=axes, root=work / "team", requirements=""))
    sweep(work, "n1", env_root)
    bad = (2 * commits) // 3
    for i in range(1, commits + 1):
        (upstream / "benchup" / "__init__.py").write_text(f"VALUE = {2 if i >= bad else 1}  # {i}\n")
        git(upstream, "commit", "-qam", f"commit {i} (#{1000 + i})")
    sweep(work, "n2", env_root)


def explain_runs(work: Path, env_root: Path, repeats: int, explain_repeats: int) -> tuple[list[int], list[float], float, str]:
    """(probes per run, wall seconds per run, the changed test's own seconds, the cause said)."""
    probes, walls = [], []
    said = ""
    for _ in range(repeats):
        began = time.perf_counter()
        done = harness(
            "explain", "--db", "r.duckdb", "--env-root", str(env_root), "--repeats", str(explain_repeats), "--budget", "60", cwd=work
        )
        walls.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise SystemExit(f"explain failed: {done.stderr[-2000:]}")
        found = re.search(r"explained with (\d+) probe", done.stdout)
        probes.append(int(found.group(1)) if found else -1)
        said = next((line.strip() for line in done.stdout.splitlines() if line.strip().startswith("cause:")), "")
    changes = json.loads(harness("changes", "--db", "r.duckdb", "--json", cwd=work).stdout)
    change = changes["changes"][0]
    import duckdb

    with duckdb.connect(str(work / "r.duckdb"), read_only=True) as con:
        row = con.execute(
            "SELECT seconds FROM outcomes WHERE run_id = ? AND scenario = ?", [change["after_run"], change["node_id"]]
        ).fetchone()
    return probes, walls, float(row[0]) if row else 0.0, said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="explain runs per case (medians)")
    parser.add_argument("--explain-repeats", type=int, default=3, help="runs of the changed test per probe")
    parser.add_argument("--moved", type=int, nargs="*", default=[1, 3, 10])
    parser.add_argument("--commits", type=int, nargs="*", default=[50])
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-explain-"))
    env_root = scratch / "envs"
    cases = [(f"{n} package(s) moved", lambda w, n=n: packages_case(w, n, env_root)) for n in args.moved]
    cases += [(f"{c} upstream commits", lambda w, c=c: commits_case(w, c, env_root)) for c in args.commits]
    print(f"explain: {args.repeats} run(s) per case, the changed test {args.explain_repeats} time(s) per probe; medians")
    for name, make in cases:
        work = scratch / re.sub(r"\W+", "-", name)
        work.mkdir()
        make(work)
        probes, walls, test_seconds, said = explain_runs(work, env_root, args.repeats, args.explain_repeats)
        wall = statistics.median(walls)
        count = statistics.median(probes)
        per_probe = f"{wall / count:.2f} s a probe" if count else "no probe (the only change)"
        ratio = f"{wall / test_seconds:,.0f}x the test's own {test_seconds:.3f} s" if test_seconds else "the test's own time not stored"
        print(
            f"{name:24s} probes {statistics.median(probes):4.0f} (runs: {probes})  wall {wall:6.1f} s (first {walls[0]:.1f} s, "
            f"{min(walls):.1f}-{max(walls):.1f})  {per_probe}  {ratio}",
            flush=True,
        )
        print(f"{'':24s} {said}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
