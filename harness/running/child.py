"""The harness's foot inside a cell: runs scenarios in the cell's own interpreter.

Standard library only, and never imports the harness: it is executed as a file by the cell's
Python, where only the libraries under test are installed.

    python child.py run SCENARIO RESULT_JSON        one scenario, this process
    python child.py serve [MODULE ...] [--preload-file JSON]
                                                    import MODULEs once, then fork per request
    python child.py zygote CONFIG_JSON              import torch once, then fork a `serve` per cell
    python child.py suite REQUEST_JSON              a pytest suite (testsuite_child.py), this process
    python child.py describe                        this interpreter's sys.path, prefix, executable

`serve` reads one JSON request per line on stdin ({"scenario", "result", "output", "env"}),
answers {"pid": N} as soon as the scenario's process exists (so the harness can kill its
process group on timeout) and {"pid": N, "exit": code, "signal": sig} when it ends. Forking
before anything touches CUDA keeps one torch import per cell instead of one per scenario.
A request {"park": SOCKET, "idle": SECONDS} makes it let go of the sweep and wait on that Unix
socket for the next sweep of its cell, which hands it new pipes (`_park`; harness/running/kept.py).

`zygote` does the same one level up: it imports torch (never a library under test), then for
each cell the harness sends it (the cell's pipes ride along as file descriptors on a Unix
socket) it forks, and the child becomes that cell's `serve`: it checks that every file it has
loaded is byte-identical in the cell's env, then rebases sys.path, sys.prefix and every
loaded module's paths onto the cell's env, so that the cell cannot tell it from a fresh
interpreter of its own (see docs/zygote.md for what can and cannot be rebased).

Every process here watches a lifeline (HARNESS_LIFELINE_FD): the read end of a pipe whose
write end only the harness holds. It reads EOF when the harness is gone, however it ended
(kill -9 included); the process then kills its running scenario's group and exits.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import json
import os
import resource
import runpy
import select
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

#: A scenario that writes more than this much output is stopped (SIGXFSZ -> crash): the disk
#: of a shared runner is not the scenario's to fill.
OUTPUT_LIMIT_BYTES = 256 * 2**20
KIT_DIR_ENV = "HARNESS_KIT_DIR"
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
#: Modules the harness knows to initialise CUDA at import, comma-separated (see `_importers_of`).
CULPRITS_ENV = "HARNESS_CUDA_CULPRITS"
LIFELINE_ENV = "HARNESS_LIFELINE_FD"
PRELOAD_LOG_ENV = "HARNESS_PRELOAD_LOG"
ZYGOTE_SOCKET_ENV = "HARNESS_ZYGOTE_FD"
#: Where every process of a sweep keeps the bytecode of what it imports (`share_bytecode`); unset: off.
BYTECODE_ENV = "HARNESS_BYTECODE_DIR"
#: How many forked workers compile, into that folder, what a preload is about to import
#: (`_precompile`); unset or 1: each module is compiled as it is imported, one after another.
PRECOMPILE_ENV = "HARNESS_PRECOMPILE_WORKERS"
#: In the bytecode folder: the installed files (relative to their site-packages) that servers and
#: scenarios imported, the list `_precompile` works from; at most PRECOMPILE_LIMIT of them.
IMPORTED_LIST = "imported-files.json"
PRECOMPILE_LIMIT = 50_000
#: With this many workers, a preloaded package nobody imported yet is compiled whole (about three
#: times the files an import of it loads): below it, compiling at import is no slower.
WHOLE_PACKAGE_WORKERS = 4
#: With this many, and nothing listed yet (a fresh runner), every site-packages of the env is
#: compiled whole, tests aside: transformers' import pulls in some 4,000 modules of a GPU image
#: (scipy, sympy, pandas, sklearn, triton beside torch), which no preload names.
WHOLE_SITE_WORKERS = 8
#: "0": a whole-site compile is waited for whole, as before #38's last pass (the measurements' baseline).
PRECOMPILE_BEHIND_ENV = "HARNESS_PRECOMPILE_BEHIND"
#: Folders a whole-site compile skips: an import seldom loads a package's own tests.
NOT_IMPORTED = frozenset({"tests", "test", "__pycache__"})
#: Exit code of a process forked from a zygote that refused a cell (its files differ).
REFUSED = 3
#: torch's top-level modules (zygote.TORCH_TOPS; this file imports nothing of the harness).
TORCH_TOPS = frozenset({"torch", "functorch", "torchgen"})

_lifeline: int | None = None  # read end of the harness's lifeline pipe, if it gave one
_running: int | None = None  # the scenario process this server waits for, if any
STATUS_BY_CLASS = {
    "ScenarioFailed": "fail",
    "NotApplicable": "not_applicable",
    "Inconclusive": "inconclusive",
    "MemoryError": "oom",
    "OutOfMemoryError": "oom",
}


def share_bytecode(root: str) -> None:
    """Read and write the bytecode of every module this process imports from source under `root`,
    named by the source file's identity on disk (device, inode, size, mtime), not by its path.

    uv hardlinks one unpacked wheel into every env that installs it, so the envs of a sweep share
    their source files' inodes: transformers compiled by one cell's server is read by the next
    cell with that release, instead of compiled again in each env (uv writes no bytecode, and
    PYTHONDONTWRITEBYTECODE, often set in images, stops Python writing any). A file copied, not
    linked, has its own inode and simply gets its own entry. Python checks each entry against
    its source's mtime and size as usual, and sets the code's file names to the path it
    imported (`_fix_co_filename`), so tracebacks name the cell's own files. Sources outside any
    env (the scenarios, the kit) are cached the same way; that is harmless.
    """
    import importlib._bootstrap_external as external  # the import system's own module, patched in place

    if getattr(external.cache_from_source, "__harness__", False):
        return
    plain = external.cache_from_source

    def cache_from_source(path: str, debug_override: Any = None, *, optimization: Any = None) -> str:
        name = os.path.basename(plain(path, debug_override, optimization=optimization))
        try:
            st = os.stat(path)
        except OSError:
            return plain(path, debug_override, optimization=optimization)
        # 256 folders, so that no one folder holds every module of a sweep
        return os.path.join(root, f"{st.st_ino & 0xFF:02x}", f"{st.st_dev:x}-{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}-{name}")

    cache_from_source.__harness__ = True  # type: ignore[attr-defined]
    external.cache_from_source = cache_from_source  # type: ignore[assignment]
    sys.dont_write_bytecode = False  # the entries go to `root`, never into an env or a source tree
    # pytest writes its rewritten test modules by sys.pycache_prefix: under `root` too, not beside the tests
    sys.pycache_prefix = os.path.join(root, "pytest")


def _shared_bytecode_root() -> str:
    """The shared bytecode folder, where this process reads and writes its modules' bytecode ("" if none)."""
    import importlib._bootstrap_external as external

    return os.environ.get(BYTECODE_ENV, "") if getattr(external.cache_from_source, "__harness__", False) else ""


