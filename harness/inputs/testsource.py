"""A package's own tests, from a git checkout of the package at each cell's release tag.

"Which transformers releases does peft 0.21.2 support, by peft's own tests?" needs peft's tests
as they were at 0.21.2, while the cell installs peft 0.21.2 from the index. The PyPI sdist does
not serve: peft's ships tests/ without `__init__.py` and conftest.py. So the tests come from a
git repository of the package (a local clone or mirror, or a URL cloned once into the env root):
for each cell, the tag of the version installed there (`v0.21.2`, `0.21.2` or `peft-0.21.2`) is
exported with `git archive` into a folder kept beside the envs, holding only the test folders
and the root's pytest configuration. The package's source is left out on purpose: a checkout's
`bitsandbytes/` folder on sys.path would shadow the installed build (with its native library)
that the cell is there to test.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput

#: The root files pytest reads its configuration from, exported beside the tests.
CONFIG_FILES = ("conftest.py", "pyproject.toml", "pytest.ini", ".pytest.ini", "setup.cfg", "tox.ini")
#: Folders tried when no test path is given.
DEFAULT_TEST_DIRS = ("tests", "test")


class NoTests(Exception):
    """A cell's version has no tag in the repository, or the tag lacks the test paths: its tests cannot be had."""


@dataclass(frozen=True)
class TestSource:
    """Where a package's tests come from: `repo` (a git repository) at the tag of each cell's version."""

    __test__ = False  # not a pytest test class, whatever its name says

    package: str
    repo: str

    def tag_for(self, version: str, git_dir: Path) -> tuple[str, str]:
        """The tag naming `version` and the commit it points at; NoTests if none does."""
        for tag in (f"v{version}", version, f"{self.package}-{version}", f"{self.package}-v{version}"):
            found = _git(git_dir, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}", check=False)
            if found:
                return tag, found
        raise NoTests(f"{self.repo} has no tag for {self.package} {version} (tried v{version}, {version}, {self.package}-{version})")

    def checkout(self, version: str, paths: tuple[str, ...], cache: Path) -> Path:
        """The folder holding the tests and configuration at `version`'s tag, exported once and kept."""
        git_dir = self.git_dir(cache)
        tag, commit = self.tag_for(version, git_dir)
        target = cache / "tests" / f"{self.package}-{version}-{commit[:12]}"
        if target.is_dir():
            return target
        entries = _entries(git_dir, commit, paths)
        archive = subprocess.run(
            ["git", "-C", str(git_dir), "archive", "--format=tar", commit, "--", *entries], capture_output=True, check=True
        )
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}-{threading.get_ident()}")  # cells export at once
        partial.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(partial, filter="data")
        (partial / ".harness-tag").write_text(f"{tag} {commit}\n")
        try:
            partial.rename(target)  # whole or not at all: a killed export is never taken for a checkout
        except OSError:  # another cell's export of the same tag came first
            shutil.rmtree(partial, ignore_errors=True)
        return target

    def git_dir(self, cache: Path) -> Path:
        """The repository to read: the path given, or a bare clone of the URL kept under `cache`."""
        local = Path(self.repo).expanduser()
        if local.exists():
            return local
        clone = cache / "repos" / (hashlib.sha256(self.repo.encode()).hexdigest()[:12] + ".git")
        if not clone.is_dir():
            partial = clone.with_name(clone.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            subprocess.run(["git", "clone", "--quiet", "--bare", self.repo, str(partial)], capture_output=True, check=True)
            partial.rename(clone)
        return clone

    def head(self, cache: Path) -> str:
        """The repository's newest commit (a new one changes the suite's digest)."""
        return _git(self.git_dir(cache), "rev-parse", "HEAD", check=False)

    def read_config(self, name: str, cache: Path) -> str | None:
        """A root configuration file as the repository's newest commit has it (for what every cell
        installs: the cells' tags are not known before their envs resolve)."""
        found = _git(self.git_dir(cache), "show", f"HEAD:{name}", check=False)
        return found or None


def check_source(package: str, repo: str, cache: Path) -> TestSource:
    """A TestSource whose repository can be read; BadInput naming the fix otherwise."""
    if not package:
        raise BadInput("--tests-git needs the package whose tests it holds; add --tests-of PACKAGE (e.g. --tests-of peft)")
    if not repo:
        raise BadInput(f"--tests-of {package} needs the package's git repository; add --tests-git PATH_OR_URL (a clone or mirror)")
    source = TestSource(package, repo)
    try:
        git_dir = source.git_dir(cache)
        _git(git_dir, "rev-parse", "--git-dir")
    except (subprocess.CalledProcessError, OSError) as err:
        said = (getattr(err, "stderr", b"") or b"").decode(errors="replace").strip().splitlines()
        why = said[-1] if said else err
        raise BadInput(f"--tests-git {repo!r} is not a readable git repository ({why}); pass a clone's path or a git URL") from None
    return source


def _entries(git_dir: Path, commit: str, paths: tuple[str, ...]) -> list[str]:
    """What to export: each selected path's top folder (its conftest.py files and helpers come
    with it), or the usual test folders, and the root's pytest configuration."""
    top = set(_git(git_dir, "ls-tree", "--name-only", commit).splitlines())
    wanted = {p.split("::", 1)[0].strip("/").split("/", 1)[0] for p in paths} or {d for d in DEFAULT_TEST_DIRS if d in top}
    missing = sorted(wanted - top)
    if missing:
        raise NoTests(f"{commit[:12]} has no {missing[0]!r} at its root; pass test paths relative to the repository's root")
    return sorted(wanted | {f for f in CONFIG_FILES if f in top})


def _git(git_dir: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True, text=True, check=check)
    return done.stdout.strip() if done.returncode == 0 else ""
