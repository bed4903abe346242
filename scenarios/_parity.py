"""Compare two models' outputs on the same inputs: logits and greedy tokens, as metrics.

compare(reference, candidate, inputs, tolerance=1e-4, what="merged model")
"""

from __future__ import annotations

from typing import Any

import torch
from _gemma4 import logits
from _kit import check, metric

NEW_TOKENS = 4


@torch.no_grad()
def greedy(model: Any, inputs: dict[str, torch.Tensor], new_tokens: int = NEW_TOKENS) -> list[int]:
    """The new tokens of a greedy generate; min_new_tokens keeps an early EOS out."""
    out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def compare(
    reference: Any,
    candidate: Any,
    inputs: dict[str, torch.Tensor],
    tolerance: float,
    what: str,
) -> None:
    """Record max/mean abs logit diff and token agreement; check both against `reference`.

    Metrics are all recorded before any check, so a `fail` row carries all of them.
    """
    diff = (logits(candidate, inputs) - logits(reference, inputs)).abs()
    metric("max_abs_logit_diff", diff.max().item())
    metric("mean_abs_logit_diff", diff.mean().item())
    expected, got = greedy(reference, inputs), greedy(candidate, inputs)
    agreement = sum(a == b for a, b in zip(expected, got, strict=True)) / len(expected)
    metric("token_agreement", agreement)
    check(
        diff.max().item() <= tolerance,
        f"{what}: logits differ by up to {diff.max().item():.3g} (tolerance {tolerance:g})",
    )
    check(got == expected, f"{what}: generated {got}, expected {expected}")
