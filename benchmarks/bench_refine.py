"""Benchmark: what refinement costs. The main job with and without it, and builds per range vs ⌈log2(k+1)⌉.

    .venv/bin/python benchmarks/bench_refine.py [--repeats 3] [--matrix matrix.toml]

Runs the whole default sweep (`harness sweep`, every cell and scenario) into a fresh results file
each time, alternating `--no-refine` and the default (the order flips every repeat), and prints
each wall time, the medians side by side and their ratio. The cells' and probes' envs are built
by a warm-up sweep first, so the timed sweeps measure imports and scenarios, not downloads.

Then, from the last refined results file: for every answer refinement made exact, the releases
that lay between the matrix's two ends on its line (k), the probe cells built on that line, and
⌈log2(k+1)⌉, what one bisection of that line alone would cost. Lines that share a transition
build fewer than that (docs/attribution.md, "Refinement").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HARNESS = [sys.executable, "-m", "harness"]
sys.path.insert(0, str(REPO))

from harness.analysis.attribution import attribute  # noqa: E402
from harness.analysis.refine import probes_needed  # noqa: E402
from harness.analysis.versions import version_key  # noqa: E402
from harness.storage import queries  # noqa: E402
from harness.storage.store import Store  # noqa: E402


def sweep(matrix: Path, db: Path, extra: list[str]) -> tuple[float, str]:
    args = [*HARNESS, "sweep", "--matrix", str(matrix), "--db", str(db), "--no-progress", "--fresh", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_refine: harness sweep exited {proc.returncode}: {proc.stderr[-2000:]}")
    line = next((x for x in proc.stdout.splitlines() if x.startswith("refinement:")), "")
    return wall, line


def per_line(db: Path) -> list[tuple[str, int, int, int]]:
    """(answer on its line, k releases between the matrix's ends, probes built on the line, ⌈log2(k+1)⌉)."""
    with Store(db, read_only=True) as store:
        rows = queries.outcome_rows(store)
        known = queries.known_releases(store)
    transitions = attribute(rows, known_versions=known).transitions
    probes: dict[tuple[str, tuple[tuple[str, str], ...]], set[str]] = defaultdict(set)
    ends: dict[tuple[str, tuple[tuple[str, str], ...]], set[str]] = defaultdict(set)
    for row in rows:
        versions = json.loads(row["versions"]) if isinstance(row["versions"], str) else row["versions"]
        for axis, value in versions.items():
            held = tuple(sorted((a, v) for a, v in versions.items() if a != axis))
            (probes if row["origin"] == "refine" else ends)[(axis, held)].add(value)
    out = []
    for t in transitions:
        if t.how != "refined":
            continue
        key = (t.axis, tuple(sorted(t.held)))
        low, high = sorted(ends[key], key=version_key)[0], sorted(ends[key], key=version_key)[-1]
        k = sum(1 for v in known.get(t.axis, []) if version_key(low) < version_key(v) < version_key(high))
        out.append((f"{t.headline()} with {', '.join(f'{a} {v}' for a, v in t.held)}", k, len(probes[key]), probes_needed(k)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.toml")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    walls: dict[str, list[float]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="bench-refine-") as tmp:
        warm, line = sweep(args.matrix, Path(tmp, "warm.duckdb"), [])
        print(f"warm-up (builds every env): {warm:.1f} s; {line}", flush=True)
        last = Path(tmp, "warm.duckdb")
        for repeat in range(args.repeats):
            order = ["without", "with"] if repeat % 2 == 0 else ["with", "without"]
            for mode in order:
                db = Path(tmp, f"{mode}-{repeat}.duckdb")
                wall, line = sweep(args.matrix, db, ["--no-refine"] if mode == "without" else [])
                walls[mode].append(wall)
                print(f"repeat {repeat + 1} {mode:>7} refinement: {wall:7.1f} s  {line}", flush=True)
                if mode == "with":
                    last = db
        lines = per_line(last)
    without, with_ = statistics.median(walls["without"]), statistics.median(walls["with"])
    print(f"median wall: without refinement {without:.1f} s, with {with_:.1f} s; ratio {with_ / without:.2f}x")
    print("builds per line (refined answers): k releases between the matrix's ends, probes built there, ⌈log2(k+1)⌉")
    for answer, k, built, bound in sorted(lines):
        print(f"  k={k:2d} built={built:2d} log2-bound={bound:2d}  {answer}")
    print("(a line with two failures fixed at different releases shares its probes between them: its count is for both)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
