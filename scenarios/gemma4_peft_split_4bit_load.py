"""PEFT adapter load onto a split 4-bit Gemma 4: the `_is_hf_initialized` family.

Upstream: https://github.com/huggingface/transformers/issues/43872 (the Int8Params form),
fixed by https://github.com/huggingface/accelerate/pull/3976 (released in 1.14.0).

Thread (R03): PeftModel.from_pretrained on a CPU/GPU-split bitsandbytes 4-bit Gemma 4 fails
with `TypeError: Params4bit.__new__() got an unexpected keyword argument
'_is_hf_initialized'`. transformers marks every parameter it loads with
`_is_hf_initialized`; when PEFT re-dispatches the model and accelerate offloads a 4-bit
layer, set_module_tensor_to_device rebuilds the Params4bit with `param.__dict__` as
keyword arguments, and Params4bit.__new__ takes no such keyword.

Reproduced on CPU (see _offload.py for the split): the same trace, from
PeftModel.from_pretrained -> load_adapter -> dispatch_model -> init_hook ->
set_module_tensor_to_device, with accelerate 1.13.0. accelerate 1.14.0 and 1.15.0 load
the adapter. The scenario stops after the load: running the loaded model is
gemma4_peft_split_4bit_generate.py. `inconclusive` if the memory budget offloaded no 4-bit
layer: then nothing rebuilt a Params4bit and the load proves nothing.
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path
from _kit import check, metric, reached, record_peak_memory
from _offload import (
    load_adapter_under_pressure,
    load_split_base,
    offloaded,
    offloaded_modules,
    params4bit,
)

REQUIRES = {
    "packages": {
        "transformers": ">=5.5.0",
        "peft": ">=0.18.0",
        "accelerate": ">=1.0",
        # 0.49 is the first release that quantizes and runs 4-bit on the CPU.
        "bitsandbytes": ">=0.49.0",
    }
}
TIMEOUT = 120
SETUP = "PEFT's re-dispatch offloaded a 4-bit layer"


def main(double_quant: bool = False) -> None:
    start = time.perf_counter()
    metric("double_quant", double_quant)
    with tempfile.TemporaryDirectory() as workdir:
        model = load_split_base(workdir, double_quant)
        quantized = params4bit(model)
        flagged = [p for p in quantized.values() if "_is_hf_initialized" in vars(p)]
        # Recorded before the load so an error row still says whether the trigger was there.
        metric("params4bit", len(quantized))
        metric("params4bit_flagged_is_hf_initialized", len(flagged))

        peft_model = load_adapter_under_pressure(model, adapter_path(workdir), workdir)

        moved = offloaded(params4bit(peft_model))
        states = [getattr(p, "quant_state", None) for p in moved.values()]
        nested = [s for s in states if getattr(s, "nested", False)]
        metric("offloaded_modules", len(offloaded_modules(peft_model)))
        metric("offloaded_params4bit", len(moved))
        metric("offloaded_params4bit_nested", len(nested))
        # The thread's .item() failure reads this offset; recorded for the day a release passes.
        metric("offloaded_nested_offsets_on_meta", sum(getattr(getattr(s, "offset", None), "is_meta", False) for s in nested))
        if double_quant:
            reached(nested, f"{len(moved)} 4-bit weights offloaded, {len(nested)} of them with a nested (double-quant) state")
        reached(moved, "the memory budget offloaded no 4-bit layer")
        kept = sum("_is_hf_initialized" in vars(p) for p in moved.values())
        metric("offloaded_params4bit_kept_flag", kept)
        check(
            all(type(p).__name__ == "Params4bit" for p in moved.values()),
            "offloading turned 4-bit weights into another parameter class",
        )
    metric("seconds", round(time.perf_counter() - start, 3))
    record_peak_memory()


if __name__ == "__main__":
    main()
