"""Attribution: which release of which library introduced a failure, and which fixed it. Pure.

For every machine class, scenario, failure signature and axis, the cells whose *other* axes are
equal form a line along that axis. Each cell on the line gets a verdict for the signature, the
line is ordered (`versions.order_key`), and neighbouring cells with a definite verdict are
compared: clean -> has is "introduced", has -> clean is "fixed".

An answer is never stronger than what was built:
- "fixed in X (after W)" only where X and W both ran on that line (same other axes, same
  machine) and no release lies between them on the index. Otherwise it is a range that names
  what was not built: "fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0".
- Cells that say nothing about the signature (not applicable, inconclusive, env problems,
  another failure, flaky repeats) are stepped over and named: the answer is a range.
- Outcomes of two machine classes are never compared along an axis. A verdict that differs
  only across machines is a `MachineDifference`, not a transition.

>>> rows = [
...     {"scenario": "load", "status": s, "signature": sig, "repeat": 0, "cell_id": c, "run_id": "r", "gpu": "cpu",
...      "platform": "linux-x86_64", "python": "3.11", "versions": {"torch": "2.13.0", "accelerate": acc}}
...     for c, acc, s, sig in [("a", "1.13.0", "error", "TypeError: x"), ("b", "1.15.0", "pass", "")]
... ]
>>> attribute(rows).transitions[0].headline()
'fixed in accelerate 1.15.0 (after 1.13.0)'
>>> attribute(rows, known_versions={"accelerate": ["1.13.0", "1.14.0", "1.15.0"]}).transitions[0].headline()
'fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0'
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from itertools import pairwise
from typing import Any, Literal, TypeVar

from packaging.version import Version

from harness.analysis.quiet import earliest
from harness.analysis.rows import CellFacts, Machine, axis_sort, by_cell, cell_facts, signature_of
from harness.analysis.status import FAILURES, NO_EVIDENCE, Status, across_runs
from harness.analysis.versions import Point, commit_index, order_key, release

Kind = Literal["introduced", "fixed"]
#: What one cell says about one failure signature.
Evidence = Literal["has", "clean", "flaky", "skip"]

#: How many releases that were not built a one-line answer names before it only counts the rest.
SHOW_NOT_BUILT = 6
#: The origin of a cell built by refinement (`cells.origin`): its answers say "refined".
REFINED = "refine"
#: What lies between two tested releases when the index's list of that axis is not known.
UNLISTED = "any release between (the index's releases were not listed)"


# -- cells -----------------------------------------------------------------------------------
@dataclass
class _ScenarioCell:
    """Every stored repeat (over all runs) of one scenario at one combination of versions, on one machine."""

    points: dict[str, Point]
    machine: Machine
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    _counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # each line asks again: ask once

    @property
    def cell_id(self) -> str:
        return min(str(r.get("cell_id", "")) for r in self.rows)

    @property
    def runs(self) -> set[str]:
        return {str(r.get("run_id", "")) for r in self.rows}

    @property
    def refined(self) -> bool:
        return any(r.get("origin") == REFINED for r in self.rows)

    def counts(self, signature: str) -> tuple[int, int, int]:
        """(repeats failing with `signature`, repeats passing, repeats that are evidence).

        A repeat that says nothing (inconclusive, not applicable, no env) is not counted when
        other repeats of the cell do say something: an old run that never reached the setup does
        not make the runs that reached it look flaky.
        """
        if signature not in self._counts:
            has = sum(1 for r in self.rows if r["status"] in FAILURES and signature_of(r) == signature)
            clean = sum(1 for r in self.rows if r["status"] == Status.PASS)
            evidence = sum(1 for r in self.rows if r["status"] not in NO_EVIDENCE)
            self._counts[signature] = (has, clean, evidence)
        return self._counts[signature]

    def evidence(self, signature: str) -> Evidence:
        has, clean, total = self.counts(signature)
        if not total:
            return "skip"
        if (has or clean == total) and self.flaky_across(signature):
            return "flaky"  # its history flips with nothing changed (`queries.mark_flaky`): no claim either way
        if has == total:
            return "has"
        if clean == total:
            return "clean"
        # Seen in some repeats only: no claim either way. Never seen, but not a clean pass
        # either (not applicable, inconclusive, the env did not build, another failure): no evidence.
        return "flaky" if has else "skip"

    def flaky_across(self, signature: str) -> bool:
        """Whether the cell's history flips from a pass to this failure, or back, with nothing changed."""
        return signature in self._flaky_signatures

    @cached_property
    def _flaky_signatures(self) -> frozenset[str]:
        # asked for every signature of every line (380,000 times at 50,000 tests x 20 cells): read the rows once
        return frozenset(str(r["flaky_signature"]) for r in self.rows if "flaky_signature" in r)

    def why_skipped(self, signature: str) -> str:
        """What a stepped-over cell showed instead: `flaky 2/3`, `flaky across runs`, `not_applicable`, `inconclusive`, `other failure`."""
        has, clean, total = self.counts(signature)
        if (has or clean == total) and self.flaky_across(signature):
            return "flaky across runs"
        if has:
            return f"flaky {has}/{total}"
        words = Counter("other failure" if r["status"] in FAILURES else str(r["status"]) for r in self.rows if r["status"] != Status.PASS)
        return words.most_common(1)[0][0] if words else "no outcome"


