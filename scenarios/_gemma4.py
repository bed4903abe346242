"""A tiny deterministic Gemma 4 (text, vision and audio towers) for scenarios.

Built in-process from configs, so scenarios need no hub access and no weights; small enough
that building it and generating a few tokens takes well under a second on CPU. It keeps
the structure the thread's failures depend on: shared-KV decoder layers, and
`Gemma4ClippableLinear` wrappers around every projection in the vision and audio towers.

    model = build_model()                          # eval mode, seeded
    inputs = model_inputs(model.config)            # text + image + audio placeholders
    adapter = adapter_path(workdir)                # or $HARNESS_ADAPTER

Set HARNESS_MODEL / HARNESS_ADAPTER to use a real checkpoint / adapter instead: `load_model`,
`base_model_path` and `adapter_path` then return those. Needs transformers >= 5.5.0 (the
first release with models/gemma4); works with 5.6.2 up to at least 5.23.0.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import (
    Gemma4AudioConfig,
    Gemma4Config,
    Gemma4ForConditionalGeneration,
    Gemma4TextConfig,
    Gemma4VisionConfig,
)

if TYPE_CHECKING:
    from peft import LoraConfig

SEED = 0
VOCAB = 128
# Multimodal special tokens, moved inside the tiny vocabulary (the real ids are > 255_000).
SPECIAL_TOKENS = {
    "boi_token_id": 120,
    "eoi_token_id": 121,
    "image_token_id": 122,
    "video_token_id": 123,
    "boa_token_id": 124,
    "eoa_token_index": 125,
    "audio_token_id": 126,
}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The broad targets of a typical text LoRA; on Gemma 4 they also name the towers' wrappers.
BROAD_TARGETS = list(PROJECTIONS)
# Inner-linear workaround (peft#3129): plain projections in the language model, and the
# `.linear` inside each tower's Gemma4ClippableLinear, which PEFT cannot wrap itself.
_ALT = "|".join(PROJECTIONS)
INNER_LINEAR_TARGETS = (
    rf".*language_model\.layers\.\d+\.(?:self_attn|mlp)\.(?:{_ALT})"
    rf"|.*(?:vision_tower|audio_tower)\..*\.(?:{_ALT})\.linear"
)
IMAGE_SOFT_TOKENS = 4
AUDIO_SOFT_TOKENS = 8
# The last 2 of the 4 text layers reuse earlier layers' K/V, as in Gemma 4 E2B/E4B.
KV_SHARED_LAYERS = 2


def tiny_config(kv_shared_layers: int = KV_SHARED_LAYERS) -> Gemma4Config:
    """Config of the synthetic model: 4 text layers (the last `kv_shared_layers` share KV), 2 per tower.

    Every nn.Linear has in_features a multiple of 64: bitsandbytes' CPU 4-bit kernels
    pack weights in blocks of 64 per row and fail on anything narrower. `kv_shared_layers=0`
    is for scenarios that must keep the shared-KV KeyError of gemma4_peft_device_map_shared_kv
    out of their way.
    """
    text = Gemma4TextConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        global_head_dim=32,
        # Each shared layer reuses K/V of the last unshared layer of its own type, so
        # both types must appear before the shared block, and the last layer must be full.
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=kv_shared_layers,
        sliding_window=8,
        vocab_size_per_layer_input=VOCAB,
        hidden_size_per_layer_input=64,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    vision = Gemma4VisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        patch_size=8,  # 3 * 8 * 8 = 192 input features per patch
        pooling_kernel_size=2,
        position_embedding_size=16,
        use_clipped_linears=True,
    )
    audio = Gemma4AudioConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        # The subsampler assumes as many mel bins as first-layer channels (128 in real
        # ones); its projection then reads 16 // 4 * 16 = 64 features.
        subsampling_conv_channels=[16, 16],
        output_proj_dims=64,
        attention_chunk_size=4,
        attention_context_left=5,
        attention_context_right=0,
    )
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio, **SPECIAL_TOKENS)


def build_model(seed: int = SEED, kv_shared_layers: int = KV_SHARED_LAYERS) -> Gemma4ForConditionalGeneration:
    """The synthetic model in eval mode; the same seed gives the same weights."""
    torch.manual_seed(seed)
    return Gemma4ForConditionalGeneration(tiny_config(kv_shared_layers)).eval()


def load_model(path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Any:
    """`from_pretrained(path or $HARNESS_MODEL)`; the synthetic model if neither is given.

    kwargs (quantization_config, device_map, dtype, ...) go to from_pretrained; they are
    refused for the in-process model, which has no loading step for them to act on.
    """
    source = path or os.environ.get("HARNESS_MODEL")
    if source:
        return Gemma4ForConditionalGeneration.from_pretrained(source, **kwargs).eval()
    if kwargs:
        raise TypeError(f"load_model: {sorted(kwargs)} need a saved model; pass base_model_path(dir)")
    return build_model()


def base_model_path(workdir: str | os.PathLike[str], kv_shared_layers: int = KV_SHARED_LAYERS) -> str:
    """$HARNESS_MODEL, else the synthetic model saved under `workdir`/base."""
    real = os.environ.get("HARNESS_MODEL")
    if real:
        return real

    def save(target: Path) -> None:
        build_model(kv_shared_layers=kv_shared_layers).save_pretrained(target)

    return _saved(workdir, f"base-kv{kv_shared_layers}", save)


def lora_config(target_modules: str | list[str] = INNER_LINEAR_TARGETS) -> LoraConfig:
    """A small LoRA config; defaults to the inner-linear multimodal targets."""
    from peft import LoraConfig  # lazily: the model alone must not need peft

    # init_lora_weights=False draws B randomly instead of zeros, so the adapter changes
    # the outputs and parity checks compare something.
    return LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=target_modules,
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )


def adapter_path(workdir: str | os.PathLike[str], seed: int = SEED, kv_shared_layers: int = KV_SHARED_LAYERS) -> str:
    """$HARNESS_ADAPTER, else a synthetic multimodal LoRA adapter saved under `workdir`.

    `kv_shared_layers` must match the base's: shared-KV layers have no k_proj/v_proj to adapt.
    """
    real = os.environ.get("HARNESS_ADAPTER")
    if real:
        return real

    def save(target: Path) -> None:
        from peft import get_peft_model

        # get_peft_model rewrites the model in place: use a throwaway base.
        base = build_model(kv_shared_layers=kv_shared_layers)
        torch.manual_seed(seed + 1)
        peft_model = get_peft_model(base, lora_config())
        # The embeddings were not trained; "auto" would look the base config up on the hub.
        peft_model.save_pretrained(target, save_embedding_layers=False)

    return _saved(workdir, f"adapter-seed{seed}-kv{kv_shared_layers}", save, name="adapter")


def _saved(workdir: str | os.PathLike[str], key: str, save: Any, name: str = "base") -> str:
    """A model or adapter saved once per cell and read by each scenario of the cell after it.

    The harness gives each cell's scenarios one folder, $HARNESS_CELL_DIR: every scenario of a
    cell would otherwise build and save the same seeded model again (a third of a cell's time on
    CPU). It is made by the cell's own libraries, into a temporary folder renamed into place, so
    a scenario that fails while saving leaves nothing, and the next one saves (and fails) again.
    Without the folder (a scenario run by hand), it is saved under `workdir/name`, as before.
    """
    shared = os.environ.get("HARNESS_CELL_DIR")
    if not shared:
        target = Path(workdir) / name
        save(target)
        return str(target)
    done = Path(shared) / key
    if not done.is_dir():
        Path(shared).mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=shared))
        save(fresh / name)
        try:
            (fresh / name).rename(done)
        except OSError:  # another scenario of the cell saved it first: the same seeded files
            pass
    return str(done)


def model_inputs(config: Gemma4Config, with_media: bool = True) -> dict[str, torch.Tensor]:
    """A deterministic batch of one: text, plus an image and an audio clip if with_media.

    Shapes come from the config, so the same inputs fit a real checkpoint: the image is
    a square grid of patches that pools to IMAGE_SOFT_TOKENS, and the audio clip has
    4 frames per soft token (two stride-2 convolutions).
    """
    text = [2, 5, 6, 7]
    if not with_media:
        return {"input_ids": torch.tensor([text])}
    gen = torch.Generator().manual_seed(SEED)
    image = _image_inputs(config.vision_config, gen)
    audio = _audio_inputs(config.audio_config, gen)
    ids = (
        [2, config.boi_token_id]
        + [config.image_token_id] * IMAGE_SOFT_TOKENS
        + [config.eoi_token_id, config.boa_token_id]
        + [config.audio_token_id] * AUDIO_SOFT_TOKENS
        + [config.eoa_token_index]
        + text[1:]
    )
    return {"input_ids": torch.tensor([ids]), **image, **audio}


def _image_inputs(vision: Gemma4VisionConfig, gen: torch.Generator) -> dict[str, torch.Tensor]:
    side = int(IMAGE_SOFT_TOKENS**0.5) * vision.pooling_kernel_size
    xs, ys = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy")
    positions = torch.stack([xs, ys], dim=-1).reshape(1, side * side, 2)
    pixels = torch.rand(1, side * side, 3 * vision.patch_size**2, generator=gen)
    return {"pixel_values": pixels, "image_position_ids": positions}


def _audio_inputs(audio: Gemma4AudioConfig, gen: torch.Generator) -> dict[str, torch.Tensor]:
    frames = AUDIO_SOFT_TOKENS * 4
    mel_bins = audio.subsampling_conv_channels[0]
    features = torch.rand(1, frames, mel_bins, generator=gen)
    return {
        "input_features": features,
        "input_features_mask": torch.ones(1, frames, dtype=torch.bool),
    }


def kv_shared_layers(model: torch.nn.Module) -> list[int]:
    """Indices of decoder layers that reuse another layer's K/V (no k_proj of their own)."""
    layers = decoder_layers(model)
    return [i for i, layer in enumerate(layers) if layer.self_attn.is_kv_shared_layer]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The language model's decoder layers, through any PEFT or accelerate wrapping."""
    return list(_language_model(model).layers)


