"""A team's own pytest suite as the checks: every collected test node id is one outcome.

The suite runs in each cell as under plain `pytest` from the team's folder (its conftest.py
files, fixtures, parametrization, markers and configuration, `addopts` included), collected
once per cell by a worker forked from the cell's fork server (`incell/suite.py`), so torch
and the cell's libraries are imported once. Like pytest-xdist's controller, the harness reads
the worker's events as they come: a test that kills the worker is a `crash` for that test, one
that runs past its time a `timeout` (its process group is killed), and a new worker runs the
tests not done yet. Statuses: `pass`; `fail` (an assertion, or `pytest.fail`) and `error` (any
other exception, in setup, call or teardown); a skip is `not_applicable` with pytest's reason;
`xfail` and `xpass` are stored as what they are (a strict xpass fails, as pytest says).
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import signal
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.analysis.interpret import Interpretation
from harness.analysis.signature import Frame, Signature, make_signature, status_signature
from harness.analysis.status import Status
from harness.errors import BadInput
from harness.inputs.fingerprint import code_commit, code_digest, file_digest, files_digest, source_files
from harness.inputs.matrix import pytest_expression_problem
from harness.inputs.scenarios import Scenario
from harness.inputs.testsource import NoTests, TestSource

#: The root's pytest configuration files (with every conftest.py: what applies to all its tests).
_CONFIG = ("conftest.py", "pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini")
#: A worker that dies this many times in a row without finishing a test is not started again.
MAX_BARREN_RESTARTS = 2
#: Options a suite's configuration may carry, and the plugin that provides each.
PLUGIN_OPTIONS = {
    "--cov": "pytest-cov",
    "-n": "pytest-xdist",
    "--numprocesses": "pytest-xdist",
    "--dist": "pytest-xdist",
    "--timeout": "pytest-timeout",
    "--benchmark-": "pytest-benchmark",
    "--reruns": "pytest-rerunfailures",
    "--randomly-": "pytest-randomly",
    "--mpl": "pytest-mpl",
    "--asyncio-mode": "pytest-asyncio",
}


@dataclass(frozen=True)
class Suite(Scenario):
    """A pytest suite in a cell: the sweep's unit of work whose run yields one outcome per test.

    `name` is what the sweep's bookkeeping calls it ("pytest"); its outcomes are keyed by node id.
    """

    root: Path = Path(".")
    paths: tuple[str, ...] = ()
    keyword: str = ""
    marker: str = ""
    #: A package's own tests: `root` is then a cache folder, and each cell runs the tests of
    #: the package's tag for the version installed there (`in_cell`).
    source: TestSource | None = None

    def in_cell(self, freeze: dict[str, str]) -> Suite:
        """The suite as this cell runs it: with a source, rooted at the checkout of the installed
        version's tag (testsource.NoTests if the package is not installed or has no tag)."""
        if self.source is None:
            return self
        version = freeze.get(self.source.package) or freeze.get(self.source.package.replace("_", "-"))
        if not version:
            raise NoTests(f"{self.source.package} is not installed in this cell; its tests need it (add it to the matrix)")
        root = self.source.checkout(version, self.paths, self.root)
        return replace(self, root=root, path=root / "conftest.py", source=None)

    def args(self) -> list[str]:
        """pytest's arguments: the team's own selection, and two that keep cells apart: no cache
        shared between cells running at once, and a file that fails to import costs its own
        tests, not the whole session's."""
        selection = [*self.paths, *(["-k", self.keyword] if self.keyword else []), *(["-m", self.marker] if self.marker else [])]
        return [*selection, "-p", "no:cacheprovider", "--continue-on-collection-errors"]

    def digest(self) -> str:
        """Changes with the selection, with the content of any test or conftest file (learned
        preloads start again), and with the code under test (`fingerprint.code_digest`: the
        commit and uncommitted changes of the suite's repository); with a source, with the
        repository's newest commit. Contents, not file times: a fresh checkout of the same
        commit resumes, a change to the package under unchanged tests does not."""
        h = hashlib.sha256(json.dumps([str(self.root), self.paths, self.keyword, self.marker]).encode())
        if self.source is not None:
            h.update(f"{self.source.package} {self.source.repo} {self.source.head(self.root)}".encode())
            return h.hexdigest()[:12]
        # the commit is where the code came from, not what it is: a docs-only commit resumes the run
        h.update(json.dumps({k: v for k, v in self.inputs().items() if k != "commit"}, sort_keys=True).encode())
        return h.hexdigest()[:12]

    def inputs(self) -> dict[str, Any]:
        """What its outcomes depend on besides the cell, as a run records it (`harness changes`):
        each test file's content (by its path from the root), the root's conftest and
        configuration together, and the code under test (`fingerprint.code_digest`: its source
        files' content); with the repository and commit it came from (`commit`: what `harness
        explain` bisects between two nights)."""
        if self.source is not None:
            return {"config": self.digest(), "files": {}, "code": f"{self.source.package}@{self.source.head(self.root)}"}
        found = self._files()
        # every conftest.py applies to the tests below it: with the root's configuration, one digest for all
        shared = [p for p in found if p.name == "conftest.py" or (p.parent == self.root and p.name in _CONFIG)]
        files = {p.relative_to(self.root).as_posix(): file_digest(p) for p in found if p not in shared}
        found_commit = code_commit(self.root)
        return {
            "config": files_digest(shared),
            "files": files,
            "code": code_digest(self.root),
            **({"commit": found_commit} if found_commit else {}),
        }

    def _files(self) -> list[Path]:
        """The root's conftest and configuration, and the Python files under the selected paths
        (only those: a team's folder may hold a virtualenv)."""
        found = [self.root / n for n in _CONFIG if (self.root / n).is_file()]
        for entry in self.paths or (".",):
            target = self.root / entry.split("::", 1)[0]
            found += source_files(target, (".py",)) if target.is_dir() else [target] if target.is_file() else []
        return list(dict.fromkeys(found))


