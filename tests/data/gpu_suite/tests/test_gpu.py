"""Tests of the kind a team keeps for its GPU path: each one touches CUDA in the test process."""

from __future__ import annotations

import pytest
import torch


def test_matmul_on_cuda(cuda: torch.device) -> None:
    a = torch.randn(64, 64, device=cuda)
    assert torch.allclose(a @ torch.eye(64, device=cuda), a)


@pytest.mark.quant
def test_4bit_linear_is_close_to_its_dequantized_weight(cuda: torch.device) -> None:
    import bitsandbytes as bnb

    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 32, bias=False, dtype=torch.float16)
    layer = bnb.nn.Linear4bit(64, 32, bias=False, compute_dtype=torch.float16, quant_type="nf4")
    layer.weight = bnb.nn.Params4bit(dense.weight.data, requires_grad=False, quant_type="nf4")
    layer = layer.to(cuda)
    x = torch.randn(4, 64, dtype=torch.float16, device=cuda)
    weight = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state)
    assert torch.allclose(layer(x), x @ weight.t(), atol=1e-2)


@pytest.mark.quant
def test_lora_on_a_4bit_layer_starts_as_the_base_and_then_moves(cuda: torch.device) -> None:
    import bitsandbytes as bnb
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=torch.float16)).to(cuda)
    x = torch.randn(2, 64, dtype=torch.float16, device=cuda)
    base = model(x).clone()
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["0"]))
    assert torch.equal(peft_model(x), base)  # LoRA's B starts at zero
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.ones_(param)
    assert not torch.allclose(peft_model(x), base)


@pytest.mark.quant
def test_int8_matmul_is_exact(cuda: torch.device) -> None:
    """Fails on purpose: 8-bit weights are not exact. A failed assertion is `fail`, with a signature."""
    import bitsandbytes as bnb

    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 64, bias=False, dtype=torch.float16).to(cuda)
    layer = bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False)
    layer.load_state_dict(dense.state_dict())
    layer = layer.to(cuda)
    x = torch.randn(4, 64, dtype=torch.float16, device=cuda)
    assert torch.equal(layer(x), dense(x))


def test_two_gpus(cuda: torch.device) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    a = torch.ones(8, device="cuda:0")
    assert torch.equal(a.to("cuda:1").cpu(), a.cpu())
