"""Sharing a machine's GPUs between parallel cells.

Each job owns one GPU and runs its cell's scenarios there, but several jobs may share a GPU
(`--jobs` above the GPU count), and a scenario that needs two GPUs needs the others' too. So
a GPU is held *shared* by a one-GPU scenario and *exclusively* by a wider one:

    locks = GpuLocks()
    with locks.shared("0"):            # alongside other one-GPU scenarios on GPU 0
        ...
    with locks.exclusive(["0", "1"]):  # alone on both, once what runs there has finished
        ...

A waiting exclusive holder bars new shared holders of its GPUs, so a two-GPU scenario waits
for at most the scenarios running when it asked. All GPUs of an exclusive hold are taken at
once, under one condition: no job ever holds one GPU while waiting for another, so no deadlock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class GpuLocks:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared: Counter[str] = Counter()
        self._exclusive: set[str] = set()
        self._waiting: Counter[str] = Counter()  # exclusive holders waiting, per GPU

    @contextmanager
    def shared(self, gpu: str) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: gpu not in self._exclusive and not self._waiting[gpu])
            self._shared[gpu] += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared[gpu] -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self, gpus: Iterable[str]) -> Iterator[None]:
        wanted = sorted(set(gpus))
        with self._cond:
            self._waiting.update(wanted)
            try:
                self._cond.wait_for(lambda: all(not self._shared[g] and g not in self._exclusive for g in wanted))
            finally:
                self._waiting.subtract(wanted)
            self._exclusive.update(wanted)
        try:
            yield
        finally:
            with self._cond:
                self._exclusive.difference_update(wanted)
                self._cond.notify_all()
