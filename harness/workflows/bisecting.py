"""`harness bisect`: drive the pure search (`analysis.bisect`) with real environments.

Each probe is one cell (the other axes pinned from a matrix cell or flags, the bisected axis
set to the candidate), built with the same `envs.build_env` a sweep uses, run with the same
runner, and stored as ordinary outcomes under the run `bisect-<scenario>-<axis>`, so the
dashboard shows the bisection. Outcomes already stored for a cell are reused.

One test of a team's suite (`--test NODEID`) is bisected the same way: each probe runs just
that node id through the sweep's suite machinery (`testsuite.run_suite`, a pytest worker forked
from the cell's fork server), so its status follows the suite's rules, and an xfail, xpass or
skip says nothing either way (`repeat_verdict`: the candidate is skipped, never good or bad).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.version import Version

from harness.analysis.bisect import BisectError, BisectResult, Probe, Verdict, bisect, repeat_verdict
from harness.analysis.rows import requested, suite_of_run
from harness.analysis.versions import between, git_url_without_ref, release
from harness.errors import BadInput, RunFailed
from harness.inputs.candidates import PackageIndex, ResolvedMatrix, index_for, resolve_matrix
from harness.inputs.matrix import Candidate, Cell, MatrixSpec, load_matrix
from harness.inputs.scenarios import Scenario, select
from harness.running.plan import SweepOptions, SweepPlan, suite_for
from harness.running.sweep import Reporter, Sweep
from harness.running.testsuite import Suite
from harness.storage import queries, recorded
from harness.storage.store import Store

_PR = re.compile(r"\(#(\d+)\)")


@dataclass
class BisectOptions:
    scenario: str  # a scenario's name or file; "" with `test`
    axis: str
    good: str = ""
    bad: str = ""
    matrix: Path = Path("matrix.toml")
    db: Path = Path("results/compat.duckdb")
    cell: str = ""  # pin the other axes from this cell of the matrix
    pins: dict[str, str] = field(default_factory=dict)  # or from flags: package -> version
    git: str = ""  # bisect commits of this repository (URL or local clone) instead of releases
    repeat: int = 1
    allowed_failures: int = 0
    env_root: Path | None = None
    # One test of a team's suite instead of a scenario: its node id, under `tests_root` (else the
    # matrix's [tests] root, else the root a run in `db` recorded for it, else "."), and the
    # suite's own test dependencies beside those of the [tests] table.
    test: str = ""
    tests_root: str = ""
    test_requirements: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """One candidate of the bisected axis: a release or a commit."""

    value: str  # version or commit sha
    subject: str = ""  # commit subject, for git steps

    def __str__(self) -> str:
        return f"{self.value[:12]} {self.subject}".strip() if self.subject else self.value

    def __repr__(self) -> str:  # as the search's messages quote a candidate: 'the good end '24.0' is skip'
        return repr(str(self))


def final_releases(index: PackageIndex, package: str) -> list[Version]:
    """Every final, non-yanked release of `package` on the index, oldest first."""
    return sorted(r.version for r in index.releases(package).values() if not r.yanked and not r.version.is_prerelease)


def release_steps(index: PackageIndex, package: str, good: str, bad: str) -> list[Step]:
    """Every final, non-yanked release between the ends (inclusive), ordered from good to bad."""
    for flag, end in (("--good", good), ("--bad", bad)):
        if release(end) is None:
            raise BadInput(f"{flag} {end!r} is not a version; pass a release of {package} (or a git ref with --git)")
    low, high = sorted((Version(good), Version(bad)))
    steps = between(final_releases(index, package), low, high, inclusive=True)
    for end in (good, bad):
        if Version(end) not in steps:
            raise BadInput(f"{package} {end} is not a release on the index; pick --good/--bad among the releases")
    ordered = steps if Version(good) < Version(bad) else list(reversed(steps))
    return [Step(str(v)) for v in ordered]


def git_steps(repo: str, good: str, bad: str) -> list[Step]:
    """First-parent commits from `good` to `bad` (both ends included), good end first."""
    older, newer = (good, bad) if _is_ancestor(repo, good, bad) else (bad, good)
    log = _git(repo, "log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{older}..{newer}")
    commits = [Step(*line.split("\t", 1)) for line in log.splitlines() if "\t" in line]
    start = Step(_git(repo, "rev-parse", f"{older}^{{commit}}").strip(), _git(repo, "log", "-1", "--format=%s", older).strip())
    steps = [start, *commits]
    return steps if older == good else list(reversed(steps))


def _git(repo: str, *args: str) -> str:
    proc = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadInput(f"git {' '.join(args)} failed in {repo!r}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    return proc.stdout


def _is_ancestor(repo: str, a: str, b: str) -> bool:
    return subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", a, b], capture_output=True).returncode == 0


def pr_number(subject: str) -> str:
    match = _PR.search(subject)
    return match.group(1) if match else ""


def _base_cell(resolved: ResolvedMatrix, options: BisectOptions) -> Cell:
    if options.cell:
        cells = {c.id: c for c in resolved.cells}
        if options.cell not in cells:
            raise BadInput(f"unknown cell id {options.cell!r}; list them with `harness list --matrix {options.matrix}`")
        base = cells[options.cell]
    else:
        base = resolved.cells[0]
    candidates = [
        Candidate(p, "version", options.pins[p]) if p in options.pins else c for p, c in ((c.package, c) for c in base.candidates)
    ]
    known = {c.package for c in candidates}
    candidates += [Candidate(p, "version", v) for p, v in options.pins.items() if p not in known]
    if options.axis not in {c.package for c in candidates}:
        candidates.append(Candidate(options.axis, "version", "0"))  # placeholder, replaced per probe
    return Cell(tuple(candidates), base.python)


def with_step(cell: Cell, axis: str, step: Step, repo: str) -> Cell:
    def swap(c: Candidate) -> Candidate:
        if c.package != axis:
            return c
        if repo:
            url = repo if "://" in repo else Path(repo).resolve().as_uri()
            return Candidate(axis, "git", f"git+{git_url_without_ref(url) if url.startswith('git+') else url}@{step.value}", step.value)
        return Candidate(axis, "version", step.value)

    return Cell(tuple(swap(c) for c in cell.candidates), cell.python)


@dataclass
class BisectRun:
    result: BisectResult[Step]
    fix: bool  # True when the good end is newer: the answer is the first fixed candidate
    run_id: str
    built: int  # environments built (not reused) during the bisection


@dataclass
class BisectSetup:
    """Everything checked before a results file is opened for writing: bad input writes nothing."""

    options: BisectOptions
    spec: MatrixSpec
    resolved: ResolvedMatrix
    index: PackageIndex
    scenario: Scenario  # with --test, the suite narrowed to that one node id
    base: Cell
    steps: list[Step]
    fix: bool

    @property
    def name(self) -> str:
        """What the probes' outcomes are stored as: the scenario's name, or the test's node id."""
        return self.options.test or self.scenario.name

    @property
    def run_id(self) -> str:
        return f"bisect-{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.name).strip('_')}-{self.options.axis}"


