"""A scenario forked from a torch zygote sees exactly its cell: proof on real cells.

Each kind of cell (releases, a git source, `inherit` through a base interpreter that is itself
a virtualenv, as on the GPU runner) is built with uv as a sweep builds it. The same dump
scenario runs forked from a zygote that another cell's interpreter started, and in a fresh
process of the cell; `differences` compares the two. The leak tests run the same comparison
with a copy of the in-cell package (`incell/`) that leaks on purpose, and require it to say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.inputs.candidates import expand_find_links, index_for, resolve_matrix
from harness.inputs.matrix import parse_matrix
from harness.running.envs import EnvResult, build_env, uv_binary
from harness.running.processes import CHILD, INCELL
from harness.running.runner import KIT_DIR, CellRunner
from harness.running.zygote import ZygotePool
from tests.conftest import git_package

pytestmark = pytest.mark.skipif(not os.environ.get("PIP_FIND_LINKS"), reason="needs PIP_FIND_LINKS naming a folder with a CPU torch wheel")

TORCH = "2.13.0"
LIBRARIES = ["packaging", "tinypkg"]  # the libraries under test in these cells, besides torch
# Imports torch (from the zygote, when forked) and the cell's own library, then writes down
# everything a scenario could use to tell where it runs.
DUMP = """
import importlib.metadata, json, os, sys
import torch
for name in ("packaging.version", "tinypkg"):
    try:
        __import__(name)
    except ImportError:
        pass

def where(module):
    attrs = vars(module) if hasattr(module, "__dict__") else {}
    spec = attrs.get("__spec__")
    return {
        "file": attrs.get("__file__"),
        "cached": attrs.get("__cached__"),
        "path": [p for p in attrs.get("__path__") or [] if isinstance(p, str)],
        "origin": getattr(spec, "origin", None),
        "loader_path": getattr(getattr(spec, "loader", None), "path", None),
    }

dists = sorted((d.metadata["Name"], d.version, str(getattr(d, "_path", ""))) for d in importlib.metadata.distributions())
state = {
    "sys": {k: getattr(sys, k) for k in ("path", "prefix", "exec_prefix", "base_prefix", "executable", "_base_executable")},
    "cwd": os.getcwd(),
    "environ": {k: v for k, v in os.environ.items() if k not in ("HARNESS_METRICS", "DUMP")},
    "dists": dists,
    "versions": {n: getattr(sys.modules.get(n), "__version__", None) for n in ("torch", "packaging", "tinypkg")},
    "modules": {name: where(m) for name, m in list(sys.modules.items())},
}
with open(os.environ["DUMP"], "w") as fh:
    json.dump(state, fh)
