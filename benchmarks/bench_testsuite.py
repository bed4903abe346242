"""The peer check and its benchmark: peft's own tests through the harness against plain pytest.

    .venv/bin/python benchmarks/bench_testsuite.py --tests-git PEFT_CLONE [--repeats 3] [--out DIR]

The suite nobody here wrote: `tests/test_custom_models.py` of peft's git tag v0.20.0, the `-k`
slice of matrices/peft-own-tests.toml (650 tests), with peft 0.20.0 in 4 cells, one per
transformers release (5.6.2, 5.13.1, 5.17.0, 5.23.0), torch 2.13.0 from the local CPU wheels.

1. Build: one `harness sweep` builds the 4 envs and exports the tag's tests (not timed).
2. Timed, per repeat, in alternating order (these machines are noisy):
   - harness: `harness sweep --fresh --jobs J` (a new run: every test runs again), wall time
     of the whole CLI process, with J = 1 (the same serial work as the loop below) and J = 2;
   - plain: `python -m pytest tests/test_custom_models.py -k SLICE -v -p no:cacheprovider`, run
     from the exported checkout with each cell's own interpreter, one env after the other.
3. Statuses: for every node id in every cell, the harness's stored status against the word
   plain pytest's `-v` printed, mapped as docs/testsuites.md says (fail, and an error in the
   test's call, are both pytest's FAILED; an error in setup or teardown is ERROR; a skip is
   not_applicable). Every repeat of both is compared; every difference is printed.

Prints the medians, the ratios harness/plain (target <= 1.0) and the overhead per test
((harness - plain) / tests run), and writes `statuses.csv` and `summary.json` to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import duckdb

from harness.running.testsuite import parse_verbose, pytest_word

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "matrices" / "peft-own-tests.toml"


def _matrix_tests() -> tuple[str, str]:
    import tomllib

    table = tomllib.loads(MATRIX.read_text())["tests"]
    return table["paths"][0], table["k"]


def sweep(args: argparse.Namespace, db: Path, jobs: int, fresh: bool) -> float:
    cmd = [str(REPO / ".venv/bin/harness"), "sweep", "--matrix", str(MATRIX), "--tests-git", args.tests_git]
    cmd += ["--env-root", str(args.env_root), "--db", str(db), "--jobs", str(jobs), "--no-progress", *(["--fresh"] if fresh else [])]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"harness sweep failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def harness_statuses(db: Path) -> dict[str, dict[str, str]]:
    """Cell id -> node id -> the plain pytest word for the harness's status, of the file's newest run."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.sql(
            "SELECT cell_id, scenario, status, coalesce(message, '') FROM outcomes "
            "WHERE run_id = (SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1)"
        ).fetchall()
    out: dict[str, dict[str, str]] = {}
    for cell, node, status, message in rows:
        out.setdefault(cell, {})[node] = pytest_word(status, message)
    return out


def envs(env_root: Path, cells: list[str]) -> dict[str, Path]:
    """Each cell's interpreter in the env root (one env per cell there)."""
    found = {}
    for cell in cells:
        pythons = sorted(env_root.glob(f"{cell}-*/bin/python"))
        if len(pythons) != 1:
            sys.exit(f"expected one env for {cell} under {env_root}, found {len(pythons)}; use a fresh --env-root")
        found[cell] = pythons[0]
    return found


def plain(pythons: dict[str, Path], checkout: Path, path: str, keyword: str) -> tuple[float, dict[str, dict[str, str]]]:
    """Plain pytest in each env, one after the other: the wall time and each cell's words."""
    words: dict[str, dict[str, str]] = {}
    started = time.monotonic()
    for cell, python in pythons.items():
        done = subprocess.run(
            [str(python), "-m", "pytest", path, "-k", keyword, "-v", "-p", "no:cacheprovider"], cwd=checkout, capture_output=True, text=True
        )
        words[cell] = parse_verbose(done.stdout)
    return time.monotonic() - started, words


