"""LoRA adapter load through transformers' `load_adapter`: issue 39's regression as a scenario.

transformers 5.6.0's `load_adapter` imports `peft.utils.save_and_load._maybe_shard_state_dict_for_tp`,
which peft 0.19.0 added: with an older peft the load fails with an ImportError raised in transformers.
The same check as tests/test_adapter.py, for the report and repro tests of a scenario.
"""

import tempfile

import torch
from _kit import check, reached
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

SETUP = "a LoRA adapter saved by peft"


def tiny_model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(config)


with tempfile.TemporaryDirectory() as folder:
    peft_model = get_peft_model(tiny_model(), LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(folder)
    reached(True, "adapter saved")
    model = tiny_model()
    model.load_adapter(folder)
    ids = torch.tensor([[1, 2, 3]])
    check(torch.allclose(model(ids).logits, peft_model(ids).logits, atol=1e-5), "the loaded adapter changes the logits")
