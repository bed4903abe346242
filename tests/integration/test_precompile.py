"""Compiling ahead of a preload (`incell/bytecode.py`'s `precompile`, issue #38 item 2): real interpreters, real files.

A first sweep's bytecode folder is empty, so each server compiled its imports one module after
another. Before it imports, a preload now compiles on the job's idle cores, in forked workers:
the files that servers and scenarios imported before (the folder's list), found in this env,
and, with enough workers and nothing listed yet, the preloaded packages whole. Each "env" here
is a folder named site-packages holding a package; `python -v` says whether a module's code was
read from the folder or compiled at import.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.running.bytecode import BYTECODE_ENV, PRECOMPILE_ENV, PRECOMPILE_SWITCH_ENV, bytecode_env, precompile_workers
from harness.running.processes import CHILD

PACKAGE = {
    "__init__.py": "from pkgx import used  # noqa\n",
    "used.py": "VALUE = 1\n\ndef where():\n    return where.__code__.co_filename\n",
    "later.py": "VALUE = 2\n",  # imported by a scenario, not by the preload
    "never.py": "VALUE = 3\n",  # imported by nobody
}
# Runs in the "env" (-S: no site-packages but its own): the in-cell package loaded by its path as its entry file
# does, sharing on as its main turns it on; precompile for a preload of pkgx (printing what it did), import argv[2:],
# remember what was imported, print pkgx's file.
PROBE = """
import json, os, runpy, sys
runpy.run_path({child!r})["load"]()
from harness_incell import bytecode, main  # every protocol loaded, as when main turns sharing on
bytecode.share_bytecode(os.environ[{var!r}])
sys.path.insert(0, sys.argv[1])
print(json.dumps(bytecode.precompile([{{"name": "pkgx", "modules": ["pkgx"]}}])))
for name in sys.argv[2:]:
    __import__(name)
