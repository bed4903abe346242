"""Where the harness's own files are: the dashboard, the scenario kit and the built-in scenario packs.

In a checkout they are the top-level folders `dashboard/` and `scenarios/` beside `harness/`;
in an installed wheel (`uv tool install`, `pipx install`, `pip install`) the same folders ship
inside the package as `harness/_bundled/dashboard` and `harness/_bundled/scenarios`
(pyproject.toml maps them), so an installed harness adds no top-level `dashboard` or
`scenarios` package to anyone's environment. The wheel's copy is looked for first: a folder
named `scenarios` beside an installed package could belong to anything.

What the user's project holds (its `matrix.toml`, `scenarios/`, `results/`) is found from the
current directory, never here.

>>> sorted(PACKS)
['forum']
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import BadInput

HARNESS = Path(__file__).resolve().parent.parent  # harness/, above inputs/
#: Built-in scenario packs: name -> the folder under `_bundled/` (and at the top of a checkout).
#: `forum`: the checks from the forum thread the harness was born from (docs/scenarios.md).
PACKS = {"forum": "scenarios"}
#: Each folder, and a file that must be in it (what tells a real copy from a stray folder).
_MARKERS = {"dashboard": "app.py", "scenarios": "_kit.py"}


def _folder(name: str) -> Path:
    """The wheel's copy if there is one, else the checkout's (which may be missing: callers say so)."""
    for folder in (HARNESS / "_bundled" / name, HARNESS.parent / name):
        if (folder / _MARKERS[name]).is_file():
            return folder
    return HARNESS.parent / name


def checkout() -> Path | None:
    """The repository root when the harness runs from a checkout (or an editable install), else None."""
    root = HARNESS.parent
    return root if (root / "pyproject.toml").is_file() and (root / "dashboard" / "app.py").is_file() else None


def kit_dir() -> Path:
    """The folder of `_kit.py` and the other helpers (`_gemma4`, `_gpu`, …) every scenario may import."""
    return _folder("scenarios")


def pack_dir(name: str) -> Path:
    """The folder of a built-in pack of scenarios (`forum`)."""
    if name not in PACKS:
        raise BadInput(f"unknown scenario pack {name!r}; built-in packs: {', '.join(sorted(PACKS))} (e.g. --scenario pack:forum)")
    return _folder(PACKS[name])


def dashboard_app() -> Path:
    """The Streamlit entry point, `dashboard/app.py`."""
    app = _folder("dashboard") / "app.py"
    if not app.is_file():
        raise BadInput(f"the dashboard is missing from this installation ({app}); reinstall the harness: uv tool install compat-harness")
    return app


def sample_db() -> Path | None:
    """The results file shipped in a checkout (`results/default.duckdb`); a wheel ships none."""
    root = checkout()
    sample = root / "results" / "default.duckdb" if root else None
    return sample if sample is not None and sample.is_file() else None
