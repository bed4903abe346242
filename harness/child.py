"""The harness's foot inside a cell: runs scenarios in the cell's own interpreter.

Standard library only, and never imports the harness: it is executed as a file by the cell's
Python, where only the libraries under test are installed.

    python child.py run SCENARIO RESULT_JSON        one scenario, this process
    python child.py serve [MODULE ...]              import MODULEs once, then fork per request

`serve` reads one JSON request per line on stdin ({"scenario", "result", "output", "env"}),
answers {"pid": N} as soon as the scenario's process exists (so the harness can kill its
process group on timeout) and {"pid": N, "exit": code, "signal": sig} when it ends. Forking
before anything touches CUDA keeps one torch import per cell instead of one per scenario.
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import runpy
import signal
import sys
import time
import traceback
from typing import Any

#: A scenario that writes more than this much output is stopped (SIGXFSZ -> crash): the disk
#: of a shared runner is not the scenario's to fill.
OUTPUT_LIMIT_BYTES = 256 * 2**20
KIT_DIR_ENV = "HARNESS_KIT_DIR"
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
STATUS_BY_CLASS = {
    "ScenarioFailed": "fail",
    "NotApplicable": "not_applicable",
    "Inconclusive": "inconclusive",
    "MemoryError": "oom",
    "OutOfMemoryError": "oom",
}


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _classify(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if cls.__name__ in STATUS_BY_CLASS:
            return STATUS_BY_CLASS[cls.__name__]
    return "error"


def _frames(exc: BaseException) -> list[list[Any]]:
    return [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(exc.__traceback__)]


def run_scenario(scenario: str, result: str) -> int:
    """Run one scenario file as __main__ and write what happened to `result`."""
    scenario = os.path.abspath(scenario)
    # A segfault in native code then still leaves a Python stack in the output tail.
    faulthandler.enable()
    kit_dir = os.environ.get(KIT_DIR_ENV)
    sys.argv = [scenario]
    sys.path[0:0] = [os.path.dirname(scenario)] + ([kit_dir] if kit_dir else [])
    record: dict[str, Any] = {"status": "pass"}
    code = 0
    try:
        runpy.run_path(scenario, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            record = {"status": "error", "exception_type": "SystemExit", "message": str(exc.code), "frames": _frames(exc)}
            code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:
        record = {
            "status": _classify(exc),
            "exception_type": type(exc).__module__ + "." + type(exc).__qualname__,
            "message": str(exc),
            "frames": _frames(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        }
        code = 1
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    _write_json(result, record)
    return code


def _redirect(output: str) -> None:
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _limit_output() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
    except (ValueError, OSError):
        pass


def _child(request: dict[str, Any]) -> None:
    """In the forked process: own session (so a timeout kills the whole group), own output."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _redirect(request["output"])
        _limit_output()
        os.environ.update(request.get("env", {}))
        sys.stdin = open(os.devnull)  # noqa: SIM115 - lives until os._exit
        code = run_scenario(request["scenario"], request["result"])
    finally:
        os._exit(code)


def _cuda_initialized() -> bool:
    """Whether a forked child could no longer use CUDA: torch initialised it here, or
    something poisoned fork (`torch.cuda.is_available()` does, through cudaGetDeviceCount,
    without initialising torch's CUDA state)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        if torch.cuda.is_initialized():
            return True
    except Exception:  # a torch without CUDA support
        return False
    bad_fork = getattr(getattr(torch, "_C", None), "_cuda_isInBadFork", None)
    if bad_fork is None:  # a CPU build: nothing to poison
        return False
    pid = os.fork()
    if pid == 0:  # the probe: torch marks a child of a poisoned parent "in bad fork"
        os._exit(1 if bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)


def _decode_status(status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        return {"exit": None, "signal": os.WTERMSIG(status)}
    return {"exit": os.WEXITSTATUS(status), "signal": None}


def serve(preload: list[str]) -> int:
    # Answers go to a private copy of stdout; fd 1 itself now points at stderr, so whatever a
    # library prints while importing (C level included) cannot corrupt the protocol.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    imported = []
    cuda_by = ""
    # While preloading, torch.cuda.is_available() asks NVML instead of initialising the driver
    # (which would poison fork); scenarios get the user's setting back.
    nvml_check = os.environ.get(NVML_CHECK)
    os.environ.setdefault(NVML_CHECK, "1")
    seconds: dict[str, float] = {}
    for module in preload:
        started = time.monotonic()
        try:
            __import__(module)
            imported.append(module)
            seconds[module] = round(time.monotonic() - started, 3)
        except Exception:  # a cell without the module simply imports nothing
            continue
        if _cuda_initialized():
            # A forked child cannot use a CUDA context its parent created: the harness
            # restarts this server without this module (and what follows it).
            cuda_by = module
            break
    if nvml_check is None:
        os.environ.pop(NVML_CHECK, None)
    answer.write(json.dumps({"ready": imported, "cuda_initialized_by": cuda_by, "seconds": seconds}) + "\n")
    answer.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answer.flush()
        pid = os.fork()
        if pid == 0:
            answer.close()
            _child(request)
        answer.write(json.dumps({"pid": pid}) + "\n")
        answer.flush()
        _, status = os.waitpid(pid, 0)
        answer.write(json.dumps(dict({"pid": pid}, **_decode_status(status))) + "\n")
        answer.flush()
    return 0


def main(argv: list[str]) -> int:
    # Python put this file's folder (the harness package) first on sys.path; a scenario must
    # see only the cell's libraries, never the harness's modules.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if len(argv) >= 3 and argv[0] == "run":
        _limit_output()
        return run_scenario(argv[1], argv[2])
    if argv and argv[0] == "serve":
        return serve(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
