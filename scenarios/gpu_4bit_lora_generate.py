"""All-GPU 4-bit NF4 Gemma 4 + multimodal LoRA (inner `.linear` targets) + generate: the thread's R05.

Thread: "R05 all-GPU 4-bit: PASS, generate output shape (1, 8)" with device_map={"": 0}
(transformers 5.6.2, accelerate 1.13.0, peft 0.19.1, bitsandbytes 0.49.2). Upstream context:
https://github.com/huggingface/peft/issues/3129 (why the adapter targets `.linear`).
Expected to pass in every cell that has a CUDA device and bitsandbytes with a library for it.
A text prompt, as in R05: a 4-bit audio tower fails on audio input before transformers 5.11
(gemma4_bnb4bit_towers_forward).
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path
from _gpu import ALL_ON_GPU, devices_of, generate, inputs_for, load_quantized, nf4, record_cuda_peak, require_cuda
from _kit import check, metric
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        base = load_quantized(workdir, nf4(), ALL_ON_GPU)
        model = PeftModel.from_pretrained(base, adapter_path(workdir), is_trainable=False).eval()
        metric("devices", str(sorted(devices_of(model))))
        tokens = generate(model, inputs_for(model, with_media=False), new_tokens=4)
        metric("generated_tokens", " ".join(map(str, tokens)))
        check(len(tokens) == 4, f"generated {len(tokens)} tokens, expected 4")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
