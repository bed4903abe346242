"""A forward pass through Gemma 4's towers quantized to bitsandbytes 4-bit.

Upstream: none found for the audio failure; thread context: with the towers quantized the
user's model "only saw grey and distorted shapes", and the working config keeps
`model.vision_tower`, `model.multi_modal_projector` and `model.audio_tower` out of
quantization (llm_int8_skip_modules).

Found while building these scenarios: in transformers 5.5.0 to 5.10.x the audio tower
reads `torch.finfo(self.ffw_layer_1.linear.weight.dtype)` to clip activations. Once
bitsandbytes has quantized that linear its weight is uint8, so any forward pass with
audio fails with `TypeError: torch.finfo() requires a floating point input type`.
transformers 5.11.0 reads the activations' dtype instead. Run on CPU: 5.5.0, 5.6.2 and
5.10.4 fail so; 5.11.0 and 5.23.0 pass.

The scenario quantizes every linear but lm_head (transformers' default), runs text + image
+ audio, checks the logits are finite, and records how far each tower's soft tokens are
from the float32 model's (relative error), the number to watch for the "grey shapes".
`inconclusive` if either tower holds no Linear4bit: a float tower would pass without saying
anything about 4-bit towers.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522 (the "grey and distorted shapes" post);
quantization docs: https://huggingface.co/docs/transformers/quantization/bitsandbytes
"""

from __future__ import annotations

import tempfile
import time

import torch
from _gemma4 import base_model_path, load_model, logits, model_inputs, tower_outputs
from _kit import check, metric, reached, record_peak_memory
from transformers import BitsAndBytesConfig

REQUIRES = {"packages": {"transformers": ">=5.5.0", "bitsandbytes": ">=0.49.0"}}
TIMEOUT = 120
SETUP = "both towers hold bitsandbytes 4-bit linears"


def main() -> None:
    start = time.perf_counter()
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    with tempfile.TemporaryDirectory() as workdir:
        path = base_model_path(workdir)
        full = load_model(path)
        quantized = load_model(path, quantization_config=config, device_map={"": "cpu"})
    inputs = model_inputs(full.config)
    audio = count_linear4bit(quantized.model.audio_tower)
    vision = count_linear4bit(quantized.model.vision_tower)
    metric("audio_tower_linear4bit", audio)
    metric("vision_tower_linear4bit", vision)
    reached(audio and vision, f"Linear4bit layers: {audio} in the audio tower, {vision} in the vision tower")
    try:
        record_tower_errors(full, quantized, inputs)
        check(torch.isfinite(logits(quantized, inputs)).all(), "4-bit logits are not finite")
    finally:  # a failing row still gets its timing
        metric("seconds", round(time.perf_counter() - start, 3))
        record_peak_memory()


def record_tower_errors(full: torch.nn.Module, quantized: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> None:
    expected, got = tower_outputs(full, inputs), tower_outputs(quantized, inputs)
    for tower, reference in expected.items():
        error = (got[tower] - reference).norm() / reference.norm()
        metric(f"{tower}_feature_rel_err_4bit", error.item())


def count_linear4bit(module: torch.nn.Module) -> int:
    return sum(type(m).__name__ == "Linear4bit" for m in module.modules())


if __name__ == "__main__":
    main()
