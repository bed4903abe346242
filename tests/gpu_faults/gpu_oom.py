"""GPU fault: a CUDA out-of-memory. Takes GPU memory 1 GiB at a time until CUDA refuses a block.

What the harness must say: `oom` (torch.OutOfMemoryError), with the allocated GiB as a metric;
the memory comes back when this process ends, so the next scenario of the cell gets a whole GPU.
Not part of the forum pack (scenarios/): scripts/gpu_faults.sh runs it on the GPU runner.
"""

from __future__ import annotations

import torch
from _kit import metric

REQUIRES = {"gpus": 1}
TIMEOUT = 120


def main() -> None:
    free, total = torch.cuda.mem_get_info()
    metric("gpu_total_mib", round(total / 2**20))
    metric("gpu_free_mib_before", round(free / 2**20))
    blocks = []
    while True:  # until CUDA says no: that error is the point
        blocks.append(torch.empty(2**30, dtype=torch.uint8, device="cuda"))
        metric("allocated_gib", len(blocks))


if __name__ == "__main__":
    main()
