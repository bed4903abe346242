"""LoRA on a bitsandbytes int8 layer offloaded to the CPU: the output must come back on the execution device.

Upstream: https://github.com/huggingface/peft/issues/3169 (LoRA + BnB INT8 + CPU offload:
"Expected all tensors to be on the same device, ... cuda:0 and cpu"),
https://github.com/huggingface/peft/pull/3181 (`result.to(x.device)` after the base layer in
peft/tuners/lora/bnb.py; closed, the maintainers asked for a reproducer).

The state: some `bnb.nn.Linear8bitLt` holds its int8 weight in CPU memory (an accelerate
offload hook keeps it there and moves it to cuda:0 for each forward) while its LoRA runs on
the GPU. Then a text forward: `fail` if the logits are not on cuda:0, `error` with the
device-mismatch RuntimeError if #3169 reproduces.

Why the first version never got there (docs/findings.md row 13: every parameter on cuda:0,
in every GPU cell). Read from the wheels (transformers 5.6.2 / 5.17.0, accelerate 1.13.0 /
1.14.0 / 1.15.0, peft 0.19.1 / 0.21.2, bitsandbytes 0.49.2 / 0.50.2):

1. A dict map never gives an int8 layer on the CPU. `llm_int8_enable_fp32_cpu_offload=True`
   adds every "cpu"/"disk" key of a dict map to the modules *not* converted
   (transformers quantizers/quantizer_bnb_8bit.py:137-140, both versions), so the split map's
   towers stayed bf16 `nn.Linear`; without the flag, validate_environment refuses the map
   (same file, :71-81).
2. PEFT then moved everything to the GPU. PeftModel.from_pretrained removes the base's
   hooks when its hf_device_map names "cpu" or "disk" (peft 0.19.1 peft_model.py:531-534,
   0.21.2 :550-553) and re-dispatches with device_map="auto" and the GPU's whole free memory
   (0.19.1 :1431-1482, 0.21.2 :1541-1592). The synthetic model fits, so the map has one
   device and accelerate's dispatch_model just calls `model.to(0)` (accelerate 1.13.0
   big_modeling.py:375 and :512, 1.15.0 :376 and :514): every parameter on cuda:0, measured
   after PEFT's load, never after the base's.

What puts a quantized int8 linear on the CPU: device_map="auto" with a GPU max_memory below
the int8 footprint, plus the fp32-offload flag. The string map is resolved only after the
linears were replaced (modeling_utils.py:4170 then :4190 in 5.6.2, :4271 then :4293 in
5.17.0), so the exclusion of (1) cannot apply; infer_auto_device_map sizes the int8 layers
with the quantizer and sends the later decoder layers to "cpu"; validate_environment accepts
that map because of the flag (integrations/accelerate.py:373 in 5.6.2, :374 in 5.17.0).
Those weights are quantized on the CPU (integrations/bitsandbytes.py:119 / :123 build
`Int8Params(...).to("cpu")`, and bitsandbytes 0.49.2 nn/modules.py:703-711 quantizes a float
weight on any move off a CPU float tensor, to the CPU included), and transformers' dispatch
keeps them in the hooks' CPU state dict, executing on cuda:0 (accelerate 1.13.0
big_modeling.py:401-405).
PeftModel.from_pretrained gets the same max_memory, so its re-dispatch keeps the offload
(checked on CPU with accelerate's infer_auto_device_map: `language_model.layers` on "cpu").
The base has no shared-KV layers: PEFT's re-dispatch passes no skip_keys, and on transformers
< 5.23 that alone fails with the shared-KV KeyError (gemma4_peft_device_map_shared_kv).

Expected from the code, to be confirmed on the GPU runner:
- accelerate 1.13.0 with bitsandbytes 0.49.2: the base load fails,
  `Int8Params.__new__() got an unexpected keyword argument '_is_hf_initialized'` (accelerate
  1.13.0 utils/modeling.py:352 rebuilds the parameter from its __dict__; bitsandbytes 0.49.2
  nn/modules.py:639-646 takes no extra keyword; transformers#43872). bitsandbytes 0.50.2
  accepts it (nn/modules.py:720-728), accelerate 1.14.0 drops it (utils/modeling.py:363).
- accelerate 1.13.0: removing the hooks restores an int8 weight without its scales
  (hooks.py:423-428); accelerate 1.14.0 passes them (hooks.py:433-440,
  https://github.com/huggingface/accelerate/pull/4044).
- Otherwise the check itself. accelerate runs an offloaded layer on the execution device,
  so the base layer's output (peft 0.19.1 tuners/lora/bnb.py:249) is on cuda:0 like the
  LoRA delta it is added to (:267); #3169's "base output on the CPU" needs a layer that
  executes on the CPU, which this dispatch never makes.

`inconclusive` if no int8 weight sits on the CPU after the base load, or after PEFT's load.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import torch
from _gemma4 import adapter_path, base_model_path, load_model
from _gpu import devices_of, inputs_for, record_cuda_peak, require_cuda, weight_homes
from _kit import check, metric, reached
from peft import PeftModel
from transformers import BitsAndBytesConfig

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180
SETUP = "an int8 layer sits on the CPU"
# Without shared-KV layers: see the docstring (PEFT's re-dispatch and the shared-KV KeyError).
KV_SHARED_LAYERS = 0
# Share of the int8 footprint the GPU may hold: the rest of the decoder goes to "cpu".
GPU_SHARE = 0.5


def int8_config() -> BitsAndBytesConfig:
    return BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=True)


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        path = base_model_path(workdir, kv_shared_layers=KV_SHARED_LAYERS)
        max_memory = {0: gpu_budget(path), "cpu": 8 * 2**30}
        base = load_model(path, quantization_config=int8_config(), device_map="auto", max_memory=max_memory, dtype=torch.bfloat16)
        on_cpu = record_int8_placement("base", base)
        reached(on_cpu, "the base load left no int8 weight on the CPU; see base_* metrics")

        adapter = adapter_path(workdir, kv_shared_layers=KV_SHARED_LAYERS)
        model = PeftModel.from_pretrained(base, adapter, is_trainable=False, max_memory=max_memory).eval()
        on_cpu = record_int8_placement("peft", model)
        reached(on_cpu, "PeftModel.from_pretrained's re-dispatch moved every int8 weight off the CPU; see peft_* metrics")

        with torch.no_grad():
            out = model(**inputs_for(model, with_media=False))
        metric("logits_device", str(out.logits.device))
        check(out.logits.device == torch.device("cuda:0"), f"logits came back on {out.logits.device}, expected cuda:0")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


def gpu_budget(path: str) -> int:
    """GPU_SHARE of the model's int8 footprint, measured on a load that is all on GPU 0."""
    full = load_model(path, quantization_config=int8_config(), device_map={"": 0}, dtype=torch.bfloat16)
    footprint = int(full.get_memory_footprint())
    del full
    torch.cuda.empty_cache()
    metric("int8_footprint_bytes", footprint)
    metric("gpu_budget_bytes", int(footprint * GPU_SHARE))
    return int(footprint * GPU_SHARE)


def record_int8_placement(stage: str, model: Any) -> int:
    """Metrics `<stage>_*` on where the int8 weights are; returns how many sit on the CPU, quantized."""
    homes = weight_homes(model, "Linear8bitLt")
    on_cpu = sorted(name for name, (device, dtype) in homes.items() if device == "cpu" and dtype == "torch.int8")
    device_map = getattr(model, "hf_device_map", None) or {}
    metric(f"{stage}_int8_layers", len(homes))
    metric(f"{stage}_int8_layers_on_cpu", len(on_cpu))
    metric(f"{stage}_int8_homes", str(sorted({f"{device} {dtype}" for device, dtype in homes.values()})))
    metric(f"{stage}_device_map_cpu_entries", sum(device == "cpu" for device in device_map.values()))
    metric(f"{stage}_param_devices", str(sorted(devices_of(model))))
    if on_cpu:
        metric(f"{stage}_first_int8_on_cpu", on_cpu[0])
    return len(on_cpu)


if __name__ == "__main__":
    main()
