"""pin.py: the newest set on which every chosen scenario passes, from outcome rows alone."""

from __future__ import annotations

import doctest
import json
import shlex
from typing import Any

import pytest

from harness.analysis import export, pin, status
from harness.analysis import rows as row_facts
from harness.analysis.export import Sources
from harness.analysis.pin import Constraints, PinResult, choose
from harness.analysis.rows import installed as axis_versions
from harness.errors import BadInput

SIG = (
    "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
    " @ accelerate/utils/modeling.py:set_module_tensor_to_device"
)
META = "RuntimeError: Tensor.item() cannot be called on meta tensors @ bitsandbytes/functional.py:as_dict"
CLIPPABLE = "ValueError: Target module Gemma4ClippableLinear(...) is not supported. @ peft/tuners/lora/model.py:_create_new_module"
ACC_MAIN = "git+https://github.com/huggingface/accelerate@" + "0" * 40

BASE = {"torch": "2.13.0", "transformers": "5.6.2", "accelerate": "1.13.0", "peft": "0.19.1", "bitsandbytes": "0.49.2"}
FREEZE_EXTRA = {"safetensors": "0.8.0", "numpy": "2.4.6"}

#: what one repeat shows: status and signature
SHOWS = {
    "pass": ("pass", ""),
    "acc": ("error", SIG),
    "meta": ("error", META),
    "clip": ("error", CLIPPABLE),
    "n/a": ("not_applicable", ""),
    "unresolvable": ("unresolvable", "unresolvable: Because transformers==5.4.0 depends on huggingface-hub<1.0"),
}


def cell(
    statuses: str, scenario: str = "load", run: str = "r1", gpu: str = "cpu", started: str = "2026-11-21T10:00:00", **axes: str
) -> list[dict[str, Any]]:
    """Rows of one scenario in one cell: BASE with `axes` changed, one row per word of `statuses`."""
    versions = {**BASE, **{k.replace("_", "-"): v for k, v in axes.items()}}
    installed = {**versions, **FREEZE_EXTRA, "torch": versions["torch"] + "+cpu" if versions["torch"][0].isdigit() else versions["torch"]}
    cell_id = "-".join(f"{k}{v}" for k, v in versions.items())
    rows = []
    for repeat, word in enumerate(statuses.split()):
        status, signature = SHOWS[word]
        rows.append(
            {
                "run_id": run,
                "cell_id": cell_id,
                "scenario": scenario,
                "repeat": repeat,
                "status": status,
                "signature": signature,
                "message": "needs a GPU" if status == "not_applicable" else "",
                "versions": json.dumps(versions),  # as DuckDB hands JSON columns back: text
                "installed": json.dumps(installed),
                "inherited": "{}",
                "python": "3.11",
                "platform": "linux-x86_64",
                "gpu": gpu,
                "started_at": started,
                **{axis: installed[axis] for axis in BASE},
            }
        )
    return rows


def both(statuses_load: str, statuses_lora: str = "pass", **axes: str) -> list[dict[str, Any]]:
    """One cell with the two scenarios most tests choose."""
    return cell(statuses_load, "load", **axes) + cell(statuses_lora, "lora", **axes)


def picked(result: PinResult, *axes: str) -> dict[str, str]:
    chosen = dict(result.versions)
    return {a: chosen[a] for a in axes}


# -- which set wins --------------------------------------------------------------------------
#: (rows, ranking, expected transformers and peft): the newest by the ranking, never a string compare
RANKED = [
    pytest.param(
        both("pass", transformers="5.23.0", peft="0.19.1")
        + both("pass", peft="0.21.2")
        + both("acc", transformers="5.23.0", peft="0.21.2"),
        ("transformers", "peft"),
        {"transformers": "5.23.0", "peft": "0.19.1"},
        id="transformers-first",
    ),
    pytest.param(
        both("pass", transformers="5.23.0", peft="0.19.1")
        + both("pass", peft="0.21.2")
        + both("acc", transformers="5.23.0", peft="0.21.2"),
        ("peft", "transformers"),
        {"transformers": "5.6.2", "peft": "0.21.2"},
        id="peft-first",
    ),
    # 5.10.0 is newer than 5.9.0 although "5.10.0" < "5.9.0" as text
    pytest.param(
        both("pass", transformers="5.9.0") + both("pass", transformers="5.10.0"),
        ("transformers",),
        {"transformers": "5.10.0", "peft": "0.19.1"},
        id="versions-not-strings",
    ),
    # every cell passes: the newest on every axis
    pytest.param(
        both("pass")
        + both("pass", transformers="5.23.0")
        + both("pass", peft="0.21.2")
        + both("pass", transformers="5.23.0", peft="0.21.2"),
        ("transformers", "peft"),
        {"transformers": "5.23.0", "peft": "0.21.2"},
        id="all-pass-newest-everywhere",
    ),
]


