import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def _tiny_model():
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


@pytest.fixture
def tiny_model():
    """A one-layer Llama built in-process (no download), the same weights every call."""
    return _tiny_model
