"""What a run's outcomes depend on besides its cells: the scenario and test files, and the code under test.

A sweep resumes its run when nothing of this changed (`running.plan.default_run_id`), and a run
records it (`inputs`) so that `harness changes` can tell a flip where nothing changed (flaky)
from a failure of changed code. Contents, never file times: a fresh checkout of the same commit
is the same suite; an edit is not.

The code under test is the content of the source files of the repository the suite's folder
(or a matrix's path candidate) lives in, as its work tree holds them (committed or not): not
its commit. An active repository commits every day, and a commit that touches only its docs,
its CI files or data outside its code changes nothing a test can import, so a test that flips
across it is flaky, not fixed or broken (`harness changes`). *Source* is every file git tracks
(or would: untracked and not ignored) whose suffix is code or its configuration
(`SOURCE_SUFFIXES`: Python and its stubs, Cython, C, C++ and CUDA, and the `.toml`, `.cfg` and
`.ini` that carry a package's dependencies and pytest's configuration), outside folders of
documentation (`docs/`, `doc/`) and hidden folders (`.github/`, `.gitlab/`, ...). A README, a
workflow file, a notebook or a data file is not source. Outside a git work tree it is the same
files under the folder. The commit is recorded beside it (`code_commit`): what `harness explain`
bisects between two nights.

>>> import tempfile; folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "pkg.py").write_text("x = 1\\n")
>>> before = code_digest(folder); _ = (folder / "README.md").write_text("docs\\n")
>>> before == code_digest(folder)
True
>>> _ = (folder / "pkg.py").write_text("x = 2\\n")
>>> before.startswith("src:"), before != code_digest(folder)
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
#: Folders of documentation: a file there is never code a test imports (a Sphinx conf.py included).
_DOCS = frozenset({"docs", "doc"})


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
    """The code under test at `folder`: `src:<digest>` of the content of its repository's source
    files as the work tree holds them (the module docstring says which files), or of the source
    files under `folder` outside git."""
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top:
        listed = _git(Path(top), "ls-files", "-z", "--cached", "--others", "--exclude-standard", strip=False)
        names = sorted({n for n in listed.split("\0") if n and is_source(n)})
        h = hashlib.sha256()
        for name in names:
            h.update(f"{name}\0{file_digest(Path(top) / name)}\0".encode())
        return "src:" + h.hexdigest()[:12]
    return "src:" + files_digest(p for p in source_files(folder) if is_source(p.relative_to(folder).as_posix()))


def is_source(relative: str) -> bool:
    """A repository's file (its path from the top, `/`-separated) is source: code or its configuration.

    >>> [is_source(p) for p in ("pkg/mod.py", "pyproject.toml", "docs/conf.py", ".github/ci.toml", "README.md")]
    [True, True, False, False, False]
    """
    parts = relative.split("/")
    if any(p in _DOCS or p.startswith(".") or p in _SKIPPED for p in parts[:-1]):
        return False
    return relative.endswith(SOURCE_SUFFIXES)


def code_commit(folder: Path) -> dict[str, str]:
    """The repository `folder` lives in and its commit (`{"repo": top, "commit": sha}`), with
    `dirty` set where the work tree's source differs from it; {} outside git."""
    top = _git(folder, "rev-parse", "--show-toplevel")
    head = _git(folder, "rev-parse", "HEAD") if top else ""
    if not top or not head:
        return {}
    changed = _git(Path(top), "status", "--porcelain", "--untracked-files=normal", strip=False)
    dirty = any(is_source(line[3:].strip().strip('"')) for line in changed.splitlines() if len(line) > 3)
    return {"repo": top, "commit": head, **({"dirty": "yes"} if dirty else {})}


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
