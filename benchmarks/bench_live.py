"""Benchmark: what watching a sweep costs it, and what the store's journal and folds cost.

    .venv/bin/python benchmarks/bench_live.py [--repeats 5] [--cells 2] [--scenarios 40]

1. Sweep wall, with and without a reader: a real `harness sweep` of light cells (packaging as
   the axis, `preload = []`, scenarios that only print: every outcome is mostly harness and
   store), timed from outside, per repeat once alone and once while a reader polls the same
   file every second (the order alternating). The reader is one Python process that, each
   second, does what the dashboard's refresh and a user's SQL do: `duckdb.connect(db,
   read_only=True)` and a count, then a harness `Store(db, read_only=True)` with
   `queries.overview` and `queries.outcome_rows` (the file plus the journal's records). It
   counts its reads and its failures (there must be none). Envs are built once, before.
2. The store alone, in this process: N `add_outcome` calls through the journal (each record
   fsynced; a fold into a swapped-in copy every FOLD_SECONDS and at close) against the way the
   store wrote before the journal: one connection held for the whole run, one insert per
   outcome (`Store.con`, which still does that). Both into a copy of results/default.duckdb
   (8.7 MB, 1,169 outcomes), per outcome in ms.

With `--compare DIR` (another checkout of the harness, e.g. `git worktree add /tmp/before main`),
part 1 runs again with that harness for the sweep and the reader: the wall it takes, and how
many of its reads (and sweeps) failed on DuckDB's lock.

Medians over the repeats; min-max in brackets. Prints one block for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.analysis.outcome import Outcome, Status  # noqa: E402
from harness.storage import store as store_module  # noqa: E402
from harness.storage.store import Store  # noqa: E402

READER = textwrap.dedent(
    """
    import sys, time, duckdb
    from harness.storage import queries
    from harness.storage.store import Store
    db, stop = sys.argv[1], sys.argv[2]
    import os
    reads = failures = 0
    while not os.path.exists(stop):
        started = time.monotonic()
        try:
            con = duckdb.connect(db, read_only=True)
            con.execute("SELECT count(*) FROM outcomes").fetchone()
            con.close()
            with Store(db, read_only=True) as s:
                queries.overview(s)
                queries.outcome_rows(s)
            reads += 1
        except Exception as exc:
            failures += 1
            print("read failed:", str(exc).splitlines()[0], file=sys.stderr, flush=True)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    print(reads, failures)
    """
)


def spread(values: list[float], unit: str = "s", digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def write_matrix(folder: Path, cells: int) -> Path:
    versions = ["22.0", "23.2", "24.0", "24.1", "24.2", "25.0"][:cells]
    matrix = folder / "matrix.toml"
    quoted = ", ".join(f'"{v}"' for v in versions)
    matrix.write_text(f'[matrix]\npython = "3.11"\ntimeout = 60\nisolation = "fork"\npreload = []\n\n[axes]\npackaging = [{quoted}]\n')
    return matrix


def sweep_command(matrix: Path, db: Path, env_root: Path, scenarios: list[Path], run_id: str) -> list[str]:
    command = [sys.executable, "-m", "harness", "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root)]
    command += ["--no-progress", "--no-refine", "--run-id", run_id]
    for path in scenarios:
        command += ["--scenario", str(path)]
    return command


def timed_sweep(command: list[str], db: Path, with_reader: bool, work: Path, harness: Path = REPO) -> tuple[float, int, int, bool]:
    """(wall seconds, reads, failed reads, whether the sweep failed) of one sweep into a new file."""
    env = {**os.environ, "PYTHONPATH": str(harness)}
    # The file exists before the reader starts, as when a dashboard is open on it.
    subprocess.run([sys.executable, "-c", f"from harness.storage.store import Store; Store({str(db)!r}).close()"], env=env, check=True)
    stop = work / f"{db.name}.stop"
    reader = None
    if with_reader:
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, str(db), str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        time.sleep(1.0)
    started = time.monotonic()
    done = subprocess.run(command, cwd=harness, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    if done.returncode != 0 and harness == REPO:
        raise SystemExit(f"sweep failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    reads = failures = 0
    if reader is not None:
        stop.touch()
        out, err = reader.communicate(timeout=60)
        reads, failures = (int(x) for x in out.split())
        if err.strip() and harness == REPO:
            print(err.strip(), file=sys.stderr)
    return wall, reads, failures, done.returncode != 0


@dataclass
class PartOne:
    walls: dict[str, list[float]] = field(default_factory=lambda: {"alone": [], "with reader": []})
    reads: list[int] = field(default_factory=list)  # reads (successful or not) per sweep with the reader
    failed_reads: int = 0
    failed_sweeps: int = 0


def part_one(args: argparse.Namespace, matrix: Path, env_root: Path, scenarios: list[Path], work: Path, harness: Path) -> PartOne:
    """Sweep wall alone and with a reader polling every second, the order alternating between repeats."""
    part = PartOne()
    for repeat in range(args.repeats):
        order = ["alone", "with reader"] if repeat % 2 == 0 else ["with reader", "alone"]
        for mode in order:
            db = work / f"{harness.name}-r{repeat}-{mode.replace(' ', '-')}.duckdb"
            command = sweep_command(matrix, db, env_root, scenarios, f"bench-{repeat}")
            wall, reads, failed, sweep_failed = timed_sweep(command, db, mode == "with reader", work, harness)
            part.walls[mode].append(wall)
            part.failed_sweeps += sweep_failed
            if mode == "with reader":
                part.reads.append(reads + failed)
                part.failed_reads += failed
    return part


def store_costs(n: int, work: Path) -> tuple[float, float, float]:
    """ms per outcome: journal + folds; held connection (the store before the journal); and one fold's ms."""
    sample = REPO / "results" / "default.duckdb"
    outcomes = [
        Outcome("bench", "cell", f"s{i}", 0, Status.PASS, output_tail="x" * 2000, started_at="2026-11-23T00:00:00") for i in range(n)
    ]
    journaled = work / "journaled.duckdb"
    shutil.copy(sample, journaled)
    started = time.perf_counter()
    with Store(journaled) as store:
        for outcome in outcomes:
            store.add_outcome(outcome)
    per_journal = (time.perf_counter() - started) * 1000 / n
    held = work / "held.duckdb"
    shutil.copy(sample, held)
    started = time.perf_counter()
    with Store(held) as store:
        store.con  # noqa: B018 - the connection held for the whole run, as before
        for outcome in outcomes:
            store.add_outcome(outcome)
    per_held = (time.perf_counter() - started) * 1000 / n
    with Store(journaled) as store:
        store.add_outcome(Outcome("bench", "cell", "one-more", 0, Status.PASS))
        started = time.perf_counter()
        store.fold()
        fold_ms = (time.perf_counter() - started) * 1000
    return per_journal, per_held, fold_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="timed sweeps per mode (default: 5)")
    parser.add_argument("--cells", type=int, default=2, help="light cells, 1-6 (default: 2)")
    parser.add_argument("--scenarios", type=int, default=40, help="scenarios per cell (default: 40)")
    parser.add_argument("--store-outcomes", type=int, default=400, help="outcomes for the store-alone part (default: 400)")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout of the harness to run part 1 with too")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    try:
        matrix = write_matrix(work, args.cells)
        folder = work / "scenarios"
        folder.mkdir()
        scenarios = []
        for i in range(args.scenarios):
            path = folder / f"light{i:03d}.py"
            path.write_text(f"print('light {i}')\n")
            scenarios.append(path)
        env_root = work / "envs"
        warm = subprocess.run(
            sweep_command(matrix, work / "warm.duckdb", env_root, scenarios[:1], "warm"),
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        if warm.returncode != 0:
            raise SystemExit(f"prebuild failed:\n{warm.stdout[-2000:]}\n{warm.stderr[-2000:]}")
        runs = {"this harness": part_one(args, matrix, env_root, scenarios, work, REPO)}
        if args.compare:
            runs[f"harness at {args.compare}"] = part_one(args, matrix, env_root, scenarios, work, args.compare.resolve())
        per_journal, per_held, fold_ms = store_costs(args.store_outcomes, work)
        outcomes = args.cells * args.scenarios
        load = os.getloadavg()[0]
        print(
            f"bench_live  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  host: {platform.node()}, {os.cpu_count()} CPUs, "
            f"load avg at the end {load:.2f}; median of {args.repeats} (min–max)"
        )
        print(f"sweep of {outcomes} light outcomes ({args.cells} cells × {args.scenarios} scenarios, fork, preload = [])")
        for name, part in runs.items():
            ratios = [w / a for w, a in zip(part.walls["with reader"], part.walls["alone"])]
            print(f" {name}:")
            print(f"  alone:                      {spread(part.walls['alone'])}")
            polled = f"({statistics.median(part.reads):.0f} reads a sweep, {part.failed_reads} of {sum(part.reads)} failed)"
            print(f"  reader polling every 1 s:   {spread(part.walls['with reader'])}  {polled}")
            print(f"  ratio (with / alone):       {spread(ratios, unit='', digits=3)}")
            if part.failed_sweeps:
                print(f"  sweeps that failed:         {part.failed_sweeps} of {2 * args.repeats}")
        every = f"FOLD_SECONDS {store_module.FOLD_SECONDS:g}"
        print(f"store alone, {args.store_outcomes} outcomes into a copy of results/default.duckdb ({every})")
        print(f"  journal + folds:            {per_journal:.2f} ms per outcome")
        print(f"  held connection (before):   {per_held:.2f} ms per outcome")
        print(f"  one fold (copy, insert, checkpoint, swap): {fold_ms:.0f} ms")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