# -- results ---------------------------------------------------------------------------------
def _verb(kind: str) -> tuple[str, str]:
    """(old side, new side) in words: a fix goes from fails to passes."""
    return ("fails", "passes") if kind == "fixed" else ("passes", "fails")


@dataclass(frozen=True)
class Transition:
    """One change of verdict between neighbouring candidates of one axis, the other axes and the machine held.

    `before` is the last candidate on the old side, `after` the first on the new side. When
    `not_built` (releases on the index between them that this line never ran) or `inconclusive`
    (ran, but said nothing) is not empty, the change lies somewhere after `before`, up to and
    including `after`: a range, never "in `after`".
    """

    scenario: str
    signature: str
    axis: str
    kind: Kind
    before: str
    after: str
    held: tuple[tuple[str, str], ...]  # the other axes, in reading order: (("torch", "2.13.0"), ...)
    machine: str = ""  # the machine class's label: every outcome behind this answer ran on it
    not_built: tuple[str, ...] = ()
    inconclusive: tuple[str, ...] = ()  # "1.14.0 (not_applicable)", "1.14.1 (flaky 1/3)"
    signature_family: str = ""
    before_cell: str = ""
    after_cell: str = ""
    runs: tuple[str, ...] = ()
    refined: bool = False  # a side of it was built by refinement, not by the matrix

    @property
    def is_range(self) -> bool:
        return bool(self.not_built or self.inconclusive)

    @property
    def exact(self) -> bool:
        return not self.is_range

    @property
    def how(self) -> str:
        """How the answer was obtained: `built` (both sides in the matrix), `refined`, or `range`."""
        return "range" if self.is_range else ("refined" if self.refined else "built")

    def where(self) -> str:
        """`1.14.0 (after 1.13.0)` for an exact answer; `1.13.0 (fails) and 1.15.0 (passes)` for a range."""
        return _where(self.kind, self.before, self.after, self.exact)

    def gaps(self) -> str:
        """`not built: 1.14.0, 1.14.1; inconclusive: 1.14.2 (not_applicable)`, or ""."""
        return _gaps(self.not_built, self.inconclusive)

    def headline(self) -> str:
        """The answer in one phrase, the same wherever it appears (summary, attribute, report, dashboard, pin):

        `fixed in accelerate 1.14.0 (after 1.13.0)`, or
        `fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0`.
        """
        return _headline(self.kind, self.axis, self.before, self.after, tuple(self.not_built), tuple(self.inconclusive))

    def conditions(self) -> str:
        """`with torch 2.13.0, transformers 5.6.2, … on cpu · linux-x86_64 · Python 3.11`."""
        return _conditions(tuple(self.held), self.machine)

    def describe(self) -> str:
        headline = _headline(self.kind, self.axis, self.before, self.after, tuple(self.not_built), tuple(self.inconclusive))
        conditions = _conditions(tuple(self.held), self.machine)
        return f"{headline} — {conditions}" if conditions else headline

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "signature": self.signature,
            "signature_family": self.signature_family,
            "axis": self.axis,
            "kind": self.kind,
            "before": self.before,
            "after": self.after,
            "untested": list(self.not_built),
            "inconclusive": list(self.inconclusive),
            "held": dict(self.held),
            "machine": self.machine,
            "before_cell": self.before_cell,
            "after_cell": self.after_cell,
            "runs": list(self.runs),
            "how": self.how,
            "description": self.describe(),
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Transition:
        """From a stored `transitions` row (JSON columns decoded) or `to_dict()`."""
        held = row.get("held") or {}
        return cls(
            scenario=str(row.get("scenario") or ""),
            signature=str(row.get("signature") or ""),
            axis=str(row.get("axis") or ""),
            kind=row.get("kind") or "fixed",
            before=str(row.get("before") or ""),
            after=str(row.get("after") or ""),
            held=tuple((str(a), str(v)) for a, v in dict(held).items()),
            machine=str(row.get("machine") or ""),
            not_built=tuple(str(v) for v in row.get("untested") or ()),
            inconclusive=tuple(str(v) for v in row.get("inconclusive") or ()),
            signature_family=str(row.get("signature_family") or ""),
            before_cell=str(row.get("before_cell") or ""),
            after_cell=str(row.get("after_cell") or ""),
            runs=tuple(str(r) for r in row.get("runs") or ()),
            refined=row.get("how") == "refined",
        )


