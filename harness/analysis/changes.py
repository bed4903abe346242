"""What changed between two states of a results file: regressed, fixed, flaky and new. Pure.

A results file keeps each (machine, cell, test or scenario, repeat) as *spans*: runs in a row
with the same outcome (`storage.history`). The state at a moment is, per key, the spans that
held then; `compare` sets the state before the newest run (or any earlier moment) against the
current one, as crater and PkgEval class a change:

- *regressed*: it passed then and fails now; *fixed*: it failed then and passes now;
- *flaky*: either of those where nothing that the outcome depends on changed between the two
  runs around the change (`Depends`: the cell's resolved environment, the scenario or test
  file, the code under test): never a regression, and evidence of flakiness for pins;
- *removed*: it left the suite: the newest sweep of its cell did not collect it (deleted,
  renamed, deselected; `storage.collections` marks it `not_collected`);
- *new*: not run before: a new cell (a new release a watch built) or a new test in a cell.

A file that stops collecting is a regression of its own (its error, in a cell that ran before),
carrying the tests it kept from running (`not_run`); the file collecting again is a fix,
carrying the tests that run again. A test that was not run because its file failed is compared
with the last run that ran it.

A key whose repeats or whose statuses say nothing (not applicable, inconclusive, xfail, an env
that did not build) on either side changes nothing here.

>>> t = [datetime(2026, 11, d) for d in range(20, 23)]
>>> spans = [Span("cpu", "c1", "t", "t", 0, "pass", "", "r1", "r1", t[0], t[0]),
...          Span("cpu", "c1", "t", "t", 0, "fail", "E", "r2", "r3", t[1], t[2])]
>>> same = lambda run, cell, node: Depends("env", "file", "code")
>>> [c.kind for c in compare(spans, t[0], same).items]
['flaky']
>>> [c.kind for c in compare(spans, t[0], lambda run, cell, node: Depends("env", "file", run)).items]
['regressed']
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import pairwise
from typing import Any, Literal

from harness.analysis.rows import Machine, group_of
from harness.analysis.status import FAILURES, NOT_COLLECTED, Status

#: "not_run" is `compare`'s own: a test its file's collection error kept from running, which it
#: counts under that error's regression (`Change.not_run`); no change of that kind leaves it.
Kind = Literal["regressed", "fixed", "flaky", "removed", "new", "not_run"]
#: The order a report reads them in: what broke first (crater's).
KINDS: tuple[Kind, ...] = ("regressed", "fixed", "flaky", "removed", "new")


@dataclass(frozen=True)
class Span:
    """Consecutive observations of one key with one outcome (a row of `outcomes` or `history`)."""

    machine: str  # the machine key (`storage.clauses.MACHINE_SQL`)
    cell_id: str
    test: str  # the test's identity across the suite's releases (a scenario's name)
    node: str  # the node id the newest observation had
    repeat: int
    status: str
    signature: str
    first_run: str
    last_run: str
    first_at: datetime
    last_at: datetime
    #: A `not_collected` mark's why (`removed`, `not_run`, `collected`: `status.NOT_COLLECTED`); "" for an outcome.
    reason: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.machine, self.cell_id, self.test)

    @property
    def mark(self) -> bool:
        """Not an outcome: the run of `first_run` did not collect this test (`reason` says why)."""
        return self.status == NOT_COLLECTED


@dataclass(frozen=True)
class Depends:
    """What an outcome depends on in one run: "" where a run did not record it (never equal)."""

    env: str  # the cell's resolved environment (its freeze, inherited packages, commits)
    inputs: str  # the scenario file or the test's file (and the suite's conftest and configuration)
    code: str  # the code under test (the commit and uncommitted changes of the suite's repository)

    def same_as(self, other: Depends) -> bool:
        return all((self.env, self.inputs, self.code)) and self == other


#: (run, cell, node id) -> what the outcome depended on there, or None where the file does not say.
DependsOn = Callable[[str, str, str], Depends | None]


@dataclass(frozen=True)
class Change:
    """One test (or scenario) in one cell on one machine that changed since the moment compared with."""

    kind: Kind
    machine: str
    cell_id: str
    test: str
    node: str
    before: str  # its status then ("" for new), folded over its repeats
    after: str
    signature: str  # the failure now (regressed, flaky to a failure), or then (fixed, flaky to a pass)
    before_run: str  # the run that showed it before ("" for new)
    after_run: str  # the run that showed it first as it is now
    #: A file that stopped collecting: the tests it kept from running; one collecting again: those that run again.
    not_run: tuple[str, ...] = ()
    before_signature: str = ""  # the failure then, where it failed then too (fails otherwise now)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "kind": self.kind, "machine": self.machine, "cell": self.cell_id, "test": self.test, "node_id": self.node,
            "before": self.before, "after": self.after, "signature": self.signature,
            "before_run": self.before_run, "after_run": self.after_run,
        }  # fmt: skip
        if self.not_run:
            found["tests_not_run" if self.kind == "regressed" else "tests_run_again"] = list(self.not_run)
        return found


@dataclass(frozen=True)
class Changes:
    """Every change since a moment, with the cells that are new altogether."""

    items: tuple[Change, ...] = ()
    new_cells: tuple[tuple[str, str], ...] = ()  # (machine, cell id) with no outcome before

    def of(self, kind: Kind) -> list[Change]:
        return [c for c in self.items if c.kind == kind]

    def tests(self, kind: Kind, machine: str | None = None) -> int:
        """How many tests (or scenarios), on any machine (or this one) and in any cell, changed so."""
        return len({(c.machine, c.test) for c in self.of(kind) if machine is None or c.machine == machine})

    def not_run(self, kind: Kind, machine: str | None = None) -> int:
        """How many tests a file's collection error kept from running (regressed), or lets run again (fixed)."""
        return len({(c.machine, t) for c in self.of(kind) if machine is None or c.machine == machine for t in c.not_run})

    def headline(self) -> str:
        """`+3 failing (500 tests not run), −1 fixed, 2 flaky, 1 removed, 1 new cell`: the counts of
        tests, and of new cells."""
        kept, again = self.not_run("regressed"), self.not_run("fixed")
        parts = [
            f"+{self.tests('regressed'):,} failing" + (f" ({kept:,} test{'s' if kept != 1 else ''} not run)" if kept else ""),
            f"−{self.tests('fixed'):,} fixed" + (f" ({again:,} test{'s' if again != 1 else ''} run again)" if again else ""),
            f"{self.tests('flaky'):,} flaky",
        ]
        removed = self.tests("removed")
        if removed:
            parts.append(f"{removed:,} removed")
        cells = len(self.new_cells)
        if cells:
            parts.append(f"{cells} new cell{'s' if cells != 1 else ''}")
        fresh = set(self.new_cells)  # once, not per change: a new cell of a suite brings 20,000
        new_tests = self.tests("new") - len({(c.machine, c.test) for c in self.of("new") if (c.machine, c.cell_id) in fresh})
        if new_tests > 0:
            parts.append(f"{new_tests:,} new test{'s' if new_tests != 1 else ''}")
        return ", ".join(parts)


