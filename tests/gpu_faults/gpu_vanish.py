"""GPU fault: the GPU disappears. Before CUDA starts in this process, CUDA_VISIBLE_DEVICES is
pointed at a device that does not exist, as when a GPU falls off the bus or a scheduler hides
it after the harness counted it; then the scenario uses the GPU as any scenario would, without
checking first.

What the harness must say: `not_applicable`, with a message naming the vanished GPU and the
fix (the harness saw the GPU when it started the scenario; a device that is gone says nothing
about the versions under test, as a GPU scenario on a CPU machine says nothing), and the next
scenario of the cell runs on the GPU.
"""

from __future__ import annotations

import os

REQUIRES = {"gpus": 1}
TIMEOUT = 60


def main() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = "4242"  # read by CUDA when it starts, which it has not yet here
    import torch  # preloaded by the fork server already: only CUDA's start is still to come

    print(torch.ones(4, device="cuda").sum().item())


if __name__ == "__main__":
    main()
