"""Attribution: which release of which library introduced a failure, and which fixed it. Pure.

For every scenario, failure signature and axis, the cells whose *other* axes are equal form a
line along that axis. Each cell on the line gets a verdict for the signature, the line is
ordered (releases by `packaging.version.Version`, git and path candidates after them, in
commit order when one is given), and neighbouring cells with a definite verdict are compared:
clean -> has is "introduced", has -> clean is "fixed". Cells that say nothing about the
signature (not applicable, env problems, another failure, flaky repeats) are stepped over and
named, so a transition across them is a range, not a point.

>>> rows = [
...     {"scenario": "load", "status": s, "signature": sig, "repeat": 0, "cell_id": c, "run_id": "r",
...      "versions": {"torch": "2.13.0", "accelerate": acc}}
...     for c, acc, s, sig in [("a", "1.13.0", "error", "TypeError: x"), ("b", "1.14.0", "pass", "")]
... ]
>>> [t.describe() for t in attribute(rows).transitions]
['fixed in accelerate 1.14.0 (after 1.13.0) with torch 2.13.0']
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from harness.matrix import git_ref
from harness.outcome import FAILURES

Kind = Literal["introduced", "fixed"]
CellVerdict = Literal["has", "clean", "flaky", "skip"]

#: The axes in the order people read them; any other axis follows, sorted by name.
AXIS_ORDER = ("torch", "transformers", "accelerate", "peft", "bitsandbytes")
#: Axis columns of `outcomes_v`: the fallback when a row has no `versions` (a JSON-lines shard).
_AXIS_COLUMNS = AXIS_ORDER
_FAILURE_STATUSES = frozenset(s.value for s in FAILURES)
#: How many untested versions `describe()` names before it only counts the rest.
_SHOW_UNTESTED = 6


# -- candidates ------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Point:
    """One candidate of one axis as a cell used it: a release, or a source with its commit."""

    value: str  # the requested value: "1.14.0", "git+https://…@main", a path
    commit: str = ""  # the exact commit for git and path candidates

    @property
    def release(self) -> Version | None:
        return None if self.commit else _release(self.value)

    def label(self) -> str:
        """`1.14.0`; `main@0123456789ab` for a git source; `peft@0123456789ab` for a local checkout."""
        if not self.commit:
            return self.value
        if self.value.startswith("git+"):
            ref = git_ref(self.value)
            short = self.commit[:12]
            return short if self.commit.startswith(ref) or ref.startswith(short) else f"{ref}@{short}"
        return f"{Path(self.value).name or self.value}@{self.commit[:12]}"


@lru_cache(maxsize=4096)
def _release(value: str) -> Version | None:
    try:
        return Version(value)
    except InvalidVersion:
        return None


def _order_key(point: Point, commits: Sequence[str], first_seen: str = "") -> tuple[Any, ...]:
    """Releases first, by version; then sources: in `commits` order when listed, else by when
    they were first tested (a moving ref such as `@main` advances with time), else by value."""
    release = point.release
    if release is not None:
        return (0, release, "", "")
    index = _commit_index(point.commit, commits)
    return (1, index if index is not None else len(commits), first_seen, point.value, point.commit)


def _commit_index(commit: str, commits: Sequence[str]) -> int | None:
    if not commit:
        return None
    # Stored commits are full shas; a caller's list may hold short ones (or the other way round).
    return next((i for i, c in enumerate(commits) if c.startswith(commit) or commit.startswith(c)), None)


# -- cells -----------------------------------------------------------------------------------
@dataclass
class _Cell:
    """Every stored repeat (over all runs) of one scenario at one combination of versions."""

    points: dict[str, Point]
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    _counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # each line asks again: ask once

    @property
    def cell_id(self) -> str:
        return min(str(r.get("cell_id", "")) for r in self.rows)

    @property
    def runs(self) -> set[str]:
        return {str(r.get("run_id", "")) for r in self.rows}

    def counts(self, signature: str) -> tuple[int, int, int]:
        """(repeats failing with `signature`, repeats passing, repeats in all)."""
        if signature not in self._counts:
            has = sum(1 for r in self.rows if r["status"] in _FAILURE_STATUSES and _signature(r) == signature)
            clean = sum(1 for r in self.rows if r["status"] == "pass")
            self._counts[signature] = (has, clean, len(self.rows))
        return self._counts[signature]

    def verdict(self, signature: str) -> CellVerdict:
        has, clean, total = self.counts(signature)
        if has == total:
            return "has"
        if clean == total:
            return "clean"
        # Seen in some repeats only: no claim either way. Never seen, but not a clean pass
        # either (not applicable, the env did not build, another failure): no evidence.
        return "flaky" if has else "skip"

    def why_skipped(self, signature: str) -> str:
        """What a stepped-over cell showed instead: `flaky 2/3`, `not_applicable`, `other failure`."""
        has, _, total = self.counts(signature)
        if has:
            return f"flaky {has}/{total}"
        words = Counter(
            "other failure" if r["status"] in _FAILURE_STATUSES else str(r["status"]) for r in self.rows if r["status"] != "pass"
        )
        return words.most_common(1)[0][0] if words else "no outcome"


def _signature(row: Mapping[str, Any]) -> str:
    return str(row.get("signature") or row["status"])


def _json(value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        parsed = json.loads(value)
        return parsed if isinstance(parsed, dict) else {}
    return dict(value)


def _points(row: Mapping[str, Any]) -> dict[str, Point]:
    """axis -> Point from `versions` (+ `git_commits`, + `installed` for inherited axes)."""
    versions = _json(row.get("versions"))
    if not versions:
        versions = {axis: row[axis] for axis in _AXIS_COLUMNS if row.get(axis)}
    commits = _json(row.get("git_commits"))
    installed = _json(row.get("installed"))
    points = {}
    for axis, value in versions.items():
        value = str(value)
        if value == "inherit" and installed.get(axis):
            value = str(installed[axis])  # what the base interpreter had is what was tested
        points[axis] = Point(value, str(commits.get(axis) or ""))
    return points


def _axis_sort(axes: Iterable[str]) -> list[str]:
    return sorted(axes, key=lambda a: (AXIS_ORDER.index(a) if a in AXIS_ORDER else len(AXIS_ORDER), a))


# -- results ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Transition:
    """One change of verdict between neighbouring candidates of one axis, the other axes held.

    `before` is the last candidate on the old side, `after` the first on the new side. When
    `untested` (known versions never tried on this line) or `inconclusive` (tried, but skipped)
    is not empty, the change lies somewhere in (before, after]: a range, not a point.
    """

    scenario: str
    signature: str
    axis: str
    kind: Kind
    before: str
    after: str
    held: tuple[tuple[str, str], ...]  # the other axes, in reading order: (("torch", "2.13.0"), ...)
    untested: tuple[str, ...] = ()
    inconclusive: tuple[str, ...] = ()  # "1.14.0 (not_applicable)", "1.14.1 (flaky 1/3)"
    signature_family: str = ""
    before_cell: str = ""
    after_cell: str = ""
    runs: tuple[str, ...] = ()

    @property
    def is_range(self) -> bool:
        return bool(self.untested or self.inconclusive)

    def where(self) -> str:
        """`1.14.0 (after 1.13.0)` for a point, `(1.13.0, 1.15.0]` for a range."""
        return f"({self.before}, {self.after}]" if self.is_range else f"{self.after} (after {self.before})"

    def describe(self) -> str:
        """`fixed in accelerate (1.13.0, 1.15.0] — untested: 1.14.0, 1.14.1 — with torch 2.13.0, …`"""
        parts = [f"{self.kind} in {self.axis} {self.where()}"]
        if self.untested:
            shown = ", ".join(self.untested[:_SHOW_UNTESTED])
            more = len(self.untested) - _SHOW_UNTESTED
            parts.append(f"untested: {shown}" + (f" and {more} more" if more > 0 else ""))
        if self.inconclusive:
            parts.append(f"inconclusive: {', '.join(self.inconclusive)}")
        text = " — ".join(parts)
        if self.held:
            text += (" — with " if len(parts) > 1 else " with ") + held_text(self.held)
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "signature": self.signature,
            "signature_family": self.signature_family,
            "axis": self.axis,
            "kind": self.kind,
            "before": self.before,
            "after": self.after,
            "untested": list(self.untested),
            "inconclusive": list(self.inconclusive),
            "held": dict(self.held),
            "before_cell": self.before_cell,
            "after_cell": self.after_cell,
            "runs": list(self.runs),
            "description": self.describe(),
        }


@dataclass(frozen=True)
class Flaky:
    """A cell where a signature showed in some repeats and not in others: no transition uses it."""

    scenario: str
    signature: str
    cell_id: str
    versions: tuple[tuple[str, str], ...]
    failed: int
    repeats: int
    signature_family: str = ""
    runs: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"flaky: {self.failed} of {self.repeats} repeat(s) with {held_text(self.versions)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "signature": self.signature,
            "signature_family": self.signature_family,
            "kind": "flaky",
            "cell_id": self.cell_id,
            "versions": dict(self.versions),
            "failed": self.failed,
            "repeats": self.repeats,
            "runs": list(self.runs),
            "description": self.describe(),
        }


@dataclass(frozen=True)
class Attribution:
    transitions: tuple[Transition, ...]
    flaky: tuple[Flaky, ...]


def held_text(held: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{axis} {value}" for axis, value in held)


# -- the walk --------------------------------------------------------------------------------
def attribute(
    rows: Iterable[Mapping[str, Any]],
    *,
    known_versions: Mapping[str, Iterable[str]] | None = None,
    commit_order: Mapping[str, Sequence[str]] | None = None,
) -> Attribution:
    """Every transition of every failure signature along every axis, and the flaky cells.

    rows: outcome rows shaped like `outcomes_v` (repeats and several runs of one combination
    of versions are pooled). known_versions: axis -> releases that exist (the index's list);
    the versions seen in `rows` are always known. commit_order: axis -> commits, oldest first.
    Rows without versions (an outcome with no cell record) are ignored.
    """
    commit_order = commit_order or {}
    cells: dict[str, dict[tuple[tuple[str, Point], ...], _Cell]] = defaultdict(dict)
    first_seen: dict[tuple[str, Point], str] = {}
    for row in rows:
        points = _points(row)
        if not points:
            continue
        key = tuple(sorted(points.items()))
        cells[row["scenario"]].setdefault(key, _Cell(points)).rows.append(row)
        when = str(row.get("started_at") or "").replace("T", " ")  # a datetime from DuckDB, or ISO text
        for axis, point in points.items():
            if when and point.release is None and when < first_seen.get((axis, point), "~"):
                first_seen[(axis, point)] = when

    known = _known_releases(cells, known_versions or {})
    transitions: list[Transition] = []
    flaky: list[Flaky] = []
    for scenario in sorted(cells):
        by_combo = list(cells[scenario].values())
        axes = _axis_sort({a for c in by_combo for a in c.points})
        lines = {axis: _lines(by_combo, axis, commit_order.get(axis, ()), first_seen) for axis in axes}
        for signature, family in _signatures(by_combo):
            for axis in axes:
                for line in lines[axis]:
                    transitions.extend(_walk(scenario, signature, family, axis, line, known.get(axis, []), commit_order.get(axis, ())))
            for cell in sorted(by_combo, key=lambda c: c.cell_id):
                if cell.verdict(signature) == "flaky":
                    failed, _, repeats = cell.counts(signature)
                    versions = tuple((a, cell.points[a].label()) for a in _axis_sort(cell.points))
                    flaky.append(Flaky(scenario, signature, cell.cell_id, versions, failed, repeats, family, tuple(sorted(cell.runs))))
    return Attribution(tuple(transitions), tuple(flaky))


def _signatures(cells: list[_Cell]) -> list[tuple[str, str]]:
    """(signature, family) of every failure seen in these cells, sorted by signature."""
    families: dict[str, str] = {}
    for cell in cells:
        for row in cell.rows:
            if row["status"] in _FAILURE_STATUSES:
                sig = _signature(row)
                families[sig] = families.get(sig) or str(row.get("signature_family") or "")
    return sorted(families.items())


def _lines(cells: list[_Cell], axis: str, commits: Sequence[str], first_seen: Mapping[tuple[str, Point], str]) -> list[list[_Cell]]:
    """Cells that differ only in `axis`, each group ordered along it; groups in a stable order."""
    groups: dict[tuple[tuple[str, Point], ...], list[_Cell]] = defaultdict(list)
    for cell in cells:
        if axis in cell.points:
            groups[tuple(sorted((a, p) for a, p in cell.points.items() if a != axis))].append(cell)
    lines = [
        sorted(group, key=lambda c: _order_key(c.points[axis], commits, first_seen.get((axis, c.points[axis]), "")))
        for group in groups.values()
    ]
    # Lines in the order of their held versions (older first), so output reads like the matrix.
    lines.sort(key=lambda line: tuple((a, _order_key(p, ())) for a, p in sorted(line[0].points.items()) if a != axis))
    return [line for line in lines if len(line) > 1]


def _walk(
    scenario: str, signature: str, family: str, axis: str, line: list[_Cell], known: list[Version], commits: Sequence[str]
) -> list[Transition]:
    verdicts = [cell.verdict(signature) for cell in line]
    definite = [i for i, v in enumerate(verdicts) if v in ("has", "clean")]
    found = []
    for i, j in pairwise(definite):
        if verdicts[i] == verdicts[j]:
            continue
        old, new = line[i], line[j]
        held = tuple((a, old.points[a].label()) for a in _axis_sort(old.points) if a != axis)
        found.append(
            Transition(
                scenario=scenario,
                signature=signature,
                axis=axis,
                kind="introduced" if verdicts[j] == "has" else "fixed",
                before=old.points[axis].label(),
                after=new.points[axis].label(),
                held=held,
                untested=_untested(old.points[axis], new.points[axis], [c.points[axis] for c in line], known, commits),
                inconclusive=tuple(f"{c.points[axis].label()} ({c.why_skipped(signature)})" for c in line[i + 1 : j]),
                signature_family=family,
                before_cell=old.cell_id,
                after_cell=new.cell_id,
                runs=tuple(sorted(old.runs | new.runs)),
            )
        )
    return found


def _untested(before: Point, after: Point, tried: list[Point], known: list[Version], commits: Sequence[str]) -> tuple[str, ...]:
    """Known releases (or listed commits) strictly between `before` and `after` that this line never tried."""
    low, high = before.release, after.release
    if low is not None:
        tried_releases = {p.release for p in tried if p.release is not None}
        # `after` may be a git source: every release newer than `before` then lies between.
        between = [v for v in known if low < v and (high is None or v < high) and v not in tried_releases]
        return tuple(str(v) for v in between)
    i, j = _commit_index(before.commit, commits), _commit_index(after.commit, commits)
    if i is None or j is None:
        return ()
    tried_commits = {_commit_index(p.commit, commits) for p in tried}
    return tuple(commits[k][:12] for k in range(i + 1, j) if k not in tried_commits)


def _known_releases(cells: Mapping[str, Mapping[Any, _Cell]], given: Mapping[str, Iterable[str]]) -> dict[str, list[Version]]:
    """axis -> sorted releases: those given, and every release any stored cell used on that axis."""
    known: dict[str, set[Version]] = defaultdict(set)
    for axis, values in given.items():
        for value in values:
            release = Point(value).release
            if release is not None:
                known[axis].add(release)
    for by_combo in cells.values():
        for cell in by_combo.values():
            for axis, point in cell.points.items():
                if point.release is not None:
                    known[axis].add(point.release)
    return {axis: sorted(versions) for axis, versions in known.items()}


def seen_versions(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """axis -> every value the rows' cells used: pass it as `known_versions` when attributing a subset."""
    seen: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        for axis, point in _points(row).items():
            seen[axis].add(point.value)
    return {axis: sorted(values) for axis, values in seen.items()}


# -- storage ---------------------------------------------------------------------------------
def to_rows(result: Attribution, scope: str = "") -> list[dict[str, Any]]:
    """Rows for the `transitions` table: one per transition, one per flaky cell (kind `flaky`).

    scope: the run id the outcomes came from, "" for all runs.
    """
    rows = [{"scope": scope, **t.to_dict()} for t in result.transitions]
    for f in result.flaky:
        rows.append(
            {
                "scope": scope,
                "scenario": f.scenario,
                "signature": f.signature,
                "signature_family": f.signature_family,
                "axis": "",
                "kind": "flaky",
                "before": "",
                "after": "",
                "untested": [],
                "inconclusive": [],
                "held": dict(f.versions),
                "before_cell": f.cell_id,
                "after_cell": f.cell_id,
                "runs": list(f.runs),
                "description": f.describe(),
            }
        )
    return rows
