"""Bytecode shared by every env that installs one wheel, and compiled ahead on idle cores.

Every process a sweep starts in a cell reads and writes its modules' bytecode in one folder
(`share_bytecode`, on where the harness passes HARNESS_BYTECODE_DIR), named by the source
file's identity on disk rather than its path: uv hardlinks one wheel into every env, so the
second cell with a release reads what the first compiled. Before a preload imports, forked
workers compile what it will import into that folder (`precompile`), from the list of files
servers and scenarios imported before (`remember_imports`). The harness's side:
harness/running/bytecode.py (the folder, its size, the workers per job).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

from .files import write_json

#: Where every process of a sweep keeps the bytecode of what it imports (`share_bytecode`); unset: off.
BYTECODE_ENV = "HARNESS_BYTECODE_DIR"
#: How many forked workers compile, into that folder, what a preload is about to import
#: (`precompile`); unset or 1: each module is compiled as it is imported, one after another.
PRECOMPILE_ENV = "HARNESS_PRECOMPILE_WORKERS"
#: In the bytecode folder: the installed files (relative to their site-packages) that servers and
#: scenarios imported, the list `precompile` works from; at most PRECOMPILE_LIMIT of them.
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
    next preload's `precompile` (in another env too: the same release's files, or the next
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
            write_json(path, sorted(known | found)[:PRECOMPILE_LIMIT])


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


def precompile(entries: list[dict[str, Any]]) -> dict[str, Any]:
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
