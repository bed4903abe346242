"""Pins: the newest version set on which every chosen scenario passes, with its evidence. Pure.

A *candidate* is one combination of exact installed versions (a cell; its repeats, its runs
and the machines it ran on are pooled) that meets the constraints. It *qualifies* when every
chosen scenario has outcomes there and every one of them passed, on every machine it ran on:
one failing repeat (a flaky cell), one missing scenario, one `not_applicable` or one
`inconclusive` (the scenario never reached the state it checks) disqualifies it; `--machine`
narrows the evidence to one machine class (`rows.machine_class`: `cpu`, `2x NVIDIA H200`), and
`--gpu` and `--platform` to the runs whose GPU or platform names match. Among the qualifying candidates the newest
wins, compared axis by axis in the user's ranking, in the harness's one order of versions
(`versions.order_key`), with one stated preference on top: a released version beats a git or
path source, because a pin is what people paste. For every newer version that lost, the
result names the scenario and signature that excluded it; when nothing qualifies, the
scenario that fails in every candidate. The evidence names the machines it passed on.

Over a results file, the Pin page decides which candidates qualify in SQL (`storage.pins`) and
hands `choose_standings` their summaries (`candidates.Standing`): the same result as `choose`,
which reads every row, with outcomes read only for the winner's evidence and the blockers named.

A candidate's outcomes, and whether each scenario passed there, are `analysis.candidates`'; the
machine classes (which the rows hold, the one the user names, the newest run's) `analysis.machines`';
the known-good set per machine class, chosen here after dropping what keeps every cell out,
`analysis.knowngood`'s. A selection of tests (`selection.select_tests`: node ids, files, classes,
folders) expands to the stored node ids it names. Writing the chosen set out for people to
install (requirements.txt, constraints.txt, pylock.toml, the pip and uv lines) is `analysis.export`'s.

>>> rows = [
...     {"cell_id": f"acc{acc}", "scenario": "load", "status": status, "repeat": 0, "run_id": "r1", "gpu": "cpu",
...      "versions": {"torch": "2.13.0", "accelerate": acc}, "signature": sig}
...     for acc, status, sig in [("1.13.0", "pass", ""), ("1.14.0", "error", "TypeError: x")]
... ]
>>> result = choose(rows, ["load"])
>>> dict(result.versions), [e.describe() for e in result.excluded]
({'torch': '2.13.0', 'accelerate': '1.13.0'}, ['accelerate 1.14.0: load error: TypeError: x (cell acc1.14.0; run r1)'])
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from harness.analysis.candidates import Candidate, Failure, ScenarioResult, Standing, breaks_collection
from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet, earliest
from harness.analysis.rows import (
    CellFacts,
    axis_sort,
    by_cell,
    canonical,
    cell_facts,
    group_of,
    json_map,
    machine_class,
    machine_of,
    to_minute,
)
from harness.analysis.status import FAILURES, Status
from harness.analysis.versions import release, version_key
from harness.errors import BadInput

#: Which axis decides first when two passing sets differ: the libraries people upgrade for.
DEFAULT_RANKING = ("transformers", "peft", "accelerate", "bitsandbytes", "torch")
_FIX = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*$")
_UNTESTED = "not tested with the pinned versions of the other axes"
#: A Python version as a cell records it (a path setting names an interpreter on another host instead).
PYTHON_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
#: More chosen scenarios than this (a selection of tests): the text names them by file or class.
_NAMED = 6
#: Reasons named per excluded version; the rest are counted.
_BLOCKERS = 3


def preference(value: str | None) -> tuple[Any, ...]:
    """Newer sorts higher; a release above any source (the pin's one rule on top of `version_key`)."""
    if value is None:
        return (-1,)
    return (release(value) is not None, version_key(value))


# -- constraints -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Constraints:
    """What the pin may not change: axes held to a version or range, and where it must have passed.

    fixed: (axis, specifier) pairs: `==2.13.0` (which also admits `2.13.0+cpu`, as PEP 440 does),
    `<5.20`, or `==git+https://…` for a source. gpu / platform: case-insensitive substrings of
    the run's GPU name (`H200`, `cpu`) and platform (`linux-x86_64`). machine: one machine class
    exactly (`cpu`, `2x NVIDIA H200`; see `find_machine`), "" for any.
    """

    fixed: tuple[tuple[str, str], ...] = ()
    gpu: str = ""
    platform: str = ""
    machine: str = ""

    @classmethod
    def parse(cls, fixes: Iterable[str] = (), gpu: str = "", platform: str = "", machine: str = "") -> Constraints:
        """From `--fix torch=2.13.0` / `torch==2.13.0` / `transformers<5.20` / `transformers>=5.6,<5.20`."""
        fixed = []
        for text in fixes:
            match = _FIX.match(text)
            spec = match.group(2) if match else ""
            if not match or not spec:
                raise BadInput(f"--fix {text!r} must look like axis=version or axis<specifier>, e.g. torch=2.13.0 or transformers<5.20")
            if spec.startswith("=") and not spec.startswith("=="):
                spec = "=" + spec  # the `torch=2.13.0` shorthand
            value = spec.removeprefix("==").strip()
            if release(value) is None and not value.startswith(("git+", "/", ".", "file:")):
                try:
                    SpecifierSet(spec)
                except InvalidSpecifier:
                    raise BadInput(
                        f"--fix {text!r}: {spec!r} is neither a version nor a specifier; use e.g. torch=2.13.0 or transformers<5.20"
                    ) from None
            fixed.append((canonical(match.group(1)), spec))
        return cls(tuple(fixed), gpu.strip(), platform.strip(), machine.strip())

    def admits_row(self, row: Mapping[str, Any]) -> bool:
        gpu, platform = str(row.get("gpu") or ""), str(row.get("platform") or "")
        if self.machine and machine_class(row) != self.machine:
            return False
        return self.gpu.lower() in gpu.lower() and self.platform.lower() in platform.lower()

    def admits(self, versions: Mapping[str, str], requested: Mapping[str, str] | None = None) -> bool:
        return all(self._admits_one(spec, versions.get(axis), (requested or {}).get(axis)) for axis, spec in self.fixed)

    @staticmethod
    def _admits_one(spec: str, value: str | None, requested: str | None) -> bool:
        if value is None:
            return False
        exact = spec.removeprefix("==").strip()
        version = release(value)
        if version is None or (release(exact) is None and not any(c in spec for c in "<>!~,")):
            # A source: the fix names the URL or path (with or without the commit).
            return any(v and (v == exact or v.startswith(exact)) for v in (value, requested))
        try:
            return SpecifierSet(spec).contains(version, prereleases=True)
        except InvalidSpecifier:
            return False

    def describe(self) -> str:
        parts = [f"{axis}{spec}" for axis, spec in self.fixed]
        if self.machine:
            parts.append(f"machine {self.machine}")
        if self.gpu:
            parts.append(f"gpu ~ {self.gpu}")
        if self.platform:
            parts.append(f"platform ~ {self.platform}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Blocker:
    """One reason a scenario did not pass, and the cells (and runs) that showed it."""

    scenario: str
    reason: str  # "error: TypeError: … @ accelerate/…", "flaky: 1 of 3 repeat(s) failed (…)", "no outcome"
    cells: tuple[str, ...]
    runs: tuple[str, ...] = ()

    def describe(self) -> str:
        where = f"cell {self.cells[0]}" if len(self.cells) == 1 else f"{len(self.cells)} cells"
        runs = f"; run {', '.join(self.runs)}" if self.runs else ""
        return f"{self.scenario} {self.reason} ({where}{runs})"

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "reason": self.reason, "cells": list(self.cells), "runs": list(self.runs)}


# -- candidates ------------------------------------------------------------------------------
def candidates_of(
    groups: Mapping[CellFacts, Sequence[Mapping[str, Any]]], scenarios: set[str], constraints: Constraints
) -> list[Candidate]:
    """The candidates that `constraints` admit, from rows by cell (`by_cell`), each with its rows of `scenarios`."""
    # Whether rows are admitted and which cell they join depend only on their cell's columns:
    # decided once per cell, not once per outcome.
    cells: dict[tuple[tuple[str, str], ...], Candidate] = {}
    uncollected: dict[tuple[tuple[str, str], ...], set[str]] = defaultdict(set)
    unclean: dict[tuple[tuple[str, str], ...], set[str]] = defaultdict(set)
    for facts, rows in groups.items():
        if not rows or not constraints.admits_row(rows[0]):
            continue
        key = tuple(sorted(facts.installed.items()))
        cell = cells.get(key) if key else None
        if key and cell is None:
            cell = Candidate(dict(facts.installed))
        joined = _join(cell, rows, scenarios, uncollected[key], unclean[key])
        if joined and cell is not None:  # the cell's requested versions, from the first rows that join it
            cells.setdefault(key, cell)
            for axis, value in facts.asked.items():
                cell.requested.setdefault(axis, value)
    for key, cell in cells.items():
        cell.uncollected = tuple(sorted(uncollected.get(key, ())))
        # `Candidate.clean` from the same pass, not a second over its rows (255,000 at 2,000,000 outcomes)
        cell.known_clean = cell.rows.keys() - unclean[key]
    return [c for c in cells.values() if constraints.admits(c.versions, c.requested)]


def _join(cell: Candidate | None, rows: Sequence[Mapping[str, Any]], scenarios: set[str], uncollected: set[str], unclean: set[str]) -> bool:
    """Add one cell's rows of `scenarios` to `cell` (none where the cell has no versions), to
    `unclean` those of them with an outcome that is no pass or that is flaky across runs (not
    `Candidate.clean`), and to `uncollected` the others that kept tests from being collected;
    whether any row joined."""
    joined = False
    by_scenario = cell.rows if cell is not None else None
    ok = Status.PASS.value
    for row in rows:  # 400,000 rows for a suite's known-good set: nothing here but what must be
        scenario = str(row["scenario"])
        if scenario not in scenarios:
            if "::" not in scenario and breaks_collection(row):  # a test's own row never breaks collection
                uncollected.add(scenario)
        elif by_scenario is not None:
            by_scenario[scenario].append(row)
            if row["status"] != ok or "flaky_across" in row:
                unclean.add(scenario)
            joined = True
    return joined


def admitted_rows(rows: Iterable[Mapping[str, Any]], constraints: Constraints | None) -> list[Mapping[str, Any]]:
    """The rows `constraints` admit, decided once per cell."""
    if constraints is None:
        return list(rows)
    per_cell: dict[CellFacts, bool] = {}
    out = []
    for row in rows:
        facts = cell_facts(row)
        ok = per_cell.get(facts)
        if ok is None:
            ok = per_cell[facts] = constraints.admits_row(row)
        if ok:
            out.append(row)
    return out


def standings(pairs: Iterable[Mapping[str, Any]], constraints: Constraints) -> list[Standing]:
    """The candidates `constraints` admit, from one row per (run, cell) pair that holds a chosen
    scenario (`storage.pins.pairs`, in the order `by_cell` meets them): `candidates_of`'s rule, per pair."""
    cells: dict[tuple[tuple[str, str], ...], Standing] = {}
    for pair in pairs:
        if not constraints.admits_row(pair):
            continue
        facts = cell_facts(pair)
        key = tuple(sorted(facts.installed.items()))
        if not key:  # no versions: no candidate, as `candidates_of` joins such a cell to none
            continue
        cell = cells.setdefault(key, Standing(dict(facts.installed)))
        cell.pairs.append(pair)
        for axis, value in facts.asked.items():
            cell.requested.setdefault(axis, value)
    return [c for c in cells.values() if constraints.admits(c.versions, c.requested)]


# -- the result ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Exclusion:
    """A newer version of one axis that the pin does not use, and why."""

    axis: str
    version: str
    blockers: tuple[Blocker, ...] = ()
    note: str = ""  # "not tested with the pinned versions of the other axes; passes with transformers 5.6.2 …"

    def describe(self) -> str:
        parts = [self.note] if self.note else []
        parts += [b.describe() for b in self.blockers[:_BLOCKERS]]
        if len(self.blockers) > _BLOCKERS:  # a selection of tests: one line, not one per failing test
            parts.append(f"and {len(self.blockers) - _BLOCKERS} more")
        return f"{self.axis} {self.version}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "version": self.version,
            "note": self.note,
            "blockers": [b.to_dict() for b in self.blockers],
            "description": self.describe(),
        }