def _site_roots() -> list[str]:
    return [p for p in sys.path if p and os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def _read_list(path: str) -> list[str]:
    try:
        with open(path) as fh:
            found = json.load(fh)
    except (OSError, ValueError):
        return []
    return [f for f in found if isinstance(f, str)] if isinstance(found, list) else []


def remember_imports() -> None:
    """Add the installed files this process has imported to the bytecode folder's list, for the
    next preload's `_precompile` (in another env too: the same release's files, or the next
    release's files of the same name). Lost updates between processes only cost a compilation."""
    root = _shared_bytecode_root()
    if not root or int(os.environ.get(PRECOMPILE_ENV) or 0) < 2:
        return
    path = os.path.join(root, IMPORTED_LIST)
    known = set(_read_list(path))
    if len(known) >= PRECOMPILE_LIMIT:
        return
    roots = _site_roots()
    found: set[str] = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file.endswith(".py"):
            found.update(file[len(r) + 1 :] for r in roots if file.startswith(r + os.sep))
    if found - known:
        with contextlib.suppress(OSError):
            os.makedirs(root, exist_ok=True)
            _write_json(path, sorted(known | found)[:PRECOMPILE_LIMIT])


def _to_precompile(entries: list[dict[str, Any]], workers: int) -> tuple[list[str], list[str]]:
    """This env's source files of what servers and scenarios imported before (the folder's list);
    with `workers` enough for it, every site-packages whole where nothing is listed yet, or else
    each preloaded package nobody imported yet; less those whose bytecode the folder holds.

    Returned in two parts: what the preload waits for, and, of a whole site, the files outside
    the preloaded packages (the env's own site-packages first, the libraries under test: the
    fork servers import them next), which nobody waits for."""
    import importlib._bootstrap_external as external

    roots = _site_roots()
    listed = _read_list(os.path.join(_shared_bytecode_root(), IMPORTED_LIST))
    files: set[str] = set()
    for rel in listed:  # where this env would import it from: the first site-packages that has it
        here = next((p for p in (os.path.join(r, rel) for r in roots) if os.path.isfile(p)), None)
        if here:
            files.add(here)
    if not listed and workers >= WHOLE_SITE_WORKERS:
        folders = roots
    elif workers >= WHOLE_PACKAGE_WORKERS:
        tops = {m.partition(".")[0] for e in entries for m in e["modules"]} - {rel.partition(os.sep)[0] for rel in listed}
        folders = [os.path.join(r, top) for top in tops for r in roots]
    else:
        folders = []
    for top in folders:
        for folder, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d not in NOT_IMPORTED]
            files.update(os.path.join(folder, n) for n in names if n.endswith(".py"))
    todo = [f for f in sorted(files) if not os.path.exists(external.cache_from_source(f))]
    if folders is not roots or os.environ.get(PRECOMPILE_BEHIND_ENV) == "0":
        return todo, []
    preloaded = tuple(os.path.join(r, m.partition(".")[0], "") for r in roots for e in entries for m in e["modules"])
    now = [f for f in todo if f.startswith(preloaded)]
    later = sorted(set(todo) - set(now), key=lambda f: (next(i for i, r in enumerate(roots) if f.startswith(r)), f))
    return now, later


def _compile_files(files: list[str]) -> None:
    """In a forked worker: compile each file's bytecode into the shared folder, as an import would."""
    import importlib._bootstrap_external as external
    import py_compile

    for file in files:
        try:  # timestamp-checked, as the import system writes it (whatever SOURCE_DATE_EPOCH says)
            py_compile.compile(
                file, external.cache_from_source(file), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
            )
        except Exception:
            pass  # the import compiles it again, and says what is wrong with it there


