"""catalog.py: scenario declarations are read, never executed; applicability of a cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.inputs.scenarios import Requirements, Scenario, applicability, available, load_scenario, select

#: At the top of every scenario written here: loading one must never run it.
TRAP = 'raise SystemExit("the scenario was executed")\nimport torch_that_is_not_installed\n'


def write(folder: Path, name: str, body: str, doc: str = "") -> Path:
    path = folder / f"{name}.py"
    path.write_text((f'"""{doc}"""\n' if doc else "") + TRAP + body)
    return path


def test_load_scenario_reads_declarations_without_executing(tmp_path: Path) -> None:
    body = 'REQUIRES = {"packages": {"Transformers": ">=5.5", "peft": ">=0.19,<1"}, "gpus": 1}\nTIMEOUT = 600\n'
    path = write(tmp_path, "lora_merge", body, doc="Merge a LoRA adapter.\n\nLonger text.")
    scenario = load_scenario(path)
    assert scenario == Scenario(
        "lora_merge",
        path.resolve(),
        Requirements((("transformers", ">=5.5"), ("peft", ">=0.19,<1")), 1),
        600,
        "Merge a LoRA adapter.\n\nLonger text.",
    )
    assert len(scenario.digest()) == 12


def test_load_scenario_annotated_assignments(tmp_path: Path) -> None:
    path = write(tmp_path, "s", 'REQUIRES: dict = {"gpus": 2}\nTIMEOUT: float = 12.5\n')
    scenario = load_scenario(path)
    assert (scenario.requires, scenario.timeout) == (Requirements((), 2), 12.5)


def test_load_scenario_without_declarations(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, "plain", "x = 1\n"))
    assert (scenario.requires, scenario.timeout, scenario.doc) == (Requirements(), None, "")


def test_digest_changes_with_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "s", "x = 1\n")
    before = load_scenario(path).digest()
    path.write_text(path.read_text() + "y = 2\n")
    assert load_scenario(path).digest() != before


#: (file body) -> a fragment of the BadInput message
BAD_SCENARIOS = [
    # REQUIRES must be a dict, not a list of requirement strings
    pytest.param('REQUIRES = ["torch>=2"]\n', "REQUIRES must be a dict", id="requires-list"),
    # "pkgs" is not a REQUIRES key
    pytest.param(
        'REQUIRES = {"pkgs": {"torch": ">=2"}}\n', "REQUIRES must be a dict with keys 'packages' and/or 'gpus'", id="requires-unknown-key"
    ),
    # ">>2" is not a specifier
    pytest.param('REQUIRES = {"packages": {"torch": ">>2"}}\n', "REQUIRES packages 'torch': invalid specifier '>>2'", id="bad-specifier"),
    # a specifier is a string, not a number
    pytest.param('REQUIRES = {"packages": {"torch": 2}}\n', "REQUIRES packages 'torch': invalid specifier 2", id="specifier-number"),
    # a negative number of GPUs
    pytest.param('REQUIRES = {"gpus": -1}\n', "REQUIRES gpus = -1 must be a non-negative integer", id="gpus-negative"),
    # GPUs are counted, not named
    pytest.param('REQUIRES = {"gpus": "one"}\n', "REQUIRES gpus = 'one' must be a non-negative integer", id="gpus-string"),
    # a call is not a literal: reading it would mean running code
    pytest.param("REQUIRES = dict(gpus=1)\n", "REQUIRES, TIMEOUT and SETUP must be plain literals", id="requires-call"),
    # arithmetic is not a literal either
    pytest.param("TIMEOUT = 10 * 60\n", "REQUIRES, TIMEOUT and SETUP must be plain literals", id="timeout-expression"),
    # a name is not a literal
    pytest.param("LIMIT = 5\nTIMEOUT = LIMIT\n", "REQUIRES, TIMEOUT and SETUP must be plain literals", id="timeout-name"),
    # not Python
    pytest.param("def broken(:\n", "cannot be read", id="syntax-error"),
    pytest.param(
        # packages must be a mapping of name -> specifier
        'REQUIRES = {"packages": ["torch>=2"]}\n',
        "REQUIRES packages",
        id="packages-list",
    ),
    pytest.param(
        # a timeout is a number of seconds; the sweep later dies in float("ten minutes")
        'TIMEOUT = "ten minutes"\n',
        "TIMEOUT",
        id="timeout-string",
    ),
    pytest.param(
        # a negative timeout kills the scenario at once
        "TIMEOUT = -5\n",
        "TIMEOUT",
        id="timeout-negative",
    ),
]


@pytest.mark.parametrize(("body", "fragment"), BAD_SCENARIOS)
def test_load_scenario_bad_declarations(tmp_path: Path, body: str, fragment: str) -> None:
    path = write(tmp_path, "bad", body)
    with pytest.raises(BadInput) as info:
        load_scenario(path)
    assert fragment in str(info.value)
    assert str(path) in str(info.value)  # the message names the file to fix


def test_load_scenario_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="cannot be read"):
        load_scenario(tmp_path / "nope.py")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in ("beta", "alpha"):
        write(scenarios, name, "x = 1\n")
    write(scenarios, "_kit", "x = 1\n")
    (scenarios / "notes.txt").write_text("not a scenario")
    return scenarios


def test_available_skips_helpers(folder: Path) -> None:
    assert available(folder) == {"alpha": folder / "alpha.py", "beta": folder / "beta.py"}


def test_select_all_when_no_names(folder: Path) -> None:
    assert [s.name for s in select([], folder)] == ["alpha", "beta"]


def test_select_by_name_and_path_in_given_order(folder: Path, tmp_path: Path) -> None:
    elsewhere = write(tmp_path, "elsewhere", "x = 1\n")
    assert [s.name for s in select(["beta", str(elsewhere), "alpha"], folder)] == ["beta", "elsewhere", "alpha"]


def test_select_unknown_names_all_reported(folder: Path) -> None:
    with pytest.raises(BadInput) as info:
        select(["alpha", "gamma", "_kit", "missing/dir/x.py"], folder)
    message = str(info.value)
    for unknown in ("'gamma'", "'_kit'", "'missing/dir/x.py'"):
        assert unknown in message
    assert "'alpha'" not in message.split(";")[0]  # a known name is not called unknown
    assert "known: alpha, beta" in message


SCENARIO = Scenario("s", Path("/x/s.py"), Requirements((("transformers", ">=5.5"), ("peft", ">=0.19"), ("torch", ">=2.13,<2.14")), 0))
GPU_SCENARIO = Scenario("g", Path("/x/g.py"), Requirements((), 1))
FREEZE = {"transformers": "5.6.2", "peft": "0.19.1", "torch": "2.13.0", "accelerate": "1.13.0"}

#: (scenario, freeze, gpus) -> "" or the reason it does not apply
APPLICABILITY = [
    pytest.param(SCENARIO, FREEZE, 0, "", id="all-inside"),
    pytest.param(SCENARIO, {**FREEZE, "peft": None}, 0, "needs peft>=0.19, which this cell does not have", id="missing-package"),
    pytest.param(SCENARIO, {**FREEZE, "transformers": "5.4.0"}, 0, "needs transformers>=5.5; this cell has 5.4.0", id="version-below"),
    pytest.param(SCENARIO, {**FREEZE, "torch": "2.14.0"}, 0, "needs torch>=2.13,<2.14; this cell has 2.14.0", id="version-above"),
    pytest.param(SCENARIO, {**FREEZE, "torch": "2.13.0+cpu"}, 0, "", id="local-version-inside"),
    pytest.param(
        SCENARIO, {**FREEZE, "torch": "2.14.0+cu128"}, 0, "needs torch>=2.13,<2.14; this cell has 2.14.0+cu128", id="local-version-outside"
    ),
    pytest.param(SCENARIO, {**FREEZE, "transformers": "5.24.0.dev0"}, 0, "", id="prerelease-counts"),
    pytest.param(
        SCENARIO,
        {**FREEZE, "transformers": "git+https://github.com/huggingface/transformers@0123456789abcdef0123456789abcdef01234567"},
        0,
        "",
        id="git-install-applicable",
    ),
    pytest.param(SCENARIO, {**FREEZE, "peft": "file:///src/peft"}, 0, "", id="path-install-applicable"),
    pytest.param(GPU_SCENARIO, FREEZE, 0, "needs 1 GPU(s); this runner has 0", id="no-gpu"),
    pytest.param(GPU_SCENARIO, FREEZE, 2, "", id="enough-gpus"),
    pytest.param(Scenario("n", Path("/x/n.py")), {}, 0, "", id="no-requirements"),
]


@pytest.mark.parametrize(("scenario", "freeze", "gpus", "reason"), APPLICABILITY)
def test_applicability(scenario: Scenario, freeze: dict[str, str | None], gpus: int, reason: str) -> None:
    clean = {k: v for k, v in freeze.items() if v is not None}
    assert applicability(scenario, clean, gpus) == reason
    if scenario.requires.packages:  # the same cell without its first required package never applies
        first = scenario.requires.packages[0][0]
        assert "which this cell does not have" in applicability(scenario, {k: v for k, v in clean.items() if k != first}, gpus)


def test_applicability_uses_canonical_names_from_requires(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, "s", 'REQUIRES = {"packages": {"BitsAndBytes": ">=0.49"}}\n'))
    assert applicability(scenario, {"bitsandbytes": "0.49.2"}, 0) == ""
    assert applicability(scenario, {"bitsandbytes": "0.48.0"}, 0) == "needs bitsandbytes>=0.49; this cell has 0.48.0"


def test_setup_is_read_without_importing(tmp_path: Path) -> None:
    # the state a scenario must reach before its check counts; a pass without it is inconclusive
    path = tmp_path / "offload.py"
    path.write_text('SETUP = "an int8 layer sits on the CPU"\nimport torch\n')
    assert load_scenario(path).setup == "an int8 layer sits on the CPU"
    path.write_text("SETUP = 3\n")
    with pytest.raises(BadInput, match="SETUP = 3 must be a string"):
        load_scenario(path)
