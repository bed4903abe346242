"""`harness pin` and the dashboard's Pin page: the newest passing set from a results file, and its files.

The choice itself is `analysis.pin.choose` (pure); this module reads the rows, checks the
user's constraints against what is stored (bad input names the fix), fills in the winning
cell's whole freeze, and writes requirements.txt, constraints.txt and pylock.toml.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from harness import queries
from harness.analysis.pin import DEFAULT_RANKING, Constraints, PinResult, Sources, choose
from harness.analysis.rows import installed
from harness.candidates import expand_find_links
from harness.envs import uv_binary
from harness.errors import BadInput
from harness.store import Store


def check_request(rows: Sequence[dict[str, Any]], db: str, scenarios: Sequence[str], constraints: Constraints, rank: str) -> list[str]:
    """Every mistake in a pin request, against what the file holds; returns the ranking to use."""
    if not rows:
        raise BadInput(f"no outcomes in {db!r}; run a sweep first")
    stored = sorted({r["scenario"] for r in rows})
    if not scenarios:
        raise BadInput(f"pass the scenarios that must pass with --scenario (repeatable); stored in {db!r}: {', '.join(stored)}")
    unknown = [s for s in scenarios if s not in stored]
    if unknown:
        raise BadInput(f"no outcomes for scenario(s) {', '.join(map(repr, unknown))} in {db!r}; stored: {', '.join(stored)}")
    values: dict[str, set[str]] = {}
    for row in rows:
        for axis, value in installed(row).items():
            values.setdefault(axis, set()).add(value)
    for axis, spec in constraints.fixed:
        if axis not in values:
            raise BadInput(f"--fix {axis}{spec}: {axis!r} is not an axis of {db!r}; axes: {', '.join(sorted(values))}")
        if not any(constraints.admits({axis: v}, {axis: v}) for v in values[axis]):
            raise BadInput(f"--fix {axis}{spec}: no stored cell has such a {axis}; stored: {', '.join(sorted(values[axis]))}")
    for flag, wanted in (("gpu", constraints.gpu), ("platform", constraints.platform)):
        seen = sorted({str(r.get(flag) or "") for r in rows})
        if wanted and not any(wanted.lower() in s.lower() for s in seen):
            raise BadInput(f"--{flag} {wanted!r} matches no stored run; stored: {', '.join(seen)}")
    ranking = [str(canonicalize_name(a)) for a in rank.split(",") if a.strip()] if rank else list(DEFAULT_RANKING)
    bad_rank = [a for a in ranking if a not in values] if rank else []
    if bad_rank:
        raise BadInput(f"--rank names unknown axis(es) {', '.join(map(repr, bad_rank))}; axes: {', '.join(sorted(values))}")
    return ranking


def with_full_freeze(result: PinResult, records: Sequence[dict[str, Any]]) -> PinResult:
    """The winner with its cell's complete freeze (rows handed to `choose` may carry only the axes)."""
    if not result.found or not records:
        return result
    record = next((r for r in records if r.get("run_id") in set(result.runs)), records[0])
    freeze, inherited = record.get("installed") or {}, record.get("inherited") or {}
    if not freeze:
        return result
    return replace(result, freeze=tuple(sorted(freeze.items())), inherited=tuple(sorted(inherited.items())))


def pin_from_store(store: Store, scenarios: Sequence[str], constraints: Constraints, ranking: Sequence[str] = DEFAULT_RANKING) -> PinResult:
    """The dashboard's path: slim rows from DuckDB (constraints pushed down), then the full freeze of the winner."""
    pushed: dict[str, list[str]] = {}
    for axis, spec in constraints.fixed:
        if spec.startswith("=="):
            pushed[axis] = [spec.removeprefix("==")]
    rows = queries.pin_rows(store, list(scenarios), pushed)
    result = choose(rows, scenarios, constraints, ranking)
    return with_full_freeze(result, queries.cell_records(store, result.cell_ids[0]) if result.found else [])


@dataclass
class PinFiles:
    """What `harness pin --out` wrote, the commands to paste, and why a lock was not written (if so)."""

    sources: Sources
    files: dict[str, str] = field(default_factory=dict)
    lock_note: str = ""


def sources_of(result: PinResult, runs: dict[str, dict[str, Any]]) -> Sources:
    """The index settings of the newest run that passed: what the install commands and the lock resolve against."""
    settings: dict[str, Any] = next((runs[r]["settings"] for r in reversed(list(runs)) if r in result.runs), {})
    return Sources.from_settings(settings, expand_find_links([str(f) for f in settings.get("find_links") or []]))


def write_files(result: PinResult, sources: Sources, out: Path) -> PinFiles:
    """requirements.txt and constraints.txt, and pylock.toml when uv resolves the passing freeze."""
    made = PinFiles(sources)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("requirements.txt", result.to_requirements(sources)), ("constraints.txt", result.to_constraints())):
        (out / name).write_text(text)
        made.files[name] = str(out / name)
    with tempfile.TemporaryDirectory(prefix="harness-pin-") as tmp:
        freeze = Path(tmp, "requirements.txt")
        freeze.write_text(result.lock_input())
        lock = out / "pylock.toml"
        try:
            proc = subprocess.run(
                result.lock_command(uv_binary(), str(freeze), str(lock), sources),
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"},
            )
            why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1].strip() if proc.returncode else ""
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc).splitlines()[0]
        if why or not lock.is_file():
            made.lock_note = f"pylock.toml not written: uv could not resolve the passing freeze with the run's index settings ({why})"
        else:
            made.files["pylock.toml"] = str(lock)
    return made


def pin_file(
    db: Path,
    scenarios: Sequence[str],
    fixes: Sequence[str] = (),
    gpu: str = "",
    platform: str = "",
    rank: str = "",
    out: Path | None = None,
) -> tuple[PinResult, PinFiles | None, Sources]:
    """`harness pin`: validate, choose, and (with `out`) write the files."""
    constraints = Constraints.parse(fixes, gpu, platform)
    with Store(db, read_only=True) as store:
        rows = queries.outcome_rows(store)
        runs = queries.runs(store)
    ranking = check_request(rows, str(db), scenarios, constraints, rank)
    result = choose(rows, scenarios, constraints, ranking)
    if not result.found:
        return result, None, Sources()
    sources = sources_of(result, runs)
    return result, (write_files(result, sources, out) if out else None), sources
