"""What the summary's and the published page's words need from the rows, read in one pass (`tally`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import compress
from operator import itemgetter
from typing import Any

from harness.analysis.rows import group_of, signature_of
from harness.analysis.status import FAILURES, Status, fold_statuses

CELL_ID, SCENARIO, STATUS = itemgetter("cell_id"), itemgetter("scenario"), itemgetter("status")


#: The statuses `tally` reads a row for: failures and inconclusive outcomes, a few of a suite's rows.
_SAYS_LITTLE = frozenset({*FAILURES, Status.INCONCLUSIVE})


def grouped(scenarios: Iterable[str]) -> str:
    """One answer for several tests of one group: "34 tests in tests/test_x.py"; a scenario alone by name."""
    names = sorted(set(scenarios))
    groups = {group_of(n) for n in names}
    if len(names) == 1:
        return names[0]
    where = next(iter(groups)) if len(groups) == 1 else f"{len(groups)} groups"
    return f"{len(names)} tests in {where}"


def cell_statuses(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """{cell: {scenario: "pass" | "error 1/3 mixed" | ...}}: repeats folded into one word (`status.fold`)."""
    table: dict[str, dict[str, str]] = defaultdict(dict)
    repeats: dict[tuple[str, str], list[str]] = {}
    for row in rows:  # one pass and no key built per outcome: a suite has 400,000 of them
        cell, scenario = table[row["cell_id"]], row["scenario"]
        if scenario in cell:
            repeats.setdefault((row["cell_id"], scenario), [cell[scenario]]).append(str(row["status"]))
        cell[scenario] = str(row["status"])
    for (cell_id, scenario), statuses in repeats.items():
        table[cell_id][scenario] = fold_statuses(statuses)
    return dict(table)


def failure_families(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, int, list[str]]]:
    """(signature, blamed library, outcomes, scenarios) for every failing signature, most frequent first."""
    hits: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] in FAILURES and row.get("signature"):
            hits[row["signature"]].append(row)
    families = [(sig, rs[0].get("blamed_library") or "", len(rs), sorted({r["scenario"] for r in rs})) for sig, rs in hits.items()]
    return sorted(families, key=lambda f: (-f[2], f[0]))


# -- answers -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tally:
    """What the summary's and the published page's words need from the rows, read in one pass
    (`tally`): at 50,000 tests x 20 cells each pass over the rows costs 0.2-0.5 s, and the words
    made six of them. Passes and not-applicable outcomes, most of the rows, are counted per cell
    and scenario from `cell_statuses`' words, which the grid reads anyway."""

    blamed: dict[str, str]  # failure signature -> the library it blames
    failing: dict[str, set[str]]  # scenario -> its failures' signatures
    inconclusive: set[str]  # scenarios inconclusive in some cell
    words: dict[str, dict[str, str]]  # cell -> scenario -> its repeats in one word (`cell_statuses`)

    @cached_property
    def clean(self) -> set[str]:
        """Scenarios with evidence that is no failure: a pass somewhere (a cell's word `pass`, or a mixture with passes)."""
        passed = Status.PASS.value  # the plain word: a str compared with an enum member costs twice as much, 400,000 times
        return {s for cell in self.words.values() for s, word in cell.items() if word == passed or word.endswith("mixed")}

    @cached_property
    def applicable(self) -> set[str]:
        """Scenarios with an outcome that is not `not_applicable` somewhere (a cell's word is only that when all were)."""
        idle = Status.NOT_APPLICABLE.value
        return {s for cell in self.words.values() for s, word in cell.items() if word != idle and word}


def tally(rows: Iterable[Mapping[str, Any]]) -> Tally:
    rows = list(rows)
    found = Tally({}, defaultdict(set), set(), cell_statuses(rows))
    for row in compress(rows, map(_SAYS_LITTLE.__contains__, map(STATUS, rows))):  # failures and inconclusives only
        status, scenario = row["status"], row["scenario"]
        if status == Status.INCONCLUSIVE:
            found.inconclusive.add(scenario)
            continue
        signature = signature_of(row)
        found.failing[scenario].add(signature)
        found.blamed[signature] = str(row.get("blamed_library") or "")
    return found
