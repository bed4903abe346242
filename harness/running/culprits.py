"""Modules that initialise CUDA at import, remembered across cells and sweeps.

A fork server must not preload such a module: a forked scenario cannot use a CUDA context its
parent created. The server finds them by trying (and restarts without them); this memory, kept
beside the envs, lets the next cell, shard or resumed sweep skip them without paying that
restart again. A culprit is keyed by its own distribution's version and by the library whose
import reached the driver (`via`): peft 0.21.0 initialises CUDA only through bitsandbytes
0.49.2, so a cell with peft 0.21.0 and another bitsandbytes tries it again.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

FILE = "cuda-culprits.json"

#: (module, its distribution's version, the library it reached the driver through, that one's version)
Culprit = tuple[str, str, str, str]


def dist_version(module: str, freeze: Mapping[str, str]) -> str:
    """The installed version of the distribution a module comes from ("" if not in the freeze)."""
    top = module.split(".", 1)[0]
    return freeze.get(top) or freeze.get(top.replace("_", "-")) or ""


def load(path: Path) -> set[Culprit]:
    """What earlier sweeps found; unreadable = none. An entry of an older file, (module, version),
    reached the driver itself."""
    try:
        data = json.loads(path.read_text())
        found: set[Culprit] = set()
        for entry in data:
            module, version, *via = map(str, entry)
            found.add((module, version, *via) if len(via) == 2 else (module, version, module.split(".", 1)[0], version))  # type: ignore[arg-type]
        return found
    except (OSError, ValueError, TypeError):
        return set()


def save(path: Path, culprits: set[Culprit]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(sorted(culprits | load(path))))  # keep what a parallel sweep added
    tmp.replace(path)  # atomic: a parallel sweep on the same env root never reads half a file


def avoided(known: Iterable[Culprit], freeze: Mapping[str, str]) -> set[str]:
    """The modules a cell with this freeze must not preload.

    >>> known = [("peft", "0.21.0", "bitsandbytes", "0.49.2"), ("bitsandbytes", "0.49.2", "bitsandbytes", "0.49.2")]
    >>> sorted(avoided(known, {"peft": "0.21.0", "bitsandbytes": "0.49.2"}))
    ['bitsandbytes', 'peft']
    >>> sorted(avoided(known, {"peft": "0.21.0", "bitsandbytes": "0.50.2"}))
    []
    """
    return {m for m, version, via, via_version in known if dist_version(m, freeze) == version and dist_version(via, freeze) == via_version}


class CudaCulprits:
    """The memory of one env root, shared by a sweep's threads."""

    def __init__(self, env_root: Path) -> None:
        self.path = env_root / FILE
        self.known = load(self.path)
        self._lock = threading.Lock()

    def avoid(self, freeze: Mapping[str, str]) -> set[str]:
        """What a cell with this freeze must not preload: a `preload` module, or a library's learned
        modules (`peft.*`), known to initialise CUDA at these versions."""
        with self._lock:
            return avoided(self.known, freeze)

    def learn(self, modules: Iterable[str], freeze: Mapping[str, str], via: Mapping[str, str] | None = None) -> None:
        """Remember at once: the next cell is being prepared already. `via`: module -> the library
        whose import reached the driver (the module's own, if not given)."""
        with self._lock:
            found: set[Culprit] = set()
            for m in modules:
                root = (via or {}).get(m) or m.split(".", 1)[0]
                found.add((m, dist_version(m, freeze), root, dist_version(root, freeze)))
            found -= self.known
            if found:
                self.known |= found
                save(self.path, self.known)

    def describe(self) -> str:
        with self._lock:
            names = {f"{m} {v}" + (f" (through {via} {vv})" if via != m.split(".", 1)[0] else "") for m, v, via, vv in self.known}
            return ", ".join(sorted(names)) or "none"
