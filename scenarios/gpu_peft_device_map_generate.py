"""Passing the base's device_map to PeftModel.from_pretrained, then generate: the shared-KV KeyError.

Thread: with `PeftModel.from_pretrained(..., device_map=device_map)` the load goes through,
then generate fails in Gemma 4's shared-KV attention: `KeyError: 22` at
`shared_kv_states[self.kv_shared_layer_index]`. Upstream context:
https://github.com/huggingface/transformers/pull/45312 (Gemma 4 KV-state sharing).
The thread's exact call: the split map of the base handed to PEFT again. `inconclusive`
unless PEFT's dispatch hooked every shared-KV layer (a hook there is what copies the dict).
"""

from __future__ import annotations

import tempfile
import time

from _gemma4 import adapter_path, decoder_layers, kv_shared_layers
from _gpu import SPLIT, generate, hooked, inputs_for, load_quantized, nf4, record_cuda_peak, require_cuda
from _kit import check, metric, reached
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 180
SETUP = "accelerate hooks on the shared-KV decoder layers"


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        base = load_quantized(workdir, nf4(fp32_cpu_offload=True), SPLIT, offload_folder=f"{workdir}/offload")
        model = PeftModel.from_pretrained(
            base, adapter_path(workdir), is_trainable=False, device_map=dict(SPLIT), offload_dir=f"{workdir}/peft-offload"
        ).eval()
        layers = decoder_layers(model)
        shared = [layers[i] for i in kv_shared_layers(model)]
        metric("kv_shared_layers", len(shared))
        metric("kv_shared_layers_hooked", hooked(shared))
        reached(shared and hooked(shared) == len(shared), f"{hooked(shared)} of {len(shared)} shared-KV layers carry an accelerate hook")
        tokens = generate(model, inputs_for(model, with_media=False))
        check(len(tokens) == 4, f"generated {len(tokens)} tokens, expected 4")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
