"""Run a PEFT adapter loaded onto a split 4-bit Gemma 4, and compare with no offload.

Upstream: https://github.com/huggingface/transformers/issues/43873 (offloading with
quantization), https://github.com/huggingface/peft/issues/3169 (LoRA + bnb + CPU
offload), https://github.com/huggingface/accelerate/pull/3976 (the load-time fix).

The thread's main failure, one step further than gemma4_peft_split_4bit_load.py: after
the adapter loads, the offloaded model must give the logits and greedy tokens of the
same adapter on the same 4-bit base held in memory.

What reproduced on CPU (split and memory pressure as in _offload.py):
- accelerate 1.13.0: the adapter load fails, `TypeError: Params4bit.__new__() got an
  unexpected keyword argument '_is_hf_initialized'`.
- accelerate 1.14.0 / 1.15.0: the load passes, the first forward fails with
  `KeyError: 'base_model.model.model.language_model.<module>.weight'` in accelerate's
  offload weights loader. PeftModel.from_pretrained hands dispatch_model an
  offload index rebuilt from the modules the *base* had on disk; the modules that the
  re-dispatch newly puts on disk are never written there. This is the disk tier, which
  a CPU-only machine must use; on a GPU the new offloads go to "cpu" and take another path
  (not reproduced here). With double quantization the load itself fails on >= 1.14
  (gemma4_peft_split_4bit_load_double_quant.py).

`inconclusive` if the memory budget offloaded no 4-bit layer: the comparison would then be
between two models held in memory.
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path, model_inputs
from _kit import metric, reached, record_peak_memory
from _offload import load_4bit_base, load_adapter_under_pressure, load_split_base, offloaded, params4bit
from _parity import compare
from peft import PeftModel

REQUIRES = {
    "packages": {
        "transformers": ">=5.5.0",
        "peft": ">=0.18.0",
        "accelerate": ">=1.0",
        "bitsandbytes": ">=0.49.0",
    }
}
TIMEOUT = 120
# Both sides quantize the same float32 checkpoint the same way; only kernel order differs.
TOLERANCE = 1e-3
SETUP = "PEFT's re-dispatch offloaded a 4-bit layer"


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        adapter = adapter_path(workdir)
        # A separate instance: on CPUs with AVX512-BF16 a forward repacks 4-bit weights in
        # place, and a later dispatch would see them repacked.
        reference = PeftModel.from_pretrained(load_4bit_base(workdir), adapter).eval()
        split = load_adapter_under_pressure(load_split_base(workdir), adapter, workdir)
        moved = len(offloaded(params4bit(split)))
        metric("offloaded_params4bit", moved)
        reached(moved, "the memory budget offloaded no 4-bit layer")
        try:
            inputs = model_inputs(reference.config)
            compare(reference, split.eval(), inputs, TOLERANCE, "offloaded model")
        finally:  # a `fail` row still gets its timing
            metric("seconds", round(time.perf_counter() - start, 3))
            record_peak_memory()


if __name__ == "__main__":
    main()