def _class(status: str) -> str:
    """`pass`, `fail` (any failure) or "" (says nothing)."""
    if status == Status.PASS:
        return "pass"
    return "fail" if status in FAILURES else ""


def fold(spans: Sequence[Span]) -> tuple[str, str]:
    """One key's repeats as (class, signature): failing if any repeat fails, passing if the
    others all pass, "" where none says either; the signature is the commonest failure's."""
    classes = [_class(s.status) for s in spans]
    if "fail" in classes:
        signatures = Counter(s.signature or s.status for s in spans if _class(s.status) == "fail")
        return "fail", signatures.most_common(1)[0][0]
    return ("pass", "") if "pass" in classes else ("", "")


def state_at(spans: Sequence[Span], moment: datetime | None) -> list[Span]:
    """The spans of one key that held at `moment` (None: now): per repeat, the newest span begun
    by then; of those, only the repeats of the key's newest observation by then (a run with
    fewer repeats leaves the others behind).

    >>> a = datetime(2026, 11, 1); b = datetime(2026, 11, 2)
    >>> old = Span("m", "c", "t", "t", 1, "pass", "", "r1", "r1", a, a)
    >>> new = Span("m", "c", "t", "t", 0, "fail", "E", "r1", "r2", a, b)
    >>> [s.repeat for s in state_at([old, new], None)], sorted(s.repeat for s in state_at([old, new], a))
    ([0], [0, 1])
    """
    begun = [s for s in spans if moment is None or s.first_at <= moment]
    if not begun:
        return []
    seen = max(s.last_at if moment is None else min(s.last_at, moment) for s in begun)
    return [s for s in begun if s.last_at >= seen]


