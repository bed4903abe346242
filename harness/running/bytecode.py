"""Bytecode shared by the envs of every sweep on this machine.

uv writes no bytecode when it installs, and images often set PYTHONDONTWRITEBYTECODE, so every
fork server and zygote compiled transformers, peft and torch's modules from source, in every
env, every sweep: on 2 cores a cell's fork server spent about half its start compiling. uv
hardlinks one unpacked wheel into every env that installs it, so the same file has the same
inode in every env: each process of a cell keeps its modules' bytecode in one folder, named by
the source file's identity on disk (`child.share_bytecode`), and the next cell with that
release reads it back.

The folder is a cache: deleting it costs one compilation; it is emptied when it outgrows
`LIMIT_BYTES` (entries of wheels that uv's cache no longer holds are never read again).
`HARNESS_BYTECODE=0` turns the sharing off (each process compiles as Python would).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: The variable a cell's processes read the folder from (child.BYTECODE_ENV; child.py imports nothing of ours).
BYTECODE_ENV = "HARNESS_BYTECODE_DIR"
SWITCH_ENV = "HARNESS_BYTECODE"
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


def bytecode_env(folder: Path | None = None, limit: int = LIMIT_BYTES) -> dict[str, str]:
    """The variable that turns sharing on for a cell's processes ({} when `HARNESS_BYTECODE=0`);
    the folder is emptied first if it has grown past `limit`."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return {}
    folder = folder or bytecode_dir()
    if folder.is_dir() and folder_bytes(folder) > limit:
        shutil.rmtree(folder, ignore_errors=True)
    return {BYTECODE_ENV: str(folder)}