"""


def differences(zygote: dict[str, Any], fresh: dict[str, Any], allowed: list[str], skip: tuple[str, ...] = ()) -> list[str]:
    """What a zygote-forked scenario saw that a fresh interpreter of its cell would not.

    `skip`: modules that differ between fork and process isolation with or without a zygote.
    """
    problems = []
    for state in (zygote, fresh):  # each runner has its own folder (cwd, and the pip shim on PATH)
        state["environ"] = {k: v.replace(state["cwd"], "<cwd>") for k, v in state["environ"].items()}
    for key in ("sys", "dists", "versions", "environ"):
        if zygote[key] != fresh[key]:
            ours, theirs = zygote[key], fresh[key]
            diff = (
                {k: (ours.get(k), theirs.get(k)) for k in {*ours, *theirs} if ours.get(k) != theirs.get(k)}
                if isinstance(theirs, dict)
                else ""
            )
            problems.append(f"{key} differs: {diff or 'lists differ'}")
    for name, seen in zygote["modules"].items():
        places = (seen["file"], seen["cached"], seen["origin"], seen["loader_path"], *seen["path"])
        paths = [p for p in places if isinstance(p, str) and p.startswith("/")]
        outside = [p for p in paths if not any(p == root or p.startswith(root.rstrip("/") + "/") for root in allowed)]
        if outside:
            problems.append(f"{name} is loaded from outside the cell: {outside[0]}")
        if name in fresh["modules"] and name not in skip and seen != fresh["modules"][name]:
            problems.append(f"{name}: {seen} in the zygote's fork, {fresh['modules'][name]} fresh")
    return problems


def _run_dump(env: EnvResult, tmp: Path, isolation: str, pool: ZygotePool | None) -> tuple[dict[str, Any], CellRunner]:
    scenario = tmp / "dump.py"
    scenario.write_text(DUMP)
    out = tmp / f"{env.location.name}-{isolation}-{'zygote' if pool else 'plain'}.json"
    with CellRunner(env.python, isolation=isolation, preload=["torch"], zygotes=pool) as runner:
        raw = runner.run(scenario, timeout=120, env={"DUMP": str(out)})
        assert raw.record == {"status": "pass"}, raw.output_tail
    return json.loads(out.read_text()), runner


def _allowed(env: EnvResult, fresh: dict[str, Any], tmp: Path) -> list[str]:
    """Where a module of this cell may come from: its env, the base interpreter's prefix (the
    standard library, and an inherited base's site-packages), the scenario and kit folders, the in-cell package."""
    return [str(env.location), fresh["sys"]["base_prefix"], *_inherited_sites(env), str(tmp), str(KIT_DIR), str(INCELL)]


def _inherited_sites(env: EnvResult) -> list[str]:
    pth = list(env.location.glob("lib/python*/site-packages/_harness_inherit.pth"))
    return [line for line in pth[0].read_text().splitlines() if line] if pth else []


def build_cells(matrix: str, env_root: Path) -> list[EnvResult]:
    spec = parse_matrix(matrix)
    resolved = resolve_matrix(spec, index_for(spec.settings))
    envs = [build_env(cell, spec.settings, env_root, expand_find_links(spec.settings.find_links)) for cell in resolved.cells]
    assert all(e.ready for e in envs), [e.message for e in envs]
    return envs


@pytest.fixture(scope="module")
def release_cells(tmp_path_factory: pytest.TempPathFactory) -> list[EnvResult]:
    matrix = f'[matrix]\npython = "3.11"\nfind_links = ["$PIP_FIND_LINKS"]\n[axes]\ntorch = ["{TORCH}"]\npackaging = ["23.2", "24.0"]\n'
    return build_cells(matrix, tmp_path_factory.mktemp("zygote-envs"))


@pytest.fixture(scope="module")
def git_cells(tmp_path_factory: pytest.TempPathFactory) -> list[EnvResult]:
    repo = tmp_path_factory.mktemp("tinypkg")
    shas = git_package(repo, [("VALUE = 1\n", "one"), ("VALUE = 2\n", "two")])
    url = f"git+{repo.as_uri()}"
    matrix = (
        f'[matrix]\npython = "3.11"\nfind_links = ["$PIP_FIND_LINKS"]\n[axes]\ntorch = ["{TORCH}"]\n'
        f'tinypkg = ["{url}@{shas[0]}", "{url}@{shas[1]}"]\n'
    )
    return build_cells(matrix, tmp_path_factory.mktemp("zygote-git-envs"))


@pytest.fixture(scope="module")
def inherit_cells(tmp_path_factory: pytest.TempPathFactory) -> list[EnvResult]:
    """A base interpreter that is itself a virtualenv with torch (the GPU runner's shape)."""
    base = tmp_path_factory.mktemp("base") / "venv"
    uv = uv_binary()
    subprocess.run([uv, "venv", "--quiet", "--python", "3.11", str(base)], check=True)
    find_links = ["--find-links", os.environ["PIP_FIND_LINKS"]]
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(base / "bin/python"), f"torch=={TORCH}", *find_links], check=True)
    matrix = f'[matrix]\npython = "{base}/bin/python"\n[axes]\ntorch = "inherit"\npackaging = ["23.2", "24.0"]\n'
    return build_cells(matrix, tmp_path_factory.mktemp("zygote-inherit-envs"))


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ZygotePool]:
    pool = ZygotePool(forbid=LIBRARIES, workdir=tmp_path)
    yield pool
    pool.close()


