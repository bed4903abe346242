"""`harness watch`: build the cells that test new releases against the last known-good set, and say what broke.

The decisions are `analysis.watch` (pure: the known-good set, what is new, which cells, the
verdict and the report); this module does the I/O around them: the results file, the index's
releases (the same listing the sweep stores with every run, `answering.index_releases`),
and an ordinary sweep of the target cells into the same file (run `watch-<hash>`, origin
`watch`), followed by refinement on the targets' lines only, so that a failing new release
is narrowed to the exact release that introduced it (the sweep's own `refinement` rounds).

Everything is stored, and a rerun builds nothing it has already built: the verdict is read
from the stored outcomes, so a retried CI job gets the same answer.

Over a team's pytest suite (the flags or the matrix's [tests] table, else the suite the results
file's newest run recorded), the target cells run the suite as the sweep does, and refinement
runs just the node ids whose answer it narrows; the report groups tests by file and signature.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from harness import __version__
from harness.analysis import versions
from harness.analysis import watch as analysis
from harness.analysis.attribution import Transition
from harness.analysis.refine import Plan
from harness.analysis.rows import is_test, machine_class, machine_of, suite_of_run
from harness.errors import BadInput
from harness.inputs.candidates import PackageIndex, ResolvedMatrix, index_for, resolve_matrix
from harness.inputs.matrix import Candidate, Cell, MatrixSpec, load_matrix
from harness.inputs.scenarios import Scenario, load_scenario, lookup_names, select
from harness.running import hostinfo, live
from harness.running.ledger import Ledger
from harness.running.plan import SweepOptions, SweepPlan, suite_for
from harness.running.sweep import Reporter, Sweep
from harness.storage import recorded
from harness.storage.store import Store
from harness.workflows.answering import answer, index_releases

# `refine_rounds` is refinement's rounds of probes, given which ranges to narrow: the watch hands
# it the ranges on its targets' lines only (the sweep's step and `harness refine` hand it all).
from harness.workflows.refining import OnRound, RefineReport, here, refine_rounds, stored_cell


@dataclass
class WatchOptions:
    matrix: Path
    db: Path
    exclude_newer: str = ""  # stands in for "now": the index's releases up to this moment, and the cells resolved as of it
    axes: list[str] = field(default_factory=list)  # only these axes (default: every axis of the matrix with releases)
    scenario_files: list[str] = field(default_factory=list)  # files of stored scenarios that are not in scenarios/ or a pack
    env_root: Path | None = None
    refine: bool = True
    refine_limit: int | None = None
    dry_run: bool = False  # say what is new and which cells would be built; build nothing
    # A team's pytest suite, as `harness sweep` takes it (else the matrix's [tests] table, else
    # the suite the results file's newest run recorded).
    tests: list[str] = field(default_factory=list)
    tests_root: str = ""
    keyword: str = ""
    marker: str = ""
    test_requirements: list[str] = field(default_factory=list)
    allow_empty: bool = False  # a new cell where -k/-m selects no test does not fail the watch (else [tests] allow_empty)


def moment(text: str) -> datetime | None:
    """ "2023-01-10" or an RFC 3339 time -> an aware datetime (UTC when no zone is given); "" -> None
    (`versions.moment`, the one parser); anything else is bad input that names the fix."""
    try:
        return versions.moment(text)
    except ValueError:
        raise BadInput(f"--exclude-newer {text!r} is not a date; write e.g. 2026-11-20 or 2026-11-20T12:00:00Z") from None


def _scenario_files(names: Sequence[str], matrix_scenarios: Sequence[str], given: Sequence[str]) -> dict[str, Scenario]:
    """The files of the stored scenario names: --scenario files, the matrix's own list, scenarios/, the packs."""
    found = {s.name: s for s in select(list(given))} if given else {}
    if matrix_scenarios:
        for scenario in select(list(matrix_scenarios)):
            found.setdefault(scenario.name, scenario)
    known = lookup_names()
    for name in names:
        if name not in found and name in known:
            found[name] = load_scenario(known[name])
    return found


