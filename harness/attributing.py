"""`harness attribute`: read a results file, learn the releases between tested versions, attribute, store.

The pure walk is `analysis.attribution`; this module gives it what it cannot know by itself:
the stored outcomes, and the releases each axis has on the index (stored with every run, and
refreshed here from the index the runs used), without which a gap between two tested
releases would be invisible and "fixed in X" would claim more than was built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from harness import queries
from harness.analysis.attribution import Attribution, attribute, release_axes, to_rows, unlisted_axes
from harness.candidates import IndexUnreachable, PackageIndex, install_tags, listed_releases, python_version_of
from harness.errors import BadInput
from harness.matrix import Settings
from harness.store import Store


@dataclass(frozen=True)
class Attributed:
    """What `harness attribute` computed, and from what."""

    result: Attribution
    outcomes: int
    unlisted: tuple[str, ...]  # axes whose releases on the index could not be listed: their answers are ranges


def index_releases(
    index: PackageIndex, axes: Sequence[str], python: str, exclude_newer: datetime | None = None
) -> tuple[dict[str, list[tuple[str, datetime | None]]], list[str]]:
    """({axis: [(release, uploaded)]}, axes that could not be listed) for the cells' Python on this platform."""
    tags = install_tags(python_version_of(python))
    listed: dict[str, list[tuple[str, datetime | None]]] = {}
    failed = []
    for axis in axes:
        try:
            listed[axis] = [(str(r.version), r.upload_time) for r in listed_releases(index, axis, tags, exclude_newer)]
        except IndexUnreachable:
            failed.append(axis)
    return listed, failed


def _index_of(runs: Mapping[str, Mapping[str, Any]]) -> tuple[PackageIndex, str]:
    """The index the runs resolved against (the first run's that named one, else PyPI), and their Python."""
    from harness.candidates import index_for

    chosen = next((r["settings"] for r in runs.values() if (r.get("settings") or {}).get("index_url")), None)
    python = next(
        (str((r.get("settings") or {}).get("python") or "") for r in runs.values() if (r.get("settings") or {}).get("python")), ""
    )
    settings = Settings(index_url=str((chosen or {}).get("index_url") or ""))
    return index_for(settings), python or "3.11"


def attribute_file(db: Path, run_id: str = "", scenarios: Sequence[str] = (), *, offline: bool = False) -> Attributed:
    """Attribute the outcomes of a results file (one run, or all) and store the answers in its `transitions` table.

    The releases of each axis come from every run's stored list and, unless `offline`, from the
    index (stored under run '' for later readers). An axis that has neither is `unlisted`.
    """
    with Store(db) as store:  # read-write: the answers are stored next to the outcomes
        rows = queries.outcome_rows(store, run_id or None)
        if not rows:
            hint = f" for run {run_id!r}; see `harness summary --db {db}`" if run_id else ""
            raise BadInput(f"no outcomes in {str(db)!r}{hint}")
        if scenarios:
            stored = sorted({r["scenario"] for r in rows})
            unknown = [s for s in scenarios if s not in stored]
            if unknown:
                raise BadInput(f"no outcomes for scenario(s) {', '.join(map(repr, unknown))} in {str(db)!r}; stored: {', '.join(stored)}")
        axes = release_axes(rows)
        if not offline:
            index, python = _index_of(queries.runs(store))
            fetched, _ = index_releases(index, axes, python)
            if fetched:
                store.record_releases("", fetched)
        known = queries.known_releases(store)
        unlisted = unlisted_axes(rows, known)
        wanted = [r for r in rows if r["scenario"] in scenarios] if scenarios else rows
        # Every scenario's versions are known releases: a gap on one line may be tested on another.
        result = attribute(wanted, known_versions=known, unlisted=unlisted)
        store.replace_transitions(to_rows(result, run_id), scope=run_id, scenarios=scenarios)
    return Attributed(result, len(wanted), tuple(unlisted))
