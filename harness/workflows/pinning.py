"""`harness pin` and the dashboard's Pin page: the newest passing set from a results file, and its files.

The choice itself is `analysis.pin.choose` (pure); this module reads the rows, checks the
user's constraints against what is stored (bad input names the fix), chooses the machine class
(`--machine`, else the newest run's) and the tests a selection names, fills in the winning
cell's whole freeze, and writes requirements.txt, constraints.txt and pylock.toml.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from harness.analysis import export
from harness.analysis.candidates import Failure, Standing, failure_of, single_failure
from harness.analysis.export import Sources
from harness.analysis.machines import ANY_MACHINE, find_machine, machine_classes, newest_machine
from harness.analysis.pin import (
    DEFAULT_RANKING,
    Constraints,
    PinResult,
    admitted_cells,
    choose,
    choose_standings,
    standings,
    with_evidence,
)
from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet
from harness.analysis.requirement import as_constraints, requirements
from harness.analysis.rows import CellFacts, by_cell, cell_facts, group_of, machine_class
from harness.analysis.selection import marker_matches, select_tests
from harness.analysis.status import Status
from harness.errors import BadInput
from harness.inputs.candidates import expand_find_links
from harness.running.envs import uv_binary
from harness.storage import clauses, pins, queries, recorded
from harness.storage.store import Store
from harness.workflows.answering import answer

#: Stored names quoted in a message before the rest are counted (a suite stores thousands).
_QUOTED = 12
MARKERS_NOT_STORED = (
    "sweep the suite again (outcomes record their tests' markers since 2026-11-24), or select tests by node id, "
    "file, class or folder with --test"
)


def _quoted(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_QUOTED])
    return shown + (f" and {len(names) - _QUOTED} more" if len(names) > _QUOTED else "")


def _marked(markers: dict[str, set[str]], expression: str, tests: Sequence[str], stored: Iterable[str], db: str) -> list[str]:
    """The node ids whose stored markers `-m` selects (within the --test selection, when given); `stored`: every test's name."""
    if not markers:
        raise BadInput(f"-m {expression!r}: {db!r} stores no markers; {MARKERS_NOT_STORED}")
    try:
        chosen = [node for node, names in sorted(markers.items()) if marker_matches(expression, names)]
        # tests with no marker at all were stored without any: `-m "not slow"` selects them too
        unmarked = sorted({name for name in stored if "::" in name} - set(markers))
        chosen += [node for node in unmarked if marker_matches(expression, set())]
    except ValueError as err:
        raise BadInput(str(err)) from None
    if tests:
        within, _ = select_tests(chosen, tests)
        chosen = within
    if not chosen:
        raise BadInput(
            f"-m {expression!r} selects no stored test in {db!r}; markers stored: {_quoted(sorted(set().union(*markers.values())))}"
        )
    return chosen


def resolve_machine(
    rows: Sequence[Mapping[str, Any]],
    db: str,
    wanted: str,
    constraints: Constraints,
    classes: Sequence[str] | None = None,
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
) -> str:
    """The machine class a pin chooses over: `--machine` as given, else the newest run's (among the
    runs `--gpu` and `--platform` admit); "" pools every machine (`--machine any`, or rows with no host).
    classes: the rows' machine classes, when known (`Answer.machine_classes`); cells: the rows by cell."""
    classes = machine_classes(rows) if classes is None else classes
    if wanted.strip():
        found = find_machine(wanted, classes)
        if found is None:
            named = ", ".join(classes) or "(none)"
            raise BadInput(f"--machine {wanted!r} is not a machine class of {db!r}; classes: {named}, or {ANY_MACHINE} for all pooled")
        return "" if found == ANY_MACHINE else found
    return newest_machine(rows, admitted_cells(cells if cells is not None else by_cell(rows), constraints))


