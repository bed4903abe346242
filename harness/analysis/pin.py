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

The known-good set (`known_good_sets`) is chosen per machine class, over the scenarios that
pass somewhere on that class: a scenario that cannot run there (it needs a GPU, or two) is
never counted against it. A selection of tests (`selection.select_tests`: node ids, files, classes,
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

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain
from operator import itemgetter
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from harness.analysis.rows import CellFacts, axis_sort, by_cell, canonical, cell_facts, group_of, json_map, machine_class, machine_of
from harness.analysis.status import FAILURES, Status, across_runs
from harness.analysis.versions import release, version_key
from harness.errors import BadInput

#: Which axis decides first when two passing sets differ: the libraries people upgrade for.
DEFAULT_RANKING = ("transformers", "peft", "accelerate", "bitsandbytes", "torch")
_FIX = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*$")
_UNTESTED = "not tested with the pinned versions of the other axes"
#: A Python version as a cell records it (a path setting names an interpreter on another host instead).
PYTHON_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
#: `--machine any`: every machine class pooled (a pin must then pass on each machine it ran on).
ANY_MACHINE = "any"
#: More chosen scenarios than this (a selection of tests): the text names them by file or class.
_NAMED = 6
#: Reasons named per excluded version; the rest are counted.
_BLOCKERS = 3


def preference(value: str | None) -> tuple[Any, ...]:
    """Newer sorts higher; a release above any source (the pin's one rule on top of `version_key`)."""
    if value is None:
        return (-1,)
    return (release(value) is not None, version_key(value))


def _when(value: Any) -> str:
    """A DuckDB timestamp or ISO text -> `2026-11-21 14:05` (UTC, as stored)."""
    return str(value or "").replace("T", " ")[:16]


def _reason(status: str, signature: str, message: str) -> str:
    """`error: TypeError: … @ accelerate/…`, `not_applicable: needs a GPU`, `unresolvable: …`."""
    detail = signature or (message.strip().splitlines()[0] if message.strip() else "")
    if not detail or detail == status:
        return status
    return detail if detail.startswith(f"{status}:") else f"{status}: {detail}"


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


# -- cells -----------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class _ScenarioResult:
    """Whether one scenario passed in every repeat of one candidate cell, and if not, why."""

    ok: bool
    reason: str = ""
    passed: int = 0
    total: int = 0


_ONE_PASS = _ScenarioResult(True, "", 1, 1)


@dataclass
class _Cell:
    """Every admitted outcome of one combination of exact versions, by scenario (all machines pooled)."""

    versions: dict[str, str]
    requested: dict[str, str] = field(default_factory=dict)
    rows: dict[str, list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    #: What kept tests from being collected here: a file that failed to import, a worker that
    #: died before its first test (their node ids: files, folders, paths); `_absent` reads them.
    uncollected: tuple[str, ...] = ()
    #: `clean`, where it is known already (a narrowed cell's: its parent's, less what was dropped).
    known_clean: set[str] | None = field(default=None, repr=False, compare=False)

    # Cached: a cell is complete once `_cells` returns it, and over a large suite `_blockers` and
    # the ranking read these once per scenario and sort key (89 s -> 5 s at 20,000 tests x 20 cells).
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

    def result(self, scenario: str) -> _ScenarioResult:
        rows = self.rows.get(scenario, [])
        if not rows:
            return self._absent(scenario)
        if len(rows) == 1 and rows[0]["status"] == Status.PASS and "flaky_across" not in rows[0]:
            return _ONE_PASS  # most outcomes of a suite: asked 400,000 times over 20,000 tests x 20 cells
        flaky = next((str(r["flaky_across"]) for r in rows if "flaky_across" in r), "")
        # Only a pass is evidence for a pin: inconclusive and not_applicable disqualify, as failures do.
        passed = sum(1 for r in rows if r["status"] == Status.PASS)
        if passed == len(rows) and flaky:  # it passes now, but failed in an earlier run with nothing changed
            return _ScenarioResult(False, flaky, passed, len(rows) + 1)
        if passed == len(rows):
            return _ScenarioResult(True, "", passed, len(rows))
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
        return _ScenarioResult(False, reason, passed, len(rows))

    @cached_property
    def clean(self) -> set[str]:
        """The scenarios whose every outcome here passed: worked out once per cell, as the
        known-good set asks each cell twice, over 20,000 tests (`_narrowed` hands it on)."""
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

    def _absent(self, scenario: str) -> _ScenarioResult:
        """No outcome here. A test (a node id, or its identity across the suite's releases) that
        this cell's suite did not collect is not collected there: another release of the suite
        does not have it, so it neither disqualifies the cell nor counts as a failure. Unless
        what would have collected it failed here (a file that did not import): that is a failure."""
        if "::" not in scenario:
            return _ScenarioResult(False, "no outcome")
        broken = next((node for node in self.uncollected if _covers(node, scenario)), None)
        if broken is not None:
            return _ScenarioResult(False, f"not collected: {broken} failed here")
        return _ScenarioResult(True, "not collected here")

    def rank_key(self, order: Sequence[str]) -> tuple[Any, ...]:
        return (*(preference(self.versions.get(axis)) for axis in order), self.cell_id)

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


def _breaks_collection(row: Mapping[str, Any]) -> bool:
    """A row of a suite's file or paths (no `::`) that failed: its tests were not collected."""
    return "::" not in str(row.get("scenario") or "") and str(row["status"]) in (*FAILURES, Status.INCONCLUSIVE)


def _cells(rows: Iterable[Mapping[str, Any]], scenarios: set[str], constraints: Constraints) -> list[_Cell]:
    return _cells_of(by_cell(rows), scenarios, constraints)


def _cells_of(groups: Mapping[CellFacts, Sequence[Mapping[str, Any]]], scenarios: set[str], constraints: Constraints) -> list[_Cell]:
    # Whether rows are admitted and which cell they join depend only on their cell's columns:
    # decided once per cell, not once per outcome.
    cells: dict[tuple[tuple[str, str], ...], _Cell] = {}
    uncollected: dict[tuple[tuple[str, str], ...], set[str]] = defaultdict(set)
    for facts, rows in groups.items():
        if not rows or not constraints.admits_row(rows[0]):
            continue
        key = tuple(sorted(facts.installed.items()))
        cell = cells.get(key) if key else None
        if key and cell is None:
            cell = _Cell(dict(facts.installed))
        joined = _join(cell, rows, scenarios, uncollected[key])
        if joined and cell is not None:  # the cell's requested versions, from the first rows that join it
            cells.setdefault(key, cell)
            for axis, value in facts.asked.items():
                cell.requested.setdefault(axis, value)
    for key, nodes in uncollected.items():
        if key in cells:
            cells[key].uncollected = tuple(sorted(nodes))
    return [c for c in cells.values() if constraints.admits(c.versions, c.requested)]


def _join(cell: _Cell | None, rows: Sequence[Mapping[str, Any]], scenarios: set[str], uncollected: set[str]) -> bool:
    """Add one cell's rows of `scenarios` to `cell` (none where the cell has no versions), and to
    `uncollected` the others that kept tests from being collected; whether any row joined."""
    joined = False
    by_scenario = cell.rows if cell is not None else None
    for row in rows:  # 400,000 rows for a suite's known-good set: nothing here but what must be
        scenario = str(row["scenario"])
        if scenario not in scenarios:
            if _breaks_collection(row):
                uncollected.add(scenario)
        elif by_scenario is not None:
            by_scenario[scenario].append(row)
            joined = True
    return joined


def _admitted(rows: Iterable[Mapping[str, Any]], constraints: Constraints | None) -> list[Mapping[str, Any]]:
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
) -> PinResult:
    """The newest cell on which every scenario in `scenarios` passed, under `constraints`.

    rows: outcome rows shaped like `outcomes_v` (`Store.outcomes()`); repeats and runs of one
    combination of exact versions are pooled. ranking: the axis compared first, then the next;
    axes left out follow in reading order. cells: `rows` by cell (`by_cell`), when the caller has them.
    """
    constraints = constraints or Constraints()
    wanted = tuple(dict.fromkeys(scenarios))
    groups = cells if cells is not None else by_cell(rows)
    return _choose(_cells_of(groups, set(wanted), constraints), wanted, constraints, ranking)


def _choose(cells: list[_Cell], wanted: tuple[str, ...], constraints: Constraints, ranking: Sequence[str]) -> PinResult:
    order = full_ranking(ranking, {a for c in cells for a in c.versions})
    present_order = tuple(a for a in order if any(a in c.versions for c in cells))
    wanted_set = set(wanted)
    verdicts = {id(c): _Verdicts(c, wanted, wanted_set) for c in cells}
    qualifying = sorted((c for c in cells if not verdicts[id(c)].failing), key=lambda c: c.rank_key(order), reverse=True)
    base = PinResult(wanted, constraints, present_order, len(cells), len(qualifying))
    if not qualifying:
        return _nothing_passes(base, cells, verdicts, wanted)
    chosen = qualifying[0]
    rows_of = chosen.all_rows
    latest = max(rows_of, key=lambda r: _when(r.get("started_at")))
    return replace(
        base,
        versions=tuple((a, chosen.versions[a]) for a in axis_sort(chosen.versions)),
        cell_ids=tuple(sorted({str(r.get("cell_id") or "") for r in rows_of})),
        runs=chosen.runs(),
        first_seen=min(_when(r.get("started_at")) for r in rows_of),
        last_seen=_when(latest.get("started_at")),
        gpus=tuple(sorted({str(r.get("gpu")) for r in rows_of if r.get("gpu")})),
        platforms=tuple(sorted({str(r.get("platform")) for r in rows_of if r.get("platform")})),
        # the cell's Python as a version (a path setting names an interpreter on another host)
        python=str(latest.get("python") or "") if PYTHON_VERSION.match(str(latest.get("python") or "")) else machine_of(latest).python,
        machines=chosen.machines(),
        freeze=tuple(sorted(json_map(latest.get("installed")).items())),
        inherited=tuple(sorted(json_map(latest.get("inherited")).items())),
        evidence=tuple(ScenarioEvidence(s, verdicts[id(chosen)][s].passed, chosen.runs(s)) for s in wanted),
        excluded=tuple(_exclusions(chosen, cells, verdicts, qualifying, order, wanted)),
    )


class _Verdicts:
    """One cell's results over the wanted scenarios, worked out where asked: which do not pass
    there (`failing`, in the wanted order, from `_Cell.passes`), and any one's result by name.
    A result object for each of a suite's 20,000 tests in each cell was most of a pin's time."""

    def __init__(self, cell: _Cell, wanted: Sequence[str], wanted_set: set[str]) -> None:
        ok = cell.passes(wanted_set)
        self.cell = cell
        self.failing = [s for s in wanted if s not in ok]

    def __getitem__(self, scenario: str) -> _ScenarioResult:
        return self.cell.result(scenario)


def _blockers(cells: Iterable[_Cell], verdicts: Mapping[int, _Verdicts], scenarios: Sequence[str]) -> list[Blocker]:
    """(scenario, reason) -> the cells showing it, most cells first."""
    found: dict[tuple[str, str], list[_Cell]] = defaultdict(list)
    for cell in cells:
        for scenario in verdicts[id(cell)].failing:
            found[(scenario, verdicts[id(cell)][scenario].reason)].append(cell)
    blockers = [
        Blocker(scenario, reason, tuple(sorted(c.cell_id for c in group)), tuple(sorted({r for c in group for r in c.runs(scenario)})))
        for (scenario, reason), group in found.items()
    ]
    rank = {s: k for k, s in enumerate(scenarios)}  # not scenarios.index: thousands of blockers over thousands of tests
    return sorted(blockers, key=lambda b: (-len(b.cells), rank[b.scenario], b.reason))


def _exclusions(
    chosen: _Cell,
    cells: list[_Cell],
    verdicts: Mapping[int, _Verdicts],
    qualifying: list[_Cell],
    order: Sequence[str],
    scenarios: Sequence[str],
) -> list[Exclusion]:
    """For every axis and every tested version newer than the chosen one: what kept it out."""
    by_key = {tuple(sorted(c.versions.items())): c for c in cells}
    found = []
    for axis in order:
        mine = preference(chosen.versions.get(axis))
        newer = {c.versions[axis] for c in cells if axis in c.versions and preference(c.versions[axis]) > mine}
        for value in sorted(newer, key=preference, reverse=True):
            # The neighbour: the chosen set with only this axis changed. Its failures are the answer.
            neighbour = by_key.get(tuple(sorted({**chosen.versions, axis: value}.items())))
            if neighbour is not None:
                found.append(Exclusion(axis, value, tuple(_blockers([neighbour], verdicts, scenarios))))
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
            found.append(Exclusion(axis, value, tuple(_blockers(tested, verdicts, scenarios)), note))
    return found


def _nothing_passes(base: PinResult, cells: list[_Cell], verdicts: Mapping[int, _Verdicts], scenarios: Sequence[str]) -> PinResult:
    failing = Counter(s for c in cells for s in verdicts[id(c)].failing)
    rank = {s: k for k, s in enumerate(scenarios)}
    ranked = sorted(failing.items(), key=lambda item: (-item[1], rank[item[0]]))
    return replace(base, blocking=tuple(_blockers(cells, verdicts, scenarios)), failing=tuple(ranked))


def choose_for_passing(
    rows: Sequence[Mapping[str, Any]],
    constraints: Constraints | None = None,
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
) -> tuple[PinResult, list[str], list[str]] | None:
    """The known-good set of one machine's rows: the newest cell passing every scenario that passes somewhere.

    Where no cell passes them all, the scenario that keeps the most candidate cells out is
    dropped, then the next, until one does. Returns (result, scenarios kept, scenarios dropped),
    or None when nothing passes anywhere. `known_good_sets` asks it once per machine class, for
    the summary, `harness watch`, reports and the dashboard.
    """
    if cells is not None and constraints is None:  # `rows` by cell, when the caller has them: every row admitted
        return _choose_for_passing(cells, Constraints())
    return _choose_for_passing(by_cell(_admitted(rows, constraints)), constraints or Constraints())


def _choose_for_passing(
    groups: Mapping[CellFacts, Sequence[Mapping[str, Any]]], constraints: Constraints, passing: Iterable[str] | None = None
) -> tuple[PinResult, list[str], list[str]] | None:
    """`choose_for_passing` over rows already admitted, by cell; `passing`, where the caller
    counted the scenarios that pass somewhere in them already."""
    ok = Status.PASS
    if passing is None:
        passing = {str(r["scenario"]) for rows in groups.values() for r in rows if r["status"] == ok}
    wanted = sorted(passing)
    if not wanted:
        return None
    cells = _cells_of(groups, set(wanted), constraints)
    dropped = drop_order(cells, wanted)
    gone = set(dropped)
    kept = [s for s in wanted if s not in gone]
    narrowed = _narrowed(cells, gone) if gone else cells  # nothing dropped: the cells hold only the wanted already
    return _choose(narrowed, tuple(kept), constraints, DEFAULT_RANKING), kept, dropped


def _narrowed(cells: Sequence[_Cell], gone: set[str]) -> list[_Cell]:
    """The cells without the scenarios `gone` (dropped from the wanted ones), from cells already
    read: a row of one of them that keeps tests from being collected (`_breaks_collection`) joins
    `uncollected`; a cell left without rows goes."""
    out = []
    for cell in cells:
        leaving = gone & cell.rows.keys()
        if len(leaving) == len(cell.rows):
            continue
        rows = defaultdict(list, cell.rows)  # a copy of the dict (its lists shared), less the few that go
        for scenario in leaving:
            del rows[scenario]
        broken = {s for s in leaving if any(_breaks_collection(x) for x in cell.rows[s])}
        uncollected = tuple(sorted({*cell.uncollected, *broken}))
        out.append(_Cell(cell.versions, cell.requested, rows, uncollected, known_clean=cell.clean - leaving))
    return out


def drop_order(cells: Sequence[_Cell], passing: Sequence[str]) -> list[str]:
    """Which scenarios the known-good set leaves out, in the order they are dropped.

    The rule: while no candidate cell passes every wanted scenario (and more than one is
    wanted), drop the one that does not pass in the most candidate cells, the first by name
    on a tie. Asking `choose` again after each drop was one pass over every outcome per
    dropped test: hours at 20,000 tests. Here each cell keeps a count of the wanted
    scenarios it misses, and each scenario a count of the candidate cells it is missed in;
    a drop changes only the cells that miss it (and, when it was a cell's last scenario with
    outcomes, that cell stops being a candidate, as `choose` would no longer see it).
    """
    wanted = set(passing)
    rank = {s: k for k, s in enumerate(passing)}
    ok = [c.passes(wanted) for c in cells]
    misses = [len(wanted - good) for good in ok]
    with_rows = [len(wanted & c.rows.keys()) for c in cells]
    missed_in: dict[str, list[int]] = defaultdict(list)
    for k, good in enumerate(ok):
        for s in wanted - good:
            missed_in[s].append(k)
    count = {s: len(ks) for s, ks in missed_in.items()}
    heap = [(-n, rank[s], s) for s, n in count.items() if n]
    heapq.heapify(heap)
    dropped: list[str] = []
    while heap and len(wanted) > 1 and not any(with_rows[k] and not misses[k] for k in range(len(cells))):
        n, _, worst = heapq.heappop(heap)
        if worst not in wanted or -n != count[worst]:
            continue  # a stale entry: its count fell since it was pushed
        wanted.discard(worst)
        dropped.append(worst)
        for k in missed_in[worst]:
            misses[k] -= 1
        for k in (k for k, cell in enumerate(cells) if worst in cell.rows):  # the cells it ran in: a few drops, 400,000 outcomes
            with_rows[k] -= 1
            if not with_rows[k]:  # no outcome of a wanted scenario left: no longer a candidate
                for s in wanted - ok[k]:
                    count[s] -= 1
                    heapq.heappush(heap, (-count[s], rank[s], s))
    return dropped


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


# -- machine classes ---------------------------------------------------------------------------
def machine_classes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The machine classes that rows ran on: `cpu` first, then the GPU classes by name."""
    found = {machine_class(r) for r in rows} - {""}
    return sorted(found, key=lambda c: (c != "cpu", c))


def _normal(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", ""))


def find_machine(text: str, classes: Sequence[str]) -> str | None:
    """The class the user means: case, spaces and the word NVIDIA do not matter (`2xH200`); `any` pools them.

    >>> find_machine("2x h200", ["cpu", "1x NVIDIA H200", "2x NVIDIA H200"]), find_machine("H100", ["cpu"])
    ('2x NVIDIA H200', None)
    """
    wanted = text.strip()
    if wanted.lower() == ANY_MACHINE:
        return ANY_MACHINE
    return next((c for c in classes if c == wanted), None) or next((c for c in classes if _normal(c) == _normal(wanted)), None)


def newest_machine(rows: Iterable[Mapping[str, Any]], cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None) -> str:
    """The machine class of the newest run among `rows` (by its latest outcome); "" without any.
    cells: `rows` by cell (`by_cell`), when the caller has them: then each cell's latest outcome
    is found in C, not by formatting 400,000 start times."""
    latest: dict[str, tuple[str, str]] = {}
    for facts, group in (cells if cells is not None else by_cell(rows)).items():
        if not facts.machine_class or not group:
            continue
        run, when = str(group[0].get("run_id") or ""), _latest(group)
        if run not in latest or when > latest[run][0]:
            latest[run] = (when, facts.machine_class)
    if not latest:
        return ""
    newest = max(latest, key=lambda run: (latest[run][0], run))
    return latest[newest][1]


def _latest(rows: Sequence[Mapping[str, Any]]) -> str:
    """`_when` of the latest start among one cell's rows: the latest value read in C where they
    are all of one comparable kind (timestamps, or ISO text), else row by row."""
    try:
        return _when(max(map(_STARTED, rows)))
    except TypeError:  # None among them, or timestamps and text mixed
        return max(map(_when, map(_STARTED, rows)))


_STARTED = itemgetter("started_at")


def admitted_cells(
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]], constraints: Constraints
) -> dict[CellFacts, Sequence[Mapping[str, Any]]]:
    """The cells whose rows `constraints` admit (`Constraints.admits_row`, a cell's columns: asked once per cell)."""
    return {facts: group for facts, group in cells.items() if group and constraints.admits_row(group[0])}


def with_evidence(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The scenarios that ran somewhere in `rows` and passed or failed (not only skipped, xfail or unbuilt)."""
    evidence = {Status.PASS, *FAILURES}  # `is_evidence`, without a call per row
    return {str(r["scenario"]) for r in rows if str(r["status"]) in evidence}


# -- the known-good set per machine ------------------------------------------------------------
@dataclass(frozen=True)
class KnownGoodSet:
    """The known-good set of one machine class, and over which scenarios it was chosen."""

    machine: str  # `cpu`, `1x NVIDIA H200`; "" for rows with no host
    result: PinResult  # `found` is False when no cell passes even one of them
    kept: tuple[str, ...]  # pass in the chosen cell
    dropped: tuple[str, ...] = ()  # pass somewhere on this machine, but in no cell together with the kept ones
    not_applicable: tuple[str, ...] = ()  # stored, but not applicable in every cell here (it needs a GPU, or two)
    failing: tuple[str, ...] = ()  # ran here, never passed

    @property
    def passing(self) -> tuple[str, ...]:
        """Every scenario that passes somewhere on this machine: what the set is chosen over."""
        return (*self.kept, *self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "found": self.result.found,
            "versions": dict(self.result.versions),
            "cell_ids": list(self.result.cell_ids),
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "not_applicable": list(self.not_applicable),
            "failing": list(self.failing),
        }


@dataclass
class _Tally:
    """What one machine class's rows hold, counted in one pass (`_tally`): the scenarios that
    passed somewhere (what its known-good set is chosen over), ran (not only `not_applicable`),
    and gave evidence (passed or failed)."""

    passing: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)
    evidence: set[str] = field(default_factory=set)


def _tally(rows: Iterable[Mapping[str, Any]], stored: set[str]) -> _Tally:
    """`_Tally` of `rows`, adding every scenario they name to `stored`: one pass, and one set
    touched by most rows (a pass), the rest worked out from those sets after."""
    passing: set[str] = set()
    idle: set[str] = set()  # not_applicable rows
    other: set[str] = set()  # neither a pass nor not_applicable
    failed: set[str] = set()
    skipped, passed = Status.NOT_APPLICABLE, Status.PASS
    for row in rows:
        scenario, status = str(row["scenario"]), row["status"]
        if status == passed:
            passing.add(scenario)
        elif status == skipped:
            idle.add(scenario)
        else:
            other.add(scenario)
            if status in FAILURES:
                failed.add(scenario)
    stored |= passing | idle | other
    return _Tally(passing, passing | other, passing | failed)


def known_good_sets(
    rows: Sequence[Mapping[str, Any]], cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None
) -> list[KnownGoodSet]:
    """One known-good set per machine class (`machine_classes` order), each over that class's own rows.

    A scenario counts for a class only where it passes somewhere on that class, so a GPU
    scenario never keeps a CPU cell out, and a CPU-only one never keeps a GPU cell out.
    """
    cells = cells if cells is not None else by_cell(rows)  # `rows` by cell, when the caller has them
    cells_of_class: dict[str, dict[CellFacts, Sequence[Mapping[str, Any]]]] = defaultdict(dict)
    for facts, mine in cells.items():
        cells_of_class[facts.machine_class][facts] = mine
    stored: set[str] = set()
    tallies = {machine: _tally(chain.from_iterable(groups.values()), stored) for machine, groups in cells_of_class.items()}
    found = []
    classes = sorted(set(cells_of_class) - {""}, key=lambda c: (c != "cpu", c))  # `machine_classes`, from the rows read once
    for machine in [*classes, *([""] if "" in cells_of_class else [])]:
        tally = tallies[machine]
        constraints = Constraints(machine=machine)
        chosen = _choose_for_passing(cells_of_class[machine], constraints, tally.passing)  # its rows are this machine's: all admitted
        ran, evidence = tally.ran, tally.evidence
        idle = tuple(sorted(stored - ran))
        if chosen is None:
            empty = PinResult((), constraints, (), 0, 0)
            found.append(KnownGoodSet(machine, empty, (), (), idle, tuple(sorted(evidence))))
            continue
        result, kept, dropped = chosen
        found.append(KnownGoodSet(machine, result, tuple(kept), tuple(dropped), idle, tuple(sorted(evidence - {*kept, *dropped}))))
    return found