@dataclass(frozen=True)
class Flaky:
    """A cell where a signature showed in some repeats and not in others: no transition uses it.

    Flaky within a run (its repeats disagree), or across runs (each run's repeats agree, the runs
    do not: `runs_failed` of `runs_total`), which a matrix with `repeats = 1` shows too.
    """

    scenario: str
    signature: str
    cell_id: str
    versions: tuple[tuple[str, str], ...]
    failed: int
    repeats: int
    signature_family: str = ""
    runs: tuple[str, ...] = ()
    machine: str = ""
    runs_failed: int = 0  # across runs: the runs in which it failed, of
    runs_total: int = 0  # the runs that said something (0: flaky within a run)
    nothing_changed: bool = False  # the history saw it flip with nothing it depends on changed

    @property
    def across_runs(self) -> bool:
        return self.runs_total > 0

    def describe(self) -> str:
        where = f" on {self.machine}" if self.machine else ""
        if self.across_runs:
            same = "with nothing changed" if self.nothing_changed else "with the same versions"
            return f"flaky across runs: failed in {self.runs_failed} of {self.runs_total} runs {same} ({held_text(self.versions)}){where}"
        return f"flaky: {self.failed} of {self.repeats} repeat(s) with {held_text(self.versions)}{where}"

    def count(self) -> str:
        """`2/3 repeats`, or `1/2 runs`: the summary's table column."""
        return f"{self.runs_failed}/{self.runs_total} runs" if self.across_runs else f"{self.failed}/{self.repeats} repeats"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "signature": self.signature,
            "signature_family": self.signature_family,
            "kind": "flaky",
            "cell_id": self.cell_id,
            "versions": dict(self.versions),
            "machine": self.machine,
            "failed": self.failed,
            "repeats": self.repeats,
            "runs": list(self.runs),
            "how": "flaky",
            "description": self.describe(),
            "across_runs": self.across_runs,
            "runs_failed": self.runs_failed,
            "runs_total": self.runs_total,
        }


@dataclass(frozen=True)
class MachineDifference:
    """A failure that shows on one machine class and not on another, where no release can be blamed.

    Either the versions are the same on both machines, or the one axis that also differs never
    ran on the other machine (torch 2.11.0 only on the GPU runner, 2.13.0 only on the CPU): the
    machine and the release changed together, so it is reported as a difference of machines.
    """

    scenario: str
    signature: str
    fails_on: str  # machine labels
    passes_on: str
    axis: str  # the axis that differs too, "" when the versions are the same
    fails_with: str  # that axis's value on each side ("" when none differs)
    passes_with: str
    held: tuple[tuple[str, str], ...]  # the axes equal on both sides
    signature_family: str = ""
    fails_cell: str = ""
    passes_cell: str = ""
    runs: tuple[str, ...] = ()

    def headline(self) -> str:
        if not self.axis:
            return (
                f"fails on {self.fails_on} and passes on {self.passes_on} with the same versions: a difference of machines, not of releases"
            )
        return (
            f"fails on {self.fails_on} with {self.axis} {self.fails_with} and passes on {self.passes_on} with {self.axis} "
            f"{self.passes_with}: the machine and {self.axis} changed together, so no {self.axis} release is blamed"
        )

    def describe(self) -> str:
        return f"{self.headline()} — with {held_text(self.held)}" if self.held else self.headline()

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "signature": self.signature,
            "signature_family": self.signature_family,
            "axis": self.axis,
            "kind": "machine",
            "before": self.fails_with,
            "after": self.passes_with,
            "untested": [],
            "inconclusive": [],
            "held": dict(self.held),
            "machine": self.fails_on,
            "other_machine": self.passes_on,
            "before_cell": self.fails_cell,
            "after_cell": self.passes_cell,
            "runs": list(self.runs),
            "how": "machine",
            "description": self.describe(),
        }


@dataclass(frozen=True)
class Attribution:
    transitions: tuple[Transition, ...]
    flaky: tuple[Flaky, ...]
    machines: tuple[MachineDifference, ...] = ()


