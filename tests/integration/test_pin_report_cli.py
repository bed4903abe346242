"""`harness pin` and `harness report` over a real DuckDB file: the thread's `_is_hf_initialized` failure.

Run 1 swept transformers 5.6.2 / 5.23.0 × accelerate 1.13.0 / 1.14.0 / 1.15.0 on CPU with torch
2.13.0+cpu: the split 4-bit adapter load fails with accelerate 1.13.0 and passes from 1.14.0
on; the inner-linear LoRA passes everywhere; the broad-targets LoRA fails everywhere
(Gemma4ClippableLinear). The freeze is a real one from such a sweep.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage.store import Store
from tests.conftest import run_cli

LOAD, LORA, BROAD = "gemma4_peft_split_4bit_load", "gemma4_lora_inner_linear", "gemma4_lora_broad_targets"
RUN = "r-894f8d3657"
SIG = (
    "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
    " @ accelerate/utils/modeling.py:set_module_tensor_to_device"
)
CLIPPABLE = "ValueError: Target module Gemma4ClippableLinear(...) is not supported. @ peft/tuners/lora/model.py:_create_new_module"
ENV = "/work/main/.nox/torch2-13-0-tf{tf}-acc{acc}-peft0-19-1-bnb0-49-2-1b611bb6262b/lib/python3.11/site-packages"
TRACEBACK = """Traceback (most recent call last):
  File "/work/main/harness/child.py", line 68, in run_scenario
    runpy.run_path(scenario, run_name="__main__")
  File "/work/main/scenarios/gemma4_peft_split_4bit_load.py", line 57, in main
    peft_model = load_adapter_under_pressure(model, adapter_path(workdir), workdir)
  File "/work/main/scenarios/_offload.py", line 75, in load_adapter_under_pressure
    return PeftModel.from_pretrained(
  File "{env}/peft/peft_model.py", line 582, in from_pretrained
    load_result = model.load_adapter(
  File "{env}/peft/peft_model.py", line 1475, in load_adapter
    dispatch_model(
  File "{env}/accelerate/big_modeling.py", line 432, in dispatch_model
    attach_align_device_hook_on_blocks(
  File "{env}/accelerate/hooks.py", line 183, in add_hook_to_module
    module = hook.init_hook(module)
  File "{env}/accelerate/hooks.py", line 330, in init_hook
    set_module_tensor_to_device(module, name, "meta")
  File "{env}/accelerate/utils/modeling.py", line 363, in set_module_tensor_to_device
    new_value = param_cls(new_value, requires_grad=old_value.requires_grad, **kwargs).to(
TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'
"""
#: the env's `uv pip freeze` from a real sweep (transformers 5.23.0, accelerate 1.15.0)
FREEZE = json.loads(
    '{"accelerate": "1.15.0", "annotated-doc": "0.0.7", "annotated-types": "0.8.0", "anyio": "4.16.0", "bitsandbytes": "0.49.2",'
    ' "click": "8.5.1", "filelock": "4.2.11", "fsspec": "2026.9.0", "h11": "0.16.0", "hf-xet": "1.8.0", "httpcore2": "2.16.2",'
    ' "httpx2": "2.16.2", "huggingface-hub": "2.4.0", "idna": "3.20", "jinja2": "3.1.6", "markdown-it-py": "4.3.0",'
    ' "markupsafe": "3.0.4", "mdurl": "0.1.2", "mpmath": "1.3.0", "networkx": "3.6.1", "numpy": "2.4.6", "packaging": "26.3",'
    ' "peft": "0.19.1", "psutil": "7.2.2", "pydantic": "2.14.3", "pydantic-core": "2.50.4", "pygments": "2.21.0",'
    ' "pyyaml": "6.0.3", "regex": "2026.11.15", "rich": "15.0.0", "safetensors": "0.8.0", "setuptools": "84.2.1",'
    ' "shellingham": "1.5.4", "sympy": "1.14.0", "tokenizers": "0.23.3", "torch": "2.13.0+cpu", "tqdm": "4.70.1",'
    ' "transformers": "5.23.0", "truststore": "0.10.5", "typer": "0.29.2", "typing-extensions": "4.16.0", "typing-inspection": "0.4.5"}'
)
NEWEST = "torch2.13.0-tf5.23.0-acc1.15.0-peft0.19.1-bnb0.49.2"


def cell_id(tf: str, acc: str) -> str:
    return f"torch2.13.0-tf{tf}-acc{acc}-peft0.19.1-bnb0.49.2"


def outcome(tf: str, acc: str, scenario: str, status: Status, signature: str = "", repeat: int = 0) -> Outcome:
    failing = status == Status.ERROR
    load = signature == SIG
    return Outcome(
        RUN,
        cell_id(tf, acc),
        scenario,
        repeat,
        status,
        message=(
            "TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'" if load else signature.split(" @ ")[0]
        )
        if failing
        else "",
        signature=signature,
        signature_family=("6c43cf7c6f32" if load else "0d1e2f3a4b5c") if failing else "",
        blamed_library=signature.split(" @ ")[1].split("/")[0] if failing else "",
        exception_type=signature.split(":")[0] if failing else "",
        traceback=TRACEBACK.format(env=ENV.format(tf=tf.replace(".", "-"), acc=acc.replace(".", "-"))) if load else "",
        seconds=5.1,
        started_at="2026-11-21T14:05:02",
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "compat.duckdb"
    settings = {"python": "3.11", "find_links": ["$PIP_FIND_LINKS"], "index_url": "", "extra_index_urls": [], "no_index": False}
    with Store(path) as store:
        store.ensure_run(RUN, "matrix.toml", "[axes]", settings, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu", "gpus": []})
        # what a sweep stores: the index's releases of each axis (nothing unbuilt lies between these)
        store.record_releases(
            RUN, {"accelerate": [(v, None) for v in ("1.13.0", "1.14.0", "1.15.0")], "transformers": [("5.6.2", None), ("5.23.0", None)]}
        )
        for tf in ("5.6.2", "5.23.0"):
            for acc in ("1.13.0", "1.14.0", "1.15.0"):
                versions = {"torch": "2.13.0", "transformers": tf, "accelerate": acc, "peft": "0.19.1", "bitsandbytes": "0.49.2"}
                freeze = {**FREEZE, "transformers": tf, "accelerate": acc}
                requirements = [f"{k}=={v}" for k, v in versions.items()]
                store.record_cell(
                    CellRecord(RUN, cell_id(tf, acc), "3.11", versions, requirements, freeze, {}, {}, "ready", "", 41.0, False)
                )
                for repeat in (0, 1):
                    failing = acc == "1.13.0"
                    store.add_outcome(outcome(tf, acc, LOAD, Status.ERROR if failing else Status.PASS, SIG if failing else "", repeat))
                store.add_outcome(outcome(tf, acc, LORA, Status.PASS))
                store.add_outcome(outcome(tf, acc, BROAD, Status.ERROR, CLIPPABLE))
    return path


def test_pin_writes_requirements_constraints_and_a_lock(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "pin"
    proc = run_cli("pin", "--db", str(db), "--scenario", LOAD, "--scenario", LORA, "--fix", "torch=2.13.0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rank = "rank: transformers, peft, accelerate, bitsandbytes, torch"
    assert lines[0] == f"pin for {LOAD}, {LORA} ({rank}; constraints: torch==2.13.0, machine cpu)"
    assert lines[1:6] == [
        "  torch         2.13.0+cpu",
        "  transformers  5.23.0",
        "  accelerate    1.15.0",
        "  peft          0.19.1",
        "  bitsandbytes  0.49.2",
    ]
    assert f"evidence: cell {NEWEST}; run {RUN}; 2026-11-21; on cpu · linux-x86_64 · Python 3.11" in lines
    assert "4 of 6 candidate cell(s) pass every chosen scenario" in lines
    assert any(
        line.startswith("pip install ")
        and line.endswith("torch==2.13.0+cpu transformers==5.23.0 accelerate==1.15.0 peft==0.19.1 bitsandbytes==0.49.2")
        for line in lines
    )
    assert any(line.startswith("uv pip install ") for line in lines)

    requirements = [line for line in (out / "requirements.txt").read_text().splitlines() if not line.startswith(("#", "--"))]
    assert requirements == ["torch==2.13.0+cpu", "transformers==5.23.0", "accelerate==1.15.0", "peft==0.19.1", "bitsandbytes==0.49.2"]
    constraints = [line for line in (out / "constraints.txt").read_text().splitlines() if not line.startswith("#")]
    assert constraints == [f"{k}=={v}" for k, v in sorted(FREEZE.items())]

    lock = out / "pylock.toml"
    if lock.exists():  # uv needs the index (and the torch CPU wheel's folder) to write it
        packages = {p["name"]: p["version"] for p in tomllib.loads(lock.read_text())["packages"]}
        assert packages == FREEZE  # the transitive versions are the ones that passed
        assert f"wrote {out / 'requirements.txt'}, {out / 'constraints.txt'}, {lock}" in lines
    else:
        [note] = [line for line in lines if line.startswith("pylock.toml not written: ")]
        assert "uv could not resolve" in note


def test_pin_ranks_and_explains_what_it_left_out(db: Path) -> None:
    # accelerate 1.15.0 and 1.14.0 both pass: held at 1.14.0 the newer one is not a candidate
    proc = run_cli("pin", "--db", str(db), "--scenario", LOAD, "--fix", "accelerate<1.15", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["versions"]["accelerate"] == "1.14.0" and result["versions"]["transformers"] == "5.23.0"
    assert result["excluded"] == []
    assert result["install"]["pip"].endswith("accelerate==1.14.0 peft==0.19.1 bitsandbytes==0.49.2")
    # only 1.13.0 allowed: nothing passes, and the load scenario is why
    proc = run_cli("pin", "--db", str(db), "--scenario", LOAD, "--scenario", LORA, "--fix", "accelerate==1.13.0")
    assert proc.returncode == 1, proc.stderr
    assert f"nothing passes: {LOAD} does not pass in any of the 2 candidate cell(s)" in proc.stdout
    assert f"error: {SIG} (2 cell(s), e.g. {cell_id('5.23.0', '1.13.0')})" in proc.stdout


def test_pin_nothing_passes_names_the_blocking_scenario(db: Path) -> None:
    proc = run_cli("pin", "--db", str(db), "--scenario", LOAD, "--scenario", BROAD)
    assert proc.returncode == 1
    assert f"nothing passes: {BROAD} does not pass in any of the 6 candidate cell(s)" in proc.stdout
    assert f"  {LOAD}: does not pass in 2 of 6 cell(s)" in proc.stdout


def test_report_for_a_signature(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "issue.md"
    proc = run_cli("report", "--db", str(db), "--signature", "_is_hf_initialized", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {out} (")
    body = out.read_text()
    assert "**File at:** huggingface/accelerate" in body
    assert "**Cross-link:** huggingface/peft (`peft/peft_model.py:load_adapter`)" in body
    assert "| torch | **transformers** | **accelerate** | peft | bitsandbytes |" in body
    assert f"| 2.13.0+cpu | **5.23.0** | **1.13.0** | 0.19.1 | 0.49.2 | **fails** (error) 2/2 | `{cell_id('5.23.0', '1.13.0')}` |" in body
    machine = "cpu · linux-x86_64 · Python 3.11"
    assert f"- `{LOAD}`: fixed in accelerate 1.14.0 (after 1.13.0), on 2 line(s) of the matrix ({machine}):" in body
    assert "  - with torch 2.13.0, transformers 5.23.0, peft 0.19.1, bitsandbytes 0.49.2" in body
    assert f"harness sweep --matrix matrix.toml --cell {cell_id('5.23.0', '1.13.0')} --scenario {LOAD}" in body
    assert f"python scenarios/{LOAD}.py" in body
    assert '  File "site-packages/accelerate/utils/modeling.py", line 363, in set_module_tensor_to_device' in body
    assert "TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'\n```" in body
    # the same report by family hash, to stdout
    by_family = run_cli("report", "--db", str(db), "--signature", "6c43cf7c6f32")
    assert by_family.returncode == 0 and by_family.stdout == body


def test_report_for_a_cell(db: Path) -> None:
    proc = run_cli("report", "--db", str(db), "--cell", cell_id("5.6.2", "1.13.0"))
    assert proc.returncode == 0, proc.stderr
    assert "**Suggested title:** 2 of 3 scenarios fail with torch 2.13.0+cpu, transformers 5.6.2, accelerate 1.13.0" in proc.stdout
    assert f"`{cell_id('5.6.2', '1.13.0')}` ← this cell |" in proc.stdout
    assert "**File at:** huggingface/peft" in proc.stdout and "**File at:** huggingface/accelerate" in proc.stdout


#: (arguments after the subcommand and --db, fragments of the one-line message); {db} is the fixture's file
BAD = [
    pytest.param(
        ["pin", "--scenario", "no_such_scenario"],
        ["no outcomes for scenario(s) 'no_such_scenario'", f"stored: {BROAD}"],
        id="unknown-scenario",
    ),
    pytest.param(["pin"], ["pass the scenarios that must pass with --scenario", LOAD], id="no-scenario"),
    pytest.param(
        ["pin", "--scenario", LOAD, "--fix", "torch=2.12.0"],
        ["--fix torch==2.12.0: no stored cell", "2.13.0+cpu"],
        id="fix-matches-nothing",
    ),
    pytest.param(["pin", "--scenario", LOAD, "--fix", "tokenizer=1.0"], ["'tokenizer' is not an axis"], id="fix-unknown-axis"),
    pytest.param(["pin", "--scenario", LOAD, "--fix", "torch=latest"], ["neither a version nor a specifier"], id="fix-bad-version"),
    pytest.param(["pin", "--scenario", LOAD, "--gpu", "H200"], ["--gpu 'H200' matches no stored run; stored: cpu"], id="gpu-never-seen"),
    pytest.param(["pin", "--scenario", LOAD, "--rank", "transformers,pefft"], ["unknown axis(es) 'pefft'"], id="rank-typo"),
    pytest.param(["report", "--signature", "KeyError"], ["no failing outcome", "matching 'KeyError'"], id="signature-not-found"),
    pytest.param(
        ["report", "--signature", "error"], ["matches 2 signatures; pass one family hash", "6c43cf7c6f32"], id="signature-ambiguous"
    ),
    pytest.param(["report"], ["pass exactly one of --signature"], id="neither"),
    pytest.param(["report", "--cell", "torch2.13.0-tf5.6.2-acc1.13.0"], ["no outcomes for cell", "did you mean"], id="unknown-cell"),
]


@pytest.mark.parametrize(("args", "fragments"), BAD)
def test_bad_input_is_one_line_and_exit_2(db: Path, args: list[str], fragments: list[str]) -> None:
    proc = run_cli(args[0], "--db", str(db), *args[1:])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("command", [["pin", "--scenario", LOAD], ["report", "--cell", "x"]])
def test_missing_database_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nope.duckdb"
    proc = run_cli(command[0], "--db", str(missing), *command[1:])
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"harness: error: database {str(missing)!r} does not exist; run a sweep first or pass --db with an existing results file"
    )
    assert not missing.exists()
