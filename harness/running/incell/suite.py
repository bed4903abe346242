"""A team's pytest suite inside a cell: one collection, one result line per test node id.

Runs in the cell's interpreter, forked from its fork server (torch and the cell's libraries
already imported) or as a fresh process. Standard library and pytest only; never imports the
harness. `main` (the `suite` verb) and `server` (a request of kind "suite") call `run_request`,
which calls `run()`; the harness reads the events file as it grows
(`harness/running/testsuite.py`), so a test that kills this process or hangs is known by its "start"
line without a result, and the next worker is told to leave out every test already done.

Events, one JSON object a line:
    {"event": "collected", "nodeids": [...]}
    {"event": "collect_error", "nodeid": "tests/test_x.py", "exception_type", "message", "frames", "traceback"}
    {"event": "selection", "collected": N, "selected": M, "tests": [...]}   N collected before -k/-m; M kept (done
        ones and a shard's cut included), and the identities of those M: what the run collected (`harness changes`)
    {"event": "to_split", "nodeids": [...]}   a shard's cut cell: the selection, then the worker waits for the keep file
    {"event": "usage_error", "message": ...}   pytest refused the selection (an -m naming an unknown marker)
    {"event": "start", "nodeid": ..., "test_id": ...}
    {"event": "result", "nodeid", "test_id", "status", "phase", "exception_type", "message", "frames", "traceback", "reason",
     "seconds", "markers"}
    {"event": "imported", "modules": [...]}      installed modules the session loaded (preloaded next time)

`test_id` (only where it differs from the node id) is the test's identity across releases of
the suite (`test_identity`): where pytest made a parameter's id up from its name and index
(`config_kwargs45`), the parameter's value instead, which a release that inserts cases does
not renumber.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
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


#: A memory address in a repr (`<Foo object at 0x7f3a…>`): differs in every process.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: How deep `stable_repr` follows containers (a self-referencing value stops there).
_DEPTH = 8


def stable_repr(value: Any, depth: int = 0) -> str:
    """A repr of a parameter's value that is the same in every process and release: memory
    addresses masked, dict items and set elements sorted, lists, tuples and dicts followed.

    >>> stable_repr({"r": 8, "target_modules": ["lin0"], "b": {3, 1}})
    "{'b': {1, 3}, 'r': 8, 'target_modules': ['lin0']}"
    >>> stable_repr(object()).startswith("<object object at 0x…>")
    True
    """
    if depth > _DEPTH:
        return "…"
    if isinstance(value, dict):
        items = sorted(f"{stable_repr(k, depth + 1)}: {stable_repr(v, depth + 1)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (set, frozenset)):
        inner = ", ".join(sorted(stable_repr(v, depth + 1) for v in value))
        return f"{type(value).__name__}({{{inner}}})" if isinstance(value, frozenset) else "{" + inner + "}"
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        inner = ", ".join(stable_repr(v, depth + 1) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    try:
        text = repr(value)
    except Exception:  # a repr that raises: its type is all there is
        text = f"<{type(value).__module__}.{type(value).__qualname__}>"
    return _ADDRESS.sub(" at 0x…", text)


def value_hash(value: Any) -> str:
    """Eight hex digits of the value's `stable_repr`."""
    return hashlib.sha256(stable_repr(value).encode("utf-8", "backslashreplace")).hexdigest()[:8]


def prints(value: Any) -> bool:
    """Whether pytest prints this value as its id (its `IdMaker._idval_from_value`: strings and
    bytes, numbers, bools, None, enums, patterns, anything with a `__name__`); for any other, and
    for a string over 100 characters (pytest 9's "short" strategy), it makes one up from the
    argument's name and an index."""
    if isinstance(value, (str, bytes)):
        return len(value) <= 100
    if value is None or isinstance(value, (int, float, complex, bool, enum.Enum, re.Pattern)):
        return True
    return isinstance(getattr(value, "__name__", None), str)