def make_suite(
    root: str | Path,
    paths: Iterable[str] = (),
    keyword: str = "",
    marker: str = "",
    timeout: float | None = None,
    source: TestSource | None = None,
) -> Suite:
    """The suite at `root` (the folder where the team types `pytest`), checked. With a `source`,
    `root` is the cache its checkouts go to, and the paths are checked per cell, at its tag."""
    check_selection(keyword, marker)
    if source is not None:
        cache = Path(root).resolve()
        return Suite(
            name="pytest",
            path=cache / "conftest.py",
            timeout=timeout,
            root=cache,
            paths=tuple(paths),
            keyword=keyword,
            marker=marker,
            source=source,
        )
    folder = Path(root).resolve()
    if not folder.is_dir():
        raise BadInput(f"tests root {str(root)!r} is not a folder; pass the folder where you run pytest (--tests-root DIR)")
    chosen = tuple(paths)
    missing = [p for p in chosen if not (folder / p.split("::", 1)[0]).exists()]
    if missing:
        raise BadInput(f"test path {missing[0]!r} is not under {str(folder)!r}; pass paths relative to the tests root")
    return Suite(name="pytest", path=folder / "conftest.py", timeout=timeout, root=folder, paths=chosen, keyword=keyword, marker=marker)


def check_selection(keyword: str, marker: str) -> None:
    """BadInput naming the expression and pytest's complaint, before any env is built, for a -k
    or -m that pytest would refuse (its own parser, where pytest imports in the harness's
    process; elsewhere the cells' collection says it: `Sweep`'s "usage_error")."""
    for option, expression in (("-k", keyword), ("-m", marker)):
        if expression and (complaint := pytest_expression_problem(expression, option)):
            raise BadInput(f"{option} {expression!r}: pytest says {complaint}; give an expression pytest accepts, e.g. {option} 'not slow'")


#: Reads one root file of the suite by name; None where there is none.
ReadFile = Callable[[str], str | None]


def _in_folder(root: Path) -> ReadFile:
    return lambda name: (root / name).read_text() if (root / name).is_file() else None