@pytest.mark.parametrize(("rows", "ranking", "expected"), RANKED)
def test_newest_wins_by_ranking(rows: list[dict[str, Any]], ranking: tuple[str, ...], expected: dict[str, str]) -> None:
    result = choose(rows, ["load", "lora"], ranking=ranking)
    assert result.found
    assert picked(result, "transformers", "peft") == expected


def test_axes_left_out_of_the_ranking_follow_in_reading_order() -> None:
    rows = both("pass", accelerate="1.14.0") + both("pass", accelerate="1.15.0")
    result = choose(rows, ["load", "lora"], ranking=["transformers"])
    assert result.ranking == ("transformers", "torch", "accelerate", "peft", "bitsandbytes")
    assert picked(result, "accelerate") == {"accelerate": "1.15.0"}


#: (rows, why the newest cell must not pin): each newest cell here is newer than the passing 5.6.2 one
DISQUALIFIED = [
    # one repeat of three failed: never pin a flaky cell
    pytest.param(both("pass") + both("pass pass acc", transformers="5.23.0"), "flaky: 1 of 3 repeat(s) did not pass", id="flaky"),
    # passed in one run, failed in another: all runs count
    pytest.param(
        both("pass") + both("pass", transformers="5.23.0") + cell("meta", "load", run="r2", transformers="5.23.0"),
        "error: " + META,
        id="failed-in-another-run",
    ),
    # ... and said so: each run agreed with itself (one repeat each), the runs did not
    pytest.param(
        both("pass") + both("pass", transformers="5.23.0") + cell("meta", "load", run="r2", transformers="5.23.0"),
        f"flaky across runs: failed in 1 of 2 runs with the same versions (error: {META}",
        id="flaky-across-runs",
    ),
    # a chosen scenario was never run there: no evidence is not a pass
    pytest.param(both("pass") + cell("pass", "load", transformers="5.23.0"), "lora no outcome", id="missing-scenario"),
    # not applicable (no GPU, too old) is not a pass either
    pytest.param(both("pass") + both("pass", "n/a", transformers="5.23.0"), "not_applicable: needs a GPU", id="not-applicable"),
    pytest.param(both("pass") + both("unresolvable", "unresolvable", transformers="5.23.0"), "unresolvable: Because", id="unresolvable"),
]


@pytest.mark.parametrize(("rows", "reason"), DISQUALIFIED)
def test_a_cell_that_did_not_pass_everything_never_pins(rows: list[dict[str, Any]], reason: str) -> None:
    result = choose(rows, ["load", "lora"])
    assert picked(result, "transformers") == {"transformers": "5.6.2"}
    [exclusion] = result.excluded
    assert (exclusion.axis, exclusion.version) == ("transformers", "5.23.0")
    assert reason in exclusion.describe()


def test_constraints_hold_an_axis_and_admit_local_versions() -> None:
    rows = both("pass") + both("pass", torch="2.14.0") + both("pass", transformers="5.23.0", torch="2.14.0")
    free = choose(rows, ["load", "lora"])
    assert picked(free, "torch", "transformers") == {"torch": "2.14.0+cpu", "transformers": "5.23.0"}
    held = choose(rows, ["load", "lora"], Constraints.parse(["torch=2.13.0"]))  # matches 2.13.0+cpu, as PEP 440 `==` does
    assert picked(held, "torch", "transformers") == {"torch": "2.13.0+cpu", "transformers": "5.6.2"}
    assert held.candidates == 1
    assert not held.excluded  # 2.14.0 was never a candidate: the user held torch
    ranged = choose(rows, ["load", "lora"], Constraints.parse(["transformers<5.20"]))
    assert picked(ranged, "torch", "transformers") == {"torch": "2.14.0+cpu", "transformers": "5.6.2"}


def test_gpu_constraint_takes_evidence_from_matching_runs_only() -> None:
    rows = both("pass") + both("pass", transformers="5.23.0", gpu="NVIDIA H200") + cell("meta", "load", run="r-cpu", transformers="5.23.0")
    assert picked(choose(rows, ["load", "lora"]), "transformers") == {"transformers": "5.6.2"}  # the CPU run failed it
    on_h200 = choose(rows, ["load", "lora"], Constraints.parse([], gpu="h200"))
    assert picked(on_h200, "transformers") == {"transformers": "5.23.0"}
    assert on_h200.gpus == ("NVIDIA H200",)