def _precompile(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Before a preload: compile what it will import in forked workers, on the cores the sweep's
    other jobs leave (`HARNESS_PRECOMPILE_WORKERS`), so the imports read bytecode instead of
    compiling one module after another. The workers only compile: nothing is imported or run,
    and the bytecode is what the import would have written (read back only if its source's size
    and mtime match). The rest of a whole site is compiled by orphans of the workers, which
    nothing waits for: on a fresh runner's 16 cores, 23,000 files took the zygote 8 s."""
    workers = int(os.environ.get(PRECOMPILE_ENV) or 0)
    if workers < 2 or not _shared_bytecode_root():
        return {}
    started = time.monotonic()
    now, later = _to_precompile(entries, workers)
    waiting = []
    for k in range(min(workers, len(now) + len(later))):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                _compile_files(now[k::workers])
                if later[k::workers] and os.fork() == 0:  # reparented once its worker exits: never a zombie of ours
                    os.close(write)  # the preload waits for the worker only
                    _compile_files(later[k::workers])
            finally:
                os._exit(0)
        os.close(write)
        waiting.append((pid, read))
    for pid, read in waiting:
        os.read(read, 1)  # end of file once the worker is gone (whatever SIGCHLD is set to)
        os.close(read)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return {"files": len(now), "later": len(later), "workers": len(waiting), "seconds": round(time.monotonic() - started, 3)}


def _write_json(path: str, data: Any) -> None:
    """Write `data` at `path` at once (a reader sees the old file or the new one); the temporary
    name is this process's, so that processes writing one file at once never share it."""
    tmp = f"{path}.{os.getpid()}.tmp"
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
        record["imports_culprit"] = _importers_of(culprits, before)
    _write_json(result, record)
    return code


def run_suite(request: dict[str, Any]) -> int:
    """A team's pytest suite in this process (`testsuite_child.py`, beside this file, loaded by
    path: the harness package itself is never importable here)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testsuite_child.py")
    spec = importlib.util.spec_from_file_location("harness_testsuite_child", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.run(request["root"], request["args"], request["events"], request["skip"], request.get("keep", "")))


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


def _importers_of(culprits: list[str], before: set[str]) -> dict[str, str]:
    """Modules loaded since `before` that import a module known to initialise CUDA, at module
    level: their namespace holds it, or something defined in it (`bnb`, `dispatch_bnb_4bit`),
    directly or through another such module. Module -> the culprit's library.

    The harness does not preload them next time: importing one would import the culprit and
    cost the server a restart to find out (`transformers.integrations.bitsandbytes`,
    `peft.tuners.lora.bnb` beside a bitsandbytes that initialises CUDA). Read after the
    scenario ran, so the scenario's own run is untouched."""
    found = set(culprits)
    refs: dict[str, set[str]] = {}
    for name, module in list(sys.modules.items()):
        if name in before or _under(name, found) or name.partition(".")[0] in sys.stdlib_module_names:
            continue
        targets = set()
        for value in list(getattr(module, "__dict__", {}).values()):
            try:  # a proxy's attribute access may raise (transformers' dummy objects do)
                target = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None) if callable(value) else None
            except Exception:
                continue
            if isinstance(target, str) and not _under(target, [name]):
                targets.add(target)
        refs[name] = targets
    flagged: dict[str, str] = {}
    changed = True
    while changed:  # through modules that import a flagged one, until nothing changes
        changed = False
        for name, targets in refs.items():
            via = next((t for t in sorted(targets) if _under(t, found) or t in flagged), None)
            if name not in flagged and via is not None:
                flagged[name] = flagged.get(via) or via.partition(".")[0]
                changed = True
    return flagged


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
        if _lifeline is not None:
            os.close(_lifeline)  # the server watches it; the scenario has no use for it
        _redirect(request["output"])
        _limit_output()
        os.environ.update(request.get("env", {}))
        sys.stdin = open(os.devnull)  # noqa: SIM115 - lives until os._exit
        code = run_suite(request) if request.get("kind") == "suite" else run_scenario(request["scenario"], request["result"])
    finally:
        os._exit(code)


# -- the lifeline: EOF on it means the harness is gone ------------------------------------------
def _orphaned() -> None:
    """The harness died (kill -9, a crash): kill the scenario running now, with its group, and go.

    A pipe rather than PR_SET_PDEATHSIG: that signal fires when the parent *thread* ends, and
    the harness starts servers from worker and look-ahead threads that end long before it does.
    """
    pid = _running
    if pid is not None:
        for kill in (os.killpg, os.kill):  # the group, and the leader should it not have setsid() yet
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os._exit(0)


@contextlib.contextmanager
def _guarded() -> Iterator[None]:
    """While this process imports (torch for seconds, with the GIL held in C at times), a
    forked watcher stands in for the loop that watches the lifeline: should the harness die
    meanwhile, it kills this process (and its group, if it leads one) at once, instead of once
    the imports end. The watcher leaves as soon as the block ends."""
    if _lifeline is None:
        yield
        return
    me, leader = os.getpid(), os.getpgid(0) == os.getpid()
    done_r, done_w = os.pipe()
    watcher = os.fork()
    if watcher == 0:
        os.close(done_w)
        try:
            ready, _, _ = select.select([_lifeline, done_r], [], [])
            if _lifeline in ready and done_r not in ready:
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


