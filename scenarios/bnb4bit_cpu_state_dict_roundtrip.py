"""state_dict() of a bitsandbytes 4-bit layer after a CPU forward must change nothing.

Upstream: none found. Found while building the Gemma 4 scenarios: dispatching a 4-bit
model with accelerate after one forward pass changed its logits by up to 0.26.

On CPUs with AVX512-BF16, Linear4bit's first eval-mode forward repacks its weight and
quant state in place for the CPU kernel (`_convert_weight_packed_for_cpu`).
`_save_to_state_dict` undoes that packing first, but leaves `absmax` in the packed
[blocks, rows] order (and in bfloat16): when a row spans several 64-wide blocks, the next
forward uses scales from the wrong blocks and the saved `weight.absmax` is scrambled.
Every `state_dict()` after inference triggers it: save_pretrained, and accelerate's
dispatch_model (attach_execution_device_hook calls `module.state_dict()`).

Reproduced on CPU with bitsandbytes 0.49.2 and 0.50.2 (both fail here). `not_applicable` on
a GPU, where the CPU kernel never runs; `inconclusive` on a CPU where the forward did not
repack the weight (no AVX512-BF16): there state_dict() has no packing to undo.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522 (found while reproducing it; no upstream issue found yet).
"""

from __future__ import annotations

import time

import torch
from _kit import check, device, metric, not_applicable, reached

REQUIRES = {"packages": {"bitsandbytes": ">=0.49.0"}}
TIMEOUT = 60
SETUP = "bitsandbytes repacked the 4-bit weight for its CPU kernel"
IN_FEATURES = 128  # two 64-wide quantization blocks per row: one block hides the bug
OUT_FEATURES = 64


def main() -> None:
    start = time.perf_counter()
    layer = quantized_layer()
    x = torch.randn(2, IN_FEATURES, generator=torch.Generator().manual_seed(1))
    absmax = layer.weight.quant_state.absmax.detach().float().clone()
    with torch.no_grad():
        before = layer(x)
        packed = bool(getattr(layer.weight.quant_state, "packing_format_for_cpu", False))
        saved = layer.state_dict()
        after = layer(x)
    metric("packed_for_cpu", packed)
    reached(packed, "the eval forward left quant_state.packing_format_for_cpu unset (a CPU without AVX512-BF16?)")
    diff = (after - before).abs().max().item()
    metric("max_abs_output_diff_after_state_dict", diff)
    saved_absmax = saved["weight.absmax"].float().flatten()
    metric("saved_absmax_dtype", str(saved["weight.absmax"].dtype))
    # bfloat16 keeps ~3 significant digits: a 1% tolerance still tells order from rounding.
    in_order = torch.allclose(saved_absmax, absmax.flatten(), rtol=1e-2)
    metric("saved_absmax_in_order", in_order)
    metric("seconds", round(time.perf_counter() - start, 3))
    check(diff == 0.0, f"state_dict() changed the layer's output (max abs diff {diff:.3g})")
    check(in_order, "state_dict() saved weight.absmax in another order than it was quantized")


def quantized_layer() -> torch.nn.Module:
    if device() != "cpu":
        not_applicable("the CPU weight packing runs only on the CPU")
    # Imported only now: on a GPU, importing bitsandbytes initialises CUDA (seconds) for nothing.
    import bitsandbytes as bnb

    torch.manual_seed(0)
    weight = torch.nn.Linear(IN_FEATURES, OUT_FEATURES, bias=False).weight.data
    layer = bnb.nn.Linear4bit(
        IN_FEATURES,
        OUT_FEATURES,
        bias=False,
        compute_dtype=torch.float32,
        compress_statistics=False,  # double quant takes another path, unaffected
        quant_type="nf4",
    )
    layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, compress_statistics=False, quant_type="nf4")
    # .to("cpu") quantizes; eval() because the packing is for inference only.
    return layer.to("cpu").eval()


if __name__ == "__main__":
    main()
