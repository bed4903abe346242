"""Prepare an offline runner: resolve every cell for the runner's Python and platform here,
download exactly the wheels each needs, and slim bitsandbytes to the runner's CUDA.

The runner's base interpreter is described by its `pip freeze` (a file): packages it already
has are resolved as present (the same stubs and preferences `envs` uses on the runner), so
only what differs from the base is downloaded, and the runner resolves to the same set.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.lines import Holding, Range, holding_order, ranges
from harness.errors import BadInput
from harness.inputs.candidates import RELEASES_FILE, PackageIndex, ResolvedMatrix, expand_find_links, install_tags, listed_releases
from harness.inputs.matrix import Candidate, Cell
from harness.running.envs import Base, base_inputs, compile_lock, parse_freeze, request_for, resolve_failure_status, uv_binary
from harness.running.plan import SweepOptions

_NATIVE = re.compile(r"^bitsandbytes/libbitsandbytes_(\w+)\.(so|dll|dylib)$")
#: The harness's own needs on a runner whose base has rich and packaging: uv only
#: (nox is optional there, and results go to a .jsonl shard instead of DuckDB).
RUNNER_TOOLS = ["uv"]


#: The name of a wheelhouse's manifest: the runner's settings, every cell's lock, and what
#: refinement's budget held (`lines.Holding`), which the trip's account reads there.
MANIFEST = "harness-wheelhouse.json"


@dataclass
class WheelhouseReport:
    cells: dict[str, str] = field(default_factory=dict)  # cell id -> "ready" | status: message
    downloaded: list[str] = field(default_factory=list)
    slimmed: list[str] = field(default_factory=list)
    # What refinement's budget held, left out and could not hold, per release between; the lines
    holding: Holding = field(default_factory=Holding)
    out: Path | None = None  # the folder of the wheels

    def size_mib(self) -> float:
        """What the wheels in the folder weigh."""
        return sum(p.stat().st_size for p in self.out.glob("*.whl")) / 2**20 if self.out is not None else 0.0


def spans(resolved: ResolvedMatrix, index: PackageIndex, python_version: str) -> list[Range]:
    """Every pair of neighbouring releases on a line of the matrix's cells (the product of its
    axes, its [[include]] cells and the cells around its [[exclude]] holes), with the index's
    releases between (those a CPython of `python_version` can install)."""
    cells = {c.id: c.as_dict() for c in resolved.cells}
    axes = list(dict.fromkeys(r.axis for r in ranges(cells)))  # asked of the index only where a line has two releases
    tags = install_tags(tuple(int(p) for p in python_version.split(".")[:2]))  # type: ignore[arg-type]
    return ranges(cells, {axis: [str(r.version) for r in listed_releases(index, axis, tags)] for axis in axes})


def refinement_order(resolved: ResolvedMatrix, found: list[Range]) -> list[tuple[str, str, list[Cell]]]:
    """(axis, release, probe cells) in the order a size budget takes them (`lines.holding_order`).
    A release's probe cells are the lower cell of every range it lies in, with the axis set to
    it: every line refinement may build it on."""
    cells = {c.id: c for c in resolved.cells}
    return [(hold.axis, hold.value, _probe_cells(cells, hold.axis, hold.value, hold.ranges)) for hold in holding_order(found)]


def _probe_cells(cells: dict[str, Cell], axis: str, value: str, lines: tuple[Range, ...]) -> list[Cell]:
    probes = {}
    for r in lines:
        probe = cells[r.low_cell].with_candidate(Candidate(axis, "version", value))
        probes[probe.id] = probe
    return list(probes.values())


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
    if index is not None and refine_budget_mib > 0:
        report.holding = Holding(ranges=spans(resolved, index, python_version), budget_mib=refine_budget_mib)
        _add_refinement(resolved, report, locker, wanted, locks, out, (python_version, platform, keep_bnb))
        _write_release_lists(out, index, python_version, report.holding)
    manifest = {"python_version": python_version, "platform": platform, "locks": locks, "cells": report.cells}
    manifest["refinement"] = report.holding.to_manifest()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
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
    from harness.running.plan import suite_for

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


def _write_release_lists(out: Path, index: PackageIndex, python_version: str, holding: Holding) -> None:
    """RELEASES_FILE: every release of each axis with a range on some line, even one with nothing
    between (without its list, the runner's answer there is a range "the index's releases were not listed")."""
    tags = install_tags(tuple(int(p) for p in python_version.split(".")[:2]))  # type: ignore[arg-type]
    holding.listed = {r.axis for r in holding.ranges}
    releases = {
        axis: [[str(r.version), r.upload_time.isoformat() if r.upload_time else None] for r in listed_releases(index, axis, tags)]
        for axis in sorted(holding.listed)
    }
    (out / RELEASES_FILE).write_text(json.dumps(releases, indent=1) + "\n")


#: Measuring what the budget left out downloads it (then drops it): past this many MiB of it,
#: or four budgets, the rest is listed unmeasured rather than downloaded only to be weighed.
MEASURE_MIB = 1024.0


def _add_refinement(
    resolved: ResolvedMatrix,
    report: WheelhouseReport,
    locker: _Locker,
    wanted: set[str],
    locks: dict[str, str],
    out: Path,
    target: tuple[str, str, set[str] | None],
) -> None:
    """Refinement's releases in bisection order (`refinement_order`), each with the wheels of
    every line it may be built on, while their size fits the budget. The first that does not fit
    ends it (a later, smaller one would leave a hole a bisection cannot use in order); the rest
    are weighed, not kept, so the report can say by how many MiB each line fell short. A
    release no probe cell resolves for, or whose wheel the platform lacks, is no budget's
    matter: it is recorded as such and the order goes on."""
    holding = report.holding
    spent = False
    weighed: set[str] = set()  # pins of the left-out releases already weighed: shared wheels count once
    with tempfile.TemporaryDirectory(prefix="harness-wh-weigh-") as scratch:
        for axis, value, cells in refinement_order(resolved, holding.ranges):
            key = (axis, value)
            pins, cell_locks, why = _lock_probes(locker, cells)
            if not cell_locks:
                holding.unbuildable[key] = why
                continue
            if spent:
                room = max(MEASURE_MIB, 4 * holding.budget_mib) - sum(m or 0.0 for m in holding.left_out.values())
                mib, failed = _weigh(sorted(pins - wanted - weighed), Path(scratch), target) if room > 0 else (None, [])
                if failed:
                    holding.unbuildable[key] = f"no wheel for the runner's Python and platform: {failed[0]}"
                else:
                    holding.left_out[key] = mib
                weighed.update(pins)
                continue
            new = sorted(pins - wanted)
            added, failed = _fetch(new, out, target, report)
            mib = sum(f.stat().st_size for f in added) / 2**20
            if failed or holding.mib + mib > holding.budget_mib:
                for f in added:
                    f.unlink()
                if failed:
                    holding.unbuildable[key] = f"no wheel for the runner's Python and platform: {failed[0]}"
                    continue
                holding.left_out[key] = mib
                spent = True
                weighed.update(new)
                continue
            holding.mib += mib
            holding.held.add(key)
            wanted.update(new)
            locks.update(cell_locks)


def _lock_probes(locker: _Locker, cells: list[Cell]) -> tuple[set[str], dict[str, str], str]:
    """(pins to download, lock per probe cell that resolved, why none did)."""
    pins: set[str] = set()
    cell_locks = {}
    why = ""
    for cell in cells:
        status, lock, found = locker.lock(cell)
        if lock:
            cell_locks[cell.id] = lock
            pins.update(found)
        else:
            why = why or status
    return pins, cell_locks, why


def _fetch(pins: list[str], out: Path, target: tuple[str, str, set[str] | None], report: WheelhouseReport) -> tuple[list[Path], list[str]]:
    """Download `pins` into `out` (slimming bitsandbytes): (the files added, the pins that failed)."""
    python_version, platform, keep_bnb = target
    before = {f.name for f in out.iterdir()}
    failed = [pin for pin in pins if _download([pin], out, python_version, platform).returncode != 0]
    if keep_bnb:
        _slim(out, keep_bnb, report)
    return [f for f in out.iterdir() if f.name not in before], failed


def _weigh(pins: list[str], scratch: Path, target: tuple[str, str, set[str] | None]) -> tuple[float | None, list[str]]:
    """What `pins` would add to the wheelhouse, in MiB (slimmed as it would be), downloaded and
    dropped; and the pins that could not be had."""
    folder = scratch / "weigh"
    folder.mkdir()
    try:
        added, failed = _fetch(pins, folder, target, WheelhouseReport())
        return sum(f.stat().st_size for f in added) / 2**20, failed
    finally:
        shutil.rmtree(folder)


def _slim(out: Path, keep: set[str], report: WheelhouseReport) -> None:
    for wheel in sorted(out.glob("bitsandbytes-*.whl")):
        if wheel.name not in report.slimmed and slim_bitsandbytes(wheel, keep | {"cpu"}):
            report.slimmed.append(wheel.name)
