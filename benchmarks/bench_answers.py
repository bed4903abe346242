"""The commands that answer, over a team's suite at 5,000, 10,000 and 20,000 tests, before against after;
or over a team's history of nightly runs in one file.

    .venv/bin/python benchmarks/bench_answers.py --before 01440fa [--sizes 5000 10000 20000] [--repeats 3] [--cap 120]
    .venv/bin/python benchmarks/bench_answers.py --before b4e5ab2 --sizes 20000 --runs 1 10 30 [--drift 0.01]
    .venv/bin/python benchmarks/bench_answers.py --before d834208 --sizes 20000 --runs 2 10 --broken-file 500
    .venv/bin/python benchmarks/bench_answers.py --before d834208 --sizes 20000 100000 --only summary attribute ...

With --runs, each number of nights N gets three files from make_large_store (same seed, same
nights; with --broken-file, a file of that many tests fails to import on the newest night): the
history as this harness keeps it, the newest night alone, and every night's rows
in `outcomes` as the --before harness kept them; each command is timed over each (`history`).

For each size, `make_large_store.py --tests N --cells 20` writes a results file (kept in
--stores, reused when there), and each command runs as a whole process, side by side with the
harness of the --before commit (exported from git into a temporary folder, run with the same
interpreter): `harness summary`, `harness attribute --offline` (on a fresh copy: it stores its
transitions), `harness pin` by one node id, by a file and by `-m 'not slow'`, `harness report`
of a signature, `harness publish`, and watch's decision (`--decide`: the known-good set, one target moved to a newer
release, and `analysis.watch.verdict` over every outcome and the attribution, as `harness watch`
decides after it built its cells; no index is asked). Medians of --repeats runs; a run past
--cap seconds is stopped and counts as more than the cap, and a side that passed the cap once is
not run again at that size. Wall seconds and CPU seconds (user + system of the process and its
children; steadier than the wall on a loaded machine) are printed, with after/before ratios,
DuckDB's floor (the command's question asked as queries in this process: `FLOOR`) and after/floor,
each side's peak memory (the command's process tree's largest resident set), and each command's
growth from the smallest size to the largest.
"""

from __future__ import annotations

import argparse
import inspect
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def decide(path: str) -> int:
    """watch's decision over one results file, with whichever harness is on sys.path."""

    try:  # `harness watch` decides under the CLI's pace of the cycle collector, where the tree has one
        from harness.cli import paced_collector
    except ImportError:
        return _decide(path)
    with paced_collector():
        return _decide(path)


def _decide(path: str) -> int:
    from harness.analysis import attribution, watch
    from harness.storage import queries
    from harness.storage.opening import open_results

    store = open_results(path, read_only=True)
    quiet: tuple[Any, ...] = ()
    if "quiet" in inspect.signature(watch.verdict).parameters:  # a harness whose watch reads the loud rows, as it does
        rows, found = queries.loud_rows(store)
        quiet = (found,)
    else:
        rows = queries.outcome_rows(store)
    transitions = attribution.attribute(rows, known_versions=queries.known_releases(store)).transitions
    good = watch.known_good(rows, *quiet)
    assert good is not None, "no known-good set"
    # the newest stored transformers release other than the known-good set's, as a "new" one
    held = dict(good.versions)
    stored = sorted({r["transformers"] for r in rows if r.get("transformers")}, key=lambda v: tuple(int(p) for p in v.split(".")))
    newer = [v for v in stored if v != held.get("transformers")]
    targets = watch.plan_targets(good, {"transformers": newer[-1:]})
    mine = [r for t in targets for r in watch.rows_of(t, rows)]
    results = watch.verdict(good, targets, rows, mine, transitions, "", *quiet)
    print(f"{sum(len(r.findings) for r in results)} finding(s) over {len(targets)} target(s), {len(rows)} outcome(s)")
    return 0


