"""What changed since the last run, and why: the report `harness changes`, the summary's first
lines, the published page's "Since the last run" and `harness explain` share.

The first question of a nightly report (transformers' CI, crater): which tests started failing
since last night, which were fixed, which flipped with nothing changed (flaky), which left the
suite, and which cells are new. It compares the current state of the results file with its state
after the run before the newest sweep, or after `--since RUN`, or with the newest run before
`--since DATE` (`storage.history.baseline`; `analysis.changes` classes each change). Each change
of a cell comes with what moved there between its two runs (`analysis.explain.moves`, from what
the file recorded) and, once `harness explain` ran, what the probes narrowed it to (`storage.causes`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.analysis.changes import KINDS, Change, Changes, Group, Kind, compare, groups, machine_label
from harness.analysis.explain import Move, moves

if TYPE_CHECKING:  # DuckDB is imported where a command reads a file, not when the CLI starts
    from harness.storage import history
    from harness.storage.causes import Found
    from harness.storage.resultsfile import SqlResultsFile

#: Lines of one kind shown in text and markdown (`--json` lists every change).
SHOWN = 20
TITLES = {
    "regressed": "Started failing",
    "fixed": "Fixed",
    "flaky": "Flaky (flipped with nothing changed)",
    "removed": "Removed (not collected by the newest run)",
    "new": "New tests",
}
#: The kinds whose cause is looked for: a flaky flip has none, a new or removed test is its own cause.
EXPLAINED: tuple[Kind, ...] = ("regressed", "fixed")


@dataclass(frozen=True)
class Report:
    """What changed since `baseline.run`, with the history it was read from, what moved in each
    changed cell between its two runs, and the causes `harness explain` stored."""

    baseline: history.Baseline
    changes: Changes
    depth: history.Depth
    moved: dict[tuple[str, str, str], tuple[Move, ...]] = field(default_factory=dict)  # (before_run, after_run, cell)
    causes: dict[tuple[str, str, str, str], Found] = field(default_factory=dict)

    def headline(self) -> str:
        """`since r-… (2026-11-25 04:23): +3 failing, −1 fixed, 2 flaky`."""
        return f"since {self.baseline.run.run_id} ({self.baseline.run.started_at:%Y-%m-%d %H:%M}): {self.changes.headline()}"

    def moves_of(self, change: Change) -> tuple[Move, ...]:
        return self.moved.get((change.before_run, change.after_run, change.cell_id), ())

    def cause_of(self, change: Change) -> Found | None:
        return self.causes.get(cause_key(change))

    def to_dict(self) -> dict[str, Any]:
        run, newest = self.baseline.run, self.baseline.newest
        counts = {kind: self.changes.tests(kind) for kind in KINDS}
        return {
            "since": {"run_id": run.run_id, "started_at": run.started_at.isoformat()},
            "newest": {"run_id": newest.run_id, "started_at": newest.started_at.isoformat()},
            "history": {"runs": self.depth.runs, "described": self.depth.describe(), "kept": self.depth.kept},
            "headline": self.headline(),
            "tests": counts,
            "new_cells": [{"machine": machine_label(m), "cell": c} for m, c in self.changes.new_cells],
            "changes": [self._change_dict(c) for c in self.changes.items],
        }

    def _change_dict(self, change: Change) -> dict[str, Any]:
        found: dict[str, Any] = {**change.to_dict(), "machine": machine_label(change.machine)}
        if change.kind in EXPLAINED:
            found["moved"] = [m.to_dict() | {"text": m.describe()} for m in self.moves_of(change)]
            cause = self.cause_of(change)
            if cause is not None:
                found["cause"] = {"verdict": cause.verdict, "text": cause.text, **cause.explanation, "probes_run": cause.probes}
        return found


def cause_key(change: Change) -> tuple[str, str, str, str]:
    """How `storage.causes` keys a change: the run that first showed it, its cell, kind and signature."""
    return (change.after_run, change.cell_id, change.kind, change.signature)


def changes_of(store: SqlResultsFile, since: str = "") -> Report | None:
    """The changes since `since` (a run id or a date; default the run before the newest sweep),
    with what moved in each regressed or fixed cell and the stored causes; None where the file
    holds no run before the newest (nothing to compare), or keeps its runs as a harness before
    the history split did (`harness compact` splits it)."""
    from harness.storage import causes, history

    with store.reading():  # one view of the file for every read (each open costs 20 ms)
        if not history.is_split(store):
            return None
        base = history.baseline(store, since)
        if base is None:
            return None
        moment = base.run.started_at
        found = compare(history.spans_since(store, moment), moment, history.depends(store.fetch), history.cells_by(store, moment))
        explained = [c for c in found.items if c.kind in EXPLAINED]
        pairs = {(c.before_run, c.cell_id) for c in explained} | {(c.after_run, c.cell_id) for c in explained}
        recorded = causes.facts(store, pairs)
        files: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        for c in explained:
            files[(c.before_run, c.after_run, c.cell_id)].add(c.node.split("::")[0])
        moved = {
            key: tuple(moves(recorded[(key[0], key[2])], recorded[(key[1], key[2])], names))
            for key, names in files.items()
            if (key[0], key[2]) in recorded and (key[1], key[2]) in recorded
        }
        stored = causes.read(store, {c.after_run for c in explained})
        return Report(base, found, history.depth(store), moved, stored)


def history_lines(store: Any) -> list[str]:
    """The summary's first lines, where the file holds more than one run: `since …: +3 failing, …`
    and how deep the history is; none for a JSON-lines shard or a file of one run."""
    from harness.storage.shardfile import ShardStore

    if isinstance(store, ShardStore):
        return []  # the GPU runner writes shards, and may have no DuckDB to import
    from harness.storage import history

    if not history.is_split(store):
        depth = history.depth(store)
        if depth.runs < 2:
            return []
        return [
            f"History: {depth.describe()}, kept as a harness before the history split kept them: every answer folds all "
            f"their runs; `harness compact --db {store.path}` splits the file once into its current state and what changed"
        ]
    report = changes_of(store)
    if report is None:
        return []
    lines = [f"Changes {report.headline()}"]
    lines += [f"  {line}" for line in leading_causes(report)]
    return [*lines, f"History: {report.depth.describe()} (`harness changes` for what changed)"]


def leading_causes(report: Report, most: int = 3) -> list[str]:
    """The first regressions and fixes with their causes, for a summary's head: `tests/test_x.py::t: cause …`."""
    found = []
    for group in groups(report.changes):
        if group.kind not in EXPLAINED:
            continue
        said = cause_lines(report, group)
        known = [s for s in said if s.startswith("cause") and "not explained yet" not in s] or [s for s in said if s.startswith("moved")]
        if known:
            found.append(f"{'+' if group.kind == 'regressed' else '−'} {_what(group)} — {known[0]}")
        if len(found) >= most:
            break
    return found


