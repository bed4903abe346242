"""Modules that initialise CUDA at import, remembered across cells and sweeps.

A fork server must not preload such a module: a forked scenario cannot use a CUDA context its
parent created. The server finds one by trying (and restarts without it); this memory, keyed
by (module, installed version of its distribution) and kept beside the envs, lets the next
cell, shard or resumed sweep skip it without paying that restart again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

FILE = "cuda-culprits.json"


def dist_version(module: str, freeze: Mapping[str, str]) -> str:
    """The installed version of the distribution a module comes from ("" if not in the freeze)."""
    top = module.split(".", 1)[0]
    return freeze.get(top) or freeze.get(top.replace("_", "-")) or ""


def load(path: Path) -> set[tuple[str, str]]:
    """(module, version) pairs an earlier sweep found to initialise CUDA at import; unreadable = none."""
    try:
        data = json.loads(path.read_text())
        return {(str(m), str(v)) for m, v in data}
    except (OSError, ValueError, TypeError):
        return set()


def save(path: Path, culprits: set[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sorted(culprits | load(path))))  # keep what a parallel sweep added
    tmp.replace(path)  # atomic: a parallel sweep on the same env root never reads half a file


class CudaCulprits:
    """The memory of one env root, shared by a sweep's threads."""

    def __init__(self, env_root: Path) -> None:
        self.path = env_root / FILE
        self.known = load(self.path)
        self._lock = threading.Lock()

    def avoid(self, freeze: Mapping[str, str]) -> set[str]:
        """What a cell with this freeze must not preload: a `preload` module, or a library's learned
        modules (`peft.*`), known to initialise CUDA at this version."""
        with self._lock:
            return {m for m, version in self.known if dist_version(m, freeze) == version}

    def learn(self, modules: Iterable[str], freeze: Mapping[str, str]) -> None:
        """Remember at once: the next cell is being prepared already."""
        with self._lock:
            found = {(m, dist_version(m, freeze)) for m in modules} - self.known
            if found:
                self.known |= found
                save(self.path, self.known)

    def describe(self) -> str:
        with self._lock:
            return ", ".join(sorted(f"{m} {v}" for m, v in self.known)) or "none"