def test_a_release_is_preferred_to_a_git_source_when_both_pass() -> None:
    rows = both("pass", accelerate="1.15.0") + both("pass", accelerate=ACC_MAIN)
    assert picked(choose(rows, ["load", "lora"], ranking=["accelerate"]), "accelerate") == {"accelerate": "1.15.0"}
    # ... and a source pins when no release passes
    rows = both("acc", accelerate="1.13.0") + both("pass", accelerate=ACC_MAIN)
    result = choose(rows, ["load", "lora"])
    assert picked(result, "accelerate") == {"accelerate": ACC_MAIN}
    assert f"accelerate @ {ACC_MAIN}" in export.requirements_txt(result)


def test_inherited_torch_is_what_the_base_interpreter_had() -> None:
    rows = both("pass")
    for row in rows:
        row["versions"] = json.dumps({**BASE, "torch": "inherit"})
        row["installed"] = json.dumps({k: v for k, v in json.loads(row["installed"]).items() if k != "torch"})
        row["inherited"] = json.dumps({"torch": "2.8.0+cu129"})
    assert axis_versions(rows[0])["torch"] == "2.8.0+cu129"
    result = choose(rows, ["load", "lora"], Constraints.parse(["torch=2.8.0"]))
    assert picked(result, "torch") == {"torch": "2.8.0+cu129"}
    assert "torch==2.8.0+cu129  # from the base interpreter" in export.constraints_txt(result)


# -- evidence --------------------------------------------------------------------------------
def test_each_newer_version_names_the_failure_that_excluded_it() -> None:
    rows = (
        both("pass", accelerate="1.14.0")
        + both("acc", accelerate="1.13.0")
        + both("meta", accelerate="1.15.0")  # the neighbour: only accelerate differs
    )
    rows += cell("clip", "lora", peft="0.22.0", accelerate="1.14.0") + cell("pass", "load", peft="0.22.0", accelerate="1.14.0")
    result = choose(rows, ["load", "lora"], ranking=["transformers", "accelerate", "peft"])
    assert picked(result, "accelerate", "peft") == {"accelerate": "1.14.0", "peft": "0.19.1"}
    by_version = {(e.axis, e.version): e for e in result.excluded}
    acc = by_version[("accelerate", "1.15.0")]
    [blocker] = acc.blockers
    assert (blocker.scenario, blocker.reason, blocker.runs) == ("load", "error: " + META, ("r1",))
    assert blocker.cells == ("torch2.13.0-transformers5.6.2-accelerate1.15.0-peft0.19.1-bitsandbytes0.49.2",)
    [blocker] = by_version[("peft", "0.22.0")].blockers
    assert (blocker.scenario, blocker.reason) == ("lora", "error: " + CLIPPABLE)
    assert [e.axis for e in result.excluded] == ["accelerate", "peft"]  # in ranking order
    assert "accelerate 1.15.0: load error: RuntimeError: Tensor.item()" in "\n".join(result.describe())


def test_a_newer_version_untested_with_the_pin_that_passes_with_an_older_higher_ranked_axis() -> None:
    rows = both("pass", transformers="5.23.0", accelerate="1.14.0") + both("acc", transformers="5.23.0", accelerate="1.13.0")
    rows += both("pass", transformers="5.6.2", accelerate="1.15.0")
    result = choose(rows, ["load", "lora"])
    assert picked(result, "transformers", "accelerate") == {"transformers": "5.23.0", "accelerate": "1.14.0"}
    [exclusion] = result.excluded
    assert exclusion.describe() == (
        "accelerate 1.15.0: not tested with the pinned versions of the other axes; passes with transformers 5.6.2"
        " (cell torch2.13.0-transformers5.6.2-accelerate1.15.0-peft0.19.1-bitsandbytes0.49.2)"
    )


def test_evidence_names_runs_dates_gpu_and_python() -> None:
    rows = both("pass", started="2026-11-20T09:00:00") + cell("pass", "load", run="r2", started="2026-11-21T12:30:00")
    result = choose(rows, ["load", "lora"])
    assert result.runs == ("r1", "r2")
    assert (result.first_seen, result.last_seen) == ("2026-11-20 09:00", "2026-11-21 12:30")
    assert (result.gpus, result.platforms, result.python) == (("cpu",), ("linux-x86_64",), "3.11")
    assert [(e.scenario, e.passed) for e in result.evidence] == [("load", 2), ("lora", 1)]
    assert result.machines == ("cpu · linux-x86_64 · Python 3.11",)
    assert "run r1, r2; 2026-11-20..2026-11-21; on cpu · linux-x86_64 · Python 3.11" in "\n".join(result.describe())


# -- nothing passes --------------------------------------------------------------------------
def test_nothing_passes_names_the_scenario_that_blocks_every_candidate() -> None:
    rows = both("pass", "clip") + both("acc", "clip", accelerate="1.14.0") + both("pass", "clip", transformers="5.23.0")
    result = choose(rows, ["load", "lora"])
    assert not result.found
    assert result.failing == (("lora", 3), ("load", 1))
    assert result.blocking[0].scenario == "lora" and result.blocking[0].reason == "error: " + CLIPPABLE
    assert len(result.blocking[0].cells) == 3
    assert result.describe()[1] == "nothing passes: lora does not pass in any of the 3 candidate cell(s)"
    with pytest.raises(ValueError, match="nothing to export"):
        export.requirements_txt(result)


