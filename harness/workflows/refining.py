"""Refinement: turn the ranges a sweep found into exact releases by building the releases in between.

The sweep's default last step (`refine_run`) and `harness refine --db` (`refine_file`). The
rounds are `analysis.refine.search` (pure); this module gives it its seams: the answers of the
stored outcomes (`answering.answer`, as every face reads them), and a build that runs a round's
probe cells through the sweep's own scheduler (`Sweep.run_cells`, origin `refine`): every probe
is an ordinary stored outcome, a cell already built or run is reused, and a rerun resumes. It
stops when no range can be narrowed by a build, or at the matrix's `refine_limit` of probe cells
(the answers left then say "not built").
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from harness.analysis.attribution import UNLISTED, Transition, held_text
from harness.analysis.bisect import Verdict, bisect, repeat_verdict
from harness.analysis.lines import Holding, account, account_text
from harness.analysis.refine import Answers, Buildable, OnRound, Probe, RefineReport, Share, offline_probes, search
from harness.analysis.rows import Machine, is_test, suite_of_run
from harness.analysis.versions import git_url_without_ref, release
from harness.errors import BadInput
from harness.inputs.candidates import expand_find_links, index_for, python_version_of, resolve_matrix
from harness.inputs.matrix import Candidate, Cell, Settings, load_matrix
from harness.inputs.scenarios import Scenario, load_scenario, lookup_names, select
from harness.running import hostinfo
from harness.workflows.answering import Answer, answer, index_releases

if TYPE_CHECKING:
    from harness.storage.store import Store
    from harness.workflows.attributing import Attributed
    from harness.workflows.bisecting import Step
from harness.running.plan import SweepOptions, SweepPlan
from harness.running.sweep import ResultStore, Sweep
from harness.running.testsuite import Suite
from harness.storage.resultsfile import SqlResultsFile


def _probe_cell(probe: Probe, cells: Mapping[str, Cell]) -> Cell:
    """The base cell with the probe's axis set to its release."""
    return cells[probe.base_cell].with_candidate(Candidate(probe.line.axis, "version", probe.value))


def refine_rounds(
    sweep: Sweep,
    answers: Answers,
    cells: dict[str, Cell],
    scenarios: Mapping[str, Scenario],
    share: Share,
    limit: int,
    on_round: OnRound | None,
) -> RefineReport:
    """Refinement's rounds (`analysis.refine.search`) over the ranges `answers` gives, each round's
    probe cells built from `cells` and run through `sweep`, which stores their outcomes."""

    def build(probes: Sequence[Probe]) -> int:
        done = sweep.store.done_keys(sweep.plan.run_id)
        # a test is named by its identity across the suite's releases; pytest is given a node id it had
        tests = any("::" in name for probe in probes for name in probe.scenarios)
        nodes = _node_ids(sweep.store) if tests else {}
        work = []
        for probe in probes:
            cell = _probe_cell(probe, cells)
            cells[cell.id] = cell
            todo = _probe_work(cell.id, [nodes.get(n, n) for n in probe.scenarios], scenarios, sweep.settings.repeats, done)
            if todo:
                work.append((cell, todo))
        before = sweep.ledger.envs_built
        sweep.run_cells(work, origin="refine")
        return sweep.ledger.envs_built - before

    return search(answers, build, share=share, limit=limit, buildable=_buildable(sweep), on_round=on_round)


def _probe_work(
    cell_id: str, names: Sequence[str], scenarios: Mapping[str, Scenario], repeats: int, done: set[tuple[str, str, int]]
) -> list[tuple[Scenario, int]]:
    """What a probe cell runs: each scenario named, and the suite's tests named (node ids) as
    one suite narrowed to them, so that they share one collection. A suite's tests run once
    (repeat 0); the sweep stores them under their node ids."""
    todo: list[tuple[Scenario, int]] = []
    tests: list[str] = []
    suite = next((s for s in scenarios.values() if isinstance(s, Suite)), None)
    for name in names:
        found = scenarios.get(name)
        if isinstance(found, Suite) or (found is None and suite is not None and "::" in name):
            tests += [name] if (cell_id, name, 0) not in done else []
        elif found is not None:
            todo += [(found, r) for r in range(repeats) if (cell_id, name, r) not in done]
    if tests and suite is not None:
        todo.append((replace(suite, paths=tuple(tests), keyword="", marker=""), 0))
    return todo


