"""Benchmark: a real 6-cell CPU sweep, `isolation = "fork"` vs `isolation = "process"`, side by side.

    .venv/bin/python benchmarks/bench_sweep.py [--repeats N]

The matrix (written to a temporary matrix.toml, one per isolation mode, identical otherwise):
torch 2.13.0 x transformers {5.6.2, 5.23.0} x accelerate {1.13.0, 1.14.0, 1.15.0} x peft 0.19.1
x bitsandbytes 0.49.2, torch from the local CPU wheel folder; the scenarios are the repo's
default set (every scenario in scenarios/), or those named with --scenario. scenarios/ is
copied at the start (helpers included) and every sweep runs the copy, so both modes run the
same code even while the folder is being edited.

1. Prebuild: `harness sweep` with a warm-up scenario (it only imports torch, transformers'
   Gemma 4, accelerate and peft, in a fresh process per cell) builds all six envs into one env
   root, so both timed sweeps reuse the same envs; the cells table's `env_seconds` of this
   sweep is the env build time, reported on its own. The imports warm the page cache (and
   write bytecode if --write-bytecode), so the first timed sweep is not charged for that.
2. Timed: per repeat, `harness sweep --matrix M --db D --no-progress --run-id X` once per
   mode (fresh DuckDB and run id each time, the order alternating between repeats), timed
   from outside (wall = the whole CLI process). From the DuckDB: each outcome's `seconds`
   (the runner's time for the scenario: process start or fork, imports, body) and its metric
   `seconds` (the scenario's own body time; recorded only by scenarios that get to their end:
   an outcome without it counts 0 body seconds, and the number of those is printed).

Overhead share = (wall - sum of body seconds) / wall: env reuse, interpreter starts, imports,
fork-server start, the harness's own bookkeeping, and the whole time of failing scenarios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from harness.inputs.bundled import pack_dir
from harness.inputs.scenarios import available

AXES: dict[str, list[str]] = {
    "torch": ["2.13.0"],
    "transformers": ["5.6.2", "5.23.0"],
    "accelerate": ["1.13.0", "1.14.0", "1.15.0"],
    "peft": ["0.19.1"],
    "bitsandbytes": ["0.49.2"],
}
MODES = ("fork", "process")
DEFAULT_FIND_LINKS = "/opt/wheels"
WARMUP_SCENARIO = '''"""bench_sweep warm-up: import what the real scenarios import (page cache; bytecode if written)."""

import accelerate  # noqa: F401
import peft  # noqa: F401
from _gemma4 import build_model  # noqa: F401  (torch, transformers' Gemma 4 modeling)
'''


class BenchError(RuntimeError):
    """A sweep failed to run; the benchmark stops."""


@dataclass
class CellRow:
    cell_id: str
    env_status: str
    env_seconds: float
    env_reused: bool


@dataclass
class OutcomeRow:
    cell_id: str
    scenario: str
    status: str
    seconds: float
    body_seconds: float | None  # the scenario's own "seconds" metric, if it recorded one


@dataclass
class SweepRun:
    mode: str
    repeat: int
    wall: float
    cells: list[CellRow] = field(default_factory=list)
    outcomes: list[OutcomeRow] = field(default_factory=list)
    #: 1-minute load average before and after: the machine is shared, this says how busy it was
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def outcome_seconds(self) -> float:
        return sum(o.seconds for o in self.outcomes)

    @property
    def body_seconds(self) -> float:
        return sum(o.body_seconds or 0.0 for o in self.outcomes)

    @property
    def without_body(self) -> list[OutcomeRow]:
        return [o for o in self.outcomes if o.body_seconds is None]

    @property
    def outside_bodies(self) -> float:
        return self.wall - self.body_seconds

    @property
    def overhead_share(self) -> float:
        return self.outside_bodies / self.wall

    @property
    def passing_overhead_share(self) -> float:
        """Outcomes that recorded a body time: the share of their own seconds outside the body."""
        timed = [o for o in self.outcomes if o.body_seconds is not None]
        total = sum(o.seconds for o in timed)
        return 1.0 - sum(o.body_seconds or 0.0 for o in timed) / total if total else 0.0

    @property
    def outside_outcomes(self) -> float:
        return self.wall - self.outcome_seconds

    @property
    def env_seconds(self) -> float:
        return sum(c.env_seconds for c in self.cells)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time a real 6-cell CPU sweep with isolation = fork vs process (envs prebuilt), side by side.",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="timed sweeps per mode (default: 1; with the 21 scenarios of scenarios/, 11 of them run on CPU, one fork + "
        "process pair took 28 minutes on a busy 2-core machine: see docs/benchmarks.md)",
    )
    parser.add_argument("--python", default="3.11", help="Python version of the cells (default: 3.11)")
    parser.add_argument("--find-links", default=DEFAULT_FIND_LINKS, help=f"folder with the torch CPU wheel (default: {DEFAULT_FIND_LINKS})")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where matrices, DuckDB files and (by default) envs go (default: a new temporary folder)",
    )
    parser.add_argument(
        "--env-root",
        type=Path,
        default=None,
        help="env root shared by all sweeps (default: WORK_DIR/envs, built fresh by the prebuild step)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="run only this scenario of scenarios/ (repeatable; default: all of them, as `harness sweep` does)",
    )
    parser.add_argument(
        "--write-bytecode",
        action="store_true",
        help="unset PYTHONDONTWRITEBYTECODE for the sweeps, so imports after the warm-up use cached bytecode",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (default: removed at the end)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def matrix_text(isolation: str, python: str, find_links: str, preload: list[str] | None = None) -> str:
    lines = [
        "# written by benchmarks/bench_sweep.py",
        "[matrix]",
        f"python = {json.dumps(python)}",
        f"find_links = [{json.dumps(find_links)}]",
        f"isolation = {json.dumps(isolation)}",
    ]
    if preload is not None:
        lines.append(f"preload = {json.dumps(preload)}")
    lines += ["", "[axes]"]
    lines += [f"{name} = {json.dumps(versions)}" for name, versions in AXES.items()]
    return "\n".join(lines) + "\n"


def sweep_env(write_bytecode: bool) -> dict[str, str]:
    env = dict(os.environ)
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def snapshot_scenarios(work: Path, names: list[str]) -> list[Path]:
    """Copy scenarios/ (helpers too) into the work folder; the chosen scenarios' paths in the copy."""
    copy = work / "scenarios"
    copy.mkdir()
    for path in sorted(pack_dir("forum").glob("*.py")):
        shutil.copy2(path, copy / path.name)
    known = available(copy)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchError(f"unknown scenario(s) {', '.join(unknown)}; scenarios/ has {', '.join(known)}")
    return [known[n] for n in (names or list(known))]


