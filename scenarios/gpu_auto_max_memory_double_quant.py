"""device_map="auto" with max_memory below the model's size (spill to CPU) and double quant: load, generate.

Thread (1.3): "If I set max_memory for the GPU to anything lower than what is required to
fit the full Gemma 4 E4B model, I get `Tensor.item() cannot be called on meta tensors`
during model loading." (1.2: device_map="auto" itself needed transformers 5.6.0,
https://github.com/huggingface/transformers/pull/45347.) The GPU budget here is half of the
synthetic model's 4-bit footprint, so accelerate must place part of it on the CPU.
`inconclusive` if no 4-bit weight sits on the CPU after the load. The offloaded weights are
meta placeholders whose data an accelerate hook keeps in CPU memory (`_gpu.weight_homes`);
the parameter devices alone never say "cpu" for them.
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path
from _gpu import devices_of, generate, inputs_for, load_quantized, nf4, record_cuda_peak, require_cuda, weight_homes
from _kit import check, metric, reached
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180
SETUP = "a double-quant 4-bit layer spilled to the CPU"


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        full = load_quantized(workdir, nf4(double_quant=True), {"": 0})
        footprint = int(full.get_memory_footprint())
        del full
        budget = footprint // 2
        metric("footprint_bytes", footprint)
        metric("gpu_budget_bytes", budget)
        base = load_quantized(
            workdir,
            nf4(double_quant=True, fp32_cpu_offload=True),
            "auto",
            max_memory={0: budget, "cpu": 8 * 2**30},
            offload_folder=f"{workdir}/offload",
        )
        placement = devices_of(base)
        homes = weight_homes(base, "Linear4bit")
        spilled = [name for name, (device, _) in homes.items() if device == "cpu"]
        metric("base_devices", str(sorted(placement)))
        metric("linear4bit_layers", len(homes))
        metric("linear4bit_on_cpu", len(spilled))
        reached(spilled, f"{len(spilled)} of {len(homes)} Linear4bit weights on the CPU; parameters on {sorted(placement)}")
        model = PeftModel.from_pretrained(base, adapter_path(workdir), is_trainable=False).eval()
        tokens = generate(model, inputs_for(model, with_media=False))
        check(len(tokens) == 4, f"generated {len(tokens)} tokens, expected 4")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