def _buildable(sweep: Sweep) -> Buildable | None:
    """On an offline runner, only the releases its wheelhouse holds can be built; the others
    stay "not built" in the answers (a bisection skips them). Online, every listed release can."""
    if not sweep.settings.no_index:
        return None
    index = sweep.plan.index
    return lambda axis, value: value in index.releases(axis)


def refine_run(sweep: Sweep, store: ResultStore, on_round: OnRound | None = None) -> RefineReport:
    """The sweep's last step: narrow every range of its own run on this machine (its matrix settings say how far)."""
    settings = sweep.settings
    run_id = sweep.plan.run_id
    if not settings.refine:
        return RefineReport(stopped="refine = false in the matrix")

    def answers() -> tuple[Sequence[Transition], list[str]]:
        found = answer(store, run_id, loud=True)  # quiet tests have no transition: one stand-in
        label = found.machine_label()  # a sweep runs on one machine
        return found.transitions, [label] if label else []

    cells = {c.id: c for c in sweep.plan.cells}
    scenarios = {s.name: s for s in sweep.plan.scenarios}
    return refine_rounds(sweep, answers, cells, scenarios, settings.refine_lines, settings.refine_limit, on_round)


# -- over a results file ----------------------------------------------------------------------
def stored_cell(record: Mapping[str, Any]) -> Cell:
    """A cell rebuilt from its stored record: the requested versions, git commits and Python."""
    commits = record.get("git_commits") or {}
    candidates = []
    for package, value in (record.get("versions") or {}).items():
        value = str(value)
        if value == "inherit":
            candidates.append(Candidate(package, "inherit"))
        elif value.startswith("git+"):
            candidates.append(Candidate(package, "git", value, str(commits.get(package) or "")))
        elif release(value) is not None:
            candidates.append(Candidate(package, "version", value))
        else:
            candidates.append(Candidate(package, "path", value))
    return Cell(tuple(candidates), str(record.get("python") or ""))


def here(python: str) -> str:
    """The start of this machine's class label (platform, CPU or GPU, Python); its CUDA comes with the torch build."""
    host = hostinfo.describe()
    version = python_version_of(python)
    return Machine(str(host["platform"]), str(host["gpu"]), f"{version[0]}.{version[1]}" if version else "").label()


def refine_file(
    db: Path,
    matrix: Path,
    *,
    scenario_files: Sequence[str] = (),
    repos: Mapping[str, str] | None = None,
    limit: int | None = None,
    share: Share | None = None,
    env_root: Path | None = None,
    on_round: OnRound | None = None,
    on_probe: Callable[[str], None] | None = None,
) -> tuple[RefineReport, str, list[CommitAnswer]]:
    """`harness refine`: narrow the ranges of a results file that hold on this machine; then, for axes
    with a clone in `repos`, walk each exact release answer down to its commit.
    Returns (report, the run id of the probes, the commit answers).

    Settings (index, find-links, python, repeats) come from `matrix`; the probe cells from the
    stored cells of each range's line. Probes are stored under run `refine-<machine>`.
    """
    from harness.storage import recorded  # DuckDB: only where a results file is read
    from harness.storage.store import Store

    spec = load_matrix(matrix, lenient=True)
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index)  # validates the matrix: bad input writes nothing
    prefix = here(spec.settings.python)
    run_id = "refine-" + hashlib.sha1(prefix.encode()).hexdigest()[:10]
    with Store(db) as store:
        found = answer(store, loud=True)
        if not found.rows:
            raise BadInput(f"no outcomes in {str(db)!r}; run a sweep first")
        names = set(found.quiet.expand({str(r["scenario"]) for r in found.rows}))
        files = lookup_names()  # the project's scenarios/, then the built-in packs
        scenarios: dict[str, Scenario] = {n: load_scenario(files[n]) for n in names if n in files}
        scenarios.update({s.name: s for s in select(list(scenario_files))} if scenario_files else {})
        suite = _recorded_suite(recorded.runs(store), spec, matrix, db, env_root) if any(map(is_test, names)) else None
        if suite is not None:
            scenarios[suite.name] = suite  # its tests' node ids run as one narrowed suite (`_probe_work`)
        machines = found.machines_of(prefix)
        if not found.transitions:  # every scenario the same in every cell: no range (a merged file of shards, often)
            return RefineReport(), run_id, []
        if not machines:
            raise BadInput(
                f"no answer in {str(db)!r} holds on this machine ({prefix}); refine on the machine it ran on: "
                + (", ".join(found.machines_of()) or "no machine recorded")
            )
        needed = sorted(
            {t.scenario for t in found.transitions if t.machine in machines and not (suite and is_test(t.scenario))} - set(scenarios)
        )
        if needed:
            raise BadInput(
                f"scenario(s) {', '.join(needed)} of {str(db)!r} are not in the harness's scenarios/; "
                "pass each file with --scenario path/to/file.py"
            )

        def answers() -> tuple[Sequence[Transition], list[str]]:
            now = answer(store, loud=True)
            return now.transitions, now.machines_of(prefix)

        cells = {str(r["cell_id"]): stored_cell(r) for r in reversed(recorded.all_cell_records(store))}
        spec.settings.refine_limit = spec.settings.refine_limit if limit is None else limit
        plan = SweepPlan(
            SweepOptions(matrix, db, env_root=env_root), spec, resolved, index, list(scenarios.values()), [], run_id, matrix.read_text()
        )
        with Sweep(plan, store) as sweep:
            report = refine_rounds(
                sweep, answers, cells, scenarios, share or spec.settings.refine_lines, spec.settings.refine_limit, on_round
            )
            commits = []
            if repos:
                transitions, here_now = answers()
                exact = [t for t in transitions if t.machine in here_now]
                commits = refine_commits(sweep, store, exact, repos, cells, scenarios, on_probe)
    return report, run_id, commits


