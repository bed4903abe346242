"""What every process the harness starts shares: the program it runs, the lifeline, the group kill.

The runner's fork servers and scenario processes and the zygotes (`runner.py`, `zygote.py`) are
all the in-cell package (`incell/`, started by its path: `CHILD`), started in their own session
with the harness's lifeline (`lifeline`, passed with `child_env` and `pass_fds`), and ended by
killing their whole process group (`kill_group`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.running.incell.lifeline import LIFELINE_ENV

#: What runs inside a cell (standard library only): the package, and the file a cell's Python is started with.
INCELL = Path(__file__).with_name("incell")
CHILD = INCELL / "__main__.py"
#: One folder per cell that its scenarios share (the kit's saved model: scenarios/_gemma4._saved).
CELL_DIR_ENV = "HARNESS_CELL_DIR"
KILL_GRACE_SECONDS = 3.0

_lifeline_lock = threading.Lock()
_lifeline_fds: tuple[int, int] | None = None


def lifeline() -> int:
    """The read end of a pipe whose write end this process holds until it dies.

    Every server, zygote and scenario process gets the read end and reads EOF the moment the
    harness is gone, whether it exits, crashes or is killed with -9; it then kills what it runs
    and exits. Both ends are non-inheritable, and the read end is passed explicitly
    (`pass_fds`): no child ever holds the write end, which would keep the pipe open.
    """
    global _lifeline_fds
    with _lifeline_lock:
        if _lifeline_fds is None:
            _lifeline_fds = os.pipe()
        return _lifeline_fds[0]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus the lifeline's descriptor, for a process started with pass_fds=(lifeline(),)."""
    return {**env, LIFELINE_ENV: str(lifeline())}


def _group_exists(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(pid: int, alive: Callable[[], bool] | None = None) -> None:
    """TERM the process group, give it a grace period, then KILL whatever is left.

    `alive` tells whether the leader still runs: our own unreaped child would otherwise look
    alive to `killpg(pid, 0)` as a zombie. The final KILL goes to the group regardless, so
    grandchildren that outlive the leader do not linger.
    """
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    still_running = alive or (lambda: _group_exists(pid))
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    while time.monotonic() < deadline and still_running():
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
