"""The zygote: torch imported once per torch build, one fork server forked from it per cell.

`zygote` imports torch (never a library under test), then for each cell the harness sends it
(the cell's pipes ride along as file descriptors on a Unix socket) it forks, and the child
becomes that cell's server (`_become_server`): it checks that every file it has loaded is
byte-identical in the cell's env (`_identity`, `_adopt`), then rebases sys.path, sys.prefix and
every loaded module's paths onto the cell's env (`_rebase_module`), so that the cell cannot tell
it from a fresh interpreter of its own; `describe` prints what one looks like. What can and
cannot be rebased: docs/zygote.md. The harness's side: harness/running/zygote.py (the pool).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from . import lifeline
from .bytecode import remember_imports
from .preload import TORCH_TOPS, log_preload, preload
from .server import serve

ZYGOTE_SOCKET_ENV = "HARNESS_ZYGOTE_FD"
#: Exit code of a process forked from a zygote that refused a cell (its files differ).
REFUSED = 3


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
    with lifeline.guarded():
        report = preload(config["preload"])
        log_preload("zygote", report)
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
        lifeline.wait_readable(sock.fileno())
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
        with lifeline.guarded():
            report = preload([{"name": shared, "modules": wanted}])
            log_preload("zygote", report)
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
        if name == __package__:
            continue  # this package, loaded by its path: no cell's sys.path holds it (nor may)
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
