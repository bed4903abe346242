"""Benchmark: build ONE cell's environment with a warm cache, three ways, side by side.

    .venv/bin/python benchmarks/bench_envs.py [--repeats N] [--fast-repeats M]

Same pins for all three (torch 2.13.0 from the local CPU wheel folder, transformers 5.6.2,
accelerate 1.13.0, peft 0.19.1, bitsandbytes 0.49.2, Python 3.11):

- harness:  `harness.running.envs.build_env` into a fresh env root each repeat ("fresh": cold env,
            warm uv cache), then again on the same root ("rebuild": the content-addressed env
            is reused);
- pip:      `python -m venv` + `pip install` (warm pip cache: one untimed run first);
- bare uv:  `uv venv` + `uv pip install` with the harness's own uv binary (warm uv cache).

Every method gets one untimed warm-up run, then timed repeats: N of venv + pip (about a
minute each), M >= N of the harness and of bare uv (seconds each: more repeats are cheap and
steady the medians that the 1.3x target is judged on). The harness and bare uv run back to
back, their order alternating, and pip's runs are spread among them, so slow drift on a
noisy machine hits every method alike. Medians are reported, with min and max, and for
harness vs bare uv also the median of the back-to-back pairs' ratios. Before anything is installed, both resolvers are
asked (dry run) where torch would come from: anything but the local +cpu wheel aborts the
benchmark, so a multi-GB CUDA build is never downloaded.
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
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

from harness.inputs.matrix import Candidate, Cell, Settings
from harness.running import envs as harness_envs
from harness.running.envs import EnvResult, build_env, uv_binary

PINS: dict[str, str] = {
    "torch": "2.13.0",
    "transformers": "5.6.2",
    "accelerate": "1.13.0",
    "peft": "0.19.1",
    "bitsandbytes": "0.49.2",
}
DEFAULT_FIND_LINKS = "/opt/wheels"
#: Issue targets: the harness at least this much faster than venv + pip ...
TARGET_VS_PIP = 20.0
#: ... and at most this much slower than bare uv.
TARGET_VS_UV = 1.3

HARNESS_FRESH = "harness build_env (fresh env)"
HARNESS_REBUILD = "harness build_env (rebuild)"
PIP = "python -m venv + pip install"
BARE_UV = "uv venv + uv pip install"


class BenchError(RuntimeError):
    """A build failed or would pull the wrong torch; the benchmark stops."""


@dataclass
class Series:
    name: str
    seconds: list[float] = field(default_factory=list)
    #: seconds of the venv-creation step, where the method has a separate one
    venv_seconds: list[float] = field(default_factory=list)

    #: harness only: seconds per step of build_env (venv, uv pip compile/sync/freeze), one dict per repeat
    phases: list[dict[str, float]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


class PhaseTimer:
    """Times build_env's steps by wrapping the module's own helpers (nothing in the harness is edited)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._create_venv = harness_envs._create_venv
        self._run = harness_envs._run

    def create_venv(self, location: Path, python: str) -> None:
        started = time.perf_counter()
        try:
            self._create_venv(location, python)
        finally:
            self.seconds["venv (nox uv backend)"] += time.perf_counter() - started

    def run(self, cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        name = f"uv pip {cmd[2]}" if cmd[1:2] == ["pip"] and len(cmd) > 2 else "other subprocesses"
        started = time.perf_counter()
        try:
            return self._run(cmd, *args, **kwargs)
        finally:
            self.seconds[name] += time.perf_counter() - started


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time building one cell's env with a warm cache: harness build_env (fresh and rebuild) vs venv+pip vs bare uv.",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of venv + pip, after one untimed warm-up (default: 3)")
    parser.add_argument(
        "--fast-repeats",
        type=int,
        default=10,
        help="timed repeats of the harness and of bare uv, after one untimed warm-up each (default: 10; raised to --repeats if lower)",
    )
    parser.add_argument("--python", default="3.11", help="Python version of the cell (default: 3.11)")
    parser.add_argument("--find-links", default=DEFAULT_FIND_LINKS, help=f"folder with the torch CPU wheel (default: {DEFAULT_FIND_LINKS})")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the envs are built (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (default: removed at the end)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.fast_repeats = max(args.fast_repeats, args.repeats)
    return args


def requirements() -> list[str]:
    return [f"{name}=={version}" for name, version in PINS.items()]


def make_cell(python: str) -> Cell:
    return Cell(tuple(Candidate(name, "version", version) for name, version in PINS.items()), python)


def tool_env() -> dict[str, str]:
    # The harness runs uv with these; the baselines get the same quiet, colourless output.
    return {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}


def run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_env())
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise BenchError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def fmt_seconds(value: float) -> str:
    if value < 0.1:
        return f"{value * 1000:.2f} ms"
    return f"{value:.2f} s"


def fmt_ratio(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}x"
    if value >= 0.01:
        return f"{value:.2f}x"
    return f"{value:.2e}x"


# -- safety: torch must come from the local CPU wheel -----------------------------------------
def check_torch_source_pip(python: str, find_links: str, scratch: Path) -> str:
    """pip's dry run: the URL it would install torch from."""
    venv = scratch / "pip-dry-run"
    run([python, "-m", "venv", str(venv)], "python -m venv (dry run)")
    report = scratch / "pip-report.json"
    run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            "--find-links",
            find_links,
            *requirements(),
        ],
        "pip install --dry-run",
    )
    shutil.rmtree(venv)
    for item in json.loads(report.read_text())["install"]:
        if item["metadata"]["name"].lower() == "torch":
            url = str(item["download_info"]["url"])
            if not url.startswith("file://"):
                raise BenchError(f"pip would download torch from {url}, not from {find_links}; aborting")
            return url
    raise BenchError("pip's dry run installs no torch; aborting")


