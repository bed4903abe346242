"""Prepare an offline runner: resolve every cell for the runner's Python and platform here,
download exactly the wheels each needs, and slim bitsandbytes to the runner's CUDA.

The runner's base interpreter is described by its `pip freeze` (a file): packages it already
has are resolved as present (the same stubs and preferences `envs` uses on the runner), so
only what differs from the base is downloaded, and the runner resolves to the same set.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.refine import levels
from harness.analysis.versions import version_key
from harness.errors import BadInput
from harness.inputs.candidates import RELEASES_FILE, PackageIndex, ResolvedMatrix, expand_find_links, install_tags, listed_releases
from harness.inputs.matrix import Candidate, Cell
from harness.running.envs import Base, base_inputs, compile_lock, parse_freeze, request_for, resolve_failure_status, uv_binary
from harness.running.sweep import SweepOptions

_NATIVE = re.compile(r"^bitsandbytes/libbitsandbytes_(\w+)\.(so|dll|dylib)$")
#: The harness's own needs on a runner whose base has rich and packaging: uv only
#: (nox is optional there, and results go to a .jsonl shard instead of DuckDB).
RUNNER_TOOLS = ["uv"]


@dataclass
class WheelhouseReport:
    cells: dict[str, str] = field(default_factory=dict)  # cell id -> "ready" | status: message
    downloaded: list[str] = field(default_factory=list)
    slimmed: list[str] = field(default_factory=list)
    # Refinement's candidates (axis, release), in the order the budget took them, and their MiB
    refined: list[tuple[str, str]] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    refine_mib: float = 0.0
    ranges: list[Span] = field(default_factory=list)
    out: Path | None = None  # the folder of the wheels

    def size_mib(self) -> float:
        """What the wheels in the folder weigh."""
        return sum(p.stat().st_size for p in self.out.glob("*.whl")) / 2**20 if self.out is not None else 0.0

    def open_notes(self) -> list[str]:
        """The ranges whose releases between the wheelhouse does not all hold: they may stay open on the runner."""
        held = set(self.refined)
        return [n for s in self.ranges if (n := s.open_note(held))]

    def budget_to_hold_all(self, budget_mib: float) -> float:
        """A --refine-budget that would hold every release between (a guess from what this one held), two digits."""
        between = sum(len(s.between) for s in self.ranges)
        return float(f"{max(self.refine_mib * between / max(len(set(self.refined)), 1) * 1.2, budget_mib * 2):.2g}")


@dataclass(frozen=True)
class Span:
    """Two adjacent listed releases of an axis and the releases between them: a range a sweep may find."""

    axis: str
    low: str
    high: str
    between: tuple[str, ...]

    def open_note(self, held: set[tuple[str, str]]) -> str:
        """'' if the wheelhouse holds every release between, else which it lacks."""
        missing = [v for v in self.between if (self.axis, v) not in held]
        if not missing:
            return ""
        shown = ", ".join(missing[:4]) + (", …" if len(missing) > 4 else "")
        return f"{self.axis} {self.low} → {self.high}: {len(missing)} of {len(self.between)} release(s) between not held ({shown})"


def spans(resolved: ResolvedMatrix, index: PackageIndex, python_version: str) -> list[Span]:
    """Every pair of adjacent releases listed on a version axis, with the index's releases between."""
    tags = install_tags(tuple(int(p) for p in python_version.split(".")[:2]))  # type: ignore[arg-type]
    found = []
    for axis, candidates in resolved.axes.items():
        listed = sorted({c.value for c in candidates if c.kind == "version"}, key=version_key)
        if len(listed) < 2:
            continue
        known = [str(r.version) for r in listed_releases(index, axis, tags)]
        for low, high in itertools.pairwise(listed):
            between = tuple(v for v in known if version_key(low) < version_key(v) < version_key(high))
            found.append(Span(axis, low, high, between))
    return found


def refinement_order(resolved: ResolvedMatrix, found: list[Span]) -> list[tuple[str, str, list[Cell]]]:
    """(axis, release, probe cells) in the order a size budget takes them: every range's first
    bisection level, then every range's second, and so on. A release's probe cells are the
    matrix's cells at the range's lower end with the axis set to it: every line refinement may build it on."""
    order: list[tuple[int, str, str, list[Cell]]] = []
    for span in found:
        base = [c for c in resolved.cells if any(k.package == span.axis and k.value == span.low for k in c.candidates)]
        for depth, level in enumerate(levels(span.between)):
            order += [
                (depth, span.axis, value, [c.with_candidate(Candidate(span.axis, "version", value)) for c in base]) for value in level
            ]
    order.sort(key=lambda item: item[0])  # stable: the ranges keep their matrix order within a level
    return [(axis, value, cells) for _, axis, value, cells in order]


