"""The layout is the architecture: the folders of harness/ are its layers, and each imports only
the layers below it.

    cli.py -> commands/ -> render/ -> workflows/ -> running/ -> inputs/, storage/ -> analysis/ (pure) -> errors.py

No module of harness/ reaches itself through its imports (a circle), lazy imports included.

The analysis package (statuses, versions, signatures, records, attribution, refinement and
bisection searches, pins, reports) imports only what an allow list names (stdlib modules that
do no I/O, packaging, itself, errors.py), so it can be tested with tables of cases.
docs/architecture.md's ## Layout names every module by its path under harness/, and no file that is not there.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANALYSIS = sorted((REPO / "harness" / "analysis").glob("*.py"))
#: All that the pure package may import: the stdlib modules it uses (no subprocess, socket,
#: threading, urllib: nothing that runs or reaches anything), packaging, and itself.
ALLOWED_STDLIB = frozenset(
    {
        "__future__",
        "bisect",  # a sorted list's runs (pin's test selection)
        "heapq",  # the known-good set's drop order (knowngood.drop_order)
        "collections",
        "collections.abc",
        "dataclasses",
        "datetime",
        "enum",
        "functools",
        "hashlib",  # a signature's id
        "itertools",
        "json",
        "math",  # a ceiling (explain's halving)
        "operator",  # itemgetter: a row's cell columns read in C (rows.cell_facts)
        "pathlib",
        "re",
        "shlex",
        "signal",  # a signal's name from its number (interpret), nothing sent
        "tomllib",
        "types",
        "typing",
    }
)
ALLOWED_PACKAGES = ("packaging", "harness.analysis")
#: Modules of the harness outside the package that it still borrows: leaves that import nothing
#: of the harness and only the stdlib above (with hashlib), checked as the package is.
BORROWED = {"harness.errors": "pin.py raises BadInput"}
#: What each layer of harness/ may import of the harness ("harness" alone: its __version__).
_RUNNING = ("harness", "harness.analysis", "harness.errors", "harness.inputs", "harness.storage", "harness.running")
LAYERS = {
    "analysis": ("harness.analysis", "harness.errors"),
    "inputs": ("harness.analysis", "harness.errors", "harness.inputs"),
    "storage": ("harness", "harness.analysis", "harness.errors", "harness.storage"),
    "running": _RUNNING,
    "workflows": (*_RUNNING, "harness.workflows"),
    "render": (*_RUNNING, "harness.workflows", "harness.render"),
    "commands": (*_RUNNING, "harness.workflows", "harness.render", "harness.commands"),
}
TOP = {"__init__.py", "__main__.py", "cli.py", "errors.py"}


def _imports(path: Path) -> set[str]:
    """The modules `path` imports, each by its full name (`from a.b import c` -> "a.b"; a
    relative import resolved from the file's package, `from .. import x` -> "harness.x")."""
    package = list(path.relative_to(REPO).parent.parts)
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            imported.add(str(node.module))
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1])
            imported |= {f"{base}.{node.module}"} if node.module else {f"{base}.{a.name}" for a in node.names}
    return imported


def _allowed(module: str) -> bool:
    return module in ALLOWED_STDLIB or module in BORROWED or any(module == p or module.startswith(p + ".") for p in ALLOWED_PACKAGES)


@pytest.mark.parametrize("path", ANALYSIS, ids=lambda p: p.stem)
def test_analysis_modules_import_only_what_is_allowed(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if not _allowed(m))
    assert not bad, f"{path.name} imports {bad}: the analysis package must stay pure (see ALLOWED_STDLIB)"


@pytest.mark.parametrize("module", sorted(BORROWED))
def test_what_the_analysis_borrows_is_a_pure_leaf(module: str) -> None:
    path = REPO / (module.replace(".", "/") + ".py")
    bad = sorted(m for m in _imports(path) if m not in ALLOWED_STDLIB | {"hashlib"})
    assert not bad, f"{path.name} imports {bad}: the analysis package borrows it ({BORROWED[module]}), so it must stay pure"


