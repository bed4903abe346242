"""The peer check, distributed (issue #29): a slice of peft v0.20.0's tests/test_custom_models.py in
the 2 cells of results/peer/peft-0.20.0-full/matrix.toml, cut into test shards by `harness plan
--format slurm` and run through a local Slurm (tests/integration/slurm_cluster.py); every node
id's status in the merged file against the unsharded run's (results/peer/peft-0.20.0-full).

    .venv/bin/python benchmarks/peer_slurm.py --out results/peer/peft-0.20.0-slurm \\
        [--tests-git /work/.mirror/huggingface+peft/repo] [--env-root /tmp/peer-envs] \\
        [--full-db /tmp/peer-full.duckdb] [--scratch /tmp/h29p] [--shards 4] [-k EXPR]

1. The slice: the node ids of the unsharded run's statuses.csv.gz that pytest's -k expression
   selects (pytest's own Expression, matched against the node id's parts, as -k matches names).
2. The durations the plan balances by: the unsharded run's results file (--full-db) narrowed to
   the slice's node ids (`harness plan` weighs every stored test of a cell, -k or not; the plan
   with the whole file is printed too, into plan-full-durations-stderr.txt). Without
   --full-db the plan splits by count.
3. A one-node Slurm under SCRATCH/slurm (munge, slurmctld, slurmd, slurmdbd on MariaDB for
   sacct), CPUs = this machine's cores, each task 1 CPU: on 2 cores, 2 tasks at once.
4. `harness plan --shards N --format slurm > sweep.sbatch`, `sbatch sweep.sbatch` (PATH with
   this repo's harness, OMP_NUM_THREADS=1 as the unsharded `--jobs 2` sweep gave each cell on 2
   cores); squeue polled until empty; sacct.
5. Node id by node id: the merged file's status (pytest's word, as peer_full.py maps it) against
   the unsharded harness word and plain pytest word; every (cell, node id) in one shard once.

Skips (exit 0, a message) where the mirror, its tag v0.20.0 or a startable Slurm is missing.
Exit 1 where a status differs or a node id is missing on either side.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.running.testsuite import pytest_word  # noqa: E402

FULL = REPO / "results/peer/peft-0.20.0-full"
SLICE = "not TestPeftCustomModel or test_adapter_dtype_autocast"
RUN_ID = "peer-slurm"


def skip(why: str) -> int:
    print(f"peer_slurm: skipped: {why}")
    return 0


def selected(nodeids: list[str], keyword: str) -> list[str]:
    """The node ids pytest's `-k keyword` keeps, matching the expression's words as substrings
    (case-insensitive) of the node id's parts: its path's folders and file, class, test name
    with its parameters (pytest also matches markers; the expression here names none)."""
    from _pytest.mark.expression import Expression

    expression = Expression.compile(keyword)
    kept = []
    for node in nodeids:
        path, *rest = node.split("::")
        names = [n.lower() for n in [*path.split("/"), *rest]]

        def matches(word: str, /, names: list[str] = names, **_: object) -> bool:
            return any(word.lower() in n for n in names)

        if expression.evaluate(matches):
            kept.append(node)
    return kept


def unsharded() -> dict[tuple[str, str], tuple[str, str]]:
    """(cell, node id) -> (harness word, plain pytest word) of the unsharded run."""
    with gzip.open(FULL / "statuses.csv.gz", "rt", newline="") as fh:
        return {(r["cell"], r["nodeid"]): (r["harness"], r["plain_pytest"]) for r in csv.DictReader(fh)}


def narrowed_durations(full_db: Path, nodes: set[str], dest: Path) -> None:
    """A copy of the unsharded results file holding only the slice's outcomes."""
    dest.unlink(missing_ok=True)
    shutil.copy(full_db, dest)
    with duckdb.connect(str(dest)) as con:
        con.execute("CREATE TEMP TABLE keep (scenario VARCHAR)")
        con.executemany("INSERT INTO keep VALUES (?)", [[n] for n in sorted(nodes)])
        con.execute("DELETE FROM outcomes WHERE scenario NOT IN (SELECT scenario FROM keep)")