@dataclass(frozen=True)
class ScenarioEvidence:
    scenario: str
    passed: int
    runs: tuple[str, ...]


@dataclass(frozen=True)
class PinResult:
    """The chosen set (empty `versions` when nothing qualifies) and the evidence for it."""

    scenarios: tuple[str, ...]
    constraints: Constraints
    ranking: tuple[str, ...]
    candidates: int  # cells that meet the constraints
    qualifying: int  # of those, cells where every scenario passed
    versions: tuple[tuple[str, str], ...] = ()  # axis -> exact version, in reading order
    cell_ids: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()
    first_seen: str = ""
    last_seen: str = ""
    gpus: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    python: str = ""
    machines: tuple[str, ...] = ()  # the machines the evidence ran on (it passed on each), platform and Python included
    freeze: tuple[tuple[str, str], ...] = ()  # every installed package -> version or URL
    inherited: tuple[tuple[str, str], ...] = ()  # taken from the base interpreter
    evidence: tuple[ScenarioEvidence, ...] = ()
    excluded: tuple[Exclusion, ...] = ()
    blocking: tuple[Blocker, ...] = ()  # when nothing qualifies: why, most cells first
    failing: tuple[tuple[str, int], ...] = ()  # when nothing qualifies: scenario -> candidate cells it fails in
    selection: tuple[str, ...] = ()  # the tests as the user selected them (node ids, files, classes), when so
    left_out: tuple[str, ...] = ()  # selected tests that never gave evidence on the machine (skipped there)

    @property
    def found(self) -> bool:
        return bool(self.versions)

    @property
    def platform(self) -> str:
        return self.platforms[0] if len(self.platforms) == 1 else ""

    def header(self) -> str:
        when = self.last_seen[:10] if self.first_seen[:10] == self.last_seen[:10] else f"{self.first_seen[:10]}..{self.last_seen[:10]}"
        return (
            f"# harness pin: the newest set on which {describe_names(self.scenarios)} passed\n"
            f"# evidence: cell {', '.join(self.cell_ids)}; run {', '.join(self.runs)}; {when}; "
            f"on {'; '.join(self.machines) or '?'}\n"
        )

    def describe(self) -> list[str]:
        """The lines `harness pin` prints."""
        lines = [
            f"pin for {describe_names(self.scenarios)} (rank: {', '.join(self.ranking)}"
            + (f"; constraints: {self.constraints.describe()}" if self.constraints.describe() else "")
            + ")"
        ]
        if self.selection:
            lines.append(f"  selected by {', '.join(self.selection)}")
        if self.left_out:
            where = f"machine {self.constraints.machine}" if self.constraints.machine else "the machines chosen"
            lines.append(f"  left out: {describe_names(self.left_out)}, never run on {where} (skipped or not applicable there)")
        if not self.found:
            everywhere = [s for s, count in self.failing if count == self.candidates]
            if everywhere:
                names, verb = describe_names(everywhere), "does" if len(everywhere) == 1 else "do"
                lines.append(f"nothing passes: {names} {verb} not pass in any of the {self.candidates} candidate cell(s)")
            else:
                lines.append(f"nothing passes: none of the {self.candidates} candidate cell(s) passes every chosen scenario")
            for scenario, count in self.failing[: _NAMED * 2]:
                lines.append(f"  {scenario}: does not pass in {count} of {self.candidates} cell(s)")
                lines += [f"    {b.reason} ({len(b.cells)} cell(s), e.g. {b.cells[0]})" for b in self.blocking if b.scenario == scenario]
            if len(self.failing) > _NAMED * 2:
                lines.append(f"  … and {len(self.failing) - _NAMED * 2} more that do not pass somewhere (--json lists them)")
            return lines
        width = max(len(axis) for axis, _ in self.versions)
        lines += [f"  {axis:<{width}}  {value}" for axis, value in self.versions]
        lines.append(self.header().splitlines()[1].removeprefix("# "))
        if len(self.evidence) <= _NAMED:
            lines.append("  " + "; ".join(f"{e.scenario}: pass {e.passed}/{e.passed}" for e in self.evidence))
        else:
            lines.append(f"  {len(self.evidence)} tests: every outcome passed ({sum(e.passed for e in self.evidence)} outcome(s))")
        lines.append(f"{self.qualifying} of {self.candidates} candidate cell(s) pass every chosen scenario")
        if self.excluded:
            lines.append("newer versions not used:")
            lines += [f"  {e.describe()}" for e in self.excluded]
        else:
            lines.append("no newer version of any axis was tested: this is the newest stored set")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "scenarios": list(self.scenarios),
            "constraints": {
                "fixed": dict(self.constraints.fixed),
                "gpu": self.constraints.gpu,
                "platform": self.constraints.platform,
                "machine": self.constraints.machine,
            },
            "ranking": list(self.ranking),
            "candidates": self.candidates,
            "qualifying": self.qualifying,
            "versions": dict(self.versions),
            "cell_ids": list(self.cell_ids),
            "runs": list(self.runs),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "gpus": list(self.gpus),
            "platforms": list(self.platforms),
            "python": self.python,
            "machines": list(self.machines),
            "freeze": dict(self.freeze),
            "inherited": dict(self.inherited),
            "evidence": [{"scenario": e.scenario, "passed": e.passed, "runs": list(e.runs)} for e in self.evidence],
            "excluded": [e.to_dict() for e in self.excluded],
            "blocking": [b.to_dict() for b in self.blocking],
            "failing": dict(self.failing),
            "selection": list(self.selection),
            "left_out": list(self.left_out),
        }


