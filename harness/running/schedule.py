"""Handing prepared cells to the jobs of a sweep, in matrix order, preparing the next ones ahead.

A cell is prepared (its env built, its fork server's imports done) before a job runs it; on a
GPU runner that is 12-20 s of CPU that would otherwise leave a GPU idle. `Feed` keeps up to
`ahead` cells prepared beyond those running, and whichever job finishes first takes the next
one: no job idles on imports while another holds a prepared cell. When no cell is left to
take, an idle job may share a running one (`worth_helping`), so the sweep does not end with
one job finishing a long cell alone; the second fork server it needs is started ahead, once
the feed is empty (`spares_for`), so the helper does not wait for its imports.

`Tail` holds those decisions' state: the cells jobs may share and who is idle. It runs no
thread and reads no clock: the sweep tells it what happened (under the sweep's lock) and
carries out what it answers, so its decisions are tested as scripts of events.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

W = TypeVar("W")  # a unit of work: a cell and what to run in it
P = TypeVar("P")  # that work, prepared
K = TypeVar("K")  # a running cell, as the sweep knows it (hashable: a key)


class Feed(Generic[W, P]):
    """Prepared work, in order, for any job that asks.

    `ahead` background threads keep at most `ahead` items prepared or being prepared beyond
    those handed out. Threads are daemons: Ctrl-C during a long env build must not wait on it.
    With `ahead` 0 (--no-lookahead) the job that asks prepares its item itself. `dispose`
    releases an item nobody will take (the sweep stopped).
    """

    def __init__(self, work: Sequence[W], prepare: Callable[[W], P], ahead: int, dispose: Callable[[P], None] | None = None) -> None:
        self._work = deque(work)
        self._left = len(work)  # not yet handed to a job
        self._prepare = prepare
        self._dispose = dispose
        self._ready: queue.Queue[P | BaseException] = queue.Queue()
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
                item = self._work.popleft()
            try:
                done: P | BaseException = self._prepare(item)
            except BaseException as exc:  # handed to the job that takes it
                done = exc
            self._ready.put(done)

    def exhausted(self) -> bool:
        """Every item has been handed to a job: no more work will come out of this feed."""
        with self._lock:
            return self._left == 0

    def next(self) -> P | None:
        """The next prepared item (waiting for it if need be), or None when all are handed out."""
        with self._lock:
            if self._left == 0:
                return None
            self._left -= 1
            if not self._ahead:
                item = self._work.popleft()
        if not self._ahead:
            return self._prepare(item)
        while True:
            try:
                done = self._ready.get(timeout=0.2)
                break
            except queue.Empty:
                if self._closed:  # the sweep stopped while this job waited
                    return None
        self._permits.release()  # a slot ahead is free: prepare one more
        if isinstance(done, BaseException):
            raise done
        return done

    def close(self) -> None:
        """The sweep is stopping: prepare nothing more; dispose of what nobody will take."""
        with self._lock:
            self._work.clear()
            self._left = 0
            self._closed = True
        while True:
            try:
                done = self._ready.get_nowait()
            except queue.Empty:
                return
            if self._dispose is not None and not isinstance(done, BaseException):
                self._dispose(done)


@dataclass(frozen=True)
class Running:
    """A cell some job is running, as an idle job sees it when no new cell is left to take."""

    left: int  # scenarios of it nobody has started yet
    seconds_each: float | None  # its finished scenarios' mean seconds (None before the first)
    start_seconds: float  # what its fork server took to start: a helper's second server costs as much

    def seconds_left(self, fallback_each: float) -> float:
        """Its scenarios not started yet x their mean (the sweep's, before one of its own finished)."""
        return self.left * (self.seconds_each if self.seconds_each is not None else fallback_each)


def worth_helping(running: Sequence[Running], fallback_each: float) -> int | None:
    """Which running cell an idle job should share (its index), or None: go home.

    The end of a sweep, in cells, leaves one job finishing a long cell while the others idle
    (on the two-GPU runner the tail cost 70-75 s of a 240-290 s shard). An idle job that starts
    a second server for that cell and takes scenarios from the same queue: the two finish the
    cell's remaining time R together in about (R + start) / 2 instead of R, since the helper
    runs nothing while its server starts. It helps only where that gain, (R - start) / 2, is
    positive; of several cells, the one it shortens most. `fallback_each`: the sweep's mean
    scenario seconds, for a cell none of whose scenarios has finished yet.
    """
    best, best_gain = None, 0.0
    for i, cell in enumerate(running):
        gain = (cell.seconds_left(fallback_each) - cell.start_seconds) / 2
        if cell.left >= 2 and gain > best_gain:
            best, best_gain = i, gain
    return best


def spares_for(running: Sequence[Running], fallback_each: float, n: int) -> list[int]:
    """Which running cells get a second fork server started ahead (their indices), at most `n`.

    Called once the feed is empty: every job will soon be idle but one, and an idle job's help
    pays its server's start (6-7 s of imports on the GPU runner) before it runs anything. A
    server started now, in the background, while every job is still busy, costs no job any
    time. With `n` = jobs - 1 the cells are those with the most expected time left (scenarios
    left x their mean): the ones an idle job will share. None with fewer than 2 left: a helper
    takes only what its cell's own job has not started. Ties go to the cell started last (the
    later index): with nothing else known, it ends last.
    """
    ranked = sorted((i for i, cell in enumerate(running) if cell.left >= 2), key=lambda i: (-running[i].seconds_left(fallback_each), -i))
    return ranked[: max(0, n)]


@dataclass
class Shared:
    """A running cell that idle jobs may share: what the tail's decisions know of it."""

    left: int  # its scenarios nobody has started yet
    runnable: int  # of those, the ones that can run here (the rest are not applicable: no cost)
    start_seconds: float  # its first server's start: what a helper's second server costs
    jobs: int = 1  # jobs taking its scenarios now
    ran: int = 0  # runnable scenarios finished
    seconds: float = 0.0  # their seconds
    spare: bool = False  # a second server was started ahead for it, and nobody took it yet

    def running(self) -> Running:
        """As an idle job sees it: its jobs split what is left, and a spare's imports are done."""
        start = 0.0 if self.spare else self.start_seconds  # a helper would wait for no imports
        return Running(-(-self.runnable // self.jobs), self.seconds / self.ran if self.ran else None, start)


class Idle(Enum):
    """What an idle job does when no running cell is worth sharing."""

    WAIT = "wait"  # others still run: a cell may yet be worth sharing (or is still being prepared)
    HOME = "home"  # every other job is idle too: nothing runs, nothing to share


@dataclass(frozen=True)
class Help(Generic[K]):
    """An idle job shares `cell`; `spare`: with the server started ahead for it (else it starts one)."""

    cell: K
    spare: bool


class Tail(Generic[K]):
    """The tail help of one run of jobs: which running cells idle jobs share, and when.

    Events in (a job started a cell, took or finished one of its scenarios, went idle, is done
    with a cell), decisions out (the cells to start a spare server for, `Help`, `Idle`). The
    cells are the sweep's own objects, used as keys. No lock: the sweep holds its own around
    every call. A cell the tail was not told of (a single job, --no-tail-help, `run_cell`)
    is run by its one job alone: events about it change nothing, and its job is its last.
    """

    def __init__(self, jobs: int, help_tail: bool = True, cpus: int = 0) -> None:
        self.sharing = jobs > 1 and help_tail  # whether idle jobs share running cells at all
        # at most one idle job per job but the last cell's; and a spare costs no job any time
        # only on a core no job uses (`cpus`, 0: unknown, as many as needed): with a job per
        # core its imports slowed both jobs, and unused it was pure loss (2 of 2 in the main job)
        self._spares = jobs - 1 if not cpus else max(0, min(jobs - 1, cpus - jobs))
        self._busy = jobs  # jobs not idle: while some run, an idle job waits rather than leaves
        self._cells: dict[K, Shared] = {}  # in the order jobs started them

    def started(self, cell: K, left: int, runnable: int, start_seconds: float, *, last: bool, mean: float) -> list[K]:
        """A job started running `cell` (its server started in `start_seconds`): the cells whose
        second server to start now, in the background (`spares_for`), for the jobs that will be
        idle soon. Only once `last` (the feed has no cell left to hand out): before that an idle
        job takes a new cell. `mean`: the sweep's mean scenario seconds so far."""
        self._cells[cell] = Shared(left, runnable, start_seconds)
        if not last:
            return []
        live = [k for k, c in self._cells.items() if c.left and not c.spare]
        chosen = [live[i] for i in spares_for([self._cells[k].running() for k in live], mean, self._spares)]
        for k in chosen:
            self._cells[k].spare = True
        return chosen

    def took(self, cell: K, runnable: bool) -> None:
        """One of its jobs took one of its scenarios (`runnable`: one that can run here)."""
        if (shared := self._cells.get(cell)) is not None:
            shared.left -= 1
            shared.runnable -= runnable

    def finished(self, cell: K, seconds: float) -> None:
        """One of its runnable scenarios finished in `seconds`: its mean, hence whether sharing it pays."""
        if (shared := self._cells.get(cell)) is not None:
            shared.ran += 1
            shared.seconds += seconds

    def job_idle(self) -> None:
        """A job found no cell to take: until `job_back`, it counts as idle."""
        self._busy -= 1

    def job_back(self) -> None:
        """The idle job helps a cell, goes home or stops waiting."""
        self._busy += 1

    def job_gone(self) -> None:
        """A job ended (nothing left for it, the sweep stopped, an error)."""
        self._busy -= 1

    def next_for_idle(self, mean: float) -> Help[K] | Idle:
        """What an idle job does now: share the running cell it shortens most (`worth_helping`),
        with its spare if one was started ahead (the cell is the job's from now on: `done`
        tells when it leaves); else wait while another job runs, else go home."""
        live = [k for k, c in self._cells.items() if c.left]
        chosen = worth_helping([self._cells[k].running() for k in live], mean)
        if chosen is None:
            return Idle.HOME if self._busy == 0 else Idle.WAIT
        shared = self._cells[live[chosen]]
        shared.jobs += 1
        spare, shared.spare = shared.spare, False
        return Help(live[chosen], spare)

    def helper_failed(self, cell: K) -> None:
        """The helper's server for `cell` did not start: it takes nothing of it."""
        if (shared := self._cells.get(cell)) is not None:
            shared.jobs -= 1

    def done(self, cell: K) -> bool:
        """A job is done with `cell` (none of its scenarios left, or the sweep stopped). True for
        its last job: the cell leaves the tail, and its spare, if nobody took it, is to be discarded."""
        shared = self._cells.get(cell)
        if shared is None:
            return True
        shared.jobs -= 1
        if shared.jobs:
            return False
        del self._cells[cell]
        return True

    def end(self) -> list[K]:
        """The jobs are over (a stop leaves cells unfinished): the cells whose spares nobody will take."""
        spares = [k for k, c in self._cells.items() if c.spare]
        self._cells.clear()
        return spares
