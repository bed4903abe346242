"""A sweep: every cell's env, every scenario in it, every outcome into the store.

The steps are small and separate (as nox's workflow is): `plan.plan` (validate everything,
write nothing; `running/plan.py`), then per cell prepare (env build, fork server:
`schedule.Feed` does it ahead) → check applicability → run → interpret (`checks.Checks`: a
runner's runs made outcomes) → store. Outcomes already stored for the run are not
recomputed, so a killed sweep resumes where it stopped. The GPUs are `gpus.GpuPlan`'s, the
memory of CUDA-initialising modules is `culprits.CudaCulprits`', where the time went is
`ledger.Ledger`'s, and bisection and refinement drive single cells through `Sweep.run_cell`,
which returns what they need to know (`CellRun`).
"""

from __future__ import annotations

import os
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from harness import __version__
from harness.analysis import outcome
from harness.analysis.outcome import CellRecord, Collection, Outcome
from harness.analysis.redact import mask, secret_values
from harness.inputs.candidates import expand_find_links, period_date
from harness.inputs.matrix import Cell
from harness.inputs.scenarios import Scenario, applicability
from harness.running import hostinfo
from harness.running.bytecode import bytecode_env, precompile_workers
from harness.running.checks import Checks, SuiteTally
from harness.running.culprits import CudaCulprits
from harness.running.envs import EnvResult, IndexSeen, build_env
from harness.running.gpus import GpuPlan
from harness.running.ledger import Ledger, zygotes_text
from harness.running.plan import SweepPlan, run_releases, scenario_env, suite_record
from harness.running.preloads import learned_preload, remember
from harness.running.runner import CellRunner
from harness.running.schedule import Feed, Help, Idle, Tail
from harness.running.testsuite import Suite
from harness.running.zygote import ZygotePool
from harness.storage.resultsfile import ResultsFile

Todo = list[tuple[Scenario, int]]  # (scenario, repeat) pairs still to run in a cell


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
        return self.ledger.line(zygotes_text(self.zygotes), self.culprits.describe())

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
