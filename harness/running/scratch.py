"""A run's scratch folder: every temporary folder the harness makes lives in one, which goes when
the run ends; those of runs that died (kill -9, a lost machine) go at the next start.

The folder is `harness-run-<pid>-XXXX` in the system's temp directory. `claim()` makes it
Python's temp directory for this process (`tempfile.tempdir`), so the runners', the zygotes' and
the wheelhouse's folders land inside without each knowing, removes it at exit, and first removes
the folders of runs whose process is gone.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "harness-run-"
_OWNED = re.compile(rf"^{PREFIX}(\d+)-")


def claim() -> Path:
    """This process's scratch folder (made once), after sweeping away those of dead runs."""
    current = tempfile.gettempdir()
    if Path(current).name.startswith(PREFIX) and Path(current).is_dir():
        return Path(current)  # claimed already
    sweep_dead(Path(current))
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=current))
    tempfile.tempdir = str(folder)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def system_temp() -> Path:
    """The system's temp directory, outside this run's scratch folder (for what must outlive the run)."""
    current = Path(tempfile.gettempdir())
    return current.parent if current.name.startswith(PREFIX) else current


def sweep_dead(parent: Path) -> list[Path]:
    """Remove the scratch folders in `parent` whose run's process is gone; returns them."""
    removed = []
    for entry in parent.glob(f"{PREFIX}*"):
        found = _OWNED.match(entry.name)
        if found and entry.is_dir() and not _alive(int(found.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    """A process with this pid exists (a zombie counts: its parent may still reap and clean)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: not ours to judge
    return True
