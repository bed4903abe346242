"""The full-size peer check (issue #28 item 5a): a package's own tests through the harness and under
plain pytest in the same envs, every node id compared, one repeat, with any matrix and -k.

    .venv/bin/python benchmarks/peer_full.py --matrix M --tests-git CLONE --env-root R --out DIR [-k EXPR] [--jobs 2]

benchmarks/bench_testsuite.py is the repeated, timed check of matrices/peft-own-tests.toml's
650-test slice; this one runs a bigger selection once:

1. `harness sweep --matrix M --tests-git CLONE [-k EXPR] --env-root R --jobs J --fresh`, timed
   (the envs are expected to exist already under R: build them first with a small -k);
2. plain `python -m pytest PATH [-k EXPR] -v -p no:cacheprovider` in every cell's env, from the
   suite checkout the harness exported under R/suites/tests (the tag of the cell's version), J at
   once (the same parallelism as the sweep), timed; each cell's output goes to DIR/plain-CELL.log;
3. every node id: the harness's stored status mapped to pytest's word (docs/testsuites.md)
   against the word `-v` printed. Writes DIR/statuses.csv.gz (cell, node id, both words) and
   DIR/summary.json; prints every difference (first 50) and exits 1 if any.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import subprocess
import sys
import time
import tomllib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from harness.running.testsuite import parse_verbose, pytest_word

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", type=Path, required=True)
    parser.add_argument("--tests-git", required=True)
    parser.add_argument("--env-root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--db", type=Path, help="results file (default: OUT/../<name>.duckdb outside the repo: /tmp)")
    parser.add_argument("-k", dest="keyword", default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-harness", action="store_true", help="reuse the newest run in --db")
    parser.add_argument("--harness-seconds", type=float, help="with --skip-harness: the sweep's wall time, measured before")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.db or Path("/tmp") / f"{args.out.name}.duckdb"
    table = tomllib.loads(args.matrix.read_text())["tests"]
    path = table["paths"][0]
    keyword = args.keyword if args.keyword is not None else table.get("k")
    k = ["-k", keyword] if keyword else []

    # 1. the harness
    times: dict[str, float] = {"harness": args.harness_seconds} if args.harness_seconds else {}
    if not args.skip_harness:
        cmd = [str(REPO / ".venv/bin/harness"), "sweep", "--matrix", str(args.matrix), "--tests-git", args.tests_git, *k]
        cmd += ["--env-root", str(args.env_root), "--db", str(db), "--jobs", str(args.jobs), "--no-progress", "--fresh"]
        print("$", " ".join(cmd), flush=True)
        started = time.monotonic()
        with (args.out / "harness-console.txt").open("w") as fh:
            done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True)
        times["harness"] = time.monotonic() - started
        print(f"harness sweep --jobs {args.jobs}: {times['harness']:.1f} s, exit {done.returncode}", flush=True)
    with duckdb.connect(str(db), read_only=True) as con:
        run_id = con.execute("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()[0]
        rows = con.execute(
            "SELECT o.cell_id, o.scenario, o.status, coalesce(o.message, '') FROM outcomes o WHERE o.run_id = ?", [run_id]
        ).fetchall()
        versions = dict(con.execute("SELECT cell_id, peft FROM outcomes_v WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())
    harness: dict[str, dict[str, str]] = {}
    for cell, node, status, message in rows:
        harness.setdefault(cell, {})[node] = pytest_word(status, message)
    cells = sorted(harness)

    # 2. plain pytest in the same envs, from the same checkout
    def plain(cell: str) -> tuple[str, float, dict[str, str]]:
        (python,) = sorted(args.env_root.glob(f"{cell}-*/bin/python"))
        (checkout,) = sorted((args.env_root / "suites" / "tests").glob(f"peft-{versions[cell]}-*"))
        cmd = [str(python), "-m", "pytest", path, *k, "-v", "-p", "no:cacheprovider"]
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
        seconds = time.monotonic() - started
        (args.out / f"plain-{cell}.log").write_text(f"$ cd {checkout} && {' '.join(cmd)}\n{done.stdout}{done.stderr}")
        return cell, seconds, parse_verbose(done.stdout)

    started = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(plain, cells))
    times["plain pytest"] = time.monotonic() - started
    per_cell = {cell: seconds for cell, seconds, _ in results}
    said = {cell: words for cell, _, words in results}
    print(f"plain pytest, {args.jobs} at once: {times['plain pytest']:.1f} s; per cell {per_cell}", flush=True)

    # 3. node id by node id
    table_rows = []
    for cell in cells:
        h, p = harness.get(cell, {}), said.get(cell, {})
        table_rows += [(cell, node, h.get(node, "missing"), p.get(node, "missing")) for node in sorted(set(h) | set(p))]
    differences = [r for r in table_rows if r[2] != r[3]]
    counts = {cell: {"harness": dict(Counter(harness[cell].values())), "plain": dict(Counter(said[cell].values()))} for cell in cells}
    print(f"\n{path} -k {keyword!r}: {len(table_rows)} test results in {len(cells)} cells")
    for cell, count in counts.items():
        print(f"  {cell}: {count}")
    print(f"status differences, harness vs plain pytest: {len(differences)}")
    for r in differences[:50]:
        print(f"  {r[0]} {r[1]}: harness {r[2]}, plain {r[3]}")
    with gzip.open(args.out / "statuses.csv.gz", "wt", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["cell", "nodeid", "harness", "plain_pytest"])
        writer.writerows(table_rows)
    summary = {
        "slice": {"path": path, "k": keyword},
        "run_id": run_id,
        "cells": cells,
        "tests": len(table_rows),
        "counts": counts,
        "differences": len(differences),
        "seconds": times,
        "plain_seconds_per_cell": per_cell,
        "jobs": args.jobs,
        "machine": f"{os.cpu_count()} cores, {sys.platform}, Python {sys.version.split()[0]}",
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}/statuses.csv.gz and summary.json")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
