"""Balance of test shards (#29): a suite with uneven test durations in 4 test shards, by count
against by time (the durations a first run stored), each shard's longest against the mean,
measured; then `harness merge` of the time shards and `harness refine` of the merged file.

    python benchmarks/bench_shards.py [--out DIR] [--env-root DIR] [--shards 4]

The shards run one after another (not at once), so that each one's seconds are its own on a
shared machine: "wall" is the whole `harness sweep --shard` process (env reused, fork server,
collection, its tests), "tests" the sum of its tests' stored seconds. The target: the longest
time shard at most 1.2x the mean.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: A few long tests among many short ones: 4 + 20 + 24 tests, about 14 s in all.
SECONDS = [3.0, 2.5, 2.0, 1.5] + [0.2] * 20 + [0.05] * 24
SUITE = f"""import time

import pytest

SECONDS = {SECONDS!r}


@pytest.mark.parametrize("i", range(len(SECONDS)))
def test_work(i):
    time.sleep(SECONDS[i])
"""
MATRIX = '[matrix]\npython = "3.11"\ntimeout = 60\npreload = []\n[axes]\npackaging = ["24.0"]\n'


def harness(*args: str, cwd: Path) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, env=None)
    seconds = time.monotonic() - started
    if proc.returncode:
        raise SystemExit(f"harness {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, proc.stdout + proc.stderr


def test_seconds(shard: Path) -> float:
    rows = [json.loads(line) for line in shard.read_text().splitlines() if line.strip()]
    return sum(float(r.get("seconds") or 0) for r in rows if r.get("type") == "outcome")


def shards(work: Path, mode: str, count: int, common: list[str]) -> list[tuple[float, float]]:
    """(wall, tests) seconds of each shard, run one after another."""
    durations = ["--durations", "first.jsonl"] if mode == "time" else []
    plan_wall, said = harness("plan", *common, "--shards", str(count), "--run-id", mode, *durations, cwd=work)
    print(f"{mode}: harness plan {plan_wall:.2f} s", *[line for line in said.splitlines() if line.startswith("harness:")], sep="\n  ")
    found = []
    for i in range(1, count + 1):
        db = work / f"{mode}-{i}.jsonl"
        db.unlink(missing_ok=True)
        wall, _ = harness(
            "sweep", *common, "--shard", f"{i}/{count}", "--run-id", mode, *durations, "--db", db.name, "--no-progress", cwd=work
        )
        found.append((wall, test_seconds(db)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-shards"))
    parser.add_argument("--env-root", type=Path, default=None)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    work = args.out
    (work / "suite" / "tests").mkdir(parents=True, exist_ok=True)
    (work / "suite" / "tests" / "test_uneven.py").write_text(SUITE)
    (work / "m.toml").write_text(MATRIX)
    env_root = ["--env-root", str((args.env_root or work / "envs").resolve())]
    common = ["--matrix", "m.toml", "--tests", "tests", "--tests-root", "suite", *env_root]
    (work / "first.jsonl").unlink(missing_ok=True)
    wall, _ = harness("sweep", *common, "--db", "first.jsonl", "--run-id", "first", "--no-progress", "--no-refine", cwd=work)
    print(f"first run (stores the durations): {wall:.1f} s wall, tests {test_seconds(work / 'first.jsonl'):.1f} s")
    for mode in ("count", "time"):
        measured = shards(work, mode, args.shards, common)
        walls, tests = [w for w, _ in measured], [t for _, t in measured]
        for i, (w, t) in enumerate(measured, 1):
            print(f"  {mode} shard {i}/{args.shards}: wall {w:.2f} s, tests {t:.2f} s")
        for what, values in (("wall", walls), ("tests", tests)):
            mean = sum(values) / len(values)
            print(f"  {mode} {what}: longest {max(values):.2f} s, mean {mean:.2f} s, {max(values) / mean:.2f}x the mean")
    merged = work / "merged.duckdb"
    merged.unlink(missing_ok=True)
    files = [f"time-{i}.jsonl" for i in range(1, args.shards + 1)]
    wall, said = harness("merge", "--db", merged.name, *files, cwd=work)
    print(f"merge of {len(files)} shards: {wall:.2f} s ({said.strip().splitlines()[-1]})")
    wall, said = harness("refine", "--db", merged.name, "--matrix", "m.toml", *env_root, cwd=work)
    print(f"refine of the merged file: {wall:.2f} s ({said.strip().splitlines()[-1][:120]})")


if __name__ == "__main__":
    main()
