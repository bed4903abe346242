"""The lines of a matrix, what a wheelhouse holds for them, and how a trip's answers on them were reached. Pure.

A *line* is the cells that differ in one axis with every other axis held. Attribution reads a
change between two neighbouring cells of a line; refinement builds the releases between them
on that line. So an offline runner's wheelhouse must hold those releases for every line the
cells make, wherever the cells come from: the product of `[axes]`, an `[[include]]` entry (a
line with every cell it differs from in one axis), or the two cells on either side of an
`[[exclude]]` hole (a line that skips the excluded release).

- `ranges`: every pair of neighbouring releases on a line, with the index's releases between.
- `holding_order`: those releases in the order a size budget takes them (a bisection level of
  every range at a time), each with the lines it may be built on.
- `Holding`: what a wheelhouse did with each (held, left out when the budget ran out, could not
  be held), as its manifest records it; `shortfalls` says which lines it left out.
- `account`: after the trip, per line, how each answer was reached (exact; a range because the
  wheelhouse did not hold the releases between; because the budget ran out; ...) and whether a
  second trip can help.

>>> cells = {"a1": {"a": "1.0", "b": "1"}, "a3": {"a": "3.0", "b": "1"}, "b2": {"a": "1.0", "b": "2"}}
>>> [r.line() for r in ranges(cells, {"a": ["1.0", "2.0", "2.1", "3.0"]})]
['a 1.0 → 3.0 with b 1', 'b 1 → 2 with a 1.0']
>>> [(h.axis, h.value, h.depth) for h in holding_order(ranges(cells, {"a": ["1.0", "2.0", "2.1", "3.0"]}))]
[('a', '2.1', 0), ('a', '2.0', 1)]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.version import Version

from harness.analysis.attribution import UNLISTED, Transition, held_text
from harness.analysis.refine import levels
from harness.analysis.versions import release

#: A cell as the matrix asked for it: axis -> a release, "inherit", a git URL or a path.
Values = Mapping[str, str]
#: One release of one axis: (axis, release).
Key = tuple[str, str]


@dataclass(frozen=True)
class Range:
    """Two neighbouring releases on one line of the matrix, and the index's releases between them."""

    axis: str
    low: str
    high: str
    held: tuple[tuple[str, str], ...]  # the other axes, in the cells' order
    low_cell: str  # the cell at the lower end: refinement builds its probes on this line from it
    between: tuple[str, ...] = ()  # oldest first

    def line(self) -> str:
        """`accelerate 1.13.0 → 1.15.0 with transformers 5.23.0, bitsandbytes 0.49.2`."""
        return f"{self.axis} {self.low} → {self.high}" + (f" with {held_text(self.held)}" if self.held else "")

    def to_dict(self) -> dict[str, Any]:
        return {"axis": self.axis, "low": self.low, "high": self.high, "held": dict(self.held), "between": list(self.between)}


def _public(value: str) -> Version | None:
    """2.13.0+cpu and 2.13.0 are one release on the index."""
    found = release(value)
    return Version(found.public) if found is not None else None


def ranges(cells: Mapping[str, Values], known: Mapping[str, Sequence[str]] | None = None) -> list[Range]:
    """Every pair of neighbouring releases on a line of `cells` (cell id -> its values), with the
    releases of `known` (axis -> the index's releases) strictly between them: by axis in the cells'
    order, lines in the order of their first cell. A git, path or inherited value is no release
    and ends no range; an axis `known` does not name gets no releases between."""
    known = known or {}
    found: list[Range] = []
    axes = list(dict.fromkeys(axis for values in cells.values() for axis in values))
    for axis in axes:
        lines: dict[tuple[tuple[str, str], ...], dict[Version, tuple[str, str]]] = {}
        for cell_id, values in cells.items():
            version = _public(values.get(axis, ""))
            if version is None:
                continue
            held = tuple((a, v) for a, v in values.items() if a != axis)
            lines.setdefault(held, {}).setdefault(version, (values[axis], cell_id))
        listed = sorted({v for text in known.get(axis, ()) if (v := _public(text)) is not None})
        for held, points in lines.items():
            for low, high in itertools.pairwise(sorted(points)):
                between = tuple(str(v) for v in listed if low < v < high)
                found.append(Range(axis, points[low][0], points[high][0], held, points[low][1], between))
    return found


