"""The fork server: a cell's preload imported once, then one forked process per scenario.

`serve` reads one JSON request per line on stdin ({"scenario", "result", "output", "env"}, or
{"kind": "suite", ...} for a pytest worker), answers {"pid": N} as soon as the scenario's
process exists (so the harness can kill its process group on timeout) and {"pid": N, "exit":
code, "signal": sig} when it ends. Forking before anything touches CUDA keeps one torch import
per cell instead of one per scenario. A request {"park": SOCKET, "idle": SECONDS} makes it let
go of the sweep and wait for the next one (`park`). The harness's side: harness/running/server.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from . import lifeline
from .bytecode import remember_imports
from .files import write_json
from .park import park, serve_again
from .preload import TORCH_TOPS, log_preload, preload
from .scenario import limit_output, run_scenario


def parse_entries(args: list[str]) -> list[dict[str, Any]]:
    """`MODULE ...` and `--preload-file JSON` (a list of entries) -> preload entries."""
    entries: list[dict[str, Any]] = []
    it = iter(args)
    for arg in it:
        if arg == "--preload-file":
            with open(next(it)) as fh:
                entries += json.load(fh)
        else:
            entries.append({"name": arg, "modules": [arg]})
    return entries


def serve(entries: list[dict[str, Any]], loaded_file: str | None = None) -> int:
    """Import `entries`, say so, then fork per request; park when asked, and serve the next
    sweep that takes this server. `loaded_file`: forked from a zygote, where to list the torch
    modules the preload loaded."""
    # Answers go to a private copy of stdout; fd 1 itself now points at stderr, so whatever a
    # library prints while importing (C level included) cannot corrupt the protocol.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with lifeline.guarded():
        report = preload(entries)
    log_preload("server", report)
    remember_imports()
    if loaded_file and not report["cuda_culprits"]:
        # Forked from a zygote: the torch modules this cell's imports pulled in, none of which
        # made fork unusable (the probes above said so). The pool has the zygote import them
        # before it forks the next cell of this torch build, once instead of once per server.
        write_json(loaded_file, {"modules": [m for m in list(sys.modules) if m.partition(".")[0] in TORCH_TOPS]})
    answer.write(json.dumps(report) + "\n")
    answer.flush()
    while True:
        parking = _serve_requests(answer)
        if parking is None:
            answer.close()
            return 0
        attached = park(parking, answer)
        if attached is None:
            return 0
        answer, wanted = attached
        serve_again(answer, wanted)


def _serve_requests(answer: Any) -> dict[str, Any] | None:
    """Fork one scenario per request until EOF (None) or a request to park (returned)."""
    for request in _requests(0):
        if "park" in request:
            return request
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            answer.close()
            _child(request)
        lifeline.running = pid
        answer.write(json.dumps({"pid": pid}) + "\n")
        answer.flush()
        status = lifeline.wait_child(pid)
        lifeline.running = None
        try:  # what the scenario left running in its group must not outlive it (nor the sweep)
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        answer.write(json.dumps(dict({"pid": pid}, **_decode_status(status))) + "\n")
        answer.flush()
    return None


def _child(request: dict[str, Any]) -> None:
    """In the forked process: own session (so a timeout kills the whole group), own output."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if lifeline.read_end is not None:
            os.close(lifeline.read_end)  # the server watches it; the scenario has no use for it
        _redirect(request["output"])
        limit_output()
        os.environ.update(request.get("env", {}))
        sys.stdin = open(os.devnull)  # noqa: SIM115 - lives until os._exit
        if request.get("kind") == "suite":
            from . import suite  # pytest's worker: loaded only where a suite runs

            code = suite.run_request(request)
        else:
            code = run_scenario(request["scenario"], request["result"])
    finally:
        os._exit(code)


def _redirect(output: str) -> None:
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _requests(fd: int) -> Any:
    """JSON requests, one per line, from `fd` until EOF."""
    buffer = b""
    while True:
        lifeline.wait_readable(fd)
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def _decode_status(status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        return {"exit": None, "signal": os.WTERMSIG(status)}
    return {"exit": os.WEXITSTATUS(status), "signal": None}