#: Runs a command and says, last on stderr, the peak resident memory of its process tree's largest
#: (`ru_maxrss` of the children of this fresh process: the command's own, no earlier run's).
_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(f'peak-kb {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)
#: The last peak memory `timed` measured, in MB (0 when the run was stopped).
LAST_PEAK_MB = [0.0]


def timed(command: list[str], cwd: Path, cap: float) -> tuple[float, float, bool]:
    """(wall, CPU seconds, finished) of one run of `command`; its peak memory in LAST_PEAK_MB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    LAST_PEAK_MB[0] = 0.0
    try:
        env = {**os.environ, "PYTHONPATH": str(cwd)}  # that side's harness, not the installed one
        wrapped = [sys.executable, "-c", _PEAK, *command]
        done = subprocess.run(wrapped, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=cap, text=True)
        if done.returncode not in (0, 1):  # 1: an answer too (nothing passes, a regression)
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
        peak = [line for line in done.stderr.splitlines() if line.startswith("peak-kb ")]
        LAST_PEAK_MB[0] = int(peak[-1].split()[1]) / 1024 if peak else 0.0
        finished = True
    except subprocess.TimeoutExpired:
        finished = False
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, finished


#: DuckDB's floor under each command: the question it answers, asked as queries of the same file
#: in this process (no Python rows), as issue #48 states it. The summary's: the status counts,
#: every failing (test, signature) with its cells, the per-cell pass counts; a pin's: per cell,
#: whether every selected test passed in every repeat; a report's: the signature's outcomes with
#: their tracebacks; attribute's: the failing tests' outcomes in every cell.
FLOOR = {
    "summary": [
        "SELECT status, count(*) FROM outcomes_v GROUP BY ALL",
        "SELECT scenario, signature, list(DISTINCT cell_id) FROM outcomes_v WHERE status IN ('fail', 'error', 'crash', 'timeout', 'oom') "
        "GROUP BY ALL",
        "SELECT cell_id, count(*) FILTER (status = 'pass') FROM outcomes_v GROUP BY ALL",
    ],
    "attribute": [
        "SELECT o.cell_id, o.scenario, o.status, o.signature FROM outcomes_v o WHERE o.scenario IN "
        "(SELECT scenario FROM outcomes WHERE status IN ('fail', 'error', 'crash', 'timeout', 'oom'))",
    ],
    "pin --test FILE": [
        "SELECT cell_id, bool_and(status = 'pass') FROM outcomes_v WHERE scenario LIKE ? || '::%' GROUP BY ALL",
    ],
    "report --signature": [
        "SELECT v.*, o.traceback FROM outcomes_v v JOIN outcomes o USING (run_id, cell_id, scenario, repeat) "
        "WHERE v.signature LIKE '%KeyError%'",
    ],
}
FLOOR["publish"] = [*FLOOR["summary"], "SELECT cell_id, split_part(scenario, '::', 1), status, count(*) FROM outcomes_v GROUP BY ALL"]


#: The floor as a command meets it: a fresh Python process that imports DuckDB, opens the file and
#: asks the same queries (what any CLI pays before it prints a line).
_FLOOR_PROCESS = (
    "import sys, duckdb\n"
    "con = duckdb.connect(sys.argv[1], read_only=True)\n"
    "for sql in sys.argv[3:]:\n"
    "    con.execute(sql, [sys.argv[2]] if '?' in sql else []).fetchall()\n"
)


def process_floor_of(name: str, db: Path, sample: dict[str, str], repeats: int) -> float | None:
    """The median wall seconds of `FLOOR`'s queries asked by a fresh process (`_FLOOR_PROCESS`), or None."""
    queries = FLOOR.get(name)
    if not queries:
        return None
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _FLOOR_PROCESS, str(db), sample["file"], *queries], check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def floor_of(name: str, db: Path, sample: dict[str, str], repeats: int) -> float | None:
    """The median seconds DuckDB takes to answer command `name`'s question (FLOOR), or None."""
    import duckdb

    queries = FLOOR.get(name)
    if not queries:
        return None
    walls = []
    for _ in range(repeats):
        con = duckdb.connect(str(db), read_only=True)
        start = time.perf_counter()
        for sql in queries:
            con.execute(sql, [sample["file"]] if "?" in sql else []).fetchall()
        walls.append(time.perf_counter() - start)
        con.close()
    return statistics.median(walls)


def commands(db: Path, scratch: Path, sample: dict[str, str], tree: Path = ROOT) -> dict[str, list[str]]:
    py = [sys.executable, "-m", "harness.cli"]
    return {
        "summary": [*py, "summary", "--db", str(db)],
        "attribute": [*py, "attribute", "--offline", "--db", str(scratch)],
        "pin --test NODEID": [*py, "pin", "--db", str(db), "--test", sample["node"]],
        "pin --test FILE": [*py, "pin", "--db", str(db), "--test", sample["file"]],
        "pin -m 'not slow'": [*py, "pin", "--db", str(db), "-m", "not slow"],
        "report --signature": [*py, "report", "--db", str(db), "--signature", "KeyError"],
        "publish": [*py, "publish", "--db", str(db), "--out", str(scratch.parent / f"site-{scratch.stem}")],
        "watch's decision": [sys.executable, str(tree / "benchmarks" / "bench_answers.py"), "--decide", str(db)],
    }