def clippable_linears(model: torch.nn.Module) -> list[str]:
    """Names of the Gemma4ClippableLinear wrappers (the modules PEFT rejects)."""
    return [name for name, module in model.named_modules() if type(module).__name__ == "Gemma4ClippableLinear"]


def lora_module_names(model: torch.nn.Module) -> list[str]:
    """Names of the modules that carry LoRA weights in a PEFT-wrapped model."""
    return [name for name, module in model.named_modules() if hasattr(module, "lora_A")]


def count_by_tower(names: list[str]) -> dict[str, int]:
    """How many of `names` sit in each tower: {'language': .., 'vision': .., 'audio': ..}."""
    towers = {"vision": r"\.vision_tower\.", "audio": r"\.audio_tower\.", "language": ""}
    counts = dict.fromkeys(towers, 0)
    for name in names:
        tower = next(t for t, pattern in towers.items() if re.search(pattern, name))
        counts[tower] += 1
    return counts


def _language_model(model: torch.nn.Module) -> Any:
    # Found by class name so it works through any PEFT or accelerate wrapping.
    for module in model.modules():
        if type(module).__name__ == "Gemma4TextModel":
            return module
    raise ValueError("no Gemma 4 language model found in the given model")


@torch.no_grad()
def logits(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Float32 logits of one forward pass, on the CPU for comparisons."""
    return model(**inputs).logits.float().cpu()


@torch.no_grad()
def tower_outputs(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The soft tokens each tower hands the language model, by tower name.

    Captured with hooks on the multimodal embedders rather than through
    get_image_features, whose return type changed between transformers releases.
    """
    captured: dict[str, torch.Tensor] = {}
    handles = [
        module.register_forward_hook(_capture(captured, name.rsplit("_", 1)[-1]))
        for name, module in model.named_modules()
        if name.endswith(("embed_vision", "embed_audio"))
    ]
    try:
        model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    return captured


def _capture(into: dict[str, torch.Tensor], key: str) -> Any:
    def hook(_module: torch.nn.Module, _args: Any, output: torch.Tensor) -> None:
        into[key] = output.detach().float().cpu()

    return hook


def to_device(inputs: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in inputs.items()}
