"""Handing prepared cells to the jobs of a sweep, in matrix order, preparing the next ones ahead.

A cell is prepared (its env built, its fork server's imports done) before a job runs it; on a
GPU runner that is 12-20 s of CPU that would otherwise leave a GPU idle. `Feed` keeps up to
`ahead` cells prepared beyond those running, and whichever job finishes first takes the next
one: no job idles on imports while another holds a prepared cell. When no cell is left to
take, an idle job may share a running one (`worth_helping`), so the sweep does not end with
one job finishing a long cell alone; the second fork server it needs is started ahead, once
the feed is empty (`spares_for`), so the helper does not wait for its imports.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

W = TypeVar("W")  # a unit of work: a cell and what to run in it
P = TypeVar("P")  # that work, prepared


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