@dataclass(frozen=True)
class Hold:
    """One release between tested ones, with every range (line) it lies between on, and its bisection depth (0: first)."""

    axis: str
    value: str
    depth: int
    ranges: tuple[Range, ...]


def holding_order(found: Sequence[Range]) -> list[Hold]:
    """The releases between, each once per axis, in the order a size budget takes them: every
    range's first bisection level, then every range's second, and so on (ranges in matrix order
    within a level), so that a smaller budget still narrows every range. A release between on
    several lines is taken at its earliest level, for all of them at once: an offline runner
    builds a release it holds on any line it needs."""
    depth: dict[Key, int] = {}
    lines: dict[Key, list[Range]] = {}
    for span in found:
        for level, values in enumerate(levels(span.between)):
            for value in values:
                key = (span.axis, value)
                depth[key] = min(depth.get(key, level), level)
                lines.setdefault(key, []).append(span)
    order = sorted(lines, key=lambda key: depth[key])  # stable: first appearance within a level
    return [Hold(axis, value, depth[(axis, value)], tuple(lines[(axis, value)])) for axis, value in order]


def round_up(mib: float) -> float:
    """A budget that holds `mib`: rounded up to two significant digits.

    >>> round_up(328.7), round_up(0.253), round_up(1234.0)
    (330.0, 0.26, 1300.0)
    """
    if mib <= 0:
        return 0.0
    step = 10.0 ** (int(f"{mib:e}".split("e")[1]) - 1)  # a unit of the second significant digit
    units = round(mib / step, 6)  # float noise: 41.0000000001 units are 41
    return float(f"{(int(units) + (units > int(units))) * step:.6g}")


@dataclass
class Holding:
    """What a wheelhouse did with each release between tested ones, as its manifest
    (`harness-wheelhouse.json`, key "refinement") records it."""

    held: set[Key] = field(default_factory=set)
    #: left out once the budget ran out: the MiB each would have added (None: not measured)
    left_out: dict[Key, float | None] = field(default_factory=dict)
    #: could not be held whatever the budget, and why (no probe cell resolves, no wheel for the platform)
    unbuildable: dict[Key, str] = field(default_factory=dict)
    listed: set[str] = field(default_factory=set)  # axes whose release lists it carries
    ranges: list[Range] = field(default_factory=list)
    budget_mib: float = 0.0
    mib: float = 0.0  # what the held releases' wheels weigh

    def to_hold_all(self) -> float | None:
        """A budget that would hold every release left out (None: some were not measured)."""
        extra = list(self.left_out.values())
        if any(m is None for m in extra):
            return None
        # 2 % over: the same wheels weigh the same, but a release may come out between two runs
        return round_up((self.mib + sum(m or 0.0 for m in extra)) * 1.02)

    def to_manifest(self) -> dict[str, Any]:
        return {
            "held": sorted(self.held),
            "left_out": [[a, v, None if m is None else round(m, 3)] for (a, v), m in self.left_out.items()],
            "unbuildable": [[a, v, why] for (a, v), why in self.unbuildable.items()],
            "listed": sorted(self.listed),
            "lines": [r.to_dict() for r in self.ranges],
            "budget_mib": self.budget_mib,
            "mib": round(self.mib, 3),
            "to_hold_all": self.to_hold_all(),
        }

    @classmethod
    def from_manifest(cls, data: Mapping[str, Any]) -> Holding:
        """From a manifest's "refinement" (an older wheelhouse's has only held, left_out and mib)."""
        left: dict[Key, float | None] = {}
        for item in data.get("left_out") or []:
            left[(str(item[0]), str(item[1]))] = float(item[2]) if len(item) > 2 and item[2] is not None else None
        lines = [
            Range(
                str(r["axis"]),
                str(r["low"]),
                str(r["high"]),
                tuple((str(a), str(v)) for a, v in dict(r.get("held") or {}).items()),
                "",
                tuple(map(str, r.get("between") or ())),
            )
            for r in data.get("lines") or []
        ]
        return cls(
            held={(str(a), str(v)) for a, v, *_ in data.get("held") or []},
            left_out=left,
            unbuildable={(str(a), str(v)): str(why) for a, v, why in data.get("unbuildable") or []},
            listed={str(a) for a in data.get("listed") or []} or {r.axis for r in lines},
            ranges=lines,
            budget_mib=float(data.get("budget_mib") or 0.0),
            mib=float(data.get("mib") or 0.0),
        )