bytecode.remember_imports()
import pkgx.used
print(pkgx.used.where())
"""


def _env(tmp_path: Path, name: str) -> Path:
    site = tmp_path / name / "site-packages"
    (site / "pkgx").mkdir(parents=True)
    for file, text in PACKAGE.items():
        (site / "pkgx" / file).write_text(text)
    # a package no preload names, which importing pkgx might pull in (as transformers pulls in scipy)
    (site / "other" / "tests").mkdir(parents=True)
    (site / "other" / "__init__.py").write_text("VALUE = 4\n")
    (site / "other" / "tests" / "test_other.py").write_text("VALUE = 5\n")
    return site


def _compiled(cache: Path) -> set[str]:
    return {p.name.split("-", 4)[-1].split(".")[0] for p in cache.rglob("*.pyc")} - {"py_compile"}


def _run(site: Path, cache: Path, workers: int, *imports: str) -> tuple[dict[str, int], str, set[str]]:
    """(what precompile did, where pkgx.used's code says it is, the pkgx modules read from bytecode)."""
    env = {**os.environ, BYTECODE_ENV: str(cache), PRECOMPILE_ENV: str(workers), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-S", "-v", "-c", PROBE.format(child=str(CHILD), var=BYTECODE_ENV), str(site), *imports]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    done, where = proc.stdout.splitlines()[-2:]
    read = {
        m[1]
        for line in proc.stderr.splitlines()
        if line.startswith(f"# code object from '{cache}")
        for m in [re.search(r"-(\w+)\.cpython", line)]
        if m
    }
    return json.loads(done), where, read & {"__init__", "used", "later", "never"}


def test_the_next_env_reads_what_was_imported_before_compiled_ahead(tmp_path: Path) -> None:
    cache = tmp_path / "bytecode"
    first, second = _env(tmp_path, "env1"), _env(tmp_path, "env2")  # copies: their own inodes
    done, _, read = _run(first, cache, 2, "pkgx", "pkgx.later")
    assert done["files"] == 0 and not read  # nothing listed, too few workers to compile pkgx whole
    listed = json.loads((cache / "imported-files.json").read_text())
    assert {"pkgx/__init__.py", "pkgx/used.py", "pkgx/later.py"} <= set(listed) and "pkgx/never.py" not in listed

    done, where, read = _run(second, cache, 2, "pkgx", "pkgx.later")
    assert (done["files"], done["workers"]) == (3, 2)  # the listed files, in this env
    assert read == {"__init__", "used", "later"}  # every import read bytecode compiled ahead
    assert where == str(second / "pkgx" / "used.py")  # and its code names this env's file

    done, _, read = _run(second, cache, 2, "pkgx")
    assert done["files"] == 0  # compiled already: nothing to do again


def test_with_enough_workers_a_package_nobody_imported_yet_is_compiled_whole(tmp_path: Path) -> None:
    cache = tmp_path / "bytecode"
    done, _, read = _run(_env(tmp_path, "env1"), cache, 4, "pkgx", "pkgx.never")
    assert done["files"] == 4 and _compiled(cache) == {"__init__", "used", "later", "never"}  # pkgx, not other
    assert read == {"__init__", "used", "never"}  # imported: each read back, none compiled at import


def test_on_a_fresh_runner_with_many_workers_the_whole_site_is_compiled_but_tests(tmp_path: Path) -> None:
    cache = tmp_path / "bytecode"
    done, _, _ = _run(_env(tmp_path, "env1"), cache, 8, "pkgx")
    # the preload waits for its own package (pkgx) only; the rest of the site is compiled by
    # workers' orphans that nobody waits for
    assert (done["files"], done["later"]) == (4, 1)
    assert {"__init__", "used", "later", "never"} <= _compiled(cache)
    deadline = time.monotonic() + 30
    while len(list(cache.rglob("*-__init__.*.pyc"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list(cache.rglob("*-__init__.*.pyc"))) == 2  # other/__init__.py's too, compiled behind
    assert not any("test_other" in p.name for p in cache.rglob("*.pyc"))
    # listed now: the next env compiles what was imported, not the whole site
    done, _, _ = _run(_env(tmp_path, "env2"), cache, 8, "pkgx")
    assert done["files"] == 2  # pkgx/__init__.py and pkgx/used.py of env2


def test_bytecode_compiled_ahead_is_the_bytes_an_import_writes(tmp_path: Path) -> None:
    ahead, imported = tmp_path / "ahead", tmp_path / "imported"
    site = _env(tmp_path, "env1")
    _run(site, ahead, 4)  # compiled whole, before anything is imported
    _run(site, imported, 1, "pkgx", "pkgx.later", "pkgx.never")  # no workers: compiled at import
    names = {f"{Path(file).stem}.{sys.implementation.cache_tag}.pyc" for file in PACKAGE}  # not the stdlib's py_compile
    pyc = {p.name: p.read_bytes() for p in ahead.rglob("*.pyc") if p.name.split("-", 4)[-1] in names}
    written = {p.name: p.read_bytes() for p in imported.rglob("*.pyc") if p.name.split("-", 4)[-1] in names}
    assert len(pyc) == len(PACKAGE) and pyc == written


def test_a_source_that_does_not_compile_is_left_to_the_import(tmp_path: Path) -> None:
    site = _env(tmp_path, "env1")
    (site / "pkgx" / "never.py").write_text("def broken(:\n")
    done, _, read = _run(site, tmp_path / "bytecode", 4, "pkgx")
    assert done["files"] == 4 and read == {"__init__", "used"}


@pytest.mark.parametrize(
    ("cpus", "jobs", "switch", "workers"),
    [(16, 1, None, 16), (16, 2, None, 8), (2, 2, None, 1), (2, 1, None, 2), (1, 4, None, 1), (16, 1, "0", 1)],
)
def test_a_job_compiles_on_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch, cpus: int, jobs: int, switch: str | None, workers: int
) -> None:
    if switch is None:
        monkeypatch.delenv(PRECOMPILE_SWITCH_ENV, raising=False)
    else:
        monkeypatch.setenv(PRECOMPILE_SWITCH_ENV, switch)
    assert precompile_workers(cpus, jobs) == workers


def test_the_cells_get_the_workers_only_where_more_than_one(tmp_path: Path) -> None:
    assert bytecode_env(tmp_path, workers=8)[PRECOMPILE_ENV] == "8"
    assert PRECOMPILE_ENV not in bytecode_env(tmp_path, workers=1)


IMPORT_CLOCK = """
import json, runpy, sys
runpy.run_path({child!r})["load"]()
from harness_incell import scenario
result = sys.argv[2]  # the scenario gets its own sys.argv
code = scenario.run_scenario(sys.argv[1], result)
print(json.dumps(json.load(open(result))))
"""
SCENARIO = """
import time
import email.mime.text, xml.dom.minidom  # imports: counted apart from the code after them
try:
    import no_such_module_here
except ImportError:
    pass
time.sleep(0.3)
import not_there_either
"""


def _python312() -> str:
    for name in ("python3.13", "python3.12", "/opt/torch/.venv/bin/python3"):
        found = shutil.which(name)
        if found:
            out = subprocess.run([found, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True, text=True)
            if out.stdout.strip() == "True":
                return found
    pytest.skip("no Python 3.12 or newer here: the scenarios' import clock needs sys.monitoring")


def test_a_scenarios_imports_are_counted_apart_and_its_traceback_is_untouched(tmp_path: Path) -> None:
    python = _python312()
    scenario = tmp_path / "scenario.py"
    scenario.write_text(SCENARIO)
    out = subprocess.run(
        [python, "-c", IMPORT_CLOCK.format(child=str(CHILD)), str(scenario), str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    record = json.loads(out.stdout.splitlines()[-1])
    assert record["exception_type"].endswith("ModuleNotFoundError")
    assert 0 < record["import_seconds"] < 0.3 < record["run_seconds"]
    plain = subprocess.run([python, str(scenario)], capture_output=True, text=True, timeout=60)
    # the scenario file's frames (not the in-cell package's incell/scenario.py that ran it)
    frames = [line for line in record["traceback"].splitlines() if line.startswith(f'  File "{scenario}"')]
    assert frames and frames == [line for line in plain.stderr.splitlines() if line.startswith(f'  File "{scenario}"')]
    assert " in enter\n" not in record["traceback"] and " in leave\n" not in record["traceback"]  # the clock adds no frame
