"""Gemma 4 shared-KV layers after PeftModel.from_pretrained(..., device_map=...).

Upstream: https://github.com/huggingface/transformers/pull/45312 (Gemma 4 KV-state
sharing fix, named in the thread); thread failure: `KeyError: 22` at
`shared_kv_states[self.kv_shared_layer_index]` during generate.

Gemma 4's last `num_kv_shared_layers` decoder layers read the K/V that an earlier layer
wrote into a `shared_kv_states` dict passed down as a keyword argument. When PEFT
re-dispatches the model with a device_map that gives decoder layers their own entries
(what an "auto" map does, one entry per Gemma4TextDecoderLayer), each layer gets an
accelerate hook that sends its keyword arguments to the execution device. PEFT's
dispatch_model call passes no `skip_keys`, so the hook rebuilds the dict: the writer
layer fills a copy, the reader finds nothing.

CPU reproduction (float32; the thread's 4-bit base is not needed for this one): the
towers offloaded to disk, then the adapter loaded with a per-layer map, then a forward
compared with the same adapter held in memory. Run on CPU:
- transformers 5.5.0: pass (the shared K/V still lived on the cache object);
- 5.6.2: `KeyError: 0` (the synthetic model's source layer; 22 in the thread's E4B);
- 5.10.4, 5.11.0: `KeyError: 'sliding_attention'` (the dict is keyed by layer type now);
- 5.23.0: pass (the dict became `KVSharingDict`, which accelerate moves in place).
Read from the released wheels: the plain dict arrives in 5.5.2, KVSharingDict in 5.23.0.

`inconclusive` unless the model has shared-KV layers and PEFT's dispatch hooked every one of
them: without a hook on the reader nothing copies the dict, and the comparison says nothing.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _gemma4 import adapter_path, decoder_layers, kv_shared_layers, load_model, model_inputs
from _kit import metric, reached, record_peak_memory
from _parity import compare
from accelerate import dispatch_model
from peft import PeftModel

REQUIRES = {"packages": {"transformers": ">=5.5.0", "peft": ">=0.18.0", "accelerate": ">=1.0"}}
TIMEOUT = 120
TOWERS = ("model.vision_tower", "model.audio_tower")
TOLERANCE = 1e-4
SETUP = "a per-layer device map with accelerate hooks on the shared-KV layers"


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        adapter = adapter_path(workdir)
        reference = PeftModel.from_pretrained(load_model(), adapter).eval()
        shared = kv_shared_layers(reference)
        metric("kv_shared_layers", len(shared))
        split = load_with_layer_map(adapter, Path(workdir))
        layers = decoder_layers(split)
        hooked = [i for i in shared if hasattr(layers[i], "_hf_hook")]
        metric("kv_shared_layers_hooked", len(hooked))
        reached(shared and len(hooked) == len(shared), f"{len(hooked)} of {len(shared)} shared-KV layers carry an accelerate hook")
        try:
            inputs = model_inputs(reference.config, with_media=False)
            compare(reference, split, inputs, TOLERANCE, "re-dispatched model")
        finally:  # a failing row still gets its timing
            metric("seconds", round(time.perf_counter() - start, 3))
            record_peak_memory()


def load_with_layer_map(adapter: str, workdir: Path) -> PeftModel:
    """A split base (towers on disk), then the adapter with one map entry per layer."""
    base = load_model()
    towers_on_disk = dict.fromkeys(TOWERS, "disk")
    dispatch_model(
        base,
        device_map={**towers_on_disk, "": "cpu"},
        offload_dir=str(workdir / "base-offload"),
        skip_keys=base._skip_keys_device_placement,
    )
    # PEFT dispatches the wrapper, so the map speaks its module names. The towers stay
    # where they are: PEFT only knows the disk copies it found at load time.
    prefix = "base_model.model."
    layers = len(base.model.language_model.layers)
    device_map = {
        **{prefix + tower: "disk" for tower in TOWERS},
        **{f"{prefix}model.language_model.layers.{i}": "cpu" for i in range(layers)},
        "": "cpu",
    }
    metric("device_map_entries", len(device_map))
    model = PeftModel.from_pretrained(base, adapter, device_map=device_map, offload_dir=str(workdir / "peft-offload"))
    return model.eval()


if __name__ == "__main__":
    main()
