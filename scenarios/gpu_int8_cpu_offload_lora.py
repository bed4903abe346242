"""LoRA + bitsandbytes INT8 + CPU offload: the output must come back on the execution device.

Upstream: https://github.com/huggingface/peft/issues/3169 (wrong device),
https://github.com/huggingface/peft/pull/3181 (normalize output device for CPU-offloaded
BnB layers). 8-bit base with the towers on the CPU (fp32 offload), LoRA on every tower and
language-model projection, a multimodal forward: `fail` if the logits are not on cuda:0.
"""

from __future__ import annotations

import tempfile
import time

import torch
from _gemma4 import adapter_path, base_model_path, load_model
from _gpu import SPLIT, devices_of, inputs_for, record_cuda_peak, require_cuda
from _kit import check, metric
from peft import PeftModel
from transformers import BitsAndBytesConfig

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        config = BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=True)
        base = load_model(base_model_path(workdir), quantization_config=config, device_map=SPLIT, dtype=torch.bfloat16)
        model = PeftModel.from_pretrained(base, adapter_path(workdir), is_trainable=False).eval()
        metric("devices", str(sorted(devices_of(model))))
        with torch.no_grad():
            out = model(**inputs_for(model, with_media=True))
        metric("logits_device", str(out.logits.device))
        check(out.logits.device == torch.device("cuda:0"), f"logits came back on {out.logits.device}, expected cuda:0")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
