"""Which GPUs a sweep's jobs and scenarios use, and sharing them between parallel cells.

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

import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


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


#: Jobs a CPU-only machine runs by default: one per core, no more than this (each job holds a
#: fork server and a scenario's model in memory; the default matrix's take about 0.7 GiB a job).
MAX_CPU_JOBS = 8


def default_jobs(gpus: int, cpus: int) -> int:
    """`--jobs auto`: one job where there are GPUs (the lone job gets all of them, so a two-GPU
    scenario runs in its cell's turn), else one job per CPU core, at most `MAX_CPU_JOBS`.

    >>> default_jobs(gpus=0, cpus=2), default_jobs(gpus=2, cpus=64), default_jobs(gpus=0, cpus=64)
    (2, 1, 8)
    """
    return 1 if gpus else max(1, min(cpus, MAX_CPU_JOBS))


@dataclass
class GpuPlan:
    """The GPUs of one sweep: every one it may use, one per job, and who holds which when.

    gpus: `--gpus` (None: every GPU nvidia-smi saw, `count` of them). jobs: cells run at once.
    """

    gpus: list[str] | None
    count: int
    jobs: int = 1
    cpus: int = 0
    locks: GpuLocks = field(default_factory=GpuLocks)

    def ids(self) -> list[str]:
        return list(self.gpus) if self.gpus is not None else [str(i) for i in range(self.count)]

    def slots(self) -> list[list[str]]:
        """One GPU per job when there are several jobs (round robin); all of them for a lone job."""
        every = self.ids()
        if self.jobs <= 1:
            return [every]
        return [[every[k % len(every)]] if every else [] for k in range(self.jobs)]

    @contextmanager
    def lease(self, needs: int, gpus: list[str] | None) -> Iterator[tuple[int, dict[str, str]]]:
        """(GPUs the scenario may use, the variables that say so) for one scenario of a job.

        A scenario that needs more GPUs than its job has takes all of them alone (`GpuLocks`),
        inside its own cell's turn.
        """
        every = self.ids()
        if not gpus:
            yield (len(gpus) if gpus is not None else len(every)), {}
        elif len(gpus) < needs <= len(every):
            with self.locks.exclusive(every):
                yield len(every), {"CUDA_VISIBLE_DEVICES": ",".join(every)}
        else:
            narrowed = self.jobs > 1 or self.gpus is not None
            with self.locks.shared(gpus[0]):
                yield len(gpus), ({"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if narrowed else {})

    def server_env(self) -> dict[str, str]:
        """What a cell's fork server (and so every scenario) sees of the machine.

        A job's own GPU is set per scenario (`lease`): a cell is prepared before it is known
        which job, so which GPU, will run it. The server itself never initialises CUDA.
        """
        env: dict[str, str] = {}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        if self.jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
            # Each torch would start a thread per core: N cells at once would oversubscribe
            # the CPU N times over; tiny models gain nothing from more threads than their share.
            env["OMP_NUM_THREADS"] = str(max(1, (self.cpus or os.cpu_count() or 1) // self.jobs))
        return env