def test_importing_the_analysis_loads_nothing_else_of_the_harness() -> None:
    # Through any chain of imports: the analysis must be loadable where nothing can run.
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        + "".join(f"import harness.analysis.{p.stem}\n" for p in ANALYSIS if p.stem != "__init__")
        + "print(sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    loaded = ast.literal_eval(out)
    harness = [m for m in loaded if m.startswith("harness.") and not m.startswith("harness.analysis") and m not in BORROWED]
    assert harness == [], f"importing the analysis loads {harness}"
    outside = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"harness", "packaging"})
    assert outside == [], f"importing the analysis loads {outside}"


def _layout() -> str:
    """docs/architecture.md's ## Layout section."""
    readme = (REPO / "docs" / "architecture.md").read_text()
    start = readme.index("\n## Layout\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else len(readme)]


def _named_files(token: str) -> list[Path]:
    """The files a backticked `name.py` of the layout names: a path under harness/ (`cli.py`,
    `running/sweep.py`), else from the top of the repository (`noxfile.py`, `dashboard/app.py`)."""
    return [p for p in (REPO / "harness" / token, REPO / token) if p.is_file()][:1]


def test_the_readme_layout_names_every_module_and_only_modules_that_exist() -> None:
    tokens = re.findall(r"`([\w./-]+\.py)`", _layout())
    assert tokens, "docs/architecture.md's ## Layout names no `module.py`"
    unknown = sorted({t for t in tokens if not _named_files(t)})
    assert not unknown, f"docs/architecture.md's layout names files that do not exist: {unknown}"
    named = {p for t in tokens for p in _named_files(t)}
    modules = [p for p in (REPO / "harness").rglob("*.py") if "templates" not in p.parts]
    missing = sorted(str(p.relative_to(REPO)) for p in modules if p.stem not in ("__init__", "__main__") and p not in named)
    assert not missing, f"docs/architecture.md's layout does not name {missing}"


def test_a_runner_sweep_needs_no_duckdb() -> None:
    # A GPU runner gets only uv and the libraries under test: its sweeps write JSON-lines shards,
    # and nothing on that path (the CLI, the sweep, refinement's step) may import DuckDB.
    code = (
        "import sys\nsys.modules['duckdb'] = None  # importing it now raises ImportError\n"
        "import harness.cli, harness.running.sweep, harness.running.zygote, harness.storage.shardfile, harness.storage.opening\n"
        "import harness.commands.sweep, harness.workflows.refining, harness.workflows.answering\n"
        "from pathlib import Path\n"
        "from harness.running.plan import SweepOptions\n"
        "from harness.workflows.sweeping import refine_step\n"
        "print(refine_step(SweepOptions(Path('m.toml'), Path('shard-1.jsonl'), shard=(1, 3)), None, None))\n"
        # a sweep's closing lines lead with the history's: none for a shard, and no DuckDB for it
        "from harness.workflows.changes import history_lines\n"
        "from harness.storage.shardfile import ShardStore\n"
        "print('history', history_lines(ShardStore.__new__(ShardStore)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "refinement: off (--shard: refine the merged file)" in out.stdout
    assert "history []" in out.stdout


def test_harness_has_only_its_layers_and_the_cli_at_the_top() -> None:
    folders = {p.name for p in (REPO / "harness").iterdir() if p.is_dir() and p.name not in ("__pycache__", "templates")}
    assert folders == set(LAYERS), f"harness/ holds {sorted(folders)}: a new folder is a new layer (LAYERS and docs/architecture.md)"
    top = {p.name for p in (REPO / "harness").glob("*.py")}
    assert top == TOP, f"harness/ holds modules outside its layers: {sorted(top - TOP)}"


@pytest.mark.parametrize("path", sorted((REPO / "harness").glob("*/*.py")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_each_layer_imports_only_the_layers_below_it(path: Path) -> None:
    allowed = LAYERS[path.parent.name]
    harness = {m for m in _imports(path) if m == "harness" or m.startswith("harness.")}
    bad = sorted(m for m in harness if not any(m == a or (a != "harness" and m.startswith(a + ".")) for a in allowed))
    assert not bad, f"{path.parent.name}/{path.name} imports {bad}: {path.parent.name}/ may import only {allowed}"


@pytest.mark.parametrize("path", sorted((REPO / "harness" / "running" / "incell").glob("*.py")), ids=lambda p: p.stem)
def test_what_runs_in_a_cell_imports_only_the_standard_library_and_itself(path: Path) -> None:
    # running/incell/ runs in the cell's own interpreter, where only the libraries under test are
    # installed (and pytest, for a suite's worker): never the harness, which it reaches relatively only
    allowed = set(sys.stdlib_module_names) | ({"pytest"} if path.stem == "suite" else set())
    bad = sorted(m for m in _imports(path) if not m.startswith("harness.running.incell.") and m.partition(".")[0] not in allowed)
    assert not bad, f"running/incell/{path.name} imports {bad}: what runs in a cell is the standard library and itself"


def test_no_two_modules_of_a_folder_differ_only_by_a_suffix() -> None:
    # attributing/attribution, refinement/refine, ...: one name per concept, the folder says the layer.
    for folder in [REPO / "harness", *(p for p in (REPO / "harness").iterdir() if p.is_dir())]:
        stems = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
        pairs = [(a, b) for a in stems for b in stems if a != b and b.startswith(a) and b[len(a) :].isalpha()]
        assert not pairs, f"{folder.relative_to(REPO)}: {pairs}"


def _import_graph() -> dict[str, set[str]]:
    """Each module of harness/ -> the modules of harness/ it imports anywhere (inside functions and
    under TYPE_CHECKING too: a lazy import still ties two concepts together)."""
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p for p in (REPO / "harness").rglob("*.py")}
    modules = {m: p for m, p in modules.items() if "templates" not in p.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        named = _imports(path)
        for node in ast.walk(ast.parse(path.read_text())):  # `from harness.storage import queries` names a module too
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                named |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {m for m in named if m in modules and m != name}
    return graph


def test_no_module_reaches_itself_through_its_imports() -> None:
    # A circle makes two rooms one: neither can be read, tested or moved without the other.
    graph = _import_graph()
    circles = []
    for start in sorted(graph):
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
    assert not circles, f"modules that import themselves through others: {circles}"


#: The one module of commands/ that others import: the flags several commands take, worded once.
SHARED_FLAGS = "harness.commands.flags"


@pytest.mark.parametrize("path", sorted((REPO / "harness" / "commands").glob("*.py")), ids=lambda p: p.stem)
def test_no_command_imports_another(path: Path) -> None:
    # pip's commands never import one another: what two commands share is a workflow (or render/)
    others = sorted(m for m in _imports(path) if m.startswith("harness.commands") and m not in (SHARED_FLAGS, "harness.commands"))
    assert not others, f"commands/{path.name} imports {others}: move what they share into harness/workflows/ (or render/)"


@pytest.mark.parametrize("path", sorted((REPO / "dashboard").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO / "dashboard")))
def test_the_dashboard_imports_workflows_never_commands(path: Path) -> None:
    found = sorted(m for m in _imports(path) if m.startswith("harness.commands"))
    assert not found, f"dashboard/{path.relative_to(REPO / 'dashboard')} imports {found}: the library is harness/workflows/"


@pytest.mark.parametrize("path", sorted(p for p in (REPO / "harness" / "commands").glob("*.py") if p.stem != "flags"), ids=lambda p: p.stem)
def test_a_command_is_a_thin_face(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= 150, f"commands/{path.name} is {lines} lines: flags in, one workflow, text out (at most 150)"


def test_the_flags_name_the_kept_servers_variable_as_the_runner_does() -> None:
    from harness.commands import flags
    from harness.running import kept

    assert flags.KEEP_ENV == kept.KEEP_ENV


def test_the_wheel_lists_every_package_of_harness() -> None:
    """pyproject names the wheel's packages one by one (the dashboard and the scenarios ride under
    harness._bundled): a folder of harness/ left off installs a harness that cannot import it."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(path.parent.relative_to(REPO).parts)
        for path in (REPO / "harness").rglob("*.py")
        if not {"__pycache__", "_bundled", "templates"} & set(path.parts)  # templates: package data
    }
    assert folders - listed == set(), "add them to [tool.setuptools] packages in pyproject.toml"