@dataclass(frozen=True)
class Shortfall:
    """A line whose releases between the wheelhouse does not all hold."""

    range: Range
    left_out: tuple[str, ...]  # the budget ran out before them
    mib: float | None  # what they would add (None: not all measured)
    unbuildable: tuple[tuple[str, str], ...]  # (release, why): not held whatever the budget

    def text(self) -> str:
        r = self.range
        parts = []
        if self.left_out:
            size = f", {self.mib:.3g} MiB" if self.mib is not None else ", size not measured"
            parts.append(f"{len(self.left_out)} of {len(r.between)} release(s) between not held ({_shown(self.left_out)}){size}")
        if self.unbuildable:
            parts.append("cannot hold " + "; ".join(f"{v} ({why})" for v, why in self.unbuildable))
        return f"{r.line()}: {'; '.join(parts)}"


def _shown(values: Sequence[str], most: int = 4) -> str:
    return ", ".join(values[:most]) + (", …" if len(values) > most else "")


def shortfalls(holding: Holding) -> list[Shortfall]:
    """The lines the wheelhouse left out, in part or whole: which releases between, and by how many MiB."""
    found = []
    for r in holding.ranges:
        left = tuple(v for v in r.between if (r.axis, v) in holding.left_out)
        cannot = tuple((v, holding.unbuildable[(r.axis, v)]) for v in r.between if (r.axis, v) in holding.unbuildable)
        if not left and not cannot:
            continue
        sizes = [holding.left_out[(r.axis, v)] for v in left]
        mib = None if any(s is None for s in sizes) else sum(s or 0.0 for s in sizes)
        found.append(Shortfall(r, left, mib, cannot))
    return found


# -- the trip's account ----------------------------------------------------------------------
Reached = Literal["exact", "budget", "not held", "not built", "cannot"]
#: How each way of reaching an answer reads, and whether another trip can make it exact.
WORDS: dict[Reached, tuple[str, bool]] = {
    "exact": ("exact", False),
    "budget": ("a range: the budget ran out", True),
    "not held": ("a range: the wheelhouse did not hold the releases between", True),
    "not built": ("a range: the wheelhouse holds the releases between, refinement did not build them", True),
    "cannot": ("a range no build can narrow", False),
}


@dataclass(frozen=True)
class Reaching:
    """How one answer on one line was reached, and what would make it exact."""

    transition: Transition
    reached: Reached
    detail: str = ""  # which releases, and the next step

    @property
    def second_trip_helps(self) -> bool:
        return WORDS[self.reached][1]

    def text(self) -> str:
        t = self.transition
        head = f"{WORDS[self.reached][0]}: {t.scenario}: {t.headline()}"
        return head + (f" ({self.detail})" if self.detail else "")


