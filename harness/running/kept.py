"""Fork servers kept between sweeps: a re-sweep of the same cells reuses their imports.

A fork server's start is its cell's imports (transformers alone is 2-3 s a cell on the GPU
runner), paid again by every sweep of the cell, although nothing it imported has changed. With
`harness sweep --keep-servers SECONDS`, a cell's server does not exit when its cell is done: it
parks on a Unix socket named by everything that would make a fresh server of that cell differ
(`server_key`: the interpreter, the env's installed distributions, the environment variables,
every file of this harness's `incell/`) and waits up to SECONDS for the next sweep of that
cell. That sweep connects, hands the server its pipes, its log and its lifeline (`attach`), and
the server imports whatever of the new preload it lacks (checked for CUDA as a start is) before
it serves again, in the new cell folder (`incell/park.py`). A parked server holds no pipe, no file and no lifeline of the
sweep that parked it, and takes one sweep at a time: it unlinks its socket before it answers.

    harness sweep --keep-servers 900 ...   # park each cell's server for 15 idle minutes
    harness servers                        # what is parked
    harness servers --stop                 # end them now

The socket folder is private to the user (`kept_dir`); at most MAX_KEPT servers park at once.
Design and limits: docs/zygote.md, "Servers kept between sweeps".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import BadInput
from harness.running import scratch
from harness.running.incell.lifeline import LIFELINE_ENV
from harness.running.incell.preload import PRELOAD_LOG_ENV
from harness.running.processes import INCELL
from harness.running.zygote import PER_CELL_VARIABLES, torch_record

#: Where the sockets live (default: $XDG_RUNTIME_DIR/compat-harness, else /tmp/compat-harness-UID).
KEPT_DIR_ENV = "HARNESS_KEPT_DIR"
#: `--keep-servers auto` on a machine with GPUs: each cell's server parks for 15 idle minutes.
KEEP_WITH_GPUS = 900.0
KEEP_ENV = "HARNESS_KEEP_SERVERS"  # --keep-servers' default where it is not given (scripts that compare sweeps set 0)
#: Servers parked at once, at most: each holds its cell's imports in memory (0.5-1.5 GiB).
MAX_KEPT = 32
ATTACH_TIMEOUT = 10.0
#: Set per sweep or per cell, read by nothing at import: sent to the server when a sweep attaches,
#: never part of its key. The shell's own bookkeeping (PWD, SHLVL, ...) would otherwise make a
#: sweep started from another folder miss every server.
VOLATILE = (*PER_CELL_VARIABLES, LIFELINE_ENV, PRELOAD_LOG_ENV, "PWD", "OLDPWD", "_", "SHLVL")


#: A Unix socket's path holds at most 107 bytes; a socket's name here is 16 hex digits and ".sock".
MAX_DIR_BYTES = 107 - len("/0123456789abcdef.sock")


class UnsafeDir(OSError):
    """The socket folder is not private to this user, or too deep for a socket: no server is kept there."""


def kept_dir() -> Path:
    """The private folder of the parked servers' sockets, made if missing.

    Short on purpose (a socket's path holds at most 107 bytes). Refused if another user owns it
    or others can write it: whoever can connect to a parked server can run code in it.
    """
    chosen = os.environ.get(KEPT_DIR_ENV)
    if not chosen:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        # not tempfile's folder: inside a sweep that is the run's scratch folder, gone at its end
        base = runtime if runtime and os.path.isdir(runtime) else str(scratch.system_temp())
        chosen = os.path.join(base, "compat-harness" if runtime else f"compat-harness-{os.getuid()}")
    path = Path(chosen).absolute()
    if len(os.fsencode(path)) > MAX_DIR_BYTES:
        raise UnsafeDir(f"{path} is too long for a socket's path (at most {MAX_DIR_BYTES} bytes); set {KEPT_DIR_ENV} to a shorter folder")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UnsafeDir(f"{path} is not a folder private to this user (mode {oct(info.st_mode & 0o777)}); remove it or set {KEPT_DIR_ENV}")
    return path


def usable_dir() -> Path:
    """`kept_dir`, or BadInput that says why servers cannot be kept there: a sweep that asks to
    keep them, and `harness servers`, refuse a folder others could use before anything runs."""
    try:
        return kept_dir()
    except UnsafeDir as exc:
        raise BadInput(f"cannot keep fork servers: {exc}") from None


def keep_by_default(gpus: int) -> float:
    """`--keep-servers auto`: on a machine with GPUs (where a server's imports cost more than its
    cell's scenarios, and re-sweeps are how scenarios get written) unless the socket folder is
    unusable, which is said on stderr; off without GPUs (CI, laptops: nothing left behind)."""
    if not gpus:
        return 0.0
    try:
        usable_dir()
    except BadInput as exc:
        print(f"harness: {exc}; servers are not kept", file=sys.stderr)
        return 0.0
    return KEEP_WITH_GPUS


def _env_identity(python: str) -> list[Any]:
    """What of a cell's env a parked server has loaded and a rebuild would change: each
    site-packages folder's entries (uv adds and removes dist-info folders; a reinstall of one
    version replaces its folder, new inode) and the inherited torch's RECORD."""
    prefix = Path(python).parent.parent
    found: list[Any] = []
    for site in sorted(prefix.glob("lib/python*/site-packages")):
        entries = []
        for entry in sorted(os.scandir(site), key=lambda e: e.name):
            if entry.name.endswith((".dist-info", ".pth")):
                st = entry.stat(follow_symlinks=False)
                entries.append([entry.name, st.st_ino, st.st_mtime_ns])
        found.append([str(site), entries])
    cfg = prefix / "pyvenv.cfg"
    found.append(cfg.read_text() if cfg.exists() else "")
    found.append(torch_record(python))
    return found


def server_key(python: str, env: dict[str, str]) -> str:
    """Cells with equal keys can be served by one server: the same interpreter and installed
    files, the same environment at import, the same in-cell code (every file of `incell/`)."""
    variables = sorted((k, v) for k, v in env.items() if k not in VOLATILE)
    payload = json.dumps([python, os.path.realpath(python), _env_identity(python), variables, _incell_sha()])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _incell_sha() -> str:
    """Every file a server runs, by name and bytes: a change to any of them retires what is parked."""
    digest = hashlib.sha256()
    for path in sorted(INCELL.rglob("*.py")):
        digest.update(f"{path.relative_to(INCELL).as_posix()}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def per_cell(env: dict[str, str]) -> dict[str, str | None]:
    """The volatile variables a server takes from the sweep that attaches (None: unset there)."""
    return {k: env.get(k) for k in VOLATILE if k != LIFELINE_ENV}


def socket_path(key: str) -> Path:
    return kept_dir() / f"{key}.sock"


def room() -> bool:
    """Whether one more server may park."""
    try:
        return sum(1 for _ in kept_dir().glob("*.sock")) < MAX_KEPT
    except OSError:
        return False


def attach(path: Path, fds: list[int], message: dict[str, Any]) -> int | None:
    """Hand `fds` (the cell's stdin and stdout pipe ends, its log, the lifeline) and `message` to
    the server parked at `path`; its pid, or None where none took them (a stale socket goes)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ATTACH_TIMEOUT)
    try:
        sock.connect(str(path))
        socket.send_fds(sock, [json.dumps(message).encode()], fds)
        reply = json.loads(sock.recv(4096) or b"{}")
    except ConnectionRefusedError:  # its server is gone (killed while parked)
        with contextlib.suppress(OSError):
            path.unlink()
            path.with_suffix(".json").unlink()
        return None
    except (OSError, ValueError):
        return None
    finally:
        sock.close()
    pid = reply.get("pid") if isinstance(reply, dict) else None
    return pid if isinstance(pid, int) else None


@dataclass
class Parked:
    """A parked server, as it described itself when it parked."""

    path: Path
    pid: int
    prefix: str
    idle: float
    parked_at: float


def parked() -> list[Parked]:
    """The servers parked now (a socket whose server is gone is cleared away)."""
    found = []
    for info in sorted(kept_dir().glob("*.json")):
        sock = info.with_suffix(".sock")
        try:
            data = json.loads(info.read_text())
            os.kill(int(data["pid"]), 0)
            if not sock.exists():
                raise ProcessLookupError
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                info.unlink()
            continue
        idle, at = float(data.get("idle", 0)), float(data.get("parked_at", 0))
        found.append(Parked(sock, int(data["pid"]), str(data.get("prefix", "")), idle, at))
    return found


def stop(path: Path) -> bool:
    """Ask the server parked at `path` to exit; whether one was there to ask."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ATTACH_TIMEOUT)
    try:
        sock.connect(str(path))
        sock.sendall(json.dumps({"quit": True}).encode())
        sock.recv(16)  # it closes the connection once it has let go of its socket
        return True
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    finally:
        sock.close()