def compare(spans: Iterable[Span], since: datetime, depends: DependsOn, known_cells: Iterable[tuple[str, str]] | None = None) -> Changes:
    """The changes from the state at `since` to the state now (`state_at`), per key, classed by
    `depends` (what each run's outcome depended on: a flip where it is the same is flaky).
    `known_cells`: the (machine, cell) with an outcome by `since` (a cell is new only if it is not
    among them); None: those the spans show."""
    by_key: dict[tuple[str, str, str], list[Span]] = defaultdict(list)
    for span in spans:
        by_key[span.key].append(span)
    items: list[Change] = []
    cells_before: set[tuple[str, str]] = set(known_cells or ())
    cells_now: set[tuple[str, str]] = set()
    again: dict[tuple[str, str, str], list[str]] = defaultdict(list)  # (machine, cell, failure) -> tests run again
    for key, found in by_key.items():
        then, now, ran = _states(found, since)
        if then and known_cells is None:
            cells_before.add(key[:2])
        if now and not _marked(now):
            cells_now.add(key[:2])
        last = _newest(then) if then else None
        if last is not None and last.mark and last.reason == "not_run" and now and not _marked(now):
            again[(key[0], key[1], last.signature)].append(key[2])
        change = _change(then, now, ran, depends)
        if change is not None:
            items.append(change)
    items = _not_run(items, again)
    items.sort(key=lambda c: (KINDS.index(c.kind), c.machine, c.signature, c.test, c.cell_id))
    return Changes(tuple(items), tuple(sorted(cells_now - cells_before)))


def _states(found: Sequence[Span], since: datetime) -> tuple[list[Span], list[Span], list[Span]]:
    """A key's state then, now, and its last state by then that was an outcome (not a mark).

    A suite's test has one repeat, whose spans follow one another: each state is one span, found
    in one pass (a night where a file stops importing changes 10,000 of them at 20 cells)."""
    if any(s.repeat for s in found):
        return state_at(found, since), state_at(found, None), state_at([s for s in found if not s.mark], since)
    then = ran = newest = None
    for s in found:
        if newest is None or (s.last_at, s.last_run) > (newest.last_at, newest.last_run):
            newest = s
        if s.first_at <= since:
            if then is None or (s.last_at, s.last_run) > (then.last_at, then.last_run):
                then = s
            if not s.mark and (ran is None or (s.last_at, s.last_run) > (ran.last_at, ran.last_run)):
                ran = s
    return ([then] if then else []), ([newest] if newest else []), ([ran] if ran else [])


def _marked(spans: Sequence[Span]) -> bool:
    """The key's state is a `not_collected` mark: it is not part of the suite then."""
    return bool(spans) and _newest(spans).mark


def _newest(spans: Sequence[Span]) -> Span:
    return max(spans, key=lambda s: (s.last_at, s.last_run))