def chosen_scenarios(
    rows: Sequence[Mapping[str, Any]],
    db: str,
    scenarios: Sequence[str],
    tests: Sequence[str],
    machine: str,
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
    quiet: Quiet = NO_QUIET,
) -> tuple[list[str], list[str]]:
    """(what must pass, the selected tests left out because they never ran on `machine`).

    A named scenario that is not applicable on the machine is bad input (it names the machines
    where it runs); a selection of tests keeps the ones that passed or failed there, so tests
    skipped on this machine are not counted against it. quiet: the tests the rows hold as one
    stand-in (`analysis.quiet`): passed on every machine.
    """
    stored = sorted({str(r["scenario"]) for r in rows} - {STAND_IN} | set(quiet.tests))
    if not scenarios and not tests:
        groups = sorted({group_of(s) for s in stored})
        raise BadInput(
            f"pass the scenarios that must pass with --scenario, or tests with --test (node id, file, class; repeatable); "
            f"stored in {db!r}: {_quoted(groups)}"
        )
    unknown = [s for s in scenarios if s not in stored]
    if unknown:
        raise BadInput(f"no outcomes for scenario(s) {', '.join(map(repr, unknown))} in {db!r}; stored: {_quoted(stored)}")
    selected, empty = select_tests(stored, tests)
    if empty:
        files = sorted({group_of(s).split("::")[0] for s in stored if "::" in s})
        raise BadInput(
            f"--test {', '.join(map(repr, empty))} selects no stored test in {db!r}; "
            + (f"stored test files: {_quoted(files)}" if files else f"it holds no test node ids; scenarios: {_quoted(stored)}")
        )
    by_cells = cells if cells is not None else by_cell(rows)
    here = [r for facts, group in by_cells.items() if not machine or facts.machine_class == machine for r in group]
    where = f"machine {machine}" if machine else "any machine"
    ran = {str(r["scenario"]) for r in here if r["status"] != Status.NOT_APPLICABLE} | set(quiet.tests)
    idle = [s for s in scenarios if s not in ran]
    if idle:
        elsewhere = machine_classes(r for r in rows if r["scenario"] in idle and r["status"] != Status.NOT_APPLICABLE)
        runs_on = f"it runs on {', '.join(elsewhere)}: pass --machine with one of them" if elsewhere else "it is not applicable anywhere"
        raise BadInput(f"scenario(s) {', '.join(map(repr, idle))} not applicable on {where} in {db!r}; {runs_on}")
    evidence = with_evidence(here) | set(quiet.tests)
    kept = [s for s in selected if s in evidence]
    left_out = [s for s in selected if s not in evidence and s not in scenarios]
    if selected and not kept:
        raise BadInput(
            f"--test {', '.join(map(repr, tests))} selects {len(selected)} test(s), none of which passed or failed on {where} "
            f"(skipped, xfail or not built there); machines: {', '.join(machine_classes(rows))}: pass --machine"
        )
    return list(dict.fromkeys([*scenarios, *kept])), left_out


def check_request(
    rows: Sequence[Mapping[str, Any]],
    db: str,
    scenarios: Sequence[str],
    constraints: Constraints,
    rank: str,
    cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]] | None = None,
) -> list[str]:
    """Every mistake in a pin request's constraints and ranking, against what the file holds; returns the ranking to use.
    cells: the rows by cell (`Answer.cells`), when read already."""
    if not rows:
        raise BadInput(f"no outcomes in {db!r}; run a sweep first")
    values: dict[str, set[str]] = {}
    for facts in cells if cells is not None else {cell_facts(row) for row in rows}:  # once per cell
        for axis, value in facts.installed.items():
            values.setdefault(axis, set()).add(value)
    for axis, spec in constraints.fixed:
        if axis not in values:
            raise BadInput(f"--fix {axis}{spec}: {axis!r} is not an axis of {db!r}; axes: {', '.join(sorted(values))}")
        if not any(constraints.admits({axis: v}, {axis: v}) for v in values[axis]):
            raise BadInput(f"--fix {axis}{spec}: no stored cell has such a {axis}; stored: {', '.join(sorted(values[axis]))}")
    firsts = [group[0] for group in cells.values() if group] if cells is not None else rows  # the host is the cell's
    for flag, wanted in (("gpu", constraints.gpu), ("platform", constraints.platform)):
        seen = sorted({str(r.get(flag) or "") for r in firsts})
        if wanted and not any(wanted.lower() in s.lower() for s in seen):
            raise BadInput(f"--{flag} {wanted!r} matches no stored run; stored: {', '.join(seen)}")
    ranking = [str(canonicalize_name(a)) for a in rank.split(",") if a.strip()] if rank else list(DEFAULT_RANKING)
    bad_rank = [a for a in ranking if a not in values] if rank else []
    if bad_rank:
        raise BadInput(f"--rank names unknown axis(es) {', '.join(map(repr, bad_rank))}; axes: {', '.join(sorted(values))}")
    return ranking


