"""Candidates: one combination of exact installed versions and its outcomes, by scenario. Pure.

A candidate pools a cell's repeats, its runs and the machines it ran on (`analysis.pin` narrows
the rows to one machine class first). `Candidate.result` says whether one scenario passed in
every outcome there and, if not, why (a failure's signature, a flaky cell, no outcome);
`Candidate.passes` says it of many at once. A test of a suite that this cell's release of the
suite did not collect neither disqualifies a candidate nor counts as a failure, unless what
would have collected it failed here (`breaks_collection`). `analysis.pin` chooses among
candidates; `analysis.knowngood` narrows them as it drops scenarios.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from harness.analysis.rows import machine_of
from harness.analysis.status import FAILURES, Status, across_runs


def _reason(status: str, signature: str, message: str) -> str:
    """`error: TypeError: … @ accelerate/…`, `not_applicable: needs a GPU`, `unresolvable: …`."""
    detail = signature or (message.strip().splitlines()[0] if message.strip() else "")
    if not detail or detail == status:
        return status
    return detail if detail.startswith(f"{status}:") else f"{status}: {detail}"


@dataclass(frozen=True)
class ScenarioResult:
    """Whether one scenario passed in every repeat of one candidate cell, and if not, why."""

    ok: bool
    reason: str = ""
    passed: int = 0
    total: int = 0


_ONE_PASS = ScenarioResult(True, "", 1, 1)


@lru_cache(maxsize=1 << 14)
def _one_failure(status: str, signature: str, message: str) -> ScenarioResult:
    """`Candidate.result` of one outcome that did not pass, not flaky: a suite's thousands share a few."""
    return ScenarioResult(False, _reason(status, signature, message), 0, 1)


