"""Preload what the scenarios import: learned per cell env, kept beside it.

After a cell ran, each scenario's record holds the installed modules it imported that were
not loaded before it started (`incell/scenario.py`, "imported"); the scenario file and its helpers in
scenarios/ name the ones it imports itself. Next time that env's fork server preloads
exactly those, in place of the matrix's `preload` list, so a cell that runs one plain
script does not import transformers for it. What was learned and preloaded last time is kept
(a preloaded module never shows up as newly imported), so the list only grows with modules
that scenario did import at some point; a changed scenario file starts again.

    <env>/harness-imports.json   {"scenario name": {"digest": "...", "modules": ["transformers.models.gemma4.modeling_gemma4", ...]}}
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.inputs.imports import scenario_imports
from harness.inputs.scenarios import Scenario
from harness.running.runner import KIT_DIR

IMPORTS_FILE = "harness-imports.json"
#: "0": servers preload the matrix's `preload`, never what was learned (still stored): the
#: comparison of docs/benchmarks.md for which learned modules are worth preloading.
LEARNED_ENV = "HARNESS_LEARNED_PRELOAD"


def load(location: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((location / IMPORTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def learned_preload(location: Path, scenarios: Iterable[Scenario]) -> list[str] | None:
    """The modules to preload for these scenarios in this env; None while one of them is new here."""
    if os.environ.get(LEARNED_ENV, "1") == "0":
        return None
    known = load(location)
    modules: dict[str, None] = {}
    for scenario in scenarios:
        record = known.get(scenario.name)
        if not isinstance(record, dict) or record.get("digest") != scenario.digest():
            return None
        modules.update(dict.fromkeys(str(m) for m in record.get("modules", [])))
    return list(modules)


def remember(location: Path, scenarios: Iterable[Scenario], imported: dict[str, list[str]], preloaded: list[str]) -> None:
    """Store what each scenario that ran imported (`imported`: by scenario path), for next time.

    `preloaded`: the learned modules this server imported; those a scenario had learned stay.
    """
    known = load(location)
    kept = set(preloaded)
    changed = False
    for scenario in scenarios:
        new = imported.get(str(scenario.path.resolve()))
        if new is None:
            continue  # it did not run (not applicable, or the sweep stopped)
        record = known.get(scenario.name)
        before = record.get("modules", []) if isinstance(record, dict) and record.get("digest") == scenario.digest() else []
        modules = dict.fromkeys([*static_imports(scenario.path), *[m for m in before if m in kept], *new])
        entry = {"digest": scenario.digest(), "modules": list(modules)}
        if known.get(scenario.name) != entry:
            known[scenario.name] = entry
            changed = True
    if changed:
        tmp = location / f"{IMPORTS_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(location / IMPORTS_FILE)  # atomic: a reader never sees half a file


def static_imports(path: Path) -> list[str]:
    """The installed modules a scenario file imports itself, through its helpers too (`inputs.imports`)."""
    return scenario_imports(path, KIT_DIR).modules
