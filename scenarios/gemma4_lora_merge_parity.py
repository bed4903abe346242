"""merge_and_unload on a float32 Gemma 4 reproduces the adapter-loaded outputs.

Upstream: https://github.com/huggingface/peft/issues/2321 (merge differences; this file is
the control lane, its 4-bit twin is gemma4_lora_merge_parity_4bit.py).

The thread's control: a fresh full-precision base, the adapter loaded, merged, and the
merged model's outputs compared with the adapter-loaded ones. Here the synthetic Gemma 4
in float32 with the multimodal inner-`.linear` adapter (language, vision and audio
LoRA), inputs with an image and an audio clip. Metrics: max/mean abs logit diff and
greedy token agreement. Expected to pass; it did on CPU with the thread's set and with
the newest releases.
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path, load_model, model_inputs, to_device
from _kit import device, metric, record_peak_memory
from _parity import compare
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0"}}
TIMEOUT = 120
# float32 merge: W + BA once instead of Wx + B(Ax); only summation order differs.
TOLERANCE = 1e-4


def main() -> None:
    start = time.perf_counter()
    dev = device()
    with tempfile.TemporaryDirectory() as workdir:
        adapter = adapter_path(workdir)
        loaded = PeftModel.from_pretrained(load_model().to(dev), adapter).eval()
        merged = PeftModel.from_pretrained(load_model().to(dev), adapter).merge_and_unload()
    inputs = to_device(model_inputs(loaded.config), dev)
    try:
        compare(loaded, merged.eval(), inputs, TOLERANCE, "merged float32 model")
    finally:  # a `fail` row still gets its timing
        metric("seconds", round(time.perf_counter() - start, 3))
        record_peak_memory()


if __name__ == "__main__":
    main()
