"""The Answers block, as data: transitions grouped per failure and answer, and answers inferred
from another line's exact answer. Pure; `harness summary` prints it and `harness publish` renders it.

Per failure (a scenario, or a suite's test file, and its signature), the lines of the matrix
that give the same answer on the same machine class are one group: "fixed in transformers
5.11.0 (after 5.10.4)" on 8 lines. A refinement that builds one line per failure
(`refine_lines = "first"`) leaves the other lines as ranges. Such a range is **inferred**, never
made exact, from an exact answer of the same failure, along the same axis, on the same machine
class, on another line: when that answer's two releases both lie within the range (its ends
agree: fails before, passes after), and every exact answer of that failure in the range names
the same two. It is printed under that answer, as lines where it was not built:

>>> from harness.analysis.attribution import Transition
>>> def t(before, after, acc, not_built=()):
...     return Transition("s", "sig", "transformers", "fixed", before, after, (("accelerate", acc),), "cpu", not_built=not_built)
>>> exact = t("5.10.4", "5.11.0", "1.13.0")
>>> wide = t("5.6.2", "5.23.0", "1.15.0", not_built=("5.10.4", "5.11.0", "5.12.0"))
>>> [(g.headline, len(g.members), len(g.inferred)) for g in answer_groups([exact, wide])[0][1]]
[('fixed in transformers 5.11.0 (after 5.10.4)', 1, 1)]

A range that spans two different exact answers, or whose inconclusive releases say nothing,
stays a range.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.analysis.attribution import Transition
from harness.analysis.rows import group_of


@dataclass(frozen=True)
class AnswerGroup:
    """One answer to one failure on one machine class: the lines that give it, and the lines
    (ranges) inferred from it."""

    headline: str
    machine: str
    members: tuple[Transition, ...]
    inferred: tuple[Transition, ...] = ()  # ranges on other lines that agree with this exact answer; not built there

    @property
    def kind(self) -> str:
        return self.members[0].kind

    @property
    def exact(self) -> bool:
        return self.members[0].exact

    @property
    def lines(self) -> int:
        return len({m.held for m in self.members})

    @property
    def tests(self) -> int:
        return len({m.scenario for m in self.members})

    @property
    def inferred_lines(self) -> int:
        return len({m.held for m in self.inferred})


def _family(t: Transition) -> tuple[str, str, str, str, str]:
    return (t.scenario, t.signature, t.axis, t.kind, t.machine)


def within(exact: Transition, span: Transition) -> bool:
    """`exact`'s two releases lie within `span`: its first release or one not built there, then one not built or its last."""
    return exact.before in (span.before, *span.not_built) and exact.after in (*span.not_built, span.after)


def _agrees(exact: Transition, span: Transition) -> bool:
    return within(exact, span) and exact.held != span.held


def inferred_source(span: Transition, exact: Iterable[Transition]) -> Transition | None:
    """The one answer among `exact` (of `span`'s failure, axis and machine, on other lines) that
    a range `span` is inferred from, or None: no range with an inconclusive release, and none
    whose exact answers within it disagree."""
    if span.exact or span.inconclusive or not span.not_built:
        return None
    agreeing = [e for e in exact if e.exact and within(e, span)]
    return agreeing[0] if agreeing and len({(e.before, e.after) for e in agreeing}) == 1 else None


def inferred_from(transitions: Iterable[Transition]) -> dict[int, Transition]:
    """id(range) -> the exact answer it is inferred from, for every range that agrees with exactly one answer."""
    exact: dict[tuple[str, str, str, str, str], list[Transition]] = defaultdict(list)
    ranges: list[Transition] = []
    for t in transitions:
        if t.exact:
            exact[_family(t)].append(t)
        elif t.not_built and not t.inconclusive:
            ranges.append(t)
    found: dict[int, Transition] = {}
    for span in ranges if exact else ():  # a suite's 78,000 ranges, most with no exact answer beside them
        beside = exact.get(_family(span))
        if not beside:
            continue
        source = inferred_source(span, [e for e in beside if e.held != span.held])
        if source is not None:
            found[id(span)] = source
    return found


def answer_groups(transitions: Sequence[Transition]) -> list[tuple[tuple[str, str], list[AnswerGroup]]]:
    """((file or scenario, signature), its answers) per failure, in the summary's order: failures
    by name; within one, exact answers before ranges, then by headline."""
    inferred = inferred_from(transitions)
    by_failure: dict[tuple[str, str], list[Transition]] = defaultdict(list)
    for t in transitions:
        by_failure[(group_of(t.scenario), t.signature)].append(t)
    out = []
    for key, items in sorted(by_failure.items()):
        said: dict[tuple[str, str], list[Transition]] = defaultdict(list)
        under: dict[tuple[str, str], list[Transition]] = defaultdict(list)
        for t in items:
            source = inferred.get(id(t))
            if source is None:
                said[(t.headline(), t.machine)].append(t)
            else:
                under[(source.headline(), source.machine)].append(t)
        groups = [AnswerGroup(h, m, tuple(members), tuple(under.get((h, m), ()))) for (h, m), members in said.items()]
        out.append((key, sorted(groups, key=lambda g: (" between " in g.headline, g.headline, g.machine))))
    return out
