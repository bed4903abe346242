"""The inner-`.linear` workaround for LoRA on Gemma 4's multimodal towers.

Upstream: https://github.com/huggingface/peft/issues/3129

PEFT cannot wrap `Gemma4ClippableLinear` (see gemma4_lora_broad_targets.py), so the
thread's adapters target the `nn.Linear` inside it (`...q_proj.linear`) in the vision and
audio towers, and the plain projections in the language model. This scenario saves such
an adapter, loads it with PeftModel.from_pretrained, and checks that:

- LoRA layers landed in the language model and in both towers;
- the towers' LoRA changes their soft tokens (vision and audio separately);
- the adapter changes the logits, and a short greedy generate runs (through the
  shared-KV layers) and is reproducible.

Expected to pass; it did on CPU with the thread's set (transformers 5.6.2, peft 0.19.1)
and with the newest releases (transformers 5.23.0, peft 0.21.2).
"""

from __future__ import annotations

import tempfile
import time

import torch
from _gemma4 import (
    adapter_path,
    count_by_tower,
    kv_shared_layers,
    load_model,
    logits,
    lora_module_names,
    model_inputs,
    to_device,
    tower_outputs,
)
from _kit import check, device, metric, record_peak_memory
from _parity import greedy
from peft import PeftModel

# transformers 5.5.0 is the first release with models/gemma4; peft 0.17.x cannot even be
# imported under transformers 5 (it imports the removed HybridCache), 0.18.0 can.
REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0"}}
TIMEOUT = 120


def main() -> None:
    start = time.perf_counter()
    dev = device()
    model = load_model().to(dev)
    inputs = to_device(model_inputs(model.config), dev)
    metric("kv_shared_layers", len(kv_shared_layers(model)))
    base = logits(model, inputs)

    with tempfile.TemporaryDirectory() as workdir:
        peft_model = PeftModel.from_pretrained(model, adapter_path(workdir)).eval()

    check_lora_placement(peft_model)
    check_towers_adapted(peft_model, inputs)
    diff = (logits(peft_model, inputs) - base).abs().max().item()
    metric("max_abs_logit_diff_vs_base", diff)
    check(diff > 1e-4, f"adapter did not change the logits (max abs diff {diff:.2e})")
    check_generate(peft_model, inputs)
    metric("seconds", round(time.perf_counter() - start, 3))
    record_peak_memory()


def check_lora_placement(peft_model: torch.nn.Module) -> None:
    counts = count_by_tower(lora_module_names(peft_model))
    for tower, count in counts.items():
        metric(f"lora_modules_{tower}", count)
    check(all(counts.values()), f"a tower got no LoRA layers: {counts}")


def check_towers_adapted(peft_model: PeftModel, inputs: dict[str, torch.Tensor]) -> None:
    adapted = tower_outputs(peft_model, inputs)
    with peft_model.disable_adapter():
        plain = tower_outputs(peft_model, inputs)
    for tower in ("vision", "audio"):
        check(tower in adapted, f"the {tower} tower did not run")
        diff = (adapted[tower] - plain[tower]).abs().max().item()
        metric(f"max_abs_{tower}_feature_diff", diff)
        check(diff > 1e-6, f"LoRA on the {tower} tower's inner .linear had no effect")


def check_generate(peft_model: PeftModel, inputs: dict[str, torch.Tensor]) -> None:
    first = greedy(peft_model, inputs)
    metric("generated_tokens", " ".join(map(str, first)))
    check(greedy(peft_model, inputs) == first, "greedy generate is not reproducible")


if __name__ == "__main__":
    main()
