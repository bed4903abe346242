"""A LoRA adapter saved by peft loads back through transformers' `load_adapter`."""

import pytest
import torch
from peft import LoraConfig, get_peft_model


@pytest.mark.adapter
def test_load_adapter_roundtrip(tiny_model, tmp_path):
    config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(tiny_model(), config)
    peft_model.save_pretrained(tmp_path)
    model = tiny_model()
    model.load_adapter(str(tmp_path))
    ids = torch.tensor([[1, 2, 3]])
    assert torch.allclose(model(ids).logits, peft_model(ids).logits, atol=1e-5)


def test_peft_config_roundtrip(tmp_path):
    # peft alone: passes with every release, so the suite has a test that never changes
    LoraConfig(r=2, target_modules=["q_proj"]).save_pretrained(tmp_path)
    assert LoraConfig.from_pretrained(tmp_path).r == 2
