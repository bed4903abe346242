"""GPU fault: a kernel that never returns. `torch.cuda._sleep` spins one kernel for 2**62 clock
cycles (decades), and `synchronize` waits for it. SIGTERM is ignored, as a process stuck in a
driver call may not answer it, so the harness's timeout must escalate to SIGKILL of the whole
process group; a grandchild process (named gpu-fault-wedge-grandchild, for the leftover check;
it inherits the ignored SIGTERM, so only the group's SIGKILL ends it) must die with it.

What the harness must say: `timeout` after TIMEOUT seconds, and the next scenario of the cell
runs on the GPU (the driver ends the kernel with the process's CUDA context).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import torch
from _kit import metric

REQUIRES = {"gpus": 1}
TIMEOUT = 20


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.cuda._sleep(1 << 62)  # launched: it returns at once, the kernel runs on
    metric("kernel_launched", True)
    # Started only now: a scenario that failed before (no GPU) must not leave it behind.
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "gpu-fault-wedge-grandchild"])
    metric("grandchild_pid", grandchild.pid)
    torch.cuda.synchronize()  # never returns
    metric("kernel_returned", True)


if __name__ == "__main__":
    main()
