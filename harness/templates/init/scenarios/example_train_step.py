"""Three LoRA training steps on a tiny Llama built from a config (nothing is downloaded): the loss goes down.

A plain script, as with `git bisect run`: exit 0 is a pass, and an uncaught exception is an
`error` whose traceback gives the failure signature (the exception, its message with the
volatile parts masked, and the frame of the library to blame). Replace it with your own code
path: the smaller the model, the faster every cell runs.
"""

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
batch = torch.randint(0, config.vocab_size, (2, 16))

losses = []
for _ in range(3):
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())

assert losses[-1] < losses[0], f"the loss did not go down: {losses}"
print("losses:", ", ".join(f"{x:.4f}" for x in losses))