def reached(t: Transition, holding: Holding | None) -> Reaching:
    """How `t` was reached on a runner whose wheelhouse did `holding` (None: it records no refinement)."""
    if t.exact:
        return Reaching(t, "exact")
    if release(t.before) is None or release(t.after) is None:  # a wheelhouse holds releases between releases only
        return Reaching(t, "cannot", "an end is a git or path source: `harness bisect --git` walks its commits")
    if UNLISTED in t.not_built:
        return Reaching(t, "not held", f"it carried no release list of {t.axis}: make it with --refine-budget from this matrix")
    missing = [v for v in t.not_built if release(v) is not None]
    if holding is None:
        holding = Holding()  # nothing held, nothing left out by a budget: every release between is "not held"
    sorts: dict[Reached, list[str]] = {"budget": [], "not held": [], "not built": [], "cannot": []}
    for value in missing:
        key = (t.axis, value)
        where: Reached = (
            "budget"
            if key in holding.left_out
            else "not built"
            if key in holding.held
            else "cannot"
            if key in holding.unbuildable
            else "not held"
        )
        sorts[where].append(value)
    notes = [note for kind, values in sorts.items() if values and (note := _note(kind, t.axis, values, holding))]
    notes += [f"inconclusive: {', '.join(t.inconclusive)}"] if t.inconclusive else []
    kind: Reached = next((k for k in ("budget", "not held", "not built") if sorts[k]), "cannot")
    return Reaching(t, kind, "; ".join(notes))


def _note(kind: Reached, axis: str, values: Sequence[str], holding: Holding) -> str:
    """What the releases of one sort are, and the step that builds them."""
    if kind == "budget":
        sizes = [holding.left_out[(axis, v)] for v in values]
        size = f", {sum(s or 0.0 for s in sizes):.3g} MiB" if all(s is not None for s in sizes) else ""
        whole = holding.to_hold_all()
        return f"left out by the budget: {_shown(values)}{size}" + (f"; --refine-budget {whole:g} holds every line" if whole else "")
    if kind == "not held":
        return f"not held: {_shown(values)}" + (
            "" if holding.ranges else " (the wheelhouse records no refinement: make it with --refine-budget)"
        )
    if kind == "not built":
        return f"held, not built: {_shown(values)} (rerun the sweep with the same wheelhouse: it resumes)"
    return "; ".join(f"{v}: {holding.unbuildable[(axis, v)]}" for v in values)


@dataclass(frozen=True)
class LineAccount:
    """One line of the matrix (machine, axis, the other axes held) and how each answer on it was reached."""

    machine: str
    axis: str
    held: tuple[tuple[str, str], ...]
    answers: tuple[Reaching, ...]

    def title(self) -> str:
        return f"{self.axis}" + (f", with {held_text(self.held)}" if self.held else "")

    @property
    def exact(self) -> bool:
        return all(a.reached == "exact" for a in self.answers)

    @property
    def second_trip_helps(self) -> bool:
        return any(a.second_trip_helps for a in self.answers)


def account(transitions: Iterable[Transition], holding: Holding | None) -> list[LineAccount]:
    """Per line (in the order the answers name them), how each answer was reached."""
    by_line: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Reaching]] = {}
    for t in transitions:
        by_line.setdefault((t.machine, t.axis, t.held), []).append(reached(t, holding))
    return [LineAccount(machine, axis, held, tuple(found)) for (machine, axis, held), found in by_line.items()]


def account_text(lines: Sequence[LineAccount]) -> list[str]:
    """The trip's closing lines: a count, then each line of the matrix and its answers."""
    if not lines:
        return ["account: no answer on any line (no failure changes along an axis with the others held)"]
    machines = sorted({line.machine for line in lines})
    exact = sum(line.exact for line in lines)
    helps = sum(line.second_trip_helps for line in lines)
    where = f" on {machines[0]}" if len(machines) == 1 and machines[0] else ""
    head = f"account{where}: {len(lines)} line(s) of the matrix with an answer: {exact} exact, {len(lines) - exact} with a range"
    head += f"; a second trip can help on {helps}" if helps else ("; no second trip can narrow them" if exact < len(lines) else "")
    out = [head]
    for line in lines:
        out.append(f"  {line.title()}" + (f" on {line.machine}" if len(machines) > 1 else "") + ":")
        out += [f"    {a.text()}" for a in line.answers]
    return out
