"""Find scenarios and read what they declare, without importing them.

The harness's interpreter has neither torch nor transformers, and a scenario must not run in
it: `REQUIRES`, `TIMEOUT` and `SETUP` are module-level literals read with `ast.literal_eval`.

Where they are: the project's own `scenarios/` folder in the current directory (the default
set), a file anywhere (`path/to/check.py`), or a built-in pack (`pack:forum` for all of it,
`pack:forum/gemma4_lora_inner_linear` for one). A bare name is looked up in the project's
folder first, then in the packs, so a results file's scenario names are found from anywhere.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.errors import BadInput
from harness.inputs import bundled

#: How a built-in pack is named on the command line and in a matrix: `pack:forum`, `pack:forum/NAME`.
PACK_PREFIX = "pack:"


def project_dir() -> Path:
    """The project's scenarios: `scenarios/` in the current directory (the checkout's own, run from there)."""
    return Path.cwd() / "scenarios"


@dataclass(frozen=True)
class Requirements:
    packages: tuple[tuple[str, str], ...] = ()  # (canonical name, specifier)
    gpus: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    requires: Requirements = field(default_factory=Requirements)
    timeout: float | None = None
    doc: str = ""
    #: The state the scenario must reach before its check means anything ("an int8 layer sits on
    #: the CPU"). A scenario that declares one passes only after `_kit.reached(...)` confirmed it.
    setup: str = ""

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:12]


def _literal(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            assert isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
            return ast.literal_eval(node.value)
    return None


def load_scenario(path: Path) -> Scenario:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise BadInput(f"scenario {str(path)!r} cannot be read ({exc}); fix the file or pass another --scenario") from exc
    try:
        requires = _literal(tree, "REQUIRES") or {}
        timeout = _literal(tree, "TIMEOUT")
        setup = _literal(tree, "SETUP") or ""
    except ValueError as exc:
        raise BadInput(f"scenario {str(path)!r}: REQUIRES, TIMEOUT and SETUP must be plain literals ({exc})") from exc
    if not isinstance(setup, str):
        raise BadInput(f"scenario {str(path)!r}: SETUP = {setup!r} must be a string naming the state it must reach")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise BadInput(f"scenario {str(path)!r}: TIMEOUT = {timeout!r} must be a positive number of seconds")
    return Scenario(path.stem, path.resolve(), _parse_requires(path, requires), timeout, ast.get_docstring(tree) or "", setup.strip())


def _parse_requires(path: Path, raw: Any) -> Requirements:
    if not isinstance(raw, dict) or set(raw) - {"packages", "gpus"}:
        raise BadInput(f"scenario {str(path)!r}: REQUIRES must be a dict with keys 'packages' and/or 'gpus'")
    packages = []
    declared = raw.get("packages") or {}
    if not isinstance(declared, dict):
        raise BadInput(f"scenario {str(path)!r}: REQUIRES packages must map names to specifiers, e.g. {{'transformers': '>=5.5'}}")
    for name, spec in declared.items():
        try:
            SpecifierSet(spec)
        except (InvalidSpecifier, TypeError) as exc:
            raise BadInput(f"scenario {str(path)!r}: REQUIRES packages {name!r}: invalid specifier {spec!r}; write e.g. '>=5.5'") from exc
        packages.append((str(canonicalize_name(name)), spec))
    gpus = raw.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise BadInput(f"scenario {str(path)!r}: REQUIRES gpus = {gpus!r} must be a non-negative integer")
    return Requirements(tuple(packages), gpus)


def available(directory: Path | None = None) -> dict[str, Path]:
    """Scenario files in a folder (default: the project's); names starting with `_` are helpers, not scenarios."""
    folder = project_dir() if directory is None else directory
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")}


def lookup_names(directory: Path | None = None) -> dict[str, Path]:
    """What a bare name resolves to: the project's scenarios first, then each built-in pack's."""
    found: dict[str, Path] = {}
    for pack in sorted(bundled.PACKS):
        found.update(available(bundled.pack_dir(pack)))
    found.update(available(directory))
    return found


def _pack(reference: str) -> list[Path] | None:
    """`pack:forum` -> every scenario of the pack; `pack:forum/NAME` -> that one; None if it names nothing."""
    pack, _, name = reference.removeprefix(PACK_PREFIX).partition("/")
    known = available(bundled.pack_dir(pack))
    if not name:
        return list(known.values())
    return [known[name]] if name in known else None


def select(names: list[str], directory: Path | None = None) -> list[Scenario]:
    """Resolve names, packs and paths (see the module's docstring). Empty means all in the project's folder."""
    folder = project_dir() if directory is None else directory
    known = available(folder)
    if not names:
        if not known:
            raise BadInput(
                f"no scenarios in {str(folder)!r}; write one there (`harness init` makes an example), "
                "or pass --scenario path/to/check.py or --scenario pack:forum (the built-in forum scenarios)"
            )
        return [load_scenario(p) for p in known.values()]
    fallback = lookup_names(folder)
    chosen: list[Scenario] = []
    unknown: list[str] = []
    for name in names:
        path = Path(name)
        if name.startswith(PACK_PREFIX):
            found = _pack(name)
            if found is None:
                unknown.append(name)
            else:
                chosen.extend(load_scenario(p) for p in found)
        elif name.endswith(".py") or "/" in name:
            if path.is_file():
                chosen.append(load_scenario(path))
            else:
                unknown.append(name)
        elif name in fallback:
            chosen.append(load_scenario(fallback[name]))
        else:
            unknown.append(name)
    if unknown:
        packs = ", ".join(f"{PACK_PREFIX}{p}" for p in sorted(bundled.PACKS))
        raise BadInput(
            f"unknown scenario(s) {', '.join(map(repr, unknown))}; known: {', '.join(known) or 'none'} in {str(folder)!r} "
            f"(or pass a path to a .py file, or a built-in pack: {packs}, {PACK_PREFIX}NAME/SCENARIO)"
        )
    return chosen


def applicability(scenario: Scenario, freeze: Mapping[str, str], gpus: int) -> str:
    """ "" if the cell can run the scenario, else the reason it cannot (-> not_applicable)."""
    for name, spec in scenario.requires.packages:
        installed = freeze.get(name)
        if installed is None:
            return f"needs {name}{spec}, which this cell does not have"
        try:
            version = Version(installed)
        except InvalidVersion:
            continue  # a git or path install: let the scenario decide
        if version.public and Version(version.public) not in SpecifierSet(spec, prereleases=True):
            return f"needs {name}{spec}; this cell has {installed}"
    if gpus < scenario.requires.gpus:
        return f"needs {scenario.requires.gpus} GPU(s); this runner has {gpus}"
    return ""