def test_nothing_passes_without_a_single_blocker_gives_counts() -> None:
    rows = both("acc", "pass") + both("pass", "clip", transformers="5.23.0")
    result = choose(rows, ["load", "lora"])
    assert result.failing == (("load", 1), ("lora", 1))
    assert result.describe()[1] == "nothing passes: none of the 2 candidate cell(s) passes every chosen scenario"


# -- exports ---------------------------------------------------------------------------------
def test_requirements_constraints_and_commands() -> None:
    result = choose(both("pass"), ["load", "lora"])
    sources = Sources(index_url="https://download.pytorch.org/whl/cpu", find_links=("/opt/wheels",))
    requirements = export.requirements_txt(result, sources).splitlines()
    assert requirements[0].startswith("# harness pin: the newest set on which load, lora passed")
    assert requirements[2:] == [
        "--index-url https://download.pytorch.org/whl/cpu",
        "--find-links /opt/wheels",
        "torch==2.13.0+cpu",
        "transformers==5.6.2",
        "accelerate==1.13.0",
        "peft==0.19.1",
        "bitsandbytes==0.49.2",
    ]
    constraints = [line for line in export.constraints_txt(result).splitlines() if not line.startswith("#")]
    assert constraints == sorted(constraints)
    assert {"numpy==2.4.6", "safetensors==0.8.0", "torch==2.13.0+cpu"} <= set(constraints)
    pip = export.install_command(result, "pip", sources)
    assert pip == (
        "pip install --index-url https://download.pytorch.org/whl/cpu --find-links /opt/wheels "
        "torch==2.13.0+cpu transformers==5.6.2 accelerate==1.13.0 peft==0.19.1 bitsandbytes==0.49.2"
    )
    assert export.install_command(result, "uv").startswith("uv pip install torch==2.13.0+cpu ")
    lock = export.lock_command(result, "uv", "in.txt", "out/pylock.toml", Sources(find_links=("/opt/wheels",)))
    assert lock[:9] == ["uv", "pip", "compile", "in.txt", "--format", "pylock.toml", "-o", "out/pylock.toml", "--no-header"]
    assert lock[lock.index("--python-version") + 1] == "3.11"
    assert lock[lock.index("--python-platform") + 1] == "x86_64-unknown-linux-gnu"
    assert lock[-2:] == ["--find-links", "/opt/wheels"]
    assert json.loads(json.dumps(result.to_dict()))["versions"]["torch"] == "2.13.0+cpu"


def test_a_git_source_is_quoted_and_kept_out_of_pip_constraints() -> None:
    result = choose(both("pass", accelerate=ACC_MAIN), ["load", "lora"])
    assert shlex.split(export.install_command(result))[4] == f"accelerate @ {ACC_MAIN}"
    assert f"# accelerate @ {ACC_MAIN}  (a source: see requirements.txt)" in export.constraints_txt(result)
    assert f"accelerate @ {ACC_MAIN}\n" in export.lock_input(result)


#: (--fix values, the parsed (axis, specifier) pairs)
GOOD_FIXES = [
    (["torch=2.13.0"], (("torch", "==2.13.0"),)),
    (["torch==2.13.0+cpu"], (("torch", "==2.13.0+cpu"),)),
    (["transformers<5.20"], (("transformers", "<5.20"),)),
    (["Transformers >=5.6,<5.20"], (("transformers", ">=5.6,<5.20"),)),
    ([f"accelerate={ACC_MAIN}"], (("accelerate", f"=={ACC_MAIN}"),)),
]
BAD_FIXES = [
    pytest.param("torch", id="no-version"),  # names an axis but no version
    pytest.param("torch=latest", id="not-a-version"),  # neither a version nor a specifier
    pytest.param("=2.13.0", id="no-axis"),
]


@pytest.mark.parametrize(("fixes", "expected"), GOOD_FIXES)
def test_fix_syntax(fixes: list[str], expected: tuple[tuple[str, str], ...]) -> None:
    assert Constraints.parse(fixes).fixed == expected


@pytest.mark.parametrize("fix", BAD_FIXES)
def test_bad_fix_is_bad_input(fix: str) -> None:
    with pytest.raises(BadInput, match="--fix"):
        Constraints.parse([fix])


def test_doctests() -> None:
    assert doctest.testmod(pin).failed == 0
    assert doctest.testmod(export).failed == 0
    assert doctest.testmod(status).failed == 0  # across_runs: flaky across runs, not within one
    assert doctest.testmod(row_facts).failed == 0
