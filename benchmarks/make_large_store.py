"""Write a large, realistic results file for the dashboard benchmark (default: 100,000 outcomes).

    .venv/bin/python benchmarks/make_large_store.py [--out results/large.duckdb] [--outcomes 100000] [--seed 7]
    .venv/bin/python benchmarks/make_large_store.py --tests 20000 --cells 20 --out results/suite.duckdb

With `--tests N --cells M`, a team's pytest suite swept as the checks instead (`harness sweep
--tests`): N node ids in M cells, one CPU run, N × M outcomes. The ids are spread over ~N/100
files under tests/<area>/, each with a few classes and module-level functions, many
parametrized (`tests/quant/test_linear4bit.py::TestLinear4bit::test_forward[cpu-float16]`).
About 5% of the tests fail somewhere, with a handful of signatures: one introduced in
transformers 5.20.0, one fixed in accelerate 1.14.0, one introduced in peft 0.21.2, one that
fails everywhere (the test's own assertion); a few crash or time out in one cell, ~3% skip
(`not_applicable`), a few xfail, rare flaky errors. Transitions are computed by `attribute`
over the tests that fail somewhere (a test that always passes has none).

The shapes follow what real sweeps store: ~2,400 cells (4 torch × 10 transformers ×
4 accelerate × 5 peft × 3 bitsandbytes), 14 scenarios, CPU runs and GPU runs (H100, H200)
spread over six months, repeats of 1 or 3, failures driven by version rules taken from the
forum thread (the `_is_hf_initialized` TypeError until accelerate 1.14, Gemma 4's shared-KV
`KeyError` in transformers 5.6, the clippable-linear ValueError in every peft, ...), rare
flaky failures, timeouts and OOMs on GPU, unresolvable cells, full freezes, tracebacks and
output tails of realistic size, metrics, a few bisection runs (`bisect-…`), and the
transitions that `harness attribute` computes from all of it.

Schema and transitions go through `harness.storage.store.Store`; the bulk of the outcome rows is
appended with DuckDB's relational API (`insert_into`), because one `add_outcome` call per row
would take minutes for a file that only a benchmark needs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis.outcome import CellRecord
from harness.storage import queries
from harness.storage.store import OUTCOME_COLUMNS, Store
from harness.workflows.answering import answer


def _attribute(store: Store) -> int:
    """Store the answers `harness attribute --offline` stores: over the current state, with the
    releases the runs listed. Attributing with only the versions seen in the rows made gaps
    invisible, and stored exact answers where the file's lists say a release between was not built."""
    return store.replace_transitions(answer(store, loud=True).to_rows(""))


AXES: dict[str, list[str]] = {
    "torch": ["2.10.0", "2.11.0", "2.12.0", "2.13.0"],
    "transformers": ["5.5.0", "5.5.4", "5.6.0", "5.6.2", "5.8.1", "5.10.4", "5.11.0", "5.15.2", "5.20.0", "5.23.0"],
    "accelerate": ["1.12.0", "1.13.0", "1.14.0", "1.15.0"],
    "peft": ["0.18.0", "0.19.0", "0.19.1", "0.20.0", "0.21.2"],
    "bitsandbytes": ["0.48.2", "0.49.2", "0.50.2"],
}
SHORT = {"torch": "torch", "transformers": "tf", "accelerate": "acc", "peft": "peft", "bitsandbytes": "bnb"}

SCENARIOS = [
    "bnb4bit_cpu_state_dict_roundtrip",
    "gemma4_bnb4bit_towers_forward",
    "gemma4_device_map_unknown_key",
    "gemma4_lora_broad_targets",
    "gemma4_lora_inner_linear",
    "gemma4_lora_merge_parity",
    "gemma4_lora_merge_parity_4bit",
    "gemma4_peft_device_map_shared_kv",
    "gemma4_peft_split_4bit_generate",
    "gemma4_peft_split_4bit_load",
    "gemma4_peft_split_4bit_load_double_quant",
    "gpu_gemma4_qlora_train_step",
    "gpu_gemma4_4bit_generate_cuda",
    "gpu_gemma4_split_cuda_cpu_generate",
]
GPU_ONLY = {s for s in SCENARIOS if s.startswith("gpu_")}

HOSTS = [
    {"hostname": "ci-cpu-1", "platform": "linux-x86_64", "python": "3.11.11", "cpus": 2, "gpu_count": 0, "gpu": "cpu", "gpus": []},
    {
        "hostname": "runner-h100",
        "platform": "linux-x86_64",
        "python": "3.12.3",
        "cpus": 16,
        "gpu_count": 1,
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory.total": "81559 MiB", "compute_cap": "9.0", "driver_version": "580.95.05"}],
    },
    {
        "hostname": "runner-h200",
        "platform": "linux-x86_64",
        "python": "3.12.3",
        "cpus": 16,
        "gpu_count": 1,
        "gpu": "NVIDIA H200",
        "gpus": [{"name": "NVIDIA H200", "memory.total": "143771 MiB", "compute_cap": "9.0", "driver_version": "580.95.05"}],
    },
]

