"""merge_and_unload straight into a bitsandbytes 4-bit Gemma 4 vs the adapter-loaded model.

Upstream: https://github.com/huggingface/peft/issues/2321 ("Merge lora module to 4-bit
linear may get different generations due to rounding errors").

The thread's merge lane: with a 4-bit base, the directly merged model matched neither the
adapter-loaded outputs nor (for some prompts) anything but the base, while a merge into
a fresh bf16 base restored parity (gemma4_lora_merge_parity.py is that control).

Here the synthetic Gemma 4 with its language model in 4-bit NF4 (towers kept in float32,
as the thread's working config does), the inner-`.linear` multimodal adapter loaded on one
instance and merged into another; text + image + audio inputs. Each side is a fresh
instance, so no forward runs before the merge (see _offload.load_4bit_base). Expected
`fail`: merging requantizes W + BA to 4 bits, which the adapter-loaded model never does.
The metrics say by how much; the tolerance is the float32 one. `inconclusive` unless both
instances hold 4-bit weights before the merge: a float merge would pass without a word
about 4 bits.
"""

from __future__ import annotations

import tempfile
import time
import warnings

from _gemma4 import adapter_path, model_inputs
from _kit import metric, reached, record_peak_memory
from _offload import load_4bit_base, params4bit
from _parity import compare
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.49.0"}}
TIMEOUT = 120
TOLERANCE = 1e-4
SETUP = "a 4-bit base under the adapter"


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        adapter = adapter_path(workdir)
        loaded = PeftModel.from_pretrained(load_4bit_base(workdir), adapter).eval()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            to_merge = PeftModel.from_pretrained(load_4bit_base(workdir), adapter)
            quantized = (len(params4bit(loaded)), len(params4bit(to_merge)))
            metric("params4bit_loaded", quantized[0])
            metric("params4bit_to_merge", quantized[1])
            reached(all(quantized), f"4-bit weights: {quantized[0]} in the adapter-loaded model, {quantized[1]} in the one to merge")
            merged = to_merge.merge_and_unload().eval()
    rounding = [w for w in caught if "rounding" in str(w.message)]
    metric("merge_rounding_warnings", len(rounding))
    inputs = model_inputs(loaded.config)
    try:
        compare(loaded, merged, inputs, TOLERANCE, "4-bit merged model")
    finally:  # a `fail` row still gets its timing
        metric("seconds", round(time.perf_counter() - start, 3))
        record_peak_memory()


if __name__ == "__main__":
    main()