#: `__mp_main__` is whatever was `__main__` when multiprocessing was first imported: the fork
#: server (incell/__main__.py) in fork mode, the scenario in a fresh process; so it is without a zygote too.
FORK_VS_PROCESS = ("__mp_main__",)


def check_cells(envs: list[EnvResult], tmp: Path, pool: ZygotePool, skip: tuple[str, ...] = ()) -> list[str]:
    """Differences between a zygote-forked run and a plain fork server's (a fresh interpreter
    of the cell that preloads the same), and a fresh process's, over the cells. The zygote is
    started by the first cell, so every later one is forked from a zygote of another env."""
    problems = []
    for env in envs:
        forked, runner = _run_dump(env, tmp, "fork", pool)
        assert runner.server.zygote is not None, f"not forked from a zygote: {runner.server.refusals} {pool.describe_fallbacks()}"
        plain, _ = _run_dump(env, tmp, "fork", None)
        fresh, _ = _run_dump(env, tmp, "process", None)
        allowed = _allowed(env, fresh, tmp)
        problems += [f"{env.location.name}: {p} (vs a plain fork server)" for p in differences(forked, plain, allowed, skip)]
        problems += [
            f"{env.location.name}: {p} (vs a fresh process)" for p in differences(forked, fresh, allowed, (*skip, *FORK_VS_PROCESS))
        ]
    assert pool.stats.starts == 1, "every cell shares the first cell's zygote"
    return problems


@pytest.mark.parametrize("kind", ["release_cells", "git_cells", "inherit_cells"])
def test_a_zygote_forked_scenario_sees_exactly_its_cell(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, pool: ZygotePool
) -> None:
    envs = request.getfixturevalue(kind)
    assert check_cells(envs, tmp_path, pool) == []


# Each leak patches a copy of the in-cell package's zygote.py (the zygote and the servers forked
# from it run it); the comparison above must catch every one.
NO_IDENTITY_CHECK = (
    "    dists: dict[str, str] = {}\n",
    "    dists: dict[str, str] = {}\n    return {'prefix': prefix, 'dists': {}, 'files': {}, 'pth': _pth_files(sites)}\n",
)
LEAKS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # one module keeps the zygote's env in its paths
    "unrebased module": (
        "torch.nn.functional is loaded from outside the cell",
        [
            (
                "    try:\n        attrs = vars(module)",
                "    if getattr(module, '__name__', '') == 'torch.nn.functional':\n        return\n    try:\n        attrs = vars(module)",
            ),
        ],
    ),
    # a library under test imported before the fork, with the checks that would refuse it off
    "library under test in the zygote": (
        "versions differs: {'packaging': ('23.2', '24.0')}",
        [
            (
                '        report["leaked"] = _leaked(config.get("forbid", []))',
                '        import packaging.version\n        report["leaked"] = []',
            ),
            NO_IDENTITY_CHECK,
        ],
    ),
    # sys.path not replaced: the zygote's env stays on it
    "zygote's sys.path": ("sys differs: {'path'", [('    sys.path[:] = state["path"]\n', "")]),
}


@pytest.mark.parametrize("leak", sorted(LEAKS))
def test_the_comparison_catches_a_leaking_zygote(leak: str, release_cells: list[EnvResult], tmp_path: Path) -> None:
    expected, edits = LEAKS[leak]
    leaky = tmp_path / "incell"
    shutil.copytree(INCELL, leaky, ignore=shutil.ignore_patterns("__pycache__"))
    source = (leaky / "zygote.py").read_text()
    for old, new in edits:
        assert old in source, "incell/zygote.py changed: update the leak"
        source = source.replace(old, new)
    (leaky / "zygote.py").write_text(source)
    pool = ZygotePool(forbid=LIBRARIES, workdir=tmp_path, child=leaky / "__main__.py")
    # __main__ and the package are the leaky copy here, not the real one: not a leak of the zygote
    package = ("harness_incell", *(f"harness_incell.{p.stem}" for p in INCELL.glob("*.py") if not p.stem.startswith("__")))
    try:
        problems = check_cells(release_cells, tmp_path, pool, skip=("__main__", "__mp_main__", *package))
    finally:
        pool.close()
    assert [p for p in problems if expected in p], f"the {leak} leak went unnoticed: {problems}"


