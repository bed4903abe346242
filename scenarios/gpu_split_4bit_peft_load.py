"""Split CPU/GPU 4-bit Gemma 4 (towers on CPU, the rest on GPU 0) + PEFT adapter load + generate: R03.

Thread: `TypeError: Params4bit.__new__() got an unexpected keyword argument
'_is_hf_initialized'` from PeftModel.from_pretrained -> dispatch_model ->
set_module_tensor_to_device, with accelerate 1.13.0; fixed by
https://github.com/huggingface/accelerate/pull/3976 (1.14.0). Related:
https://github.com/huggingface/transformers/issues/43872 (the Int8Params form).
PEFT's re-dispatch gets a GPU budget of half the model (`_gpu.pressure`), standing in for the
thread's nearly full 12 GB GPU. The PEFT call is the thread's second attempt (offload_dir, offload_buffers,
ephemeral_gpu_offload, torch_device), double quant off. `inconclusive` if PEFT's re-dispatch
left no 4-bit weight off the GPU (CPU or offload folder): before the budget was passed (run 2 and the two-GPU runs),
the re-dispatch put everything on cuda:0 and this scenario "passed" without a 4-bit layer
offloaded (`devices` ['cuda:0']).
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
SETUP = "PEFT's re-dispatch offloaded a 4-bit layer off the GPU (to the CPU or the offload folder)"


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        base = load_quantized(workdir, nf4(fp32_cpu_offload=True), SPLIT, low_cpu_mem_usage=True, offload_folder=f"{workdir}/offload")
        metric("base_devices", str(sorted(devices_of(base))))
        model = PeftModel.from_pretrained(
            base,
            adapter_path(workdir),
            is_trainable=False,
            max_memory=pressure(base),
            offload_dir=f"{workdir}/offload",
            offload_buffers=True,
            ephemeral_gpu_offload=True,
            torch_device="cuda:0",
        ).eval()
        metric("devices", str(sorted(devices_of(model))))
        homes = weight_homes(model, "Linear4bit")
        # The thread's call passes offload_dir: accelerate's hooks may keep an offloaded layer in
        # memory ("cpu") or in that folder ("disk"); both go through the failing re-dispatch.
        metric("linear4bit_homes", str(sorted({device for device, _ in homes.values()})))
        off_gpu = sum(device in ("cpu", "disk") for device, _ in homes.values())
        metric("linear4bit_off_gpu", off_gpu)
        reached(off_gpu, f"0 of {len(homes)} Linear4bit weights on the CPU or on disk after PEFT's re-dispatch")
        tokens = generate(model, inputs_for(model, with_media=False))
        check(len(tokens) == 4, f"generated {len(tokens)} tokens, expected 4")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
