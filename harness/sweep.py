"""A sweep: every cell's env, every scenario in it, every outcome into the store.

The steps are small and separate (as nox's workflow is): plan (validate everything, write
nothing), then per cell build → check applicability → run → interpret → store. Outcomes
already stored for the run are not recomputed, so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from harness import __version__, hostinfo
from harness.candidates import PackageIndex, ResolvedMatrix, expand_find_links, index_for, period_date, resolve_matrix
from harness.catalog import Scenario, applicability, select
from harness.envs import EnvResult, build_env
from harness.errors import BadInput
from harness.gpulocks import GpuLocks
from harness.matrix import Cell, MatrixSpec, load_matrix, shard_cells
from harness.outcome import CellRecord, Outcome, Status
from harness.preloads import learned_preload, remember
from harness.redact import mask, secret_values
from harness.runner import CellRunner
from harness.signature import status_signature
from harness.verdict import interpret
from harness.zygote import ZygotePool


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
    lookahead: bool = True  # a job prepares its next cell while it runs one
    zygote: bool = True  # fork servers from one torch zygote per torch build (and learned preloads)


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


class ResultStore(Protocol):
    """What a sweep writes through: DuckDB (`store.Store`) or a JSON-lines shard (`shardfile.ShardStore`)."""

    def ensure_run(
        self, run_id: str, matrix_path: str, matrix_text: str, settings: dict[str, Any], harness_version: str, host: dict[str, Any]
    ) -> None: ...
    def record_cell(self, rec: CellRecord) -> None: ...
    def add_outcome(self, outcome: Outcome) -> bool: ...
    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]: ...


class Reporter(Protocol):
    def start(self, total: int) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def env_built(self, cell: Cell, env: EnvResult) -> None: ...
    def outcome(self, outcome: Outcome, cell: Cell) -> None: ...
    def finish(self) -> None: ...


class SilentReporter:
    def start(self, total: int) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def env_built(self, cell: Cell, env: EnvResult) -> None: ...
    def outcome(self, outcome: Outcome, cell: Cell) -> None: ...
    def finish(self) -> None: ...


def default_run_id(matrix_text: str, scenarios: list[Scenario]) -> str:
    """Same matrix and same scenario files -> same run, so a rerun resumes it."""
    h = hashlib.sha256(matrix_text.encode())
    for scenario in sorted(scenarios, key=lambda s: s.name):
        h.update(f"{scenario.name}:{scenario.digest()}".encode())
    h.update(__version__.encode())
    return "r-" + h.hexdigest()[:10]


def plan(options: SweepOptions) -> SweepPlan:
    """Validate everything a sweep needs before anything is written."""
    spec = load_matrix(options.matrix, lenient=True)
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index)
    scenarios = select(options.scenarios or spec.settings.scenarios)
    cells = resolved.cells
    if options.cells:
        known = {c.id: c for c in cells}
        unknown = [c for c in options.cells if c not in known]
        if unknown:
            raise BadInput(f"unknown cell id(s) {', '.join(map(repr, unknown))}; list them with `harness list --matrix {options.matrix}`")
        cells = [known[c] for c in options.cells]
    if options.shard:
        cells = shard_cells(cells, *options.shard)
    text = options.matrix.read_text()
    run_id = options.run_id or default_run_id(text, scenarios)
    if options.fresh and not options.run_id:
        run_id += datetime.now(UTC).strftime("-%Y%m%dT%H%M%S")
    return SweepPlan(options, spec, resolved, index, scenarios, cells, run_id, text)


def _scenario_env(options: SweepOptions) -> dict[str, str]:
    env = {}
    if options.model:
        env["HARNESS_MODEL"] = options.model
    if options.adapter:
        env["HARNESS_ADAPTER"] = options.adapter
    if options.device:
        env["HARNESS_DEVICE"] = options.device
    return env


def _cell_record(run_id: str, cell: Cell, env: EnvResult, requirements: list[str], secrets: list[str]) -> CellRecord:
    commits = {c.package: c.commit for c in cell.candidates if c.commit}
    return CellRecord(
        run_id,
        cell.id,
        cell.python,
        cell.as_dict(),
        requirements,
        env.freeze,
        env.inherited,
        commits,
        env.status,
        mask(env.message, secrets),
        env.seconds,
        env.reused,
        env.cuda_runtime,
    )


@dataclass
class _Prepared:
    """A cell ready to run: its env, and its started runner (None if the env failed)."""

    cell: Cell
    todo: list[tuple[Scenario, int]]
    env: EnvResult
    runner: CellRunner | None


class _Feed:
    """Hands prepared cells (env built, fork server started) to the jobs, in matrix order.

    `ahead` background threads keep at most `ahead` cells prepared or being prepared beyond
    those running, so a job that finishes a cell finds the next one ready, whichever job
    that is: no job idles on imports while another holds a prepared cell. Threads are
    daemons: Ctrl-C during a long env build must not wait on it. With `ahead` 0
    (--no-lookahead) the job that asks prepares its cell itself.
    """

    def __init__(
        self,
        work: list[tuple[Cell, list[tuple[Scenario, int]]]],
        prepare: Callable[[Cell, list[tuple[Scenario, int]]], _Prepared],
        ahead: int,
    ) -> None:
        self._work = deque(work)
        self._left = len(work)  # not yet handed to a job
        self._prepare = prepare
        self._ready: queue.Queue[_Prepared | BaseException] = queue.Queue()
        self._permits = threading.Semaphore(ahead)
        self._lock = threading.Lock()
        self._closed = False
        self._ahead = ahead
        for _ in range(min(ahead, len(work))):
            threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._permits.acquire()
            with self._lock:
                if not self._work:
                    return
                cell, todo = self._work.popleft()
            try:
                item: _Prepared | BaseException = self._prepare(cell, todo)
            except BaseException as exc:  # handed to the job that takes it
                item = exc
            self._ready.put(item)

    def next(self) -> _Prepared | None:
        """The next prepared cell (waiting for it if need be), or None when all are handed out."""
        with self._lock:
            if self._left == 0:
                return None
            self._left -= 1
            if not self._ahead:
                cell, todo = self._work.popleft()
        if not self._ahead:
            return self._prepare(cell, todo)
        while True:
            try:
                item = self._ready.get(timeout=0.2)
                break
            except queue.Empty:
                if self._closed:  # the sweep stopped while this job waited for a cell
                    return None
        self._permits.release()  # a slot ahead is free: prepare one more
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """The sweep is stopping: prepare nothing more; close the runners nobody will take."""
        with self._lock:
            self._work.clear()
            self._left = 0
            self._closed = True
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Prepared) and item.runner is not None:
                item.runner.close()


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
        self.timing = {"env_seconds": 0.0, "scenario_seconds": 0.0, "server_start_seconds": 0.0}
        self.last_env_reused = False
        self._lock = threading.RLock()
        # (module, version of its distribution) found to initialise CUDA at import in one
        # cell's fork server: later cells with that version skip it instead of restarting.
        # Kept beside the envs, so that the next sweep (a shard, a resumed run) starts with them.
        self.cuda_culprits: set[tuple[str, str]] = load_culprits(self.env_root / CULPRITS_FILE)
        self.gpu_locks = GpuLocks()
        self.preload_seconds: dict[str, float] = {}  # per preloaded module, summed over cells
        self._stopping = threading.Event()  # SIGTERM / Ctrl-C: finish nothing more, store nothing killed
        self._active: set[CellRunner] = set()
        zygotes = plan.options.zygote and self.settings.zygote and self.settings.isolation == "fork"
        self.zygotes = ZygotePool(forbid=list(self.libraries)) if zygotes else None

    def keys_for(self, cell: Cell) -> list[tuple[Scenario, int]]:
        return [(s, r) for s in self.plan.scenarios for r in range(self.settings.repeats)]

    def todo(self, cell: Cell, done: set[tuple[str, str, int]]) -> list[tuple[Scenario, int]]:
        return [(s, r) for s, r in self.keys_for(cell) if (cell.id, s.name, r) not in done]

    def run(self) -> list[Outcome]:
        p = self.plan
        # The expanded find-links record which folders this run really used ($PIP_FIND_LINKS).
        settings = {**_settings_dict(self.settings), "find_links_expanded": self.find_links}
        self.store.ensure_run(p.run_id, str(p.options.matrix), p.matrix_text, settings, __version__, self.host)
        done = self.store.done_keys(p.run_id)
        work = [(cell, todo) for cell in p.cells if (todo := self.todo(cell, done))]
        self.reporter.start(sum(len(t) for _, t in work))
        all_gpus = self.gpu_ids()
        jobs = max(1, p.options.jobs)
        slots = [[all_gpus[k % len(all_gpus)]] if all_gpus else [] for k in range(jobs)] if jobs > 1 else [all_gpus]
        try:
            produced = self._run_jobs(work, slots)
        finally:
            self.close()
        self.reporter.finish()
        return produced

    def close(self) -> None:
        """Stop the zygotes (a caller of `run_cell` calls this when done)."""
        if self.zygotes is not None:
            self.zygotes.close()

    def timing_line(self) -> str:
        """Where the sweep's time went, for logs: env builds, fork-server starts, scenarios."""
        t = self.timing
        culprits = ", ".join(sorted(f"{m} {v}" for m, v in self.cuda_culprits)) or "none"
        zygotes = "zygotes off"
        if self.zygotes is not None:
            z = self.zygotes.stats
            zygotes = f"zygote starts {z.seconds:.1f} s ({z.starts}; slowest imports: {_slowest(z.preload_seconds)})"
            if z.refusals:
                zygotes += f", refused by a zygote: {'; '.join(f'{n}x {why}' for why, n in z.refusals.most_common(3))}"
            if z.fallbacks:
                zygotes += f", not forked from a zygote: {self.zygotes.describe_fallbacks()}"
        return (
            f"time: env builds {t['env_seconds']:.1f} s, {zygotes}, fork-server starts {t['server_start_seconds']:.1f} s"
            f" (slowest imports: {_slowest(self.preload_seconds)}), scenarios {t['scenario_seconds']:.1f} s;"
            f" not preloaded (CUDA at import): {culprits}"
        )

    def gpu_ids(self) -> list[str]:
        if self.plan.options.gpus is not None:
            return list(self.plan.options.gpus)
        return [str(i) for i in range(int(self.host.get("gpu_count", 0)))]

    def _run_jobs(self, work: list[tuple[Cell, list[tuple[Scenario, int]]]], slots: list[list[str]]) -> list[Outcome]:
        """Cells in matrix order, a job per slot (one GPU each when there are several jobs).

        A scenario that needs more GPUs than its job has takes them all for its run
        (GpuLocks), inside its own cell's turn. With lookahead, cells are prepared (env
        build, fork-server preload) while the jobs run others: on a GPU runner a fork
        server's imports take 12-20 s of CPU that would otherwise leave a GPU idle.
        """
        produced: list[Outcome] = []
        # sysconfig's first initialisation is not thread-safe (uv's find_uv_bin and nox read it;
        # two jobs saw get_config_var("EXE") return None): do it once, before any thread starts.
        sysconfig.get_config_vars()
        feed = _Feed(work, self._prepare, len(slots) if self.plan.options.lookahead else 0)

        def worker(slot: list[str]) -> None:
            while not self._stopping.is_set() and (ready := feed.next()) is not None:
                outcomes = self._run_prepared(ready, slot)
                with self._lock:
                    produced.extend(outcomes)

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
        return produced

    def stop(self) -> None:
        """Stop the sweep now: no new scenario starts, and those running are killed (not stored)."""
        self._stopping.set()
        with self._lock:
            active = list(self._active)
        for runner in active:
            runner.kill_running()

    def run_cell(self, cell: Cell, todo: list[tuple[Scenario, int]], gpus: list[str] | None = None) -> list[Outcome]:
        return self._run_prepared(self._prepare(cell, todo), gpus)

    def _prepare(self, cell: Cell, todo: list[tuple[Scenario, int]]) -> _Prepared:
        """Build the cell's env and start its fork server: everything before the first scenario.

        Not tied to a job: the GPU a scenario runs on is set per scenario (`_gpus_for`).
        """
        with self._lock:
            self.reporter.cell_started(cell)
        moment = period_date(cell, self.plan.index) if self.settings.exclude_newer == "period" else None
        env = build_env(cell, self.settings, self.env_root, self.find_links, moment)
        requirements = [c.requirement() for c in cell.candidates]
        with self._lock:
            self.timing["env_seconds"] += env.seconds
            self.last_env_reused = env.reused
            self.store.record_cell(_cell_record(self.plan.run_id, cell, env, requirements, self.secrets))
            self.reporter.env_built(cell, env)
        if not env.ready:
            return _Prepared(cell, todo, env, None)
        with self._lock:
            # a `preload` module, or a library's learned modules (`peft.*`), at this version
            avoid = {m for m, version in self.cuda_culprits if _dist_version(m, env.freeze) == version}
        s = self.settings
        runnable = [sc for sc, _ in todo if not applicability(sc, env.freeze, len(self.gpu_ids()))]
        learned = learned_preload(env.location, runnable) if self.zygotes is not None and s.preload else None
        runner = CellRunner(
            env.python, isolation=s.isolation, preload=s.preload, env=self._runner_env(), avoid=avoid, learned=learned, zygotes=self.zygotes
        )
        try:
            # Preload now, holding no GPU lock (a two-GPU scenario must not wait on imports),
            # unless no scenario can run here at all.
            if runnable:
                runner.start()
        except BaseException:
            runner.close()
            raise
        self._learn(runner, env)
        return _Prepared(cell, todo, env, runner)

    def _run_prepared(self, ready: _Prepared, gpus: list[str] | None) -> list[Outcome]:
        cell, env, runner = ready.cell, ready.env, ready.runner
        if runner is None:
            return [self._emit(self._env_outcome(cell, s, r, env), cell) for s, r in ready.todo]
        outcomes = []
        with runner:
            with self._lock:
                self._active.add(runner)
            try:
                for scenario, repeat in ready.todo:
                    if self._stopping.is_set():
                        break
                    with self._gpus_for(scenario, gpus) as (gpu_count, request_env):
                        outcome = self._run_one(runner, cell, scenario, repeat, env, gpu_count, request_env)
                    if self._stopping.is_set():
                        break  # killed by the stop: not an outcome; the rerun runs it again
                    outcomes.append(self._emit(outcome, cell))
            finally:
                with self._lock:
                    self._active.discard(runner)
            with self._lock:
                self.timing["server_start_seconds"] += runner.server_start_seconds
                for module, seconds in runner.preload_seconds.items():
                    self.preload_seconds[module] = self.preload_seconds.get(module, 0.0) + seconds
            self._learn(runner, env)  # a server restarted mid-cell may have found more
            if self.zygotes is not None and self.settings.preload:
                learned = [m for e in runner.entries if e["name"] in runner.preloaded and e["name"].endswith(".*") for m in e["modules"]]
                remember(env.location, [s for s, _ in ready.todo], runner.imports, learned)
        return outcomes

    def _learn(self, runner: CellRunner, env: EnvResult) -> None:
        """Remember the CUDA culprits at once: the job's next cell is being prepared already."""
        with self._lock:
            found = {(m, _dist_version(m, env.freeze)) for m in runner.cuda_culprits} - self.cuda_culprits
            if found:
                self.cuda_culprits |= found
                save_culprits(self.env_root / CULPRITS_FILE, self.cuda_culprits)

    @contextmanager
    def _gpus_for(self, scenario: Scenario, gpus: list[str] | None) -> Iterator[tuple[int, dict[str, str]]]:
        """The GPUs one scenario runs on: its job's, or, if it needs more, all of them alone."""
        every = self.gpu_ids()
        if gpus is None or not gpus:
            yield (len(gpus) if gpus is not None else len(every)), {}
        elif len(gpus) < scenario.requires.gpus <= len(every):
            with self.gpu_locks.exclusive(every):
                yield len(every), {"CUDA_VISIBLE_DEVICES": ",".join(every)}
        else:
            narrowed = self.plan.options.jobs > 1 or self.plan.options.gpus is not None
            with self.gpu_locks.shared(gpus[0]):
                yield len(gpus), ({"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if narrowed else {})

    def _runner_env(self) -> dict[str, str]:
        """What a cell's fork server (and so every scenario) sees of the machine.

        The job's own GPU is set per scenario: a cell is prepared before it is known which
        job, so which GPU, will run it. The server itself never initialises CUDA.
        """
        env: dict[str, str] = {}
        jobs = self.plan.options.jobs
        if self.plan.options.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.plan.options.gpus)
        if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
            # Each torch would start a thread per core: N cells at once would oversubscribe
            # the CPU N times over; tiny models gain nothing from more threads than their share.
            env["OMP_NUM_THREADS"] = str(max(1, int(self.host.get("cpus") or os.cpu_count() or 1) // jobs))
        return env

    def _emit(self, outcome: Outcome, cell: Cell) -> Outcome:
        with self._lock:  # one writer at a time: DuckDB connections are not shared across threads
            self.store.add_outcome(outcome)
            self.reporter.outcome(outcome, cell)
        return outcome

    def _base(self, cell: Cell, scenario: Scenario, repeat: int, status: Status) -> Outcome:
        return Outcome(
            self.plan.run_id, cell.id, scenario.name, repeat, status, started_at=datetime.now(UTC).replace(tzinfo=None).isoformat()
        )

    def _env_outcome(self, cell: Cell, scenario: Scenario, repeat: int, env: EnvResult) -> Outcome:
        outcome = self._base(cell, scenario, repeat, Status(env.status))
        outcome.message = mask(env.message, self.secrets)
        sig = status_signature(env.status, _first_cause(env.message))
        outcome.signature, outcome.signature_family = sig.text, sig.family
        return outcome

    def _run_one(
        self, runner: CellRunner, cell: Cell, scenario: Scenario, repeat: int, env: EnvResult, gpu_count: int, request_env: dict[str, str]
    ) -> Outcome:
        reason = applicability(scenario, env.freeze, gpu_count)
        if reason:
            outcome = self._base(cell, scenario, repeat, Status.NOT_APPLICABLE)
            outcome.message = reason
            return outcome
        timeout = float(scenario.timeout or self.settings.timeout)
        raw = runner.run(scenario.path, timeout, {**_scenario_env(self.plan.options), **request_env})
        with self._lock:
            self.timing["scenario_seconds"] += raw.seconds
        verdict = interpret(raw, timeout, self.libraries)
        outcome = self._base(cell, scenario, repeat, verdict.status)
        outcome.message = mask(verdict.message, self.secrets)[:2000]
        if verdict.signature:
            outcome.signature = mask(verdict.signature.text, self.secrets)
            outcome.signature_family = verdict.signature.family
            outcome.blamed_library = verdict.signature.library
        outcome.exception_type = verdict.exception_type
        outcome.traceback = mask(verdict.traceback, self.secrets)
        outcome.output_tail = mask(raw.output_tail, self.secrets)
        outcome.seconds = raw.seconds
        outcome.metrics = raw.metrics
        return outcome


CULPRITS_FILE = "cuda-culprits.json"


def load_culprits(path: Path) -> set[tuple[str, str]]:
    """(module, version) pairs an earlier sweep found to initialise CUDA at import; unreadable = none."""
    try:
        data = json.loads(path.read_text())
        return {(str(m), str(v)) for m, v in data}
    except (OSError, ValueError, TypeError):
        return set()


def save_culprits(path: Path, culprits: set[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sorted(culprits | load_culprits(path))))  # keep what a parallel sweep added
    tmp.replace(path)  # atomic: a parallel sweep on the same env root never reads half a file


def _slowest(seconds: dict[str, float]) -> str:
    return ", ".join(f"{m} {s:.1f}" for m, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:3]) or "-"


def _first_cause(message: str) -> str:
    """The resolver's first line of reasoning names the conflict; keep it as the signature detail."""
    for line in message.splitlines():
        line = line.strip()
        if line.startswith("cause:") or line.startswith("Because"):
            return line.removeprefix("cause:").strip()[:200]
    return message.strip().splitlines()[0][:200] if message.strip() else ""


def _settings_dict(settings: object) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(settings)  # type: ignore[call-overload]


def _dist_version(module: str, freeze: dict[str, str]) -> str:
    """The installed version of the distribution a module comes from ("" if not in the freeze)."""
    top = module.split(".", 1)[0]
    return freeze.get(top) or freeze.get(top.replace("_", "-")) or ""
