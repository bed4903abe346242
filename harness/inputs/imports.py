"""What a Python file imports, read without running it: one walker for every reader of a scenario's
or a test's imports (the preloads a cell's fork server imports next time, the files a repro carries).

>>> import tempfile; folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "_helper.py").write_text("import torch.nn\\nfrom transformers import AutoConfig\\n")
>>> _ = (folder / "check.py").write_text("import json\\nfrom _helper import x\\nimport peft\\n")
>>> found = scenario_imports(folder / "check.py", folder / "kit")
>>> [p.name for p in found.helpers], found.modules
(['_helper.py'], ['torch.nn', 'transformers', 'peft'])
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path


def imported(text: str) -> list[str]:
    """The modules a file's source imports: absolute names, relative ones as `.name`, and each
    `from` import's names as submodules it may be (`pkg.name`); [] for a file that does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.append(base)
            names += [f"{base}.{alias.name}" if node.module else f"{base}{alias.name}" for alias in node.names]
    return names


@dataclass
class ScenarioImports:
    """A scenario file's helpers (files beside it or in the kit that it imports, through each
    other) and every other module it imports through them, in the order they are first met."""

    helpers: list[Path] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)


def scenario_imports(path: Path, kit: Path) -> ScenarioImports:
    """The helpers and other imports of the scenario at `path` (its helpers live beside it or in `kit`)."""
    found = ScenarioImports()
    modules: dict[str, None] = {}
    _walk(path, kit, found, modules, {path})
    found.modules = list(modules)
    return found


def _walk(path: Path, kit: Path, found: ScenarioImports, modules: dict[str, None], seen: set[Path]) -> None:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            helper = next((d / f"{top}.py" for d in (path.parent, kit) if (d / f"{top}.py").is_file()), None)
            if helper is not None:
                if helper not in seen:  # a helper of scenarios/: what it imports counts, not itself
                    seen.add(helper)
                    found.helpers.append(helper)
                    _walk(helper, kit, found, modules, seen)
            elif top not in sys.stdlib_module_names:
                modules[name] = None