@dataclass
class Candidate:
    """Every admitted outcome of one combination of exact versions, by scenario (all machines pooled)."""

    versions: dict[str, str]
    requested: dict[str, str] = field(default_factory=dict)
    rows: dict[str, list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    #: What kept tests from being collected here: a file that failed to import, a worker that
    #: died before its first test (their node ids: files, folders, paths); `_absent` reads them.
    uncollected: tuple[str, ...] = ()
    #: `clean`, where it is known already (a narrowed cell's: its parent's, less what was dropped).
    known_clean: set[str] | None = field(default=None, repr=False, compare=False)

    # Cached: a candidate is complete once `pin.candidates_of` returns it, and over a large suite the
    # pin's blockers and ranking read these once per scenario and sort key (89 s -> 5 s at 20,000 tests x 20 cells).
    @cached_property
    def all_rows(self) -> list[Mapping[str, Any]]:
        return [r for rows in self.rows.values() for r in rows]

    @cached_property
    def cell_id(self) -> str:
        return min((str(r.get("cell_id") or "") for r in self.all_rows), default="")

    def runs(self, scenario: str | None = None) -> tuple[str, ...]:
        rows = self.rows.get(scenario, []) if scenario else self.all_rows
        if len(rows) == 1:  # most of a suite's tests: asked once per test for the chosen cell's evidence
            run = str(rows[0].get("run_id") or "")
            return (run,) if run else ()
        return tuple(sorted({str(r.get("run_id") or "") for r in rows} - {""}))

    def result(self, scenario: str) -> ScenarioResult:
        rows = self.rows.get(scenario, [])
        if not rows:
            return self._absent(scenario)
        if len(rows) == 1 and "flaky_across" not in rows[0]:  # most outcomes of a suite: one repeat, one run
            only = rows[0]
            if only["status"] == Status.PASS:
                return _ONE_PASS  # asked 400,000 times over 20,000 tests x 20 cells
            # what the rule below says of one outcome that did not pass, without its counting: a pin
            # that nothing passes names why each test fails in each cell (93,000 at 2,000,000 outcomes)
            return _one_failure(str(only["status"]), str(only.get("signature") or ""), str(only.get("message") or ""))
        flaky = next((str(r["flaky_across"]) for r in rows if "flaky_across" in r), "")
        # Only a pass is evidence for a pin: inconclusive and not_applicable disqualify, as failures do.
        passed = sum(1 for r in rows if r["status"] == Status.PASS)
        if passed == len(rows) and flaky:  # it passes now, but failed in an earlier run with nothing changed
            return ScenarioResult(False, flaky, passed, len(rows) + 1)
        if passed == len(rows):
            return ScenarioResult(True, "", passed, len(rows))
        reasons = Counter(
            _reason(str(r["status"]), str(r.get("signature") or ""), str(r.get("message") or ""))
            for r in rows
            if r["status"] != Status.PASS
        )
        reason = reasons.most_common(1)[0][0]
        split = across_runs(rows, lambda r: r["status"] != Status.PASS) if passed else None
        if split:  # each run agreed with itself; the runs did not (a matrix with repeats = 1 shows only this)
            reason = f"flaky across runs: failed in {split[0]} of {split[1]} runs with the same versions ({reason})"
        elif passed:
            reason = f"flaky: {len(rows) - passed} of {len(rows)} repeat(s) did not pass ({reason})"
        elif flaky:  # it fails now, and passed in an earlier run with nothing changed
            reason = f"{reason}; {flaky}"
        return ScenarioResult(False, reason, passed, len(rows))

    @cached_property
    def clean(self) -> set[str]:
        """The scenarios whose every outcome here passed: worked out once per cell, as the
        known-good set asks each cell twice, over 20,000 tests (`analysis.knowngood`'s narrowing hands it on)."""
        if self.known_clean is not None:
            return self.known_clean
        ok = Status.PASS
        rows_of = self.rows.items()
        clean = {s for s, rows in rows_of if (rows[0]["status"] == ok if len(rows) == 1 else all(r["status"] == ok for r in rows))}
        # a test flaky across runs (`queries.mark_flaky`: a few rows in a file's history) is no clean pass
        return clean - self._flaky if self._flaky else clean

    @cached_property
    def _flaky(self) -> set[str]:
        """The scenarios here whose history flips with nothing changed (`queries.mark_flaky` marks their rows)."""
        return {s for s, rows in self.rows.items() for r in rows if "flaky_across" in r}

    def passes(self, wanted: set[str]) -> set[str]:
        """The scenarios of `wanted` whose `result` is ok here, without a result object for each of
        a suite's 20,000: those whose every outcome passed, and tests not collected here (`_absent`)."""
        return (self.clean & wanted) | {s for s in wanted - self.rows.keys() if self._absent(s).ok}

    def _absent(self, scenario: str) -> ScenarioResult:
        """No outcome here. A test (a node id, or its identity across the suite's releases) that
        this cell's suite did not collect is not collected there: another release of the suite
        does not have it, so it neither disqualifies the cell nor counts as a failure. Unless
        what would have collected it failed here (a file that did not import): that is a failure."""
        if "::" not in scenario:
            return ScenarioResult(False, "no outcome")
        broken = next((node for node in self.uncollected if _covers(node, scenario)), None)
        if broken is not None:
            return ScenarioResult(False, f"not collected: {broken} failed here")
        return ScenarioResult(True, "not collected here")

    def machines(self) -> tuple[str, ...]:
        # a machine is its cell's and run's: one row of each (run, cell) says it
        one = {(r.get("run_id"), r.get("cell_id")): r for r in self.all_rows}
        return tuple(sorted({machine_of(r).label() for r in one.values()}))


def _covers(node: str, test: str) -> bool:
    """Whether a failure of `node` (a file, a folder, the paths a worker ran) kept `test` from being collected.

    >>> _covers("tests/test_x.py", "tests/test_x.py::t[r#1]"), _covers("tests/", "tests/a.py::t"), _covers("tests/b.py", "tests/a.py::t")
    (True, True, False)
    """
    return any(n in (".", "") or test.startswith(n + "::") or test.startswith(n.rstrip("/") + "/") for n in node.split(" "))


def breaks_collection(row: Mapping[str, Any]) -> bool:
    """A row of a suite's file or paths (no `::`) that failed: its tests were not collected."""
    return "::" not in str(row.get("scenario") or "") and str(row["status"]) in (*FAILURES, Status.INCONCLUSIVE)


# -- a candidate as the store sums it up -------------------------------------------------------
#: One reason a test does not pass in some candidate cells: (test, reason, the cells' ids, the test's runs there).
Failure = tuple[str, str, Sequence[str], Iterable[str]]


@dataclass
class Standing:
    """One candidate as `storage.pins` sums it up over every outcome: its exact versions, its (run,
    cell) pairs (one row each: the cell's columns, when its chosen outcomes ran), and how many
    chosen scenarios do not pass there (`Candidate.passes`, decided in SQL). What `Candidate` says
    of its rows, said of its pairs: a pin reads outcomes only to name why a test fails."""

    versions: dict[str, str]
    requested: dict[str, str] = field(default_factory=dict)
    pairs: list[Mapping[str, Any]] = field(default_factory=list)
    failing: int = 0

    @property
    def cell_id(self) -> str:
        return min((str(p.get("cell_id") or "") for p in self.pairs), default="")

    def runs(self) -> tuple[str, ...]:
        return tuple(sorted({str(p.get("run_id") or "") for p in self.pairs} - {""}))

    def machines(self) -> tuple[str, ...]:
        return tuple(sorted({machine_of(p).label() for p in self.pairs}))


def single_failure(test: str, status: str, signature: str, message: str, cells: Sequence[str], runs: Iterable[str]) -> Failure:
    """A test that failed in one outcome in each of `cells`, never marked flaky: as `Candidate.result`
    words one outcome that did not pass (the store groups a suite's thousands by what they say)."""
    return test, _one_failure(status, signature, message).reason, cells, [r for r in runs if r]


def failure_of(cell_id: str, test: str, rows: Sequence[Mapping[str, Any]]) -> Failure:
    """A test that did not pass in cell `cell_id`, from every outcome of it there (repeats, runs, a
    history of flakiness): worded by `Candidate.result` itself."""
    cell = Candidate({}, rows=defaultdict(list, {test: list(rows)}))
    return test, cell.result(test).reason, (cell_id,), cell.runs(test)
