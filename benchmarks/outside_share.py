"""The share of a sweep's wall time outside the scenario files' own code (issue #22).

Reads OUTDIR/walls.tsv (`name<TAB>wall seconds`, as scripts/runner_before_after.sh and
runner_second_sweep.sh's callers write it) and each OUTDIR/NAME.log's `time:` line, and prints
one row per sweep. With several jobs the scenarios' own code is summed over the jobs, so the
share is taken of the jobs' wall time together: 1 - own / (wall x jobs).

    python benchmarks/outside_share.py OUTDIR [--jobs N]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_OWN = re.compile(r"scenarios ([\d.]+) s \(their own code ([\d.]+) s\)")
_STARTS = re.compile(r"fork-server starts ([\d.]+) s(?: \((\d+), (\d+) for CUDA)?")  # older harnesses did not count


def row(name: str, wall: float, log: str, jobs: int) -> str:
    line = next((x for x in log.splitlines() if x.startswith("time:")), "")
    own = _OWN.search(line)
    starts = _STARTS.search(line)
    if not own:
        return f"| {name} | {wall:.1f} s | no time: line | | | |"
    own_s = float(own.group(2))
    share = 1 - own_s / (wall * jobs)
    server = f"{starts.group(1)} s" if starts else "?"
    if starts and starts.group(2):
        server += f" ({starts.group(2)}, {starts.group(3)} for CUDA)"
    return f"| {name} | {wall:.1f} s | {server} | {float(own.group(1)):.1f} s | {own_s:.1f} s | {share:.1%} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--jobs", type=int, default=1, help="jobs (GPUs) each sweep ran at once")
    args = parser.parse_args(argv)
    walls = args.outdir / "walls.tsv"
    if not walls.is_file():
        print(f"outside_share: no {walls}: run scripts/runner_before_after.sh first", file=sys.stderr)
        return 2
    print("| sweep | wall | fork-server starts | scenarios | their own code | outside their own code |")
    print("|---|---|---|---|---|---|")
    for line in walls.read_text().splitlines():
        name, wall = line.split("\t")[:2]
        log = args.outdir / f"{name}.log"
        print(row(name, float(wall), log.read_text() if log.is_file() else "", args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