@lru_cache(maxsize=65536)
def _headline(kind: str, axis: str, before: str, after: str, not_built: tuple[str, ...], inconclusive: tuple[str, ...]) -> str:
    """`Transition.headline`, worked out once per answer: 78,000 transitions of a suite say a few hundred."""
    exact = not (not_built or inconclusive)
    if exact:
        return f"{kind} in {axis} {_where(kind, before, after, exact)}"
    return f"{kind} between {axis} {_where(kind, before, after, exact)}; {_gaps(not_built, inconclusive)}"


def _where(kind: str, before: str, after: str, exact: bool) -> str:
    if exact:
        return f"{after} (after {before})"
    old, new = _verb(kind)
    return f"{before} ({old}) and {after} ({new})"


def _gaps(not_built: Sequence[str], inconclusive: Sequence[str]) -> str:
    parts = []
    if not_built:
        shown = ", ".join(not_built[:SHOW_NOT_BUILT])
        more = len(not_built) - SHOW_NOT_BUILT
        parts.append(f"not built: {shown}" + (f" and {more} more" if more > 0 else ""))
    if inconclusive:
        parts.append(f"inconclusive: {', '.join(inconclusive)}")
    return "; ".join(parts)


@lru_cache(maxsize=65536)
def _conditions(held: tuple[tuple[str, str], ...], machine: str) -> str:
    """`Transition.conditions`, worked out once per set of held versions and machine: a suite's
    78,000 transitions (each stored with its description) hold a few hundred."""
    text = f"with {held_text(held)}" if held else ""
    if machine:
        text += (" " if text else "") + f"on {machine}"
    return text


