"""GpuLocks: one-GPU scenarios share their GPU, a wider one has all its GPUs alone."""

from __future__ import annotations

import random
import threading
import time

from harness.running.gpus import GpuLocks


def test_shared_holders_of_one_gpu_run_together() -> None:
    locks = GpuLocks()
    inside = threading.Barrier(2, timeout=5)  # breaks unless both are inside at once

    def hold() -> None:
        with locks.shared("0"):
            inside.wait()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not inside.broken


def test_exclusive_waits_for_running_scenarios_and_bars_new_ones() -> None:
    locks = GpuLocks()
    events: list[str] = []
    running = threading.Event()
    release = threading.Event()

    def one_gpu_scenario() -> None:
        with locks.shared("1"):
            events.append("shared-start")
            running.set()
            release.wait(5)
            events.append("shared-end")

    def two_gpu_scenario() -> None:
        with locks.exclusive(["0", "1"]):
            events.append("exclusive")

    def late_one_gpu_scenario() -> None:
        with locks.shared("1"):
            events.append("late-shared")

    first = threading.Thread(target=one_gpu_scenario)
    first.start()
    running.wait(5)
    wide = threading.Thread(target=two_gpu_scenario)
    wide.start()
    time.sleep(0.2)  # the wide one is now waiting
    late = threading.Thread(target=late_one_gpu_scenario)
    late.start()
    time.sleep(0.2)
    assert events == ["shared-start"]  # neither the wide nor the late one got in
    release.set()
    for t in (first, wide, late):
        t.join(5)
    assert events == ["shared-start", "shared-end", "exclusive", "late-shared"]


def test_no_overlap_under_load() -> None:
    """Random one- and two-GPU holders on four threads: an exclusive hold never overlaps."""
    locks = GpuLocks()
    state = {"0": 0, "1": 0, "exclusive": 0}
    guard = threading.Lock()
    violations: list[str] = []

    def job(seed: int) -> None:
        rng = random.Random(seed)
        mine = str(seed % 2)
        for _ in range(60):
            if rng.random() < 0.2:
                with locks.exclusive(["1", "0"]):
                    with guard:
                        if state["0"] or state["1"] or state["exclusive"]:
                            violations.append("exclusive overlapped")
                        state["exclusive"] += 1
                    time.sleep(0.0005)
                    with guard:
                        state["exclusive"] -= 1
            else:
                with locks.shared(mine):
                    with guard:
                        if state["exclusive"]:
                            violations.append("shared inside exclusive")
                        state[mine] += 1
                    time.sleep(0.0005)
                    with guard:
                        state[mine] -= 1

    threads = [threading.Thread(target=job, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert violations == []


def test_default_jobs_doctests() -> None:
    import doctest

    from harness.running import gpus

    assert doctest.testmod(gpus).failed == 0