def seconds_of(elapsed: str) -> int:
    """sacct's Elapsed ([D-]HH:MM:SS) in seconds."""
    days, _, hms = elapsed.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "results/peer/peft-0.20.0-slurm")
    parser.add_argument("--tests-git", default="/work/.mirror/huggingface+peft/repo")
    parser.add_argument("--env-root", type=Path, default=Path("/tmp/peer-envs"))
    parser.add_argument("--full-db", type=Path, default=Path("/tmp/peer-full.duckdb"), help="the unsharded run's results file (durations)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/h29p"))
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("-k", dest="keyword", default=SLICE)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the jobs")
    parser.add_argument("--report-only", action="store_true", help="no run: compare again from SCRATCH/work and OUT's sacct.txt")
    args = parser.parse_args()

    # 0. what it needs
    git = Path(args.tests_git)
    if not git.exists():
        return skip(f"no peft mirror at {git} (the fetch tool's github:huggingface/peft, or any clone: --tests-git)")
    tag = subprocess.run(["git", f"--git-dir={git}", "rev-parse", "v0.20.0^{commit}"], capture_output=True, text=True)
    if tag.returncode:
        return skip(f"{git} has no tag v0.20.0")
    from tests.integration import slurm_cluster

    # 1. the slice
    full = unsharded()
    every = sorted({node for _, node in full})
    nodes = selected(every, args.keyword)
    cells = sorted({cell for cell, _ in full})
    print(f"slice -k {args.keyword!r}: {len(nodes)} of {len(every)} node ids, {len(cells)} cells", flush=True)
    if len(nodes) < 4000:
        print(f"peer_slurm: the slice has {len(nodes)} node ids, fewer than the 4,000 asked", file=sys.stderr)

    work, out = args.scratch / "work", args.out
    if args.report_only:
        durations = args.scratch / "durations-slice.duckdb"
        return report(args, work, out, durations if durations.is_file() else None, nodes, cells, full)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(FULL / "matrix.toml", work / "matrix.toml")
    shutil.copy(FULL / "matrix.toml", out / "matrix.toml")

    # 2. durations
    harness = str(REPO / ".venv/bin/harness")
    plan = [harness, "plan", "--matrix", "matrix.toml", "--tests-git", args.tests_git, "-k", args.keyword, "--shards", str(args.shards)]
    plan += ["--format", "slurm", "--env-root", str(args.env_root), "--run-id", RUN_ID, "--db", "results/compat.duckdb"]
    durations: Path | None = None
    if args.full_db.is_file():
        whole = subprocess.run([*plan, "--durations", str(args.full_db)], cwd=work, capture_output=True, text=True)
        (out / "plan-full-durations-stderr.txt").write_text(f"$ {shlex.join([*plan, '--durations', str(args.full_db)])}\n{whole.stderr}")
        durations = args.scratch / "durations-slice.duckdb"
        narrowed_durations(args.full_db, set(nodes), durations)
    else:
        print(f"no {args.full_db}: the plan splits by count", flush=True)

    # 3. the cluster
    root = args.scratch / "slurm"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    cluster = slurm_cluster.start(root)
    if isinstance(cluster, str):
        return skip(f"no local Slurm: {cluster} (scripts/install_slurm.sh installs it)")
    try:
        return run(args, cluster, work, out, plan, durations, nodes, cells, full)
    finally:
        cluster.stop()


def run(args, cluster, work: Path, out: Path, plan: list[str], durations, nodes: list[str], cells: list[str], full) -> int:
    logs: dict[str, str] = {}
    logs["sinfo"] = "$ sinfo\n" + cluster.run("sinfo").stdout
    node = cluster.run("scontrol", "show", "node").stdout
    logs["sinfo"] += "$ scontrol show node | grep -E 'CPUTot|CfgTRES'\n" + "".join(
        line.strip() + "\n" for line in node.splitlines() if "CPUTot" in line or "CfgTRES" in line
    )
    logs["sinfo"] += f"sacct (slurmdbd): {'yes' if cluster.accounting else 'no'}\n"

    # 4. plan and submit
    flags = ["--durations", str(durations)] if durations else []
    planned = subprocess.run([*plan, *flags], cwd=work, capture_output=True, text=True)
    if planned.returncode:
        print(planned.stderr, file=sys.stderr)
        return 1
    (work / "sweep.sbatch").write_text(planned.stdout)
    (out / "sweep.sbatch").write_text(planned.stdout)
    (out / "plan-stderr.txt").write_text(f"$ {shlex.join([*plan, *flags])} > sweep.sbatch\n{planned.stderr}")
    print(planned.stderr, end="", flush=True)
    path = f"{REPO / '.venv/bin'}:{os.environ.get('PATH', '')}"
    export = f"--export=ALL,PATH={path},OMP_NUM_THREADS=1"
    started = time.monotonic()
    submitted = cluster.run("sbatch", export, "sweep.sbatch", cwd=work)
    logs["sbatch"] = f"$ sbatch {export.replace(path, '<repo>/.venv/bin:$PATH')} sweep.sbatch\n{submitted.stdout}"
    print(submitted.stdout, end="", flush=True)

    # squeue until empty (a snapshot each time the queue changes)
    snapshots, last = [], None
    deadline = time.monotonic() + args.timeout
    while True:
        shown = cluster.run("squeue").stdout
        states = [line.split()[:5] for line in shown.splitlines()[1:]]
        key = [(s[0], s[4]) for s in states]
        if key != last:
            stamp = time.monotonic() - started
            snapshots.append(f"# +{stamp:.0f} s\n$ squeue\n{shown}")
            print(f"+{stamp:.0f} s: " + "; ".join(f"{s[0]} {s[2]} {s[4]}" for s in states), flush=True)
            last = key
        if not states or time.monotonic() > deadline:
            break
        time.sleep(5)
    wall = time.monotonic() - started
    logs["squeue"] = "\n".join(snapshots)
    time.sleep(3)  # accounting settles
    fmt = "--format=JobID,JobName%14,State,ExitCode,Start,End,Elapsed"
    sacct = cluster.run("sacct", fmt, check=False)
    logs["sacct"] = f"$ sacct {fmt}\n{sacct.stdout}{sacct.stderr}"
    for name, text in logs.items():
        (out / f"{name}.txt").write_text(text)
    (out / "queue-seconds.txt").write_text(f"sbatch to empty queue: {wall:.1f} s\n")
    return report(args, work, out, durations, nodes, cells, full)


