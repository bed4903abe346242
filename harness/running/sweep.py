"""A sweep: every cell's env, every scenario in it, every outcome into the store.

The steps are small and separate (as nox's workflow is): `plan` (validate everything, write
nothing), then per cell prepare (env build, fork server: `schedule.Feed` does it ahead) →
check applicability → run → interpret (`checks.Checks`: a runner's runs made outcomes) → store.
Outcomes already stored for the run are not
recomputed, so a killed sweep resumes where it stopped. The GPUs are `gpus.GpuPlan`'s, the
memory of CUDA-initialising modules is `culprits.CudaCulprits`', and bisection and refinement
drive single cells through `Sweep.run_cell`, which returns what they need to know (`CellRun`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

from harness import __version__
from harness.analysis import outcome, versions
from harness.analysis.outcome import CellRecord, Collection, Outcome
from harness.analysis.redact import mask, secret_values
from harness.errors import BadInput
from harness.inputs.candidates import (
    RELEASES_FILE,
    IndexUnreachable,
    PackageIndex,
    ResolvedMatrix,
    expand_find_links,
    index_for,
    install_tags,
    listed_releases,
    period_date,
    python_version_of,
    resolve_matrix,
)
from harness.inputs.fingerprint import code_digest
from harness.inputs.matrix import Cell, MatrixSpec, load_matrix, shard_cells
from harness.inputs.scenarios import Scenario, applicability, select
from harness.inputs.testsource import check_source
from harness.running import hostinfo
from harness.running.bytecode import bytecode_env, precompile_workers
from harness.running.checks import Checks, SuiteTally
from harness.running.culprits import CudaCulprits
from harness.running.envs import EnvResult, IndexSeen, build_env
from harness.running.gpus import GpuPlan
from harness.running.preloads import learned_preload, remember
from harness.running.runner import CellRunner
from harness.running.schedule import Feed, Help, Idle, Tail
from harness.running.shards import SETUP_SECONDS, Durations, Layout, Piece, cell_weights, lay_out
from harness.running.testsuite import Suite, make_suite, needed_packages
from harness.running.zygote import ZygotePool
from harness.storage import queries
from harness.storage.opening import open_results
from harness.storage.resultsfile import ResultsFile, SqlResultsFile
from harness.storage.shardfile import ShardStore

Todo = list[tuple[Scenario, int]]  # (scenario, repeat) pairs still to run in a cell


@dataclass
class SweepOptions:
    matrix: Path
    db: Path
    cells: list[str] = field(default_factory=list)  # only these cell ids
    scenarios: list[str] = field(default_factory=list)  # names or paths; overrides the matrix
    run_id: str = ""
    fresh: bool = False  # a new run (new id), so every outcome is computed again
    model: str = ""
    adapter: str = ""
    device: str = ""
    env_root: Path | None = None
    jobs: int = 1  # cells built and run at once; with GPUs, each job gets one GPU
    gpus: list[str] | None = None  # GPU ids to use (default: every GPU nvidia-smi sees)
    shard: tuple[int, int] | None = None  # (i, n): run only the i-th of n deterministic slices
    durations: Path | None = None  # with a suite and a shard: the results file whose stored seconds balance the shards (else `db`)
    lookahead: bool = True  # a job prepares its next cell while it runs one
    zygote: bool = True  # fork servers from one torch zygote per torch build (and learned preloads)
    help_tail: bool = True  # with several jobs: once no cell is left, idle jobs share the running ones
    keep_servers: float = 0.0  # seconds each cell's fork server stays parked for the next sweep (running/kept.py)
    # A team's pytest suite as the checks (`harness/running/testsuite.py`): test paths under `tests_root`
    # (the folder where the team types `pytest`), pytest's -k and -m, and the suite's own test
    # dependencies, installed in every cell beside pytest and the plugins its configuration names.
    tests: list[str] = field(default_factory=list)
    tests_root: str = ""
    keyword: str = ""
    marker: str = ""
    test_requirements: list[str] = field(default_factory=list)
    # A package's own tests (`harness/inputs/testsource.py`): `tests_git` holds them, and each cell
    # runs those of the tag of the `tests_of` version installed there.
    tests_of: str = ""
    tests_git: str = ""
    allow_empty: bool = False  # a cell whose -k/-m selects no test does not fail the sweep (else [tests] allow_empty)
    #: Appended to the default run id: a scheduled run's own id (the CI run's), which its shards
    #: and its reruns share, so that each night truly runs (`default_run_id`).
    run_tag: str = ""
    #: Resolve every cell as of this moment (the matrix's `exclude_newer`, given on the command line):
    #: a night replayed, the packages under the pins as the index had them then.
    exclude_newer: str = ""


@dataclass
class SweepPlan:
    options: SweepOptions
    spec: MatrixSpec
    resolved: ResolvedMatrix
    index: PackageIndex
    scenarios: list[Scenario]
    cells: list[Cell]
    run_id: str
    matrix_text: str
    #: With a suite and --shard: this shard's piece of each of its cells (`shards.Piece`), and the
    #: stored seconds its cut cells' tests are dealt by. Empty: whole cells (or no shard).
    pieces: dict[str, Piece] = field(default_factory=dict)
    durations: Durations = field(default_factory=dict)
    #: What the outcomes depend on besides the cells (`run_inputs`): recorded with the run.
    inputs: dict[str, Any] = field(default_factory=dict)


#: What a sweep writes through: DuckDB (`store.Store`) or a JSON-lines shard (`shardfile.ShardStore`).
ResultStore = ResultsFile


class Reporter(Protocol):
    def start(self, total: int) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def env_built(self, cell: Cell, env: EnvResult) -> None: ...
    def scenario_started(self, cell: Cell, scenario: str, repeat: int) -> None: ...
    def outcome(self, outcome: Outcome, cell: Cell) -> None: ...
    def finish(self) -> None: ...


class SilentReporter:
    def start(self, total: int) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def env_built(self, cell: Cell, env: EnvResult) -> None: ...
    def scenario_started(self, cell: Cell, scenario: str, repeat: int) -> None: ...
    def outcome(self, outcome: Outcome, cell: Cell) -> None: ...
    def finish(self) -> None: ...


@dataclass
class CellRun:
    """One cell driven by `Sweep.run_cell`: its outcomes and its env (was it built, or reused?)."""

    outcomes: list[Outcome]
    env: EnvResult


def default_run_id(matrix_text: str, scenarios: list[Scenario], inputs: dict[str, Any] | None = None) -> str:
    """Same matrix, same scenario and test files, same code under test -> same run, so a rerun
    resumes it; a change to any of them starts a new one (docs/matrix.md, "Runs and resume").
    `inputs`: `run_inputs`, whose code under test counts (a suite's is in its digest already)."""
    h = hashlib.sha256(matrix_text.encode())
    for scenario in sorted(scenarios, key=lambda s: s.name):
        h.update(f"{scenario.name}:{scenario.digest()}".encode())
    if inputs and inputs.get("paths"):
        h.update(json.dumps(inputs["paths"], sort_keys=True).encode())
    h.update(__version__.encode())
    return "r-" + h.hexdigest()[:10]


def run_inputs(scenarios: Sequence[Scenario], cells: Sequence[Cell]) -> dict[str, Any]:
    """What a run's outcomes depend on besides each cell's environment, as its settings record
    it (`inputs`): each scenario file's content, a suite's test files, configuration and code
    under test (`Suite.inputs`), and each local path candidate's code (`fingerprint.code_digest`).
    `harness changes` calls a flip flaky only where all of it stayed the same."""
    found: dict[str, Any] = {"scenarios": {s.name: s.digest() for s in scenarios if not isinstance(s, Suite)}}
    suite = next((s for s in scenarios if isinstance(s, Suite)), None)
    if suite is not None:
        found["tests"] = suite.inputs()
    paths = {f"{c.package}={c.value}": code_digest(Path(c.value)) for cell in cells for c in cell.candidates if c.kind == "path"}
    found["paths"] = dict(sorted(paths.items()))
    return found


def run_tag(text: str) -> str:
    """A run tag as it goes into the run id: letters, digits, dots and dashes (BadInput otherwise).

    >>> run_tag("12345678-2")
    '12345678-2'
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,63}", text):
        raise BadInput(f"--run-tag {text!r} is not a tag; give letters, digits, dots and dashes (e.g. the CI run's number)")
    return text


def plan(options: SweepOptions) -> SweepPlan:
    """Validate everything a sweep needs before anything is written."""
    spec = load_matrix(options.matrix, lenient=True)
    if options.exclude_newer:
        try:
            versions.moment(options.exclude_newer)
        except ValueError:
            raise BadInput(
                f"--exclude-newer {options.exclude_newer!r} is not a date; write e.g. 2026-11-20 or 2026-11-20T12:00:00Z"
            ) from None
        spec.settings.exclude_newer = options.exclude_newer
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index)
    suite = suite_for(options, spec)
    named = options.scenarios or spec.settings.scenarios  # the command line's, else the matrix's `scenarios`
    scenarios: list[Scenario] = select(named) if named or not suite else []
    if suite is not None:
        scenarios.append(suite)
    cells = resolved.cells
    if options.cells:
        known = {c.id: c for c in cells}
        unknown = [c for c in options.cells if c not in known]
        if unknown:
            raise BadInput(f"unknown cell id(s) {', '.join(map(repr, unknown))}; list them with `harness list --matrix {options.matrix}`")
        cells = [known[c] for c in options.cells]
    text = options.matrix.read_text()
    inputs = run_inputs(scenarios, resolved.cells)
    # a night replayed as of another date is another run: its cells resolve otherwise
    replayed = f"{text}\n# --exclude-newer {options.exclude_newer}" if options.exclude_newer else text
    run_id = options.run_id or default_run_id(replayed, scenarios, inputs)
    if options.run_tag and not options.run_id:
        run_id += "-" + run_tag(options.run_tag)
    if options.fresh and not options.run_id:
        run_id += datetime.now(UTC).strftime("-%Y%m%dT%H%M%S")
    done = SweepPlan(options, spec, resolved, index, scenarios, cells, run_id, text, inputs=inputs)
    if options.shard:
        index_of, count = options.shard
        layout, done.durations = shard_layout(done, count)
        done.pieces = layout.pieces(index_of) if layout is not None else {}
        done.cells = [c for c in cells if c.id in done.pieces] if layout is not None else shard_cells(cells, index_of, count)
    return done


def shard_layout(plan: SweepPlan, count: int) -> tuple[Layout | None, Durations]:
    """With a suite, the layout of `count` shards of the plan's cells (`shards.lay_out`), balanced
    by the seconds the durations file stores for the suite's tests (`--durations`, else `--db`),
    and those seconds; (None, seconds) for scenarios alone, whose cells are dealt round robin.

    The run being swept is left out of the stored seconds: a shard writes its own outcomes
    into its file, and a rerun that read them would cut its cells elsewhere than the first
    start did (and than the other shards do)."""
    suite = any(isinstance(s, Suite) for s in plan.scenarios)
    path = plan.options.durations or plan.options.db
    stored = stored_durations(path, plan.run_id, suites=suite)
    if not suite:
        names = {s.name for s in plan.scenarios}
        return None, {c: {n: v for n, v in tests.items() if n in names} for c, tests in stored.items()}
    ids = [c.id for c in plan.cells]
    weights, timed = cell_weights(ids, stored)
    return lay_out(ids, weights, count, SETUP_SECONDS if timed else 0.0, timed=timed), stored


def stored_durations(path: Path, exclude_run: str, *, suites: bool) -> dict[str, dict[str, float]]:
    """`queries.durations` of a results file of either kind; {} where there is none."""
    if not path.is_file():
        return {}
    with open_results(path, read_only=True) as found:
        if isinstance(found, ShardStore):
            return found.durations(exclude_run, suites=suites)
        return queries.durations(cast(SqlResultsFile, found), exclude_run, suites=suites)


def _suite(options: SweepOptions, spec: MatrixSpec) -> Suite | None:
    """The pytest suite to run, from the command line or the matrix's [tests] table; None if neither names one."""
    table = spec.tests
    paths = options.tests or list(table.get("paths", []))
    root = options.tests_root or str(table.get("root", "")) or ("." if paths else "")
    package, repo = options.tests_of or str(table.get("of", "")), options.tests_git or str(table.get("git", ""))
    if not paths and not root and not package and not repo:
        return None
    keyword = options.keyword or str(table.get("k", ""))
    marker = options.marker or str(table.get("m", ""))
    timeout = float(table["timeout"]) if table.get("timeout") else None
    if package or repo:
        cache = (options.env_root or Path(spec.settings.env_dir)).resolve() / "suites"
        return make_suite(cache, paths, keyword, marker, timeout, check_source(package, repo, cache))
    return make_suite(root, paths, keyword, marker, timeout)


def _test_requirements(options: SweepOptions, spec: MatrixSpec) -> list[str]:
    return [*map(str, spec.tests.get("requirements", [])), *options.test_requirements]


def suite_for(options: SweepOptions, spec: MatrixSpec) -> Suite | None:
    """The suite of the command line or the matrix's [tests] table, with what every cell needs to
    run it (pytest, its plugins, the suite's requirements) added to `spec`'s extra requirements:
    a sweep, a bisection and a watch build their cells alike. None if neither names a suite."""
    suite = _suite(options, spec)
    if suite is not None:
        source, cache = suite.source, suite.root
        config = (lambda name: source.read_config(name, cache)) if source is not None else suite.root
        spec.settings.extra_requirements = [*spec.settings.extra_requirements, *needed_packages(config, _test_requirements(options, spec))]
    return suite


def suite_record(scenarios: list[Scenario], spec: MatrixSpec, options: SweepOptions) -> dict[str, Any]:
    """The run's suite as its settings record it (`tests`), so that `harness report`, `bisect` and
    `watch` know it from the results file alone; {} for a run of scenarios only."""
    suite = next((s for s in scenarios if isinstance(s, Suite)), None)
    if suite is None:
        return {}
    source = suite.source
    where = {"of": source.package, "git": source.repo} if source is not None else {}
    selection = {"root": str(suite.root), "paths": list(suite.paths), "k": suite.keyword, "m": suite.marker}
    return {"tests": {**selection, "requirements": _test_requirements(options, spec), **where}}


def scenario_env(options: SweepOptions) -> dict[str, str]:
    env = {}
    if options.model:
        env["HARNESS_MODEL"] = options.model
    if options.adapter:
        env["HARNESS_ADAPTER"] = options.adapter
    if options.device:
        env["HARNESS_DEVICE"] = options.device
    return env


def cell_record(run_id: str, cell: Cell, env: EnvResult, secrets: list[str], origin: str = "matrix") -> CellRecord:
    commits = {c.package: c.commit for c in cell.candidates if c.commit}
    return CellRecord(
        run_id,
        cell.id,
        cell.python,
        cell.as_dict(),
        [c.requirement() for c in cell.candidates],
        env.freeze,
        env.inherited,
        commits,
        env.status,
        mask(env.message, secrets),
        env.seconds,
        env.reused,
        env.cuda_runtime,
        env.python_version,
        origin,
    )


@dataclass
class Ledger:
    """Where a sweep's time went, for its closing line: env builds, fork-server starts, scenarios."""

    env_seconds: float = 0.0
    envs_built: int = 0  # envs built (not reused): what a probe of refinement or bisection costs
    server_start_seconds: float = 0.0
    server_starts: int = 0
    servers_kept: int = 0  # servers an earlier sweep kept, attached instead of started
    kept_seconds: float = 0.0
    cuda_restarts: int = 0  # of those, starts again without modules found to initialise CUDA
    cuda_chains: dict[str, None] = field(default_factory=dict)  # "peft → … → bitsandbytes.cextension", as found
    scenario_seconds: float = 0.0
    scenarios_run: int = 0  # outcomes behind scenario_seconds (not-applicable ones never run)
    # of those, the scenario files' own run (their code, imports included), by the child's
    # clock; the rest is forking, handing over and reading back, per scenario
    scenario_run_seconds: float = 0.0
    # of those, the imports the scenario files made themselves (measured on Python 3.12+ only):
    # their own code is the rest, what a server's start is weighed against
    scenario_import_seconds: float = 0.0
    imports_measured: bool = False
    imports: dict[str, float] = field(default_factory=dict)  # per preloaded module, summed over cells
    helpers: int = 0  # second fork servers an idle job ran a cell's last scenarios on (tail help)
    helpers_ahead: int = 0  # of those, started ahead, before the job was idle
    spares_unused: int = 0  # started ahead and never taken (their start still counts above)
    # cells whose suite ran no test: its -k/-m selects none there ("… selects 0 of N collected
    # tests"; fails the sweep unless allowed), or pytest ended before it collected (always fails)
    suites_empty: list[str] = field(default_factory=list)
    suites_uncollected: list[str] = field(default_factory=list)

    def count_servers(self, runner: CellRunner) -> None:
        """A runner's fork-server starts (a spare's too: it was paid for), and the CUDA chains they found."""
        server = runner.server
        self.server_start_seconds += server.start_seconds
        self.server_starts += server.starts
        self.servers_kept += server.kept_taken
        self.kept_seconds += server.kept_seconds
        self.cuda_restarts += server.cuda_restarts
        self.cuda_chains.update(dict.fromkeys(" → ".join(c) for c in server.cuda_chains))

    def mean_scenario_seconds(self) -> float:
        """Per scenario run so far (0 before the first): the guess for a cell none of whose finished."""
        return self.scenario_seconds / self.scenarios_run if self.scenarios_run else 0.0

    def _imports_in_scenarios(self) -> str:
        if not self.imports_measured:
            return ""
        own = self.scenario_run_seconds - self.scenario_import_seconds
        return f", of which their imports {self.scenario_import_seconds:.1f} s: after their imports {own:.1f} s"

    def line(self, zygotes: str, culprits: str) -> str:
        tail = ""
        if self.servers_kept:
            tail += f", kept from an earlier sweep {self.kept_seconds:.1f} s ({self.servers_kept})"
        if self.helpers or self.spares_unused:
            tail += f", tail help: {self.helpers} server(s) ({self.helpers_ahead} started ahead, {self.spares_unused} unused)"
        return (
            f"time: env builds {self.env_seconds:.1f} s, {zygotes}, fork-server starts {self.server_start_seconds:.1f} s"
            f" ({self.server_starts}, {self.cuda_restarts} for CUDA; slowest imports: {_slowest(self.imports)}){tail},"
            f" scenarios {self.scenario_seconds:.1f} s"
            f" (their own code {self.scenario_run_seconds:.1f} s{self._imports_in_scenarios()});"
            f" not preloaded (CUDA at import): {culprits}"
        )


@dataclass
class _Prepared:
    """A cell ready to run: its env, and its started runner (None if the env failed)."""

    cell: Cell
    todo: Todo
    env: EnvResult
    runner: CellRunner | None
    origin: str = "matrix"


@dataclass(eq=False)  # by identity: the tail's key for the cell
class _Shared:
    """A cell's scenarios nobody has started yet; its job takes them one at a time, and so do
    jobs that help it at the end of the sweep (each with its own fork server for the cell).
    Whether and when they do is `schedule.Tail`'s to decide; this is what carries it out."""

    ready: _Prepared
    left: deque[tuple[Scenario, int]]
    runnable: set[str]  # scenarios that can run here (the rest are not applicable: no cost)
    imports: dict[str, list[str]] = field(default_factory=dict)  # what they imported, for `remember`
    spare: Future[CellRunner] | None = None  # a second server started ahead, for the job that will help


class _Helpers:
    """Carries out `schedule.Tail`'s decisions for a sweep's jobs (the tail decides; this acts):
    the second fork servers started ahead for the cells idle jobs will share, an idle job's wait
    for a cell to help, and a spare nobody took, closed with its start still counted.

    Shares the sweep's lock, ledger and stop; `start_runner` starts a fork server for an env and
    the scenarios left, as the sweep does for a cell's first server."""

    def __init__(
        self,
        lock: threading.RLock,
        ledger: Ledger,
        stopping: threading.Event,
        start_runner: Callable[[EnvResult, Todo], CellRunner],
    ) -> None:
        self._lock, self._ledger, self._stopping, self._start_runner = lock, ledger, stopping, start_runner
        self.tail: Tail[_Shared] = Tail(1)  # the running cells idle jobs may share (one run of jobs' own)

    def begin(self, jobs: int, help_tail: bool, cpus: int = 0) -> Tail[_Shared]:
        self.tail = Tail[_Shared](jobs, help_tail, cpus)
        return self.tail

    def started(self, shared: _Shared, runner: CellRunner, *, last: bool) -> None:
        """A job started running `shared`'s cell on `runner`: spares for the cells the tail chooses."""
        with self._lock:
            mean = self._ledger.mean_scenario_seconds()
            todo = shared.ready.todo
            counted = sum(s.name in shared.runnable for s, _ in todo)
            for sh in self.tail.started(shared, len(todo), counted, runner.server.start_seconds, last=last, mean=mean):
                # second fork servers, started in the background, for the cells idle jobs will share
                sh.spare = _in_background(partial(self._start_runner, sh.ready.env, list(sh.left)))

    def discard_spare(self, shared: _Shared) -> None:
        """A spare nobody took: closed once started, its start still counted (it was paid for)."""
        spare, shared.spare = shared.spare, None
        if spare is not None:
            spare.add_done_callback(self._close_spare)

    def _close_spare(self, done: Future[CellRunner]) -> None:
        if done.exception() is not None:
            return  # a failed start left nothing running; a helper taking it would have raised it
        runner = done.result()
        with self._lock:
            self._ledger.count_servers(runner)
            self._ledger.spares_unused += 1
        runner.close()

    def idle_until_help(self) -> tuple[_Shared, Future[CellRunner] | None] | None:
        """No cell left to take: the running cell to share (`Tail.next_for_idle`), reserved for
        this job, with its spare server if one was started ahead; None: go home.

        Waiting rather than leaving at once: the job that took the last cell may still be
        waiting for it to be prepared (it is not running yet), and a cell's mean scenario
        time, hence whether sharing it pays, is only known once some of them finished.
        """
        with self._lock:
            self.tail.job_idle()
        try:
            while not self._stopping.is_set():
                with self._lock:
                    decided = self.tail.next_for_idle(self._ledger.mean_scenario_seconds())
                    if isinstance(decided, Help):
                        helped = decided.cell
                        spare, helped.spare = helped.spare, None
                        return helped, spare
                if decided is Idle.HOME:
                    return None
                time.sleep(0.2)
            return None
        finally:
            with self._lock:
                self.tail.job_back()

    def runner_for(self, shared: _Shared, spare: Future[CellRunner] | None) -> CellRunner:
        """A second fork server of the cell to help: the spare started ahead (waiting for it if
        its imports are not done yet), else one started now."""
        try:
            runner = spare.result() if spare is not None else self._start_runner(shared.ready.env, list(shared.left))
        except BaseException:
            with self._lock:
                self.tail.helper_failed(shared)
            raise
        with self._lock:
            self._ledger.helpers += 1
            self._ledger.helpers_ahead += spare is not None
        return runner

    def end(self) -> None:
        """After the jobs (or a stop): cells left unfinished, their spares unused."""
        with self._lock:
            for shared in self.tail.end():
                self.discard_spare(shared)


class Sweep:
    def __init__(
        self, plan: SweepPlan, store: ResultStore, reporter: Reporter | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.plan = plan
        self.store = store
        self.reporter = reporter or SilentReporter()
        self.secrets = secret_values(os.environ)
        self.host = hostinfo.describe(plan.options.gpus)
        self.settings = plan.spec.settings
        self.env_root = (plan.options.env_root or Path(self.settings.env_dir)).resolve()
        self.find_links = expand_find_links(self.settings.find_links)
        self.libraries = tuple(plan.resolved.axes)
        self.checks = Checks(
            plan.run_id, scenario_env(plan.options), self.settings.timeout, self.libraries, self.secrets, plan.pieces, plan.durations
        )
        self.ledger = Ledger()
        self.index_seen = IndexSeen()  # the first env asks the index; the rest reuse what it fetched
        self.culprits = CudaCulprits(self.env_root)
        self.gpus = GpuPlan(
            plan.options.gpus, int(self.host.get("gpu_count", 0)), max(1, plan.options.jobs), int(self.host.get("cpus") or 0)
        )
        # every cell's processes share their modules' bytecode, compiled ahead on the job's cores
        self.bytecode = bytecode_env(workers=precompile_workers(int(self.host.get("cpus") or 1), plan.options.jobs))
        self._lock = threading.RLock()
        self._stopping = threading.Event()  # SIGTERM / Ctrl-C: finish nothing more, store nothing killed
        self._active: set[CellRunner] = set()
        self.helpers = _Helpers(self._lock, self.ledger, self._stopping, self._server_for)
        self._run_recorded = False
        zygotes = plan.options.zygote and self.settings.zygote and self.settings.isolation == "fork"
        self.zygotes = ZygotePool(forbid=list(self.libraries)) if zygotes else None

    # -- the whole sweep ----------------------------------------------------------------------
    def todo(self, cell: Cell, done: set[tuple[str, str, int]]) -> Todo:
        """What the run has not stored in `cell` yet: every scenario and repeat but the `done` keys.
        A shard's piece of a cut cell other than its first runs only its slice of the suite."""
        piece = self.plan.pieces.get(cell.id)
        scenarios = [s for s in self.plan.scenarios if isinstance(s, Suite)] if piece is not None and piece.part else self.plan.scenarios
        return [(s, r) for s in scenarios for r in range(self.settings.repeats) if (cell.id, s.name, r) not in done]

    def as_run(self, run_id: str) -> None:
        """Store what follows under another run: each repeat of a probe of `harness explain`, whose
        suite runs once per run (a test's repeats are runs), into the probes' own file."""
        self.plan.run_id = run_id
        self.checks = replace(self.checks, run_id=run_id)
        self._run_recorded = False

    def record_run(self) -> None:
        """The run's row and the releases of its axes (what a range between tested versions is made of)."""
        if self._run_recorded:
            return
        p = self.plan
        # The expanded find-links record which folders this run really used ($PIP_FIND_LINKS).
        settings = {**asdict(self.settings), "find_links_expanded": self.find_links, **suite_record(p.scenarios, p.spec, p.options)}
        if p.inputs:
            settings["inputs"] = p.inputs
        self.store.ensure_run(p.run_id, str(p.options.matrix), p.matrix_text, settings, __version__, self.host)
        self.store.record_releases(p.run_id, run_releases(p, self.find_links))
        self._run_recorded = True

    def run(self) -> list[Outcome]:
        """Every scenario in every cell of the plan that the run has not stored yet."""
        self.record_run()
        done = self.store.done_keys(self.plan.run_id)
        return self.run_cells([(cell, todo) for cell in self.plan.cells if (todo := self.todo(cell, done))])

    def run_cells(self, work: list[tuple[Cell, Todo]], origin: str = "matrix") -> list[Outcome]:
        """Cells and what to run in each, on the sweep's jobs (refinement's probes come through here too)."""
        self.record_run()
        self.reporter.start(sum(len(t) for _, t in work))
        produced = self._run_jobs(work, self.gpus.slots(), origin)
        self.reporter.finish()
        return produced

    def close(self) -> None:
        """Stop the zygotes. They serve every cell of the sweep, refinement's probes too, so the
        sweep's owner closes it when it is done (`with Sweep(...)`); they die with the harness anyway."""
        if self.zygotes is not None:
            self.zygotes.close()

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def timing_line(self) -> str:
        """Where the sweep's time went, for logs: env builds, fork-server starts, scenarios."""
        return self.ledger.line(_zygotes_text(self.zygotes), self.culprits.describe())

    def _run_jobs(self, work: list[tuple[Cell, Todo]], slots: list[list[str]], origin: str = "matrix") -> list[Outcome]:
        """Cells in matrix order, a job per slot (one GPU each when there are several jobs)."""
        produced: list[Outcome] = []
        # sysconfig's first initialisation is not thread-safe (uv's find_uv_bin and nox read it;
        # two jobs saw get_config_var("EXE") return None): do it once, before any thread starts.
        sysconfig.get_config_vars()
        ahead = len(slots) if self.plan.options.lookahead else 0
        feed: Feed[tuple[Cell, Todo], _Prepared] = Feed(work, lambda item: self._prepare(*item, origin), ahead, _close_runner)

        tail = self.helpers.begin(len(slots), self.plan.options.help_tail, int(self.host.get("cpus") or 0))

        def worker(slot: list[str]) -> None:
            try:
                while not self._stopping.is_set():
                    if (ready := feed.next()) is not None:
                        # the last cell handed out: the helpers' servers start now, while all are busy
                        outcomes = self._run_prepared(ready, slot, tail.sharing, last=feed.exhausted())
                    elif tail.sharing and (shared := self.helpers.idle_until_help()) is not None:
                        outcomes = self._drain(shared[0], self.helpers.runner_for(*shared), slot)
                    else:
                        return
                    with self._lock:
                        produced.extend(outcomes)
            finally:
                with self._lock:
                    tail.job_gone()

        pool = ThreadPoolExecutor(max_workers=len(slots)) if len(slots) > 1 else None
        try:
            if pool is None:
                worker(slots[0])  # in this thread, so that Ctrl-C and SIGTERM land where they are handled
            else:
                for future in [pool.submit(worker, slot) for slot in slots]:
                    future.result()
        except BaseException:
            self.stop()
            raise
        finally:
            feed.close()
            if pool is not None:
                pool.shutdown(wait=True)  # the workers see the stop at once: their scenarios are dead
            self.helpers.end()
        return produced

    def stop(self) -> None:
        """Stop the sweep now: no new scenario starts, and those running are killed (not stored)."""
        self._stopping.set()
        with self._lock:
            active = list(self._active)
        for runner in active:
            runner.kill_running()

    # -- one cell ------------------------------------------------------------------------------
    def run_cell(self, cell: Cell, todo: Todo, gpus: list[str] | None = None, *, origin: str = "matrix") -> CellRun:
        """Build (or reuse) one cell's env and run `todo` in it: the seam bisection and refinement drive."""
        self.record_run()
        prepared = self._prepare(cell, todo, origin)
        return CellRun(self._run_prepared(prepared, gpus), prepared.env)

    def _prepare(self, cell: Cell, todo: Todo, origin: str = "matrix") -> _Prepared:
        """Build the cell's env and start its fork server: everything before the first scenario.

        Not tied to a job: the GPU a scenario runs on is set per scenario (`GpuPlan.lease`).
        """
        with self._lock:
            self.reporter.cell_started(cell)
        moment = period_date(cell, self.plan.index) if self.settings.exclude_newer == "period" else None
        env = build_env(cell, self.settings, self.env_root, self.find_links, moment, self.index_seen)
        with self._lock:
            self.ledger.env_seconds += env.seconds
            self.ledger.envs_built += 0 if env.reused else 1
            self.store.record_cell(cell_record(self.plan.run_id, cell, env, self.secrets, origin))
            self.reporter.env_built(cell, env)
        if not env.ready:
            return _Prepared(cell, todo, env, None, origin)
        return _Prepared(cell, todo, env, self._start_runner(env, self._runnable(env, todo)), origin)

    def _runnable(self, env: EnvResult, todo: Todo) -> list[Scenario]:
        return [sc for sc, _ in todo if not applicability(sc, env.freeze, len(self.gpus.ids()))]

    def _server_for(self, env: EnvResult, todo: Todo) -> CellRunner:
        """A fork server for `todo` in the env (a helper's second one)."""
        return self._start_runner(env, self._runnable(env, todo))

    def _start_runner(self, env: EnvResult, runnable: list[Scenario]) -> CellRunner:
        """A runner for the cell, its fork server started (preloading) unless nothing can run."""
        s = self.settings
        # a `preload` module, or a library's learned modules (`peft.*`), at this version
        avoid = self.culprits.avoid(env.freeze)
        learned = learned_preload(env.location, runnable) if self.zygotes is not None and s.preload else None
        runner = CellRunner(
            env.python,
            isolation=s.isolation,
            preload=s.preload,
            env={**self.gpus.server_env(), **self.bytecode},
            avoid=avoid,
            learned=learned,
            zygotes=self.zygotes,
            keep=self.plan.options.keep_servers,
        )
        try:
            # Preload now, holding no GPU lock (a two-GPU scenario must not wait on imports),
            # unless no scenario can run here at all.
            if runnable:
                runner.start()
        except BaseException:
            runner.close()
            raise
        self.culprits.learn(runner.server.cuda_culprits, env.freeze, runner.server.cuda_via)
        return runner

    def _run_prepared(self, ready: _Prepared, gpus: list[str] | None, share: bool = False, *, last: bool = False) -> list[Outcome]:
        """Run a prepared cell; `share`: idle jobs may share it (`last`: no cell is left to hand out)."""
        cell, env, runner = ready.cell, ready.env, ready.runner
        run_id = self.plan.run_id
        if runner is None:
            failed = [outcome.env_outcome(run_id, cell.id, s.name, r, env.status, env.message, self.secrets) for s, r in ready.todo]
            return [self._emit(o, cell) for o in failed]
        shared = _Shared(ready, deque(ready.todo), {sc.name for sc in self._runnable(env, ready.todo)})
        if share:
            self.helpers.started(shared, runner, last=last)
        return self._drain(shared, runner, gpus)

    def _drain(self, shared: _Shared, runner: CellRunner, gpus: list[str] | None) -> list[Outcome]:
        """Take the cell's scenarios one at a time until none is left, then account for the runner."""
        cell, env = shared.ready.cell, shared.ready.env
        outcomes = []
        with runner:
            with self._lock:
                self._active.add(runner)
            try:
                while not self._stopping.is_set():
                    with self._lock:
                        if not shared.left:
                            break
                        scenario, repeat = shared.left.popleft()
                        self.helpers.tail.took(shared, scenario.name in shared.runnable)
                    with self.gpus.lease(scenario.requires.gpus, gpus) as (gpu_count, request_env):
                        with self._lock:
                            self.reporter.scenario_started(cell, scenario.name, repeat)
                        if isinstance(scenario, Suite):
                            outcomes += self._run_suite(runner, cell, scenario, env, request_env)
                            continue
                        made = self._run_one(runner, cell, scenario, repeat, env, gpu_count, request_env)
                    if self._stopping.is_set():
                        break  # killed by the stop: not an outcome; the rerun runs it again
                    if scenario.name in shared.runnable:
                        with self._lock:
                            self.helpers.tail.finished(shared, made.seconds)
                    outcomes.append(self._emit(made, cell))
            finally:
                with self._lock:
                    self._active.discard(runner)
            self._runner_done(shared, runner)
        return outcomes

    def _runner_done(self, shared: _Shared, runner: CellRunner) -> None:
        """Its imports and CUDA culprits kept; the cell's learned preloads written by the last job on it."""
        env = shared.ready.env
        with self._lock:
            self.ledger.count_servers(runner)
            for module, seconds in runner.server.preload_seconds.items():
                self.ledger.imports[module] = self.ledger.imports.get(module, 0.0) + seconds
            shared.imports.update(runner.imports)
            last = self.helpers.tail.done(shared)
            if last:
                self.helpers.discard_spare(shared)
        server = runner.server
        self.culprits.learn(server.cuda_culprits, env.freeze, server.cuda_via)  # a server restarted mid-cell may have found more
        self.culprits.learn(runner.culprit_importers, env.freeze, runner.culprit_importers)
        if last and self.zygotes is not None and self.settings.preload:
            learned = [m for e in server.entries if e["name"] in server.preloaded and _learned_entry(e) for m in e["modules"]]
            remember(env.location, [s for s, _ in shared.ready.todo], shared.imports, learned)

    def _emit(self, made: Outcome, cell: Cell) -> Outcome:
        with self._lock:  # one writer at a time: DuckDB connections are not shared across threads
            self.store.add_outcome(made)
            self.reporter.outcome(made, cell)
        return made

    def _run_suite(self, runner: CellRunner, cell: Cell, suite: Suite, env: EnvResult, request_env: dict[str, str]) -> list[Outcome]:
        """The suite in this cell: every test's outcome stored as it comes (a stopped sweep keeps
        them), those stored already left out (resume)."""
        here = self.checks.suite_here(suite, cell.id, env.freeze)
        if isinstance(here, Outcome):
            return [self._emit(here, cell)]
        done = [s for c, s, r in self.store.done_keys(self.plan.run_id) if c == cell.id]
        made: list[Outcome] = []
        tally = SuiteTally(self.plan.run_id, cell.id, here, self._record_collection)  # an -m pytest refuses: BadInput, nothing stored
        for found in self.checks.suite(runner, cell.id, here, request_env, done, tally):
            if not self._stopping.is_set():
                with self._lock:
                    self.ledger.scenario_seconds += found.seconds
                    self.ledger.scenarios_run += 1
                made.append(self._emit(found, cell))
        # a selection of no test, said at the end
        tally.end(self.ledger.suites_empty, self.ledger.suites_uncollected, stopped=self._stopping.is_set())
        return made

    def _record_collection(self, collection: Collection) -> None:
        with self._lock:
            self.store.record_collection(collection)

    def _run_one(
        self, runner: CellRunner, cell: Cell, scenario: Scenario, repeat: int, env: EnvResult, gpu_count: int, request_env: dict[str, str]
    ) -> Outcome:
        made, raw = self.checks.scenario(runner, cell.id, scenario, repeat, env.freeze, gpu_count, request_env)
        if raw is not None:
            with self._lock:
                self.ledger.scenario_seconds += raw.seconds
                self.ledger.scenarios_run += 1
                self.ledger.scenario_run_seconds += raw.run_seconds or 0.0
                if raw.import_seconds is not None:
                    self.ledger.scenario_import_seconds += raw.import_seconds
                    self.ledger.imports_measured = True
        return made


def run_releases(plan: SweepPlan, find_links: list[str]) -> dict[str, list[tuple[str, datetime | None]]]:
    """Per axis with releases: every release the index offers the run's Python on this platform
    (what a range between tested versions is made of).

    With `no_index` (an offline runner's wheelhouse) the index is never asked: the lists
    come from the wheelhouse's RELEASES_FILE, written where the index was reachable
    (`harness wheelhouse --refine-budget`). Without one, a folder of the wheels this matrix
    needed says nothing of what lies between them, so nothing is listed and the run's
    answers stay ranges until `harness attribute` asks the index.
    """
    settings = plan.spec.settings
    axes = [axis for axis, cands in plan.resolved.axes.items() if any(c.kind == "version" for c in cands)]
    exclude = settings.exclude_newer
    moment = versions.moment(exclude) if exclude != "period" else None  # "period": each cell's own moment
    if settings.no_index:
        return shipped_releases(find_links, axes, moment)
    tags = install_tags(python_version_of(settings.python))
    listed: dict[str, list[tuple[str, datetime | None]]] = {}
    for axis in axes:
        try:
            listed[axis] = [(str(r.version), r.upload_time) for r in listed_releases(plan.index, axis, tags, moment)]
        except IndexUnreachable:
            continue  # attribution then treats the axis as unlisted: its answers stay ranges
    return listed


def shipped_releases(folders: list[str], axes: list[str], moment: datetime | None) -> dict[str, list[tuple[str, datetime | None]]]:
    """The release lists a wheelhouse carries (candidates.RELEASES_FILE) for `axes`, uploaded by `moment`."""
    for folder in folders:
        path = Path(folder) / RELEASES_FILE
        if path.is_file():
            data = json.loads(path.read_text())
            listed: dict[str, list[tuple[str, datetime | None]]] = {}
            for axis in axes:
                if axis in data:
                    pairs = [(str(v), datetime.fromisoformat(t) if t else None) for v, t in data[axis]]
                    listed[axis] = [(v, t) for v, t in pairs if moment is None or t is None or t <= moment]
            return listed
    return {}


def _in_background(start: Callable[[], CellRunner]) -> Future[CellRunner]:
    """`start()` on a daemon thread (as `Feed` prepares cells: Ctrl-C must not wait on imports)."""
    done: Future[CellRunner] = Future()

    def go() -> None:
        try:
            done.set_result(start())
        except BaseException as exc:  # handed to the helper that takes the spare
            done.set_exception(exc)

    threading.Thread(target=go, daemon=True).start()
    return done


def _learned_entry(entry: dict[str, Any]) -> bool:
    """A preload entry from the cell's learned modules: a library's group, or one split from it."""
    return str(entry["name"]).endswith(".*") or "group" in entry


def _close_runner(prepared: _Prepared) -> None:
    if prepared.runner is not None:
        prepared.runner.close()


def _zygotes_text(pool: ZygotePool | None) -> str:
    """The timing line's part on the zygotes: their starts, refusals and fallbacks."""
    if pool is None:
        return "zygotes off"
    z = pool.stats
    text = f"zygote starts {z.seconds:.1f} s ({z.starts}; slowest imports: {_slowest(z.preload_seconds)})"
    if z.waited >= 0.05:
        text += f", servers started ahead waited {z.waited:.1f} s for a scenario's torch imports"
    if z.refusals:
        text += f", refused by a zygote: {'; '.join(f'{n}x {why}' for why, n in z.refusals.most_common(3))}"
    if z.fallbacks:
        text += f", not forked from a zygote: {pool.describe_fallbacks()}"
    return text


def _slowest(seconds: dict[str, float]) -> str:
    return ", ".join(f"{m} {s:.1f}" for m, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:3]) or "-"