# -- choosing --------------------------------------------------------------------------------
def full_ranking(ranking: Sequence[str], axes: Iterable[str]) -> tuple[str, ...]:
    """The user's ranking, then the axes it leaves out in reading order."""
    ranked = [canonical(a) for a in ranking]
    return (*ranked, *(a for a in axis_sort(set(axes)) if a not in ranked))


def choose(
    rows: Iterable[Mapping[str, Any]],
    scenarios: Sequence[str],
    constraints: Constraints | None = None,
    ranking: Sequence[str] = DEFAULT_RANKING,
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
    quiet: Quiet = NO_QUIET,
) -> PinResult:
    """The newest cell on which every scenario in `scenarios` passed, under `constraints`.

    rows: outcome rows shaped like `outcomes_v` (`Store.outcomes()`); repeats and runs of one
    combination of exact versions are pooled. ranking: the axis compared first, then the next;
    axes left out follow in reading order. cells: `rows` by cell (`by_cell`), when the caller has them.
    quiet: the tests the rows hold as one stand-in (`analysis.quiet`): each chosen one is asked of
    the stand-in, which passed where each of them did, and given its evidence.
    """
    constraints = constraints or Constraints()
    wanted = tuple(dict.fromkeys(scenarios))
    groups = cells if cells is not None else by_cell(rows)
    held = set(quiet.tests).intersection(wanted) if quiet else set()
    asked = (*(s for s in wanted if s not in held), STAND_IN) if held else wanted
    found = choose_among(candidates_of(groups, set(asked), constraints), asked, constraints, ranking)
    return as_asked(found, wanted, held) if held else found