def report(args, work: Path, out: Path, durations, nodes: list[str], cells: list[str], full) -> int:
    """The comparison and the per-shard numbers, from SCRATCH/work and OUT's sacct.txt, plan-stderr.txt."""
    array = min(int(p.name.split("-")[2].split("_")[0]) for p in work.glob("slurm-compat-*_*.log"))
    sacct_text = (out / "sacct.txt").read_text()
    wall_text = (out / "queue-seconds.txt").read_text() if (out / "queue-seconds.txt").exists() else ""
    wall = float(re.search(r"([\d.]+) s", wall_text).group(1)) if wall_text else float("nan")  # type: ignore[union-attr]
    stored: dict[tuple[str, str], float] = {}
    if durations:
        with duckdb.connect(str(durations), read_only=True) as con:
            stored = {(c, n): s for c, n, s in con.execute("SELECT cell_id, scenario, seconds FROM outcomes").fetchall()}
    plan_text = (out / "plan-stderr.txt").read_text()

    # shard walls: sacct's Elapsed of each array task, and what each shard ran
    walls: dict[str, int] = {}
    for line in sacct_text.splitlines()[3:]:
        parts = line.split()
        if len(parts) >= 7 and re.fullmatch(rf"{array}_\d+", parts[0]):
            walls[parts[0].split("_")[1]] = seconds_of(parts[6])
    expected = {m.group(1): float(m.group(2)) for m in re.finditer(r"shard (\d+)/\d+: .*expected ([\d.]+) s", plan_text)}
    shards: dict[str, dict] = {}
    seen: Counter[tuple[str, str]] = Counter()
    for i in range(1, args.shards + 1):
        file = work / "results" / f"shard-{i}.jsonl"
        rows = [json.loads(x) for x in file.read_text().splitlines() if x.strip()] if file.exists() else []
        outcomes = [r for r in rows if r.get("type") == "outcome"]
        seen.update((r["cell_id"], r["scenario"]) for r in outcomes)
        log = next(work.glob(f"slurm-compat-{array}_{i}.log"), None)
        text = log.read_text() if log else ""
        head = "\n".join(text.splitlines()[:5])
        (out / f"slurm-compat-task{i}.log.head.txt").write_text(f"$ head -n 5 slurm-compat-{array}_{i}.log\n{head}\n")
        timing = next((line for line in text.splitlines() if line.startswith("time:")), "")
        shards[str(i)] = {
            "expected_seconds": expected.get(str(i)),
            "wall_seconds_sacct": walls.get(str(i)),
            "outcomes": len(outcomes),
            "per_cell": dict(Counter(r["cell_id"] for r in outcomes)),
            "test_seconds": round(sum(r.get("seconds") or 0 for r in outcomes), 1),
            "stored_seconds_of_its_tests": round(sum(stored.get((r["cell_id"], r["scenario"]), 0.0) for r in outcomes), 1),
            "timing_line": timing,
        }
    merge_log = sorted(work.glob("slurm-compat-*-merge.log"))
    merge_text = merge_log[-1].read_text() if merge_log else "(no merge log)"
    (out / "merge-log.txt").write_text(merge_text)

    # 5. node id by node id
    merged = work / "results" / "compat.duckdb"
    with duckdb.connect(str(merged), read_only=True) as con:
        rows = con.execute(
            "SELECT o.cell_id, o.scenario, o.status, coalesce(o.message, '') FROM outcomes o "
            "JOIN cells c ON c.run_id = o.run_id AND c.cell_id = o.cell_id WHERE o.run_id = ? AND c.origin = 'matrix'",
            [RUN_ID],
        ).fetchall()
    sharded = {(cell, node): pytest_word(status, message) for cell, node, status, message in rows}
    raw = {(cell, node): status for cell, node, status, _ in rows}
    raw_full: dict[tuple[str, str], str] = {}
    if args.full_db.is_file():
        with duckdb.connect(str(args.full_db), read_only=True) as con:
            raw_full = {(c, n): s for c, n, s in con.execute("SELECT cell_id, scenario, status FROM outcomes").fetchall()}
    table, per_cell, in_slice = [], {}, set(nodes)
    for cell in cells:
        keys = sorted({(cell, n) for n in nodes} | {k for k in sharded if k[0] == cell})
        compared = differ = missing_sharded = extra = plain_differ = 0
        for key in keys:
            ours = sharded.get(key, "missing")
            theirs, plain = full.get(key, ("missing", "missing")) if key[1] in in_slice else ("not in slice", "not in slice")
            table.append((key[1], cell, ours, theirs))
            compared += ours != "missing" and theirs not in ("missing", "not in slice")
            differ += ours != theirs
            plain_differ += ours != plain
            missing_sharded += ours == "missing"
            extra += theirs == "not in slice"
        raw_differ = sum(1 for k in keys if k in raw and k in raw_full and raw[k] != raw_full[k])
        per_cell[cell] = {
            "compared": compared,
            "differences": differ,
            "differences_vs_plain_pytest": plain_differ,
            "raw_status_differences": raw_differ,
            "missing_in_sharded": missing_sharded,
            "sharded_not_in_slice": extra,
            "sharded_counts": dict(Counter(w for (c, _), w in sharded.items() if c == cell)),
        }
    differences = [r for r in table if r[2] != r[3]]
    twice = sum(1 for v in seen.values() if v > 1)
    summary = {
        "slice": {"path": "tests/test_custom_models.py", "k": args.keyword, "node_ids": len(nodes), "tag": "v0.20.0"},
        "run_id": RUN_ID,
        "shards": args.shards,
        "cells": per_cell,
        "compared": sum(c["compared"] for c in per_cell.values()),
        "differences": len(differences),
        "outcomes_in_shards": sum(seen.values()),
        "keys_in_more_than_one_shard": twice,
        "per_shard": shards,
        "submit_to_empty_queue_seconds": round(wall, 1),
        "merge_log_tail": merge_text.strip().splitlines()[-3:],
        "durations": "unsharded run narrowed to the slice" if durations else "none (by count)",
        "machine": f"{os.cpu_count()} cores, slurm node CPUs={os.cpu_count()}, 1 CPU per task",
    }
    (out / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n")
    with gzip.open(out / "statuses.csv.gz", "wt", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["nodeid", "cell", "sharded", "unsharded"])
        writer.writerows(table)
    lines = [
        f"peft v0.20.0 tests/test_custom_models.py -k {args.keyword!r}: {len(nodes)} node ids x {len(cells)} cells, "
        f"{args.shards} test shards through the local Slurm (array job {array})",
    ]
    for cell, c in per_cell.items():
        lines.append(
            f"  {cell}: {c['compared']} compared, {c['differences']} differences (vs plain pytest {c['differences_vs_plain_pytest']}, "
            f"raw status {c['raw_status_differences']}), missing in sharded {c['missing_in_sharded']}, "
            f"not in slice {c['sharded_not_in_slice']}; {c['sharded_counts']}"
        )
    lines.append(f"outcomes in the shards' files: {sum(seen.values())}, keys in more than one shard: {twice}")
    for i, s in shards.items():
        lines.append(
            f"  shard {i}/{args.shards}: expected {s['expected_seconds']} s, wall {s['wall_seconds_sacct']} s (sacct), "
            f"{s['outcomes']} outcomes {s['per_cell']}, tests' own seconds {s['test_seconds']} "
            f"(the unsharded run stored {s['stored_seconds_of_its_tests']} for them)"
        )
    lines.append(f"sbatch to empty queue: {wall:.0f} s; merge: {' | '.join(summary['merge_log_tail'])}")
    lines.append(f"differences: {len(differences)}")
    lines += [f"  {r[1]} {r[0]}: sharded {r[2]}, unsharded {r[3]}" for r in differences[:50]]
    (out / "comparison.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 1 if differences or twice else 0


if __name__ == "__main__":
    sys.exit(main())
