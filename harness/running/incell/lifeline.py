"""The lifeline: EOF on it means the harness is gone; what runs here is killed, and the process exits.

The harness passes every process here the read end of a pipe whose write end only it holds
(harness/running/processes.py: `lifeline`, named by HARNESS_LIFELINE_FD, which `take` removes
from the environment). It reads EOF when the harness is gone, however it ended (kill -9
included). A server watches it in the loop that waits for its scenario (`wait_readable`,
`wait_child`), a process that imports for seconds through a forked watcher (`guarded`), a
scenario in a fresh process from a thread (`watch_in_thread`).

This module holds the state the protocols share: the lifeline's descriptor (`read_end`; a
parked server lets go of it and takes the next sweep's) and the scenario a server waits for
(`running`). Others read and set them here, as `lifeline.read_end`, never by a copy.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Iterator

LIFELINE_ENV = "HARNESS_LIFELINE_FD"

read_end: int | None = None  # read end of the harness's lifeline pipe, if it gave one
running: int | None = None  # the scenario process this server waits for, if any


def take() -> None:
    """At the start: the lifeline the harness passed, out of the environment scenarios see."""
    global read_end
    value = os.environ.pop(LIFELINE_ENV, "")
    read_end = int(value) if value else None


def _orphaned() -> None:
    """The harness died (kill -9, a crash): kill the scenario running now, with its group, and go.

    A pipe rather than PR_SET_PDEATHSIG: that signal fires when the parent *thread* ends, and
    the harness starts servers from worker and look-ahead threads that end long before it does.
    """
    pid = running
    if pid is not None:
        for kill in (os.killpg, os.kill):  # the group, and the leader should it not have setsid() yet
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os._exit(0)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """While this process imports (torch for seconds, with the GIL held in C at times), a
    forked watcher stands in for the loop that watches the lifeline: should the harness die
    meanwhile, it kills this process (and its group, if it leads one) at once, instead of once
    the imports end. The watcher leaves as soon as the block ends."""
    if read_end is None:
        yield
        return
    me, leader = os.getpid(), os.getpgid(0) == os.getpid()
    done_r, done_w = os.pipe()
    watcher = os.fork()
    if watcher == 0:
        os.close(done_w)
        try:
            ready, _, _ = select.select([read_end, done_r], [], [])
            if read_end in ready and done_r not in ready:
                (os.killpg if leader else os.kill)(me, signal.SIGKILL)
        finally:
            os._exit(0)
    os.close(done_r)
    try:
        yield
    finally:
        os.close(done_w)
        try:
            os.waitpid(watcher, 0)
        except ChildProcessError:
            pass  # reaped already


def wait_readable(fd: int, timeout: float | None = None) -> bool:
    """Wait until `fd` can be read (True) or `timeout` passes (False); never returns if the harness dies."""
    fds = [fd] if read_end is None else [fd, read_end]
    ready, _, _ = select.select(fds, [], [], timeout)
    if read_end is not None and read_end in ready:
        _orphaned()
    return fd in ready


def watch_in_thread() -> None:
    """For a scenario in a fresh process (`run`): no loop to watch from, so a daemon thread does."""
    if read_end is None:
        return
    import threading

    def watch(fd: int) -> None:
        select.select([fd], [], [])
        os.killpg(0, signal.SIGKILL)  # this process leads its own group (start_new_session)

    threading.Thread(target=watch, args=(read_end,), daemon=True, name="harness-lifeline").start()


def wait_child(pid: int) -> int:
    """waitpid(pid), watching the lifeline meanwhile."""
    if read_end is None:
        return os.waitpid(pid, 0)[1]
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # before Linux 5.3: poll
        pidfd = None
    try:
        while True:
            if pidfd is not None:
                wait_readable(pidfd)
            else:
                wait_readable(read_end, 0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
    finally:
        if pidfd is not None:
            os.close(pidfd)
