"""Machine classes: which a results file's rows ran on, the one a user names, the newest run's. Pure.

A machine class (`rows.machine_class`: `cpu`, `2x NVIDIA H200`) is what a pin and a known-good set
are chosen for: outcomes of two classes are never pooled unless the user asks for `any`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from harness.analysis.rows import CellFacts, by_cell, machine_class, to_minute

#: `--machine any`: every machine class pooled (a pin must then pass on each machine it ran on).
ANY_MACHINE = "any"


def machine_classes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The machine classes that rows ran on: `cpu` first, then the GPU classes by name."""
    found = {machine_class(r) for r in rows} - {""}
    return sorted(found, key=lambda c: (c != "cpu", c))


def _normal(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", ""))


def find_machine(text: str, classes: Sequence[str]) -> str | None:
    """The class the user means: case, spaces and the word NVIDIA do not matter (`2xH200`); `any` pools them.

    >>> find_machine("2x h200", ["cpu", "1x NVIDIA H200", "2x NVIDIA H200"]), find_machine("H100", ["cpu"])
    ('2x NVIDIA H200', None)
    """
    wanted = text.strip()
    if wanted.lower() == ANY_MACHINE:
        return ANY_MACHINE
    return next((c for c in classes if c == wanted), None) or next((c for c in classes if _normal(c) == _normal(wanted)), None)


def newest_machine(rows: Iterable[Mapping[str, Any]], cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None) -> str:
    """The machine class of the newest run among `rows` (by its latest outcome); "" without any.
    cells: `rows` by cell (`by_cell`), when the caller has them: then each cell's latest outcome
    is found in C, not by formatting 400,000 start times."""
    latest: dict[str, tuple[str, str]] = {}
    for facts, group in (cells if cells is not None else by_cell(rows)).items():
        if not facts.machine_class or not group:
            continue
        run, when = str(group[0].get("run_id") or ""), _latest(group)
        if run not in latest or when > latest[run][0]:
            latest[run] = (when, facts.machine_class)
    if not latest:
        return ""
    newest = max(latest, key=lambda run: (latest[run][0], run))
    return latest[newest][1]


def _latest(rows: Sequence[Mapping[str, Any]]) -> str:
    """`rows.to_minute` of the latest start among one cell's rows: the latest value read in C where they
    are all of one comparable kind (timestamps, or ISO text), else row by row."""
    try:
        return to_minute(max(map(_STARTED, rows)))
    except TypeError:  # None among them, or timestamps and text mixed
        return max(map(to_minute, map(_STARTED, rows)))


_STARTED = itemgetter("started_at")
