"""Bytecode shared between envs (`incell/bytecode.py`'s `share_bytecode`, `running.bytecode`): real interpreters, real files.

Two "envs" hold one module through a hardlink, as uv installs one wheel into many envs. A
process in the first compiles it into the shared folder; a process in the second, with
PYTHONDONTWRITEBYTECODE set as in many images, loads that bytecode instead of compiling, and
its code still names its own file. A module whose source differs never gets another's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.running.bytecode import BYTECODE_ENV, SWITCH_ENV, bytecode_env
from harness.running.processes import CHILD

# Runs in the "env": loads the in-cell package by its path as its entry file does, turns sharing
# on exactly as its main does, imports the module, and prints where its code says it came from.
PROBE = """
import os, runpy, sys
runpy.run_path({child!r})["load"]()
from harness_incell import bytecode, main  # every protocol loaded, as when main turns sharing on
bytecode.share_bytecode(os.environ[{var!r}])
sys.path.insert(0, sys.argv[1])
import shared_mod
print(shared_mod.where(), shared_mod.VALUE)
"""

MODULE = "VALUE = {value!r}\n\ndef where():\n    return where.__code__.co_filename\n"


def _envs(tmp_path: Path, value: str = "one") -> tuple[Path, Path]:
    first, second = tmp_path / "env1", tmp_path / "env2"
    first.mkdir()
    second.mkdir()
    (first / "shared_mod.py").write_text(MODULE.format(value=value))
    os.link(first / "shared_mod.py", second / "shared_mod.py")  # uv's hardlink from its cache
    return first, second


def _run(folder: Path, cache: Path, verbose: bool = False) -> subprocess.CompletedProcess[str]:
    script = PROBE.format(child=str(CHILD), var=BYTECODE_ENV)
    env = {**os.environ, BYTECODE_ENV: str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, *(["-v"] if verbose else []), "-c", script, str(folder)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)


def _loaded_from_bytecode(proc: subprocess.CompletedProcess[str], cache: Path) -> bool:
    # python -v says "# code object from '<pyc>'" when it read bytecode instead of compiling
    return any(line.startswith(f"# code object from '{cache}") and "shared_mod" in line for line in proc.stderr.splitlines())


def test_a_second_env_reads_the_bytecode_the_first_compiled(tmp_path: Path) -> None:
    first, second = _envs(tmp_path)
    cache = tmp_path / "bytecode"
    one = _run(first, cache, verbose=True)
    assert not _loaded_from_bytecode(one, cache)  # nothing there yet: compiled
    assert list(cache.rglob("*shared_mod*.pyc")), "the first process wrote no bytecode to the shared folder"
    two = _run(second, cache, verbose=True)
    assert _loaded_from_bytecode(two, cache), two.stderr[-2000:]
    # its code names the second env's file (tracebacks show the cell's own path), not the first's
    assert two.stdout.split() == [str(second / "shared_mod.py"), "one"]
    assert not (second / "__pycache__").exists() and not (first / "__pycache__").exists()


def test_a_different_source_never_reads_another_files_bytecode(tmp_path: Path) -> None:
    first, _ = _envs(tmp_path)
    cache = tmp_path / "bytecode"
    _run(first, cache)
    other = tmp_path / "env3"
    other.mkdir()
    (other / "shared_mod.py").write_text(MODULE.format(value="two"))  # same name, its own file
    three = _run(other, cache, verbose=True)
    assert not _loaded_from_bytecode(three, cache)
    assert three.stdout.split() == [str(other / "shared_mod.py"), "two"]
    # the file edited in place (same inode, new size and time): compiled again, the new value read
    (first / "shared_mod.py").write_text(MODULE.format(value="edited"))
    again = _run(first, cache)
    assert again.stdout.split()[1] == "edited"


def test_switched_off_and_emptied_when_too_big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "bytecode"
    (cache / "00").mkdir(parents=True)
    (cache / "00" / "entry.pyc").write_bytes(b"x" * 2048)
    assert bytecode_env(cache, limit=4096) == {BYTECODE_ENV: str(cache)}
    assert (cache / "00" / "entry.pyc").exists()
    assert bytecode_env(cache, limit=1024) == {BYTECODE_ENV: str(cache)}
    assert not cache.exists()  # outgrown: emptied, refilled by the next compilations
    monkeypatch.setenv(SWITCH_ENV, "0")
    assert bytecode_env(cache) == {}
