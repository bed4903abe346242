"""The thread's first post: split 4-bit Gemma 4 with double quant, plain PeftModel.from_pretrained.

Thread: `RuntimeError: Tensor.item() cannot be called on meta tensors` from
Linear4bit._save_to_state_dict -> QuantState.as_dict(packed=True) -> `nested_offset`
(`self.offset.item()`), reached from accelerate's attach_execution_device_hook during PEFT's
re-dispatch (transformers 5.6.2, accelerate 1.14.0.dev0, peft 0.19.1, bitsandbytes 0.49.2).
The nested offset only exists with bnb_4bit_use_double_quant=True. PEFT's re-dispatch gets a
GPU budget of half the model (`_gpu.pressure`), standing in for the thread's full GPU. Then a generate.
`inconclusive` if PEFT's re-dispatch left no 4-bit weight on the CPU.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522;
related: https://github.com/huggingface/transformers/issues/43873 (offloading with quantization),
https://github.com/huggingface/transformers/issues/45482 (Gemma 4 cross-device CPU offload).
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path
from _gpu import SPLIT, devices_of, generate, inputs_for, load_quantized, nf4, pressure, record_cuda_peak, require_cuda, weight_homes
from _kit import check, metric, reached
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180
SETUP = "PEFT's re-dispatch offloaded a double-quant 4-bit layer to the CPU"


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        base = load_quantized(workdir, nf4(double_quant=True, fp32_cpu_offload=True), SPLIT, offload_folder=f"{workdir}/offload")
        model = PeftModel.from_pretrained(
            base, adapter_path(workdir), is_trainable=False, max_memory=pressure(base), offload_dir=f"{workdir}/peft-offload"
        ).eval()
        metric("devices", str(sorted(devices_of(model))))
        homes = weight_homes(model, "Linear4bit")
        on_cpu = sum(device == "cpu" for device, _ in homes.values())
        metric("linear4bit_on_cpu", on_cpu)
        reached(on_cpu, f"0 of {len(homes)} Linear4bit weights on the CPU after PEFT's re-dispatch")
        tokens = generate(model, inputs_for(model, with_media=False))
        check(len(tokens) == 4, f"generated {len(tokens)} tokens, expected 4")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
