"""Each scenario of a sweep through the harness's fork server against the same scenario run as a
plain `python scenario.py` in the same env, side by side (issue #38 item 2), on the GPU runner
after a sweep (scripts/runner_one_trip.sh with HARNESS_PRELOAD_LOG set):

    python3 scripts/plain_vs_server.py RESULTS.jsonl ENV_ROOT PRELOAD_LOG [--scenarios DIR] [--repeats N]

- Fidelity: per cell and scenario, the sweep's outcome against the plain run's: the status
  (a pass exits 0; otherwise the exception's type and message, from the last line of its
  traceback) and the metrics the kit printed (`metric name=value`), less those that measure
  time or memory.
- Probes: a refinement probe cell runs its one scenario against a release no other cell has.
  Its wall through the harness is its fork server's start (the `start` lines the harness writes
  to PRELOAD_LOG) plus the scenario's outcome seconds (fork, run, read back); the plain run's
  wall is timed around `python scenario.py`. The env build is left out of both (the plain run
  needs the env too); the zygote's torch import is shared by every cell and is left out too.

Reads the JSON-lines shard only: no DuckDB needed, as on the runner. Prints one line per
scenario run and a summary; exit 0 unless a fidelity check differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: metrics whose values are the machine's timing or memory, never equal between two runs
VOLATILE = re.compile(r"seconds|time|memory|peak|_ms$|_s$|throughput|per_s")
EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


def envs_by_versions(root: Path) -> dict[tuple[tuple[str, str], ...], Path]:
    """Each env under `root`, keyed by the (name, version) of every distribution it installed."""
    found = {}
    for env in sorted(p for p in root.iterdir() if (p / "bin" / "python").exists()):
        dists = []
        for info in env.glob("lib/python*/site-packages/*.dist-info"):
            name, _, version = info.name[: -len(".dist-info")].partition("-")
            dists.append((name.lower().replace("_", "-"), version))
        found[tuple(sorted(dists))] = env
    return found


def env_of(cell: dict, envs: dict[tuple[tuple[str, str], ...], Path]) -> Path | None:
    wanted = {k.lower(): v for k, v in cell["versions"].items() if v != "inherit"}

    def holds(dists: tuple[tuple[str, str], ...]) -> bool:  # 2.13.0 is 2.13.0+cpu's release
        have = dict(dists)
        return all(k in have and (have[k] == v or have[k].startswith(v + "+")) for k, v in wanted.items())

    return next((env for dists, env in envs.items() if holds(dists)), None)


def starts(log: Path) -> dict[str, float]:
    """The fork-server start of each env's cell (its interpreter's path): the last `start` line."""
    seconds = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        row = json.loads(line)
        if row.get("who") == "start":
            seconds[str(Path(row["python"]).parent.parent)] = float(row["start_seconds"])
    return seconds


def plain(env: Path, scenarios: Path, scenario: str) -> tuple[float, int, str, dict[str, str]]:
    """(wall, exit code, the traceback's last line, metrics) of `python scenario.py` in `env`."""
    started = time.perf_counter()
    proc = subprocess.run(
        [str(env / "bin" / "python"), f"{scenario}.py"],
        cwd=scenarios,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    wall = time.perf_counter() - started
    metrics = {m[1]: m[2] for m in re.finditer(r"^metric ([\w.-]+)=(.*)$", proc.stdout, re.M)}
    return wall, proc.returncode, _exception_line(proc.stderr), metrics


def _exception_line(stderr: str) -> str:
    """The traceback's `Type: message` line (the first after its last frame: a message may span lines)."""
    lines = stderr.splitlines()
    frames = [k for k, line in enumerate(lines) if line.startswith("  File ")]
    after = lines[frames[-1] + 1 :] if frames else lines
    return next((line for line in after if line and not line.startswith(" ")), "")


def same(outcome: dict, code: int, last: str, metrics: dict[str, str]) -> list[str]:
    """What differs between the sweep's outcome and the plain run (none: the same)."""
    differs = []
    if outcome["status"] == "pass":
        if code != 0:
            differs.append(f"status: pass through the server, exit {code} plain ({last})")
    else:
        m = EXCEPTION.match(last)
        kind = (m[1] if m else "").rsplit(".", 1)[-1]
        if code == 0 or kind != str(outcome.get("exception_type", "")).rsplit(".", 1)[-1]:
            differs.append(f"status: {outcome['status']} {outcome.get('exception_type')} through the server, plain exit {code}: {last}")
        elif m and (m[2] or "") not in str(outcome.get("message", "")):
            differs.append(f"message: {outcome.get('message')!r} through the server, {m[2]!r} plain")
    theirs = {k: str(v) for k, v in (outcome.get("metrics") or {}).items() if not VOLATILE.search(k)}
    mine = {k: v for k, v in metrics.items() if not VOLATILE.search(k)}
    if theirs != mine:
        keys = sorted(k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k))
        differs.append("metrics: " + ", ".join(f"{k} {theirs.get(k)} vs {mine.get(k)}" for k in keys))
    return differs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("env_root", type=Path)
    ap.add_argument("preload_log", type=Path)
    ap.add_argument("--scenarios", type=Path, default=REPO / "scenarios")
    ap.add_argument("--repeats", type=int, default=1, help="plain runs per scenario (the median is compared)")
    args = ap.parse_args()
    rows = [json.loads(line) for line in args.results.open()]
    cells = {r["cell_id"]: r for r in rows if r["type"] == "cell"}
    outcomes = [r for r in rows if r["type"] == "outcome" and r.get("repeat", 0) == 0]
    envs, started = envs_by_versions(args.env_root), starts(args.preload_log)
    differing = compared = 0
    ratios = []
    for outcome in sorted(outcomes, key=lambda r: (cells[r["cell_id"]].get("origin") != "refine", r["cell_id"], r["scenario"])):
        cell = cells[outcome["cell_id"]]
        env = env_of(cell, envs)
        if env is None or outcome["status"] == "not_applicable":
            continue
        runs = [plain(env, args.scenarios, outcome["scenario"]) for _ in range(args.repeats)]
        wall = statistics.median(r[0] for r in runs)
        _, code, last, metrics = runs[-1]
        differs = same(outcome, code, last, metrics)
        compared += 1
        differing += bool(differs)
        line = f"{cell['origin']:6} {outcome['cell_id']} {outcome['scenario']}: {outcome['status']}; plain {wall:.1f} s"
        one = sum(1 for o in outcomes if o["cell_id"] == outcome["cell_id"]) == 1
        if cell.get("origin") == "refine" and one and str(env) in started:
            through = started[str(env)] + float(outcome["seconds"])
            ratios.append(through / wall)
            parts = f"server {started[str(env)]:.1f} + scenario {outcome['seconds']:.1f}"
            line += f", through the harness {through:.1f} s ({parts}): {through / wall:.2f}x"
        print(line + ("; DIFFERS: " + "; ".join(differs) if differs else "; the same"))
    print(f"fidelity: {compared - differing} of {compared} scenario run(s) the same through the fork server as plain", end="")
    print(" (status, exception, metrics)")
    if ratios:
        within = sum(r <= 1.0 for r in ratios)
        middle = statistics.median(ratios)
        print(f"probes: {within} of {len(ratios)} at most the plain run's wall; median {middle:.2f}x, max {max(ratios):.2f}x")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