def check_torch_source_uv(uv: str, python: str, find_links: str) -> str:
    """uv's resolution of the same pins: torch must be the local +cpu build."""
    proc = subprocess.run(
        [uv, "pip", "compile", "-", "--python", python, "--no-header", "--no-annotate", "--quiet", "--find-links", find_links],
        input="\n".join(requirements()) + "\n",
        capture_output=True,
        text=True,
        env=tool_env(),
    )
    if proc.returncode != 0:
        raise BenchError(f"uv pip compile failed: {proc.stderr.strip()}")
    torch = next((line for line in proc.stdout.splitlines() if line.startswith("torch==")), "")
    if "+cpu" not in torch:
        raise BenchError(f"uv would install {torch or 'no torch'}, not the local +cpu wheel; aborting")
    return torch


def installed_torch(site_root: Path) -> str:
    found = sorted(p.name for p in site_root.glob("lib/python*/site-packages/torch-*.dist-info"))
    return found[0].removesuffix(".dist-info") if found else ""


def expect_cpu_torch(location: Path, method: str) -> None:
    torch = installed_torch(location)
    if "+cpu" not in torch:
        raise BenchError(f"{method} installed {torch or 'no torch'} in {location}, not the local +cpu wheel")


# -- the three methods --------------------------------------------------------------------------
def harness_build(
    cell: Cell, settings: Settings, root: Path, find_links: str, *, expect_reused: bool, phases: dict[str, float] | None = None
) -> float:
    timer = PhaseTimer()
    with mock.patch.object(harness_envs, "_create_venv", timer.create_venv), mock.patch.object(harness_envs, "_run", timer.run):
        started = time.perf_counter()
        env: EnvResult = build_env(cell, settings, root, [find_links])
        seconds = time.perf_counter() - started
    if phases is not None:
        phases.update(timer.seconds)
        phases["rest (hashing, marker, Python)"] = seconds - sum(timer.seconds.values())
    if not env.ready:
        raise BenchError(f"harness build_env: {env.status}: {env.message}")
    if env.reused != expect_reused:
        raise BenchError(f"harness build_env: expected reused={expect_reused}, got reused={env.reused} at {env.location}")
    if "+cpu" not in env.freeze.get("torch", ""):
        raise BenchError(f"harness build_env installed torch {env.freeze.get('torch')!r}, not the local +cpu wheel")
    return seconds


