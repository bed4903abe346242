"""One scenario file run as __main__ in this process, and what happened written as JSON.

The record (`run_scenario`) says the status (by the exception's class: `STATUS_BY_CLASS`),
the exception and its frames, the scenario's own seconds and, on Python 3.12+, those of its
imports, and the installed modules it imported that were not loaded before it started: the
harness preloads them in this cell next time (harness/running/preloads.py). The harness's
side: harness/running/runner.py reads the record back.
"""

from __future__ import annotations

import faulthandler
import os
import resource
import runpy
import sys
import time
import traceback
from typing import Any

from .bytecode import remember_imports
from .files import write_json
from .preload import importers_of

#: A scenario that writes more than this much output is stopped (SIGXFSZ -> crash): the disk
#: of a shared runner is not the scenario's to fill.
OUTPUT_LIMIT_BYTES = 256 * 2**20
KIT_DIR_ENV = "HARNESS_KIT_DIR"
#: Modules the harness knows to initialise CUDA at import, comma-separated (`preload.importers_of`).
CULPRITS_ENV = "HARNESS_CUDA_CULPRITS"
STATUS_BY_CLASS = {
    "ScenarioFailed": "fail",
    "NotApplicable": "not_applicable",
    "Inconclusive": "inconclusive",
    "MemoryError": "oom",
    "OutOfMemoryError": "oom",
}


def _classify(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if cls.__name__ in STATUS_BY_CLASS:
            return STATUS_BY_CLASS[cls.__name__]
    return "error"


def _frames(exc: BaseException) -> list[list[Any]]:
    return [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(exc.__traceback__)]


def _import_clock() -> Any:
    """A function that returns the seconds this process has spent importing since this call,
    outermost imports only (an import inside an import counts once), or None before Python 3.12.

    It watches importlib's `_find_and_load` (every import of a module not yet loaded goes
    through it) with sys.monitoring: no wrapper joins a traceback, no module's code changes. A
    scenario's own code is its run less this: an import moved into a scenario still counts as
    an import (docs/zygote.md)."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return None
    import importlib._bootstrap as bootstrap  # the import system's own module, as the interpreter runs it

    target = bootstrap._find_and_load.__code__  # type: ignore[attr-defined]
    tool = next((t for t in (4, 3) if monitoring.get_tool(t) is None), None)  # ids neither debugger nor profiler use
    if tool is None:
        return None
    monitoring.use_tool_id(tool, "harness-imports")
    state = {"depth": 0, "since": 0.0, "total": 0.0}

    def enter(code: Any, offset: int) -> None:
        if state["depth"] == 0:
            state["since"] = time.perf_counter()
        state["depth"] += 1

    def leave(code: Any, offset: int, value: Any) -> None:
        if code is not target or state["depth"] == 0:
            return  # PY_UNWIND is only ever global: every function's exception comes here
        state["depth"] -= 1
        if state["depth"] == 0:
            state["total"] += time.perf_counter() - state["since"]

    events = monitoring.events
    monitoring.register_callback(tool, events.PY_START, enter)
    monitoring.register_callback(tool, events.PY_RETURN, leave)
    monitoring.register_callback(tool, events.PY_UNWIND, leave)
    monitoring.set_local_events(tool, target, events.PY_START | events.PY_RETURN)
    monitoring.set_events(tool, events.PY_UNWIND)
    return lambda: state["total"] + (time.perf_counter() - state["since"] if state["depth"] else 0.0)


def run_scenario(scenario: str, result: str) -> int:
    """Run one scenario file as __main__ and write what happened to `result`.

    The record also lists the installed modules the scenario imported that were not loaded
    before it started ("imported"): the harness preloads them in this cell next time.
    """
    scenario = os.path.abspath(scenario)
    # A segfault in native code then still leaves a Python stack in the output tail.
    faulthandler.enable()
    kit_dir = os.environ.get(KIT_DIR_ENV)
    sys.argv = [scenario]
    sys.path[0:0] = [os.path.dirname(scenario)] + ([kit_dir] if kit_dir else [])
    before = set(sys.modules)
    record: dict[str, Any] = {"status": "pass"}
    code = 0
    # The scenario's own time, whatever its status: what the harness spent around it is the
    # rest of the outcome's seconds (an error row records no `seconds` metric of its own).
    importing = _import_clock()
    started = time.perf_counter()
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
    record["run_seconds"] = round(time.perf_counter() - started, 4)
    if importing is not None:
        record["import_seconds"] = round(importing(), 4)
    sys.stdout.flush()
    sys.stderr.flush()
    record["imported"] = _new_imports(before, [os.path.dirname(scenario), kit_dir or ""])
    remember_imports()
    culprits = [c for c in os.environ.get(CULPRITS_ENV, "").split(",") if c]
    if culprits:
        record["imports_culprit"] = importers_of(culprits, before)
    write_json(result, record)
    return code


def _new_imports(before: set[str], skip_dirs: list[str]) -> list[str]:
    """Installed modules loaded since `before`, leaves only (importing one imports its parents);
    not the standard library, not the scenario's own helpers."""
    skip = tuple(os.path.join(d, "") for d in skip_dirs if d)
    names = []
    for name, module in list(sys.modules.items()):
        if name in before or name.partition(".")[0] in sys.stdlib_module_names or name.startswith("__"):
            continue
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path and not path.startswith(skip):
            names.append(name)
    parents = {n.rpartition(".")[0] for n in names}
    return [n for n in names if n not in parents]


def limit_output() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
    except (ValueError, OSError):
        pass