def as_asked(found: PinResult, wanted: tuple[str, ...], held: set[str]) -> PinResult:
    """`found`, chosen with the stand-in asked for the quiet tests of `wanted` (`held`), as if each was asked."""
    evidence = {e.scenario: e for e in found.evidence}
    stand_in = evidence.pop(STAND_IN, None)
    if stand_in is not None:
        # each quiet test's evidence is the stand-in's (a constructor: `replace` 87,000 times took 0.3 s)
        evidence.update({s: ScenarioEvidence(s, stand_in.passed, stand_in.runs) for s in held})
    return replace(found, scenarios=wanted, evidence=tuple(evidence[s] for s in wanted if s in evidence))


def choose_among(cells: list[Candidate], wanted: tuple[str, ...], constraints: Constraints, ranking: Sequence[str]) -> PinResult:
    """`choose` over candidates already read (`candidates_of`); `knowngood` asks it of the candidates it narrowed."""
    order = full_ranking(ranking, {a for c in cells for a in c.versions})
    present_order = tuple(a for a in order if any(a in c.versions for c in cells))
    wanted_set = set(wanted)
    verdicts = {id(c): _Verdicts(c, wanted, wanted_set) for c in cells}
    qualifying = sorted((c for c in cells if not verdicts[id(c)].failing), key=lambda c: _rank_key(c, order), reverse=True)
    base = PinResult(wanted, constraints, present_order, len(cells), len(qualifying))
    if not qualifying:
        return _nothing_passes(base, cells, verdicts, wanted)
    chosen = qualifying[0]
    rows_of = chosen.all_rows
    latest = max(rows_of, key=lambda r: to_minute(r.get("started_at")))
    return replace(
        base,
        versions=tuple((a, chosen.versions[a]) for a in axis_sort(chosen.versions)),
        cell_ids=tuple(sorted({str(r.get("cell_id") or "") for r in rows_of})),
        runs=chosen.runs(),
        first_seen=min(to_minute(earliest(r)) for r in rows_of),
        last_seen=to_minute(latest.get("started_at")),
        gpus=tuple(sorted({str(r.get("gpu")) for r in rows_of if r.get("gpu")})),
        platforms=tuple(sorted({str(r.get("platform")) for r in rows_of if r.get("platform")})),
        # the cell's Python as a version (a path setting names an interpreter on another host)
        python=str(latest.get("python") or "") if PYTHON_VERSION.match(str(latest.get("python") or "")) else machine_of(latest).python,
        machines=chosen.machines(),
        freeze=tuple(sorted(json_map(latest.get("installed")).items())),
        inherited=tuple(sorted(json_map(latest.get("inherited")).items())),
        evidence=tuple(ScenarioEvidence(s, verdicts[id(chosen)][s].passed, chosen.runs(s)) for s in wanted),
        excluded=tuple(_exclusions(chosen, cells, qualifying, order, lambda group: _blockers(group, verdicts, wanted))),
    )