def test_identity(nodeid: str, params: Mapping[str, Any], ids: Sequence[str]) -> str:
    """A test's identity across releases of its suite: the node id, with every parameter id
    pytest made up from the argument's name and an index (`config_kwargs45`, for a value it
    cannot print: a dict, an object) replaced by the name and a hash of the value
    (`config_kwargs#75b93f48`). A release that inserts cases shifts those indices; the values
    stay. Ids given (`ids=`, `pytest.param(id=)`) or printed from the value (numbers, strings,
    enums, classes, functions) are kept as they are.

    params: `item.callspec.params` (argument -> value); ids: `item.callspec._idlist`, one id
    per parametrize call (stacked decorators, fixture params), each its arguments' ids joined
    with "-". A made-up id is `<argument><digits>` for an argument whose value pytest does not
    print. Anything that does not fit that shape leaves the node id as it is.

    >>> test_identity("t.py::test_x[config_kwargs45]", {"config_kwargs": {"r": 8}}, ["config_kwargs45"])
    't.py::test_x[config_kwargs#75b93f48]'
    >>> test_identity("t.py::test_x[config_kwargs2]", {"config_kwargs": {"r": 8}}, ["config_kwargs2"])
    't.py::test_x[config_kwargs#75b93f48]'
    >>> test_identity("t.py::test_y[3-fp16]", {"n": 3, "dtype": "fp16"}, ["3-fp16"])
    't.py::test_y[3-fp16]'
    """
    tail = "[" + "-".join(ids) + "]"
    if not ids or not nodeid.endswith(tail):
        return nodeid
    unprinted = sorted((arg for arg, value in params.items() if not prints(value)), key=len, reverse=True)
    if not unprinted:
        return nodeid
    changed = False
    parts = []
    for entry in ids:
        tokens = entry.split("-")
        for k, token in enumerate(tokens):
            arg = next((a for a in unprinted if token.startswith(a) and token[len(a) :].isdigit()), None)
            if arg is not None:
                tokens[k] = f"{arg}#{value_hash(params[arg])}"
                changed = True
        parts.append("-".join(tokens))
    if not changed:
        return nodeid
    return nodeid[: -len(tail)] + "[" + "-".join(parts) + "]"


