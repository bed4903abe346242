"""Run on a GPU runner, as a scenario (forked from a cell's server) and as a plain script in the
same env: bitsandbytes preloaded by the server must be in the state a fresh import gives.

Prints one JSON line: whether bitsandbytes and peft were loaded before this file ran, whether
this process may use CUDA, the native library bitsandbytes chose, and a 4-bit matmul's checksum.
"""

import json
import sys

preloaded = {name: name in sys.modules for name in ("bitsandbytes", "peft", "transformers")}
import torch  # noqa: E402

usable = {"cuda_initialized": torch.cuda.is_initialized(), "bad_fork": torch._C._cuda_isInBadFork()}
import bitsandbytes as bnb  # noqa: E402
from bitsandbytes import cextension  # noqa: E402

native = getattr(getattr(cextension.lib, "_lib", None), "_name", repr(cextension.lib))
torch.manual_seed(0)
layer = bnb.nn.Linear4bit(64, 32, compute_dtype=torch.float16).cuda()
out = layer(torch.randn(4, 64, device="cuda", dtype=torch.float16))
print(json.dumps({"preloaded": preloaded, **usable, "native": native, "checksum": round(float(out.float().sum()), 3)}))
