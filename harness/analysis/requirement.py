"""Stated requirements: what two exact answers on two axes say together. Pure.

One failure (a scenario or a test, one signature) on one machine, exact on two axes:

- introduced in transformers 5.6.0 (after 5.5.4) on the line that holds peft 0.18.0, and
- fixed in peft 0.19.0 (after 0.18.1) on the line that holds transformers 5.8.0,

where each line lies on the other answer's failing side (peft 0.18.0 < 0.19.0, transformers
5.8.0 >= 5.6.0) and every other axis is held at the same version on both lines. The failure then
needs both sides at once, and what is missing is a requirement: "transformers>=5.6.0 needs
peft>=0.19.0". A failure fixed by either of two libraries (accelerate 1.14.0 with bitsandbytes
0.49.2 held, bitsandbytes 0.50.0 with accelerate 1.13.0 held) gives "accelerate<1.14.0 needs
bitsandbytes>=0.50.0": the side named first is an introduction where there is one, else the
library the signature blames, else the first in reading order.

Never stronger than what was built: a range on either axis gives none, and so does a line
whose failing side another answer bounds with a range (fixed again, somewhere after).

>>> from harness.analysis.attribution import Transition
>>> came = Transition("t", "ImportError: x @ transformers/integrations/peft.py:load_adapter", "transformers", "introduced",
...                   "5.5.4", "5.6.0", (("peft", "0.18.0"),), "cpu", before_cell="a", after_cell="b")
>>> went = Transition("t", came.signature, "peft", "fixed", "0.18.1", "0.19.0", (("transformers", "5.8.0"),), "cpu",
...                   before_cell="c", after_cell="d")
>>> [r.text() for r in requirements([came, went])]
['transformers>=5.6.0 needs peft>=0.19.0']
>>> requirements([came, Transition(**{**went.__dict__, "not_built": ("0.18.2",)})])  # a range: nothing stated
[]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.analysis.attribution import Transition, held_text
from harness.analysis.rows import AXIS_ORDER
from harness.analysis.versions import version_key


@dataclass(frozen=True)
class Side:
    """Where a failure lies along one axis of its line: `transformers>=5.6.0`, `peft<0.19.0`, `>=5.6.0,<5.9.0`."""

    axis: str
    specifier: str

    def text(self) -> str:
        return f"{self.axis}{self.specifier}"

    def contains(self, version: str) -> bool:
        try:
            return SpecifierSet(self.specifier).contains(Version(version), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            return False  # a git source is on no side of a release

    def negated(self) -> Side | None:
        """The other side, where it is one specifier: `<5.6.0` for `>=5.6.0`; None for an interval."""
        if "," in self.specifier:
            return None
        if self.specifier.startswith(">="):
            return Side(self.axis, "<" + self.specifier[2:])
        return Side(self.axis, ">=" + self.specifier[1:])


@dataclass(frozen=True)
class Evidence:
    """One pair of lines behind a requirement: the answer on the `when` axis and the one on the `needs` axis."""

    when: Transition
    needs: Transition

    def cells(self) -> list[tuple[str, str]]:
        """(cell id, `passes`/`fails`) of the four cells the two answers compare."""
        out = []
        for t in (self.when, self.needs):
            old, new = ("fails", "passes") if t.kind == "fixed" else ("passes", "fails")
            out += [(t.before_cell, old), (t.after_cell, new)]
        return [(cell, word) for cell, word in out if cell]


@dataclass(frozen=True)
class StatedRequirement:
    """`transformers>=5.6.0 needs peft>=0.19.0`, for one failure on one machine, with the lines that show it."""

    signature: str
    machine: str
    when: Side
    needs: Side
    scenarios: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    signature_family: str = ""

    def text(self) -> str:
        return f"{self.when.text()} needs {self.needs.text()}"

    def otherwise(self) -> str:
        """The constraint that avoids it from the other side (`transformers<5.6.0`), or "" for an interval."""
        other = self.when.negated()
        return other.text() if other else ""

    def cells(self) -> list[tuple[str, str]]:
        """Every cell that shows it, once, with what the failure did there."""
        return list(dict.fromkeys(c for e in self.evidence for c in e.cells()))

    def lines(self) -> list[str]:
        """One line per answer behind it: `introduced in transformers 5.6.0 (after 5.5.4) with torch 2.13.0, peft 0.18.0 held`."""
        out = []
        for pair in self.evidence:
            for t in (pair.when, pair.needs):
                out.append(f"{t.headline()} with {held_text(t.held)} held" if t.held else t.headline())
        return list(dict.fromkeys(out))

    def describe(self) -> str:
        """One line: the requirement, the two answers of the first pair of lines, the machine."""
        first = self.evidence[0]
        return (
            f"{self.text()}: {first.when.headline()} with {self.needs.axis} {dict(first.when.held).get(self.needs.axis, '')} held, "
            f"{first.needs.headline()} with {self.when.axis} {dict(first.needs.held).get(self.when.axis, '')} held"
            + (f" on {self.machine}" if self.machine else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "requirement",
            "requirement": self.text(),
            "when": {"axis": self.when.axis, "specifier": self.when.specifier},
            "needs": {"axis": self.needs.axis, "specifier": self.needs.specifier},
            "otherwise": self.otherwise(),
            "signature": self.signature,
            "signature_family": self.signature_family,
            "scenarios": list(self.scenarios),
            "machine": self.machine,
            "cells": [{"cell_id": cell, "failure": word} for cell, word in self.cells()],
            "evidence": [{"when": pair.when.to_dict(), "needs": pair.needs.to_dict()} for pair in self.evidence],
            "description": self.describe(),
        }


# -- the search --------------------------------------------------------------------------------
def requirements(transitions: Iterable[Transition | Mapping[str, Any]]) -> list[StatedRequirement]:
    """Every requirement two exact answers of one failure on one machine state, most scenarios first."""
    moves = [t if isinstance(t, Transition) else Transition.from_dict(t) for t in transitions]
    moves = [t for t in moves if t.kind in ("introduced", "fixed")]
    # only a line that holds an exact answer states one, and a line is one test's: the others' lines
    # are never read (a suite's 78,000 ranges took 0.16 s of the published page for none)
    stating = {t.scenario for t in moves if t.exact}
    moves = [t for t in moves if t.scenario in stating]
    lines: dict[tuple[Any, ...], list[Transition]] = defaultdict(list)
    for t in moves:
        lines[_line(t)].append(t)
    failures: dict[tuple[str, str, str], list[tuple[Transition, Side]]] = defaultdict(list)
    for t in moves:
        side = _side(t, lines[_line(t)]) if t.exact else None
        if side is not None:
            failures[(t.scenario, t.signature, t.machine)].append((t, side))
    found: dict[tuple[str, str, Side, Side], list[tuple[str, Evidence]]] = defaultdict(list)
    for (scenario, signature, machine), answers in failures.items():
        for (a, side_a), (b, side_b) in combinations(answers, 2):
            pair = _pair(a, side_a, b, side_b)
            if pair is not None:
                when, needs, evidence = pair
                found[(signature, machine, when, needs)].append((scenario, evidence))
    out = []
    for (signature, machine, when, needs), members in found.items():
        scenarios = tuple(dict.fromkeys(s for s, _ in members))
        pairs = tuple(dict.fromkeys(e for _, e in members))
        family = next((e.when.signature_family for e in pairs if e.when.signature_family), "")
        out.append(StatedRequirement(signature, machine, when, needs, scenarios, pairs, family))
    return sorted(out, key=lambda r: (-len(r.scenarios), r.signature, r.machine, r.text()))


def of_signature(found: Sequence[StatedRequirement], signature: str) -> list[StatedRequirement]:
    return [r for r in found if r.signature == signature]


def _line(t: Transition) -> tuple[Any, ...]:
    return (t.scenario, t.signature, t.machine, t.axis, t.held)


def _side(t: Transition, line: Sequence[Transition]) -> Side | None:
    """Where the failure lies on `t`'s line along its axis; None where another answer bounds it with a range."""
    if _release(t.after) is None or _release(t.before) is None:
        return None  # a commit or a source: no specifier can say it
    if t.kind == "introduced":
        later = [o for o in line if o.kind == "fixed" and version_key(o.before) >= version_key(t.after)]
        bound = min(later, key=lambda o: version_key(o.after), default=None)
        if bound is None:
            return Side(t.axis, f">={t.after}")
        return Side(t.axis, f">={t.after},<{bound.after}") if bound.exact and _release(bound.after) else None
    earlier = [o for o in line if o.kind == "introduced" and version_key(o.after) <= version_key(t.before)]
    bound = max(earlier, key=lambda o: version_key(o.after), default=None)
    if bound is None:
        return Side(t.axis, f"<{t.after}")
    return Side(t.axis, f">={bound.after},<{t.after}") if bound.exact and _release(bound.after) else None