# -- words ---------------------------------------------------------------------------------------
def by_machine(report: Report) -> dict[str, list[Group]]:
    found: dict[str, list[Group]] = defaultdict(list)
    for group in groups(report.changes):
        found[machine_label(group.machine)].append(group)
    for machine, _ in report.changes.new_cells:
        found.setdefault(machine_label(machine), [])
    return dict(sorted(found.items()))


def tests_of(report: Report, machine: str, kind: Kind) -> int:
    """Distinct tests of one kind on one machine (by its label): a test in two groups counts once."""
    return len({c.test for c in report.changes.of(kind) if machine_label(c.machine) == machine})


def new_cells(report: Report, machine: str) -> list[str]:
    """Each new cell of a machine with how its tests came out: `torch…-tf5.26.0… (19,500 pass, 300 fail)`."""
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    fresh = set(report.changes.new_cells)
    for c in report.changes.of("new"):
        if machine_label(c.machine) == machine and (c.machine, c.cell_id) in fresh:
            tally[c.cell_id][c.after or "—"] += 1
    return [f"{cell} ({', '.join(f'{n:,} {s}' for s, n in sorted(counts.items()))})" for cell, counts in sorted(tally.items())]


def _what(group: Group) -> str:
    tests = len(group.tests)
    return group.tests[0] if tests == 1 else f"{tests} tests in {group.group}"


