"""Vision/audio towers kept out of quantization (`llm_int8_skip_modules`) vs quantized: output and memory.

Thread (2): "the model only saw grey and distorted shapes"; keeping model.vision_tower,
model.multi_modal_projector, model.audio_tower (and lm_head) out of quantization fixed
vision at ~1 GB of VRAM. Measured here against a bfloat16 reference: the relative error of
each tower's soft tokens and the memory footprint of each variant. `fail` if skipping the
towers does not bring their error below the quantized towers' error. `inconclusive` unless
the quantized variant's towers hold 4-bit linears and the skipped variant's hold none.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522;
quantization docs: https://huggingface.co/docs/transformers/quantization/bitsandbytes
"""

from __future__ import annotations

import tempfile
import time

import torch
from _gemma4 import base_model_path, load_model, tower_outputs
from _gpu import ALL_ON_GPU, inputs_for, load_quantized, nf4, require_cuda, weight_homes
from _kit import check, metric, reached

REQUIRES = {"packages": {"transformers": ">=5.5.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180
SKIP = ["model.vision_tower", "model.multi_modal_projector", "model.audio_tower", "lm_head"]
TOWERS = ("vision", "audio")
SETUP = "the towers in 4-bit in one variant and unquantized in the other"


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        reference = load_model(base_model_path(workdir), dtype=torch.bfloat16, device_map=ALL_ON_GPU)
        want = tower_outputs(reference, inputs_for(reference, with_media=True))
        metric("bf16_footprint_bytes", int(reference.get_memory_footprint()))
        errors = {}
        linear4bit: dict[tuple[str, str], int] = {}
        for name, config in (("quantized", nf4()), ("skipped", nf4(skip=SKIP))):
            model = load_quantized(workdir, config, ALL_ON_GPU)
            for tower in TOWERS:
                homes = weight_homes(getattr(model.model, f"{tower}_tower"), "Linear4bit")
                linear4bit[(name, tower)] = len(homes)
                metric(f"{name}_{tower}_tower_linear4bit", len(homes))
            got = tower_outputs(model, inputs_for(model, with_media=True))
            metric(f"{name}_footprint_bytes", int(model.get_memory_footprint()))
            for tower in sorted(want):
                errors[(name, tower)] = relative_error(got[tower], want[tower])
                metric(f"{name}_{tower}_rel_error", round(errors[(name, tower)], 5))
        reached(
            all(linear4bit[("quantized", t)] for t in TOWERS) and not any(linear4bit[("skipped", t)] for t in TOWERS),
            f"Linear4bit in the towers: {linear4bit}",
        )
        for tower in sorted(want):
            check(errors[("skipped", tower)] < errors[("quantized", tower)], f"{tower}: skipping quantization did not reduce the error")
    metric("seconds", round(time.perf_counter() - start, 3))


if __name__ == "__main__":
    main()