def prepare_bisect(options: BisectOptions) -> BisectSetup:
    """Validate the request and list the candidates; one end may come from the stored outcomes (read only)."""
    if bool(options.scenario) == bool(options.test):
        raise BadInput("pass exactly one of --scenario (a name or file) and --test (a node id of your suite, e.g. tests/test_x.py::test_y)")
    if options.test and options.repeat != 1:
        raise BadInput(f"--repeat {options.repeat}: a test runs once per cell; leave --repeat out with --test")
    spec: MatrixSpec = load_matrix(options.matrix, lenient=True)
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index)
    scenario = _one_test(options, spec) if options.test else select([options.scenario])[0]
    name = options.test or scenario.name
    base = _base_cell(resolved, options)
    if not options.good or not options.bad:
        if options.git or not (options.good or options.bad):
            raise BadInput(
                "pass --good and --bad (a release or git ref for each end), or one release end to take the other from stored outcomes"
            )
        rows = []
        if options.db.is_file():
            with Store(options.db, read_only=True) as store:
                rows = queries.outcome_rows_with_traces(store, scenarios=[name])  # its rows alone, by identity or node id
        _fill_end_from_rows(options, base, name, rows, final_releases(index, options.axis))
    steps = (
        git_steps(options.git, options.good, options.bad) if options.git else release_steps(index, options.axis, options.good, options.bad)
    )
    return BisectSetup(options, spec, resolved, index, scenario, base, steps, _is_fix(options, steps))


def _one_test(options: BisectOptions, spec: MatrixSpec) -> Suite:
    """The suite (the matrix's [tests] table, the flags, or what a run in the results file
    recorded) narrowed to one node id: no -k or -m (the node id is the selection), and pytest,
    the plugins its configuration names and the suite's requirements in every probe's cell."""
    table = spec.tests
    root = options.tests_root or str(table.get("root", ""))
    if not root and not table.get("of") and options.db.is_file():
        root = recorded_root(options.db, options.test)
    chosen = SweepOptions(
        options.matrix,
        options.db,
        env_root=options.env_root,
        tests=[options.test],
        tests_root=root or ".",
        test_requirements=options.test_requirements,
    )
    suite = suite_for(chosen, spec)
    assert suite is not None  # `tests` names one
    return replace(suite, keyword="", marker="")


def recorded_root(db: Path, nodeid: str) -> str:
    """The tests root a run of the results file recorded for its suite, preferring a run that
    stored `nodeid`; "" when no run recorded one (files written before runs recorded their suite)."""
    with Store(db, read_only=True) as store:
        runs = recorded.runs(store)
        stored = {r["run_id"] for r in store.fetch("SELECT DISTINCT run_id FROM outcomes WHERE scenario = ?", [nodeid])}
    roots = [(run_id in stored, str(suite["root"])) for run_id, info in runs.items() if (suite := suite_of_run(info)).get("root")]
    return max(roots, key=lambda found: found[0])[1] if roots else ""


