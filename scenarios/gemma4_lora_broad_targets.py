"""LoRA with broad target_modules on Gemma 4 trips over Gemma4ClippableLinear.

Upstream: https://github.com/huggingface/peft/issues/3129 (open as of peft 0.21.2).

The usual text-LoRA targets (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
down_proj) also name the projections of Gemma 4's vision and audio towers, which are
`Gemma4ClippableLinear` wrappers around an `nn.Linear`. PEFT has no LoRA layer for the
wrapper, so get_peft_model raises:

    ValueError: Target module Gemma4ClippableLinear(
      (linear): Linear(in_features=32, out_features=32, bias=False)
    ) is not supported. Currently, only the following modules are supported: ...

The exception is left uncaught on purpose: the harness records status `error` with that
signature. Reproduced on CPU with the synthetic model at peft 0.19.1 (thread's set) and
0.21.2 (newest). Where PEFT learns the wrapper, the scenario goes on to check that
the adapter reached all three towers and changes the logits. `inconclusive` for a model
without the wrappers (`use_clipped_linears=False`): its towers hold plain nn.Linear, which
PEFT always took.
"""

from __future__ import annotations

import time

from _gemma4 import (
    BROAD_TARGETS,
    clippable_linears,
    count_by_tower,
    load_model,
    logits,
    lora_config,
    lora_module_names,
    model_inputs,
    to_device,
)
from _kit import check, device, metric, reached, record_peak_memory
from peft import get_peft_model

# transformers 5.5.0 is the first release with models/gemma4; peft 0.17.x cannot even be
# imported under transformers 5 (it imports the removed HybridCache), 0.18.0 can.
REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0"}}
TIMEOUT = 120
SETUP = "the towers' projections are Gemma4ClippableLinear wrappers"


def main() -> None:
    start = time.perf_counter()
    dev = device()
    model = load_model().to(dev)
    inputs = to_device(model_inputs(model.config), dev)
    # Recorded before the expected failure, so the error row still says what was hit.
    clippable = len(clippable_linears(model))
    metric("clippable_linears", clippable)
    reached(clippable, "the model has no Gemma4ClippableLinear")
    base = logits(model, inputs)

    peft_model = get_peft_model(model, lora_config(BROAD_TARGETS))

    counts = count_by_tower(lora_module_names(peft_model))
    for tower, count in counts.items():
        metric(f"lora_modules_{tower}", count)
    check(
        all(counts.values()),
        f"broad targets left a tower without LoRA layers: {counts}",
    )
    diff = (logits(peft_model, inputs) - base).abs().max().item()
    metric("max_abs_logit_diff_vs_base", diff)
    check(diff > 1e-4, f"adapter did not change the logits (max abs diff {diff:.2e})")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_peak_memory()


if __name__ == "__main__":
    main()