def _change(then: Sequence[Span], now: Sequence[Span], ran: Sequence[Span], depends: DependsOn) -> Change | None:
    """One key's change: `then` and `now` its state at the moment and now, `ran` its last state by
    the moment that was an outcome (not a mark)."""
    if not now:
        return None
    newest = _newest(now)
    if newest.mark:
        return _left(then, newest, ran)
    if then and _newest(then).mark:
        mark = _newest(then)
        if mark.reason == "removed":
            then = []  # left the suite and came back: a new test
        elif mark.reason == "collected":
            then = [replace(mark, status=Status.PASS, signature="")]  # the file collected cleanly then
        else:
            then = ran  # not run then (its file failed): as it was when it last ran
    after, signature = fold(now)
    if not then:
        return _of("new", newest, "", after or _word(now), signature, "", newest.first_run)
    before, old_signature = fold(then)
    if not before or not after or (before, old_signature) == (after, signature):
        return None  # says nothing on one side, or the same
    # the runs around the change: the last that showed it as it was, the first that showed it as it is
    was = _newest(then)
    moved = [s for s in now if s not in then] or list(now)
    began = min(moved, key=lambda s: (s.first_at, s.first_run))
    old = depends(was.last_run, was.cell_id, was.node)
    new = depends(began.first_run, began.cell_id, began.node)
    steady = old is not None and new is not None and old.same_as(new)
    kind: Kind = "flaky" if steady else ("fixed" if after == "pass" else "regressed")
    shown = signature if after == "fail" else old_signature
    return replace(_of(kind, newest, before, after, shown, was.last_run, began.first_run), before_signature=old_signature)


def _of(kind: Kind, span: Span, before: str, after: str, signature: str, before_run: str, after_run: str) -> Change:
    return Change(kind, span.machine, span.cell_id, span.test, span.node, before, after, signature, before_run, after_run)


def _left(then: Sequence[Span], mark: Span, ran: Sequence[Span]) -> Change | None:
    """A key that the newest collection of its cell left out (`mark`), against how it was then."""
    if not ran:
        return None  # it never ran by the moment: it came and went since
    before, old_signature = fold(ran)
    was = _newest(ran)
    if then and _newest(then).mark:
        # out of the suite then already: a test its file kept from running, now gone for good, was removed
        if not (_newest(then).reason == "not_run" and mark.reason == "removed"):
            return None
    elif mark.reason == "not_run":
        return _of("not_run", mark, before, "", mark.signature, was.last_run, mark.first_run)
    elif mark.reason == "collected":
        return _of("fixed", mark, before, "pass", old_signature, was.last_run, mark.first_run) if before == "fail" else None
    return _of("removed", mark, before or _word(ran), "", old_signature, was.last_run, mark.first_run)


def _not_run(items: list[Change], again: Mapping[tuple[str, str, str], list[str]]) -> list[Change]:
    """The tests a file's collection error kept from running, on the error's own change (a new
    failing file in a cell that ran before is a regression), and those that run again on its fix."""
    kept: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    ran: dict[tuple[str, str, str, str], str] = {}  # the last run that ran them: the run before the file's change
    for c in items:
        if c.kind == "not_run":
            key = (c.machine, c.cell_id, c.signature, c.after_run)
            kept[key].append(c.test)
            ran[key] = max(ran.get(key, ""), c.before_run)
    found: list[Change] = []
    for c in items:
        key = (c.machine, c.cell_id, c.signature, c.after_run)
        if c.kind in ("regressed", "new") and c.after == "fail" and key in kept:
            found.append(replace(c, kind="regressed", not_run=tuple(sorted(kept.pop(key))), before_run=c.before_run or ran[key]))
        elif c.kind == "fixed" and (c.machine, c.cell_id, c.signature) in again:
            found.append(replace(c, not_run=tuple(sorted(again[(c.machine, c.cell_id, c.signature)]))))
        elif c.kind != "not_run":
            found.append(c)
    # tests kept from running by a failure that is no change of its own (it failed before already): as it is
    found += [
        replace(c, kind="regressed", after="not run")
        for c in items
        if c.kind == "not_run" and (c.machine, c.cell_id, c.signature, c.after_run) in kept
    ]
    return found


def _word(spans: Sequence[Span]) -> str:
    return spans[0].status if spans else ""