def run_bisect(
    setup: BisectSetup, store: Store, reporter: Reporter | None = None, on_probe: Callable[[Probe[Step], int], None] | None = None
) -> BisectRun:
    """Probe the candidates through `Sweep.run_cell`, reusing every outcome already stored for a probe's cell."""
    options = setup.options
    setup.spec.settings.repeats = options.repeat
    plan = SweepPlan(
        SweepOptions(options.matrix, options.db, env_root=options.env_root),
        setup.spec,
        setup.resolved,
        setup.index,
        [setup.scenario],
        [],
        setup.run_id,
        options.matrix.read_text(),
    )
    sweep = Sweep(plan, store, reporter)
    built = 0

    def probe(step: Step) -> Verdict:
        nonlocal built
        cell = with_step(setup.base, options.axis, step, options.git)
        name = setup.name
        stored = queries.statuses(store, cell.id, name)
        if len(stored) < options.repeat:
            done = store.done_keys(setup.run_id)
            todo = [(setup.scenario, r) for r in range(options.repeat) if (cell.id, name, r) not in done]
            ran = sweep.run_cell(cell, todo)
            built += 0 if ran.env.reused else 1
            stored = queries.statuses(store, cell.id, name)
            if not stored and ran.env.ready and options.test:
                # pytest ran nothing of that name here: a node id it did not collect (a typo, a
                # path not relative to the tests root, or addopts' -m leaving it out)
                said = "; ".join(sorted({f"{o.scenario}: {o.status}" for o in ran.outcomes}))[:300]
                raise RunFailed(f"pytest reported no test {name!r} in {cell.id}" + (f" ({said})" if said else ""))
        return repeat_verdict(stored[-options.repeat :], options.allowed_failures)

    class _Handler:
        def probed(self, p: Probe[Step], remaining: int) -> None:
            if on_probe:
                on_probe(p, remaining)

    try:
        result = bisect(setup.steps, probe, handler=_Handler())
    except BisectError as exc:
        # an end that fails to be what the user said (or says nothing: xfail, skip, not built)
        raise RunFailed(f"{exc}; the probes above say why") from None
    finally:
        sweep.close()  # the zygote served every probe; it goes with the bisection
    return BisectRun(result, setup.fix, setup.run_id, built)


def bisect_file(options: BisectOptions, on_probe: Callable[[Probe[Step], int], None] | None = None) -> BisectRun:
    """`harness bisect`: check the request and list the candidates (`prepare_bisect`: every mistake
    is found before the results file is opened), then probe them, storing into `options.db`."""
    setup = prepare_bisect(options)
    with Store(options.db) as store:
        return run_bisect(setup, store, on_probe=on_probe)


def stored_verdicts(rows: list[dict[str, object]], base: Cell, axis: str) -> dict[str, Verdict]:
    """Verdicts per release of `axis` from stored outcomes of cells equal to `base` on every other axis."""
    others = {c.package: c.value for c in base.candidates if c.package != axis and c.kind == "version"}
    statuses: dict[str, list[str]] = {}
    for row in rows:
        values = requested(row)
        if axis not in values or any(values.get(k) != v for k, v in others.items()):
            continue
        statuses.setdefault(str(values[axis]), []).append(str(row["status"]))
    return {version: repeat_verdict(found) for version, found in statuses.items()}


def _fill_end_from_rows(
    options: BisectOptions, base: Cell, scenario: str, rows: list[dict[str, object]], releases: Sequence[Version] = ()
) -> None:
    """One end given: the other is the nearest stored release with the opposite verdict: the one
    with the fewest of `releases` (the index's) between it and the given end, in the one order."""
    verdicts = stored_verdicts(rows, base, options.axis)
    given = options.good or options.bad
    wanted = Verdict.BAD if options.good else Verdict.GOOD
    candidates = [v for v, verdict in verdicts.items() if verdict == wanted and v != given]
    if not candidates:
        raise BadInput(
            f"no stored outcome of {scenario} with {options.axis} {'failing' if options.good else 'passing'} and the other axes as in "
            f"{base.id}; pass --{'bad' if options.good else 'good'} or run a sweep over {options.axis} first"
        )
    nearest = min(candidates, key=lambda v: len(between(releases, *sorted((Version(v), Version(given))))))
    if options.good:
        options.bad = nearest
    else:
        options.good = nearest


def _is_fix(options: BisectOptions, steps: list[Step]) -> bool:
    if options.git:
        return not _is_ancestor(options.git, options.good, options.bad)
    return Version(options.good) > Version(options.bad)


def describe(run: BisectRun, axis: str) -> str:
    r = run.result
    answer, other = (r.last_good, r.first_bad) if run.fix else (r.first_bad, r.last_good)
    verb, other_word = ("fixed in", "still failing in") if run.fix else ("broken in", "last good")
    pr = pr_number(answer.subject)
    line = f"{verb} {axis} {answer}" + (f" (PR #{pr})" if pr and f"#{pr}" not in str(answer) else "") + f"; {other_word} {other}"
    if r.undecided:
        line += f"; undecided (could not build or run): {', '.join(str(s) for s in r.undecided)}"
    return line
