"""The Pin page's logic: `harness.pin.choose` over slim rows, then the full freeze of the winner.

`Store.dashboard_pin_rows` hands `choose` only the axes of each cell's freeze (decoding every
outcome's whole freeze costs seconds on a large store); the chosen cell's complete freeze is
then read once, so the constraints file lists every package the passing env had.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from harness.pin import DEFAULT_RANKING, Constraints, PinResult, choose


def constraints(fixed: Mapping[str, str], gpu: str = "", platform: str = "") -> Constraints:
    """Exact axis versions (`==`; `2.13.0` also admits `2.13.0+cpu`), a GPU and a platform."""
    return Constraints(tuple((axis, f"=={value}") for axis, value in sorted(fixed.items()) if value), gpu, platform)


def pin(
    rows: Sequence[Mapping[str, Any]],
    scenarios: Sequence[str],
    held: Constraints,
    records_of: Callable[[str], Sequence[Mapping[str, Any]]] | None = None,
    ranking: Sequence[str] = DEFAULT_RANKING,
) -> PinResult:
    """The newest passing set. records_of: cell id -> `Store.dashboard_cell_records`, for the full freeze."""
    result = choose(rows, scenarios, held, ranking)
    records = records_of(result.cell_ids[0]) if result.found and records_of else []
    if not records:
        return result
    runs = set(result.runs)
    record = next((r for r in records if r.get("run_id") in runs), records[0])
    freeze = record.get("installed") or {}
    inherited = record.get("inherited") or {}
    if not freeze:
        return result
    return replace(result, freeze=tuple(sorted(freeze.items())), inherited=tuple(sorted(inherited.items())))
