"""A device_map key that names no module is accepted without a word.

Upstream: https://github.com/huggingface/transformers/issues/45482 (Gemma 4 cross-device
offload), forum thread "CPU offloading error scenario" (discuss.huggingface.co/t/175522).

The thread's map offloads `model.vision_tower`, `model.multi_modal_projector` and
`model.audio_tower`. Gemma 4 has no `multi_modal_projector` (its bridges are
`model.embed_vision` and `model.embed_audio`), so that entry moves nothing and the user's
picture of what was offloaded is wrong. This scenario loads the synthetic model with the
thread's map (the rest on HARNESS_DEVICE), records the keys that match no module, and
checks that transformers or accelerate said so (a warning, a log record or an error
naming the key).

Results. On a GPU (H200; transformers 5.17.0, accelerate 1.15.0) the map spans two
devices, from_pretrained dispatches it, and accelerate's check_device_map warns "The
following device_map keys do not match any submodules in the model:
['model.multi_modal_projector']" (the warning is in 1.13.0 too): `pass`. On CPU every
value is "cpu", from_pretrained never dispatches, nothing checks the keys: `fail` with
transformers 5.5.0, 5.6.2 and 5.23.0. `inconclusive` with a model that has every module the
map names (a real checkpoint with a `multi_modal_projector`): nothing is left to report.
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from _gemma4 import base_model_path, load_model
from _kit import check, device, metric, reached, record_peak_memory
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

REQUIRES = {"packages": {"transformers": ">=5.5.0", "accelerate": ">=1.0"}}
TIMEOUT = 120
OFFLOADED = ("model.vision_tower", "model.multi_modal_projector", "model.audio_tower")
SETUP = "a device_map key that names no module"


def main() -> None:
    start = time.perf_counter()
    main_device: str | int = 0 if device().startswith("cuda") else "cpu"
    device_map = {**dict.fromkeys(OFFLOADED, "cpu"), "": main_device}
    with tempfile.TemporaryDirectory() as workdir:
        path = base_model_path(workdir)
        unmatched = unmatched_keys(device_map, module_names(path))
        metric("unmatched_device_map_keys", ",".join(unmatched))
        metric("unmatched_device_map_key_count", len(unmatched))
        reached(unmatched, f"every key of {sorted(device_map)} names a module of this model")
        with capture_reports() as reports:
            try:
                model = load_model(path, device_map=device_map)
            except (ValueError, KeyError) as exc:
                # Refusing the map with a message that names the key is the good outcome.
                if not unmatched or not all(key in str(exc) for key in unmatched):
                    raise
                metric("rejected_by_library", True)
                return
    metric("dispatched", hasattr(model, "hf_device_map"))
    metric("seconds", round(time.perf_counter() - start, 3))
    record_peak_memory()
    said = [report for report in reports if any(key in report for key in unmatched)]
    if said:
        metric("library_report", said[0][:300])
    silent = [key for key in unmatched if not any(key in report for report in said)]
    check(not silent, f"device_map keys {silent} name no module and nothing reported it")


def module_names(path: str) -> set[str]:
    """Module names of the model at `path`, built on the meta device (no weights read)."""
    config = Gemma4Config.from_pretrained(path)
    with torch.device("meta"):
        model = Gemma4ForConditionalGeneration(config)
    return {name for name, _ in model.named_modules()}


def unmatched_keys(device_map: dict[str, str | int], modules: set[str]) -> list[str]:
    """Keys that are neither a module nor a prefix of one ("" always matches)."""
    return [key for key in device_map if key and key not in modules and not any(m.startswith(key + ".") for m in modules)]


@contextmanager
def capture_reports() -> Iterator[list[str]]:
    """Collect warnings and transformers/accelerate log records of level WARNING and up."""
    reports: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reports.append(record.getMessage())

    handler = Collect(logging.WARNING)
    loggers = [logging.getLogger(name) for name in ("transformers", "accelerate")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield reports
        reports.extend(str(w.message) for w in caught)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


if __name__ == "__main__":
    main()