def git_repos(entries: Sequence[str]) -> dict[str, str]:
    """`--git AXIS=PATH` entries -> {axis: the clone's absolute path}; anything else is bad input."""
    repos = {}
    for entry in entries:
        axis, _, path = entry.partition("=")
        if not axis or not path or (not Path(path, ".git").exists() and not Path(path, "HEAD").exists()):
            raise BadInput(f"--git {entry!r} must be AXIS=PATH with PATH a git clone, e.g. --git accelerate=/src/accelerate")
        repos[axis.strip()] = str(Path(path).resolve())
    return repos


@dataclass
class Refined:
    """What `harness refine` did: the rounds, the probes' run, the commit answers, and the file's
    answers afterwards (attributed and stored, as `harness attribute` stores them)."""

    report: RefineReport
    run_id: str
    commits: list[CommitAnswer]
    answers: Attributed


def refine_and_attribute(
    db: Path,
    matrix: Path,
    *,
    git: Sequence[str] = (),
    limit: int | None = None,
    share: Share | None = None,
    scenario_files: Sequence[str] = (),
    env_root: Path | None = None,
    on_round: OnRound | None = None,
    on_probe: Callable[[str], None] | None = None,
) -> Refined:
    """`harness refine`: check the request, refine the file (`refine_file`; `git`: AXIS=PATH clones
    to walk exact answers down to the commit), then attribute it and store the answers."""
    from harness.workflows.attributing import attribute_file  # DuckDB: only where a results file is read

    if limit is not None and limit < 0:
        raise BadInput(f"--limit {limit}: give 0 (no limit) or a positive number of probe cells")
    repos = git_repos(git)
    report, run_id, commits = refine_file(
        db,
        matrix,
        scenario_files=scenario_files,
        repos=repos,
        on_probe=on_probe,
        limit=limit,
        share=share,
        env_root=env_root,
        on_round=on_round,
    )
    return Refined(report, run_id, commits, attribute_file(db))


def _recorded_suite(runs: Mapping[str, Mapping[str, Any]], spec: Any, matrix: Path, db: Path, env_root: Path | None) -> Suite | None:
    """The suite the newest run of the file recorded, as a sweep takes it (with what its cells need)."""
    from harness.running.plan import suite_for

    recorded = [found for run in runs.values() if (found := suite_of_run(run))]
    if not recorded:
        return None
    last = recorded[-1]  # runs come oldest first
    options = SweepOptions(
        matrix, db, env_root=env_root, tests=[str(p) for p in last.get("paths") or []], tests_root=str(last.get("root") or "")
    )
    options.keyword, options.marker = str(last.get("k") or ""), str(last.get("m") or "")
    options.test_requirements = [str(r) for r in last.get("requirements") or []]
    options.tests_of, options.tests_git = str(last.get("of") or ""), str(last.get("git") or "")
    return suite_for(options, spec)