def item_identity(item: Any) -> str:
    """`test_identity` of a collected pytest item (its node id where it has no parameters)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return str(item.nodeid)
    try:
        ids = [str(i) for i in getattr(callspec, "_idlist", ())]
        return test_identity(str(item.nodeid), dict(callspec.params), ids)
    except Exception:  # a pytest whose callspec is shaped otherwise: the node id, as before
        return str(item.nodeid)


def identities(items: Sequence[Any]) -> dict[str, str]:
    """Node id -> identity, for the items whose identity is not their node id. Two cases of one
    session with one identity (equal values) are told apart by their order: `~2`, `~3`."""
    found: dict[str, str] = {}
    seen: dict[str, int] = {}
    for item in items:
        identity = item_identity(item)
        seen[identity] = seen.get(identity, 0) + 1
        if seen[identity] > 1:
            identity = f"{identity}~{seen[identity]}"
        if identity != item.nodeid:
            found[str(item.nodeid)] = identity
    return found


class Plugin:
    """pytest's own hooks are the seam: results come from the reports, never from its terminal."""

    def __init__(self, events: str, skip: list[str], keep: str = "") -> None:
        self.out = open(events, "a", buffering=1)  # noqa: SIM115 - lives as long as the session
        self.skip = set(skip)
        self.keep = keep  # a shard's cut cell: the file the controller writes this worker's tests into
        self.phases: dict[str, dict[str, dict[str, Any]]] = {}
        self.exceptions: dict[tuple[str, str], dict[str, Any]] = {}
        self.seconds: dict[str, float] = {}
        self.markers: dict[str, list[str]] = {}  # node id -> its marker names (what `harness pin -m` selects on)
        self.resumed = 0  # tests of the selection left out because they are done
        self.left: list[str] = []  # their node ids (and a shard's cut): still part of the selection
        self.identities: dict[str, str] = {}  # node id -> its identity, where the two differ (`test_identity`)

    def emit(self, **event: Any) -> None:
        self.out.write(json.dumps(event, default=str) + "\n")
        self.out.flush()

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        self.identities = identities(items)  # of every test collected, before any is left out: the same in each worker
        if self.keep:
            return  # done tests leave after the shard's cut (`_shard_cut`): the cut needs the whole selection
        left = [item for item in items if item.nodeid in self.skip]
        self.resumed = len(left)  # done already: still part of the selection (`_selection_guard`)
        self.left = [item.nodeid for item in left]
        if left:
            items[:] = [item for item in items if item.nodeid not in self.skip]
            config.hook.pytest_deselected(items=left)

    def _identity(self, nodeid: str) -> dict[str, str]:
        found = self.identities.get(nodeid)
        return {"test_id": found} if found else {}

    def pytest_collection_finish(self, session: Any) -> None:
        for item in session.items:
            self.markers[item.nodeid] = sorted({m.name for m in item.iter_markers()} - {"parametrize"})
        self.emit(event="collected", nodeids=[item.nodeid for item in session.items])

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        # A file that failed to collect: the exception itself, not pytest's CollectError text
        # around it (called just before its report is logged; with --pdb, the debugger's own).
        if call.when == "collect" and call.excinfo is not None:
            where = getattr(getattr(node.config, "invocation_params", None), "dir", None) or os.getcwd()
            self.exceptions[(report.nodeid, "collect")] = collection_exception(call.excinfo.value, str(where))

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            found = self.exceptions.pop((report.nodeid, "collect"), None) or _from_text(report.longrepr)
            self.emit(event="collect_error", nodeid=report.nodeid, **found, traceback=str(report.longrepr)[-TRACEBACK_CHARS:])

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        marks = {"markers": self.markers[nodeid]} if self.markers.get(nodeid) else {}
        self.emit(event="start", nodeid=nodeid, **self._identity(nodeid), **marks)  # the controller's crash or timeout result carries them

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
            seconds = round(self.seconds.pop(report.nodeid), 4)
            self.emit(event="result", nodeid=report.nodeid, **self._identity(report.nodeid), seconds=seconds, **result, **marks)


#: pytest's wrappers around the exception a collection failed on.
COLLECTION_WRAPPERS = ("CollectError", "ConftestImportFailure")


def collection_exception(exc: BaseException, root: str) -> dict[str, Any]:
    """What a file's collection failed on: the exception pytest wrapped (a SyntaxError, an
    ImportError, a conftest's), its frames, and where in the team's code, as a SyntaxError says
    it: "(tests/test_x.py, line 3)" (its own file and line; else the innermost frame under `root`).

    >>> try:
    ...     compile("def f(:", "/suite/tests/test_bad.py", "exec")
    ... except SyntaxError as err:
    ...     found = collection_exception(err, "/suite")
    >>> found["exception_type"], found["message"], found["frames"][-1]
    ('builtins.SyntaxError', 'invalid syntax (tests/test_bad.py, line 1)', ['/suite/tests/test_bad.py', 1, '<module>'])
    """
    while type(exc).__name__ in COLLECTION_WRAPPERS:
        inner = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
        if not isinstance(inner, BaseException) or type(inner).__module__.startswith("_pytest."):
            break  # none, or pytest's own (a module-level pytest.skip): its CollectError explains it
        exc = inner
    frames: list[list[Any]] = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(exc.__traceback__)]
    inside = os.path.join(os.path.abspath(root), "")
    message = str(exc)
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        frames.append([exc.filename, exc.lineno, "<module>"])
        path = os.path.abspath(exc.filename)
        shown = os.path.relpath(path, root) if path.startswith(inside) else os.path.basename(path)
        message = f"{exc.msg} ({shown}, line {exc.lineno})"
    else:
        ours = [f for f in frames if os.path.abspath(f[0]).startswith(inside) and "site-packages" not in f[0]]
        if ours:
            message = f"{message} ({os.path.relpath(os.path.abspath(ours[-1][0]), root)}, line {ours[-1][1]})"
    return {"exception_type": _type_name(exc), "message": message[:2000], "frames": frames}