def run_sweep(matrix: Path, db: Path, run_id: str, env_root: Path, env: dict[str, str], scenarios: list[Path]) -> float:
    """One `harness sweep` CLI process; returns its wall seconds."""
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--matrix",
        str(matrix),
        "--db",
        str(db),
        "--no-progress",
        "--run-id",
        run_id,
        "--env-root",
        str(env_root),
    ]
    for scenario in scenarios:
        cmd += ["--scenario", str(scenario)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=db.parent)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BenchError(f"harness sweep failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return wall


def _body_seconds(metrics_json: str | None) -> float | None:
    if not metrics_json:
        return None
    value = json.loads(metrics_json).get("seconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def read_results(db: Path, run_id: str) -> tuple[list[CellRow], list[OutcomeRow]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cells = [
            CellRow(r[0], r[1], float(r[2] or 0.0), bool(r[3]))
            for r in con.execute(
                "SELECT cell_id, env_status, env_seconds, env_reused FROM cells WHERE run_id = ? ORDER BY cell_id", [run_id]
            ).fetchall()
        ]
        outcomes = [
            OutcomeRow(r[0], r[1], r[2], float(r[3] or 0.0), _body_seconds(r[4]))
            for r in con.execute(
                "SELECT cell_id, scenario, status, seconds, metrics FROM outcomes WHERE run_id = ? ORDER BY cell_id, scenario", [run_id]
            ).fetchall()
        ]
    finally:
        con.close()
    return cells, outcomes


def median(runs: list[SweepRun], key: Callable[[SweepRun], float]) -> float:
    return statistics.median(key(r) for r in runs)


def statuses(outcomes: list[OutcomeRow]) -> str:
    counts = Counter(o.status for o in outcomes)
    return ", ".join(f"{status} {n}" for status, n in sorted(counts.items()))


# -- the run ------------------------------------------------------------------------------------
def benchmark(args: argparse.Namespace, work: Path, scenarios: list[Path]) -> tuple[SweepRun, dict[str, list[SweepRun]]]:
    env_root = (args.env_root or work / "envs").resolve()
    env = sweep_env(args.write_bytecode)
    matrices = {}
    for mode in MODES:
        matrices[mode] = work / f"matrix-{mode}.toml"
        matrices[mode].write_text(matrix_text(mode, args.python, args.find_links))
    prebuild_matrix = work / "matrix-prebuild.toml"
    # Same cells, same env keys (isolation and preload do not enter them); nothing preloaded.
    prebuild_matrix.write_text(matrix_text("process", args.python, args.find_links, preload=[]))
    # A helper name (leading "_"), beside the copied helpers it imports; passed by path.
    warmup = work / "scenarios" / "_bench_warmup.py"
    warmup.write_text(WARMUP_SCENARIO)

    print(f"prebuild: 6 envs into {env_root} + warm-up imports ...", flush=True)
    db = work / "prebuild.duckdb"
    wall = run_sweep(prebuild_matrix, db, "bench-prebuild", env_root, env, [warmup])
    prebuild = SweepRun("prebuild", 0, wall, *read_results(db, "bench-prebuild"))
    broken = [c for c in prebuild.cells if c.env_status != "ready"]
    if broken:
        raise BenchError("envs not ready: " + "; ".join(f"{c.cell_id}: {c.env_status}" for c in broken))

    runs: dict[str, list[SweepRun]] = {mode: [] for mode in MODES}
    for i in range(args.repeats):
        order = MODES if i % 2 == 0 else MODES[::-1]
        for mode in order:
            run_id = f"bench-{mode}-{i + 1}"
            db = work / f"{run_id}.duckdb"
            print(f"repeat {i + 1}/{args.repeats}: {mode} sweep ...", flush=True)
            load_before = os.getloadavg()[0]
            wall = run_sweep(matrices[mode], db, run_id, env_root, env, scenarios)
            runs[mode].append(SweepRun(mode, i + 1, wall, *read_results(db, run_id), load=(load_before, os.getloadavg()[0])))
            print(f"  {wall:.1f} s", flush=True)
    return prebuild, runs


def report(
    args: argparse.Namespace,
    scenario_paths: list[Path],
    prebuild: SweepRun,
    runs: dict[str, list[SweepRun]],
    started: datetime,
    wall: float,
) -> None:
    fork, process = runs["fork"], runs["process"]
    scenarios = [p.stem for p in scenario_paths]
    cells = len(prebuild.cells)
    print()
    print(
        f"bench_sweep  {started:%Y-%m-%d %H:%M} UTC  host: {platform.node()}, {os.cpu_count()} CPUs, "
        f"load avg at the end {os.getloadavg()[0]:.2f}"
    )
    print(
        f"matrix: {cells} cells (python {args.python}; "
        + "; ".join(f"{k} {'/'.join(v)}" for k, v in AXES.items())
        + f"; find_links {args.find_links})"
    )
    which = "named with --scenario" if args.scenario else "all of scenarios/"
    print(f"scenarios ({which}, copied at the start; {len(scenarios)} per cell, repeats = 1): {', '.join(scenarios)}")
    bytecode = "unset by --write-bytecode" if args.write_bytecode else os.environ.get("PYTHONDONTWRITEBYTECODE", "unset") + " (inherited)"
    print(f"PYTHONDONTWRITEBYTECODE: {bytecode}")
    print(f"timed sweeps per mode: {args.repeats} (order alternating); medians over the repeats")
    print()
    print(
        f"env build (prebuild sweep; cells.env_seconds; cold envs, warm uv cache): total {prebuild.env_seconds:.1f} s, "
        f"prebuild sweep wall {prebuild.wall:.1f} s (with warm-up imports: {statuses(prebuild.outcomes)})"
    )
    for c in prebuild.cells:
        print(f"  {c.cell_id:<56}{c.env_seconds:>8.2f} s  {'reused' if c.env_reused else 'built'}")
    print()
    rows: list[tuple[str, Callable[[SweepRun], float], str]] = [
        ("sweep wall (s)", lambda r: r.wall, "{:.1f}"),
        ("sum of outcome seconds (s)", lambda r: r.outcome_seconds, "{:.1f}"),
        ("sum of scenario body seconds (s)", lambda r: r.body_seconds, "{:.1f}"),
        ("outside scenario bodies (s)", lambda r: r.outside_bodies, "{:.1f}"),
        ("overhead share (outside bodies / wall)", lambda r: r.overhead_share, "{:.1%}"),
        ("  same, outcomes with a body metric only", lambda r: r.passing_overhead_share, "{:.1%}"),
        ("outside outcomes: CLI, env reuse, store (s)", lambda r: r.outside_outcomes, "{:.1f}"),
        ("env_seconds in the sweep (reuse, sum) (s)", lambda r: r.env_seconds, "{:.3f}"),
    ]
    print(f"{'median over repeats':<46}{'fork':>10}{'process':>10}{'fork/process':>14}")
    for label, key, fmt in rows:
        f, p = median(fork, key), median(process, key)
        ratio = f"{f / p:.2f}x" if p else "-"
        print(f"{label:<46}{fmt.format(f):>10}{fmt.format(p):>10}{ratio:>14}")
    f_wall, p_wall = median(fork, lambda r: r.wall), median(process, lambda r: r.wall)
    print()
    print(
        f"fork vs process: fork's wall is {f_wall / p_wall:.2f}x process's ({p_wall / f_wall:.2f}x faster, "
        f"{p_wall - f_wall:.1f} s saved over {cells} cells)"
    )
    print()
    for mode, mode_runs in runs.items():
        last = mode_runs[-1]
        missing = last.without_body
        print(
            f"{mode}: outcomes {len(last.outcomes)} ({statuses(last.outcomes)}); without a 'seconds' metric (0 body s): "
            f"{len(missing)} ({statuses(missing) or 'none'})"
        )
        print("  walls per repeat: " + ", ".join(f"{r.wall:.1f} s (load {r.load[0]:.1f} -> {r.load[1]:.1f})" for r in mode_runs))
    print()
    print("per scenario, median over cells and repeats of outcome seconds / body seconds:")
    width = max(map(len, scenarios)) + 2
    for name in scenarios:
        parts = []
        for mode, mode_runs in runs.items():
            rows_ = [o for r in mode_runs for o in r.outcomes if o.scenario == name]
            bodies = [o.body_seconds for o in rows_ if o.body_seconds is not None]
            body = f"{statistics.median(bodies):.2f}" if bodies else "-"
            seconds = f"{statistics.median(o.seconds for o in rows_):.2f}" if rows_ else "-"
            parts.append(f"{mode} {seconds} / {body}")
        print(f"  {name:<{width}}" + "   ".join(parts))
    print()
    print(f"benchmark wall time: {wall:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="bench-sweep-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        scenarios = snapshot_scenarios(work, args.scenario)
        prebuild, runs = benchmark(args, work, scenarios)
    except BenchError as exc:
        print(f"bench_sweep: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(args, scenarios, prebuild, runs, started, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