def pip_platforms(platform: str) -> list[str]:
    """`x86_64-manylinux_2_28` -> the pip tags a wheel for that platform may carry."""
    match = re.fullmatch(r"(?P<arch>\w+?)-manylinux_2_(?P<minor>\d+)", platform)
    if not match:
        return [platform]
    arch, newest = match["arch"], int(match["minor"])
    tags = [f"manylinux_2_{m}_{arch}" for m in range(newest, 4, -1)]
    return [*tags, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}", f"linux_{arch}"]


def slim_bitsandbytes(wheel: Path, keep: set[str]) -> bool:
    """Repack a bitsandbytes wheel with only the native libraries in `keep` (RECORD rewritten)."""
    tmp = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        dropped = {n for n in zin.namelist() if (m := _NATIVE.match(n)) and m.group(1) not in keep}
        if not dropped:
            tmp.unlink()
            return False
        for info in zin.infolist():
            if info.filename in dropped:
                continue
            data = zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                rows = [r for r in data.decode().splitlines() if r.split(",", 1)[0] not in dropped]
                data = ("\n".join(rows) + "\n").encode()
            zout.writestr(info, data)
    tmp.replace(wheel)
    return True


def _pins_to_download(lock_text: str, base: Base | None) -> list[str]:
    pins = []
    for name, version in parse_freeze(lock_text).items():
        if "://" in version:
            pins.append(f"{name} @ {version}")
        elif base is None or base.freeze.get(name) != version:
            pins.append(f"{name}=={version}")
    return pins


def _download(pins: list[str], out: Path, python_version: str, platform: str) -> subprocess.CompletedProcess[str]:
    platform_args = [arg for tag in pip_platforms(platform) for arg in ("--platform", tag)]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        *platform_args,
        "-d",
        str(out),
        *pins,
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


def build_wheelhouse(
    resolved: ResolvedMatrix,
    out: Path,
    *,
    python_version: str,
    platform: str,
    base: Base | None,
    keep_bnb: set[str] | None = None,
    runner_tools: bool = True,
    refine_budget_mib: float = 0.0,
    index: PackageIndex | None = None,
) -> WheelhouseReport:
    """The matrix's wheels; with `refine_budget_mib` and the `index`, also the wheels of the
    releases a refinement of each range may build (level by level, while the budget holds) and
    the release lists the runner reads instead of the index (RELEASES_FILE)."""
    if base is None and any(c.kind == "inherit" for cell in resolved.cells for c in cell.candidates):
        raise BadInput("the matrix inherits from the runner's interpreter: pass --base-freeze FILE (its `pip freeze` output)")
    out.mkdir(parents=True, exist_ok=True)
    report = WheelhouseReport()
    locker = _Locker(resolved, base, ["--python-version", python_version, "--python-platform", platform])
    # Refining on the runner after its shards merge needs a DuckDB store there (`harness refine`).
    tools = [*RUNNER_TOOLS, *(["duckdb"] if refine_budget_mib > 0 else [])]
    wanted: set[str] = set(tools if runner_tools else [])
    locks: dict[str, str] = {}
    for cell in resolved.cells:
        status, lock, pins = locker.lock(cell)
        report.cells[cell.id] = status
        if lock:
            locks[cell.id] = lock
            wanted.update(pins)
    for pin in sorted(wanted):
        proc = _download([pin], out, python_version, platform)
        if proc.returncode != 0:
            report.cells.setdefault("_downloads", "")
            report.cells["_downloads"] += f"{pin}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}; "
        else:
            report.downloaded.append(pin)
    if keep_bnb:
        _slim(out, keep_bnb, report)
    releases: dict[str, list[list[str | None]]] = {}
    if index is not None and refine_budget_mib > 0:
        report.ranges = spans(resolved, index, python_version)
        _add_refinement(resolved, report, locker, wanted, locks, out, refine_budget_mib, (python_version, platform, keep_bnb))
        tags = install_tags(tuple(int(p) for p in python_version.split(".")[:2]))  # type: ignore[arg-type]
        for axis in {s.axis for s in report.ranges}:
            releases[axis] = [
                [str(r.version), r.upload_time.isoformat() if r.upload_time else None] for r in listed_releases(index, axis, tags)
            ]
        (out / RELEASES_FILE).write_text(json.dumps(releases, indent=1) + "\n")
    manifest = {"python_version": python_version, "platform": platform, "locks": locks, "cells": report.cells}
    manifest["refinement"] = {"held": report.refined, "left_out": report.left_out, "mib": round(report.refine_mib, 1)}
    (out / "harness-wheelhouse.json").write_text(json.dumps(manifest, indent=1))
    return report