def test_torch_loading_a_library_under_test_keeps_the_zygote_out(release_cells: list[EnvResult], tmp_path: Path) -> None:
    """typing_extensions is loaded by `import torch`: as a library under test, no zygote may hold it."""
    pool = ZygotePool(forbid=["typing-extensions"], workdir=tmp_path)
    try:
        _, runner = _run_dump(release_cells[0], tmp_path, "fork", pool)
    finally:
        pool.close()
    assert runner.server.zygote is None
    assert "typing_extensions" in pool.describe_fallbacks() and "preload" in pool.describe_fallbacks()


def test_a_cell_whose_files_differ_is_refused_and_gets_its_own_zygote(
    release_cells: list[EnvResult], tmp_path: Path, pool: ZygotePool
) -> None:
    """A distribution the zygote loaded, installed differently in the cell (here: its RECORD
    rewritten, as a rebuilt wheel would have it) is not shared: that cell gets its own zygote."""
    first, second = release_cells
    record = next(second.location.glob("lib/python*/site-packages/typing_extensions-*.dist-info/RECORD"))
    original = record.read_bytes()
    record.unlink()  # uv hardlinks from its cache: never write through the link
    record.write_bytes(original + b"typing_extensions_extra.py,,\n")
    try:
        _run_dump(first, tmp_path, "fork", pool)
        forked, runner = _run_dump(second, tmp_path, "fork", pool)
    finally:
        record.unlink()
        record.write_bytes(original)
    assert runner.server.refusals and "typing_extensions" in runner.server.refusals[0]
    assert runner.server.zygote is not None and runner.server.zygote.python == second.python
    assert pool.stats.starts == 2
    fresh, _ = _run_dump(second, tmp_path, "process", None)
    assert differences(forked, fresh, _allowed(second, fresh, tmp_path), FORK_VS_PROCESS) == []


def test_nothing_of_a_library_under_test_is_in_the_zygote(release_cells: list[EnvResult], tmp_path: Path, pool: ZygotePool) -> None:
    _, runner = _run_dump(release_cells[0], tmp_path, "fork", pool)
    assert runner.server.zygote is not None
    assert runner.server.zygote.preloaded == ["torch"]
    assert not [d for d in runner.server.zygote.dists if d.lower().startswith(("packaging-", "tinypkg-"))]
    assert any(d.startswith("torch-") for d in runner.server.zygote.dists)


def test_the_zygote_is_not_started_for_a_cell_whose_scenarios_never_import_torch(
    release_cells: list[EnvResult], tmp_path: Path, pool: ZygotePool
) -> None:
    scenario = tmp_path / "plain.py"
    scenario.write_text("import sys, packaging\nprint('torch' in sys.modules)\n")
    with CellRunner(release_cells[0].python, preload=["torch", "torch._dynamo"], learned=["packaging"], zygotes=pool) as runner:
        raw = runner.run(scenario, timeout=60)
    assert raw.output_tail.strip() == "False"
    assert runner.server.preloaded == ["packaging.*"] and pool.stats.starts == 0


def test_describe_prints_what_a_fresh_interpreter_has(release_cells: list[EnvResult]) -> None:
    proc = subprocess.run([release_cells[0].python, str(CHILD), "describe"], capture_output=True, text=True, check=True)
    state = json.loads(proc.stdout)
    assert state["prefix"] == str(release_cells[0].location)
    assert str(CHILD.parent) not in state["path"] and sys.prefix != state["prefix"]
