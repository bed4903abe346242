"""The quiet tests of a read, as one stand-in: what lets a suite's answers skip its passes. Pure.

Most of a large suite's outcomes are passes of tests that passed everywhere. Such a test has no
transition, no flaky cell and no machine difference; it never keeps a cell from the known-good
set nor from a pin; in the grid it is a row of dots. Reading it as 20 rows of Python dicts per
test is what made a 2,000,000-outcome summary take 25 s and 3.7 GB.

A test is **quiet** in a read (`quiet_of`, and the same rule in SQL: `storage.queries.loud_rows`) when
every one of its outcomes passed, no history marks it flaky across runs, and it has an outcome
for every repeat of every (run, cell) of the read. Such tests are all alike, everywhere: the
read keeps one stand-in test for them all (`STAND_IN`), with one row per (run, cell, repeat) as any
of them has, each row standing for as many outcomes as there are quiet tests (`weight`). Every
rule that reads rows (attribution, the known-good set, pins) then decides as it would over every
row, and the few places that name or count tests expand the stand-in (`Quiet.expand`, `weight`).
The rest of the read's rows are the **loud** tests': those that say something.

>>> rows = [{"scenario": s, "run_id": "r", "cell_id": c, "repeat": 0, "status": st}
...         for s, c, st in [("a", "x", "pass"), ("a", "y", "pass"), ("b", "x", "pass"), ("b", "y", "error"), ("c", "x", "pass")]]
>>> quiet_of(rows)  # b failed once; c has no outcome in cell y
('a',)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.analysis.status import Status

#: The stand-in test's name: never a node id (pytest's have `::` or a `.py`), never a scenario's
#: (a module name), and sorted after both, so a stand-in row is never taken for a real test.
STAND_IN = "~quiet"


@dataclass(frozen=True)
class Quiet:
    """The quiet tests a read holds as `STAND_IN`: their identities and their node ids, sorted."""

    tests: tuple[str, ...]
    nodes: tuple[str, ...] = ()  # each quiet test's node id (as the rows' `node_id`), in `tests`' order

    def __len__(self) -> int:
        return len(self.tests)

    def expand(self, names: Iterable[str]) -> tuple[str, ...]:
        """`names` with the stand-in replaced by every quiet test, sorted as the names were
        (a sorted list of tests stays sorted: the stand-in's place is not where its tests go)."""
        listed = list(names)
        if STAND_IN not in listed:
            return tuple(listed)
        rest = [n for n in listed if n != STAND_IN]
        return tuple(sorted([*rest, *self.tests])) if rest == sorted(rest) else (*rest, *self.tests)


#: No quiet test: a read of every row.
NO_QUIET = Quiet(())


def weight(row: Mapping[str, Any]) -> int:
    """How many outcomes a row stands for: the stand-in's `stands_for`, else 1."""
    return int(row.get("stands_for") or 1)


def by_group(quiet: Quiet, group: Callable[[str], str] | None = None) -> Counter[str]:
    """How many quiet tests each row of a table holds (its test file, with `group`; else each
    test its own row): what a stand-in row adds, as passes, to a table that counts by row."""
    return Counter(map(group, quiet.tests) if group else quiet.tests)


def earliest(row: Mapping[str, Any]) -> Any:
    """When a row's outcome started; a stand-in's, the earliest of those it stands for (its
    `started_at` is the latest)."""
    return row.get("first_started_at") or row.get("started_at")


def is_stand_in(row: Mapping[str, Any]) -> bool:
    return row.get("scenario") == STAND_IN


def quiet_of(rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The quiet tests of `rows` (see the module docstring), sorted: the rule
    `storage.queries.loud_rows` states in SQL, in Python (what its tests hold the SQL to)."""
    repeats: dict[tuple[Any, Any], set[Any]] = defaultdict(set)  # (run, cell) -> its repeats
    seen: dict[str, set[tuple[Any, Any, Any]]] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)  # two rows of one test in one repeat (two node ids, one identity): not quiet
    loud: set[str] = set()
    for row in rows:
        key = (row["run_id"], row["cell_id"])
        repeats[key].add(row["repeat"])
        seen[str(row["scenario"])].add((*key, row["repeat"]))
        count[str(row["scenario"])] += 1
        if row["status"] != Status.PASS or "flaky_across" in row:
            loud.add(str(row["scenario"]))
    every = sum(len(r) for r in repeats.values())
    return tuple(sorted(s for s, where in seen.items() if s not in loud and len(where) == every == count[s]))
