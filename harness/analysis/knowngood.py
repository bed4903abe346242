"""The known-good set per machine class: the newest cell passing every scenario that passes there. Pure.

Chosen per machine class (`known_good_sets`), over the scenarios that pass somewhere on that
class: a scenario that cannot run there (it needs a GPU, or two) is never counted against it.
Where no cell passes them all, the scenario that keeps the most candidate cells out is dropped,
then the next (`drop_order`), until one does; the choice among the cells left is the pin's
(`pin.choose_among`). The summary, `harness watch`, reports, the published page and the
dashboard read it.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

from harness.analysis.candidates import Candidate, breaks_collection
from harness.analysis.pin import DEFAULT_RANKING, Constraints, PinResult, admitted_rows, as_asked, candidates_of, choose_among
from harness.analysis.quiet import STAND_IN, Quiet
from harness.analysis.rows import CellFacts, by_cell
from harness.analysis.status import FAILURES, Status


def choose_for_passing(
    rows: Sequence[Mapping[str, Any]],
    constraints: Constraints | None = None,
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
) -> tuple[PinResult, list[str], list[str]] | None:
    """The known-good set of one machine's rows: the newest cell passing every scenario that passes somewhere.

    Where no cell passes them all, the scenario that keeps the most candidate cells out is
    dropped, then the next, until one does. Returns (result, scenarios kept, scenarios dropped),
    or None when nothing passes anywhere. `known_good_sets` asks it once per machine class, for
    the summary, `harness watch`, reports and the dashboard.
    """
    if cells is not None and constraints is None:  # `rows` by cell, when the caller has them: every row admitted
        return _choose_for_passing(cells, Constraints())
    return _choose_for_passing(by_cell(admitted_rows(rows, constraints)), constraints or Constraints())


def _choose_for_passing(
    groups: Mapping[CellFacts, Sequence[Mapping[str, Any]]], constraints: Constraints, passing: Iterable[str] | None = None
) -> tuple[PinResult, list[str], list[str]] | None:
    """`choose_for_passing` over rows already admitted, by cell; `passing`, where the caller
    counted the scenarios that pass somewhere in them already."""
    ok = Status.PASS
    if passing is None:
        passing = {str(r["scenario"]) for rows in groups.values() for r in rows if r["status"] == ok}
    wanted = sorted(passing)
    if not wanted:
        return None
    cells = candidates_of(groups, set(wanted), constraints)
    dropped = drop_order(cells, wanted)
    gone = set(dropped)
    kept = [s for s in wanted if s not in gone]
    narrowed = _narrowed(cells, gone) if gone else cells  # nothing dropped: the cells hold only the wanted already
    return choose_among(narrowed, tuple(kept), constraints, DEFAULT_RANKING), kept, dropped


def _narrowed(cells: Sequence[Candidate], gone: set[str]) -> list[Candidate]:
    """The cells without the scenarios `gone` (dropped from the wanted ones), from cells already
    read: a row of one of them that keeps tests from being collected (`breaks_collection`) joins
    `uncollected`; a cell left without rows goes."""
    out = []
    for cell in cells:
        leaving = gone & cell.rows.keys()
        if len(leaving) == len(cell.rows):
            continue
        rows = defaultdict(list, cell.rows)  # a copy of the dict (its lists shared), less the few that go
        for scenario in leaving:
            del rows[scenario]
        # a cell's rows sit under their own scenario, and only a row without `::` breaks collection:
        # the name says which to look at (a known-good set drops thousands of tests at 2,000,000 outcomes)
        broken = {s for s in leaving if "::" not in s and any(breaks_collection(x) for x in cell.rows[s])}
        uncollected = tuple(sorted({*cell.uncollected, *broken}))
        out.append(Candidate(cell.versions, cell.requested, rows, uncollected, known_clean=cell.clean - leaving))
    return out


def drop_order(cells: Sequence[Candidate], passing: Sequence[str]) -> list[str]:
    """Which scenarios the known-good set leaves out, in the order they are dropped.

    The rule: while no candidate cell passes every wanted scenario (and more than one is
    wanted), drop the one that does not pass in the most candidate cells, the first by name
    on a tie. Asking `pin.choose` again after each drop was one pass over every outcome per
    dropped test: hours at 20,000 tests. Here each cell keeps a count of the wanted
    scenarios it misses, and each scenario a count of the candidate cells it is missed in;
    a drop changes only the cells that miss it (and, when it was a cell's last scenario with
    outcomes, that cell stops being a candidate, as `choose` would no longer see it).
    """
    wanted = set(passing)
    rank = {s: k for k, s in enumerate(passing)}
    ok = [c.passes(wanted) for c in cells]
    misses = [len(wanted - good) for good in ok]
    with_rows = [len(wanted & c.rows.keys()) for c in cells]
    missed_in: dict[str, list[int]] = defaultdict(list)
    for k, good in enumerate(ok):
        for s in wanted - good:
            missed_in[s].append(k)
    count = {s: len(ks) for s, ks in missed_in.items()}
    heap = [(-n, rank[s], s) for s, n in count.items() if n]
    heapq.heapify(heap)
    dropped: list[str] = []
    rows_of = [c.rows for c in cells]
    # Only a cell a drop touched can start to pass everything: the others are checked once, here
    # (checking all after each of 8,700 drops was a fifth of the known-good set at 2,000,000 outcomes).
    found = any(with_rows[k] and not misses[k] for k in range(len(cells)))
    while heap and len(wanted) > 1 and not found:
        n, _, worst = heapq.heappop(heap)
        if worst not in wanted or -n != count[worst]:
            continue  # a stale entry: its count fell since it was pushed
        wanted.discard(worst)
        dropped.append(worst)
        for k in missed_in[worst]:
            misses[k] -= 1
        ran = [k for k in range(len(cells)) if worst in rows_of[k]]  # the cells it ran in: a few drops, 400,000 outcomes
        for k in ran:
            with_rows[k] -= 1
            if not with_rows[k]:  # no outcome of a wanted scenario left: no longer a candidate
                for s in wanted - ok[k]:
                    count[s] -= 1
                    heapq.heappush(heap, (-count[s], rank[s], s))
        found = any(with_rows[k] and not misses[k] for k in (*missed_in[worst], *ran))
    return dropped


# -- the known-good set per machine ------------------------------------------------------------
@dataclass(frozen=True)
class KnownGoodSet:
    """The known-good set of one machine class, and over which scenarios it was chosen."""

    machine: str  # `cpu`, `1x NVIDIA H200`; "" for rows with no host
    result: PinResult  # `found` is False when no cell passes even one of them
    kept: tuple[str, ...]  # pass in the chosen cell
    dropped: tuple[str, ...] = ()  # pass somewhere on this machine, but in no cell together with the kept ones
    not_applicable: tuple[str, ...] = ()  # stored, but not applicable in every cell here (it needs a GPU, or two)
    failing: tuple[str, ...] = ()  # ran here, never passed

    @property
    def passing(self) -> tuple[str, ...]:
        """Every scenario that passes somewhere on this machine: what the set is chosen over."""
        return (*self.kept, *self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "found": self.result.found,
            "versions": dict(self.result.versions),
            "cell_ids": list(self.result.cell_ids),
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "not_applicable": list(self.not_applicable),
            "failing": list(self.failing),
        }


@dataclass
class _Tally:
    """What one machine class's rows hold, counted in one pass (`_tally`): the scenarios that
    passed somewhere (what its known-good set is chosen over), ran (not only `not_applicable`),
    and gave evidence (passed or failed)."""

    passing: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)
    evidence: set[str] = field(default_factory=set)


def _tally(rows: Iterable[Mapping[str, Any]], stored: set[str]) -> _Tally:
    """`_Tally` of `rows`, adding every scenario they name to `stored`: one pass, and one set
    touched by most rows (a pass), the rest worked out from those sets after."""
    passing: set[str] = set()
    idle: set[str] = set()  # not_applicable rows
    other: set[str] = set()  # neither a pass nor not_applicable
    failed: set[str] = set()
    skipped, passed = Status.NOT_APPLICABLE, Status.PASS
    for row in rows:
        scenario, status = str(row["scenario"]), row["status"]
        if status == passed:
            passing.add(scenario)
        elif status == skipped:
            idle.add(scenario)
        else:
            other.add(scenario)
            if status in FAILURES:
                failed.add(scenario)
    stored |= passing | idle | other
    return _Tally(passing, passing | other, passing | failed)


def known_good_sets(
    rows: Sequence[Mapping[str, Any]], cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None
) -> list[KnownGoodSet]:
    """One known-good set per machine class (`machines.machine_classes` order), each over that class's own rows.

    A scenario counts for a class only where it passes somewhere on that class, so a GPU
    scenario never keeps a CPU cell out, and a CPU-only one never keeps a GPU cell out.
    """
    cells = cells if cells is not None else by_cell(rows)  # `rows` by cell, when the caller has them
    cells_of_class: dict[str, dict[CellFacts, Sequence[Mapping[str, Any]]]] = defaultdict(dict)
    for facts, mine in cells.items():
        cells_of_class[facts.machine_class][facts] = mine
    stored: set[str] = set()
    tallies = {machine: _tally(chain.from_iterable(groups.values()), stored) for machine, groups in cells_of_class.items()}
    found = []
    classes = sorted(set(cells_of_class) - {""}, key=lambda c: (c != "cpu", c))  # `machines.machine_classes`, from the rows read once
    for machine in [*classes, *([""] if "" in cells_of_class else [])]:
        tally = tallies[machine]
        constraints = Constraints(machine=machine)
        chosen = _choose_for_passing(cells_of_class[machine], constraints, tally.passing)  # its rows are this machine's: all admitted
        ran, evidence = tally.ran, tally.evidence
        idle = tuple(sorted(stored - ran))
        if chosen is None:
            empty = PinResult((), constraints, (), 0, 0)
            found.append(KnownGoodSet(machine, empty, (), (), idle, tuple(sorted(evidence))))
            continue
        result, kept, dropped = chosen
        found.append(KnownGoodSet(machine, result, tuple(kept), tuple(dropped), idle, tuple(sorted(evidence - {*kept, *dropped}))))
    return found


def with_quiet(found: KnownGoodSet, quiet: Quiet) -> KnownGoodSet:
    """`found`, chosen over rows whose quiet tests were one stand-in (`analysis.quiet`), as it would
    have been chosen over every row: the stand-in passed in every cell, as each quiet test did, so
    it is kept wherever the set was found and only its name and its evidence stand for many."""
    if not quiet or STAND_IN not in found.kept:
        return found
    result = as_asked(found.result, quiet.expand(found.result.scenarios), set(quiet.tests))
    return replace(found, result=result, kept=quiet.expand(found.kept))