def watch(
    options: WatchOptions,
    reporter: Reporter | None = None,
    on_round: OnRound | None = None,
) -> analysis.WatchReport:
    """Compare the new releases with the known-good set of `options.db` on this machine (see the module docstring)."""
    spec = load_matrix(options.matrix, lenient=True)
    when = moment(options.exclude_newer)
    if options.exclude_newer:
        spec.settings.exclude_newer = options.exclude_newer  # the listing and the new cells' resolution, as of that moment
    elif spec.settings.exclude_newer not in ("", "period"):
        when = moment(spec.settings.exclude_newer)
    if options.refine_limit is not None and options.refine_limit < 0:
        raise BadInput(f"--refine-limit {options.refine_limit}: give 0 (no limit) or a positive number of probe cells")
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index)  # validates the matrix: bad input writes nothing
    watched = [axis for axis, cands in resolved.axes.items() if any(c.kind == "version" for c in cands)]
    unknown = [a for a in options.axes if a not in resolved.axes]
    if unknown:
        raise BadInput(f"--axis {', '.join(map(repr, unknown))}: not an axis of {str(options.matrix)!r}; axes: {', '.join(resolved.axes)}")
    axes = [a for a in watched if not options.axes or a in options.axes]
    if not options.db.is_file():
        raise BadInput(f"results file {str(options.db)!r} does not exist; run `harness sweep` first (or pass --db)")
    suite = suite_for(_suite_options(options), spec)  # pytest and the suite's packages join every new cell
    prefix = here(spec.settings.python)
    host_class = machine_class(hostinfo.describe())  # the known-good set is per machine class: cpu, 2x NVIDIA H200
    notes = [f"not watched: {a} (not a list of releases in the matrix)" for a in resolved.axes if a not in watched]

    with Store(options.db) as store:
        # the loud rows (`queries.loud_rows`): over a suite, the quiet tests' passes are one stand-in
        on_host = answer(store, where=lambda rows: analysis.on_machine(rows, prefix), loud=True)
        chosen_class = analysis.nearest_class(on_host.machine_classes, host_class)
        everything = analysis.on_class(on_host.rows, [chosen_class])
        if not everything:
            raise BadInput(
                f"no outcomes in {str(options.db)!r} ran on this machine ({prefix}; {host_class}); run `harness sweep` here first"
            )
        good = analysis.known_good(everything, on_host.quiet)
        if good is None:
            raise BadInput(
                f"no known-good set in {str(options.db)!r}: no scenario passes in any cell on {prefix}; "
                "fix the scenarios or the matrix and sweep again"
            )
        machine = next(machine_of(r).label() for r in everything if r.get("cell_id") == good.cell_id)  # with its CUDA, if any
        held = analysis.newest_held(everything, axes, good)
        notes += [f"not watched: {a} (no release of it in the results file)" for a in axes if a not in held]
        listed, failed = index_releases(index, list(held), spec.settings.python, when)
        if failed:
            raise BadInput(
                f"cannot list the releases of {', '.join(failed)} from {index.index_url}; check the network or the matrix's index_url"
            )
        new = analysis.new_releases(held, {axis: [v for v, _ in found] for axis, found in listed.items()})
        targets = analysis.plan_targets(good, new)

        ran = sorted(on_host.quiet.expand({str(r["scenario"]) for r in everything if r.get("cell_id") == good.cell_id}))
        tests = [s for s in ran if is_test(s)] if suite is not None else []
        scenarios = _scenario_files([s for s in ran if s not in tests], spec.settings.scenarios, options.scenario_files)
        missing = [s for s in good.guarded if s not in scenarios and s not in tests]
        if missing and targets:
            if all(is_test(s) for s in missing):
                raise BadInput(
                    f"{len(missing)} test(s) of {str(options.db)!r} (e.g. {missing[0]}) need their suite and no run recorded one; "
                    "pass it as to `harness sweep`: --tests-root DIR --tests PATH… (or the matrix's [tests] table)"
                )
            raise BadInput(
                f"scenario(s) {', '.join(missing)} of {str(options.db)!r} are not in scenarios/ or a built-in pack; "
                "pass each file with --scenario path/to/file.py"
            )
        notes += [f"not run in the new cells (file not found): {s}" for s in ran if s not in scenarios and s not in tests]
        run_id = analysis.WATCH_RUN_PREFIX + _digest(prefix, [*scenarios.values(), *([suite] if suite else [])])
        records = {str(r["cell_id"]): stored_cell(r) for r in reversed(recorded.all_cell_records(store))}
        if good.cell_id not in records:
            raise BadInput(f"{str(options.db)!r} has outcomes of cell {good.cell_id} but no record of its env; merge the file it came from")
        base = records[good.cell_id]
        cells = {t.axis: base.with_candidate(Candidate(t.axis, "version", t.release)) for t in targets}
        refined, no_test = "", Ledger()  # no_test: the new cells whose suite ran no test
        if targets and not options.dry_run:
            every = list(scenarios.values()) + ([suite] if suite is not None and tests else [])
            # refinement runs the tests whose answer it narrows, each alone (a scenario's name or a node id -> what runs it)
            probes = {**scenarios, **{t: replace(suite, paths=(t,), keyword="", marker="") for t in tests if suite is not None}}
            refined = _build(
                options, spec, resolved, index, store, run_id, cells, records, every, probes, targets, machine, reporter, on_round, no_test
            )
        classes = {chosen_class, host_class}
        found = answer(store, where=lambda rows: analysis.on_class(analysis.on_machine(rows, prefix), classes), loud=True)
        after, transitions = found.rows, list(found.transitions)
    mine = [r for r in after if r.get("run_id") == run_id]
    results = analysis.verdict(good, targets, after, mine, transitions, machine, found.quiet)
    allowed = options.allow_empty or bool(spec.tests.get("allow_empty"))
    notes += [f"{line} (allowed)" for line in no_test.suites_empty if allowed]
    return analysis.WatchReport(
        db=str(options.db),
        machine=machine,
        exclude_newer=options.exclude_newer or (spec.settings.exclude_newer if when else ""),
        good=good,
        held=tuple(held.items()),
        new=tuple((axis, tuple(v)) for axis, v in new.items()),
        results=tuple(results),
        refinement=refined,
        built=not options.dry_run,
        notes=tuple(notes),
        ran_no_test=tuple(no_test.suites_uncollected + ([] if allowed else no_test.suites_empty)),
    )