def pip_build(base_python: str, target: Path, find_links: str) -> tuple[float, float]:
    """(total, venv-creation) seconds."""
    started = time.perf_counter()
    run([base_python, "-m", "venv", str(target)], "python -m venv")
    venv_done = time.perf_counter()
    run(
        [
            str(target / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--find-links",
            find_links,
            *requirements(),
        ],
        "pip install",
    )
    finished = time.perf_counter()
    expect_cpu_torch(target, "pip")
    return finished - started, venv_done - started


def uv_build(uv: str, python: str, target: Path, find_links: str) -> tuple[float, float]:
    """(total, venv-creation) seconds."""
    started = time.perf_counter()
    run([uv, "venv", "--quiet", "--python", python, str(target)], "uv venv")
    venv_done = time.perf_counter()
    run(
        [uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"), "--find-links", find_links, *requirements()],
        "uv pip install",
    )
    finished = time.perf_counter()
    expect_cpu_torch(target, "bare uv")
    return finished - started, venv_done - started


def base_interpreter(env: Path) -> str:
    """The interpreter the harness's env was made from (pyvenv.cfg `home`), so pip gets the same one."""
    for line in (env / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            for name in ("python3.11", "python3", "python"):
                candidate = Path(value.strip()) / name
                if candidate.exists():
                    return str(candidate)
    raise BenchError(f"cannot find the base interpreter of {env}")


# -- the run ------------------------------------------------------------------------------------
def benchmark(args: argparse.Namespace, work: Path) -> tuple[dict[str, Series], dict[str, str]]:
    uv = uv_binary()
    cell = make_cell(args.python)
    settings = Settings(python=args.python, find_links=[args.find_links])
    facts: dict[str, str] = {"uv": uv}

    print("preflight: where torch would come from ...", flush=True)
    facts["uv resolves"] = check_torch_source_uv(uv, args.python, args.find_links)

    # Warm-up: one untimed run of each method (the harness's also tells which base Python it uses).
    print("warm-up (untimed): harness, bare uv, pip ...", flush=True)
    warm_root = work / "harness-warmup"
    harness_build(cell, settings, warm_root, args.find_links, expect_reused=False)
    warm_env = next(p for p in warm_root.iterdir() if p.is_dir())
    base_python = base_interpreter(warm_env)
    facts["base python"] = base_python
    facts["pip would install torch from"] = check_torch_source_pip(base_python, args.find_links, work)
    uv_build(uv, args.python, work / "uv-warmup", args.find_links)
    started = time.perf_counter()
    pip_build(base_python, work / "pip-warmup", args.find_links)
    facts["pip warm-up run (untimed)"] = fmt_seconds(time.perf_counter() - started)
    version = subprocess.run([str(work / "pip-warmup" / "bin" / "python"), "-m", "pip", "--version"], capture_output=True, text=True)
    facts["pip (the venv's bundled one)"] = version.stdout.split(" from ")[0]
    for name in ("harness-warmup", "uv-warmup", "pip-warmup"):
        shutil.rmtree(work / name, ignore_errors=True)

    series = {name: Series(name) for name in (HARNESS_FRESH, HARNESS_REBUILD, PIP, BARE_UV)}

    def do_harness(i: int) -> None:
        root = work / f"harness-{i}"
        phases: dict[str, float] = {}
        series[HARNESS_FRESH].seconds.append(harness_build(cell, settings, root, args.find_links, expect_reused=False, phases=phases))
        series[HARNESS_FRESH].phases.append(phases)
        series[HARNESS_FRESH].venv_seconds.append(phases.get("venv (nox uv backend)", 0.0))
        series[HARNESS_REBUILD].seconds.append(harness_build(cell, settings, root, args.find_links, expect_reused=True))
        shutil.rmtree(root, ignore_errors=True)

    def do_pip(i: int) -> None:
        target = work / f"pip-{i}"
        total, venv = pip_build(base_python, target, args.find_links)
        series[PIP].seconds.append(total)
        series[PIP].venv_seconds.append(venv)
        shutil.rmtree(target, ignore_errors=True)

    def do_uv(i: int) -> None:
        target = work / f"uv-{i}"
        total, venv = uv_build(uv, args.python, target, args.find_links)
        series[BARE_UV].seconds.append(total)
        series[BARE_UV].venv_seconds.append(venv)
        shutil.rmtree(target, ignore_errors=True)

    pairs: list[tuple[str, Callable[[int], None]]] = [("harness", do_harness), ("bare uv", do_uv)]
    # pip's N runs spread evenly over the M harness/uv pairs
    pip_at = {round(k * args.fast_repeats / args.repeats) for k in range(args.repeats)}
    for i in range(args.fast_repeats):
        order = pairs if i % 2 == 0 else pairs[::-1]
        if i in pip_at:
            order = [*order, ("pip", do_pip)]
        print(f"repeat {i + 1}/{args.fast_repeats}: {', '.join(name for name, _ in order)} ...", flush=True)
        for _, method in order:
            method(i)
    return series, facts


def report(args: argparse.Namespace, series: dict[str, Series], facts: dict[str, str], started: datetime, wall: float) -> None:
    print()
    print(f"bench_envs  {started:%Y-%m-%d %H:%M} UTC  host: {platform.node()}, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}")
    print(f"cell: python {args.python}, " + ", ".join(f"{k}=={v}" for k, v in PINS.items()) + f", --find-links {args.find_links}")
    for key, value in facts.items():
        print(f"  {key}: {value}")
    print(
        f"timed repeats: harness and bare uv {args.fast_repeats} each (back to back), venv + pip {args.repeats} "
        "(after one untimed warm-up each); medians over the repeats"
    )
    print()
    print(f"{'method':<34}{'median':>12}{'min':>12}{'max':>12}   of which venv creation (median)")
    for s in series.values():
        venv = fmt_seconds(statistics.median(s.venv_seconds)) if s.venv_seconds else "-"
        print(f"{s.name:<34}{fmt_seconds(s.median):>12}{fmt_seconds(min(s.seconds)):>12}{fmt_seconds(max(s.seconds)):>12}   {venv}")
    fresh_phases = series[HARNESS_FRESH].phases
    names = list(dict.fromkeys(name for p in fresh_phases for name in p))
    print(
        "  harness (fresh) by step, median: "
        + ", ".join(f"{name} {fmt_seconds(statistics.median(p.get(name, 0.0) for p in fresh_phases))}" for name in names)
    )
    print()
    fresh, rebuild = series[HARNESS_FRESH].median, series[HARNESS_REBUILD].median
    pip, uv = series[PIP].median, series[BARE_UV].median
    rows = [
        ("pip / harness(fresh)", pip / fresh, f">= {TARGET_VS_PIP:g}x", pip / fresh >= TARGET_VS_PIP),
        ("pip / harness(rebuild)", pip / rebuild, f">= {TARGET_VS_PIP:g}x", pip / rebuild >= TARGET_VS_PIP),
        ("harness(fresh) / bare uv", fresh / uv, f"<= {TARGET_VS_UV:g}x", fresh / uv <= TARGET_VS_UV),
        ("harness(rebuild) / bare uv", rebuild / uv, f"<= {TARGET_VS_UV:g}x", rebuild / uv <= TARGET_VS_UV),
    ]
    paired = statistics.median(h / u for h, u in zip(series[HARNESS_FRESH].seconds, series[BARE_UV].seconds, strict=True))
    rows.append(("  same, median of back-to-back pairs", paired, f"<= {TARGET_VS_UV:g}x", paired <= TARGET_VS_UV))
    print(f"{'ratio (of medians)':<34}{'value':>12}{'target':>12}   verdict")
    for name, ratio, target, met in rows:
        print(f"{name:<34}{fmt_ratio(ratio):>12}{target:>12}   {'met' if met else 'MISSED'}")
    print()
    print(f"benchmark wall time: {wall:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-envs-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        series, facts = benchmark(args, work)
    except BenchError as exc:
        print(f"bench_envs: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(args, series, facts, started, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