# -- down to the commit ------------------------------------------------------------------------
@dataclass(frozen=True)
class CommitAnswer:
    """An exact release answer walked down to the commit (and its PR) between the two releases."""

    transition: Transition
    commit: str  # the first commit on the new side ("" when the walk could not decide)
    subject: str
    other: str  # the last commit on the old side
    undecided: tuple[str, ...] = ()  # commits that could not be built or run between them

    def line(self) -> str:
        t = self.transition
        from harness.workflows.bisecting import pr_number

        pr = pr_number(self.subject)
        found = f"{self.commit[:12]} {self.subject}" + (f" (PR #{pr})" if pr and f"#{pr}" not in self.subject else "")
        text = f"{t.headline()}: {t.kind} by commit {found}; the commit before it is {self.other[:12]}"
        if self.undecided:
            text += f"; undecided (could not build or run): {', '.join(c[:12] for c in self.undecided)}"
        return text


def release_tag(repo: str, version: str) -> str:
    """The tag of a release in a clone: `v1.14.0` or `1.14.0`."""
    for tag in (f"v{version}", version):
        if subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "-q", f"{tag}^{{commit}}"], capture_output=True).returncode == 0:
            return tag
    raise BadInput(f"no tag v{version} or {version} in {repo!r}; pass a clone of the axis' repository with its release tags")


def refine_commits(
    sweep: Sweep,
    store: Store,
    transitions: Sequence[Transition],
    repos: Mapping[str, str],
    cells: Mapping[str, Cell],
    scenarios: Mapping[str, Scenario],
    on_probe: Callable[[str], None] | None = None,
) -> list[CommitAnswer]:
    """For each exact release answer on an axis with a clone in `repos`: bisect the first-parent
    commits between the two release tags, on the answer's line (one line per answer), through the
    same cells and store as every other probe."""
    from harness.storage import queries  # DuckDB: only where a results file is read
    from harness.workflows.bisecting import git_steps, with_step

    answers = []
    seen: set[tuple[str, str, str, str, str]] = set()
    for t in transitions:
        key = (t.scenario, t.signature, t.axis, t.before, t.after)
        if t.axis not in repos or not t.exact or key in seen or release(t.before) is None or release(t.after) is None:
            continue
        seen.add(key)
        repo = repos[t.axis]
        old, new = release_tag(repo, t.before), release_tag(repo, t.after)
        good, bad = (new, old) if t.kind == "fixed" else (old, new)
        steps = git_steps(repo, good, bad)
        base = cells[t.before_cell]
        scenario = scenarios[t.scenario]

        def probe(step: Step, base: Cell = base, scenario: Scenario = scenario, axis: str = t.axis, repo: str = repo) -> Verdict:
            cell = with_step(base, axis, step, repo)
            if not queries.statuses(store, cell.id, scenario.name):
                sweep.run_cells([(cell, [(scenario, 0)])], origin="refine")
            verdict = repeat_verdict(queries.statuses(store, cell.id, scenario.name))
            if on_probe:
                on_probe(f"  {axis} {step}: {verdict.value}")
            return verdict

        result = bisect(steps, probe)
        first, last = (result.first_bad, result.last_good) if t.kind == "introduced" else (result.last_good, result.first_bad)
        answers.append(CommitAnswer(t, first.value, first.subject, last.value, tuple(s.value for s in result.undecided)))
    return answers


# -- for an offline runner --------------------------------------------------------------------
def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string


def _value_of(candidate: Candidate) -> str:
    """How a matrix names a candidate: a release, `inherit`, a git URL pinned to its commit, a path."""
    if candidate.kind == "inherit":
        return "inherit"
    if candidate.kind == "git" and candidate.commit:
        return f"{git_url_without_ref(candidate.value)}@{candidate.commit}"
    return candidate.value


@dataclass(frozen=True)
class ProbePlan:
    """`harness refine --plan`: the probe matrix, its probes, and the lines with a range it leaves out (and why)."""

    text: str
    probes: list[Probe]
    left_out: list[str]


