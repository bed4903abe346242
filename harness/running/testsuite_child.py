"""A team's pytest suite inside a cell: one collection, one result line per test node id.

Runs in the cell's interpreter, forked from its fork server (torch and the cell's libraries
already imported) or as a fresh process. Standard library and pytest only; never imports the
harness. `child.py` calls `run()`; the harness reads the events file as it grows
(`harness/running/testsuite.py`), so a test that kills this process or hangs is known by its "start"
line without a result, and the next worker is told to leave out every test already done.

Events, one JSON object a line:
    {"event": "collected", "nodeids": [...]}
    {"event": "collect_error", "nodeid": "tests/test_x.py", "exception_type", "message", "traceback"}
    {"event": "start", "nodeid": ...}
    {"event": "result", "nodeid", "status", "phase", "exception_type", "message", "frames", "traceback", "reason", "seconds", "markers"}
    {"event": "imported", "modules": [...]}      installed modules the session loaded (preloaded next time)
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

#: An exception in the call phase of one of these types is the test's own check failing.
CHECK_FAILURES = ("AssertionError", "Failed")
TRACEBACK_CHARS = 8000


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def fold(phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One test's phase reports (setup, call, teardown) -> one result.

    >>> ok = {"outcome": "passed"}
    >>> fold({"setup": ok, "call": ok, "teardown": ok})["status"]
    'pass'
    >>> [fold({"setup": {"outcome": "skipped", "reason": "no GPU"}})[k] for k in ("status", "reason")]
    ['not_applicable', 'no GPU']
    >>> fold({"setup": ok, "call": {"outcome": "failed", "exception_type": "builtins.AssertionError"}})["status"]
    'fail'
    >>> fold({"setup": ok, "call": ok, "teardown": {"outcome": "failed", "exception_type": "builtins.OSError"}})["phase"]
    'teardown'
    """
    for phase in ("setup", "call", "teardown"):
        report = phases.get(phase)
        if report is None or (report["outcome"] == "passed" and "wasxfail" not in report):
            continue
        result: dict[str, Any] = {k: report[k] for k in ("exception_type", "message", "frames", "traceback") if k in report}
        result["phase"] = phase
        if "wasxfail" in report:  # xfail: pytest calls it skipped; xpass (not strict): passed
            status = "xfail" if report["outcome"] == "skipped" else "xpass"
            return {**result, "status": status, "reason": report["wasxfail"]}
        if report["outcome"] == "skipped":
            return {**result, "status": "not_applicable", "reason": report.get("reason", "")}
        short = str(report.get("exception_type", "")).rsplit(".", 1)[-1]
        status = "fail" if phase == "call" and (short in CHECK_FAILURES or not short) else "error"
        return {**result, "status": status}
    return {"status": "pass", "phase": "call"}


class Plugin:
    """pytest's own hooks are the seam: results come from the reports, never from its terminal."""

    def __init__(self, events: str, skip: list[str]) -> None:
        self.out = open(events, "a", buffering=1)  # noqa: SIM115 - lives as long as the session
        self.skip = set(skip)
        self.phases: dict[str, dict[str, dict[str, Any]]] = {}
        self.exceptions: dict[tuple[str, str], dict[str, Any]] = {}
        self.seconds: dict[str, float] = {}
        self.markers: dict[str, list[str]] = {}  # node id -> its marker names (what `harness pin -m` selects on)

    def emit(self, **event: Any) -> None:
        self.out.write(json.dumps(event, default=str) + "\n")
        self.out.flush()

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        left = [item for item in items if item.nodeid in self.skip]
        if left:
            items[:] = [item for item in items if item.nodeid not in self.skip]
            config.hook.pytest_deselected(items=left)

    def pytest_collection_finish(self, session: Any) -> None:
        for item in session.items:
            self.markers[item.nodeid] = sorted({m.name for m in item.iter_markers()} - {"parametrize"})
        self.emit(event="collected", nodeids=[item.nodeid for item in session.items])

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
            kind, _, message = str(getattr(crash, "message", report.longrepr)).partition(": ")
            self.emit(
                event="collect_error",
                nodeid=report.nodeid,
                exception_type=kind,
                message=message,
                traceback=str(report.longrepr)[-TRACEBACK_CHARS:],
            )

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        marks = {"markers": self.markers[nodeid]} if self.markers.get(nodeid) else {}
        self.emit(event="start", nodeid=nodeid, **marks)  # the controller's crash or timeout result carries them

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        # The exception itself (type, message, frames) for the signature: a report holds only
        # text. Called just before that phase's report is logged; returns nothing, so pytest's
        # own implementation still makes the report.
        if call.excinfo is not None:
            exc = call.excinfo.value
            frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(call.excinfo.tb)]
            self.exceptions[(item.nodeid, call.when)] = {"exception_type": _type_name(exc), "message": str(exc)[:2000], "frames": frames}

    def pytest_runtest_logreport(self, report: Any) -> None:
        phase: dict[str, Any] = {"outcome": report.outcome}
        if hasattr(report, "wasxfail"):
            phase["wasxfail"] = report.wasxfail
        if report.skipped and isinstance(report.longrepr, tuple):
            phase["reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        if report.failed:
            phase["traceback"] = str(report.longrepr)[-TRACEBACK_CHARS:]
            crash = getattr(report.longrepr, "reprcrash", None)
            # a strict xpass has no exception: its report's text is the message
            phase["message"] = str(crash.message) if crash is not None else str(report.longrepr)
        phase.update(self.exceptions.pop((report.nodeid, report.when), {}))
        self.phases.setdefault(report.nodeid, {})[report.when] = phase
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + float(report.duration)
        if report.when == "teardown":
            result = fold(self.phases.pop(report.nodeid))
            marks = {"markers": self.markers[report.nodeid]} if self.markers.get(report.nodeid) else {}
            self.emit(event="result", nodeid=report.nodeid, seconds=round(self.seconds.pop(report.nodeid), 4), **result, **marks)


def _new_imports(before: set[str], root: str) -> list[str]:
    """Installed modules loaded since `before`, leaves only; not the suite's own files."""
    inside = os.path.join(os.path.abspath(root), "")
    names = []
    for name, module in list(sys.modules.items()):
        if name in before or name.partition(".")[0] in sys.stdlib_module_names or name.startswith(("__", "_pytest", "pytest", "pluggy")):
            continue
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path and "site-packages" in path and not os.path.abspath(path).startswith(inside):
            names.append(name)
    parents = {n.rpartition(".")[0] for n in names}
    return [n for n in names if n not in parents]


def run(root: str, args: list[str], events: str, skip: list[str]) -> int:
    """pytest.main in the suite's folder, as when the team types `pytest` there, plus the plugin."""
    before = set(sys.modules)
    import pytest

    os.chdir(root)
    sys.path.insert(0, root)  # as `python -m pytest` run from the suite's folder has it
    plugin = Plugin(events, skip)
    try:
        code = int(pytest.main(args, plugins=[plugin]))
    finally:
        plugin.emit(event="imported", modules=_new_imports(before, root))
        plugin.out.close()
    return code
