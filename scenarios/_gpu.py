"""Shared pieces of the GPU scenarios: the thread's quantization configs and device maps.

The thread loads Gemma 4 E4B in 4-bit NF4 with bfloat16 compute; the split map puts the
vision and audio towers on the CPU and the rest on GPU 0, which needs
`llm_int8_enable_fp32_cpu_offload=True` (despite its name, the gate for CPU entries in any
bitsandbytes device map). Everything here is the thread's configuration on the synthetic
model of `_gemma4.py`.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _gemma4 import base_model_path, load_model, model_inputs
from _kit import metric, not_applicable
from transformers import BitsAndBytesConfig

TOWERS = ("model.vision_tower", "model.audio_tower")
ALL_ON_GPU: dict[str, Any] = {"": 0}
SPLIT: dict[str, Any] = {**dict.fromkeys(TOWERS, "cpu"), "": 0}


def require_cuda(count: int = 1) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < count:
        not_applicable(f"needs {count} CUDA device(s); this process sees {torch.cuda.device_count() if torch.cuda.is_available() else 0}")


def nf4(double_quant: bool = False, fp32_cpu_offload: bool = False, skip: list[str] | None = None) -> BitsAndBytesConfig:
    kwargs: dict[str, Any] = {}
    if skip is not None:
        kwargs["llm_int8_skip_modules"] = skip
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=torch.bfloat16,
        llm_int8_enable_fp32_cpu_offload=fp32_cpu_offload,
        **kwargs,
    )


def load_quantized(workdir: str | os.PathLike[str], config: BitsAndBytesConfig, device_map: Any, **kwargs: Any) -> Any:
    return load_model(
        base_model_path(workdir),
        quantization_config=config,
        device_map=device_map,
        dtype=torch.bfloat16,
        **kwargs,
    )


def pressure(model: Any, share: float = 0.5) -> dict[Any, int]:
    """A max_memory for PEFT's re-dispatch: GPU 0 gets `share` of the model's footprint.

    The thread's GPU was nearly full ("0: 5668601858 bytes required"); the synthetic model
    fits anywhere, so the budget is what makes the re-dispatch offload 4-bit layers.
    """
    footprint = int(model.get_memory_footprint())
    metric("gpu_budget_bytes", int(footprint * share))
    return {0: int(footprint * share), "cpu": 16 * 2**30}


def embedding_device(model: Any) -> torch.device:
    """Where input ids must go: the thread's get_input_embedding_device, in one line."""
    return model.get_input_embeddings().weight.device


def inputs_for(model: Any, with_media: bool = False) -> dict[str, torch.Tensor]:
    inputs = model_inputs(model.config, with_media=with_media)
    target = embedding_device(model)
    out = {}
    for name, tensor in inputs.items():
        tensor = tensor.to(target)
        out[name] = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
    return out


@torch.no_grad()
def generate(model: Any, inputs: dict[str, torch.Tensor], new_tokens: int = 4) -> list[int]:
    out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def record_cuda_peak(prefix: str = "") -> None:
    if torch.cuda.is_available():
        metric(f"{prefix}cuda_peak_mib", round(torch.cuda.max_memory_allocated() / 2**20, 2))


def devices_of(model: Any) -> dict[str, int]:
    """How many parameters live on each device (meta included): placement as data."""
    counts: dict[str, int] = {}
    for param in model.parameters():
        counts[str(param.device)] = counts.get(str(param.device), 0) + 1
    return counts


def weight_homes(model: Any, kind: str) -> dict[str, tuple[str, str]]:
    """Where each bitsandbytes `kind` layer's weight really lives: {module name: (device, dtype)}.

    `kind` is a bitsandbytes class name ("Linear8bitLt", "Linear4bit"); PEFT's LoRA wrappers
    share those names, so only bitsandbytes' own modules count. A weight that an accelerate
    offload hook replaced by a meta placeholder lives where the hook keeps its copy: "cpu"
    for a map entry on the CPU, "disk" for one on disk; "meta" if no copy was found. That
    is the placement the offload scenarios must confirm: `devices_of` only sees placeholders.
    """
    homes: dict[str, tuple[str, str]] = {}
    for name, module in model.named_modules():
        if type(module).__name__ != kind or not type(module).__module__.startswith("bitsandbytes"):
            continue
        weight = module.weight
        home = (str(weight.device), str(weight.dtype))
        if weight.device.type == "meta":
            home = _offloaded_copy(module, "weight") or home
        homes[name] = home
    return homes


def _offloaded_copy(module: torch.nn.Module, tensor: str) -> tuple[str, str] | None:
    # accelerate's AlignDevicesHook keeps offloaded tensors in `weights_map`, a PrefixedDataset
    # over an OffloadedWeightsLoader: in-memory tensors in `state_dict`, disk ones in `index`.
    hook = getattr(module, "_hf_hook", None)
    for one in getattr(hook, "hooks", None) or [hook]:
        store = getattr(one, "weights_map", None)
        if store is None or not getattr(one, "offload", False):
            continue
        loader = getattr(store, "dataset", store)
        key = getattr(store, "prefix", "") + tensor
        in_memory = getattr(loader, "state_dict", None) or {}
        if key in in_memory:
            return str(in_memory[key].device), str(in_memory[key].dtype)
        on_disk = getattr(loader, "index", None) or {}
        if key in on_disk:
            dtype = str(on_disk[key].get("dtype", ""))  # the index spells "int8", a tensor "torch.int8"
            return "disk", dtype if dtype.startswith("torch.") else f"torch.{dtype}"
    return None


def hooked(modules: list[torch.nn.Module]) -> int:
    """How many of `modules` carry an accelerate hook (a dispatch with more than one device placed them)."""
    return sum(hasattr(module, "_hf_hook") for module in modules)