def probe_matrix(db: Path, matrix: Path, rounds: int, machine: str, axes: Sequence[str] = ()) -> ProbePlan:
    """A matrix of the probe cells the next `rounds` rounds of refinement may build on machines
    whose label contains `machine` (on `axes` only, when given), on every line of the file with a
    range ([[include]] lines too): run it where the runner is (offline: `harness wheelhouse
    --matrix` of it first), merge its results, and attribute or plan again.

    A runner's file may not know which releases lie between two of its releases (its wheelhouse
    carried no list of that axis): those lists are asked of the index here, as `harness
    attribute` does, so that its ranges can be planned too."""
    from harness.storage import recorded  # DuckDB: only where a results file is read
    from harness.storage.store import Store

    if rounds < 1:
        raise BadInput(f"--rounds {rounds}: give at least 1")
    source = tomllib.loads(matrix.read_text())
    with Store(db, read_only=True) as store:
        found = answer(store, loud=True)
        cells = {str(r["cell_id"]): stored_cell(r) for r in reversed(recorded.all_cell_records(store))}
    found = _listed_here(found, matrix)
    labels = [label for label in found.machines_of() if machine.lower() in label.lower()]
    if not labels:
        raise BadInput(
            f"no answer in {str(db)!r} holds on a machine matching {machine!r}; machines: {', '.join(found.machines_of()) or 'none'}"
        )
    transitions = list(found.transitions)
    probes = [p for label in labels for p in offline_probes(transitions, label, rounds) if not axes or p.line.axis in axes]
    left_out = _plan_left_out(transitions, labels, probes, axes)
    if not probes:
        why = f" ({'; '.join(left_out)})" if left_out else ""
        raise BadInput(f"no range in {str(db)!r} on {', '.join(labels)} that a build could narrow: nothing to prepare{why}")
    built = [_probe_cell(p, cells) for p in probes]
    settings = {**source.get("matrix", {}), "refine": False, "scenarios": sorted({s for p in probes for s in p.scenarios})}
    lines = [
        f"# The probe cells of the next {rounds} round(s) of refinement on {', '.join(labels)},",
        f"# from {db}: every release a bisection of each range may build, whichever way it goes.",
        "# Prepare: harness wheelhouse --matrix THIS; run: harness sweep --matrix THIS; then merge and plan again.",
        "[matrix]",
        *(f"{key} = {_toml_value(value)}" for key, value in settings.items()),
        "",
        "[axes]",
        *(f"{json.dumps(c.package)} = [{json.dumps(_value_of(c))}]" for c in built[0].candidates),
    ]
    for cell in built[1:]:
        lines += ["", "[[include]]", *(f"{json.dumps(c.package)} = {json.dumps(_value_of(c))}" for c in cell.candidates)]
    return ProbePlan("\n".join(lines) + "\n", probes, left_out)


def _listed_here(found: Answer, matrix: Path) -> Answer:
    """`found` with the index's release lists of the axes no run of the file listed (an offline
    runner whose wheelhouse carried none); as it was if the index cannot be reached."""
    if not found.unlisted:
        return found
    spec = load_matrix(matrix, lenient=True)
    spec.settings.no_index = False  # the runner's own setting; here the index is reachable
    fetched, _ = index_releases(index_for(spec.settings), list(found.unlisted), spec.settings.python)
    if not fetched:
        return found
    return found.relisted({**found.releases, **{axis: [v for v, _ in pairs] for axis, pairs in fetched.items()}})


def _plan_left_out(transitions: Sequence[Transition], labels: Sequence[str], probes: Sequence[Probe], axes: Sequence[str]) -> list[str]:
    """The lines with a range on these machines that no probe of the plan builds on, each with why."""
    planned = {(p.line.machine, p.line.axis, p.line.held) for p in probes}
    found: dict[tuple[str, str, tuple[tuple[str, str], ...]], str] = {}
    for t in transitions:
        key = (t.machine, t.axis, t.held)
        if not t.is_range or t.machine not in labels or key in planned or key in found:
            continue
        if axes and t.axis not in axes:
            why = f"not along --axis {', '.join(axes)}"
        elif release(t.before) is None or release(t.after) is None:
            why = "an end is a git or path source: `harness bisect --git` walks its commits"
        elif UNLISTED in t.not_built:
            why = f"the index's releases of {t.axis} could not be listed here"
        else:
            why = f"no release between left to build ({t.gaps()})"
        where = f" on {t.machine}" if len(labels) > 1 else ""
        found[key] = f"{t.axis}, with {held_text(t.held)}{where}: {why}" if t.held else f"{t.axis}{where}: {why}"
    return list(found.values())


