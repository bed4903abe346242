"""In-place `dequantize()` of a 4-bit Gemma 4 with a LoRA adapter, then `merge_and_unload()`.

Thread (merge lane, 5): "peft_model.dequantize(): PASS; merge_and_unload(): FAIL —
AttributeError: 'Parameter' object has no attribute 'quant_state'". transformers'
`dequantize()` turns the bitsandbytes layers back into float ones in place, but PEFT's LoRA
wrappers still believe they wrap `Linear4bit` and look for its quant state when merging.
Upstream context: https://github.com/huggingface/peft/issues/2321 (merging into 4-bit).

If the merge goes through, the merged model is compared with the adapter-loaded 4-bit model
(metrics as in gemma4_lora_merge_parity_4bit); the tolerance is loose, because dequantizing
cannot undo the 4-bit rounding: what is checked is that the merge kept the adapter's effect.
`inconclusive` unless the base was 4-bit and `dequantize()` left no 4-bit weight: otherwise
the merge would not be the thread's merge into a dequantized model.
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path, model_inputs
from _kit import metric, reached, record_peak_memory
from _offload import load_4bit_base, params4bit
from _parity import compare
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.49.0"}}
TIMEOUT = 120
TOLERANCE = 0.05
SETUP = "a 4-bit base that dequantize() turned back to float"


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        adapter = adapter_path(workdir)
        loaded = PeftModel.from_pretrained(load_4bit_base(workdir), adapter).eval()
        to_merge = PeftModel.from_pretrained(load_4bit_base(workdir), adapter)
        before = len(params4bit(to_merge))
        to_merge.dequantize()  # the thread's call: transformers' in-place dequantize, through PEFT
        after = len(params4bit(to_merge))
        metric("dequantized", True)
        metric("params4bit_before_dequantize", before)
        metric("params4bit_after_dequantize", after)
        reached(before and not after, f"4-bit weights: {before} before dequantize(), {after} after")
        merged = to_merge.merge_and_unload().eval()
    try:
        compare(loaded, merged, model_inputs(loaded.config), TOLERANCE, "dequantized then merged model")
    finally:
        metric("seconds", round(time.perf_counter() - start, 3))
        record_peak_memory()


if __name__ == "__main__":
    main()
