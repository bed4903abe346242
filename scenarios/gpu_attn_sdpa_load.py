"""The thread's model kwargs on GPU: attn_implementation="sdpa", 4-bit, all on GPU 0, then generate.

Thread: MODEL_KWARGS = {"dtype": torch.bfloat16, "attn_implementation": "sdpa", ...} for
Gemma4ForConditionalGeneration.from_pretrained. Found on the GPU runner: transformers 5.23.0
refuses it (`Gemma4AudioModel does not support an attention implementation through
torch.nn.functional.scaled_dot_product_attention yet`) where 5.6.2 and 5.17.0 load it.

Thread: https://discuss.huggingface.co/t/cpu-offloading-error-scenario/175522 (its MODEL_KWARGS).
"""

from __future__ import annotations

import tempfile
import time

from _gpu import ALL_ON_GPU, generate, inputs_for, load_quantized, nf4, record_cuda_peak, require_cuda
from _kit import check, metric

REQUIRES = {"packages": {"transformers": ">=5.5.0", "bitsandbytes": ">=0.45"}, "gpus": 1}
TIMEOUT = 120


def main() -> None:
    require_cuda()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        model = load_quantized(workdir, nf4(), ALL_ON_GPU, attn_implementation="sdpa")
        tokens = generate(model, inputs_for(model, with_media=False))
        check(len(tokens) == 4, f"generated {len(tokens)} tokens, expected 4")
    metric("seconds", round(time.perf_counter() - start, 3))
    record_cuda_peak()


if __name__ == "__main__":
    main()