def _rank_key(cell: _Ranked, order: Sequence[str]) -> tuple[Any, ...]:
    return (*(preference(cell.versions.get(axis)) for axis in order), cell.cell_id)


class _Verdicts:
    """One cell's results over the wanted scenarios, worked out where asked: which do not pass
    there (`failing`, in the wanted order, from `Candidate.passes`), and any one's result by name.
    A result object for each of a suite's 20,000 tests in each cell was most of a pin's time."""

    def __init__(self, cell: Candidate, wanted: Sequence[str], wanted_set: set[str]) -> None:
        ok = cell.passes(wanted_set)
        self.cell = cell
        self.failing = [s for s in wanted if s not in ok]

    def __getitem__(self, scenario: str) -> ScenarioResult:
        return self.cell.result(scenario)


def _blockers(cells: Iterable[Candidate], verdicts: Mapping[int, _Verdicts], scenarios: Sequence[str]) -> list[Blocker]:
    """(scenario, reason) -> the cells showing it, most cells first."""
    failures = (
        (scenario, verdicts[id(cell)][scenario].reason, (cell.cell_id,), cell.runs(scenario))
        for cell in cells
        for scenario in verdicts[id(cell)].failing
    )
    return blockers_from(failures, scenarios)


def blockers_from(failures: Iterable[Failure], scenarios: Sequence[str]) -> list[Blocker]:
    """Each (scenario, reason) with the cells showing it and their runs, most cells first."""
    found: dict[tuple[str, str], tuple[list[str], set[str]]] = {}
    for scenario, reason, cell_ids, runs in failures:
        cells, seen = found.setdefault((scenario, reason), ([], set()))
        cells.extend(cell_ids)
        seen.update(runs)
    blockers = [Blocker(scenario, reason, tuple(sorted(cells)), tuple(sorted(runs))) for (scenario, reason), (cells, runs) in found.items()]
    rank = {s: k for k, s in enumerate(scenarios)}  # not scenarios.index: thousands of blockers over thousands of tests
    return sorted(blockers, key=lambda b: (-len(b.cells), rank[b.scenario], b.reason))


