"""The watch for new releases: what is new, which cells test it, and what the outcomes say. Pure.

`harness watch` (the driver is `harness.workflows.watching`) reads a results file on one machine class
(`nearest_class`: this host's `cpu` or `2x NVIDIA H200`, as `harness pin --machine` names it) and
asks these functions, in order:

1. `known_good`: that class's known-good set, by the pin's rule (`analysis.pin.choose`): the newest
   cell on which every scenario that passes somewhere passes; where no cell passes them all,
   the scenario that keeps the most cells out is dropped, then the next (as the summary does).
   The scenarios that pass there are *guarded*.
2. `newest_held`: per axis, the newest release the file holds: the newest any sweep of the
   user's own tested (the watch's own cells left out: a release that broke stays new, so the
   answer holds on a rerun and every night until it is fixed or the matrix moves past it), or
   the known-good set's, when a watched release passed and became the known-good set.
3. `new_releases`: the releases the index lists (up to `exclude_newer`) newer than that.
4. `plan_targets`: one cell per axis with new releases: the known-good set with that axis moved
   to its newest release. Only if it fails are the releases in between built (refinement
   bisects them: about log2 of their number), so the answer names the exact release.
5. `verdict`: per target and guarded scenario: a **regression** (passed in the known-good set,
   fails or errors now: its signature, the exact release and the one before it from the
   attribution on that line, on this machine), **known** (the user's own sweep already showed
   that failure with a newer release of the axis), **no evidence** (inconclusive, not
   applicable, the env would not build: never a pass), or a pass; a failing scenario of the
   known-good set that now passes is **fixed**. Exit status 1 when any regression stands, else 0.

Over a pytest suite every node id is a scenario here; the report folds the tests of one file (or
class) with one finding into one line (`grouped`: "40 tests in tests/test_lora.py: KeyError …"),
and lists guarded tests by file, never a line per test (the JSON keeps every test).

>>> rows = [
...     {"cell_id": f"p{v}", "scenario": "parse", "status": s, "repeat": 0, "run_id": run, "gpu": "cpu",
...      "platform": "linux-x86_64", "python": "3.11", "versions": {"packaging": v}, "signature": sig, "started_at": "2026-01-01"}
...     for v, s, sig, run in [("21.3", "pass", "", "r-1"), ("23.0", "error", "InvalidVersion: x", "watch-1")]
... ]
>>> good = known_good(rows)
>>> dict(good.versions), good.guarded
({'packaging': '21.3'}, ('parse',))
>>> new_releases(newest_held(rows, ["packaging"], good), {"packaging": ["21.3", "22.0", "23.0"]})
{'packaging': ['22.0', '23.0']}
>>> [t.describe() for t in plan_targets(good, {"packaging": ["22.0", "23.0"]})]
['packaging 23.0 (new: 22.0, 23.0)']
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from packaging.version import Version

from harness.analysis.attribution import Transition, held_text
from harness.analysis.knowngood import choose_for_passing
from harness.analysis.markdown import table_cell
from harness.analysis.pin import PinResult, as_asked
from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet
from harness.analysis.rows import (
    CellFacts,
    axis_sort,
    by_cell,
    cell_facts,
    group_of,
    machine_class,
    machine_of,
    points,
    requested,
    signature_of,
)
from harness.analysis.status import FAILURES, Status, fold_statuses
from harness.analysis.versions import release

#: Run ids of the cells a watch builds (its targets and their refinement probes): `watch-<hash>`.
WATCH_RUN_PREFIX = "watch-"
EXIT_NOTHING_BROKE = 0
EXIT_REGRESSION = 1
Kind = Literal["regression", "known", "no_evidence", "not_run"]


# -- 1. the known-good set --------------------------------------------------------------------------
@dataclass(frozen=True)
class GuardedSet:
    """The newest set on which the guarded scenarios all pass (`pin`), and what it ran."""

    pin: PinResult
    guarded: tuple[str, ...]  # pass there: a failure of one of them in a new cell is a regression
    dropped: tuple[str, ...] = ()  # pass somewhere, but in no cell together with the guarded ones
    requested: tuple[tuple[str, str], ...] = ()  # axis -> the value its cell asked for (`2.13.0`, `inherit`)
    statuses: tuple[tuple[str, str], ...] = ()  # every scenario it ran -> its word (`pass`, `error`, `error 1/3 mixed`)
    signatures: tuple[tuple[str, str], ...] = ()  # a scenario failing there -> its signature
    labels: tuple[tuple[str, str], ...] = ()  # axis -> its value as attribution names it (an inherited axis by its version)
    machine_class: str = ""  # `cpu`, `1x NVIDIA H200`: the class whose known-good set this is

    @property
    def versions(self) -> tuple[tuple[str, str], ...]:
        """axis -> the exact version installed (`2.13.0+cpu`)."""
        return self.pin.versions

    @property
    def cell_id(self) -> str:
        return self.pin.cell_ids[0]

    def failing(self) -> list[str]:
        return [s for s, word in self.statuses if word.split()[0] in FAILURES]

    def describe(self) -> str:
        return ", ".join(f"{a} {v}" for a, v in self.versions)

    def named(self) -> str:
        """`known-good set on 1x NVIDIA H200`: the set is per machine class, and says whose it is."""
        return "known-good set" + (f" on {self.machine_class}" if self.machine_class else "")


def nearest_class(classes: Sequence[str], host: str) -> str:
    """The stored class a watch on `host` reads: its own, else the same GPU with the most GPUs
    it has (a sweep run with `--gpus 0` on a two-GPU host is a one-GPU class); "" when none.

    >>> nearest_class(["cpu", "1x NVIDIA H200"], "2x NVIDIA H200"), nearest_class(["cpu"], "1x NVIDIA H200")
    ('1x NVIDIA H200', '')
    """
    if host in classes:
        return host
    count, model = _gpus(host)
    fits = [c for c in classes if _gpus(c)[1] == model and 0 < _gpus(c)[0] <= count]
    return max(fits, key=lambda c: _gpus(c)[0], default="")


def _gpus(machine: str) -> tuple[int, str]:
    """`2x NVIDIA H200` -> (2, "NVIDIA H200"); (0, machine) for `cpu` or a model without a count."""
    count, _, model = machine.partition("x ")
    return (int(count), model) if count.isdigit() else (0, machine)


def on_class(rows: Iterable[Mapping[str, Any]], classes: Iterable[str]) -> list[Mapping[str, Any]]:
    """The rows of these machine classes (`rows.machine_class`)."""
    wanted = set(classes)
    return [r for r in rows if machine_class(r) in wanted]


def on_machine(rows: Iterable[Mapping[str, Any]], prefix: str) -> list[Mapping[str, Any]]:
    """The rows whose machine class starts with `prefix` (`cpu · linux-x86_64 · Python 3.11`; a GPU's CUDA may follow)."""
    return [r for r in rows if machine_of(r).label().startswith(prefix)]


def known_good(rows: Sequence[Mapping[str, Any]], quiet: Quiet = NO_QUIET) -> GuardedSet | None:
    """The known-good set of `rows` (one machine's), or None when no scenario passes anywhere.
    quiet: the quiet tests `rows` hold as one stand-in (`analysis.quiet`): guarded, each a pass."""
    groups = by_cell(rows)  # once, for the choice and the machine classes
    chosen = choose_for_passing(rows, cells=groups)
    if chosen is None:
        return None
    result, wanted, dropped = chosen
    if not result.found:
        return None
    if STAND_IN in result.scenarios:  # the stand-in passes in every cell: kept wherever a set is found
        result = as_asked(result, quiet.expand(result.scenarios), set(quiet.tests))
    cells = set(result.cell_ids)
    mine = [r for r in rows if r.get("cell_id") in cells]
    by_scenario: dict[str, list[Mapping[str, Any]]] = {}
    for row in mine:
        by_scenario.setdefault(str(row["scenario"]), []).append(row)
    words = _with_quiet({s: fold_statuses(str(r["status"]) for r in found) for s, found in by_scenario.items()}, quiet)
    statuses = tuple(sorted(words.items()))
    wanted = list(quiet.expand(wanted))
    signatures = tuple(
        (s, _common_signature(found)) for s, found in sorted(by_scenario.items()) if any(r["status"] in FAILURES for r in found)
    )
    labels = tuple((a, point.label()) for a, point in sorted(points(mine[0]).items()))
    classes = sorted({facts.machine_class for facts in groups} - {""}, key=lambda c: (c != "cpu", c))  # `machine_classes`
    named = classes[0] if len(classes) == 1 else ""
    return GuardedSet(result, tuple(wanted), tuple(dropped), tuple(sorted(requested(mine[0]).items())), statuses, signatures, labels, named)


def _with_quiet(words: dict[str, str], quiet: Quiet) -> dict[str, str]:
    """A cell's words by scenario, the stand-in's word (a pass) said of each quiet test it stands for."""
    word = words.pop(STAND_IN, None)
    if word is not None:
        words.update(dict.fromkeys(quiet.tests, word))
    return words


def _common_signature(rows: Iterable[Mapping[str, Any]]) -> str:
    found = Counter(signature_of(r) for r in rows if r["status"] in FAILURES)
    return found.most_common(1)[0][0] if found else ""


# -- 2. and 3. what is new --------------------------------------------------------------------------
def is_watch_run(run_id: str) -> bool:
    return run_id.startswith(WATCH_RUN_PREFIX)


def newest_held(rows: Iterable[Mapping[str, Any]], axes: Sequence[str], good: GuardedSet | None = None) -> dict[str, str]:
    """axis -> the newest release the file holds on it (see the module's docstring); axes with none are left out."""
    newest: dict[str, Version] = {}
    cells = {cell_facts(row) for row in rows if not is_watch_run(str(row.get("run_id") or ""))}  # once per cell
    for facts in cells:
        for axis, point in facts.points.items():
            if axis in axes and point.release is not None:
                version = Version(point.release.public)
                if axis not in newest or version > newest[axis]:
                    newest[axis] = version
    for axis, value in good.versions if good else ():
        exact = release(value)
        if axis in axes and exact is not None and (axis not in newest or Version(exact.public) > newest[axis]):
            newest[axis] = Version(exact.public)
    return {axis: str(newest[axis]) for axis in axis_sort(newest)}


def new_releases(held: Mapping[str, str], listed: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """axis -> the listed releases newer than the one held, oldest first (an axis with none is left out)."""
    found = {}
    for axis, newest in held.items():
        newer = sorted({Version(v) for v in listed.get(axis, ()) if release(v) is not None and Version(v) > Version(newest)})
        if newer:
            found[axis] = [str(v) for v in newer]
    return found


# -- 4. the cells to build ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """The known-good set with `axis` moved to `release`: the cell that tests a new release."""

    axis: str
    release: str  # the newest new release of the axis
    new: tuple[str, ...]  # every new release of the axis, oldest first (`release` last)
    held: tuple[tuple[str, str], ...]  # the other axes at the known-good set's values, as attribution labels a line
    requested: tuple[tuple[str, str], ...]  # the cell's every axis, as a stored row's `versions` say it

    def describe(self) -> str:
        return f"{self.axis} {self.release}" + (f" (new: {', '.join(self.new)})" if len(self.new) > 1 else "")


def plan_targets(good: GuardedSet, new: Mapping[str, Sequence[str]]) -> list[Target]:
    """One target per axis with new releases, in reading order."""
    base = dict(good.requested)
    targets = []
    for axis in axis_sort(new):
        if axis not in base or not new[axis]:
            continue
        releases = tuple(new[axis])
        moved = {**base, axis: releases[-1]}
        held = tuple((a, v) for a, v in axis_sorted(good.labels) if a != axis)
        targets.append(Target(axis, releases[-1], releases, held, tuple(sorted(moved.items()))))
    return targets


def axis_sorted(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(axis, value) pairs in reading order (torch, transformers, accelerate, peft, bitsandbytes, others)."""
    found = dict(pairs)
    return [(a, found[a]) for a in axis_sort(found)]


def rows_of(target: Target, rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The stored outcomes of the target's cell (rows whose requested versions are the target's)."""
    wanted = dict(target.requested)
    matches: dict[CellFacts, bool] = {}  # decided once per cell, not by a dict made for each of 400,000 rows
    found = []
    for row in rows:
        facts = cell_facts(row)
        ok = matches.get(facts)
        if ok is None:
            ok = matches[facts] = dict(facts.requested) == wanted
        if ok:
            found.append(row)
    return found


# -- 5. what the outcomes say ------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """One guarded scenario in one target cell that did not pass."""

    kind: Kind
    scenario: str
    axis: str
    tested: str  # the release the target cell ran
    status: str  # the folded word: `error`, `error 1/3 mixed`, `inconclusive`
    signature: str = ""
    answer: str = ""  # `introduced in packaging 22.0 (after 21.3)`, or a range, or the plain fact
    release: str = ""  # the release that introduced it: exact when `exact`
    before: str = ""  # the release before it, which passes, on the same line and machine
    exact: bool = False
    conditions: str = ""  # `with six 1.16.0 on cpu · linux-x86_64 · Python 3.11`
    cell_id: str = ""
    first_seen: str = ""
    known_in: str = ""  # for `known`: the cell of the user's own sweep that showed it already
    message: str = ""  # for `no_evidence`: why (the first line of the outcome's message)

    def line(self) -> str:
        if self.kind == "regression":
            return f"{self.scenario}: {self.signature} — {self.answer} {self.conditions}".rstrip()
        if self.kind == "known":
            return f"{self.scenario}: {self.signature} — already seen in your sweep ({self.known_in})"
        if self.kind == "not_run":
            return f"{self.scenario}: not run yet with {self.axis} {self.tested}"
        return f"{self.scenario}: {self.status} with {self.axis} {self.tested}, no evidence either way" + (
            f" ({self.message})" if self.message else ""
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "scenario": self.scenario,
            "axis": self.axis,
            "tested": self.tested,
            "status": self.status,
            "signature": self.signature,
            "answer": self.answer,
            "release": self.release,
            "before": self.before,
            "exact": self.exact,
            "conditions": self.conditions,
            "cell_id": self.cell_id,
            "first_seen": self.first_seen,
            "known_in": self.known_in,
            "message": self.message,
            "description": self.line(),
        }


@dataclass(frozen=True)
class TargetResult:
    target: Target
    cell_id: str = ""
    statuses: tuple[tuple[str, str], ...] = ()  # scenario -> word, every scenario the cell ran
    findings: tuple[Finding, ...] = ()
    fixed: tuple[str, ...] = ()  # failed in the known-good set, pass here

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "regression"]

    @property
    def ran(self) -> bool:
        return bool(self.statuses)

    def passes(self, guarded: Sequence[str]) -> bool:
        """Every guarded scenario passed: this release is the new known-good set's."""
        words = dict(self.statuses)
        return bool(guarded) and all(words.get(s) == Status.PASS for s in guarded)

    def to_dict(self, guarded: Sequence[str]) -> dict[str, Any]:
        t = self.target
        return {
            "axis": t.axis,
            "release": t.release,
            "new": list(t.new),
            "held": dict(t.held),
            "cell_id": self.cell_id,
            "statuses": dict(self.statuses),
            "passes": self.passes(guarded),
            "findings": [f.to_dict() for f in self.findings],
            "fixed": list(self.fixed),
        }


def _first_line(text: Any) -> str:
    return str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""


def _answer(
    target: Target, scenario: str, signature: str, transitions: Mapping[tuple[str, str, str], Sequence[Transition]], machine: str
) -> tuple[str, str, str, bool, str]:
    """(answer, release, before, exact, conditions) from the attribution on the target's line.

    transitions: the `introduced` ones by (scenario, signature, axis) (`_introduced`)."""
    held = dict(target.held)
    for t in transitions.get((scenario, signature, target.axis), ()):
        if dict(t.held) == held:
            if machine and t.machine != machine:
                continue
            return t.headline(), t.after, t.before, t.exact, t.conditions()
    text = f"fails with {target.axis} {target.release}"
    return text, target.release, "", False, f"with {held_text(target.held)}" + (f" on {machine}" if machine else "")


def _introduced(transitions: Iterable[Transition]) -> dict[tuple[str, str, str], list[Transition]]:
    """The `introduced` transitions by (scenario, signature, axis), in their order: each finding
    looks its answer up, rather than reading every transition (a suite's thousands, per finding)."""
    found: dict[tuple[str, str, str], list[Transition]] = defaultdict(list)
    for t in transitions:
        if t.kind == "introduced":
            found[(t.scenario, t.signature, t.axis)].append(t)
    return found


def _sweep_failures(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The failing outcomes of the user's own sweeps (not a watch's), by scenario, read once."""
    found: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] in FAILURES and not is_watch_run(str(row.get("run_id") or "")):
            found[str(row["scenario"])].append(row)
    return found


def _known_in(failures: Iterable[Mapping[str, Any]], signature: str, axis: str, good_version: str, tested: str) -> str:
    """A cell of the user's own sweeps that shows the same failure with a newer release of `axis`
    than the known-good set's (up to the one tested): the watch did not find it, the sweep did.

    failures: the sweeps' failing outcomes of the scenario (`_sweep_failures`)."""
    low, high = release(good_version), release(tested)
    if low is None or high is None:
        return ""
    for row in failures:
        point = points(row).get(axis)
        version = point.release if point is not None else None
        if version is not None and signature_of(row) == signature and Version(low.public) < Version(version.public) <= high:
            return str(row.get("cell_id") or "")
    return ""


def verdict(
    good: GuardedSet,
    targets: Sequence[Target],
    rows: Sequence[Mapping[str, Any]],
    watch_rows: Sequence[Mapping[str, Any]],
    transitions: Sequence[Transition],
    machine: str = "",
    quiet: Quiet = NO_QUIET,
) -> list[TargetResult]:
    """What each target's stored outcomes say against the known-good set.

    rows: every outcome on this machine (for `known` failures); watch_rows: the outcomes of this
    watch's run (the targets' cells); transitions: the attribution of `rows` with the index's releases;
    quiet: the quiet tests the rows hold as one stand-in (`analysis.quiet`): a pass in every cell.
    """
    good_statuses = dict(good.statuses)
    good_versions = dict(good.versions)
    failures, introduced_by = _sweep_failures(rows), _introduced(transitions)
    results = []
    for target in targets:
        mine = rows_of(target, watch_rows)
        by_scenario: dict[str, list[Mapping[str, Any]]] = {}
        for row in mine:
            by_scenario.setdefault(str(row["scenario"]), []).append(row)
        statuses = _with_quiet({s: fold_statuses(str(r["status"]) for r in found) for s, found in by_scenario.items()}, quiet)
        cell_id = min((str(r.get("cell_id") or "") for r in mine), default="")
        findings = []
        for scenario in good.guarded:
            word = statuses.get(scenario, "")
            if word == Status.PASS:  # a quiet test's too: its stand-in's rows are its
                continue
            found = by_scenario.get(scenario, [])
            if not found:
                findings.append(Finding("not_run", scenario, target.axis, target.release, "", cell_id=cell_id))
                continue
            failing = [r for r in found if r["status"] in FAILURES]
            if not failing:
                message = _first_line(next((r.get("message") for r in found if r["status"] != Status.PASS), ""))
                findings.append(Finding("no_evidence", scenario, target.axis, target.release, word, cell_id=cell_id, message=message))
                continue
            signature = _common_signature(failing)
            first_seen = min(str(r.get("started_at") or "")[:19] for r in failing)
            known = _known_in(failures.get(scenario, ()), signature, target.axis, good_versions.get(target.axis, ""), target.release)
            answer, introduced, before, exact, conditions = _answer(target, scenario, signature, introduced_by, machine)
            findings.append(
                Finding(
                    "known" if known else "regression",
                    scenario,
                    target.axis,
                    target.release,
                    word,
                    signature,
                    answer,
                    introduced,
                    before,
                    exact,
                    conditions,
                    cell_id,
                    first_seen,
                    known,
                )
            )
        fixed = tuple(s for s in sorted(statuses) if statuses[s] == Status.PASS and good_statuses.get(s, "").split(" ")[0] in FAILURES)
        results.append(TargetResult(target, cell_id, tuple(sorted(statuses.items())), tuple(findings), fixed))
    return results


# -- the report ---------------------------------------------------------------------------------------
def _label(names: Sequence[str]) -> str:
    """One name as it is, or `3 tests in tests/test_x.py` for several tests of one file (or class)."""
    if len(names) == 1:
        return names[0]
    groups = {group_of(n) for n in names}
    return f"{len(names)} tests in {next(iter(groups)) if len(groups) == 1 else f'{len(groups)} files'}"


def grouped(findings: Iterable[Finding]) -> list[Finding]:
    """Findings of one kind, signature, answer and status in one test file (or class) as one,
    its `scenario` naming them all; a scenario's finding stays its own.

    >>> found = [Finding("regression", f"t/test_a.py::test_{n}", "peft", "0.20.0", "error", "KeyError: <key>") for n in "xy"]
    >>> [f.scenario for f in grouped(found)]
    ['2 tests in t/test_a.py']
    """
    groups: dict[tuple[str, ...], list[Finding]] = {}
    for f in findings:
        key = (f.kind, group_of(f.scenario), f.axis, f.tested, f.status, f.signature, f.answer, f.conditions, f.known_in)
        groups.setdefault(key, []).append(f)
    return [replace(members[0], scenario=_label([m.scenario for m in members])) for members in groups.values()]


def listing(names: Iterable[str]) -> str:
    """Scenarios by name, tests by file (or class): `parse, tests/test_x.py (12 tests)`.

    >>> listing(["parse", "t/test_a.py::test_x", "t/test_a.py::test_y[1]"])
    'parse, t/test_a.py (2 tests)'
    """
    by_group: dict[str, list[str]] = {}
    for name in names:
        by_group.setdefault(group_of(name), []).append(name)
    return ", ".join(g if found == [g] else f"{g} ({len(found)} test{'s' if len(found) > 1 else ''})" for g, found in by_group.items())


def _fixed_groups(scenarios: Sequence[str]) -> list[str]:
    by_group: dict[str, list[str]] = {}
    for name in scenarios:
        by_group.setdefault(group_of(name), []).append(name)
    return [_label(found) for found in by_group.values()]


@dataclass(frozen=True)
class WatchReport:
    """Everything `harness watch` says, in text, markdown (a CI summary, an issue) or JSON."""

    db: str
    machine: str
    exclude_newer: str  # "" when the index was asked as of now
    good: GuardedSet
    held: tuple[tuple[str, str], ...]
    new: tuple[tuple[str, tuple[str, ...]], ...]
    results: tuple[TargetResult, ...] = ()
    refinement: str = ""  # the refinement's line (`refinement: 1 probe cell(s) …`)
    built: bool = True  # False for --dry-run
    notes: tuple[str, ...] = field(default_factory=tuple)  # axes not watched, scenarios not found, …
    # cells of the suite that ran no test and were not allowed to ("… selects 0 of N collected tests"): exit 1
    ran_no_test: tuple[str, ...] = ()

    @property
    def regressions(self) -> list[Finding]:
        return [f for r in self.results for f in r.regressions]

    @property
    def exit_status(self) -> int:
        return EXIT_REGRESSION if self.regressions or self.ran_no_test else EXIT_NOTHING_BROKE

    def headline(self) -> str:
        count = len(self.regressions)
        if count:
            names = "; ".join(f"{f.scenario} with {f.axis} {f.release or f.tested}" for f in grouped(self.regressions))
            return f"{count} regression(s): {names}"
        if self.ran_no_test:
            return f"no test ran in {len(self.ran_no_test)} cell(s): {'; '.join(self.ran_no_test)}"
        if not self.new:
            return "nothing new: no release newer than the results file holds"
        passing = [r.target.describe() for r in self.results if r.passes(self.good.guarded)]
        return "no regression" + (f"; new known-good: {', '.join(passing)}" if passing else "")

    def _releases_as_of(self) -> str:
        return f"releases up to {self.exclude_newer}" if self.exclude_newer else "releases as of now"

    def text(self) -> list[str]:
        lines = [f"watch {self.db} on {self.machine or 'this machine'} ({self._releases_as_of()})"]
        lines.append(f"{self.good.named()}: {self.good.describe()} (cell {self.good.cell_id})")
        lines.append(f"  guards {len(self.good.guarded)} scenario(s): {listing(self.good.guarded)}")
        if self.good.dropped:
            lines.append(f"  not guarded (no tested set passes them with the others): {listing(self.good.dropped)}")
        held = dict(self.held)
        new = dict(self.new)
        for axis, newest in self.held:
            lines.append(f"{axis}: holds {newest}; new: {', '.join(new[axis]) if axis in new else 'none'}")
        for result in self.results:
            t = result.target
            if not result.ran:
                lines.append(f"{t.describe()}: not built" + (" (--dry-run)" if not self.built else ""))
                continue
            ok = sum(1 for s in self.good.guarded if dict(result.statuses).get(s) == Status.PASS)
            lines.append(f"{t.axis} {t.release} (after {held.get(t.axis, '?')}): {ok} of {len(self.good.guarded)} guarded pass")
            for finding in grouped(result.findings):
                lines.append(f"  {finding.kind.upper().replace('_', ' ')} {finding.line()}")
            for scenario in _fixed_groups(result.fixed):
                lines.append(f"  FIXED {scenario}: fails in the known-good set, passes with {t.axis} {t.release}")
        if self.refinement:
            lines.append(self.refinement)
        lines += self.notes
        lines.append(f"exit {self.exit_status}: {self.headline()}")
        return lines

    def markdown(self) -> str:
        icon = "❌" if self.exit_status else "✅"
        out = [f"## {icon} harness watch: {self.headline()}", ""]
        out.append(f"Results file `{self.db}`, machine **{self.machine or '?'}**, {self._releases_as_of()}.")
        out.append("")
        guards = f"guarding {len(self.good.guarded)} scenario(s)"
        out.append(f"**{self.good.named().capitalize()}:** {self.good.describe()} (cell `{self.good.cell_id}`), {guards}.")
        out.append("")
        if self.regressions:
            out += [
                "### Regressions",
                "",
                "| scenario | signature | introduced in | passes in | held, machine | status |",
                "|---" * 6 + "|",
            ]
            for f in grouped(self.regressions):
                where = f"{f.axis} **{f.release}**" if f.exact else f"{f.axis} ≤ {f.release} (range: {table_cell(f.answer)})"
                held = table_cell(f.conditions.removeprefix("with "))
                out.append(f"| `{f.scenario}` | `{table_cell(f.signature)}` | {where} | {f.before or '—'} | {held} | {f.status} |")
            out.append("")
        out += ["### New releases", "", "| axis | held | new | tested | guarded scenarios |", "|---|---|---|---|---|"]
        results = {r.target.axis: r for r in self.results}
        new = dict(self.new)
        for axis, newest in self.held:
            result = results.get(axis)
            if result is None:
                out.append(f"| {axis} | {newest} | none | — | — |")
                continue
            ok = sum(1 for s in self.good.guarded if dict(result.statuses).get(s) == Status.PASS)
            tested = f"{result.target.release}" if result.ran else f"{result.target.release} (not built)"
            out.append(f"| {axis} | {newest} | {', '.join(new.get(axis, ()))} | {tested} | {ok} of {len(self.good.guarded)} pass |")
        others = [f for r in self.results for f in grouped(r.findings) if f.kind != "regression"]
        fixed = [(r.target, s) for r in self.results for s in _fixed_groups(r.fixed)]
        if others or fixed:
            out += ["", "### Also"]
            out += [f"- {f.kind.replace('_', ' ')}: {table_cell(f.line())}" for f in others]
            out += [f"- fixed: `{s}` fails in the known-good set and passes with {t.axis} {t.release}" for t, s in fixed]
        if self.refinement or self.notes:
            out.append("")
            out += [f"_{line}_" for line in (self.refinement, *self.notes) if line]
        if self.regressions:
            out += ["", "File one upstream: `harness report --signature '<part of the signature>'` writes the issue body."]
        return "\n".join(out) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_status": self.exit_status,
            "headline": self.headline(),
            "db": self.db,
            "machine": self.machine,
            "exclude_newer": self.exclude_newer,
            "known_good": {
                "machine_class": self.good.machine_class,
                "versions": dict(self.good.versions),
                "cell_id": self.good.cell_id,
                "guarded": list(self.good.guarded),
                "dropped": list(self.good.dropped),
                "statuses": dict(self.good.statuses),
            },
            "held": dict(self.held),
            "new": {axis: list(v) for axis, v in self.new},
            "targets": [r.to_dict(self.good.guarded) for r in self.results],
            "regressions": [f.to_dict() for f in self.regressions],
            "refinement": self.refinement,
            "built": self.built,
            "notes": list(self.notes),
        }

    def json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
