"""Merging a LoRA adapter into its base gives the logits of the adapter on top (the scenario kit's protocol).

The kit (`_kit`, shipped with the harness and importable from every scenario) adds what a
plain script cannot say: `check(cond, message)` fails the scenario with status `fail` (its own
check, not a crash), `metric(name, value)` stores a number with the outcome, and the literals
below are read without running the file, so a cell that cannot run it is `not_applicable`.
See the harness's docs/scenarios.md for `SETUP` / `reached` (a check that only means something
once a state is reached).
"""

import torch
from _kit import check, metric
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

REQUIRES = {"packages": {"transformers": ">=4.45", "peft": ">=0.13"}, "gpus": 0}
TIMEOUT = 120
TOLERANCE = 1e-4  # float32: merging changes only the order of the sums

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
# init_lora_weights=False: random B, so the adapter changes the output and the merge has something to do
lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
model = get_peft_model(LlamaForCausalLM(config), lora).eval()
batch = torch.randint(0, config.vocab_size, (2, 16))

with torch.no_grad():
    with_adapter = model(input_ids=batch).logits
    merged = model.merge_and_unload()
    after_merge = merged(input_ids=batch).logits

diff = (with_adapter - after_merge).abs().max().item()
metric("max_abs_logit_diff", diff)
check(diff < TOLERANCE, f"the merged model's logits differ from the adapter's by {diff:.2e} (tolerance {TOLERANCE})")
