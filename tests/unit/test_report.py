"""report.py: markdown issue bodies from outcome rows, transitions and cell records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.analysis.attribution import attribute, to_rows
from harness.analysis.filing import libraries_in_trace, repository
from harness.analysis.markdown import code
from harness.analysis.report import render_cell_report, render_signature_report, shorten_paths

ENV = "/tmp/envs/torch2.13.0-tf5.6.2-acc1.13.0-peft0.19.1-bnb0.49-1b611bb6262b/lib/python3.11/site-packages"
SIG = (
    "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
    " @ accelerate/utils/modeling.py:set_module_tensor_to_device"
)
MESSAGE = "TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'"
TRACEBACK = f"""Traceback (most recent call last):
  File "/work/main/harness/child.py", line 68, in run_scenario
    runpy.run_path(scenario, run_name="__main__")
  File "/work/main/scenarios/gemma4_peft_split_4bit_load.py", line 57, in main
    peft_model = load_adapter_under_pressure(model, adapter_path(workdir), workdir)
  File "{ENV}/peft/peft_model.py", line 582, in from_pretrained
    load_result = model.load_adapter(
  File "{ENV}/peft/peft_model.py", line 1475, in load_adapter
    dispatch_model(
  File "{ENV}/accelerate/big_modeling.py", line 432, in dispatch_model
    attach_align_device_hook_on_blocks(
  File "{ENV}/torch/nn/modules/module.py", line 2260, in state_dict
    module.state_dict(
  File "{ENV}/accelerate/hooks.py", line 330, in init_hook
    set_module_tensor_to_device(module, name, "meta")
  File "{ENV}/accelerate/utils/modeling.py", line 363, in set_module_tensor_to_device
    new_value = param_cls(new_value, requires_grad=old_value.requires_grad, **kwargs).to(
{MESSAGE}
"""
META_SIG = "RuntimeError: Tensor.item() cannot be called on meta tensors @ bitsandbytes/functional.py:as_dict"
META_TRACEBACK = f"""Traceback (most recent call last):
  File "{ENV}/accelerate/hooks.py", line 459, in attach_execution_device_hook
    if not hasattr(module, "_hf_hook") and len(module.state_dict()) > 0:
  File "{ENV}/torch/nn/modules/module.py", line 2257, in state_dict
    self._save_to_state_dict(destination, prefix, keep_vars)
  File "{ENV}/bitsandbytes/nn/modules.py", line 525, in _save_to_state_dict
    for k, v in self.weight.quant_state.as_dict(packed=True).items():
  File "{ENV}/bitsandbytes/functional.py", line 581, in as_dict
    "nested_offset": self.offset.item(),
  File "{ENV}/torch/_meta_registrations.py", line 7457, in meta_local_scalar_dense
    raise RuntimeError("Tensor.item() cannot be called on meta tensors")
RuntimeError: Tensor.item() cannot be called on meta tensors
"""
SCENARIO = "gemma4_peft_split_4bit_load"
DOC = "PEFT adapter load onto a split 4-bit Gemma 4: the `_is_hf_initialized` family.\n\nUpstream: transformers#43872."
FILES = {SCENARIO: f"scenarios/{SCENARIO}.py"}
RUNS = {
    "r1": {
        "run_id": "r1",
        "matrix_path": "matrix.toml",
        "settings": {"find_links": ["/opt/wheels"], "index_url": ""},
        "host": {"platform": "linux-x86_64", "gpu": "cpu", "gpus": []},
    }
}


def versions(tf: str = "5.6.2", acc: str = "1.13.0") -> dict[str, str]:
    return {"torch": "2.13.0", "transformers": tf, "accelerate": acc, "peft": "0.19.1", "bitsandbytes": "0.49.2"}


def cell_id(tf: str = "5.6.2", acc: str = "1.13.0") -> str:
    return f"torch2.13.0-tf{tf}-acc{acc}-peft0.19.1-bnb0.49.2"


def rows_of(tf: str, acc: str, status: str, scenario: str = SCENARIO, repeats: int = 1, signature: str = SIG) -> list[dict[str, Any]]:
    v = versions(tf, acc)
    installed = {**v, "torch": "2.13.0+cpu", "safetensors": "0.8.0"}
    failing = status == "error"
    return [
        {
            "run_id": "r1",
            "cell_id": cell_id(tf, acc),
            "scenario": scenario,
            "repeat": repeat,
            "status": status,
            "signature": signature if failing else "",
            "signature_family": "6c43cf7c6f32" if failing else "",
            "blamed_library": signature.split(" @ ")[1].split("/")[0] if failing else "",
            "exception_type": signature.split(":")[0] if failing else "",
            "message": (MESSAGE if signature == SIG else "RuntimeError: Tensor.item() cannot be called on meta tensors") if failing else "",
            "traceback": (TRACEBACK if signature == SIG else META_TRACEBACK) if failing else "",
            "output_tail": "",
            "versions": json.dumps(v),
            "installed": json.dumps(installed),
            "inherited": "{}",
            "git_commits": "{}",
            "python": "3.11",
            "platform": "linux-x86_64",
            "gpu": "cpu",
            "started_at": "2026-11-21 10:00:00",
            **{axis: installed[axis] for axis in v},
        }
        for repeat in range(repeats)
    ]


def thread_rows() -> list[dict[str, Any]]:
    """The thread's failure: accelerate 1.13.0 fails, 1.14.0 and 1.15.0 load, with transformers 5.6.2 and 5.23.0."""
    rows = []
    for tf in ("5.6.2", "5.23.0"):
        rows += rows_of(tf, "1.13.0", "error", repeats=2)
        rows += rows_of(tf, "1.14.0", "pass", repeats=2)
        rows += rows_of(tf, "1.15.0", "pass", repeats=2)
    rows += rows_of("5.4.0", "1.15.0", "not_applicable")
    return rows


@pytest.fixture
def body() -> str:
    rows = thread_rows()
    transitions = to_rows(attribute(rows))
    cells = {cell_id("5.23.0", "1.13.0"): {"installed": {**versions("5.23.0"), "torch": "2.13.0+cpu", "numpy": "2.4.6"}}}
    return render_signature_report(
        SIG, rows, transitions, cells, runs=RUNS, scenario_files=FILES, scenario_docs={SCENARIO: DOC}, db="results/compat.duckdb"
    )


#: what a maintainer needs, and the text that shows it is there
SIGNATURE_REPORT_HAS = [
    # the exception and its library, in one line of at most 100 characters (the version left out: it does not fit)
    pytest.param(f"**Suggested title:** {MESSAGE} (accelerate)\n", id="title"),
    pytest.param("**File at:** huggingface/accelerate — the innermost frame under test is `accelerate/utils/modeling.py:", id="file-at"),
    pytest.param("**Cross-link:** huggingface/peft (`peft/peft_model.py:load_adapter`)", id="cross-link"),
    pytest.param("fixed in accelerate 1.14.0", id="fixed-note"),
    # the contrast table: every axis, the varying ones in bold, one status column per scenario
    pytest.param(
        "| torch | **transformers** | **accelerate** | peft | bitsandbytes | `gemma4_peft_split_4bit_load` | cell |", id="contrast-header"
    ),
    pytest.param(
        f"| 2.13.0+cpu | **5.23.0** | **1.13.0** | 0.19.1 | 0.49.2 | **fails** (error) 2/2 | `{cell_id('5.23.0', '1.13.0')}` |",
        id="contrast-failing-row",
    ),
    pytest.param("| 2.13.0+cpu | **5.23.0** | **1.14.0** | 0.19.1 | 0.49.2 | passes 2/2 |", id="contrast-passing-row"),
    pytest.param("| **5.4.0** | **1.15.0** | 0.19.1 | 0.49.2 | not applicable |", id="contrast-not-applicable"),
    # the exact versions of the newest failing set (transformers 5.23.0 over 5.6.2)
    pytest.param("| torch | 2.13.0+cpu |\n| transformers | 5.23.0 |\n| accelerate | 1.13.0 |", id="environment"),
    pytest.param("numpy==2.4.6", id="full-freeze"),
    pytest.param(
        "- `gemma4_peft_split_4bit_load`: fixed in accelerate 1.14.0 (after 1.13.0), on 2 line(s) of the matrix"
        " (cpu · linux-x86_64 · Python 3.11):\n"
        "  - with torch 2.13.0, transformers 5.6.2, peft 0.19.1, bitsandbytes 0.49.2\n"
        "  - with torch 2.13.0, transformers 5.23.0, peft 0.19.1, bitsandbytes 0.49.2\n",
        id="attribution",
    ),
    # the CPU build of torch resolves on a clean machine only with the PyTorch index: the public one, named
    pytest.param(
        "pip install --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu transformers==5.23.0 accelerate==1.13.0"
        " peft==0.19.1 bitsandbytes==0.49.2",
        id="repro-install",
    ),
    pytest.param("python scenarios/gemma4_peft_split_4bit_load.py", id="repro-script"),
    pytest.param(
        f"harness sweep --matrix matrix.toml --cell {cell_id('5.23.0', '1.13.0')} --scenario gemma4_peft_split_4bit_load",
        id="repro-harness",
    ),
    # the run's own folder of wheels is this machine's: said, never named
    pytest.param("# the run also took packages from a source of its machine's own", id="wheel-source"),
    # the last frames, fenced, from the scenario on (the harness's child process is no part of it), the runner's paths cut
    pytest.param(
        '```text\nTraceback (most recent call last):\n  File "scenarios/gemma4_peft_split_4bit_load.py", line 57, in main',
        id="fenced-traceback-start",
    ),
    pytest.param(
        '  File "site-packages/accelerate/utils/modeling.py", line 363, in set_module_tensor_to_device'
        "  ← accelerate: the innermost frame under test\n",
        id="short-paths-frame-marked",
    ),
    pytest.param(MESSAGE + "\n```", id="fenced-traceback-end"),
    pytest.param("- `gemma4_peft_split_4bit_load` — PEFT adapter load onto", id="summary-doc"),
    pytest.param("Fails with it in 2 of 7 tested version set(s); passes in 4.", id="summary-counts"),
    pytest.param("from 13 outcome(s) in `results/compat.duckdb`: run(s) r1, 2026-11-21, GPU cpu", id="footer"),
]


@pytest.mark.parametrize("expected", SIGNATURE_REPORT_HAS)
def test_signature_report_has(body: str, expected: str) -> None:
    assert expected in body


def test_signature_report_leaks_no_runner_paths(body: str) -> None:
    assert "/tmp/envs" not in body and "/work/main" not in body and "/opt/wheels" not in body


#: library -> repository to file at
REPOSITORIES = [
    ("transformers", "huggingface/transformers"),
    ("accelerate", "huggingface/accelerate"),
    ("peft", "huggingface/peft"),
    ("bitsandbytes", "bitsandbytes-foundation/bitsandbytes"),
    ("torch", "pytorch/pytorch"),
    ("huggingface_hub", "huggingface/huggingface_hub"),
    ("somethingelse", ""),
]


@pytest.mark.parametrize(("library", "repo"), REPOSITORIES)
def test_repository(library: str, repo: str) -> None:
    assert repository(library) == repo


def test_torch_raising_for_bitsandbytes_is_filed_at_bitsandbytes_and_not_cross_linked() -> None:
    rows = rows_of("5.6.2", "1.14.0", "error", signature=META_SIG) + rows_of("5.6.2", "1.13.0", "pass")
    body = render_signature_report(META_SIG, rows)
    assert (
        "**File at:** bitsandbytes-foundation/bitsandbytes — the innermost frame under test is `bitsandbytes/functional.py:as_dict`" in body
    )
    assert "**Cross-link:** huggingface/accelerate (`accelerate/hooks.py:attach_execution_device_hook`)" in body
    assert "pytorch/pytorch" not in body
    assert libraries_in_trace(META_TRACEBACK)[-1] == ("torch", "torch/_meta_registrations.py:meta_local_scalar_dense")


def test_a_failed_check_without_a_frame_is_filed_where_the_attribution_points() -> None:
    rows = rows_of("5.6.2", "1.13.0", "pass") + rows_of("5.6.2", "1.14.0", "pass")
    rows += [{**r, "status": "fail", "signature": "fail", "blamed_library": "", "traceback": "", "message": "merged output differs"}
             for r in rows_of("5.6.2", "1.15.0", "error")]  # fmt: skip
    body = render_signature_report("fail", rows, to_rows(attribute(rows)))
    assert (
        "**File at:** huggingface/accelerate — the failing frame is the scenario's own check, and only accelerate's releases change it:"
        " introduced in accelerate 1.15.0 (after 1.14.0) ([new issue]" in body
    )
    assert "introduced in accelerate 1.15.0 (after 1.14.0)" in body
    assert "```text\nmerged output differs\n```" in body
    assert "**Fixed in a tested release?**" not in body


def test_signature_with_backticks_stays_one_code_span() -> None:
    assert code("a `b` c") == "`` a `b` c ``"
    assert code("plain") == "`plain`"


def test_unknown_signature_is_an_error() -> None:
    with pytest.raises(ValueError, match="no failing outcome"):
        render_signature_report("KeyError: <key>", thread_rows())


def test_shorten_paths() -> None:
    text = f'File "{ENV}/peft/x.py" and "C:\\venv\\Lib\\site-packages\\accelerate\\hooks.py" and "/home/u/compat/scenarios/_kit.py"'
    assert shorten_paths(text) == 'File "site-packages/peft/x.py" and "site-packages/accelerate\\hooks.py" and "scenarios/_kit.py"'


def test_cell_report_shows_the_cell_its_neighbours_and_each_failure() -> None:
    rows = thread_rows() + rows_of("5.6.2", "1.13.0", "pass", scenario="gemma4_lora_inner_linear")
    record = {"python": "3.11", "installed": {**versions(), "torch": "2.13.0+cpu", "numpy": "2.4.6"}, "env_status": "ready"}
    body = render_cell_report(cell_id(), rows, record, transitions=to_rows(attribute(rows)), runs=RUNS, scenario_files=FILES)
    assert body.startswith(
        f"<!-- harness report: cell {cell_id()} -->\n**Suggested title:** {MESSAGE} with torch 2.13.0+cpu, transformers 5.6.2"
    )
    assert "| `gemma4_lora_inner_linear` | passes |  |" in body
    assert f"| `{SCENARIO}` | **error** 2/2: TypeError | `{SIG}` |" in body
    assert f"`{cell_id()}` ← this cell |" in body
    assert f"`{cell_id('5.6.2', '1.14.0')}` |" in body and f"`{cell_id('5.23.0', '1.13.0')}` |" in body  # one axis away
    assert cell_id("5.23.0", "1.14.0") not in body  # two axes away: not a neighbour
    assert "**File at:** huggingface/accelerate" in body
    assert "- `gemma4_peft_split_4bit_load`: fixed in accelerate 1.14.0 (after 1.13.0), on 2 line(s) of the matrix (cpu ·" in body
    assert "numpy==2.4.6" in body
    assert '```text\nTraceback (most recent call last):\n  File "scenarios/gemma4_peft_split_4bit_load.py"' in body
    assert f"--cell {cell_id()} --scenario {SCENARIO}" in body


def test_cell_report_for_an_env_that_did_not_build() -> None:
    rows = rows_of("5.4.0", "1.13.0", "unresolvable")
    message = "Because transformers==5.4.0 depends on huggingface-hub<1.0 and you require huggingface-hub==1.33.0, we can conclude ..."
    record = {"env_status": "unresolvable", "env_message": message, "installed": {}}
    body = render_cell_report(cell_id("5.4.0"), rows, record)
    assert "the environment cannot be built (unresolvable)" in body
    assert f"```text\n{message}\n```" in body


def test_fences_survive_backticks_in_the_traceback() -> None:
    rows = rows_of("5.6.2", "1.13.0", "error")
    rows[0]["traceback"] = TRACEBACK + "```\n"
    body = render_signature_report(SIG, rows)
    assert "````text\n" in body


def test_a_long_signature_in_a_table_keeps_its_location() -> None:
    long = (
        "ValueError: Target module Gemma4ClippableLinear(...) is not supported. Currently, only the following modules are supported: "
        "`torch.nn.Linear`, `torch.nn.Embedding`, `torch.nn.Conv1d`, `torch.nn.Conv2d`, `torch.nn.Conv3d`, "
        "`transformers.pytorch_utils.Conv1D`, `torch.nn.MultiheadAttention.`. @ peft/tuners/lora/model.py:_create_new_module"
    )
    rows = rows_of("5.6.2", "1.13.0", "error", scenario="gemma4_lora_broad_targets", signature=long)
    body = render_cell_report(cell_id(), rows)
    [line] = [line for line in body.splitlines() if line.startswith("| `gemma4_lora_broad_targets` |")]
    assert line.endswith("are… @ peft/tuners/lora/model.py:_create_new_module` |")
    assert len(line) < 240


def test_attribution_groups_one_change_seen_on_many_lines() -> None:
    def fixed(tf: str, before: str, after: str, untested: tuple[str, ...] = ()) -> dict[str, Any]:
        held = {"torch": "2.13.0", "transformers": tf, "peft": "0.19.1", "bitsandbytes": "0.49.2"}
        return {"scenario": SCENARIO, "signature": SIG, "kind": "fixed", "axis": "accelerate", "before": before, "after": after,
                "untested": list(untested), "inconclusive": [], "held": held, "before_cell": cell_id(tf, before),
                "after_cell": cell_id(tf, after)}  # fmt: skip

    points = [fixed(tf, "1.13.0", "1.14.0") for tf in ("5.5.0", "5.6.0", "5.6.2", "5.8.1", "5.10.4")]
    ranges = [fixed(tf, "1.13.0", "1.15.0", ("1.14.0",)) for tf in ("5.20.0", "5.23.0")]
    body = render_signature_report(SIG, thread_rows(), [*ranges, *points])
    assert f"- `{SCENARIO}`: fixed in accelerate 1.14.0 (after 1.13.0), on 5 line(s) of the matrix:" in body
    assert "  - with torch 2.13.0, transformers 5.8.1" not in body and "  - … 2 more" in body  # three lines shown
    # a range and an exact answer are never one group: the headline says what every member shows
    assert (
        f"- `{SCENARIO}`: fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0, on 2 line(s) of the matrix:"
        in body
    )
    assert "  - with torch 2.13.0, transformers 5.23.0, peft 0.19.1, bitsandbytes 0.49.2" in body
    assert "finds it fixed in accelerate 1.14.0 (after 1.13.0). File only if" in body


def _own_check_rows() -> list[dict[str, Any]]:
    """#49's hidden regression: a scenario's own check (no library frame) fails with peft 0.19.x and transformers
    older than 5.6.0; peft 0.19.0 introduced it, peft 0.20.0 fixed it, transformers 5.6.0 fixed it too."""
    keys = ", ".join(f"'base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight'" for i in range(4))
    message = f"ScenarioFailed: the adapter's keys were not loaded: [{keys}]"
    rows = []
    for tf, peft, fails in [("5.5.4", "0.18.1", False), ("5.5.4", "0.19.0", True), ("5.5.4", "0.20.0", False), ("5.6.0", "0.19.0", False)]:
        [row] = rows_of(tf, "1.13.0", "pass", scenario="adapter_keys")
        versions = {**json.loads(row["versions"]), "peft": peft}
        row.update(versions=json.dumps(versions), installed=json.dumps({**json.loads(row["installed"]), "peft": peft}), peft=peft)
        row.update(cell_id=f"tf{tf}-peft{peft}")
        if fails:
            row.update(status="fail", signature="ScenarioFailed: the adapter's keys were not loaded: [...]", blamed_library="",
                       exception_type="ScenarioFailed", message=message, traceback="")  # fmt: skip
        rows.append(row)
    return rows


def test_a_scenarios_own_check_is_filed_where_one_librarys_releases_introduced_and_fixed_it() -> None:
    rows = _own_check_rows()
    moves = to_rows(attribute(rows))
    assert sorted(t["description"].split(" — ")[0] for t in moves if t["kind"] in ("introduced", "fixed")) == [
        "fixed in peft 0.20.0 (after 0.19.0)",
        "fixed in transformers 5.6.0 (after 5.5.4)",
        "introduced in peft 0.19.0 (after 0.18.1)",
    ]
    doc = "Load a LoRA adapter saved by an older peft onto Gemma 4 and check that every key of it arrived: the hidden regression."
    body = render_signature_report(
        "ScenarioFailed: the adapter's keys were not loaded: [...]", rows, moves, scenario_docs={"adapter_keys": doc}
    )
    assert (
        "**File at:** huggingface/peft — the failing frame is the scenario's own check, and peft's releases change it: "
        "introduced in peft 0.19.0 (after 0.18.1); fixed in peft 0.20.0 (after 0.19.0). It is fixed in peft 0.20.0: "
        "file only if it fails with the newest release, or say there that it is fixed ([new issue](https://github.com/huggingface/peft/issues/new))."
    ) in body
    assert "undetermined" not in body
    # the title: the exception and its library in one line, not the docstring and 200 characters of keys
    title = next(line for line in body.splitlines() if line.startswith("**Suggested title:** ")).removeprefix("**Suggested title:** ")
    assert len(title) <= 100 and title.startswith("ScenarioFailed: the adapter's keys were not loaded: ['base_model")
    assert title.endswith("… (peft)") and "Load a LoRA adapter" not in title


def test_no_library_is_named_where_two_introduced_it() -> None:
    rows = _own_check_rows()
    moves = to_rows(attribute(rows))
    also = {
        **moves[0],
        "kind": "introduced",
        "axis": "accelerate",
        "before": "1.12.0",
        "after": "1.13.0",
        "untested": [],
        "inconclusive": [],
    }
    body = render_signature_report("ScenarioFailed: the adapter's keys were not loaded: [...]", rows, [*moves, also])
    assert "**File at:** undetermined — no frame inside a library under test, and no single library's releases explain it." in body
