"""After the faults, the same cell's next scenario gets a working GPU: memory back, kernels run.

What the harness must say: `pass`, with the free fraction of GPU memory as a metric.
"""

from __future__ import annotations

import torch
from _kit import check, metric

REQUIRES = {"gpus": 1}
TIMEOUT = 60


def main() -> None:
    free, total = torch.cuda.mem_get_info()
    metric("gpu_free_fraction", round(free / total, 3))
    torch.cuda._sleep(1000)  # a kernel that does return
    a = torch.randn(1024, 1024, device="cuda")
    b = a @ a.T
    torch.cuda.synchronize()
    check(bool(torch.isfinite(b).all().item()), "a matmul on the GPU gave non-finite values")
    check(free / total > 0.5, f"only {free / total:.0%} of GPU memory is free after the faults: the OOM's memory did not come back")


if __name__ == "__main__":
    main()
