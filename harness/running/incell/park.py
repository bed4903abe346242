"""A fork server kept between sweeps: parked on a Unix socket, taken by the next sweep of its cell.

Asked to park, a server says so, lets go of its sweep (its pipes, its log and its lifeline)
and waits on the socket the harness named (`park`); the next sweep of the cell connects and
hands over, as file descriptors, its own pipes, log and lifeline, with its per-cell variables
and cell folder (`_adopt_sweep`). The server then imports what of that sweep's preload it lacks
(`serve_again`) and serves it. The harness's side: harness/running/kept.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
from typing import Any

from . import lifeline
from .files import write_json
from .preload import log_preload, preload


def park(request: dict[str, Any], answer: Any) -> tuple[Any, list[dict[str, Any]]] | None:
    """Say whether it parked (on `answer`, which it closes), let go of the sweep (its pipes, log
    and lifeline), wait on the Unix socket
    `request["park"]` for up to `request["idle"]` seconds for the next sweep of this cell, and
    take its pipes, log, lifeline, variables and folder. Returns the new answer file and the
    preload that sweep wants; None: time to exit (idle too long, asked to quit, or another
    server of this cell parked first)."""
    import socket

    path, idle = str(request["park"]), float(request["idle"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    except OSError:
        sock.close()  # another server of this cell is parked there: this one is not needed
        answer.write(json.dumps({"parked": False}) + "\n")
        answer.close()
        return None
    sock.listen(4)
    info = path[: -len(".sock")] + ".json" if path.endswith(".sock") else path + ".json"
    write_json(info, {"pid": os.getpid(), "prefix": sys.prefix, "idle": idle, "parked_at": time.time()})
    answer.write(json.dumps({"parked": True, "pid": os.getpid()}) + "\n")
    answer.close()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    if lifeline.read_end is not None:
        os.close(lifeline.read_end)
        lifeline.read_end = None
    mine = os.stat(path).st_ino
    deadline = time.monotonic() + idle
    try:
        while True:
            # every few seconds: a server whose socket is gone (its folder removed, or another
            # bound in its place) can be reached by no sweep, so it goes
            if not select.select([sock], [], [], max(0.0, min(5.0, deadline - time.monotonic())))[0]:
                if time.monotonic() >= deadline or not _still_bound(path, mine):
                    return None  # idle for too long, or unreachable
                continue
            conn, _ = sock.accept()
            with conn:
                conn.settimeout(10)
                try:
                    message, fds, _, _ = socket.recv_fds(conn, 65536, 4)
                    data = json.loads(message or b"{}")
                except (OSError, ValueError):
                    continue
                if data.get("quit") or len(fds) != 4:
                    for fd in fds:
                        os.close(fd)
                    if data.get("quit"):
                        return None
                    continue
                for gone in (path, info):  # no other sweep finds this server from now on
                    with contextlib.suppress(OSError):
                        os.unlink(gone)
                try:
                    conn.sendall(json.dumps({"pid": os.getpid()}).encode())
                except OSError:
                    for fd in fds:
                        os.close(fd)
                    return None
            return _adopt_sweep(data, fds), list(data.get("preload", []))
    finally:
        sock.close()
        for gone in (path, info):
            with contextlib.suppress(OSError):
                if os.path.exists(gone) and _parked_by_me(info):
                    os.unlink(gone)


def _still_bound(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _parked_by_me(info: str) -> bool:
    try:
        with open(info) as fh:
            return bool(json.load(fh).get("pid") == os.getpid())
    except (OSError, ValueError):
        return False


def _adopt_sweep(data: dict[str, Any], fds: list[int]) -> Any:
    """Take the attaching sweep's stdin, stdout (the answer file, returned), log and lifeline,
    its per-cell variables and its cell folder."""
    stdin, stdout, log, lifeline_fd = fds
    os.dup2(stdin, 0)
    os.dup2(log, 2)
    os.dup2(log, 1)
    for fd in (stdin, log):
        os.close(fd)
    lifeline.read_end = lifeline_fd
    for name, value in dict(data.get("env", {})).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.chdir(data["cwd"])
    return os.fdopen(stdout, "w")


def serve_again(answer: Any, wanted: list[dict[str, Any]]) -> None:
    """The ready line of a kept server: what of `wanted` it had loaded already, and what it
    imported now (checked for CUDA as a start is; the sweep restarts without any culprit)."""
    have = [e for e in wanted if e["modules"] and all(m in sys.modules for m in e["modules"])]
    with lifeline.guarded():
        report = preload([e for e in wanted if e not in have])
    log_preload("server", report)
    names = {e["name"] for e in have} | set(report["ready"])
    report["ready"] = [e["name"] for e in wanted if e["name"] in names]
    report["kept"] = True
    report["pid"] = os.getpid()
    answer.write(json.dumps(report) + "\n")
    answer.flush()
