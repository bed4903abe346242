"""Learned preloads: what a cell's scenarios imported, kept beside its env (harness/running/preloads.py),
and how the runner turns them into a fork server's preload entries."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from harness.inputs.scenarios import Scenario
from harness.running import preloads, server
from harness.running.server import preload_entries

CONFIGURED = ["torch", "torch._dynamo", "transformers", "peft"]


def test_doctests() -> None:
    assert doctest.testmod(preloads).failed == 0
    assert doctest.testmod(server).failed == 0  # what a fork server preloads: `without_culprits`


@pytest.mark.parametrize(
    "learned,expected",
    [
        # nothing learned yet: the matrix's preload, one entry per module
        (None, ["torch", "torch._dynamo", "transformers", "peft"]),
        # the scenarios use torch: preload's torch entries (the zygote's), then one entry per library
        (
            ["torch.nn", "transformers.models.gemma4.modeling_gemma4", "transformers.utils"],
            ["torch", "torch._dynamo", "torch.*", "transformers.*"],
        ),
        # a plain script that never imports torch preloads only what it used
        (["packaging.version"], ["packaging.*"]),
        # it imported nothing installed: nothing at all
        ([], []),
    ],
)
def test_learned_modules_replace_the_configured_libraries(learned: list[str] | None, expected: list[str]) -> None:
    assert [e["name"] for e in preload_entries(CONFIGURED, learned)] == expected


def test_a_library_entry_holds_its_learned_modules_in_order() -> None:
    entries = preload_entries(CONFIGURED, ["transformers.a", "peft.b", "transformers.c"])
    assert entries == [
        {"name": "transformers.*", "modules": ["transformers.a", "transformers.c"]},
        {"name": "peft.*", "modules": ["peft.b"]},
    ]


def _scenario(folder: Path, name: str, body: str) -> Scenario:
    path = folder / f"{name}.py"
    path.write_text(body)
    return Scenario(name, path)


def test_remember_then_learned_preload(tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.mkdir()
    a = _scenario(tmp_path, "a", "import torch\nfrom transformers import AutoConfig\n")
    b = _scenario(tmp_path, "b", "import packaging\n")
    assert preloads.learned_preload(env, [a, b]) is None  # nothing known yet
    preloads.remember(env, [a, b], {str(a.path): ["transformers.models.x"], str(b.path): []}, preloaded=[])
    assert preloads.learned_preload(env, [a]) == ["torch", "transformers", "transformers.models.x"]
    assert preloads.learned_preload(env, [a, b]) == ["torch", "transformers", "transformers.models.x", "packaging"]
    assert preloads.learned_preload(env, [b]) == ["packaging"]


def test_what_was_preloaded_and_learned_stays_and_a_changed_scenario_starts_again(tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.mkdir()
    a = _scenario(tmp_path, "a", "import torch\n")
    preloads.remember(env, [a], {str(a.path): ["torch.fx.x"]}, preloaded=[])
    # next run: torch.fx.x was preloaded, so the scenario no longer imports it itself
    preloads.remember(env, [a], {str(a.path): ["torch.y"]}, preloaded=["torch.fx.x"])
    assert preloads.learned_preload(env, [a]) == ["torch", "torch.fx.x", "torch.y"]
    # a scenario that did not run (not applicable, stopped) keeps its record
    preloads.remember(env, [a], {}, preloaded=[])
    assert preloads.learned_preload(env, [a]) == ["torch", "torch.fx.x", "torch.y"]
    a.path.write_text("import numpy\n")
    changed = Scenario("a", a.path)
    assert preloads.learned_preload(env, [changed]) is None
    assert json.loads((env / preloads.IMPORTS_FILE).read_text())["a"]["modules"] == ["torch", "torch.fx.x", "torch.y"]
