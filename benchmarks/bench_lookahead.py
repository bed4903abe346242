"""Benchmark: a job preparing its next cell while it runs one (the default) vs `--no-lookahead`.

    .venv/bin/python benchmarks/bench_lookahead.py [--repeats 3] [--cells 3] [--matrix matrix.toml]

Runs `harness sweep` on the first N cells of the matrix (default: the repo's matrix.toml,
every scenario) into a fresh results file each time, so every outcome is computed, alternating
the two modes (the order flips every repeat). The cells' envs are built once first (a warm-up
sweep with a trivial scenario) and reused by every timed sweep, so what differs is only when a
cell's fork server starts: before the previous cell's scenarios end, or after. Prints each
sweep's wall time, the medians side by side and their ratio, and checks that both modes gave
every (cell, scenario) the same status and signature.

On a 2-core CPU machine the overlap is small (the server's imports compete with the scenarios
for the same cores); on a GPU runner the server start is CPU work beside GPU work
(docs/findings.md measures that case with scripts/runner_throughput.sh).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HARNESS = [sys.executable, "-m", "harness"]


def cells(matrix: Path, count: int) -> list[str]:
    out = subprocess.run([*HARNESS, "list", "--matrix", str(matrix)], capture_output=True, text=True, check=True, cwd=REPO)
    return out.stdout.split()[:count]


def sweep(matrix: Path, cell_ids: list[str], db: Path, extra: list[str]) -> float:
    args = [*HARNESS, "sweep", "--matrix", str(matrix), "--db", str(db), "--no-progress", "--json"]
    for cell in cell_ids:
        args += ["--cell", cell]
    t0 = time.perf_counter()
    proc = subprocess.run(args + extra, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_lookahead: harness sweep exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall


def outcomes(db: Path) -> dict[tuple[str, str], tuple[str, str]]:
    rows = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
    return {(r["cell_id"], r["scenario"]): (r["status"], r["signature"]) for r in rows if r["type"] == "outcome"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.toml")
    parser.add_argument("--cells", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    cell_ids = cells(args.matrix, args.cells)
    modes = {"lookahead": [], "no-lookahead": ["--no-lookahead"]}
    walls: dict[str, list[float]] = {m: [] for m in modes}
    seen: dict[str, dict[tuple[str, str], tuple[str, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-lookahead-") as tmp:
        warm = Path(tmp, "warm.py")
        warm.write_text("print('env ready')\n")
        sweep(args.matrix, cell_ids, Path(tmp, "warm.jsonl"), ["--scenario", str(warm)])  # build the envs once
        for k in range(args.repeats):
            order = list(modes) if k % 2 == 0 else list(reversed(modes))
            for mode in order:
                db = Path(tmp, f"{mode}-{k}.jsonl")
                wall = sweep(args.matrix, cell_ids, db, modes[mode])
                walls[mode].append(wall)
                seen.setdefault(mode, {}).update(outcomes(db))
                print(f"repeat {k + 1} {mode:<13} {wall:6.1f} s", flush=True)
    med = {m: statistics.median(w) for m, w in walls.items()}
    print(f"\n{len(cell_ids)} cells, {args.repeats} repeats each; medians:")
    for mode, value in med.items():
        print(f"  {mode:<13} {value:6.1f} s   (all: {', '.join(f'{w:.1f}' for w in walls[mode])})")
    print(f"no-lookahead / lookahead: {med['no-lookahead'] / med['lookahead']:.2f}x")
    a, b = seen["lookahead"], seen["no-lookahead"]
    same = sum(a[k] == b.get(k) for k in a)
    print(f"same status and signature in {same} of {len(a)} outcomes")
    return 0 if same == len(a) == len(b) else 1


if __name__ == "__main__":
    sys.exit(main())