def line(group: Group) -> str:
    cells = f"{len(group.cells)} cell(s)" if len(group.cells) > 1 else next(iter(group.cells))
    signature = f": {group.signature}" if group.signature else ""
    runs = sorted(group.runs)[0]
    when = "" if group.kind == "new" else f" ({runs[0]} → {runs[1]})" if runs[0] else f" (in {runs[1]})" if runs[1] else ""
    kept = len(group.not_run)
    held = f"; {kept:,} test{'s' if kept != 1 else ''} {'not run' if group.kind == 'regressed' else 'run again'}" if kept else ""
    return f"{_what(group)}{signature}, in {cells}{when}{held}"


def cause_lines(report: Report, group: Group) -> list[str]:
    """Under a regressed or fixed group: what moved in its cells between the two runs, and its
    cause where `harness explain` found one (one line each; cells that differ, each theirs)."""
    if group.kind not in EXPLAINED:
        return []
    tests = set(group.tests)
    mine = [c for c in report.changes.of(group.kind) if (c.machine, c.signature) == (group.machine, group.signature) and c.node in tests]
    moved: dict[tuple[Move, ...], list[str]] = defaultdict(list)
    found: dict[str, list[str]] = defaultdict(list)
    for change in mine:
        moved[report.moves_of(change)].append(change.cell_id)
        cause = report.cause_of(change)
        if cause is not None:
            found[cause.text].append(change.cell_id)
    out = []
    for what, cells in list(moved.items())[:2]:
        where = "" if len(moved) == 1 else f" in {_cells(cells)}"
        text = "; ".join(m.describe() for m in what) if what else "nothing the results file records"
        out.append(f"moved{where}: {text}")
    for text, cells in list(found.items())[:2]:
        where = "" if len(found) == 1 and len(set(cells)) == len(group.cells) else f" ({_cells(cells)})"
        out.append(f"cause{where}: {text}")
    if not found and mine:
        out.append("cause: not explained yet (`harness explain` narrows it by running the changed tests)")
    return out


def _cells(cells: list[str]) -> str:
    unique = sorted(set(cells))
    return unique[0] if len(unique) == 1 else f"{len(unique)} cells"


def sections(report: Report) -> list[tuple[str, str, tuple[str, ...]]]:
    """(machine, what changed, its lines) in report order: the published page's "Since the last run"."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for machine, mine in by_machine(report).items():
        for kind in KINDS:
            lines = [" — ".join([line(g), *cause_lines(report, g)]) for g in mine if g.kind == kind]
            if lines:
                more = [f"… {len(lines) - SHOWN} more line(s): `harness changes --json` lists every change"] if len(lines) > SHOWN else []
                found.append((machine, f"{TITLES[kind]}, {tests_of(report, machine, kind):,} test(s)", (*lines[:SHOWN], *more)))
        cells = new_cells(report, machine)
        if cells:
            found.append((machine, f"New cells, {len(cells)}", tuple(cells)))
    return found


def cause_markdown(store: SqlResultsFile, signature: str) -> str:
    """A report's "Why it changed": the causes `harness explain` stored for a failure, each with its
    commit's page where there is one; "" where none was stored."""
    from harness.storage import causes

    found = sorted((key, cause) for key, cause in causes.read(store).items() if key[3] == signature)
    if not found:
        return ""
    lines = ["", "## Why it changed", ""]
    for (after_run, cell, kind, _), cause in found[:5]:
        link = str(cause.explanation.get("link") or "")
        commit = cause.explanation.get("commit") or {}
        page = f" ([{str(commit.get('sha', ''))[:12]}]({link}))" if link and isinstance(commit, dict) else ""
        lines.append(f"- {'started failing' if kind == 'regressed' else 'fixed'} in `{cell}` (run `{after_run}`): {cause.text}{page}")
    if len(found) > 5:
        lines.append(f"- … and {len(found) - 5} more cell(s): `harness changes --json` lists each cause")
    return "\n".join(lines) + "\n"