OTHER_PACKAGES = {
    "certifi": "2026.7.22",
    "filelock": "3.20.0",
    "fsspec": "2026.3.0",
    "huggingface-hub": "1.4.1",
    "jinja2": "3.1.6",
    "markupsafe": "3.0.3",
    "mpmath": "1.3.0",
    "networkx": "3.5",
    "numpy": "2.3.4",
    "packaging": "25.0",
    "psutil": "7.1.3",
    "pyyaml": "6.0.3",
    "regex": "2025.11.3",
    "requests": "2.32.5",
    "safetensors": "0.7.0",
    "sympy": "1.14.0",
    "tokenizers": "0.22.1",
    "tqdm": "4.67.1",
    "typing-extensions": "4.15.0",
    "urllib3": "2.5.0",
}


def vt(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


@dataclass(frozen=True)
class Bug:
    """A failure that version rules decide: which scenarios, when, and what it looks like."""

    scenarios: frozenset[str]
    status: str
    exception_type: str
    message: str
    library: str
    frame: str  # library/path.py:function
    when: Any  # (versions, host) -> bool

    @property
    def signature(self) -> str:
        head = f"{self.exception_type}: {self.message}" if self.exception_type else self.message
        return f"{head} @ {self.frame}" if self.frame else head

    @property
    def family(self) -> str:
        return hashlib.sha1(self.signature.encode()).hexdigest()[:12]


def _bugs() -> list[Bug]:
    split = frozenset({"gemma4_peft_split_4bit_load", "gemma4_peft_split_4bit_generate", "gemma4_peft_split_4bit_load_double_quant"})
    return [
        Bug(
            split | {"gpu_gemma4_split_cuda_cpu_generate"},
            "error",
            "TypeError",
            "<class>.__new__() got an unexpected keyword argument '_is_hf_initialized'",
            "accelerate",
            "accelerate/utils/modeling.py:set_module_tensor_to_device",
            lambda v, h: vt(v["accelerate"]) < (1, 14) and vt(v["bitsandbytes"]) < (0, 50),
        ),
        Bug(
            frozenset({"gemma4_peft_device_map_shared_kv"}),
            "error",
            "KeyError",
            "<key>",
            "transformers",
            "transformers/models/gemma4/modeling_gemma4.py:forward",
            lambda v, h: (5, 6) <= vt(v["transformers"]) < (5, 10),
        ),
        Bug(
            frozenset({"gemma4_lora_broad_targets"}),
            "error",
            "ValueError",
            "Target module Gemma4ClippableLinear(...) is not supported. Currently, only the following modules are supported: ...",
            "peft",
            "peft/tuners/lora/model.py:_create_new_module",
            lambda v, h: True,
        ),
        Bug(
            frozenset({"gemma4_peft_split_4bit_generate"}),
            "error",
            "KeyError",
            "<key>",
            "accelerate",
            "accelerate/utils/offload.py:__getitem__",
            lambda v, h: vt(v["accelerate"]) >= (1, 14) and h["gpu_count"] == 0,
        ),
        Bug(
            frozenset({"gemma4_bnb4bit_towers_forward"}),
            "error",
            "TypeError",
            "torch.finfo() requires a floating point input type. Use torch.iinfo to handle '<name>'",
            "bitsandbytes",
            "bitsandbytes/nn/modules.py:forward",
            lambda v, h: vt(v["bitsandbytes"]) < (0, 50),
        ),
        Bug(
            frozenset({"gemma4_lora_merge_parity_4bit"}),
            "fail",
            "",
            "check failed: merged 4-bit output differs from adapter output (max abs logit diff <n>)",
            "",
            "",
            lambda v, h: h["gpu_count"] == 0 or vt(v["peft"]) < (0, 20),
        ),
        Bug(
            frozenset({"bnb4bit_cpu_state_dict_roundtrip"}),
            "fail",
            "",
            "check failed: output changes by <n> after state_dict()",
            "",
            "",
            lambda v, h: h["gpu_count"] == 0 and vt(v["bitsandbytes"]) < (0, 50),
        ),
        Bug(
            frozenset({"gemma4_device_map_unknown_key"}),
            "fail",
            "",
            "check failed: `model.multi_modal_projector` names no module, nothing reported it",
            "",
            "",
            lambda v, h: vt(v["accelerate"]) < (1, 15),
        ),
        Bug(
            frozenset({"gemma4_peft_split_4bit_load", "gemma4_peft_split_4bit_load_double_quant"}),
            "error",
            "ValueError",
            "The device_map provided does not give any device for the following parameters: <names>",
            "transformers",
            "transformers/modeling_utils.py:_load_pretrained_model",
            lambda v, h: v["transformers"] == "5.5.0",
        ),
        Bug(
            frozenset({"gemma4_lora_inner_linear", "gemma4_lora_merge_parity"}),
            "error",
            "ImportError",
            "cannot import name 'HybridCache' from 'transformers.cache_utils'",
            "peft",
            "peft/peft_model.py:<module>",
            lambda v, h: v["peft"] == "0.18.0" and vt(v["transformers"]) >= (5, 20),
        ),
        Bug(
            frozenset({"gpu_gemma4_qlora_train_step"}),
            "oom",
            "torch.OutOfMemoryError",
            "CUDA out of memory. Tried to allocate <n> GiB. GPU <n> has a total capacity of <n> GiB",
            "torch",
            "torch/utils/checkpoint.py:forward",
            lambda v, h: "H100" in h["gpu"] and vt(v["torch"]) < (2, 12),
        ),
        Bug(
            frozenset({"gpu_gemma4_4bit_generate_cuda"}),
            "crash",
            "",
            "crash: killed by SIGSEGV",
            "",
            "",
            lambda v, h: v["torch"] == "2.10.0" and v["bitsandbytes"] == "0.50.2",
        ),
        Bug(
            frozenset({"gpu_gemma4_split_cuda_cpu_generate"}),
            "timeout",
            "",
            "timeout: no result within <n> s",
            "",
            "",
            lambda v, h: vt(v["accelerate"]) == (1, 12, 0) and vt(v["transformers"]) >= (5, 15),
        ),
    ]


BUGS = _bugs()
FLAKY = Bug(
    frozenset(SCENARIOS),
    "error",
    "RuntimeError",
    "CUDA error: an illegal memory access was encountered",
    "bitsandbytes",
    "bitsandbytes/functional.py:dequantize_4bit",
    lambda v, h: True,
)


def cell_id(versions: dict[str, str]) -> str:
    return "-".join(f"{SHORT[a]}{versions[a]}" for a in AXES)


def all_cells() -> list[dict[str, str]]:
    cells: list[dict[str, str]] = [{}]
    for axis, values in AXES.items():
        cells = [{**c, axis: v} for c in cells for v in values]
    return cells


def unresolvable(v: dict[str, str]) -> str:
    """The resolver's words for combinations that cannot be installed together ('' when they can)."""
    if v["torch"] == "2.10.0" and vt(v["transformers"]) >= (5, 20):
        return f"Because transformers=={v['transformers']} depends on torch>=2.11 and you require torch==2.10.0, we can conclude ..."
    if v["accelerate"] == "1.12.0" and vt(v["peft"]) >= (0, 21):
        return f"Because peft=={v['peft']} depends on accelerate>=1.13.0 and you require accelerate==1.12.0, we can conclude ..."
    return ""


def traceback_text(bug: Bug, rng: random.Random) -> str:
    if not bug.exception_type or bug.status in ("fail", "crash", "timeout"):
        return ""
    frames = [
        ("scenarios/{s}.py", 42, "<module>"),
        ("peft/peft_model.py", 545, "from_pretrained"),
        ("peft/peft_model.py", 1402, "load_adapter"),
        ("accelerate/big_modeling.py", 502, "dispatch_model"),
        ("accelerate/hooks.py", 177, "add_hook_to_module"),
        ("accelerate/hooks.py", 341, "init_hook"),
    ]
    path, _, func = bug.frame.partition(":")
    frames.append((path, rng.randint(100, 2000), func))
    lines = ["Traceback (most recent call last):"]
    for file, line, fn in frames:
        lines.append(f'  File "/work/.nox/cell/lib/python3.11/site-packages/{file}", line {line}, in {fn}')
        lines.append("    " + rng.choice(["module._hf_hook.init_hook(module)", "set_module_tensor_to_device(...)", "return fn(*a, **kw)"]))
    lines.append(f"{bug.exception_type}: {bug.message.replace('<key>', str(rng.randint(0, 40)))}")
    return "\n".join(lines)


def output_tail(status: str, rng: random.Random) -> str:
    lines = [f"[harness] torch imported in {rng.uniform(5, 12):.2f} s"]
    lines += [f"step {i}: loss {rng.uniform(0.5, 3):.4f}" for i in range(rng.randint(5, 40))]
    if status != "pass":
        lines += ["Warning: offloading some layers to disk", "RESULT " + status]
    return "\n".join(lines)


def metrics(scenario: str, status: str, host: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    m: dict[str, Any] = {"seconds": round(rng.uniform(1, 8), 3), "peak_rss_mib": round(rng.uniform(900, 4200), 1)}
    if "parity" in scenario:
        m["max_abs_logit_diff"] = round(rng.uniform(0.3, 0.7), 4) if status == "fail" else round(rng.uniform(1e-6, 1e-3), 7)
        m["token_agreement"] = round(rng.uniform(0, 0.5), 2) if status == "fail" else 1.0
    if host["gpu_count"]:
        m["cuda_peak_mib"] = round(rng.uniform(2000, 60000), 1)
    return m


def decide(scenario: str, versions: dict[str, str], host: dict[str, Any], rng: random.Random) -> tuple[str, Bug | None]:
    if scenario in GPU_ONLY and host["gpu_count"] == 0:
        return "not_applicable", None
    for bug in BUGS:
        if scenario in bug.scenarios and bug.when(versions, host):
            return bug.status, bug
    if rng.random() < 0.004:
        return "error", FLAKY
    return "pass", None


def generate(out: Path, total: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    if out.exists():
        out.unlink()
    cells = all_cells()
    rows: list[tuple[Any, ...]] = []
    start = datetime(2026, 5, 4, 8, 0, 0)
    n_runs = 0
    with Store(out) as store:
        store.con.begin()  # thousands of cell records: one transaction, not one each
        while len(rows) < total:
            host = HOSTS[n_runs % len(HOSTS)]
            run_id = f"r-{hashlib.sha1(f'{seed}-{n_runs}'.encode()).hexdigest()[:10]}"
            begun = start + timedelta(days=n_runs * 11, hours=rng.randint(0, 12))
            repeats = 3 if n_runs % 4 == 3 else 1
            chosen = rng.sample(cells, rng.randint(500, 900))
            store.ensure_run(run_id, "matrix.toml", "# generated", {"repeats": repeats}, "0.1.0", host)
            n_runs += 1
            moment = begun
            for versions in chosen:
                if len(rows) >= total:
                    break
                cid = cell_id(versions)
                problem = unresolvable(versions)
                freeze = {**OTHER_PACKAGES, **versions}
                store.record_cell(
                    CellRecord(
                        run_id,
                        cid,
                        str(host["python"]),
                        dict(versions),
                        [f"{a}=={v}" for a, v in versions.items()],
                        {} if problem else freeze,
                        {},
                        {},
                        "unresolvable" if problem else "ready",
                        problem,
                        0.0 if rng.random() < 0.7 else round(rng.uniform(4, 90), 2),
                        False,
                    )
                )
                for scenario in SCENARIOS:
                    for repeat in range(repeats):
                        if len(rows) >= total:
                            break
                        moment += timedelta(seconds=rng.uniform(2, 20))
                        rows.append(_row(run_id, cid, scenario, repeat, versions, host, problem, moment, rng))
        store.con.commit()
        # Bisection rows first, so that cutting at `total` keeps them and the count stays exact.
        rows = (_bisections(store, rng, start + timedelta(days=n_runs * 11)) + rows)[:total]
        _insert(store, rows)
        written = _attribute(store)
        count = queries.row_count(store, "outcomes")
    return {"outcomes": count, "runs": n_runs, "transitions": written, "cells": len(cells), "scenarios": len(SCENARIOS)}


def _row(
    run_id: str,
    cid: str,
    scenario: str,
    repeat: int,
    versions: dict[str, str],
    host: dict[str, Any],
    problem: str,
    moment: datetime,
    rng: random.Random,
) -> tuple[Any, ...]:
    if problem:
        return (
            run_id,
            cid,
            scenario,
            repeat,
            "unresolvable",
            problem,
            "unresolvable: " + problem.split(",")[0],
            "",
            "",
            "",
            "",
            "",
            0.0,
            "{}",
            moment,
        )
    status, bug = decide(scenario, versions, host, rng)
    if bug is None:
        message = "requires a GPU" if status == "not_applicable" else ""
        tail = "" if status == "not_applicable" else output_tail(status, rng)
        m = {} if status == "not_applicable" else metrics(scenario, status, host, rng)
        return (
            run_id,
            cid,
            scenario,
            repeat,
            status,
            message,
            "",
            "",
            "",
            "",
            "",
            tail,
            round(rng.uniform(2, 9), 2),
            json.dumps(m),
            moment,
        )
    return (
        run_id,
        cid,
        scenario,
        repeat,
        status,
        bug.message,
        bug.signature,
        bug.family,
        bug.library,
        bug.exception_type,
        traceback_text(bug, rng),
        output_tail(status, rng),
        round(rng.uniform(2, 300 if status == "timeout" else 12), 2),
        json.dumps(metrics(scenario, status, host, rng)),
        moment,
    )


def _bisections(store: Store, rng: random.Random, when: datetime) -> list[tuple[Any, ...]]:
    """Two bisections stored as a real `harness bisect` stores them: run `bisect-<scenario>-<axis>`."""
    rows = []
    host = HOSTS[0]
    base = {"torch": "2.13.0", "transformers": "5.6.2", "accelerate": "1.13.0", "peft": "0.19.1", "bitsandbytes": "0.49.2"}
    for scenario, axis, probes in [
        ("gemma4_peft_split_4bit_load", "accelerate", ["1.13.0", "1.14.0", "1.13.1"]),
        ("gemma4_peft_device_map_shared_kv", "transformers", ["5.8.1", "5.10.4", "5.9.0", "5.9.1"]),
    ]:
        run_id = f"bisect-{scenario}-{axis}"
        store.ensure_run(run_id, "matrix.toml", "# generated", {}, "0.1.0", host)
        for value in probes:
            versions = {**base, axis: value}
            cid = cell_id(versions)
            store.record_cell(
                CellRecord(run_id, cid, "3.11.11", versions, [], {**OTHER_PACKAGES, **versions}, {}, {}, "ready", "", 30.0, False)
            )
            when += timedelta(minutes=3)
            rows.append(_row(run_id, cid, scenario, 0, versions, host, "", when, rng))
    return rows


def _insert(store: Store, rows: list[tuple[Any, ...]]) -> None:
    import pyarrow as pa

    # rows hold the columns in OUTCOME_COLUMNS' order; a later column they lack (test_id) stays NULL
    columns = list(OUTCOME_COLUMNS)[: len(rows[0])]
    table = pa.table({name: [r[i] for r in rows] for i, name in enumerate(columns)})
    store.con.register("batch", table)
    store.con.execute(f"INSERT INTO outcomes ({', '.join(columns)}) SELECT * FROM batch")
    store.con.unregister("batch")


# -- a team's test suite as the checks -----------------------------------------------------------
SUITE_AXES = {  # the first 20 cells: 5 transformers × 2 accelerate × 2 peft, torch and bitsandbytes held
    "torch": ["2.13.0", "2.12.0", "2.11.0", "2.10.0"],
    "accelerate": ["1.13.0", "1.14.0"],
    "peft": ["0.19.1", "0.21.2"],
    "transformers": ["5.6.2", "5.10.4", "5.15.2", "5.20.0", "5.23.0"],
}
AREAS = ["models", "peft", "quant", "trainer", "generation", "utils", "pipelines", "tokenization"]
WORDS = [
    "attention", "linear4bit", "lora", "merge", "offload", "device_map", "generate", "cache", "rope", "embedding",
    "save_load", "dispatch", "hooks", "sharding", "checkpoint", "adapter", "bnb", "tokenizer", "trainer", "optim",
    "gemma4", "llama", "mistral", "qwen", "vision", "audio", "mixed_precision", "safetensors", "hub", "config",
]  # fmt: skip
PARAMS = [
    ["cpu-float32", "cpu-float16", "cpu-bfloat16"],
    ["4bit", "8bit"],
    ["True", "False"],
    ["llama", "gemma4", "mistral", "qwen2"],
    ["1", "2", "8", "64"],
]
#: (signature, status, exception type, blamed library, who is hit, in which cells)
SUITE_BUGS = [
    (
        "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward",
        "error",
        "KeyError",
        "transformers",
        lambda node: ("gemma4" in node.lower() and "attention" in node.lower()) or "TestGemma4Cache" in node,
        lambda v: vt(v["transformers"]) >= (5, 20),
    ),
    (
        "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized' @ "
        "accelerate/utils/modeling.py:set_module_tensor_to_device",
        "error",
        "TypeError",
        "accelerate",
        lambda node: node.startswith("tests/quant/") and ("offload" in node or "device_map" in node or "4bit" in node),
        lambda v: vt(v["accelerate"]) < (1, 14),
    ),
    (
        "AttributeError: 'LoraLayer' object has no attribute 'merge_weights' @ peft/tuners/lora/layer.py:merge",
        "error",
        "AttributeError",
        "peft",
        lambda node: "merge" in node and node.startswith(("tests/peft/", "tests/models/")),
        lambda v: v["peft"] == "0.21.2",
    ),
    (
        "AssertionError: Tensor-likes are not close! Mismatched elements: <n> / <n> (<n>%)",
        "fail",
        "AssertionError",
        "",
        lambda node: "rope" in node and "bfloat16" in node,
        lambda v: True,
    ),
]


def suite_cells(count: int) -> list[dict[str, str]]:
    cells: list[dict[str, str]] = [{"bitsandbytes": "0.49.2"}]
    for axis, values in reversed(SUITE_AXES.items()):  # transformers varies fastest, torch slowest
        cells = [{**c, axis: v} for v in values for c in cells]
    cells = sorted(cells, key=lambda c: [SUITE_AXES[a].index(c[a]) for a in SUITE_AXES])[:count]
    return [{a: c[a] for a in AXES} for c in cells]


def node_ids(count: int, rng: random.Random) -> list[str]:
    """`count` pytest node ids over ~count/100 files: classes with methods and module-level functions, many parametrized."""
    ids: dict[str, None] = {}  # ordered, and a membership test in O(1)
    n_files = max(1, round(count / 100))
    for f in range(n_files):
        area = AREAS[f % len(AREAS)]
        words = rng.sample(WORDS, 2)
        path = f"tests/{area}/test_{words[0]}_{words[1]}_{f:03d}.py"
        kinds = rng.sample(["", "Integration", "Slow", "Cpu", "Quantized"], rng.randint(0, 4))
        classes = [f"Test{''.join(w.title() for w in rng.choice(WORDS).split('_'))}{kind}" for kind in kinds]
        owners = [*classes, ""]  # "" holds the module-level functions
        per_file = count // n_files + (1 if f < count % n_files else 0)
        made = 0
        while made < per_file:
            owner = rng.choice(owners)
            name = f"test_{rng.choice(WORDS)}_{rng.randint(0, 99)}"
            base = f"{path}::{owner}::{name}" if owner else f"{path}::{name}"
            params = rng.choice([[""], [""], *PARAMS])
            for param in params[: per_file - made]:
                node = f"{base}[{param}]" if param else base
                if node not in ids:
                    ids[node] = None
                    made += 1
    return list(ids)


def suite_markers(node: str, skipped: bool, xfailing: bool) -> list[str]:
    """The pytest markers a node id's outcomes record (as the worker stores them, `parametrize` left out)."""
    marks = {"gpu"} if skipped else set()
    marks |= {"xfail"} if xfailing else set()
    marks |= {"slow"} if "Slow" in node or "Integration" in node else set()
    marks |= {"quant"} if node.startswith("tests/quant/") or "4bit" in node or "8bit" in node else set()
    return sorted(marks)


#: One outcome as the base of every night: (status, message, signature, blamed library, exception type, traceback).
Decision = tuple[str, str, str, str, str, str]
#: A signature the nights' own regressions carry (one per night: a change of the code under test).
REGRESSION = "AssertionError: nightly regression <n> @ tests/{area}:<module>"


def _suite_base(
    nodes: list[str], cells: list[dict[str, str]], rng: random.Random
) -> tuple[dict[tuple[str, str], Decision], set[str], set[str]]:
    """Every (cell, node id)'s outcome of the first night, drawn as one run of the suite always was."""
    skipped = {n for n in nodes if rng.random() < 0.03}
    xfailing = {n for n in nodes if rng.random() < 0.004} - skipped
    flaky = {n for n in nodes if rng.random() < 0.0005}
    crashing = set(rng.sample(nodes, 2))
    hung = rng.choice(nodes)
    base: dict[tuple[str, str], Decision] = {}
    for index, versions in enumerate(cells):
        cid = cell_id(versions)
        for node in nodes:
            rng.randint(5, 400)  # the draw the moment of each outcome took (keeps the one-night file as it was)
            status, message, bug = "pass", "", None
            if node in skipped:
                status, message = "not_applicable", "requires a CUDA GPU"
            elif node in xfailing:
                status, message = "xfail", "known issue #1234"
            elif node in crashing and index == 3:
                status, message = "crash", "crash: killed by SIGSEGV"
            elif node == hung and index == 7:
                status, message = "timeout", "no result after 120s; its worker was killed"
            else:
                bug = next((b for b in SUITE_BUGS if b[4](node) and b[5](versions)), None)
                if bug is None and node in flaky and rng.random() < 0.3:
                    bug = (
                        "RuntimeError: CUDA error: an illegal memory access was encountered",
                        "error",
                        "RuntimeError",
                        "torch",
                        None,
                        None,
                    )
                if bug is not None:
                    status, message = bug[1], bug[0].split(" @ ")[0]
            signature = bug[0] if bug else (message if status in ("crash", "timeout") else "")
            traceback = ""
            if bug is not None:
                path, function = node.split("::")[0], node.split("::")[-1].split("[")[0]
                traceback = (
                    "Traceback (most recent call last):\n"
                    f'  File "/work/suite/{path}", line {rng.randint(10, 400)}, in {function}\n'
                    f"    out = model(**inputs)\n{bug[0].split(' @ ')[0]}"
                )
            base[(cid, node)] = (status, message, signature, bug[3] if bug else "", bug[2] if bug else "", traceback)
    return base, skipped, xfailing


@dataclass
class Night:
    """One night's sweep of the suite: its run, when, whether the code under test changed, and every outcome."""

    run_id: str
    when: datetime
    code: str  # the digest of the code under test that night
    cells: list[dict[str, str]]
    state: dict[tuple[str, str], Decision]
    broken: str = ""  # a test file that failed to import that night: its tests not collected, one error per cell


#: The error of `--broken-file`'s file on the newest night: a syntax error the team's commit put in.
BROKEN_SIGNATURE = "SyntaxError: '(' was never closed (tests/serving/test_generate_matrix.py, line <n>)"
BROKEN_FILE = "tests/serving/test_generate_matrix.py"


def _nights(
    nodes: list[str],
    cells: list[dict[str, str]],
    base: dict[tuple[str, str], Decision],
    quiet: set[str],
    runs: int,
    drift: float,
    seed: int,
) -> list[Night]:
    """`runs` nights, oldest first, the newest ending at the one-night file's moment and run id.

    From one night to the next, with `drift` > 0, about `drift` of the outcomes change status: on
    a night the code under test changed (three nights in four), half of that share of passes
    regresses with that night's own signature, and the regressions of the code-change night
    before the last are fixed (a team's failures live a few nights, their count stays about
    steady); on any night, a twentieth of the share flips for that night only (flaky); every
    tenth night a new release arrives as a new cell (a copy of the newest transformers cell's
    outcomes). A night with `drift` 0 repeats the first."""
    rng = random.Random(seed * 1000 + 17)
    newest = datetime(2026, 11, 20, 9, 0, 0)
    state, flipped = dict(base), {}
    regressed: list[dict[tuple[str, str], Decision]] = []  # per code-change night: what it broke, and what it was
    cells = list(cells)
    nights: list[Night] = []
    code = "code-0"
    for n in range(1, runs + 1):
        run_id = f"suite-{seed}" if n == runs else f"suite-{seed}-n{n:02d}"
        when = newest - timedelta(days=runs - n)
        if n > 1 and drift:
            for key, decision in flipped.items():  # last night's flips come back
                state[key] = decision
            flipped = {}
            changed = n % 4 != 0
            if changed:
                code = f"code-{n}"
            keys = [k for k in state if k[1] not in quiet]
            if n % 10 == 0:
                newer = dict(cells[-1], transformers=f"5.{23 + n // 10}.0")
                cells.append(newer)
                template = cell_id(max(cells[:-1], key=lambda c: vt(c["transformers"])))
                state.update({(cell_id(newer), node): state[(template, node)] for node in nodes})
            if changed:
                if len(regressed) >= 2:  # fixed two code changes later
                    state.update(regressed.pop(0))
                passing = [k for k in keys if state[k][0] == "pass"]
                broken = {k: state[k] for k in rng.sample(passing, round(drift / 2 * len(keys)))}
                for key in broken:
                    state[key] = _drifted(state[key], key[1], n)
                regressed.append(broken)
            for key in rng.sample(keys, max(1, round(drift * len(keys) / 20))):
                flipped[key] = state[key]
                state[key] = _drifted(state[key], key[1], n)
        nights.append(Night(run_id, when, code, list(cells), dict(state)))
    return nights


def _drifted(decision: Decision, node: str, night: int) -> Decision:
    """A pass regresses (with night `night`'s own failure); a failure is fixed."""
    if decision[0] == "pass":
        signature = REGRESSION.format(area=node.split("/")[1]).replace("<n>", str(night))
        message = signature.split(" @ ")[0]
        return ("fail", message, signature, "", "AssertionError", f"Traceback (most recent call last):\n{message}")
    return ("pass", "", "", "", "", "")


def generate_suite(
    out: Path,
    tests: int,
    cells_wanted: int,
    seed: int,
    *,
    runs: int = 1,
    drift: float = 0.0,
    flat: bool = False,
    newest_only: bool = False,
    broken_file: int = 0,
) -> dict[str, Any]:
    """A team's suite swept `runs` nights into one file (`_nights`). By default each night is
    written and then settled as a fold settles it (the current state in `outcomes`, the spans of
    what came before in `history`), with what each night collected in each cell; `flat`: every
    night's rows in `outcomes`, as a harness from before the split kept them; `newest_only`: the
    newest night alone (the file to compare with). `broken_file`: one file holds this many of the
    tests (all passing), and on the newest night it fails to import."""
    rng = random.Random(seed)
    if out.exists():
        out.unlink()
    cells = suite_cells(cells_wanted)
    big = [f"{BROKEN_FILE}::test_generate[case{i:04d}]" for i in range(broken_file)]
    nodes = sorted(set(node_ids(tests - broken_file, rng)) | set(big))
    base, skipped, xfailing = _suite_base(nodes, cells, rng)
    marked = {n: json.dumps({"markers": m} if (m := suite_markers(n, n in skipped, n in xfailing)) else {}) for n in nodes}
    nights = _nights(nodes, cells, base, skipped | xfailing, runs, drift, seed)
    if broken_file:
        nights[-1].broken = BROKEN_FILE
    if newest_only:
        nights = nights[-1:]
    host = HOSTS[0]
    # each test file's content digest, as a sweep records it (the same every night: the tests do not change)
    files = {path: hashlib.sha1(path.encode()).hexdigest()[:12] for path in sorted({n.split("::")[0] for n in nodes})}
    if flat:
        con = _flat_file(out)
        for night in nights:
            _write_night_flat(con, night, nodes, marked, host, files)
        con.execute("CHECKPOINT")
        con.close()
        return {
            "outcomes": sum(len(n.state) for n in nights),
            "tests": len(nodes),
            "cells": len(nights[-1].cells),
            "failing": 0,
            "transitions": 0,
            "runs": len(nights),
        }
    with Store(out) as store:
        for night in nights:
            _write_night(store, night, nodes, marked, host, files)
        failing = {node for (_, node), d in nights[-1].state.items() if d[0] in ("fail", "error", "crash", "timeout")}
        failing |= {nights[-1].broken} if nights[-1].broken else set()
        written = _attribute(store)
        count = queries.row_count(store, "outcomes")
        kept = queries.row_count(store, "history")
    return {
        "outcomes": count, "history": kept, "tests": len(nodes), "cells": len(nights[-1].cells), "failing": len(failing),
        "transitions": written, "runs": len(nights),
    }  # fmt: skip


def _settings(night: Night, files: dict[str, str]) -> dict[str, Any]:
    """The run's settings as a sweep of a suite records them, with what its outcomes depend on."""
    inputs = {"scenarios": {}, "tests": {"config": "conftest-1", "files": files, "code": night.code}, "paths": {}}
    return {"tests": {"root": ".", "paths": ["tests/"]}, "inputs": inputs}


def _night_rows(night: Night, nodes: list[str], marked: dict[str, str], rng: random.Random) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    moment = night.when
    for versions in night.cells:
        cid = cell_id(versions)
        if night.broken:
            message = BROKEN_SIGNATURE.replace("<n>", "3")
            rows.append(
                (
                    night.run_id, cid, night.broken, 0, "error", message, BROKEN_SIGNATURE,
                    hashlib.sha1(BROKEN_SIGNATURE.encode()).hexdigest()[:12], "", "builtins.SyntaxError", message, "", 0.0, "{}", moment,
                )
            )  # fmt: skip
        for node in nodes:
            if night.broken and node.startswith(f"{night.broken}::"):
                continue  # not collected: its file failed to import
            moment += timedelta(milliseconds=rng.randint(5, 400))
            status, message, signature, blamed, exception, traceback = night.state[(cid, node)]
            rows.append(
                (
                    night.run_id, cid, node, 0, status, message, signature,
                    hashlib.sha1(signature.encode()).hexdigest()[:12] if signature else "",
                    blamed, exception, traceback, f"{node} {status.upper()}" if status != "pass" else "",
                    round(rng.uniform(0.01, 2.5), 3), marked[node], moment,
                )
            )  # fmt: skip
    return rows


def _cell_record(night: Night, versions: dict[str, str]) -> CellRecord:
    freeze = {**OTHER_PACKAGES, **versions, "pytest": "9.0.1"}
    pins = [f"{a}=={v}" for a, v in versions.items()]
    return CellRecord(night.run_id, cell_id(versions), "3.11.11", versions, pins, freeze, {}, {}, "ready", "", 2.0, False)


def _write_night(store: Store, night: Night, nodes: list[str], marked: dict[str, str], host: dict[str, Any], files: dict[str, str]) -> None:
    from harness.storage import collections
    from harness.storage.history import settle

    store.con.begin()
    store.ensure_run(night.run_id, "matrix.toml", "# generated: a pytest suite as the checks", _settings(night, files), "0.1.0", host)
    store.con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [night.when, night.run_id])
    for versions in night.cells:
        store.record_cell(_cell_record(night, versions))
    collected = [n for n in nodes if not (night.broken and n.startswith(f"{night.broken}::"))] + ([night.broken] if night.broken else [])
    errors = {night.broken: BROKEN_SIGNATURE} if night.broken else {}
    selection = {"paths": ["tests/"], "k": "", "m": ""}
    collections.write(
        store.con,
        [
            {"run_id": night.run_id, "cell_id": cell_id(v), "selection": selection, "tests": collected, "errors": errors}
            for v in night.cells
        ],
    )
    store.con.commit()
    _insert(store, _night_rows(night, nodes, marked, random.Random(night.run_id)))
    store.con.begin()
    settle(store.con)  # what the fold (or the nightly merge) does with a night's rows
    store.con.commit()


def _flat_file(out: Path) -> Any:
    """A results file as a harness before the split wrote it (migrations up to 0009): every run's rows in `outcomes`."""
    import duckdb

    from harness.storage.store_schema import MIGRATIONS

    con = duckdb.connect(str(out))
    con.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
    for name, sql in MIGRATIONS:
        if name >= "0010":
            break
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, now())", [name])
    return con


def _write_night_flat(
    con: Any, night: Night, nodes: list[str], marked: dict[str, str], host: dict[str, Any], files: dict[str, str]
) -> None:
    import pyarrow as pa

    from harness.storage.store_rows import Rows, insert_many
    from harness.storage.store_schema import CELL_COLUMNS, RUN_COLUMNS

    run = {
        "type": "run", "run_id": night.run_id, "started_at": night.when.isoformat(), "matrix_path": "matrix.toml",
        "matrix_text": "# generated: a pytest suite as the checks", "settings": _settings(night, files), "harness_version": "0.1.0",
        "host": host,
    }  # fmt: skip
    cells = [{"type": "cell", **asdict(_cell_record(night, v)), "built_at": night.when.isoformat()} for v in night.cells]
    rows = Rows.of([run, *cells])
    insert_many(con, "runs", RUN_COLUMNS, rows.runs.values())
    insert_many(con, "cells", CELL_COLUMNS, rows.cells.values())
    batch = _night_rows(night, nodes, marked, random.Random(night.run_id))
    columns = list(OUTCOME_COLUMNS)[: len(batch[0])]
    con.register("batch", pa.table({name: [r[i] for r in batch] for i, name in enumerate(columns)}))
    con.execute(f"INSERT INTO outcomes ({', '.join(columns)}) SELECT * FROM batch")
    con.unregister("batch")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/large.duckdb"))
    parser.add_argument("--outcomes", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tests", type=int, default=0, help="write a test suite's results instead: this many pytest node ids")
    parser.add_argument("--cells", type=int, default=20, help="with --tests: this many cells (at most 80)")
    parser.add_argument("--runs", type=int, default=1, help="with --tests: this many nightly runs in one file, the newest last")
    parser.add_argument(
        "--drift", type=float, default=0.0, help="with --runs: the share of outcomes that change status from one night to the next"
    )
    parser.add_argument(
        "--flat", action="store_true", help="with --runs: every night's rows in `outcomes`, as a harness before the history split kept them"
    )
    parser.add_argument(
        "--newest-only", action="store_true", help="with --runs: write only the newest night (the file to compare a history with)"
    )
    parser.add_argument(
        "--broken-file",
        type=int,
        default=0,
        help="with --tests: one test file holds this many tests, and fails to import on the newest night",
    )
    args = parser.parse_args()
    began = time.perf_counter()
    if args.tests:
        suite = generate_suite(
            args.out,
            args.tests,
            args.cells,
            args.seed,
            runs=args.runs,
            drift=args.drift,
            flat=args.flat,
            newest_only=args.newest_only,
            broken_file=args.broken_file,
        )
        kept = f", {suite['history']:,} history rows" if suite.get("history") else ""
        print(
            f"{args.out}: {suite['runs']} run(s), {suite['outcomes']:,} outcomes{kept}, {suite['tests']:,} tests × {suite['cells']} cells, "
            f"{suite['failing']:,} tests fail somewhere, {suite['transitions']:,} transitions "
            f"({time.perf_counter() - began:.1f} s, {args.out.stat().st_size / 2**20:.1f} MiB)"
        )
        return 0
    info = generate(args.out, args.outcomes, args.seed)
    print(
        f"{args.out}: {info['outcomes']} outcomes, {info['runs']} sweep runs + 2 bisections, {info['cells']} possible cells, "
        f"{info['scenarios']} scenarios, {info['transitions']} transitions ({time.perf_counter() - began:.1f} s, "
        f"{args.out.stat().st_size / 2**20:.1f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