def _suite_options(options: WatchOptions) -> SweepOptions:
    """The suite as the sweep takes it: the flags, else (with the matrix's [tests] table left to
    `suite_for`) the suite the newest run of the results file recorded."""
    chosen = SweepOptions(options.matrix, options.db, env_root=options.env_root, tests=list(options.tests), tests_root=options.tests_root)
    chosen.keyword, chosen.marker, chosen.test_requirements = options.keyword, options.marker, list(options.test_requirements)
    if options.tests or options.tests_root or load_matrix(options.matrix, lenient=True).tests:
        return chosen
    with Store(options.db, read_only=True) as store:
        suites = [found for run in recorded.runs(store).values() if (found := suite_of_run(run))]
    if not suites:
        return chosen
    last = suites[-1]  # runs come oldest first
    chosen.tests, chosen.tests_root = [str(p) for p in last.get("paths") or []], str(last.get("root") or "")
    chosen.keyword, chosen.marker = str(last.get("k") or ""), str(last.get("m") or "")
    chosen.test_requirements = [*map(str, last.get("requirements") or []), *options.test_requirements]
    chosen.tests_of, chosen.tests_git = str(last.get("of") or ""), str(last.get("git") or "")
    return chosen


def _digest(prefix: str, scenarios: Sequence[Scenario]) -> str:
    """The watch run's id: this machine and these scenario files (an edited scenario is a new run)."""
    h = hashlib.sha1(prefix.encode())
    for scenario in sorted(scenarios, key=lambda s: s.name):
        h.update(f"{scenario.name}:{scenario.digest()}".encode())
    h.update(__version__.encode())
    return h.hexdigest()[:10]


def _build(
    options: WatchOptions,
    spec: MatrixSpec,
    resolved: ResolvedMatrix,
    index: PackageIndex,
    store: Store,
    run_id: str,
    cells: dict[str, Cell],
    records: dict[str, Cell],
    scenarios: list[Scenario],
    probes: dict[str, Scenario],
    targets: Sequence[analysis.Target],
    machine: str,
    reporter: Reporter | None,
    on_round: OnRound | None,
    no_test: Ledger,
) -> str:
    """Run the target cells as an ordinary sweep into the file, then refine what broke on their lines only.

    scenarios: what each target cell runs (a suite runs whole); probes: what refinement runs for
    a scenario's name or a test's node id; no_test gets the target cells whose suite ran no test."""
    plan = SweepPlan(
        SweepOptions(options.matrix, options.db, env_root=options.env_root),
        spec,
        resolved,
        index,
        scenarios,
        list(cells.values()),
        run_id,
        options.matrix.read_text(),
    )
    with Sweep(plan, store, live.watched(store, reporter)) as sweep:
        done = store.done_keys(run_id)
        work = [(cell, todo) for cell in cells.values() if (todo := sweep.todo(cell, done))]
        sweep.run_cells(work, origin="watch")
        no_test.suites_empty += sweep.ledger.suites_empty
        no_test.suites_uncollected += sweep.ledger.suites_uncollected
        if not options.refine or not sweep.settings.refine:
            return "refinement: off" + (" (--no-refine)" if not options.refine else " (refine = false in the matrix)")
        lines = {(t.axis, t.held) for t in targets}

        def answers() -> tuple[list[Transition], list[str]]:
            found = answer(store, where=lambda rows: analysis.on_machine(rows, machine), loud=True)  # quiet tests have no transition
            return [t for t in found.transitions if (t.axis, t.held) in lines], [machine]

        limit = sweep.settings.refine_limit if options.refine_limit is None else options.refine_limit
        known = {**records, **{c.id: c for c in cells.values()}}
        report: RefineReport = refine_rounds(sweep, answers, known, probes, sweep.settings.refine_lines, limit, on_round)
    return report.line()


def print_round(show: Callable[[str], None]) -> OnRound:
    """Refinement's rounds as log lines (to stderr: stdout carries the report)."""

    def on_round(number: int, plan: Plan) -> None:
        show(f"refinement round {number}: {len(plan.probes)} probe cell(s)")
        for probe in plan.probes:
            show(f"  {probe.line.axis} {probe.value}: {analysis.listing(probe.scenarios)} ({probe.why})")

    return on_round