def wheelhouse_for(
    matrix: Path,
    out: Path,
    *,
    python_version: str,
    platform: str,
    base_freeze: Path | None = None,
    base_python: str = "",
    keep_bnb: Sequence[str] | None = None,
    runner_tools: bool = True,
    refine_budget_mib: float = 0.0,
    suite: SweepOptions | None = None,
) -> WheelhouseReport:
    """`harness wheelhouse`: resolve `matrix` here, against the index (the runner's own settings,
    `no_index` and its wheelhouse, apply there), and download what its cells need into `out`.

    base_freeze: the runner base interpreter's `pip freeze` (needed for inherit axes), found at
    `base_python` there. suite: the sweep's test-suite flags (`--tests`, `--tests-root`,
    `--test-requirement`, `--tests-of`, `--tests-git`); with them or the matrix's [tests] table,
    every cell's wheels include what the suite needs there (pytest, the plugins its configuration
    names, its requirements), as the runner's sweep will install them."""
    from harness.inputs.candidates import index_for, resolve_matrix
    from harness.inputs.matrix import load_matrix
    from harness.running.envs import base_from_freeze
    from harness.running.sweep import suite_for

    base = None
    if base_freeze:
        if not base_freeze.is_file():
            raise BadInput(f"--base-freeze {str(base_freeze)!r} does not exist; save the runner's `python -m pip freeze` there")
        base = base_from_freeze(base_freeze.read_text(), base_python)
    spec = load_matrix(matrix, lenient=True)
    suite_for(suite or SweepOptions(matrix, Path()), spec)  # adds the suite's needs to the cells' requirements
    spec.settings.no_index = False
    spec.settings.find_links = [f for f in spec.settings.find_links if Path(f).is_dir() and Path(f).resolve() != out.resolve()]
    if refine_budget_mib < 0:
        raise BadInput(f"--refine-budget {refine_budget_mib:g}: give a size in MiB, 0 or more")
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index, base_freeze=base.freeze if base else None)
    report = build_wheelhouse(
        resolved,
        out,
        python_version=python_version,
        platform=platform,
        base=base,
        keep_bnb=set(keep_bnb) if keep_bnb else None,
        runner_tools=runner_tools,
        refine_budget_mib=refine_budget_mib,
        index=index,
    )
    report.out = out
    return report


@dataclass
class _Locker:
    """Resolves one cell for the runner's Python and platform: (status, lock text, pins to download)."""

    resolved: ResolvedMatrix
    base: Base | None
    target: list[str]

    def lock(self, cell: Cell) -> tuple[str, str, list[str]]:
        settings = self.resolved.spec.settings
        request = request_for(cell, settings, expand_find_links(settings.find_links))
        with tempfile.TemporaryDirectory(prefix="harness-wh-") as tmp:
            stub_dir: Path | None = None
            pins: list[str] = []
            preferences = ""
            if self.base is not None and request.inherit:
                _, pins, preferences, error = base_inputs(request, self.base, Path(tmp))
                if error:
                    return f"install_failed: {error}", "", []
                stub_dir = Path(tmp)
            lock = Path(tmp) / "lock.txt"
            compiled = compile_lock(uv_binary(), request, self.target, lock, stub_dir, pins, preferences)
            if compiled.returncode != 0:
                message = compiled.stderr.strip()
                return f"{resolve_failure_status(message)}: {message.splitlines()[-1] if message else ''}", "", []
            text = lock.read_text()
        return "ready", text, _pins_to_download(text, self.base if request.inherit else None)


def _add_refinement(
    resolved: ResolvedMatrix,
    report: WheelhouseReport,
    locker: _Locker,
    wanted: set[str],
    locks: dict[str, str],
    out: Path,
    budget_mib: float,
    target: tuple[str, str, set[str] | None],
) -> None:
    """Refinement's releases in bisection order, each with the wheels of every line it may be
    built on, while their size fits the budget; the first that does not fit ends it (a later,
    smaller one would leave a hole a bisection cannot use in order)."""
    python_version, platform, keep_bnb = target
    for axis, value, cells in refinement_order(resolved, report.ranges):
        if report.left_out:
            report.left_out.append((axis, value))
            continue
        pins: set[str] = set()
        cell_locks = {}
        for cell in cells:
            _, lock, found = locker.lock(cell)
            if lock:
                cell_locks[cell.id] = lock
                pins.update(found)
        new = sorted(pins - wanted)
        before = {f.name: f.stat().st_size for f in out.iterdir()}
        failed = [pin for pin in new if _download([pin], out, python_version, platform).returncode != 0]
        if keep_bnb:
            _slim(out, keep_bnb, report)
        added = [f for f in out.iterdir() if f.name not in before]
        mib = sum(f.stat().st_size for f in added) / 2**20
        if failed or not cell_locks or report.refine_mib + mib > budget_mib:
            for f in added:
                f.unlink()
            report.left_out.append((axis, value))
            continue
        report.refine_mib += mib
        report.refined.append((axis, value))
        wanted.update(new)
        locks.update(cell_locks)


def _slim(out: Path, keep: set[str], report: WheelhouseReport) -> None:
    for wheel in sorted(out.glob("bitsandbytes-*.whl")):
        if wheel.name not in report.slimmed and slim_bitsandbytes(wheel, keep | {"cpu"}):
            report.slimmed.append(wheel.name)
