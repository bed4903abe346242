"""gemma4_peft_split_4bit_load.py with bnb_4bit_use_double_quant=True: `Tensor.item()` on meta.

Upstream: https://github.com/huggingface/transformers/issues/43873 (offloading with
quantization); thread: the first post's traceback.

The thread's first failure, with its first config (double quantization on): while PEFT's
re-dispatch attaches hooks, accelerate's attach_execution_device_hook calls
`module.state_dict()` on a block whose 4-bit layers it has just offloaded; bitsandbytes
serializes the nested QuantState, and `nested_offset = self.offset.item()` meets a meta
tensor: `RuntimeError: Tensor.item() cannot be called on meta tensors`.

Reproduced on CPU with the thread's traceback (attach_execution_device_hook -> state_dict
-> Linear4bit._save_to_state_dict -> QuantState.as_dict) at accelerate 1.14.0 and 1.15.0
(bitsandbytes 0.49.2 and 0.50.2). accelerate 1.13.0 fails earlier, with the
`_is_hf_initialized` TypeError of gemma4_peft_split_4bit_load.py. `inconclusive` if no
offloaded 4-bit layer carries a nested quant state: the offset the thread's trace reads.
"""

from __future__ import annotations

from gemma4_peft_split_4bit_load import main

REQUIRES = {
    "packages": {
        "transformers": ">=5.5.0",
        "peft": ">=0.18.0",
        "accelerate": ">=1.0",
        "bitsandbytes": ">=0.49.0",
    }
}
TIMEOUT = 120
SETUP = "PEFT's re-dispatch offloaded a double-quant 4-bit layer"


if __name__ == "__main__":
    main(double_quant=True)
