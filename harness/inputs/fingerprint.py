"""What a run's outcomes depend on besides its cells: the scenario and test files, and the code under test.

A sweep resumes its run when nothing of this changed (`running.sweep.default_run_id`), and a run
records it (`inputs`) so that `harness changes` can tell a flip where nothing changed (flaky)
from a failure of changed code. Contents, never file times: a fresh checkout of the same commit
is the same suite; an edit is not.

The code under test is the repository the suite's folder (or a matrix's path candidate) lives
in: its commit, and the content of its uncommitted changes to source files. Outside a git work
tree it is the content of the source files under the folder.

>>> import tempfile; folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "pkg.py").write_text("x = 1\\n")
>>> before = code_digest(folder); _ = (folder / "pkg.py").write_text("x = 2\\n")
>>> before.startswith("tree:"), before != code_digest(folder)
(True, True)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

#: Files that are code or its configuration; results files, logs and data are not.
SOURCE_SUFFIXES = (".py", ".pyi", ".pyx", ".pxd", ".c", ".cc", ".cpp", ".h", ".cu", ".toml", ".cfg", ".ini")
#: Folders never walked for source: virtualenvs (the cells' own among them), caches, VCS data.
_SKIPPED = frozenset({"__pycache__", "node_modules", "site-packages", ".git", ".hg", ".tox", ".nox", ".venv", "venv"})


def file_digest(path: Path) -> str:
    """A file's content, hashed (12 hex digits); "" where it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return ""


def files_digest(paths: Iterable[Path]) -> str:
    """Several files' names and contents, hashed together."""
    h = hashlib.sha256()
    for path in paths:
        h.update(f"{path}\0{file_digest(path)}\0".encode())
    return h.hexdigest()[:12]


def code_digest(folder: Path) -> str:
    """The code under test at `folder`: `git:<commit>` plus a hash of the uncommitted changes to
    its source files (`+<digest>`), or `tree:<digest>` of the source files under it outside git."""
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top:
        head = _git(folder, "rev-parse", "HEAD") or "no-commit"
        dirty = _uncommitted(Path(top))
        return f"git:{head}" + (f"+{dirty}" if dirty else "")
    return "tree:" + files_digest(source_files(folder))


def _uncommitted(top: Path) -> str:
    """A hash of the uncommitted changes to source files: modified ones (their diff) and new ones (their content)."""
    specs = [f":(glob)**/*{suffix}" for suffix in SOURCE_SUFFIXES]
    diff = _git(top, "diff", "HEAD", "--binary", "--", *specs, strip=False)
    untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z", "--", *specs, strip=False)
    names = sorted(n for n in untracked.split("\0") if n)
    if not diff and not names:
        return ""
    h = hashlib.sha256(diff.encode())
    for name in names:
        h.update(f"{name}\0{file_digest(top / name)}\0".encode())
    return h.hexdigest()[:12]


def source_files(folder: Path, suffixes: tuple[str, ...] = SOURCE_SUFFIXES) -> list[Path]:
    """The files under `folder` with these suffixes, in a stable order, outside virtualenvs, caches and hidden folders."""
    found = []
    for here, dirs, files in os.walk(folder):
        base = Path(here)
        # a folder that is a virtualenv (the cells' envs among them) is installed code, not the code under test
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED and not d.startswith(".") and not (base / d / "pyvenv.cfg").exists())
        found += [base / f for f in sorted(files) if f.endswith(suffixes)]
    return found


def _git(folder: Path, *args: str, strip: bool = True) -> str:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if done.returncode != 0:
        return ""
    return done.stdout.strip() if strip else done.stdout