def compare(harness: dict[str, dict[str, str]], plain_words: dict[str, dict[str, str]]) -> list[tuple[str, str, str, str]]:
    """(cell, node id, harness word, plain word) for every node id either side has, differing or not."""
    rows = []
    for cell in sorted(set(harness) | set(plain_words)):
        h, p = harness.get(cell, {}), plain_words.get(cell, {})
        rows += [(cell, node, h.get(node, "missing"), p.get(node, "missing")) for node in sorted(set(h) | set(p))]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests-git", required=True, help="a clone or mirror of huggingface/peft holding tag v0.20.0")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-root", type=Path, default=Path(tempfile.gettempdir()) / "bench-testsuite-envs")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "peer" / "peft-0.20.0")
    args = parser.parse_args()
    os.environ.setdefault("PIP_FIND_LINKS", "/opt/wheels")
    work = Path(tempfile.mkdtemp(prefix="bench-testsuite-"))
    path, keyword = _matrix_tests()

    sweep(args, work / "build.duckdb", jobs=2, fresh=False)
    cells = sorted(harness_statuses(work / "build.duckdb"))
    pythons = envs(args.env_root, cells)
    checkout = next((args.env_root / "suites" / "tests").glob("peft-0.20.0-*"))

    times: dict[str, list[float]] = {"harness --jobs 1": [], "harness --jobs 2": [], "plain pytest": []}
    rows: list[tuple[str, str, str, str]] = []
    for i in range(args.repeats):
        order = ["plain pytest", "harness --jobs 1", "harness --jobs 2"]
        for what in order if i % 2 == 0 else reversed(order):
            if what == "plain pytest":
                seconds, words = plain(pythons, checkout, path, keyword)
                plain_words = words
            else:
                db = work / f"r{i}-{what[-1]}.duckdb"
                seconds = sweep(args, db, jobs=int(what[-1]), fresh=True)
                harness_words = harness_statuses(db)
            times[what].append(seconds)
            print(f"repeat {i + 1} {what}: {seconds:.1f} s", flush=True)
        rows += [(str(i + 1), *r) for r in compare(harness_words, plain_words)]

    tests = sum(1 for r in rows if r[0] == "1")
    differences = [r for r in rows if r[3] != r[4]]
    medians = {what: statistics.median(seconds) for what, seconds in times.items()}
    last = [r for r in rows if r[0] == str(args.repeats)]
    counts = {cell: dict(Counter(r[3] for r in last if r[1] == cell)) for cell in cells}
    print(f"\nslice: {path} -k {keyword!r}; {tests} test results in {len(cells)} cells, {args.repeats} repeats")
    for cell, count in counts.items():
        print(f"  {cell}: {count}")
    print(f"status differences, harness vs plain pytest, over all repeats: {len(differences)}")
    for r in differences[:50]:
        print(f"  repeat {r[0]} {r[1]} {r[2]}: harness {r[3]}, plain {r[4]}")
    base = medians["plain pytest"]
    for what, median in medians.items():
        ratio = median / base
        per_test = (median - base) / tests * 1000
        print(f"{what:>18}: median {median:6.1f} s of {times[what]}  ratio {ratio:.2f}  overhead per test {per_test:+.1f} ms")

    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "statuses.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["repeat", "cell", "nodeid", "harness", "plain_pytest"])
        writer.writerows(rows)
    summary = {
        "slice": {"path": path, "k": keyword, "tag": (checkout / ".harness-tag").read_text().split()},
        "cells": cells,
        "tests_per_repeat": tests,
        "counts_last_repeat": counts,
        "differences": len(differences),
        "seconds": times,
        "medians": medians,
        "ratios": {what: m / base for what, m in medians.items()},
        "overhead_ms_per_test": {what: (m - base) / tests * 1000 for what, m in medians.items()},
        "machine": f"{os.cpu_count()} cores, {sys.platform}, Python {sys.version.split()[0]}",
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}/statuses.csv and summary.json")


if __name__ == "__main__":
    main()