def sample_of(db: Path) -> dict[str, str]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    row = con.execute("SELECT scenario FROM outcomes WHERE scenario LIKE '%::%' ORDER BY scenario LIMIT 1").fetchone()
    con.close()
    assert row is not None
    node = str(row[0])
    return {"node": node, "file": node.split("::")[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="01440fa", help="the commit to compare with (default: landed main before #28)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000])
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", type=float, default=120.0, help="seconds a run may take before it is stopped")
    parser.add_argument("--stores", type=Path, default=Path(tempfile.gettempdir()) / "bench-answers")
    parser.add_argument("--only", nargs="*", default=[], help="only these commands (names as printed)")
    parser.add_argument("--after-only", action="store_true", help="time this checkout alone (the before side is known to pass the cap)")
    parser.add_argument("--decide", default="", help=argparse.SUPPRESS)
    parser.add_argument(
        "--runs",
        type=int,
        nargs="*",
        default=[],
        help="a team's history instead: files of this many nightly runs (make_large_store --runs N --drift), "
        "each against the same file holding only its newest run, and the --before harness over every night's rows",
    )
    parser.add_argument("--drift", type=float, default=0.01, help="with --runs: the share of outcomes that change each night")
    parser.add_argument(
        "--broken-file", type=int, default=0, help="with --runs: a test file of this many tests fails to import on the newest night"
    )
    args = parser.parse_args(argv)
    if args.decide:
        return decide(args.decide)
    if args.runs:
        return history(args)
    args.stores.mkdir(parents=True, exist_ok=True)
    old = Path(tempfile.mkdtemp(prefix="bench-answers-before-"))
    archive = subprocess.run(["git", "archive", args.before, "harness", "benchmarks"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    shutil.copy(ROOT / "benchmarks" / "bench_answers.py", old / "benchmarks" / "bench_answers.py")  # the same --decide
    sides = {"after": ROOT} if args.after_only else {"before": old, "after": ROOT}
    table: list[tuple[str, int, dict[str, tuple[float, float, bool]]]] = []
    for size in args.sizes:
        # each side reads a file its own make_large_store wrote (same seed, same outcomes): an older
        # harness refuses to write to a file of a newer schema
        dbs = {side: args.stores / f"suite-{size}x{args.cells}-{side}.duckdb" for side in sides}
        for side, db in dbs.items():
            if not db.exists():
                make = [sys.executable, str(sides[side] / "benchmarks" / "make_large_store.py"), "--tests", str(size)]
                subprocess.run([*make, "--cells", str(args.cells), "--out", str(db)], cwd=sides[side], check=True)
        sample = sample_of(dbs["after"])
        for name in commands(dbs["after"], dbs["after"], sample):
            if args.only and name not in args.only:
                continue
            found: dict[str, tuple[float, float, bool]] = {}
            peaks: dict[str, float] = {}
            for side, tree in sides.items():
                runs, peak = [], []
                for _ in range(args.repeats):
                    scratch = args.stores / f"scratch-{side}.duckdb"
                    shutil.copy(dbs[side], scratch)
                    run = timed(commands(dbs[side], scratch, sample, tree)[name], tree, args.cap)
                    runs.append(run)
                    peak.append(LAST_PEAK_MB[0])
                    if not run[2]:
                        break  # past the cap: not again at this size
                finished = all(r[2] for r in runs)
                found[side] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), finished)
                peaks[side] = statistics.median(peak)
            floor = floor_of(name, dbs["after"], sample, args.repeats)
            process = process_floor_of(name, dbs["after"], sample, args.repeats)
            table.append((name, size, found))
            print(_line(name, size, found) + _floor_and_peaks(found["after"][0], floor, peaks, process), flush=True)
    print()
    print(_growth(table, args.sizes))
    shutil.rmtree(old, ignore_errors=True)
    return 0


# -- a team's history: many nights in one file -----------------------------------------------------
HISTORY_COMMANDS = ("summary", "attribute", "pin --test FILE", "report --signature", "publish", "watch's decision", "changes")


def _history_commands(db: Path, scratch: Path, sample: dict[str, str], tree: Path, site: Path) -> dict[str, list[str]]:
    found = commands(db, scratch, sample, tree)
    py = [sys.executable, "-m", "harness.cli"]
    found["publish"] = [*py, "publish", "--db", str(db), "--out", str(site)]
    found["changes"] = [*py, "changes", "--db", str(db)]
    return {name: found[name] for name in HISTORY_COMMANDS}


def history(args: argparse.Namespace) -> int:
    """Per number of nights N: `after` (this harness over N nights as it keeps them: the current
    state, the spans of what changed), `newest` (this harness over the same file holding only the
    newest night) and `before` (the --before harness over every night's rows, as it kept them);
    medians of --repeats, with after/newest (the target: at most 1.2) and after/before."""
    args.stores.mkdir(parents=True, exist_ok=True)
    old = Path(tempfile.mkdtemp(prefix="bench-answers-before-"))
    archive = subprocess.run(["git", "archive", args.before, "harness", "benchmarks"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    shutil.copy(ROOT / "benchmarks" / "bench_answers.py", old / "benchmarks" / "bench_answers.py")
    size = args.sizes[-1]
    for nights in args.runs:
        stem = f"history-{size}x{args.cells}-{nights}n-{args.drift:g}" + (f"-broken{args.broken_file}" if args.broken_file else "")
        files = {
            "after": args.stores / f"{stem}.duckdb",
            "newest": args.stores / f"{stem}-newest.duckdb",
            "before": args.stores / f"{stem}-flat.duckdb",
        }
        broken = ["--broken-file", str(args.broken_file)] if args.broken_file else []
        flags = {"after": broken, "newest": ["--newest-only", *broken], "before": ["--flat", *broken]}
        for side, db in files.items():
            if not db.exists():
                make = [sys.executable, str(ROOT / "benchmarks" / "make_large_store.py"), "--tests", str(size), "--cells", str(args.cells)]
                subprocess.run(
                    [*make, "--runs", str(nights), "--drift", str(args.drift), *flags[side], "--out", str(db)], cwd=ROOT, check=True
                )
        sizes = ", ".join(f"{side} {db.stat().st_size / 2**20:.1f} MiB" for side, db in files.items())
        print(f"{nights} night(s) of {size} tests x {args.cells} cells, drift {args.drift:g}: {sizes}", flush=True)
        sample = sample_of(files["newest"])
        trees = {"after": ROOT, "newest": ROOT, "before": old}
        for name in HISTORY_COMMANDS:
            if args.only and name not in args.only:
                continue
            found: dict[str, tuple[float, float, bool]] = {}
            for side in ("newest", "after", "before"):
                if side == "before" and (args.after_only or name == "changes"):
                    continue
                runs = []
                for _ in range(args.repeats):
                    scratch = args.stores / f"scratch-{side}.duckdb"
                    shutil.copy(files[side], scratch)
                    command = _history_commands(files[side], scratch, sample, trees[side], args.stores / f"site-{side}")[name]
                    run = timed(command, trees[side], args.cap)
                    runs.append(run)
                    if not run[2]:
                        break
                found[side] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), all(r[2] for r in runs))
            print(_history_line(name, nights, found), flush=True)
    shutil.rmtree(old, ignore_errors=True)
    return 0


def _history_line(name: str, nights: int, found: dict[str, tuple[float, float, bool]]) -> str:
    after, newest = found["after"], found["newest"]
    line = (
        f"{name:20s} {nights:3d} nights  newest-only {_seconds(newest)}  after {_seconds(after)}  after/newest {after[0] / newest[0]:.2f}"
    )
    if "before" in found:
        before = found["before"]
        line += f"  before {_seconds(before)}  after/before {after[0] / before[0]:.3f}" + ("" if before[2] else " or less")
    return line


def _floor_and_peaks(after: float, floor: float | None, peaks: dict[str, float], process: float | None = None) -> str:
    """`  floor 0.21 s after/floor 7.1 (as a process 0.52 s, 2.9)  peak before 3,730 MB after 780 MB`."""
    text = f"  floor {floor:.2f} s after/floor {after / floor:.1f}" if floor else ""
    if floor and process:
        text += f" (as a process {process:.2f} s, {after / process:.1f})"
    return text + "  peak " + " ".join(f"{side} {mb:,.0f} MB" for side, mb in peaks.items())


def _seconds(value: tuple[float, float, bool]) -> str:
    wall, cpu, finished = value
    return f"{wall:7.1f} s ({cpu:6.1f} cpu)" if finished else f"  >{wall:5.0f} s (stopped)  "


def _line(name: str, size: int, found: dict[str, tuple[float, float, bool]]) -> str:
    if "before" not in found:
        return f"{name:22s} {size:6d} tests  after {_seconds(found['after'])}"
    before, after = found["before"], found["after"]
    ratio = f"{after[0] / before[0]:.3f}" + ("" if before[2] else " or less")
    return f"{name:22s} {size:6d} tests  before {_seconds(before)}  after {_seconds(after)}  after/before {ratio}"


def _growth(table: list[tuple[str, int, dict[str, tuple[float, float, bool]]]], sizes: list[int]) -> str:
    lines = [f"growth of the after medians, {sizes[0]} -> {sizes[-1]} tests ({sizes[-1] / sizes[0]:.0f}x the outcomes):"]
    for name in dict.fromkeys(n for n, _, _ in table):
        by_size = {size: found["after"] for n, size, found in table if n == name}
        if sizes[0] in by_size and sizes[-1] in by_size:
            (wall_a, cpu_a, _), (wall_b, cpu_b, _) = by_size[sizes[0]], by_size[sizes[-1]]
            lines.append(f"  {name:22s} wall x{wall_b / wall_a:.2f}, cpu x{cpu_b / cpu_a:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "100")
    sys.exit(main())
