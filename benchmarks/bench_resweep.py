"""Benchmark: a re-sweep of the same cells, with and without the servers the last sweep kept.

    .venv/bin/python benchmarks/bench_resweep.py [--matrix matrix.toml] [--repeats 3] [--env-root DIR]

One warm-up sweep builds every cell's env (and parks its servers, `--keep-servers`); then each
repeat sweeps the same cells twice into new results files, alternating: `plain` (every cell
starts its fork server, as without the flag) and `kept` (each cell takes the server the sweep
before it parked). Refinement is off (`--no-refine`): the same cells every time. Printed per side:
the median wall and each run's, and the medians of the sweep's own `time:` line: zygote and
fork-server starts, attaching to kept servers, the scenarios' own code, and the issue's ratio
(fork-server starts, zygote and attaching, over the scenarios' own code). Every run's outcomes
(status and signature per cell and scenario) are compared with the warm-up's.

The sockets go to a folder of this benchmark's own (HARNESS_KEPT_DIR), emptied at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
KEEP_SECONDS = "1800"
NUMBER = r"([0-9.]+) s"
FIELDS = {
    "zygote": re.compile(rf"zygote starts {NUMBER}"),
    "servers": re.compile(rf"fork-server starts {NUMBER}"),
    "kept": re.compile(rf"kept from an earlier sweep {NUMBER}"),
    "own code": re.compile(rf"their own code {NUMBER}"),
}


def sweep(matrix: Path, env_root: Path, db: Path, keep: bool, env: dict[str, str]) -> tuple[float, dict[str, float]]:
    args = [sys.executable, "-m", "harness", "sweep", "--matrix", str(matrix), "--env-root", str(env_root), "--db", str(db)]
    args += ["--no-refine", "--no-progress", "--keep-servers", KEEP_SECONDS if keep else "0"]
    started = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"sweep exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    line = next((x for x in proc.stdout.splitlines() if x.startswith("time:")), "")
    seconds = {}
    for name, pattern in FIELDS.items():
        found = pattern.search(line)
        seconds[name] = float(found.group(1)) if found else 0.0
    return wall, seconds


def outcomes(db: Path) -> dict[tuple[str, str], tuple[str, str]]:
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT cell_id, scenario, status, coalesce(signature, '') FROM outcomes").fetchall()
    con.close()
    return {(c, s): (st, sig) for c, s, st, sig in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=ROOT / "matrix.toml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-root", type=Path, default=None, help="default: a fresh folder (the warm-up builds every env)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-resweep-"))
    kept_dir = Path(tempfile.mkdtemp(prefix="kt-", dir="/tmp"))
    env = {**os.environ, "HARNESS_KEPT_DIR": str(kept_dir), "PYTHONPATH": str(ROOT)}
    env_root = args.env_root or work / "envs"
    try:
        wall, _ = sweep(args.matrix, env_root, work / "warmup.duckdb", True, env)
        print(f"warm-up (envs built, servers parked): {wall:.1f} s")
        reference = outcomes(work / "warmup.duckdb")
        runs: dict[str, list[tuple[float, dict[str, float]]]] = {"plain": [], "kept": []}
        for repeat in range(args.repeats):
            for side in ("plain", "kept"):
                db = work / f"{side}-{repeat}.duckdb"
                runs[side].append(sweep(args.matrix, env_root, db, side == "kept", env))
                same = outcomes(db) == reference
                wall, seconds = runs[side][-1]
                print(f"{side} {repeat + 1}: {wall:.1f} s wall; {seconds}; outcomes {'the same' if same else 'DIFFER'}")
                if not same:
                    return 1
        print()
        medians = {}
        for side, done in runs.items():
            walls = [w for w, _ in done]
            part = {name: statistics.median(s[name] for _, s in done) for name in FIELDS}
            ratio = statistics.median((s["servers"] + s["zygote"] + s["kept"]) / s["own code"] for _, s in done if s["own code"])
            medians[side] = statistics.median(walls)
            print(
                f"{side:5}: median wall {medians[side]:.1f} s ({', '.join(f'{w:.1f}' for w in walls)}); "
                + ", ".join(f"{k} {v:.1f} s" for k, v in part.items())
                + f"; (servers + zygote + kept) / own code {ratio:.2f}"
            )
        print(f"kept / plain, median wall: {medians['kept'] / medians['plain']:.2f}")
    finally:
        subprocess.run([sys.executable, "-m", "harness", "servers", "--stop"], cwd=ROOT, env=env, capture_output=True)
        subprocess.run(["rm", "-rf", str(work), str(kept_dir)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
