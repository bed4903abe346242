"""Two GPUs: base on GPU 0, PEFT load must put nothing on GPU 1 (the thread's OOM on the second GPU).

Thread: after PEFT loading "it jumped to my second GPU (GPU 1) which does not have enough
VRAM" (CUDA out of memory on GPU 1 from accelerate's init_hook during
PeftModel.from_pretrained). Base on GPU 0 only ({"": 0}, 4-bit); after the adapter load,
`fail` if any parameter or any allocation sits on GPU 1. Needs the two-GPU runner;
`inconclusive` unless the process sees two GPUs and the base sits on GPU 0 alone.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522;
related: https://github.com/huggingface/transformers/issues/45482 (Gemma 4 cross-device offload).
"""

from __future__ import annotations

import tempfile
import time

import torch
from _gemma4 import adapter_path
from _gpu import ALL_ON_GPU, devices_of, load_quantized, nf4, require_cuda
from _kit import check, metric, reached
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 2}
TIMEOUT = 180
SETUP = "two GPUs, the base entirely on GPU 0"


def main() -> None:
    require_cuda(2)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        base = load_quantized(workdir, nf4(), ALL_ON_GPU)
        gpus, base_devices = torch.cuda.device_count(), sorted(devices_of(base))
        metric("gpus_seen", gpus)
        metric("base_devices", str(base_devices))
        reached(gpus >= 2 and base_devices == ["cuda:0"], f"{gpus} GPU(s), base on {base_devices}")
        model = PeftModel.from_pretrained(
            base, adapter_path(workdir), is_trainable=False, offload_buffers=True, ephemeral_gpu_offload=True, torch_device="cuda:0"
        )
        placement = devices_of(model)
        metric("devices", str(sorted(placement)))
        metric("gpu1_allocated_bytes", torch.cuda.memory_allocated(1))
        check("cuda:1" not in placement, f"{placement.get('cuda:1')} parameter(s) landed on GPU 1")
        check(torch.cuda.memory_allocated(1) == 0, "memory was allocated on GPU 1")
    metric("seconds", round(time.perf_counter() - start, 3))


if __name__ == "__main__":
    main()
