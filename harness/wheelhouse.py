"""Prepare an offline runner: resolve every cell for the runner's Python and platform here,
download exactly the wheels each needs, and slim bitsandbytes to the runner's CUDA.

The runner's base interpreter is described by its `pip freeze` (a file): packages it already
has are resolved as present (the same stubs and preferences `envs` uses on the runner), so
only what differs from the base is downloaded, and the runner resolves to the same set.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.candidates import ResolvedMatrix, expand_find_links
from harness.envs import Base, base_inputs, compile_lock, parse_freeze, request_for, resolve_failure_status, uv_binary
from harness.errors import BadInput

_NATIVE = re.compile(r"^bitsandbytes/libbitsandbytes_(\w+)\.(so|dll|dylib)$")
#: The harness's own needs on a runner whose base has rich and packaging: uv only
#: (nox is optional there, and results go to a .jsonl shard instead of DuckDB).
RUNNER_TOOLS = ["uv"]


@dataclass
class WheelhouseReport:
    cells: dict[str, str] = field(default_factory=dict)  # cell id -> "ready" | status: message
    downloaded: list[str] = field(default_factory=list)
    slimmed: list[str] = field(default_factory=list)


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
) -> WheelhouseReport:
    settings = resolved.spec.settings
    if base is None and any(c.kind == "inherit" for cell in resolved.cells for c in cell.candidates):
        raise BadInput("the matrix inherits from the runner's interpreter: pass --base-freeze FILE (its `pip freeze` output)")
    out.mkdir(parents=True, exist_ok=True)
    report = WheelhouseReport()
    uv = uv_binary()
    target = ["--python-version", python_version, "--python-platform", platform]
    wanted: set[str] = set(RUNNER_TOOLS if runner_tools else [])
    locks: dict[str, str] = {}
    for cell in resolved.cells:
        request = request_for(cell, settings, expand_find_links(settings.find_links))
        with tempfile.TemporaryDirectory(prefix="harness-wh-") as tmp:
            stub_dir: Path | None = None
            pins: list[str] = []
            preferences = ""
            if base is not None and request.inherit:
                _, pins, preferences, error = base_inputs(request, base, Path(tmp))
                if error:
                    report.cells[cell.id] = f"install_failed: {error}"
                    continue
                stub_dir = Path(tmp)
            lock = Path(tmp) / "lock.txt"
            compiled = compile_lock(uv, request, target, lock, stub_dir, pins, preferences)
            if compiled.returncode != 0:
                message = compiled.stderr.strip()
                report.cells[cell.id] = f"{resolve_failure_status(message)}: {message.splitlines()[-1] if message else ''}"
                continue
            locks[cell.id] = lock.read_text()
            wanted.update(_pins_to_download(locks[cell.id], base if request.inherit else None))
            report.cells[cell.id] = "ready"
    for pin in sorted(wanted):
        proc = _download([pin], out, python_version, platform)
        if proc.returncode != 0:
            report.cells.setdefault("_downloads", "")
            report.cells["_downloads"] += f"{pin}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}; "
        else:
            report.downloaded.append(pin)
    if keep_bnb:
        for wheel in sorted(out.glob("bitsandbytes-*.whl")):
            if slim_bitsandbytes(wheel, keep_bnb | {"cpu"}):
                report.slimmed.append(wheel.name)
    (out / "harness-wheelhouse.json").write_text(
        json.dumps({"python_version": python_version, "platform": platform, "locks": locks, "cells": report.cells}, indent=1)
    )
    return report