def _ini(read: ReadFile) -> dict[str, str]:
    """The suite's pytest configuration, from the file pytest itself would pick first. In
    pyproject.toml, pytest 9's native `[tool.pytest]` table is read like `[tool.pytest.ini_options]`.

    >>> _ini({"pyproject.toml": '[tool.pytest]\\naddopts = ["--cov=src/peft", "-q"]'}.get)
    {'addopts': '--cov=src/peft -q'}
    """
    for name in ("pytest.ini", ".pytest.ini"):
        if (text := read(name)) is not None:
            return _cfg_section(text, "pytest")
    if (text := read("pyproject.toml")) is not None:
        table = tomllib.loads(text).get("tool", {}).get("pytest", {})
        options = table.get("ini_options", {k: v for k, v in table.items() if k != "ini_options"} if table else None)
        if isinstance(options, dict):
            return {k: " ".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in options.items()}
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        if (text := read(name)) is not None and (found := _cfg_section(text, section)):
            return found
    return {}


def _cfg_section(text: str, section: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return dict(parser[section]) if parser.has_section(section) else {}


def needed_packages(root: Path | ReadFile, extra: Iterable[str] = ()) -> list[str]:
    """What every cell needs to run the suite: pytest, the plugins its configuration names
    (`required_plugins`, and options such as `--cov` in `addopts`), and the suite's own
    test dependencies. Never axes: they resolve with each cell's pins.

    >>> import tempfile; root = Path(tempfile.mkdtemp())
    >>> _ = (root / "pytest.ini").write_text("[pytest]\\naddopts = --cov=mypkg -q\\nrequired_plugins = pytest-timeout>=2\\n")
    >>> needed_packages(root, ["parameterized"])
    ['pytest', 'pytest-timeout>=2', 'pytest-cov', 'parameterized']
    """
    ini = _ini(_in_folder(root) if isinstance(root, Path) else root)
    found = ["pytest", *ini.get("required_plugins", "").split()]
    for option in ini.get("addopts", "").split():
        plugin = next((p for flag, p in PLUGIN_OPTIONS.items() if _names(option, flag)), None)
        if plugin and not any(re.match(re.escape(plugin) + r"\b", f) for f in found):
            found.append(plugin)
    return list(dict.fromkeys([*found, *extra]))


def _names(option: str, flag: str) -> bool:
    """`option` (as written in addopts) is `flag`, `flag=value`, or starts with a prefix flag ("--benchmark-")."""
    return option == flag or option.startswith(flag if flag.endswith("-") else flag + "=")


# -- one test's result -> the harness's words ---------------------------------------------------
@dataclass
class TestResult:
    nodeid: str
    status: str
    message: str = ""
    exception_type: str = ""
    frames: list[Frame] = field(default_factory=list)
    traceback: str = ""
    seconds: float = 0.0
    phase: str = ""
    test_id: str = ""  # its identity across the suite's releases, where not the node id (`incell/suite.py`'s `test_identity`)


def interpret_result(event: dict[str, Any], libraries: Iterable[str]) -> TestResult:
    """A worker's result event -> the test's status, message and frames."""
    status = str(event.get("status", "error"))
    frames = [Frame(str(f[0]), int(f[1]), str(f[2])) for f in event.get("frames") or []]
    reason = str(event.get("reason", ""))
    kind = str(event.get("exception_type", ""))
    short = kind.rsplit(".", 1)[-1]
    said = str(event.get("message", "")).split("\n", 1)[0]  # pytest's assertion rewrite adds the expression below
    if status in ("not_applicable", "xfail", "xpass"):
        message = reason
    elif status in ("crash", "timeout") or not short:
        message = said
    else:
        message = f"{short}: {said}"
    if status == "error" and event.get("phase") in ("setup", "teardown"):
        message = f"in {event['phase']}: {message}"
    seconds = float(event.get("seconds", 0.0))
    trace, phase = str(event.get("traceback", "")), str(event.get("phase", ""))
    return TestResult(str(event["nodeid"]), status, message, short, frames, trace, seconds, phase, str(event.get("test_id") or ""))


def meaning(result: TestResult, libraries: Iterable[str]) -> Interpretation:
    """The signature follows the scenarios' rules: the innermost frame in a library under test
    names the library; a frame in the test file or a conftest is the team's own code (no library)."""
    status = Status(result.status)
    if status in (Status.PASS, Status.NOT_APPLICABLE, Status.XFAIL, Status.XPASS):
        return Interpretation(status, result.message, None, result.exception_type)
    if status in (Status.CRASH, Status.TIMEOUT):
        return Interpretation(status, result.message, status_signature(status.value, result.exception_type), result.exception_type)
    body = result.message.removeprefix("in setup: ").removeprefix("in teardown: ")
    message = body.split(": ", 1)[1] if ": " in body else body
    if result.phase == "collection":  # a file that failed to import: the file it names stays in the signature
        signature = collection_signature(result.exception_type or "Failed", message, result.frames, libraries)
    else:
        signature = make_signature(result.exception_type or "Failed", message, result.frames, libraries)
    return Interpretation(status, result.message, signature, result.exception_type, result.traceback)


#: The end of a collection error's message (`incell/suite.py`'s `collection_exception`): where in the team's code.
_WHERE = re.compile(r"^(?P<said>.*) \((?P<file>[^()]+), line (?P<line>\d+)\)$")


def collection_signature(kind: str, message: str, frames: list[Frame], libraries: Iterable[str]) -> Signature:
    """The signature of a file that failed to collect: its exception's, as any other (message
    masked, a library's frame blamed), with the file of the team's code it names kept, which the
    masking would fold into "(...)"; its line masked, like every number.

    >>> collection_signature("SyntaxError", "invalid syntax (tests/test_bad.py, line 4)", [], ()).text
    'SyntaxError: invalid syntax (tests/test_bad.py, line <n>)'
    """
    found = _WHERE.match(message)
    if found is None:
        return make_signature(kind, message, frames, libraries)
    plain = make_signature(kind, found["said"], frames, libraries)
    masked = f"{plain.message} ({found['file']}, line <n>)"
    text = f"{plain.exception_type}: {masked}" + (f" @ {plain.location}" if plain.location else "")
    return Signature(plain.exception_type, masked, plain.library, plain.location, text)


# -- the controller --------------------------------------------------------------------------------
#: Starts one worker for the given node ids to leave out; returns (exit code, signal) once it ended.
StartWorker = Callable[[list[str]], tuple[int | None, int | None]]
#: Kills the running worker's process group (a test ran past its time).
KillWorker = Callable[[], None]


@dataclass
class _Watch:
    """What the controller knows of the worker running now."""

    events: Path
    offset: int = 0
    running: str = ""
    since: float = 0.0
    collected: bool = False
    timed_out: str = ""
    markers: list[str] = field(default_factory=list)  # the running test's
    test_id: str = ""  # the running test's identity, where it is not its node id


#: A shard's slice of a cut cell: the node ids it keeps, of the cell's whole selection (`shards.split_tests`).
Slice = Callable[[list[str]], list[str]]


def run_suite(
    start: StartWorker,
    kill: KillWorker,
    events: Path,
    timeout: float,
    done: Iterable[str] = (),
    poll: float = 0.05,
    *,
    cut: tuple[Slice, Path] | None = None,
) -> Iterator[dict[str, Any]]:
    """Every result event of the suite, restarting the worker after a crash or a timeout.

    Yields the worker's own events ("collected", "collect_error", "result", "imported") and the
    controller's results for a test that crashed or timed out. `done`: node ids not to run again
    (stored already). A worker that dies twice in a row without a test finished ends the run;
    the tests it never reached are not reported (a rerun resumes them). `cut`: a shard runs a
    slice of this cell; the worker sends its selection ("to_split") and waits for the slice in
    the file, written once: a worker started again after a crash reads the same one.
    """
    finished = set(done)
    barren = 0
    if cut is not None:
        cut[1].unlink(missing_ok=True)
    while True:
        watch = _Watch(events)
        events.write_text("")
        answer: list[tuple[int | None, int | None]] = []
        worker = threading.Thread(target=_call_into, args=(start, sorted(finished), answer), daemon=True)
        worker.start()
        progress = False
        while worker.is_alive():
            worker.join(poll)
            for event in _read(watch):
                if event.get("event") == "to_split":
                    _write_slice(cut, [str(n) for n in event.get("nodeids", [])])
                    continue
                progress |= _note(event, finished)
                yield event
            if watch.running and time.monotonic() - watch.since > timeout and not watch.timed_out:
                watch.timed_out = watch.running
                kill()
        for event in _read(watch):
            if event.get("event") == "to_split":
                continue  # the worker ended before it read a slice: the next one asks again
            progress |= _note(event, finished)
            yield event
        exit_code, sig = answer[0] if answer else (None, signal.SIGKILL)
        in_test = watch.timed_out or watch.running
        if in_test and in_test not in finished:
            finished.add(in_test)
            progress = True
            ended = _ended_in_test(in_test, bool(watch.timed_out), timeout, exit_code, sig)
            said = {**({"markers": watch.markers} if watch.markers else {}), **({"test_id": watch.test_id} if watch.test_id else {})}
            yield {**ended, **said}
        elif watch.collected or exit_code is not None:
            return  # the session ended on its own: every test done, or pytest stopped it
        barren = 0 if progress else barren + 1
        if barren >= MAX_BARREN_RESTARTS:
            how = f"killed by {signal.Signals(sig).name}" if sig else f"exited with {exit_code}"
            yield {"event": "worker_died", "message": f"the pytest worker {how} before it ran a test, {barren} times"}
            return


def _write_slice(cut: tuple[Slice, Path] | None, selection: list[str]) -> None:
    """The shard's slice of the selection, into the file the worker waits for (once: atomically)."""
    if cut is None or cut[1].exists():
        return
    part = cut[1].with_suffix(".part")
    part.write_text(json.dumps(cut[0](selection)))
    os.replace(part, cut[1])


def _call_into(start: StartWorker, skip: list[str], answer: list[tuple[int | None, int | None]]) -> None:
    answer.append(start(skip))


def _ended_in_test(nodeid: str, timed_out: bool, timeout: float, exit_code: int | None, sig: int | None) -> dict[str, Any]:
    """The result of the test the worker was running when it was killed or died."""
    if timed_out:
        return {"event": "result", "nodeid": nodeid, "status": "timeout", "message": f"no result after {timeout:g}s; its worker was killed"}
    how = f"killed by {signal.Signals(sig).name}" if sig else f"the worker exited with {exit_code} during the test"
    return {"event": "result", "nodeid": nodeid, "status": "crash", "message": how, "exception_type": how.split()[-1]}


def _note(event: dict[str, Any], finished: set[str]) -> bool:
    if event.get("event") == "result":
        finished.add(str(event["nodeid"]))
        return True
    return False


def _read(watch: _Watch) -> Iterator[dict[str, Any]]:
    """The complete lines added to the events file since the last read."""
    try:
        with watch.events.open("rb") as fh:
            fh.seek(watch.offset)
            data = fh.read()
    except OSError:
        return
    end = data.rfind(b"\n") + 1
    watch.offset += end
    for line in data[:end].splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("event")
        if kind == "collected":
            watch.collected = True
        elif kind == "start":
            watch.running, watch.since, watch.markers = str(event["nodeid"]), time.monotonic(), list(event.get("markers") or [])
            watch.test_id = str(event.get("test_id") or "")
            continue
        elif kind == "result" and event.get("nodeid") == watch.running:
            watch.running = ""
        yield event


# -- what plain pytest says, for checking the harness against it ---------------------------------
#: One line of `pytest -v`: the node id, then the word pytest prints for it.
VERBOSE_LINE = re.compile(r"^(?P<node>\S.*?::.*?) (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)( \(.*\))?\s+\[\s*\d+%\]\s*$")


def pytest_word(status: str, message: str) -> str:
    """The word plain `pytest -v` prints for a test the harness stored with `status`.

    >>> pytest_word("error", "in setup: RuntimeError: x"), pytest_word("error", "KeyError: 'a'")
    ('ERROR', 'FAILED')
    """
    if status == "error":
        return "ERROR" if message.startswith(("in setup:", "in teardown:")) else "FAILED"
    words = {"pass": "PASSED", "fail": "FAILED", "not_applicable": "SKIPPED", "xfail": "XFAIL", "xpass": "XPASS"}
    return words.get(status, status.upper())


def parse_verbose(output: str) -> dict[str, str]:
    """Node id -> pytest's word, from `-v` output (an error in teardown after a pass is ERROR).

    >>> parse_verbose("t.py::a[x y] PASSED [ 50%]\\nt.py::a[x y] ERROR [ 50%]\\nt.py::b SKIPPED (why) [100%]")
    {'t.py::a[x y]': 'ERROR', 't.py::b': 'SKIPPED'}
    """
    found: dict[str, str] = {}
    for line in output.splitlines():
        m = VERBOSE_LINE.match(line)
        if m and found.get(m["node"]) != "ERROR":
            found[m["node"]] = m["word"]
    return found