class _Ranked(Protocol):
    """A candidate as ranking and exclusions read it: a `Candidate`, or a `Standing`."""

    @property
    def versions(self) -> dict[str, str]: ...

    @property
    def cell_id(self) -> str: ...


def _exclusions(
    chosen: _Ranked,
    cells: Sequence[_Ranked],
    qualifying: Sequence[_Ranked],
    order: Sequence[str],
    blockers_of: Callable[[list[Any]], list[Blocker]],
) -> list[Exclusion]:
    """For every axis and every tested version newer than the chosen one: what kept it out
    (`blockers_of` some of `cells`: why they do not pass)."""
    by_key = {tuple(sorted(c.versions.items())): c for c in cells}
    found = []
    for axis in order:
        mine = preference(chosen.versions.get(axis))
        newer = {c.versions[axis] for c in cells if axis in c.versions and preference(c.versions[axis]) > mine}
        for value in sorted(newer, key=preference, reverse=True):
            # The neighbour: the chosen set with only this axis changed. Its failures are the answer.
            neighbour = by_key.get(tuple(sorted({**chosen.versions, axis: value}.items())))
            if neighbour is not None:
                found.append(Exclusion(axis, value, tuple(blockers_of([neighbour]))))
                continue
            passing = [c for c in qualifying if c.versions.get(axis) == value]
            if passing:
                best = passing[0]  # `qualifying` is sorted newest first
                others = [
                    f"{a} {best.versions.get(a, '(none)')}" for a in order if a != axis and best.versions.get(a) != chosen.versions.get(a)
                ]
                found.append(Exclusion(axis, value, (), f"{_UNTESTED}; passes with {', '.join(others)} (cell {best.cell_id})"))
                continue
            tested = [c for c in cells if c.versions.get(axis) == value]
            note = f"{_UNTESTED}; fails in every cell that has it"
            found.append(Exclusion(axis, value, tuple(blockers_of(tested)), note))
    return found