def _release(value: str) -> Version | None:
    try:
        return Version(value)
    except InvalidVersion:
        return None


def _pair(a: Transition, side_a: Side, b: Transition, side_b: Side) -> tuple[Side, Side, Evidence] | None:
    """(when, needs, evidence) where the answers on two axes describe one failing corner; else None."""
    if a.axis == b.axis:
        return None
    held_a, held_b = dict(a.held), dict(b.held)
    if b.axis not in held_a or a.axis not in held_b:
        return None
    # Every other axis held alike, and each line on the other's failing side: one corner of the matrix.
    if {k: v for k, v in held_a.items() if k != b.axis} != {k: v for k, v in held_b.items() if k != a.axis}:
        return None
    if not (side_a.contains(held_b[a.axis]) and side_b.contains(held_a[b.axis])):
        return None
    first, second = _order((a, side_a), (b, side_b))
    needs = second[1].negated()
    if needs is None:
        needs_first = first[1].negated()
        if needs_first is None:
            return None  # two intervals: no one specifier says it
        first, second, needs = second, first, needs_first
    return first[1], needs, Evidence(first[0], second[0])


def _order(a: tuple[Transition, Side], b: tuple[Transition, Side]) -> tuple[tuple[Transition, Side], tuple[Transition, Side]]:
    """Which answer's side reads first (`when`): an introduction, else the blamed library, else reading order."""
    if a[0].kind != b[0].kind:
        return (a, b) if a[0].kind == "introduced" else (b, a)
    blamed = a[0].signature.rsplit(" @ ", 1)[1].split("/", 1)[0] if " @ " in a[0].signature else ""
    if blamed in (a[0].axis, b[0].axis):
        return (a, b) if a[0].axis == blamed else (b, a)

    def rank(axis: str) -> tuple[int, str]:
        return (AXIS_ORDER.index(axis) if axis in AXIS_ORDER else len(AXIS_ORDER), axis)

    return (a, b) if rank(a[0].axis) <= rank(b[0].axis) else (b, a)


