"""Bytecode shared by the envs of every sweep on this machine.

uv writes no bytecode when it installs, and images often set PYTHONDONTWRITEBYTECODE, so every
fork server and zygote compiled transformers, peft and torch's modules from source, in every
env, every sweep: on 2 cores a cell's fork server spent about half its start compiling. uv
hardlinks one unpacked wheel into every env that installs it, so the same file has the same
inode in every env: each process of a cell keeps its modules' bytecode in one folder, named by
the source file's identity on disk (`share_bytecode` in `incell/bytecode.py`, the cell's side),
and the next cell with that release reads it back.

The folder is a cache: deleting it costs one compilation; it is emptied when it outgrows
`LIMIT_BYTES` (entries of wheels that uv's cache no longer holds are never read again).
`HARNESS_BYTECODE=0` turns the sharing off (each process compiles as Python would).

On a first sweep the folder is cold, and a server compiled its imports one module after another
(transformers' 1,200 modules: about 60 % of its import, here). The cores the sweep's jobs leave
idle now compile them first, in parallel (the cell's `precompile`): the files servers and
scenarios imported before, listed in the folder, found in the new env; where none is listed yet
(a fresh runner) and the cell's `WHOLE_SITE_WORKERS` cores are free, every site-packages whole;
with `WHOLE_PACKAGE_WORKERS`, the preloaded packages nobody imported yet.
`HARNESS_PRECOMPILE=0` turns that off.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: The variable a cell's processes read the folder from (incell/bytecode.py's BYTECODE_ENV; incell/ imports nothing of ours).
BYTECODE_ENV = "HARNESS_BYTECODE_DIR"
SWITCH_ENV = "HARNESS_BYTECODE"
#: incell/bytecode.py's PRECOMPILE_ENV: how many workers compile ahead of a preload; HARNESS_PRECOMPILE=0: none.
PRECOMPILE_ENV = "HARNESS_PRECOMPILE_WORKERS"
PRECOMPILE_SWITCH_ENV = "HARNESS_PRECOMPILE"
LIMIT_BYTES = 4 * 2**30


def bytecode_dir() -> Path:
    """Beside the harness's other caches (the index's release lists): `~/.cache/compat-harness/bytecode`."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "compat-harness" / "bytecode"


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass  # another sweep replaced it meanwhile
    return total


def precompile_workers(cpus: int, jobs: int) -> int:
    """A job's share of the machine's cores: what its server's preload may compile on, ahead of
    importing (1: compile at import; `HARNESS_PRECOMPILE=0` says so too)."""
    if os.environ.get(PRECOMPILE_SWITCH_ENV, "1") == "0":
        return 1
    return max(1, cpus // max(1, jobs))


def bytecode_env(folder: Path | None = None, limit: int = LIMIT_BYTES, workers: int = 1) -> dict[str, str]:
    """The variables that turn sharing on for a cell's processes ({} when `HARNESS_BYTECODE=0`),
    and with `workers` above 1 compiling ahead of each preload; the folder is emptied first if
    it has grown past `limit`."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return {}
    folder = folder or bytecode_dir()
    if folder.is_dir() and folder_bytes(folder) > limit:
        shutil.rmtree(folder, ignore_errors=True)
    return {BYTECODE_ENV: str(folder), **({PRECOMPILE_ENV: str(workers)} if workers > 1 else {})}