def _nothing_passes(base: PinResult, cells: list[Candidate], verdicts: Mapping[int, _Verdicts], scenarios: Sequence[str]) -> PinResult:
    failing = Counter(s for c in cells for s in verdicts[id(c)].failing)
    return nothing_passes(base, failing, _blockers(cells, verdicts, scenarios), scenarios)


def nothing_passes(base: PinResult, failing: Mapping[str, int], blocking: Sequence[Blocker], scenarios: Sequence[str]) -> PinResult:
    """`base` when no candidate qualifies: why (`blocking`), and in how many cells each scenario fails (`failing`)."""
    rank = {s: k for k, s in enumerate(scenarios)}
    ranked = sorted(failing.items(), key=lambda item: (-item[1], rank[item[0]]))
    return replace(base, blocking=tuple(blocking), failing=tuple(ranked))


# -- choosing among candidates the store summed up --------------------------------------------
class StandingReads(Protocol):
    """What `choose_standings` asks of the outcomes beyond the candidates' summaries (`storage.pins`)."""

    def evidence(self, cell: Standing) -> Mapping[str, tuple[int, tuple[str, ...]]]:
        """scenario -> (its outcomes, its runs) in `cell`, for those that have any there."""
        ...

    def first_at(self, cell: Standing, minute: str) -> tuple[str, str] | None:
        """The (run, cell) of `cell`'s first outcome (in `Candidate.all_rows`' order) that started in `minute`."""
        ...

    def failures(self, cells: Sequence[Standing]) -> Iterable[Failure]:
        """Why each scenario that does not pass in one of `cells` does not."""
        ...

    def failing_tests(self, cells: Sequence[Standing]) -> Mapping[str, int]:
        """scenario -> in how many of `cells` it does not pass (those that pass in all: not listed)."""
        ...


