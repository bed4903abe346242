"""Benchmark: the torch zygote (the default) vs `--no-zygote`, side by side, on real CPU sweeps.

    .venv/bin/python benchmarks/bench_zygote.py [--repeats 3] [--parts default,plain12,probe]

- `default`: the repo's matrix.toml (8 cells, every scenario in scenarios/).
- `plain12`: 12 cells (transformers 5.6.2/5.23.0 x accelerate 1.13.0/1.14.0/1.15.0 x peft
  0.19.1/0.21.2, torch 2.13.0 CPU, bitsandbytes 0.49.2) x one plain script that imports torch
  and multiplies matrices for 0.7 s.
- `probe`: `harness bisect` of gemma4_peft_split_4bit_load over accelerate 1.13.0..1.15.0 into
  a new env root each time, so every probe is one new cell env, its server and one scenario.

Each part first builds its envs into one env root (a `--no-zygote` sweep of a warm-up
scenario that imports what the scenarios import: page cache), then runs one zygote sweep that
learns what the scenarios import (reported as the first zygote run of a fresh clone), then
`--repeats` timed sweeps per mode, the order alternating. Every sweep is one `harness sweep`
CLI process with a fresh results file, timed from outside, with `--no-refine` (the default
sweep refines its ranges at the end: 38 probe cells, a cost of its own, which `probe` measures
per probe). Body seconds are the scenarios' own `seconds` metric (those that record one; an
error row mostly has none, so this share is an upper bound); share outside bodies =
(wall - bodies) / wall. The scenario files' own run is the child's clock around each scenario
file (its imports, its body, to its return or its exception; every outcome), from the sweep's
timing line; share outside the scenario files = (wall - that) / wall: what the harness adds
around the scenarios.
Outcomes (status and signature per cell and scenario) must be identical in every sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HARNESS = [sys.executable, "-m", "harness"]
FIND_LINKS = os.environ.get("PIP_FIND_LINKS", "/opt/wheels")
WARMUP = '''"""bench_zygote warm-up: import what the scenarios import (page cache)."""
import accelerate  # noqa: F401
import peft  # noqa: F401
from _gemma4 import build_model  # noqa: F401
'''
PLAIN = '''"""bench_zygote: a plain script, 0.7 s of matrix products."""
import time
import torch
from _kit import timed

with timed("seconds"):
    x = torch.randn(128, 128)
    end = time.perf_counter() + 0.7
    while time.perf_counter() < end:
        x = torch.tanh(x @ x)
'''
PLAIN12 = """[matrix]
python = "3.11"
find_links = ["{find_links}"]
{extra}
[axes]
torch = ["2.13.0"]
transformers = ["5.6.2", "5.23.0"]
accelerate = ["1.13.0", "1.14.0", "1.15.0"]
peft = ["0.19.1", "0.21.2"]
bitsandbytes = ["0.49.2"]
"""
TIMING = re.compile(r"zygote starts ([\d.]+) s \((\d+);.*?fork-server starts ([\d.]+) s.*?scenarios ([\d.]+) s")


@dataclass
class Run:
    mode: str
    wall: float
    outcomes: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    bodies: float = 0.0
    outcome_seconds: float = 0.0
    zygote_seconds: float = 0.0
    zygote_starts: int = 0
    server_seconds: float = 0.0
    load: float = 0.0
    own_code: float = 0.0  # the scenario files' own run, every outcome (the sweep's timing line)

    @property
    def share(self) -> float:
        return (self.wall - self.bodies) / self.wall

    @property
    def share_code(self) -> float:
        return (self.wall - self.own_code) / self.wall


def sweep(matrix: Path, db: Path, env_root: Path, scenarios: list[Path], mode: str) -> Run:
    args = [*HARNESS, "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--run-id", "b"]
    args += ["--no-refine"]  # the sweep itself: refinement's probes are the `probe` part's business
    args += [a for s in scenarios for a in ("--scenario", str(s))] + (["--no-zygote"] if mode == "no-zygote" else [])
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    run = Run(mode, time.perf_counter() - started, load=load)
    if proc.returncode != 0:
        raise SystemExit(f"bench_zygote: {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    for line in db.read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if rec.get("type") == "outcome":
            run.outcomes[(rec["cell_id"], rec["scenario"])] = (rec["status"], rec["signature"])
            run.outcome_seconds += float(rec.get("seconds") or 0.0)
            body = (rec.get("metrics") or {}).get("seconds")
            run.bodies += float(body) if isinstance(body, int | float) else 0.0
    flat = proc.stdout.replace("\n", " ")
    own = re.search(r"their own code ([\d.]+) s", flat)
    run.own_code = float(own.group(1)) if own else 0.0
    found = TIMING.search(flat)
    if found:
        run.zygote_seconds, run.zygote_starts = float(found.group(1)), int(found.group(2))
        run.server_seconds = float(found.group(3))
    else:
        found = re.search(r"fork-server starts ([\d.]+) s", proc.stdout)
        run.server_seconds = float(found.group(1)) if found else 0.0
    return run


def compare_sweeps(name: str, matrix: Path, scenarios: list[Path], work: Path, repeats: int) -> dict[str, list[Run]]:
    env_root = work / "envs"  # one for both parts: the 8 default cells are among the 12
    print(f"[{name}] prebuild: envs into {env_root} + warm-up imports ...", flush=True)
    warm = sweep(matrix, work / f"{name}-prebuild.jsonl", env_root, [work / "scenarios" / "_bench_warmup.py"], "no-zygote")
    print(f"[{name}]   {warm.wall:.1f} s", flush=True)
    runs: dict[str, list[Run]] = {"no-zygote": [], "zygote": [], "first": []}
    print(f"[{name}] zygote, first run (learns what the scenarios import) ...", flush=True)
    runs["first"].append(sweep(matrix, work / f"{name}-first.jsonl", env_root, scenarios, "zygote"))
    print(f"[{name}]   {runs['first'][0].wall:.1f} s", flush=True)
    for i in range(repeats):
        for mode in ("no-zygote", "zygote") if i % 2 == 0 else ("zygote", "no-zygote"):
            print(f"[{name}] repeat {i + 1}/{repeats}: {mode} ...", flush=True)
            runs[mode].append(sweep(matrix, work / f"{name}-{mode}-{i}.jsonl", env_root, scenarios, mode))
            print(f"[{name}]   {runs[mode][-1].wall:.1f} s", flush=True)
    return runs


def report_sweeps(name: str, runs: dict[str, list[Run]]) -> None:
    plain, zyg, first = runs["no-zygote"], runs["zygote"], runs["first"][0]
    rows = [
        ("sweep wall (s)", lambda r: r.wall, "{:.1f}"),
        ("sum of outcome seconds (s)", lambda r: r.outcome_seconds, "{:.1f}"),
        ("sum of scenario body seconds (s)", lambda r: r.bodies, "{:.1f}"),
        ("outside scenario bodies (s)", lambda r: r.wall - r.bodies, "{:.1f}"),
        ("share outside scenario bodies", lambda r: r.share, "{:.1%}"),
        ("scenario files' own run (s)", lambda r: r.own_code, "{:.1f}"),
        ("outside the scenario files (s)", lambda r: r.wall - r.own_code, "{:.1f}"),
        ("share outside the scenario files", lambda r: r.share_code, "{:.1%}"),
        ("zygote starts (s)", lambda r: r.zygote_seconds, "{:.1f}"),
        ("fork-server starts (s)", lambda r: r.server_seconds, "{:.1f}"),
    ]
    print(f"\n[{name}] medians over {len(plain)} repeats (zygote: runs after the first; first zygote run shown alone)")
    print(f"{'':<36}{'no-zygote':>11}{'zygote':>10}{'ratio':>9}{'first run':>11}")
    for label, key, fmt in rows:
        p, z = statistics.median(map(key, plain)), statistics.median(map(key, zyg))
        ratio = f"{z / p:.2f}x" if p else "-"
        print(f"{label:<36}{fmt.format(p):>11}{fmt.format(z):>10}{ratio:>9}{fmt.format(key(first)):>11}")
    reference = plain[0].outcomes
    same = all(r.outcomes == reference for r in [*plain, *zyg, first])
    statuses = statistics.multimode(s for s, _ in reference.values())
    print(f"outcomes: {len(reference)} per sweep, identical (status and signature) in all {len(plain) + len(zyg) + 1} sweeps: {same}")
    if not same:
        for r in [*zyg, first, *plain[1:]]:
            diff = {k: (v, r.outcomes.get(k)) for k, v in reference.items() if r.outcomes.get(k) != v}
            if diff:
                print(f"  {r.mode}: {len(diff)} differ, e.g. {next(iter(diff.items()))}")
    print(f"most common status: {statuses}; walls: " + "; ".join(f"{m} " + ", ".join(f"{r.wall:.0f}" for r in runs[m]) for m in runs))
    print("load average (1 min) at each start: " + "; ".join(f"{m} " + ", ".join(f"{r.load:.1f}" for r in runs[m]) for m in runs))


def probe_cost(work: Path, repeats: int) -> None:
    scenario = "gemma4_peft_split_4bit_load"
    results: dict[str, list[tuple[float, int, str]]] = {"no-zygote": [], "zygote": []}
    for i in range(repeats):
        for mode in ("no-zygote", "zygote") if i % 2 == 0 else ("zygote", "no-zygote"):
            matrix = work / f"probe-{mode}.toml"
            extra = "zygote = false" if mode == "no-zygote" else ""
            matrix.write_text(PLAIN12.format(find_links=FIND_LINKS, extra=extra))
            env_root = work / f"probe-envs-{mode}-{i}"  # new envs: a probe builds its cell
            args = [*HARNESS, "bisect", "--scenario", scenario, "--axis", "accelerate", "--good", "1.15.0", "--bad", "1.13.0"]
            args += ["--matrix", str(matrix), "--db", str(work / f"probe-{mode}-{i}.duckdb"), "--env-root", str(env_root)]
            print(f"[probe] repeat {i + 1}/{repeats}: bisect, {mode} ...", flush=True)
            started = time.perf_counter()
            proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
            wall = time.perf_counter() - started
            if proc.returncode != 0:
                raise SystemExit(f"bench_zygote: bisect exited {proc.returncode}: {proc.stderr[-2000:]}{proc.stdout[-2000:]}")
            probes = int(re.search(r"(\d+) probe\(s\)", proc.stdout).group(1))  # type: ignore[union-attr]
            answer = next((line for line in proc.stdout.splitlines() if "fixed in" in line or "broken in" in line), "?")
            results[mode].append((wall, probes, answer.strip()))
            print(f"[probe]   {wall:.1f} s, {probes} probes: {answer.strip()}", flush=True)
            shutil.rmtree(env_root, ignore_errors=True)
    print(f"\n[probe] harness bisect --scenario {scenario} --axis accelerate --good 1.15.0 --bad 1.13.0 (new env root each run)")
    print(f"{'median over repeats':<36}{'no-zygote':>11}{'zygote':>10}{'ratio':>9}")
    p_wall, z_wall = (statistics.median(w for w, _, _ in results[m]) for m in ("no-zygote", "zygote"))
    p_per, z_per = (statistics.median(w / n for w, n, _ in results[m]) for m in ("no-zygote", "zygote"))
    print(f"{'bisection wall (s)':<36}{p_wall:>11.1f}{z_wall:>10.1f}{z_wall / p_wall:>8.2f}x")
    print(f"{'per probe (wall / probes) (s)':<36}{p_per:>11.1f}{z_per:>10.1f}{z_per / p_per:>8.2f}x")
    answers = {a for m in results for _, _, a in results[m]}
    print(f"answers: {answers}; probes per run: {sorted({n for m in results for _, n, _ in results[m]})}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="default,plain12,probe", help="comma-separated: default, plain12, probe")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary folder, removed at the end")
    args = parser.parse_args(argv)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="bench-zygote-"))).resolve()
    (work / "scenarios").mkdir(parents=True, exist_ok=True)
    for path in (REPO / "scenarios").glob("*.py"):  # a snapshot: both modes run the same files
        shutil.copy2(path, work / "scenarios" / path.name)
    (work / "scenarios" / "_bench_warmup.py").write_text(WARMUP)
    (work / "scenarios" / "plain_matmul.py").write_text(PLAIN)
    parts = args.parts.split(",")
    started = time.perf_counter()
    print(f"bench_zygote on {os.uname().nodename}, {os.cpu_count()} CPUs (shared machine: load average printed per sweep)")
    try:
        if "plain12" in parts:
            matrix = work / "plain12.toml"
            matrix.write_text(PLAIN12.format(find_links=FIND_LINKS, extra=""))
            report_sweeps("plain12", compare_sweeps("plain12", matrix, [work / "scenarios" / "plain_matmul.py"], work, args.repeats))
        if "default" in parts:
            scenarios = sorted(p for p in (work / "scenarios").glob("*.py") if not p.name.startswith("_") and p.name != "plain_matmul.py")
            report = compare_sweeps("default", REPO / "matrix.toml", scenarios, work, args.repeats)
            report_sweeps("default", report)
        if "probe" in parts:
            probe_cost(work, args.repeats)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nbenchmark wall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
