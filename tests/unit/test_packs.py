"""Scenarios from the current directory, from a path, or from a built-in pack; the harness's own files from the checkout.

An installed harness has no checkout around it: `tests/integration/test_tool_install.py`
checks the same lookups from a wheel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.inputs import bundled
from harness.inputs.scenarios import lookup_names, select

REPO = Path(__file__).resolve().parents[2]
FORUM = sorted(p.stem for p in (REPO / "scenarios").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project (outside the checkout) with two scenarios of its own, as the current directory."""
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "train_step.py").write_text("print('ok')\n")
    # the same name as a forum scenario: the project's own must win
    (tmp_path / "scenarios" / "gemma4_lora_inner_linear.py").write_text('"""mine"""\n')
    (tmp_path / "scenarios" / "_helper.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_checkout_is_found_with_its_folders() -> None:
    assert bundled.checkout() == REPO
    assert bundled.kit_dir() == REPO / "scenarios"
    assert bundled.pack_dir("forum") == REPO / "scenarios"
    assert bundled.dashboard_app() == REPO / "dashboard" / "app.py"
    assert bundled.sample_db() == REPO / "results" / "default.duckdb"


def test_the_default_set_is_the_current_directorys_scenarios(project: Path) -> None:
    chosen = select([])
    assert sorted(s.name for s in chosen) == ["gemma4_lora_inner_linear", "train_step"]
    assert all(s.path.parent == project / "scenarios" for s in chosen)


def test_no_scenarios_here_names_the_fixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as info:
        select([])
    message = str(info.value)
    assert str(tmp_path / "scenarios") in message
    assert "harness init" in message and "--scenario pack:forum" in message


def test_a_pack_gives_all_its_scenarios_from_anywhere(project: Path) -> None:
    chosen = select(["pack:forum"])
    assert [s.name for s in chosen] == FORUM
    assert all(s.path.parent == REPO / "scenarios" for s in chosen)  # the pack's own, not the project's namesake


def test_one_scenario_of_a_pack(project: Path) -> None:
    [one] = select(["pack:forum/gemma4_lora_inner_linear"])
    assert one.path == REPO / "scenarios" / "gemma4_lora_inner_linear.py"
    assert one.doc != "mine"


def test_a_bare_name_is_the_projects_first_then_a_packs(project: Path) -> None:
    mine, forum = select(["gemma4_lora_inner_linear", "gemma4_lora_merge_parity"])
    assert mine.path == project / "scenarios" / "gemma4_lora_inner_linear.py"
    assert forum.path == REPO / "scenarios" / "gemma4_lora_merge_parity.py"
    assert lookup_names()["gemma4_lora_inner_linear"] == project / "scenarios" / "gemma4_lora_inner_linear.py"
    assert "_helper" not in lookup_names()


BAD_REFERENCES = [
    # the pack exists, the scenario does not
    pytest.param("pack:forum/no_such_check", "'pack:forum/no_such_check'", id="unknown-in-pack"),
    # no such pack at all: the message lists the packs
    pytest.param("pack:nightly", "unknown scenario pack 'nightly'; built-in packs: forum", id="unknown-pack"),
    # neither the project's nor a pack's
    pytest.param("no_such_check", "known: gemma4_lora_inner_linear, train_step", id="unknown-name"),
]


@pytest.mark.parametrize(("reference", "fragment"), BAD_REFERENCES)
def test_bad_references_name_the_fix(project: Path, reference: str, fragment: str) -> None:
    with pytest.raises(BadInput) as info:
        select([reference])
    assert fragment in str(info.value)