def choose_standings(
    cells: list[Standing], wanted: tuple[str, ...], constraints: Constraints, ranking: Sequence[str], reads: StandingReads
) -> PinResult:
    """`choose_among` over candidates whose verdicts the store decided (`Standing.failing`): the same
    result, reading outcomes (`reads`) only for the winner's evidence and for the blockers it names."""
    order = full_ranking(ranking, {a for c in cells for a in c.versions})
    present_order = tuple(a for a in order if any(a in c.versions for c in cells))
    qualifying = sorted((c for c in cells if not c.failing), key=lambda c: _rank_key(c, order), reverse=True)
    base = PinResult(wanted, constraints, present_order, len(cells), len(qualifying))

    def blockers_of(group: Sequence[Standing]) -> list[Blocker]:
        return blockers_from(reads.failures(group), wanted) if group else []

    if not qualifying:
        return nothing_passes(base, reads.failing_tests(cells) if cells else {}, blockers_of(cells), wanted)
    chosen = qualifying[0]
    last_seen, latest = _latest_pair(chosen, reads)
    found = reads.evidence(chosen)
    python = str(latest.get("python") or "")
    return replace(
        base,
        versions=tuple((a, chosen.versions[a]) for a in axis_sort(chosen.versions)),
        cell_ids=tuple(sorted({str(p.get("cell_id") or "") for p in chosen.pairs})),
        runs=chosen.runs(),
        first_seen=min("" if p["unstarted"] else to_minute(p["earliest"]) for p in chosen.pairs),  # a row without a start: ""
        last_seen=last_seen,
        gpus=tuple(sorted({str(p.get("gpu")) for p in chosen.pairs if p.get("gpu")})),
        platforms=tuple(sorted({str(p.get("platform")) for p in chosen.pairs if p.get("platform")})),
        python=python if PYTHON_VERSION.match(python) else machine_of(latest).python,
        machines=chosen.machines(),
        freeze=tuple(sorted(json_map(latest.get("installed")).items())),
        inherited=tuple(sorted(json_map(latest.get("inherited")).items())),
        evidence=tuple(ScenarioEvidence(s, *found.get(s, (0, ()))) for s in wanted),
        excluded=tuple(_exclusions(chosen, cells, qualifying, order, blockers_of)),
    )


def _latest_pair(chosen: Standing, reads: StandingReads) -> tuple[str, Mapping[str, Any]]:
    """(the minute of `chosen`'s latest outcome, the pair holding the one `choose_among` takes as
    latest: the first, in its rows' order, that started in that minute)."""
    minutes = [to_minute(p.get("latest")) for p in chosen.pairs]
    top = max(minutes)
    tied = [p for p, minute in zip(chosen.pairs, minutes) if minute == top]
    if len(tied) > 1:  # rare: several runs of one set within a minute; their rows say which comes first
        where = reads.first_at(chosen, top)
        tied = [p for p in tied if (p.get("run_id"), p.get("cell_id")) == where] or tied
    return top, tied[0]


# -- names and selections ----------------------------------------------------------------------
def describe_names(names: Sequence[str]) -> str:
    """A few scenarios by name; many tests by where they live.

    >>> describe_names(["load", "lora"]), describe_names([f"tests/test_x.py::test_{i}" for i in range(40)])
    ('load, lora', '40 tests in tests/test_x.py')
    """
    if len(names) <= _NAMED:
        return ", ".join(names)
    groups = sorted({group_of(n) for n in names})
    if not any("::" in n for n in names):
        return f"{len(names)} scenarios ({', '.join(names[:3])}, …)"
    where = ", ".join(groups) if len(groups) <= 3 else f"{len(groups)} files or classes"
    return f"{len(names)} tests in {where}"


def admitted_cells(
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]], constraints: Constraints
) -> dict[CellFacts, Sequence[Mapping[str, Any]]]:
    """The cells whose rows `constraints` admit (`Constraints.admits_row`, a cell's columns: asked once per cell)."""
    return {facts: group for facts, group in cells.items() if group and constraints.admits_row(group[0])}


def with_evidence(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The scenarios that ran somewhere in `rows` and passed or failed (not only skipped, xfail or unbuilt)."""
    evidence = {Status.PASS, *FAILURES}  # `is_evidence`, without a call per row
    return {str(r["scenario"]) for r in rows if str(r["status"]) in evidence}