def _wait_readable(fd: int, timeout: float | None = None) -> bool:
    """Wait until `fd` can be read (True) or `timeout` passes (False); never returns if the harness dies."""
    fds = [fd] if _lifeline is None else [fd, _lifeline]
    ready, _, _ = select.select(fds, [], [], timeout)
    if _lifeline is not None and _lifeline in ready:
        _orphaned()
    return fd in ready


def _watch_in_thread() -> None:
    """For a scenario in a fresh process (`run`): no loop to watch from, so a daemon thread does."""
    if _lifeline is None:
        return
    import threading

    def watch(fd: int) -> None:
        select.select([fd], [], [])
        os.killpg(0, signal.SIGKILL)  # this process leads its own group (start_new_session)

    threading.Thread(target=watch, args=(_lifeline,), daemon=True, name="harness-lifeline").start()


def _wait_child(pid: int) -> int:
    """waitpid(pid), watching the lifeline meanwhile."""
    if _lifeline is None:
        return os.waitpid(pid, 0)[1]
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # before Linux 5.3: poll
        pidfd = None
    try:
        while True:
            if pidfd is not None:
                _wait_readable(pidfd)
            else:
                _wait_readable(_lifeline, 0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _requests(fd: int) -> Any:
    """JSON requests, one per line, from `fd` until EOF."""
    buffer = b""
    while True:
        _wait_readable(fd)
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


# -- preloading -------------------------------------------------------------------------------
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


def _importing() -> list[str]:
    """The modules whose top-level code is running now, outermost first: each is importing the next."""
    names = []
    frame: Any = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if frame.f_code.co_name == "<module>" and isinstance(name, str) and name != "__main__" and name in sys.modules:
            names.append(name)
        frame = frame.f_back
    return names[::-1]


def _under(module: str, packages: Any) -> bool:
    """`module` is one of `packages` or lives inside one."""
    parts = module.split(".")
    return any(".".join(parts[:i]) in packages for i in range(1, len(parts) + 1))


def _nvml_capabilities() -> list[tuple[int, int]]:
    """Every GPU's CUDA compute capability, asked of NVML: unlike the CUDA runtime, NVML does
    not make a fork unusable. [] where NVML cannot tell."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return []
    if nvml.nvmlInit_v2() != 0:
        return []
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return []
        found = []
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return []
            if nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                return []
            found.append((major.value, minor.value))
        return found
    finally:
        nvml.nvmlShutdown()


class _CudaWatch:
    """Who makes CUDA unusable in a fork while the server preloads, found in one pass.

    torch reaches the driver through two calls, `torch._C._cuda_init` (initialisation) and
    `torch._C._cuda_getDeviceCount` (poisons fork without initialising): wrapped, they record
    the chain of modules being imported at that moment (`peft` -> ... -> `bitsandbytes.cextension`).
    Every module on a chain initialises CUDA when imported fresh. Once one has, this process is
    of no use to fork from, so the rest of the preload goes on only to find the others: a
    module that imports one already found (`transformers.integrations.bitsandbytes` importing
    `bitsandbytes`) is caught at its import statement. The harness then restarts once, without
    all of them, whatever their number.

    bitsandbytes asks `torch.cuda.get_device_capability` at import, which initialises CUDA. When
    NVML reports one capability for every GPU of the machine, the same answer comes from NVML
    while preloading, so bitsandbytes, and what imports it (peft), can be preloaded; a GPU that
    differs, or no NVML, leaves torch's own call (and so a culprit). Everything is put back before
    the first fork; a function kept by reference calls torch's own from then on.
    """

    def __init__(self) -> None:
        self.chains: list[list[str]] = []
        self.current = ""  # the module the preload is importing now
        self._undo: list[tuple[Any, str, Any]] = []
        self._armed = False
        self._preloading = True
        self._import: Any = None

    @property
    def doomed(self) -> bool:
        return bool(self.chains)

    def culprits(self) -> list[str]:
        """The modules found, fewest names: one inside another found is left out."""
        found = dict.fromkeys(m for chain in self.chains for m in chain)
        return [m for m in found if not _under(m.rpartition(".")[0], found)] if found else []

    def root(self, module: str) -> str:
        """The library whose import reached the driver on the first chain naming `module`
        (`bitsandbytes` for `peft`): `module` is a culprit only while that library is one."""
        chain = next(c for c in self.chains if module in c)
        return chain[-1].partition(".")[0]

    def blame(self, chain: list[str]) -> None:
        self.chains.append(chain or [self.current])
        if self._import is None:
            self._watch_imports()

    def arm(self) -> None:
        """Wrap torch's entry points to the driver, once torch is imported (the first entry)."""
        torch = sys.modules.get("torch")
        if self._armed or torch is None:
            return
        self._armed = True
        c_module = getattr(torch, "_C", None)
        for name in ("_cuda_init", "_cuda_getDeviceCount"):
            real = getattr(c_module, name, None)
            if real is not None:
                self._replace(c_module, name, self._recording(real, torch))
        cuda = getattr(torch, "cuda", None)
        real_capability = getattr(cuda, "get_device_capability", None)
        if real_capability is not None and hasattr(c_module, "_cuda_isInBadFork"):
            caps = set(_nvml_capabilities())
            if len(caps) == 1:
                self._replace(cuda, "get_device_capability", self._capability(real_capability, caps.pop(), torch))

    def _replace(self, owner: Any, name: str, new: Any) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    def _recording(self, real: Any, torch: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            # After initialisation torch counts devices through the driver: no news then.
            if self._preloading and not getattr(torch.cuda, "_initialized", False):
                self.blame(_importing())
            return real(*args, **kwargs)

        return call

    def _capability(self, real: Any, answer: tuple[int, int], torch: Any) -> Any:
        def get_device_capability(device: Any = None) -> tuple[int, int]:
            if self._preloading and not torch.cuda.is_initialized():
                return answer
            return real(device)

        return get_device_capability

    def _watch_imports(self) -> None:
        """From the first culprit on (this process is to be thrown away): every import statement
        that names a module found so far blames the modules running it."""
        import builtins

        real = builtins.__import__

        def watched(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
            target = name
            if level and globals:
                package = globals.get("__package__") or globals.get("__name__", "").rpartition(".")[0]
                base = package.rsplit(".", level - 1)[0] if level > 1 else package
                target = f"{base}.{name}" if name else base
            found = dict.fromkeys(m for chain in self.chains for m in chain)
            importer = globals.get("__name__") if globals else None
            if isinstance(importer, str) and _under(importer, found):
                return real(name, globals, locals, fromlist, level)  # a culprit's own imports: nothing new
            names = [target, *(f"{target}.{item}" for item in (fromlist or ()) if item != "*")]
            if any(_under(n, found) for n in names):
                self.chains.append([*_importing(), target])
            return real(name, globals, locals, fromlist, level)

        self._import = real
        self._replace(builtins, "__import__", watched)

    def disarm(self) -> None:
        self._preloading = False
        for owner, name, real in reversed(self._undo):
            setattr(owner, name, real)
        self._undo.clear()


def _preload(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Import each entry's modules in order. An entry is {"name", "modules"}: one module from
    the matrix's `preload`, or one library's modules learned from the last run.

    An entry after which CUDA is unusable in a fork is not ready; the modules that made it so are
    reported ("cuda_culprits", see `_CudaWatch`), and the harness starts again without them."""
    precompiled = _precompile(entries)
    imported: list[str] = []
    seconds: dict[str, float] = {}
    watch = _CudaWatch()
    # While preloading, torch.cuda.is_available() asks NVML instead of initialising the driver
    # (which would poison fork); scenarios get the user's setting back.
    nvml_check = os.environ.get(NVML_CHECK)
    os.environ.setdefault(NVML_CHECK, "1")
    try:
        for entry in entries:
            started = time.monotonic()
            done = 0
            for module in entry["modules"]:
                if watch.doomed and _under(module, watch.culprits()):
                    continue  # found already: importing it again teaches nothing
                watch.arm()
                watch.current = module
                try:
                    __import__(module)
                    done += 1
                except Exception:  # a cell without the module simply imports nothing
                    continue
            if not done or watch.doomed:
                continue
            if _cuda_initialized():  # by a way the watch does not see (or torch without the calls it wraps)
                watch.blame([entry["name"]])
                continue
            imported.append(entry["name"])
            seconds[entry["name"]] = round(time.monotonic() - started, 3)
    finally:
        watch.disarm()
        if nvml_check is None:
            os.environ.pop(NVML_CHECK, None)
    culprits = watch.culprits()
    return {
        "ready": imported,
        "cuda_initialized_by": culprits[0] if culprits else "",
        "cuda_culprits": culprits,
        "cuda_via": {m: watch.root(m) for m in culprits},
        "cuda_chains": [next(c for c in watch.chains if m in c) for m in culprits],  # why each is one
        "seconds": seconds,
        "precompiled": precompiled,
    }


def _log_preload(who: str, report: dict[str, Any]) -> None:
    """For measurements (docs/benchmarks.md): each preload's seconds per entry, one JSON line
    appended to the file HARNESS_PRELOAD_LOG names (the sweep's timing line sums them)."""
    path = os.environ.get(PRELOAD_LOG_ENV)
    if path:
        line = {"who": who, "prefix": sys.prefix, "seconds": report["seconds"], "cuda_culprits": report["cuda_culprits"]}
        line["precompiled"] = report.get("precompiled", {})
        with open(path, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def _entries(args: list[str]) -> list[dict[str, Any]]:
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


def serve(preload: list[dict[str, Any]], loaded_file: str | None = None) -> int:
    # Answers go to a private copy of stdout; fd 1 itself now points at stderr, so whatever a
    # library prints while importing (C level included) cannot corrupt the protocol.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with _guarded():
        report = _preload(preload)
    _log_preload("server", report)
    remember_imports()
    if loaded_file and not report["cuda_culprits"]:
        # Forked from a zygote: the torch modules this cell's imports pulled in, none of which
        # made fork unusable (the probes above said so). The pool has the zygote import them
        # before it forks the next cell of this torch build, once instead of once per server.
        _write_json(loaded_file, {"modules": [m for m in list(sys.modules) if m.partition(".")[0] in TORCH_TOPS]})
    answer.write(json.dumps(report) + "\n")
    answer.flush()
    while True:
        park = _serve_requests(answer)
        if park is None:
            answer.close()
            return 0
        attached = _park(park, answer)
        if attached is None:
            return 0
        answer, wanted = attached
        _serve_again(answer, wanted)


def _serve_requests(answer: Any) -> dict[str, Any] | None:
    """Fork one scenario per request until EOF (None) or a request to park (returned)."""
    global _running
    for request in _requests(0):
        if "park" in request:
            return request
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            answer.close()
            _child(request)
        _running = pid
        answer.write(json.dumps({"pid": pid}) + "\n")
        answer.flush()
        status = _wait_child(pid)
        _running = None
        try:  # what the scenario left running in its group must not outlive it (nor the sweep)
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        answer.write(json.dumps(dict({"pid": pid}, **_decode_status(status))) + "\n")
        answer.flush()
    return None


# -- kept between sweeps (harness/running/kept.py) --------------------------------------------
def _park(request: dict[str, Any], answer: Any) -> tuple[Any, list[dict[str, Any]]] | None:
    """Say whether it parked (on `answer`, which it closes), let go of the sweep (its pipes, log
    and lifeline), wait on the Unix socket
    `request["park"]` for up to `request["idle"]` seconds for the next sweep of this cell, and
    take its pipes, log, lifeline, variables and folder. Returns the new answer file and the
    preload that sweep wants; None: time to exit (idle too long, asked to quit, or another
    server of this cell parked first)."""
    global _lifeline
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
    _write_json(info, {"pid": os.getpid(), "prefix": sys.prefix, "idle": idle, "parked_at": time.time()})
    answer.write(json.dumps({"parked": True, "pid": os.getpid()}) + "\n")
    answer.close()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    if _lifeline is not None:
        os.close(_lifeline)
        _lifeline = None
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
    global _lifeline
    stdin, stdout, log, lifeline = fds
    os.dup2(stdin, 0)
    os.dup2(log, 2)
    os.dup2(log, 1)
    for fd in (stdin, log):
        os.close(fd)
    _lifeline = lifeline
    for name, value in dict(data.get("env", {})).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.chdir(data["cwd"])
    return os.fdopen(stdout, "w")


def _serve_again(answer: Any, wanted: list[dict[str, Any]]) -> None:
    """The ready line of a kept server: what of `wanted` it had loaded already, and what it
    imported now (checked for CUDA as a start is; the sweep restarts without any culprit)."""
    have = [e for e in wanted if e["modules"] and all(m in sys.modules for m in e["modules"])]
    with _guarded():
        report = _preload([e for e in wanted if e not in have])
    _log_preload("server", report)
    names = {e["name"] for e in have} | set(report["ready"])
    report["ready"] = [e["name"] for e in wanted if e["name"] in names]
    report["kept"] = True
    report["pid"] = os.getpid()
    answer.write(json.dumps(report) + "\n")
    answer.flush()


# -- the zygote -------------------------------------------------------------------------------
def _sha(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return ""


def record_digest(path: str) -> str:
    """A distribution's identity: the hash of its RECORD (which hashes every file it installed),
    less the lines of files outside site-packages (console scripts name their env's python:
    one wheel installed in two envs differs there, and nothing imports them). "" if unreadable."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return ""
    kept = sorted(line for line in lines if not line.startswith(b"../"))
    return hashlib.sha256(b"\n".join(kept)).hexdigest()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(os.path.join(root, ""))


def _env_sites(prefix: str, path: list[str]) -> list[str]:
    """The entries of sys.path inside the env `prefix`: its site-packages."""
    return [p for p in path if p and _inside(os.path.abspath(p), prefix) and os.path.isdir(p)]


def _pth_files(sites: list[str]) -> dict[str, str]:
    """.pth files (run at startup: they can import and add paths) -> content hash, by name."""
    found = {}
    for site in sites:
        for name in sorted(os.listdir(site)):
            if name.endswith(".pth"):
                found[name] = _sha(os.path.join(site, name))
    return found


def _leaked(forbid: list[str]) -> list[str]:
    """Modules of a library under test that are loaded here: none may be, before a cell's fork."""
    if not forbid:
        return []
    import importlib.metadata

    canon = {d.lower().replace("_", "-").replace(".", "-") for d in forbid}
    loaded = {name.partition(".")[0] for name in sys.modules}
    leaked = []
    for top, dists in importlib.metadata.packages_distributions().items():
        owners = [d for d in dists if d.lower().replace("_", "-").replace(".", "-") in canon]
        if top in loaded and owners:
            leaked.append(f"{top} ({owners[0]})")
    return sorted(leaked)


def _identity() -> dict[str, Any]:
    """What a cell must have, byte for byte, to be forked from this process: the distribution
    (by its RECORD, which hashes every file) behind each module loaded from this env, any such
    module that no distribution owns, and the env's .pth files. Modules loaded from outside
    the env (the standard library, an inherited base, PYTHONPATH) keep their paths; the child
    checks that the cell resolves them to the same place."""
    prefix = sys.prefix
    sites = _env_sites(prefix, sys.path)
    owner: dict[str, str] = {}  # file -> its distribution's dist-info folder
    for site in sites:
        for entry in os.listdir(site):
            if not entry.endswith(".dist-info"):
                continue
            info = os.path.join(site, entry)
            try:
                with open(os.path.join(info, "RECORD")) as fh:
                    lines = fh.read().splitlines()
            except OSError:
                continue
            for line in lines:
                owner[os.path.normpath(os.path.join(site, line.rsplit(",", 2)[0]))] = info
    dists: dict[str, str] = {}
    files: dict[str, str] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not _inside(os.path.abspath(path), prefix):
            continue
        info = owner.get(os.path.normpath(os.path.abspath(path)), "")
        if info:
            rel = os.path.relpath(info, prefix)
            if rel not in dists:
                dists[rel] = record_digest(os.path.join(info, "RECORD"))
        else:
            files[os.path.relpath(path, prefix)] = _sha(path)
    return {"prefix": prefix, "dists": dists, "files": files, "pth": _pth_files(sites)}


def zygote(config_path: str) -> int:
    """Preload torch, report, then fork one `serve` per cell request on the control socket."""
    import socket

    with open(config_path) as fh:
        config = json.load(fh)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with _guarded():
        report = _preload(config["preload"])
        _log_preload("zygote", report)
        remember_imports()
        report["leaked"] = _leaked(config.get("forbid", []))
        report["pid"] = os.getpid()
        usable = not report["cuda_initialized_by"] and not report["leaked"]
        identity = _identity() if usable else {}
    report["dists"] = sorted(os.path.basename(d) for d in identity.get("dists", {}))
    out.write(json.dumps(report) + "\n")
    out.flush()
    if not usable:
        return 0  # the harness starts another without the culprit, or does without a zygote
    sock = socket.socket(fileno=int(os.environ.pop(ZYGOTE_SOCKET_ENV)))
    # Servers forked from here are not waited for: the kernel reaps them (they reset it).
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        _wait_readable(sock.fileno())
        message, fds, _, _ = socket.recv_fds(sock, 65536, 3)
        if not message:
            return 0  # the harness closed its end: no more cells
        request = json.loads(message)
        seconds = 0.0
        if request.get("extra"):
            before = len(sys.modules)
            problem, seconds, culprits = _import_extra(request["extra"], config.get("forbid", []))
            if problem:  # this process is of no use to fork from any more: the pool starts another
                for fd in fds:
                    os.close(fd)
                sock.send(json.dumps({"unusable": problem, "culprits": culprits}).encode())
                return 0
            if len(sys.modules) != before:
                identity = _identity()  # the new modules' distributions must be byte-identical too
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            out.close()
            _become_server(request["request"], fds, identity)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid, "extra_seconds": seconds}).encode())


def _import_extra(path: str, forbid: list[str]) -> tuple[str, float, list[str]]:
    """Import the torch modules listed in the file at `path` that are not loaded yet (a server
    of this torch build loaded them, a cell learned them, or a scenario imported them), checked
    as the preload is: under NVML's CUDA check, with the driver calls watched and a forked probe
    after. Returns why this process can no longer fork cells ("" if it can), the seconds it
    took, and the modules the watch blamed for it (the pool leaves them out next time)."""
    started = time.monotonic()
    with open(path) as fh:
        wanted = [m for m in json.load(fh) if m not in sys.modules and m.partition(".")[0] in TORCH_TOPS]
    if not wanted:
        return "", 0.0, []
    tops = {name.partition(".")[0] for name in sys.modules}
    shared = "torch (shared by the servers)"
    # The probe and the lifeline's watcher are waited for: children are not reaped by the
    # kernel meanwhile (servers that end now are reaped below).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        with _guarded():
            report = _preload([{"name": shared, "modules": wanted}])
            _log_preload("zygote", report)
            named = [c for c in report["cuda_culprits"] if c != shared]  # by the watch; else unnamed
            problem = f"torch modules it imported for the servers made fork unusable ({', '.join(named) or 'by the probe'})"
            problem = problem if report["cuda_culprits"] else ""
            # a library under test can only have come with a new top-level package (listing
            # every installed distribution's packages takes a second or two)
            new_tops = {name.partition(".")[0] for name in sys.modules} - tops
            leaked = "" if problem or not new_tops else ", ".join(_leaked(forbid))
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
    if leaked:
        problem = f"a torch module loaded a library under test ({leaked})"
    return problem, time.monotonic() - started, named if problem and not leaked else []


def _become_server(request_path: str, fds: list[int], identity: dict[str, Any]) -> None:
    """In a process forked from the zygote: take the cell's pipes, become the cell's interpreter, serve."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()  # as `start_new_session` gives a plain server: the harness kills it by group
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        with open(request_path) as fh:
            request = json.load(fh)
        problem = _adopt(request, identity)
        if problem:
            os.write(1, (json.dumps({"refused": problem}) + "\n").encode())
            code = REFUSED
        else:
            code = serve(request["preload"], request.get("loaded_file"))
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _adopt(request: dict[str, Any], identity: dict[str, Any]) -> str:
    """Become a fresh interpreter of the cell's env, or say why this process cannot ("" if it can).

    `request["state"]` is what `describe` printed in the cell's env: sys.path, prefixes and
    executables of a fresh interpreter there.
    """
    state = request["state"]
    old, new = identity["prefix"], state["prefix"]
    for rel, sha in identity["dists"].items():
        if record_digest(os.path.join(new, rel, "RECORD")) != sha:
            return f"{os.path.basename(rel)} is not byte-identical in the cell's env (or missing there)"
    for rel, sha in identity["files"].items():
        if _sha(os.path.join(new, rel)) != sha:
            return f"{rel} is not byte-identical in the cell's env (or missing there)"
    if _pth_files(_env_sites(new, state["path"])) != identity["pth"]:
        return "the cell's env has other .pth files (they run at startup)"

    def rebase(path: str) -> str:
        return new + path[len(old) :] if old != new and _inside(path, old) else path

    problem = _resolves_alike(state["path"], rebase)
    if problem:
        return problem
    import importlib
    import linecache
    import site

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[:] = state["path"]
    for name in ("prefix", "exec_prefix", "base_prefix", "base_exec_prefix", "executable", "_base_executable"):
        if name in state:
            setattr(sys, name, state[name])
    sys.orig_argv = [sys.executable, *request["argv"]]
    sys.argv = list(request["argv"])
    for module in list(sys.modules.values()):
        _rebase_module(module, rebase)
    site.PREFIXES[:] = [sys.prefix, sys.exec_prefix]
    sysconfig = sys.modules.get("sysconfig")
    if sysconfig is not None:  # it caches paths computed from sys.prefix on first use
        sysconfig._CONFIG_VARS = None  # type: ignore[attr-defined]
        if hasattr(sysconfig, "_CONFIG_VARS_INITIALIZED"):  # Python 3.12+
            setattr(sysconfig, "_CONFIG_VARS_INITIALIZED", False)  # noqa: B010
    if "random" in sys.modules:  # a fresh interpreter seeds from the OS, not from its zygote
        sys.modules["random"].seed()
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    linecache.clearcache()
    return ""


def _resolves_alike(path: list[str], rebase: Any) -> str:
    """Every top-level module loaded here must be what the cell's sys.path would find first:
    a cell that shadows one (its own copy in its env, an inherited base's) cannot be forked."""
    from importlib.machinery import PathFinder

    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if "." in name or spec is None or not (spec.has_location or spec.origin is None):
            continue  # builtins, frozen modules, submodules (found through their parent's __path__)
        if spec.origin is None and not spec.submodule_search_locations:
            continue
        found = PathFinder.find_spec(name, path)
        if spec.origin is not None:
            if found is None or found.origin != rebase(spec.origin):
                return f"{name} resolves to {found.origin if found else 'nothing'} in the cell, not {rebase(spec.origin)}"
        elif found is None or [rebase(p) for p in spec.submodule_search_locations] != list(found.submodule_search_locations or []):
            return f"namespace package {name} spans other folders in the cell"
    sys.path_importer_cache.clear()
    return ""


def _rebase_module(module: object, rebase: Any) -> None:
    """Point a module's file attributes (and its spec's and loader's) at the cell's env."""
    try:
        attrs = vars(module)
    except TypeError:
        return
    for key in ("__file__", "__cached__"):
        if isinstance(attrs.get(key), str):
            attrs[key] = rebase(attrs[key])
    search = attrs.get("__path__")
    if isinstance(search, list):
        search[:] = [rebase(p) if isinstance(p, str) else p for p in search]
    elif search is not None and isinstance(getattr(search, "_path", None), list):  # a namespace package
        search._path[:] = [rebase(p) for p in search._path]
    spec = attrs.get("__spec__")
    if spec is not None:
        try:
            if isinstance(spec.origin, str):
                spec.origin = rebase(spec.origin)
            if isinstance(getattr(spec, "_cached", None), str):
                spec.cached = rebase(spec._cached)
            locations = spec.submodule_search_locations
            if isinstance(locations, list) and locations is not search:
                locations[:] = [rebase(p) for p in locations]
        except AttributeError:
            pass
    for loader in {id(x): x for x in (attrs.get("__loader__"), getattr(spec, "loader", None)) if x is not None}.values():
        if isinstance(getattr(loader, "path", None), str):
            try:
                loader.path = rebase(loader.path)
            except (AttributeError, TypeError):
                pass


def describe() -> int:
    """What a fresh interpreter of this env looks like (the harness sends it to a zygote's fork)."""
    names = ("path", "prefix", "exec_prefix", "base_prefix", "base_exec_prefix", "executable", "_base_executable")
    print(json.dumps({name: getattr(sys, name) for name in names if hasattr(sys, name)}))
    return 0


def main(argv: list[str]) -> int:
    global _lifeline
    # Python put this file's folder (the harness package) first on sys.path; a scenario must
    # see only the cell's libraries, never the harness's modules.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    lifeline = os.environ.pop(LIFELINE_ENV, "")
    _lifeline = int(lifeline) if lifeline else None
    if os.environ.get(BYTECODE_ENV):
        share_bytecode(os.environ[BYTECODE_ENV])
    if len(argv) >= 3 and argv[0] == "run":
        _watch_in_thread()
        _limit_output()
        return run_scenario(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "suite":
        _watch_in_thread()
        _limit_output()
        with open(argv[1]) as fh:
            return run_suite(json.load(fh))
    if argv and argv[0] == "serve":
        return serve(_entries(argv[1:]))
    if len(argv) == 2 and argv[0] == "zygote":
        return zygote(argv[1])
    if argv and argv[0] == "describe":
        return describe()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