def _from_text(longrepr: Any) -> dict[str, Any]:
    """A failed collection's report alone (no exception seen): its crash line, else the last
    `E   Type: message` line of pytest's text."""
    crash = getattr(longrepr, "reprcrash", None)
    said = str(getattr(crash, "message", "")) if crash is not None else ""
    if not said:
        raised = [line[1:].strip() for line in str(longrepr).splitlines() if line.startswith("E ") and ": " in line]
        said = raised[-1] if raised else str(longrepr).strip().splitlines()[-1] if str(longrepr).strip() else ""
    kind, _, message = said.partition(": ")
    return {"exception_type": kind, "message": message}


def _selection_guard(pytest: Any, plugin: Plugin) -> object:
    """A wrapper around pytest's deselection (-k, -m, the tests already done): how many tests the
    session collected and how many the selection kept ("selection"), or the complaint of pytest
    refusing it ("usage_error": an -m naming an unknown marker under --strict-markers), which
    would otherwise end the session, exit 4, with no event. Made here: `pytest.hookimpl` needs
    pytest, which `run` imports."""

    class Selection:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> Any:  # a generator
            collected = len(items)
            outcome = yield
            error = outcome.excinfo[1] if outcome.excinfo else None
            if isinstance(error, pytest.UsageError):
                plugin.emit(event="usage_error", message=str(error))
            elif error is None:
                tests = [plugin.identities.get(n, n) for n in [item.nodeid for item in items] + plugin.left]
                plugin.emit(event="selection", collected=collected, selected=len(items) + plugin.resumed, tests=tests)

    return Selection()


def _shard_cut(pytest: Any, plugin: Plugin) -> object:
    """A shard runs a slice of a cut cell's tests: after -k/-m (trylast), the selection goes to the
    controller ("to_split"), which answers with the node ids this shard keeps in `plugin.keep`
    (the harness computes the slice; this side only waits and applies it). Tests cut away, and
    those done already, count as `resumed`: still part of the selection, not run here."""

    class Cut:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
            plugin.emit(event="to_split", nodeids=[item.nodeid for item in items])
            deadline = time.monotonic() + KEEP_WAIT_SECONDS
            while not os.path.exists(plugin.keep):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no slice of the shard in {plugin.keep} after {KEEP_WAIT_SECONDS} s")
                time.sleep(0.02)
            with open(plugin.keep) as fh:
                keep = set(json.load(fh))
            run = [item for item in items if item.nodeid in keep and item.nodeid not in plugin.skip]
            left = [item for item in items if item.nodeid not in keep or item.nodeid in plugin.skip]
            plugin.resumed = len(left)
            plugin.left = [item.nodeid for item in left]
            if left:
                items[:] = run
                config.hook.pytest_deselected(items=left)

    return Cut()


#: How long a worker of a cut cell waits for the controller's slice.
KEEP_WAIT_SECONDS = 600


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


def run(root: str, args: list[str], events: str, skip: list[str], keep: str = "") -> int:
    """pytest.main in the suite's folder, as when the team types `pytest` there, plus the plugin."""
    before = set(sys.modules)
    import pytest

    os.chdir(root)
    sys.path.insert(0, root)  # as `python -m pytest` run from the suite's folder has it
    plugin = Plugin(events, skip, keep)
    plugins = [plugin, _selection_guard(pytest, plugin), *([_shard_cut(pytest, plugin)] if keep else [])]
    try:
        code = int(pytest.main(args, plugins=plugins))
    finally:
        plugin.emit(event="imported", modules=_new_imports(before, root))
        plugin.out.close()
    return code


def run_request(request: dict[str, Any]) -> int:
    """`run` with the harness's request (`suite-request.json`, or a fork server's request)."""
    return int(run(request["root"], request["args"], request["events"], request["skip"], request.get("keep", "")))