# -- across the whole history: flips with nothing changed ---------------------------------------
def flaky_flips(spans: Iterable[Span], depends: DependsOn) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(machine, cell, test) -> (the failure's signature, what made it flaky across runs): a span
    followed by one of the other class (a pass by a failure, or back) while nothing it depends
    on changed. Pins and the known-good set count it as a failing repeat would count, and
    attribution as a flaky cell of that failure.

    >>> t = [datetime(2026, 11, d) for d in range(20, 23)]
    >>> spans = [Span("cpu", "c1", "t", "t", 0, s, sig, r, r, d, d) for s, sig, r, d in
    ...          [("pass", "", "r1", t[0]), ("fail", "E", "r2", t[1]), ("pass", "", "r3", t[2])]]
    >>> flaky_flips(spans, lambda run, cell, node: Depends("env", "file", "code"))
    {('cpu', 'c1', 't'): ('E', 'flaky across runs: passed in r1, failed in r2 (E) with nothing changed')}
    """
    by_repeat: dict[tuple[str, str, str, int], list[Span]] = defaultdict(list)
    for span in spans:
        by_repeat[(*span.key, span.repeat)].append(span)
    found: dict[tuple[str, str, str], tuple[str, str]] = {}
    for (machine, cell, test, _), ordered in sorted(by_repeat.items()):
        ordered.sort(key=lambda s: (s.last_at, s.last_run))
        for a, b in pairwise(ordered):
            one, other = _class(a.status), _class(b.status)
            if not one or not other or one == other or (machine, cell, test) in found:
                continue
            old, new = depends(a.last_run, a.cell_id, a.node), depends(b.first_run, b.cell_id, b.node)
            if old is not None and new is not None and old.same_as(new):
                failing = a if one == "fail" else b
                words = {"pass": "passed", "fail": "failed"}
                signature = failing.signature or failing.status
                found[(machine, cell, test)] = (
                    signature,
                    f"flaky across runs: {words[one]} in {a.last_run}, {words[other]} in {b.first_run} ({signature}) with nothing changed",
                )
    return found


# -- words --------------------------------------------------------------------------------------
@dataclass
class Group:
    """Changes of one kind, machine, signature and file (or class): one line of a report."""

    kind: Kind
    machine: str
    signature: str
    group: str
    tests: list[str] = field(default_factory=list)
    cells: set[str] = field(default_factory=set)
    runs: set[tuple[str, str]] = field(default_factory=set)
    not_run: set[str] = field(default_factory=set)  # tests a collection error kept from running (or that run again)


def groups(changes: Changes) -> list[Group]:
    """The changes gathered by kind, machine, signature and file (or class), in report order:
    a suite's 400 tests that broke in one file with one signature are one line, and a file that
    stopped collecting comes first."""
    found: dict[tuple[str, str, str, str], Group] = {}
    fresh = set(changes.new_cells)
    for c in changes.items:
        if c.kind == "new" and (c.machine, c.cell_id) in fresh:
            continue  # a new cell is one line of its own
        key = (c.kind, c.machine, c.signature, group_of(c.node))
        group = found.setdefault(key, Group(c.kind, c.machine, c.signature, group_of(c.node)))
        if c.node not in group.tests:
            group.tests.append(c.node)
        group.cells.add(c.cell_id)
        group.runs.add((c.before_run, c.after_run))
        group.not_run.update(c.not_run)
    # a file that stopped collecting (its tests not run) leads its kind: the worst a night brings
    return sorted(found.values(), key=lambda g: (KINDS.index(g.kind), g.machine, -len(g.not_run), -len(g.tests), g.group, g.signature))


def machine_label(key: str) -> str:
    """A machine key (`storage.clauses.MACHINE_SQL`) as the answers name machines.

    >>> machine_label("linux-x86_64|cpu|0|3.11|"), machine_label("linux-x86_64|NVIDIA H200|2|3.12|13.0")
    ('cpu · linux-x86_64 · Python 3.11', '2x NVIDIA H200 · linux-x86_64 · Python 3.12 · CUDA 13.0')
    """
    platform, gpu, count, python, cuda = (key.split("|") + [""] * 5)[:5]
    label = Machine(platform, gpu or ("cpu" if platform else ""), python, cuda).label()
    return f"{count}x {label}" if count.isdigit() and int(count) > 1 and gpu and gpu.lower() != "cpu" else label