def with_full_freeze(result: PinResult, records: Sequence[dict[str, Any]]) -> PinResult:
    """The winner with its cell's complete freeze (rows handed to `choose` may carry only the axes)."""
    if not result.found or not records:
        return result
    record = next((r for r in records if r.get("run_id") in set(result.runs)), records[0])
    freeze, inherited = record.get("installed") or {}, record.get("inherited") or {}
    if not freeze:
        return result
    return replace(result, freeze=tuple(sorted(freeze.items())), inherited=tuple(sorted(inherited.items())))


def with_machines(rows: list[dict[str, Any]], runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows that lack `gpu_count` (`queries.pin_rows`) with it, from their run's host: what `machine_class` reads."""
    for row in rows:
        if "gpu_count" not in row:
            row["gpu_count"] = (runs.get(str(row.get("run_id")), {}).get("host") or {}).get("gpu_count")
    return rows


def machines_of(store: Store) -> list[str]:
    """The machine classes of the file's runs, `cpu` first (the dashboard's machine selector)."""
    return machine_classes(run.get("host") or {} for run in recorded.runs(store).values())


def passing_by_machine(store: Store) -> dict[str, list[str]]:
    """machine class -> the scenarios that pass somewhere on it (what its known-good set is chosen over);
    grouped in DuckDB, so a page over 100,000 outcomes moves one row per machine and scenario."""
    # each run's machine read once from `runs`, as `outcomes_v` reads it for every outcome (2 s at 2,000,000)
    machine = "host->>'gpu' AS gpu, TRY_CAST(host->>'gpu_count' AS INTEGER) AS gpu_count, host->>'platform' AS platform"
    host = f"SELECT run_id, {machine} FROM runs"
    identity = "COALESCE(nullif(o.test_id, ''), o.scenario)" if clauses.identity_column(store) == "test_id" else "o.scenario"
    rows = store.fetch(
        f"SELECT DISTINCT h.gpu, h.gpu_count, h.platform, {identity} AS scenario "
        f"FROM outcomes o LEFT JOIN ({host}) h USING (run_id) WHERE o.status = '{Status.PASS}' ORDER BY scenario"
    )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(machine_class(row), []).append(str(row["scenario"]))
    return found


def never_passed_on(store: Store, tests: Sequence[str], machine: str) -> list[str]:
    """The tests of `tests` that never passed on machine class `machine` (ANY_MACHINE: anywhere), in
    their order: `passing_by_machine`'s answer for the few tests a pin chose, not for every test."""
    with store.reading(), pins.chosen_table(store, tests) as chosen:
        return _never_passed(store, chosen, tests, machine)


def _never_passed(store: Store, chosen: str, tests: Sequence[str], machine: str) -> list[str]:
    if machine == ANY_MACHINE:
        return pins.never_passed(store, chosen, tests)
    runs = [run for run, record in recorded.runs(store).items() if machine_class(record.get("host") or {}) == machine]
    return pins.never_passed(store, chosen, tests, runs)


def newest_machine_of(store: Store) -> str:
    """The machine class of the file's newest run, by its latest outcome (the pin's default, as `newest_machine`)."""
    rows = store.fetch("SELECT gpu, gpu_count, platform FROM outcomes_v ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT 1")
    return machine_class(rows[0]) if rows else ""


def pin_from_store(store: Store, scenarios: Sequence[str], constraints: Constraints, ranking: Sequence[str] = DEFAULT_RANKING) -> PinResult:
    """The dashboard's path: decided in DuckDB (`storage.pins`: which candidates pass every chosen test,
    constraints pushed down), chosen among the few candidates in Python (`choose_standings`), then
    the full freeze of the winner. The result `choose` gives over the rows (`queries.loud_pin_rows`),
    without reading them: 1 s rather than 4 s over a suite's 78,000 tests at 2,000,000 outcomes."""
    return pin_and_never(store, scenarios, constraints, ranking)[0]


def pin_and_never(
    store: Store, scenarios: Sequence[str], constraints: Constraints, ranking: Sequence[str] = DEFAULT_RANKING, machine: str | None = None
) -> tuple[PinResult, list[str]]:
    """`pin_from_store`, and when nothing passes and `machine` is given, the chosen names that never
    passed on it (`never_passed_on`): what the Pin page shows, asked with one table of the chosen names."""
    wanted = tuple(dict.fromkeys(scenarios))
    pushed = {axis: [spec.removeprefix("==")] for axis, spec in constraints.fixed if spec.startswith("==")}
    with store.reading(), pins.chosen_table(store, wanted) as chosen:
        cells = standings(pins.pairs(store, chosen, pushed), constraints)
        members = _members(cells)
        with pins.loud_table(store, chosen, members) as loud:
            for k, failing in pins.failing_counts(store, loud, chosen, members).items():
                cells[k].failing = failing
            result = choose_standings(cells, wanted, constraints, ranking, _StoreReads(store, chosen, loud, cells, members))
        never = _never_passed(store, chosen, scenarios, machine) if machine is not None and not result.found else []
    return with_full_freeze(result, recorded.cell_records(store, result.cell_ids[0]) if result.found else []), never


def _members(cells: Sequence[Standing]) -> pins.Members:
    """The candidates' (run, cell) pairs, each candidate's in the order `pins.pairs` listed them (`choose`'s order of rows)."""
    found = [(str(p["run_id"]), str(p["cell_id"]), k) for k, c in enumerate(cells) for p in c.pairs]
    return pins.Members(tuple(f[0] for f in found), tuple(f[1] for f in found), tuple(f[2] for f in found))


class _StoreReads:
    """`StandingReads` from the results file: the outcomes of the chosen tests (`chosen`, a temporary
    table; `loud`, those that say something: `pins.loud_table`) in candidates `cells`, read only
    where `choose_standings` asks."""

    def __init__(self, store: Store, chosen: str, loud: str, cells: Sequence[Standing], members: pins.Members) -> None:
        self.store, self.chosen, self.loud, self.cells, self.members = store, chosen, loud, cells, members
        self.index = {id(c): k for k, c in enumerate(cells)}
        self._failures: pins.Failures | None = None

    def _of(self, cells: Sequence[Standing]) -> pins.Members:
        return self.members.only({self.index[id(c)] for c in cells})

    def evidence(self, cell: Standing) -> Mapping[str, tuple[int, tuple[str, ...]]]:
        return pins.evidence(self.store, self.chosen, self._of([cell]), cell.runs())

    def first_at(self, cell: Standing, minute: str) -> tuple[str, str] | None:
        return pins.first_at(self.store, self.chosen, self._of([cell]), minute)

    def failing_tests(self, cells: Sequence[Standing]) -> Mapping[str, int]:
        return pins.failing_tests(self.store, self.loud, self.chosen, self._of(cells))

    def failures(self, cells: Sequence[Standing]) -> Iterable[Failure]:
        if self._failures is None:  # every candidate that fails, read at once: a pin names several (each newer version's)
            failing = [c for c in self.cells if c.failing]
            self._failures = pins.failures(self.store, self.loud, self.chosen, self._of(failing)) if failing else pins.Failures({}, {}, [])
        wanted = {self.index[id(c)] for c in cells}
        every = len(wanted) == len(self.cells)
        cell_of = [c.cell_id for c in self.cells]
        for (test, status, signature, message), (cands, runs) in self._failures.single.items():
            if not every:  # some of the candidates: their share of each group
                kept = [(c, r) for c, r in zip(cands, runs) if c in wanted]
                cands, runs = tuple(c for c, _ in kept), tuple(r for _, r in kept)
            if cands:
                yield single_failure(test, status, signature, message, [cell_of[c] for c in cands], runs)
        for (cand, test), rows in self._failures.rows.items():
            if cand in wanted:
                yield failure_of(cell_of[cand], test, rows)
        yield from ((test, "no outcome", (cell_of[cand],), ()) for cand, test in self._failures.absent if cand in wanted)


@dataclass
class PinFiles:
    """What `harness pin --out` wrote, the commands to paste, and why a lock was not written (if so)."""

    sources: Sources
    files: dict[str, str] = field(default_factory=dict)
    lock_note: str = ""


def sources_of(result: PinResult, runs: dict[str, dict[str, Any]]) -> Sources:
    """The index settings of the newest run that passed: what the install commands and the lock resolve against."""
    settings: dict[str, Any] = next((runs[r]["settings"] for r in reversed(list(runs)) if r in result.runs), {})
    return Sources.from_settings(settings, expand_find_links([str(f) for f in settings.get("find_links") or []]))


def write_files(result: PinResult, sources: Sources, out: Path) -> PinFiles:
    """requirements.txt and constraints.txt, and pylock.toml when uv resolves the passing freeze."""
    made = PinFiles(sources)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("requirements.txt", export.requirements_txt(result, sources)), ("constraints.txt", export.constraints_txt(result))):
        (out / name).write_text(text)
        made.files[name] = str(out / name)
    with tempfile.TemporaryDirectory(prefix="harness-pin-") as tmp:
        freeze = Path(tmp, "requirements.txt")
        freeze.write_text(export.lock_input(result))
        lock = out / "pylock.toml"
        try:
            proc = subprocess.run(
                export.lock_command(result, uv_binary(), str(freeze), str(lock), sources),
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"},
            )
            why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1].strip() if proc.returncode else ""
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc).splitlines()[0]
        if why or not lock.is_file():
            made.lock_note = f"pylock.toml not written: uv could not resolve the passing freeze with the run's index settings ({why})"
        else:
            made.files["pylock.toml"] = str(lock)
    return made


