"""KV cache at growing context length: default cache vs offloaded DynamicCache, peak GPU memory.

Thread: "Gemma 4's KV cache is much larger"; a quantized cache (QuantoQuantizedCache) and
DynamicCache(offloading=True) did not help because the prompt is prefilled whole first.
Measured here per context length: the peak GPU memory of a generate with each cache. The
quantized cache needs optimum-quanto, which the matrix does not install: recorded as absent.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522 (the KV cache post).
"""

from __future__ import annotations

import tempfile
import time

import torch
from _gemma4 import base_model_path, load_model
from _gpu import ALL_ON_GPU, require_cuda
from _kit import metric

REQUIRES = {"packages": {"transformers": ">=5.5.0"}, "gpus": 1}
TIMEOUT = 180
LENGTHS = (32, 64, 128, 200)  # the synthetic model has 256 positions


def peak_for(model: torch.nn.Module, length: int, cache: object | None) -> float:
    ids = torch.randint(10, 100, (1, length), generator=torch.Generator().manual_seed(length)).to("cuda:0")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    kwargs = {"past_key_values": cache} if cache is not None else {}
    with torch.no_grad():
        model.generate(input_ids=ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, **kwargs)
    torch.cuda.synchronize()
    return round((torch.cuda.max_memory_allocated() - before) / 2**20, 3)


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    from transformers import DynamicCache

    with tempfile.TemporaryDirectory() as workdir:
        model = load_model(base_model_path(workdir), dtype=torch.bfloat16, device_map=ALL_ON_GPU)
        for length in LENGTHS:
            metric(f"default_peak_mib_{length}", peak_for(model, length, None))
            try:
                cache = DynamicCache(config=model.config, offloading=True)
            except TypeError as exc:  # older signatures
                metric("offloaded_cache", f"unavailable: {exc}")
                continue
            metric(f"offloaded_peak_mib_{length}", peak_for(model, length, cache))
        try:
            import optimum.quanto  # noqa: F401

            metric("quantized_cache", "available (not measured)")
        except ImportError:
            metric("quantized_cache", "optimum-quanto not installed")
    metric("seconds", round(time.perf_counter() - start, 3))


if __name__ == "__main__":
    main()