def write_probe_matrix(db: Path, matrix: Path, out: Path, rounds: int, machine: str, axes: Sequence[str] = ()) -> ProbePlan:
    """`harness refine --plan OUT`: write `probe_matrix`'s matrix to `out`; returns the plan."""
    plan = probe_matrix(db, matrix, rounds, machine, axes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(plan.text)
    return plan


# -- the one trip's account -------------------------------------------------------------------
def trip_account(db: Path, matrix: Path, wheelhouse: Path | None = None) -> list[str]:
    """`harness refine --account`: per line of the matrix, how each answer of the results file was
    reached (exact; a range because the wheelhouse did not hold the releases between; because its
    budget ran out; ...) and whether a second trip can help. Reads the wheelhouse's manifest (in
    `wheelhouse`, else the matrix's find-links folder that has one) and the results, never an
    index: it runs on the offline runner, from a JSON-lines shard as from a DuckDB file."""
    from harness.storage.opening import open_results
    from harness.workflows.wheelhouse import MANIFEST

    if not db.is_file():
        raise BadInput(f"--db {str(db)!r} does not exist; pass the results file of the trip (its one-trip.jsonl)")
    spec = load_matrix(matrix, lenient=True)  # its settings only: the runner has no index to resolve against
    folders = [wheelhouse] if wheelhouse is not None else [Path(f) for f in expand_find_links(spec.settings.find_links)]
    if wheelhouse is not None and not (wheelhouse / MANIFEST).is_file():
        raise BadInput(f"--wheelhouse {str(wheelhouse)!r} holds no {MANIFEST}; pass the folder `harness wheelhouse --out` wrote")
    folder = next((f for f in folders if (f / MANIFEST).is_file()), None)
    holding = _holding_of(folder / MANIFEST) if folder is not None else None
    with open_results(db, read_only=True) as results:
        found = answer(results, loud=True)
    lines = account(found.transitions, holding)
    text = account_text(lines)
    if folder is None and not all(line.exact for line in lines):
        text.append(f"  (no {MANIFEST} in {', '.join(map(str, folders)) or 'the matrix find_links'}: pass --wheelhouse DIR)")
    if any(r.reached == "not built" for line in lines for r in line.answers):
        text.append(f"  held, not built: {_why_not_built(spec.settings)}")
    return text


def _holding_of(manifest: Path) -> Holding:
    """What the wheelhouse recorded of refinement, with every release it holds a wheel of (the matrix's own too)."""
    holding = Holding.from_manifest(json.loads(manifest.read_text()).get("refinement") or {})
    axes = {r.axis for r in holding.ranges}
    for wheel in manifest.parent.glob("*.whl"):
        try:
            name, version, *_ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if str(name) in axes:
            holding.held.add((str(name), str(version)))
    return holding


def _why_not_built(settings: Settings) -> str:
    """Why refinement left releases the wheelhouse holds unbuilt, from the matrix's settings."""
    if not settings.refine:
        return "refine = false in the matrix; with true the sweep builds them"
    if settings.refine_lines == "first":
        return 'refine_lines = "first" refines one line per failure; "all" builds every line'
    if settings.refine_limit:
        return f"refine_limit = {settings.refine_limit} probe cell(s) may have stopped it; rerun the sweep with a larger one (it resumes)"
    return "the sweep stopped before them (its time limit?); rerun it with the same wheelhouse: it resumes"


def _node_ids(store: ResultStore) -> dict[str, str]:
    """Test identity -> a node id pytest can be given: from DuckDB in one query, from a shard by its rows."""
    if hasattr(store, "fetch"):
        from harness.storage import queries

        return queries.node_ids(cast(SqlResultsFile, store))
    return {str(r["scenario"]): str(r["node_id"]) for r in store.outcome_rows()}