def pin_file(
    db: Path,
    scenarios: Sequence[str],
    fixes: Sequence[str] = (),
    gpu: str = "",
    platform: str = "",
    rank: str = "",
    out: Path | None = None,
    *,
    machine: str = "",
    tests: Sequence[str] = (),
    marker: str = "",
) -> tuple[PinResult, PinFiles | None, Sources]:
    """`harness pin`: validate, choose on one machine class, and (with `out`) write the files.

    machine: a class (`cpu`, `2x NVIDIA H200`, `any`); "" means the newest run's. tests: node
    ids, files, classes or folders, expanded against the stored node ids.
    """
    constraints = Constraints.parse(fixes, gpu, platform)
    with Store(db, read_only=True) as store:
        found = answer(store, loud=True)
        runs = recorded.runs(store)
        markers = queries.test_markers(store) if marker else {}
    rows = found.rows
    selection = (*tests, *((f"-m {marker!r}",) if marker else ()))  # as the user typed it, not the node ids it expands to
    if marker:
        tests = _marked(markers, marker, tests, found.scenarios, str(db))  # node ids: within --test's selection, when given
    ranking = check_request(rows, str(db), scenarios, constraints, rank, found.cells)
    constraints = replace(constraints, machine=resolve_machine(rows, str(db), machine, constraints, found.machine_classes, found.cells))
    wanted, left_out = chosen_scenarios(rows, str(db), scenarios, tests, constraints.machine, found.cells, found.quiet)
    chosen = choose(rows, wanted, constraints, ranking, found.cells, found.quiet)
    result = replace(chosen, selection=selection, left_out=tuple(left_out))
    if not result.found:
        return result, None, Sources()
    sources = sources_of(result, runs)
    return result, (write_files(result, sources, out) if out else None), sources


def stated_constraints(db: Path, scenarios: Sequence[str] = (), tests: Sequence[str] = (), machine: str = "") -> str:
    """`harness pin --constraints`: the requirements the file states on one machine class (`--machine`, else the
    newest run's), of the chosen scenarios or tests (all when none is named), as pip constraints."""
    with Store(db, read_only=True) as store:
        found = answer(store, loud=True)
    rows = found.rows
    if not rows:
        raise BadInput(f"no outcomes in {str(db)!r}; run a sweep first")
    chosen = resolve_machine(rows, str(db), machine, Constraints(), found.machine_classes, found.cells)
    picked = chosen_scenarios(rows, str(db), scenarios, tests, chosen, found.cells, found.quiet)[0] if scenarios or tests else []
    wanted = set(picked)
    # A requirement names the machine it holds on by its label (`cpu · linux-x86_64 · Python 3.11`): its cells say the class.
    classes: dict[str, set[str]] = {}
    for facts in found.cells:
        classes.setdefault(facts.machine.label(), set()).add(facts.machine_class)
    stated = [
        r
        for r in requirements(found.transitions)
        if (not chosen or chosen in classes.get(r.machine, set())) and (not wanted or wanted & set(r.scenarios))
    ]
    return as_constraints(stated)
