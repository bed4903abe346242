"""Benchmark: the main job (`./run sweep` on a fresh clone), before against after, side by side.

    .venv/bin/python benchmarks/bench_main_job.py [--before COMMIT] [--after COMMIT] [--repeats 3]

Each run is what a new user does: `git clone` of the commit into a fresh folder, then
`./run sweep` there, timed from outside (wall, the project's own install included). Every run
has its own fresh clone, so its own `.venv`, env root (`.nox`) and results file; uv's cache is
the machine's, warm for every side alike. The sides alternate within each repeat.

Sides:
- `before`: the commit before issue #30 item 3 (default 1205f4c);
- `after-cold`: this checkout's HEAD (or --after) with the harness's shared bytecode emptied
  first (`~/.cache/compat-harness/bytecode`): what a machine that never ran the harness pays;
- `after`: the same with the bytecode left by the previous run (a second sweep on this machine).

Printed per side: the median wall and each run's; the sweep's own `time:` line (env builds,
zygote and fork-server starts, scenario code), its refinement line, and its answers (each
"fixed in"/"introduced in" headline with its line counts). The answers of every run are
compared with the first run's: a side that answered differently is flagged.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYTECODE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "compat-harness" / "bytecode"
ANSWER = re.compile(r"^\s+((?:fixed|introduced) (?:in|between) .*)$")


def run_once(commit: str, folder: Path, cold: bool) -> tuple[float, str]:
    """A fresh clone of `commit` in `folder`, then `./run sweep` there: (wall seconds, its output)."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(folder)], check=True)
    subprocess.run(["git", "checkout", "--quiet", commit], cwd=folder, check=True)
    if cold:
        shutil.rmtree(BYTECODE, ignore_errors=True)
    started = time.monotonic()
    proc = subprocess.run(["./run", "sweep"], cwd=folder, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{commit}: ./run sweep exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def answers(output: str) -> list[str]:
    """Each answer headline with the line that follows it (machine, lines), as the summary printed them."""
    lines = [line.strip() for line in output.splitlines()]
    found = []
    for i, line in enumerate(output.splitlines()):
        match = ANSWER.match(line)
        if match:
            follow = [x for x in lines[i + 1 : i + 6] if x.startswith(("on ", "inferred on"))]
            found.append(" | ".join([match.group(1).strip(), *(re.sub(r":.*", "", f) for f in follow)]))
    return found


def line_of(output: str, prefix: str) -> str:
    return next((line for line in output.splitlines() if line.startswith(prefix)), "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="1205f4c", help="the commit before (default: landed main before #30 item 3)")
    parser.add_argument("--after", default="HEAD", help="the commit after (default: HEAD, committed work only)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sides", nargs="+", default=["before", "after-cold", "after"])
    parser.add_argument("--keep", action="store_true", help="keep the clones (for their results files)")
    args = parser.parse_args(argv)
    commits = {"before": args.before, "after-cold": args.after, "after": args.after}
    walls: dict[str, list[float]] = {side: [] for side in args.sides}
    outputs: dict[str, list[str]] = {side: [] for side in args.sides}
    work = Path(tempfile.mkdtemp(prefix="bench-main-job-"))
    for repeat in range(args.repeats):
        order = args.sides if repeat % 2 == 0 else list(reversed(args.sides))
        for side in order:
            folder = work / f"{side}-{repeat}"
            wall, out = run_once(commits[side], folder, cold=side == "after-cold")
            walls[side].append(wall)
            outputs[side].append(out)
            print(f"repeat {repeat + 1} {side}: {wall:.1f} s", flush=True)
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    first = None
    for side in args.sides:
        runs = ", ".join(f"{w:.1f}" for w in walls[side])
        print(f"\n== {side} ({commits[side]}): median {statistics.median(walls[side]):.1f} s; runs {runs}")
        for out in outputs[side]:
            print("   ", line_of(out, "refinement:"))
            print("   ", line_of(out, "time:"))
        said = answers(outputs[side][0])
        for text in said:
            print("    answer:", text)
        if any(answers(o) != said for o in outputs[side][1:]):
            print("    ! the runs of this side answered differently")
        heads = sorted(a.split(" | ")[0] for a in said)
        first = first or heads
        if heads != first:
            print("    ! answers differ from the first side's:", heads, "vs", first)
    base = statistics.median(walls[args.sides[0]])
    print("\nratios to", args.sides[0], ":", ", ".join(f"{s} {statistics.median(walls[s]) / base:.2f}" for s in args.sides[1:]))
    print("work folder:", work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
