"""What a results file answers, computed one way for every face. Pure.

Every face (the CLI's commands, the summary, the report, the pin, the watch, refinement's
rounds and the dashboard) reads a results file through `harness.workflows.answering.answer`, which
hands the rows it read and the releases the index listed to `answer_rows` here. An `Answer`
holds:

- the **transitions**: every failure's introducing and fixing releases, attributed with the
  releases the index listed *and* the axes whose list nobody had (`attribution.unlisted_axes`):
  a change between two of their releases is a range, never "in X";
- the **refinement state**: on which machines the answers hold (`machines_of`), the machine
  a run ran on (`machine_label`), and the ranges a build could narrow there (`open_ranges`);
- the **machine classes** the rows ran on, and the **known-good set** of each.

Everything is computed when first asked for, so a face that prints the rows only (`--json`)
attributes nothing. `narrowed` answers about a part of the rows (a failure's scenarios, a cell
and its neighbours) with every version the whole read ran counted as known.

>>> rows = [
...     {"scenario": "load", "status": s, "signature": sig, "repeat": 0, "cell_id": c, "run_id": "r", "gpu": "cpu",
...      "platform": "linux-x86_64", "python": "3.11", "versions": {"torch": "2.13.0", "accelerate": acc}}
...     for c, acc, s, sig in [("a", "1.13.0", "error", "TypeError: x"), ("b", "1.15.0", "pass", "")]
... ]
>>> answer_rows(rows, {"accelerate": ["1.13.0", "1.14.0", "1.15.0"]}).transitions[0].headline()
'fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0'
>>> print(answer_rows(rows, {}).transitions[0].headline())  # nobody listed accelerate's releases: a range
fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: any release between (the index's releases were not listed)
>>> answer_rows(rows, {}).machine_classes
['cpu']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from harness.analysis.attribution import (
    REFINED,
    Attribution,
    Flaky,
    MachineDifference,
    Transition,
    attribute,
    release_axes_of,
    seen_versions,
    to_columns,
    to_rows,
)
from harness.analysis.knowngood import KnownGoodSet, known_good_sets, with_quiet
from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet, weight
from harness.analysis.refine import Buildable, open_ranges
from harness.analysis.rows import CellFacts, by_cell, machine_of

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Answer:
    """The answers of a results file (or of one run, or of one machine's rows); see the module docstring."""

    rows: Sequence[Row]  # every row read
    releases: Mapping[str, Sequence[str]]  # axis -> every release the index listed (stored with the runs)
    about: Sequence[Row] | None = field(default=None, repr=False)  # the rows the answers are about (None: all)
    #: The quiet tests the rows hold as one stand-in (`analysis.quiet`; none: every test has its rows).
    quiet: Quiet = field(default=NO_QUIET, repr=False)

    # -- the transitions ---------------------------------------------------------------------------
    @cached_property
    def cells(self) -> dict[CellFacts, list[Row]]:
        """The rows by cell (`rows.by_cell`): read once, for every answer below."""
        return by_cell(self.rows)

    @cached_property
    def unlisted(self) -> tuple[str, ...]:
        """Axes along which the rows ran several releases that no run listed from the index."""
        return tuple(axis for axis in release_axes_of(self.cells) if axis not in self.releases)  # `unlisted_axes`

    @cached_property
    def attribution(self) -> Attribution:
        if self.about is None:
            return attribute(self.rows, known_versions=self.releases, unlisted=self.unlisted, cells=self.cells)
        # A gap on one line may be tested on another: every version the read ran is known.
        seen = seen_versions(self.rows, self.cells)  # the cells read already
        known = {axis: [*seen.get(axis, []), *self.releases.get(axis, [])] for axis in {*seen, *self.releases}}
        return attribute(self.about, known_versions=known, unlisted=self.unlisted)

    @cached_property
    def scenarios(self) -> frozenset[str]:
        """Every scenario (or test) the rows hold, each quiet one by name (`analysis.quiet`)."""
        names = {str(r["scenario"]) for r in self.rows}
        return frozenset((names - {STAND_IN}) | set(self.quiet.tests) if self.quiet else names)

    @property
    def transitions(self) -> tuple[Transition, ...]:
        return self.attribution.transitions

    @property
    def flaky(self) -> tuple[Flaky, ...]:
        return self.attribution.flaky

    @property
    def machine_differences(self) -> tuple[MachineDifference, ...]:
        return self.attribution.machines

    @property
    def attributed(self) -> int:
        """How many outcomes the answers are about (a stand-in row counts as those it stands for)."""
        return sum(map(weight, self.rows if self.about is None else self.about))

    def narrowed(self, rows: Iterable[Row]) -> Answer:
        """The answers about `rows` (a part of this read), every version the read ran counted as known."""
        return replace(self, about=list(rows))

    def relisted(self, releases: Mapping[str, Sequence[str]]) -> Answer:
        """The same rows with the releases the index lists now."""
        return replace(self, releases=releases)

    def to_rows(self, scope: str = "") -> list[dict[str, Any]]:
        """Rows shaped like the `transitions` table (what `harness attribute` stores)."""
        return to_rows(self.attribution, scope)

    def to_columns(self, scope: str = "") -> dict[str, list[Any]]:
        """`to_rows` by column, as `harness attribute` writes them."""
        return to_columns(self.attribution, scope)

    def summary_rows(self) -> list[dict[str, Any]]:
        """Per signature, one row per distinct answer (kind, axis, both ends, what lies between,
        machine, the machine a difference passes on) with how many lines of the matrix gave it:
        `attributed.transition_answer_groups`' shape,
        computed fresh instead of read from what `harness attribute` stored."""
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in self.to_rows():
            key = (
                row["signature"],
                row["kind"],
                row["axis"],
                row["before"],
                row["after"],
                tuple(row["untested"]),
                tuple(row["inconclusive"]),
                row.get("machine") or "",
                row.get("other_machine") or "",
            )
            found = groups.setdefault(
                key,
                {
                    "signature": row["signature"],
                    "kind": row["kind"],
                    "axis": row["axis"],
                    "before": row["before"],
                    "after": row["after"],
                    "untested": list(row["untested"]),
                    "inconclusive": list(row["inconclusive"]),
                    "machine": row.get("machine") or "",
                    "other_machine": row.get("other_machine") or "",
                    "description": row["description"],
                    "lines": 0,
                },
            )
            found["lines"] += 1
        return [groups[k] for k in sorted(groups, key=lambda k: k[:5])]

    # -- refinement state ----------------------------------------------------------------------------
    def machines_of(self, prefix: str = "") -> list[str]:
        """The machine labels the answers hold on (those starting with `prefix`: this machine's)."""
        return sorted({t.machine for t in self.transitions if t.machine and t.machine.startswith(prefix)})

    def machine_label(self) -> str:
        """The machine the rows ran on, when they ran on one (a sweep's run does); else ""."""
        labels = {machine_of(r).label() for r in self.rows}
        return sorted(labels)[0] if len(labels) == 1 else ""

    def open_ranges(self, machine: str, buildable: Buildable | None = None) -> list[Transition]:
        """The answers on `machine` that are ranges a build could narrow."""
        return [r.transition for r in open_ranges(self.transitions, machine, buildable)]

    @property
    def probe_cells(self) -> int:
        """Cells that refinement built to narrow a range (`origin` refine)."""
        return len({r["cell_id"] for r in self.rows if r.get("origin") == REFINED})

    # -- machine classes and the known-good set --------------------------------------------------------
    @cached_property
    def machine_classes(self) -> list[str]:
        """The machine classes the rows ran on: `cpu` first, then the GPU classes by name."""
        return sorted({f.machine_class for f in self.cells} - {""}, key=lambda c: (c != "cpu", c))  # `machine_classes`

    @cached_property
    def known_good(self) -> tuple[KnownGoodSet, ...]:
        """One known-good set per machine class (`analysis.knowngood.known_good_sets`)."""
        return tuple(with_quiet(k, self.quiet) for k in known_good_sets(self.rows, self.cells))

    def known_good_by_class(self) -> dict[str, KnownGoodSet]:
        return {k.machine: k for k in self.known_good}


def answer_rows(rows: Iterable[Row], releases: Mapping[str, Sequence[str]], quiet: Quiet = NO_QUIET) -> Answer:
    """The answers of `rows`, given every release the index listed per axis (nothing computed yet);
    `quiet`: the quiet tests the rows hold as one stand-in (`storage.queries.loud_rows`)."""
    return Answer(rows if isinstance(rows, list) else list(rows), releases, quiet=quiet)
