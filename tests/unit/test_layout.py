"""The layout is the architecture: `harness/analysis` is pure, and every face reads it.

matrix -> candidates -> envs -> runner/child -> outcome -> store -> analysis -> CLI/dashboard.
The analysis package (statuses, versions, rows, attribution, refinement planning, bisection,
pins, reports) imports nothing that does I/O, so it can be tested with tables of cases.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANALYSIS = sorted((REPO / "harness" / "analysis").glob("*.py"))
#: What the pure package may not import, directly or through the harness.
IO_MODULES = ("subprocess", "socket", "urllib", "http", "duckdb", "rich", "streamlit", "nox", "uv", "threading", "shutil", "tempfile")
IO_HARNESS = ("store", "queries", "envs", "runner", "sweep", "candidates", "cli", "hostinfo", "shardfile", "wheelhouse", "refinement")


@pytest.mark.parametrize("path", ANALYSIS, ids=lambda p: p.stem)
def test_analysis_modules_import_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    bad = sorted(m for m in imported if m.split(".")[0] in IO_MODULES or m.removeprefix("harness.") in IO_HARNESS)
    assert not bad, f"{path.name} imports {bad}: the analysis package must stay pure"


def test_importing_the_analysis_loads_no_harness_io_module() -> None:
    # Through any chain of imports: the analysis must be loadable where nothing can run.
    code = (
        "import sys\n"
        + "".join(f"import harness.analysis.{p.stem}\n" for p in ANALYSIS if p.stem != "__init__")
        + f"print([m for m in sys.modules if m.startswith('harness.') and m.split('.')[1] in {IO_HARNESS!r}]"
        + " + [m for m in ('duckdb', 'rich', 'streamlit', 'urllib.request') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_the_readme_layout_names_every_module() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme[readme.index("## Layout") :]
    for path in [*(REPO / "harness").glob("*.py"), *ANALYSIS]:
        if path.stem not in ("__init__", "__main__"):
            assert path.stem in layout, f"README's layout does not name {path.relative_to(REPO)}"


def test_a_runner_sweep_needs_no_duckdb() -> None:
    # A GPU runner gets only uv and the libraries under test: its sweeps write JSON-lines shards,
    # and nothing on that path (the CLI, the sweep, refinement's step) may import DuckDB.
    code = (
        "import sys\nsys.modules['duckdb'] = None  # importing it now raises ImportError\n"
        "import harness.cli, harness.sweep, harness.sweeping, harness.refinement, harness.answering, harness.shardfile, harness.zygote\n"
        "from pathlib import Path\n"
        "from harness.sweep import SweepOptions\n"
        "from harness.sweeping import refine_step\n"
        "print(refine_step(SweepOptions(Path('m.toml'), Path('shard-1.jsonl'), shard=(1, 3)), None, None))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "refinement: off (--shard: refine the merged file)" in out.stdout