def held_text(held: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{axis} {value}" for axis, value in held)


# -- the walk --------------------------------------------------------------------------------
def _first_seen(rows: Iterable[Mapping[str, Any]], combo: Mapping[str, Point], first_seen: dict[tuple[str, Point], str]) -> None:
    """When each git or path candidate of a cell first ran, from its rows (a datetime, or ISO text)."""
    for row in rows:
        when = str(earliest(row) or "").replace("T", " ")
        if when:
            for axis, point in combo.items():
                if point.release is None and when < first_seen.get((axis, point), "~"):
                    first_seen[(axis, point)] = when


def attribute(
    rows: Iterable[Mapping[str, Any]],
    *,
    known_versions: Mapping[str, Iterable[str]] | None = None,
    commit_order: Mapping[str, Sequence[str]] | None = None,
    unlisted: Iterable[str] = (),
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
) -> Attribution:
    """Every transition of every failure signature along every axis, per machine class; flaky cells; machine differences.

    rows: outcome rows shaped like `outcomes_v` (repeats and several runs of one combination of
    versions on one machine class are pooled). known_versions: axis -> releases that exist on
    the index (`queries.known_releases`); the versions seen in `rows` are always known. Without
    the index's list, a gap between two tested releases is invisible: pass it. commit_order:
    axis -> commits, oldest first. unlisted: axes whose index list could not be had; a change
    between two of their releases is a range (`UNLISTED`), never "in X". Rows without versions
    are ignored. cells: `rows` by cell (`rows.by_cell`), when the caller has them already.
    """
    commit_order = commit_order or {}
    # Cells are read once per cell (`rows.cell_facts`), numbered by their combination of
    # versions on a machine; a scenario's cells are a dict by that number.
    kinds: dict[CellFacts, int] = {}  # -1: no versions (ignored)
    numbers: dict[tuple[Machine, tuple[tuple[str, Point], ...]], int] = {}
    combos: list[dict[str, Point]] = []
    machines_of: list[Machine] = []
    sources: list[bool] = []  # a git or path candidate: placed by when it first ran
    groups = cells if cells is not None else by_cell(rows)
    failing = {row["scenario"] for group in groups.values() for row in group if row["status"] in FAILURES}
    # each failing test's rows by cell number; its `_ScenarioCell`s are made only where its answers
    # are worked out, not for a test that says what another said (most of a suite's: 174,000 cells)
    by_scenario: dict[str, dict[int, list[Mapping[str, Any]]]] = defaultdict(dict)
    first_seen: dict[tuple[str, Point], str] = {}
    for facts, group in groups.items():
        kid = kinds.get(facts)
        if kid is None:
            kid = kinds[facts] = _number(facts, numbers, combos, machines_of, sources)
        if kid < 0:
            continue
        for row in group:
            # A scenario that never failed has no transition, flaky cell or machine difference: at
            # 20,000 tests only the few that fail somewhere are worth a cell of their own.
            if row["scenario"] in failing:
                of_test = by_scenario[row["scenario"]]
                here = of_test.get(kid)
                if here is None:
                    of_test[kid] = [row]
                else:
                    here.append(row)
        if sources[kid]:
            _first_seen(group, combos[kid], first_seen)

    known = _known_releases(combos, known_versions or {})
    blind = frozenset(unlisted)
    transitions: list[Transition] = []
    flaky: list[Flaky] = []
    machines: list[MachineDifference] = []
    shapes: dict[tuple[str, tuple[int, ...]], list[list[int]]] = {}
    # Tests whose rows say the same thing cell by cell (one regression breaks hundreds of tests
    # alike) have the same answers but for their name: worked out once, copied for the others.
    answered: dict[tuple[Any, ...], tuple[int, int, int, int, int, int]] = {}
    for scenario in sorted(by_scenario):
        rows_by_kid = by_scenario[scenario]
        said = _what_rows_say(rows_by_kid)
        same = answered.get(said)
        if same is not None:
            t0, t1, f0, f1, m0, m1 = same
            transitions.extend(_renamed(t, scenario) for t in transitions[t0:t1])
            flaky.extend(_renamed(f, scenario) for f in flaky[f0:f1])
            machines.extend(_renamed(m, scenario) for m in machines[m0:m1])
            continue
        starts = (len(transitions), len(flaky), len(machines))
        # a cell's versions are shared, never changed: the combination's own dict, not a copy per test
        by_kid = {kid: _ScenarioCell(combos[kid], machines_of[kid], here) for kid, here in rows_by_kid.items()}
        by_combo = list(by_kid.values())
        axes = axis_sort({a for c in by_combo for a in c.points})
        lines = {axis: _lines_of(by_kid, axis, commit_order.get(axis, ()), first_seen, shapes) for axis in axes}
        for signature, family in _signatures(by_combo):
            for axis in axes:
                for line in lines[axis]:
                    walked = _walk(scenario, signature, family, axis, line, known.get(axis, []), commit_order.get(axis, ()))
                    transitions.extend(_unlisted(t) if axis in blind else t for t in walked)
            for cell in sorted(by_combo, key=lambda c: (c.cell_id, c.machine)):
                if cell.evidence(signature) == "flaky":
                    flaky.append(_flaky(cell, scenario, signature, family))
            machines.extend(_machine_differences(scenario, signature, family, by_combo))
        answered[said] = (starts[0], len(transitions), starts[1], len(flaky), starts[2], len(machines))
    return Attribution(tuple(transitions), tuple(flaky), tuple(machines))


_Answer = TypeVar("_Answer", Transition, Flaky, MachineDifference)


def _renamed(found: _Answer, scenario: str) -> _Answer:
    """`found` for another test: `dataclasses.replace` without its checks, which took a second
    for the 165,000 answers of 2,000,000 outcomes (the fields are all set; only the name moves)."""
    twin = object.__new__(type(found))
    twin.__dict__.update(found.__dict__)
    object.__setattr__(twin, "scenario", scenario)
    return twin


def _what_rows_say(by_kid: Mapping[int, Sequence[Mapping[str, Any]]]) -> tuple[Any, ...]:
    """Every field of a test's rows that its answers read, cell by cell in order: two tests that
    say the same have the same transitions, flaky cells and machine differences but for their name."""
    return tuple((kid, tuple(map(_says, rows))) for kid, rows in by_kid.items())


def _says(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        row.get("run_id"), row.get("cell_id"), row["status"], row.get("signature"), row.get("signature_family"),
        row.get("flaky_signature"), row.get("flaky_across"), row.get("origin"),
    )  # fmt: skip


def _flaky(cell: _ScenarioCell, scenario: str, signature: str, family: str) -> Flaky:
    """A flaky cell: its repeats, and its runs where they disagree with each other rather than within one."""
    failed, _, repeats = cell.counts(signature)
    marked = cell.flaky_across(signature)
    if marked:  # the run that showed the other side counts as one more repeat
        failed, repeats = max(failed, 1), repeats + 1
    split = across_runs(cell.rows, lambda r: r["status"] in FAILURES and signature_of(r) == signature, marked)
    versions = tuple((a, cell.points[a].label()) for a in axis_sort(cell.points))
    runs_failed, runs_total = split or (0, 0)
    return Flaky(
        scenario,
        signature,
        cell.cell_id,
        versions,
        failed,
        repeats,
        family,
        tuple(sorted(cell.runs)),
        cell.machine.label(),
        runs_failed,
        runs_total,
        marked,
    )


def _number(
    facts: CellFacts,
    numbers: dict[tuple[Machine, tuple[tuple[str, Point], ...]], int],
    combos: list[dict[str, Point]],
    machines_of: list[Machine],
    sources: list[bool],
) -> int:
    """The number of a cell's combination of versions on its machine (-1 when it has none)."""
    found = facts.points
    if not found:
        return -1
    key = (facts.machine, tuple(sorted(found.items())))
    if key not in numbers:
        numbers[key] = len(combos)
        combos.append(dict(found))
        machines_of.append(facts.machine)
        sources.append(any(p.release is None for p in found.values()))
    return numbers[key]


def _lines_of(
    by_kid: Mapping[int, _ScenarioCell],
    axis: str,
    commits: Sequence[str],
    first_seen: Mapping[tuple[str, Point], str],
    shapes: dict[tuple[str, tuple[int, ...]], list[list[int]]],
) -> list[list[_ScenarioCell]]:
    """`_lines` of one scenario's cells. Most tests of a suite ran in the same cells, so the lines'
    shape (which cells, in which order) is worked out once per axis and set of cells and reused."""
    order = tuple(by_kid)
    shape = shapes.get((axis, order))
    if shape is None:
        number = {id(cell): kid for kid, cell in by_kid.items()}
        shape = shapes[(axis, order)] = [[number[id(c)] for c in line] for line in _lines(list(by_kid.values()), axis, commits, first_seen)]
    return [[by_kid[kid] for kid in line] for line in shape]


def _signatures(cells: list[_ScenarioCell]) -> list[tuple[str, str]]:
    """(signature, family) of every failure seen in these cells, sorted by signature."""
    families: dict[str, str] = {}
    for cell in cells:
        for row in cell.rows:
            if row["status"] in FAILURES:
                sig = signature_of(row)
                families[sig] = families.get(sig) or str(row.get("signature_family") or "")
    return sorted(families.items())


def _lines(
    cells: list[_ScenarioCell], axis: str, commits: Sequence[str], first_seen: Mapping[tuple[str, Point], str]
) -> list[list[_ScenarioCell]]:
    """Cells on one machine that differ only in `axis`, each group ordered along it; groups in a stable order."""
    groups: dict[tuple[Machine, tuple[tuple[str, Point], ...]], list[_ScenarioCell]] = defaultdict(list)
    for cell in cells:
        if axis in cell.points:
            groups[(cell.machine, tuple(sorted((a, p) for a, p in cell.points.items() if a != axis)))].append(cell)
    lines = [
        sorted(group, key=lambda c: order_key(c.points[axis], commits, first_seen.get((axis, c.points[axis]), "")))
        for group in groups.values()
    ]
    # Lines in the order of their machine and held versions (older first), so output reads like the matrix.
    lines.sort(key=lambda line: (line[0].machine, tuple((a, order_key(p)) for a, p in sorted(line[0].points.items()) if a != axis)))
    return [line for line in lines if len(line) > 1]


def _walk(
    scenario: str, signature: str, family: str, axis: str, line: list[_ScenarioCell], known: list[Version], commits: Sequence[str]
) -> list[Transition]:
    verdicts = [cell.evidence(signature) for cell in line]
    definite = [i for i, v in enumerate(verdicts) if v in ("has", "clean")]
    found = []
    for i, j in pairwise(definite):
        if verdicts[i] == verdicts[j]:
            continue
        old, new = line[i], line[j]
        held = tuple((a, old.points[a].label()) for a in axis_sort(old.points) if a != axis)
        found.append(
            Transition(
                scenario=scenario,
                signature=signature,
                axis=axis,
                kind="introduced" if verdicts[j] == "has" else "fixed",
                before=old.points[axis].label(),
                after=new.points[axis].label(),
                held=held,
                machine=old.machine.label(),
                not_built=not_built(old.points[axis], new.points[axis], [c.points[axis] for c in line], known, commits),
                inconclusive=tuple(f"{c.points[axis].label()} ({c.why_skipped(signature)})" for c in line[i + 1 : j]),
                signature_family=family,
                before_cell=old.cell_id,
                after_cell=new.cell_id,
                runs=tuple(sorted(old.runs | new.runs)),
                refined=old.refined or new.refined,
            )
        )
    return found


def _unlisted(t: Transition) -> Transition:
    """Between two releases of an axis whose index list is unknown, anything may lie."""
    if release(t.before) is None or release(t.after) is None or t.not_built:
        return t
    return replace(t, not_built=(UNLISTED,))


def not_built(before: Point, after: Point, tried: Sequence[Point], known: Sequence[Version], commits: Sequence[str]) -> tuple[str, ...]:
    """Known releases (or listed commits) strictly between `before` and `after` that this line never ran."""
    low, high = _public(before), _public(after)
    if low is not None:
        tried_releases = {_public(p) for p in tried} - {None}
        # `after` may be a git source: every release newer than `before` then lies between.
        # `known` is sorted and unique (`_known_releases`): the releases between are a slice, not a
        # scan (a suite's 13,695 transitions x hundreds of listed releases)
        start, end = bisect_right(known, low), (bisect_left(known, high) if high is not None else len(known))
        return tuple(str(v) for v in known[start:end] if v not in tried_releases)
    i, j = commit_index(before.commit, commits), commit_index(after.commit, commits)
    if i is None or j is None:
        return ()
    tried_commits = {commit_index(p.commit, commits) for p in tried}
    return tuple(commits[k][:12] for k in range(i + 1, j) if k not in tried_commits)


def _public(point: Point) -> Version | None:
    # 2.13.0 and 2.13.0+cpu are one release on the index: compare public versions
    return _public_release(point.release) if point.release is not None else None


@lru_cache(maxsize=4096)
def _public_release(version: Version) -> Version:
    """A release's public version, worked out once: a suite's 13,695 transitions ask for the same few hundred."""
    return Version(version.public)


def _known_releases(combos: Iterable[Mapping[str, Point]], given: Mapping[str, Iterable[str]]) -> dict[str, list[Version]]:
    """axis -> sorted public releases: those given, and every release any stored cell used on that axis."""
    known: dict[str, set[Version]] = defaultdict(set)
    for axis, values in given.items():
        for value in values:
            version = release(str(value))
            if version is not None and not version.is_prerelease and not version.is_devrelease:
                known[axis].add(Version(version.public))
    for found in combos:
        for axis, point in found.items():
            if point.release is not None:
                known[axis].add(Version(point.release.public))
    return {axis: sorted(versions) for axis, versions in known.items()}


def _machine_differences(scenario: str, signature: str, family: str, cells: list[_ScenarioCell]) -> list[MachineDifference]:
    """Pairs of cells on two machines, `has` on one and `clean` on the other, that no release explains.

    A pair counts when its versions are equal, or when the one axis that differs has, on each
    side, a value that never ran on the other side's machine (confounded with the machine).
    One finding per (machine that fails, machine that passes, axis, values).
    """
    if len({c.machine for c in cells}) < 2:
        return []
    values_on: dict[tuple[str, Point], set[Machine]] = defaultdict(set)
    for cell in cells:
        for axis, point in cell.points.items():
            values_on[(axis, point)].add(cell.machine)
    has = [c for c in cells if c.evidence(signature) == "has"]
    clean = [c for c in cells if c.evidence(signature) == "clean"]
    # The clean cells by the axes they have and their points but one: a failing cell is compared
    # only with those that differ from it in at most one axis (not with every clean cell: a
    # 100,000-outcome file has hundreds of each per signature), in `clean`'s order as before.
    near: dict[tuple[frozenset[str], str, tuple[tuple[str, Point], ...]], list[int]] = defaultdict(list)
    for i, good in enumerate(clean):
        for axis in good.points:
            near[_all_but(good, axis)].append(i)
    found: dict[tuple[Machine, Machine, str, str, str], MachineDifference] = {}
    for bad in has:
        for good in (clean[i] for i in sorted({i for axis in bad.points for i in near.get(_all_but(bad, axis), ())})):
            if bad.machine == good.machine or set(bad.points) != set(good.points):
                continue
            differ = [a for a in bad.points if bad.points[a] != good.points[a]]
            if len(differ) > 1:
                continue
            axis = differ[0] if differ else ""
            if axis and (good.machine in values_on[(axis, bad.points[axis])] or bad.machine in values_on[(axis, good.points[axis])]):
                continue  # the other machine ran this value too: a same-machine line can speak to it
            fails_with = bad.points[axis].label() if axis else ""
            passes_with = good.points[axis].label() if axis else ""
            key = (bad.machine, good.machine, axis, fails_with, passes_with)
            if key in found:
                continue
            held = tuple((a, bad.points[a].label()) for a in axis_sort(bad.points) if a != axis)
            found[key] = MachineDifference(
                scenario,
                signature,
                bad.machine.label(),
                good.machine.label(),
                axis,
                fails_with,
                passes_with,
                held,
                family,
                bad.cell_id,
                good.cell_id,
                tuple(sorted(bad.runs | good.runs)),
            )
    return [found[k] for k in sorted(found, key=lambda k: (k[0], k[1], k[2], k[3], k[4]))]


def _all_but(cell: _ScenarioCell, axis: str) -> tuple[frozenset[str], str, tuple[tuple[str, Point], ...]]:
    """A cell's axes, and its points on every axis but `axis`: equal for cells that differ in `axis` alone, or not at all."""
    return frozenset(cell.points), axis, tuple(sorted((a, p) for a, p in cell.points.items() if a != axis))


def seen_versions(rows: Iterable[Mapping[str, Any]], cells: Iterable[CellFacts] | None = None) -> dict[str, list[str]]:
    """axis -> every value the rows' cells used: pass it as `known_versions` when attributing a subset.
    cells: the rows' cells (`by_cell`'s keys), when the caller has them."""
    seen: dict[str, set[str]] = defaultdict(set)
    for facts in set(cells) if cells is not None else {cell_facts(row) for row in rows}:  # once per cell
        for axis, point in facts.points.items():
            seen[axis].add(point.value)
    return {axis: sorted(values) for axis, values in seen.items()}


# -- storage ---------------------------------------------------------------------------------
def to_rows(result: Attribution, scope: str = "") -> list[dict[str, Any]]:
    """Rows for the `transitions` table: one per transition, per machine difference (kind `machine`)
    and per flaky cell (kind `flaky`). scope: the run id the outcomes came from, "" for all runs."""
    rows = [{"scope": scope, **t.to_dict()} for t in result.transitions]
    rows += [{"scope": scope, **m.to_dict()} for m in result.machines]
    for f in result.flaky:
        rows.append(
            {
                "scope": scope,
                "scenario": f.scenario,
                "signature": f.signature,
                "signature_family": f.signature_family,
                "axis": "",
                "kind": "flaky",
                "before": "",
                "after": "",
                "untested": [],
                "inconclusive": [],
                "held": dict(f.versions),
                "machine": f.machine,
                "before_cell": f.cell_id,
                "after_cell": f.cell_id,
                "runs": list(f.runs),
                "how": "flaky",
                "description": f.describe(),
                "across_runs": f.across_runs,
            }
        )
    return rows


def to_columns(result: Attribution, scope: str = "") -> dict[str, list[Any]]:
    """`to_rows` by column (what `Store.replace_transition_columns` writes): the same values, a key
    a row lacks None, without a dict made per transition (78,000 at 2,000,000 outcomes: 0.5 s of
    `harness attribute`). A transition's lists are its own tuples, and its other axes one dict per
    tuple: the encoder meets the ones renamed tests share as the same objects (`_renamed`)."""
    moves = result.transitions
    held: dict[int, tuple[tuple[tuple[str, str], ...], dict[str, str]]] = {}

    def held_of(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
        found = held.get(id(pairs))
        if found is None or found[0] is not pairs:
            found = held[id(pairs)] = (pairs, dict(pairs))
        return found[1]

    columns: dict[str, list[Any]] = {
        "scope": [scope] * len(moves),
        "scenario": [t.scenario for t in moves],
        "signature": [t.signature for t in moves],
        "signature_family": [t.signature_family for t in moves],
        "axis": [t.axis for t in moves],
        "kind": [t.kind for t in moves],
        "before": [t.before for t in moves],
        "after": [t.after for t in moves],
        "untested": [t.not_built for t in moves],
        "inconclusive": [t.inconclusive for t in moves],
        "held": [held_of(t.held) for t in moves],
        "machine": [t.machine for t in moves],
        "other_machine": [None] * len(moves),
        "before_cell": [t.before_cell for t in moves],
        "after_cell": [t.after_cell for t in moves],
        "runs": [t.runs for t in moves],
        "how": [t.how for t in moves],
        "description": [t.describe() for t in moves],
    }
    others = to_rows(Attribution((), result.flaky, result.machines), scope)  # a few: as rows
    for name, values in columns.items():
        values.extend(r.get(name) for r in others)
    return columns


def headline_of(row: Mapping[str, Any]) -> str:
    """The one-phrase answer of a stored `transitions` row, whatever its kind."""
    kind = row.get("kind")
    if kind in ("introduced", "fixed"):
        return Transition.from_dict(row).headline()
    return str(row.get("description") or "")


def release_axes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Axes along which cells ran two or more releases: the only ones a range between releases can lie on."""
    return release_axes_of({cell_facts(row) for row in rows})


def release_axes_of(cells: Iterable[CellFacts]) -> list[str]:
    """`release_axes` of cells already read (`rows.cell_facts`)."""
    found: dict[str, set[str]] = {}
    for facts in cells:  # once per cell
        for axis, point in facts.points.items():
            if point.release is not None and facts.requested.get(axis) != "inherit":
                found.setdefault(axis, set()).add(point.value)
    return sorted(axis for axis, values in found.items() if len(values) > 1)


def unlisted_axes(rows: Iterable[Mapping[str, Any]], known: Mapping[str, Any]) -> list[str]:
    """Axes along which cells ran several releases that no run listed from the index (an offline
    runner's `no_index` sweep): a change along them is a range, never "in X", since a release
    between the two tested ones would be invisible."""
    return [axis for axis in release_axes(rows) if axis not in known]