def as_constraints(found: Sequence[StatedRequirement]) -> str:
    """pip constraints to paste into your own: for each requirement its `needs` side, why, and the other side that would do.

    >>> from harness.analysis.attribution import Transition
    >>> sig = "ImportError: x @ transformers/integrations/peft.py:load_adapter"
    >>> came = Transition("t", sig, "transformers", "introduced", "5.5.4", "5.6.0", (("peft", "0.18.0"),), "cpu")
    >>> went = Transition("t", sig, "peft", "fixed", "0.18.1", "0.19.0", (("transformers", "5.8.0"),), "cpu")
    >>> print(as_constraints(requirements([came, went])).splitlines()[-1])
    peft>=0.19.0
    """
    if not found:
        return "# no requirement stated: no failure has exact answers on two libraries on this machine\n"
    lines = [
        "# What the results state: each failure below needs both sides of its requirement at once, so each line keeps",
        "# one away. Paste them into your constraints (pip install -c …); the comments say why, and what would do instead.",
    ]
    for req in found:
        shown = ", ".join(req.scenarios[:3]) + (f" and {len(req.scenarios) - 3} more" if len(req.scenarios) > 3 else "")
        where = f" on {req.machine}" if req.machine else ""
        lines += ["", f"# {req.text()}: {shown} fails otherwise{where}", f"#   {req.signature}"]
        lines += [f"#   {line}" for line in req.lines()]
        other = req.needs.negated()
        if req.otherwise() and other is not None:
            lines.append(f"#   or, to keep {other.text()}: {req.otherwise()}")
        lines.append(req.needs.text())
    return "\n".join(lines) + "\n"
