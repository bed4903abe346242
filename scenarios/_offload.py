"""A split, bitsandbytes 4-bit Gemma 4 and a PEFT adapter load that re-dispatches it.

The thread's setup, CPU-only: the towers go to the offload tier in float32, the language
model is 4-bit on the execution device, then PeftModel.from_pretrained re-dispatches the
model under memory pressure so that some *quantized* layers are offloaded too.

On a GPU the towers sit on "cpu" and the execution device is the GPU; with no GPU the
execution device is "cpu" and accelerate's only offload tier is "disk", so here the
towers go to disk. Everything runs on the CPU whatever HARNESS_DEVICE says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from _gemma4 import base_model_path, load_model
from accelerate import dispatch_model
from transformers import BitsAndBytesConfig

TOWERS = ("model.vision_tower", "model.audio_tower")
SPLIT_MAP = {**dict.fromkeys(TOWERS, "disk"), "": "cpu"}
# Share of the model's footprint PEFT may keep in memory when it re-dispatches: small
# enough that infer_auto_device_map pushes the last decoder layers to the offload tier.
MEMORY_BUDGET = 0.5


def bnb_config(double_quant: bool = False) -> BitsAndBytesConfig:
    # The thread keeps offloaded modules in float32 with llm_int8_enable_fp32_cpu_offload;
    # with no GPU that flag would skip every module mapped to "cpu" (here: all of them),
    # so the towers are skipped by name instead, to the same effect.
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=torch.float32,
        llm_int8_skip_modules=[*TOWERS, "lm_head"],
    )


def load_4bit_base(workdir: str | os.PathLike[str], double_quant: bool = False) -> Any:
    """The 4-bit base, all in memory on the CPU (the reference for parity checks)."""
    return load_model(
        base_model_path(workdir),
        quantization_config=bnb_config(double_quant),
        device_map={"": "cpu"},
    )


def load_split_base(workdir: str | os.PathLike[str], double_quant: bool = False) -> Any:
    """The 4-bit base with its towers offloaded, as from_pretrained(device_map=split) does.

    The split is made with the dispatch_model call from_pretrained would make, because
    from_pretrained cannot make it here: it refuses a disk entry for bitsandbytes unless
    fp32 offload is on (see bnb_config), and with "cpu" as the execution device any disk
    entry fails (`ValueError: weight is on the meta device, we need a `value` to put in
    on cpu`, transformers 5.6.2 and 5.23.0, even for a plain Llama).
    """
    model = load_4bit_base(workdir, double_quant)
    dispatch_model(
        model,
        device_map=SPLIT_MAP,
        offload_dir=str(Path(workdir) / "base-offload"),
        skip_keys=model._skip_keys_device_placement,
    )
    return model


def load_adapter_under_pressure(model: Any, adapter: str, workdir: str | os.PathLike[str]) -> Any:
    """PeftModel.from_pretrained on the split base, with a memory budget it must spill."""
    from peft import PeftModel

    budget = int(model.get_memory_footprint() * MEMORY_BUDGET)
    return PeftModel.from_pretrained(
        model,
        adapter,
        max_memory={"cpu": budget},
        offload_dir=str(Path(workdir) / "peft-offload"),
    )


def params4bit(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The model's bitsandbytes 4-bit weights by parameter name."""
    return {name: param for name, param in model.named_parameters() if type(param).__name__ == "Params4bit"}


def offloaded(params: dict[str, torch.nn.Parameter]) -> dict[str, torch.nn.Parameter]:
    """Those of `params` that an offload hook has replaced by meta placeholders."""
    return {name: param for name, param in params.items() if param.device.type == "meta"}


def offloaded_modules(model: Any) -> list[str]:
    """Module names the last dispatch put on the offload tier ("disk" on a CPU)."""
    device_map = getattr(model, "hf_device_map", None) or {}
    return [name for name, device in device_map.items() if device == "disk"]
