"""What machine ran the sweep: stored with every run, so results from runners can be compared."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from typing import Any


def gpus() -> list[dict[str, str]]:
    """GPUs visible to this process, as nvidia-smi reports them; [] without a driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    fields = "name,memory.total,compute_cap,driver_version"
    try:
        proc = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    rows = [dict(zip(fields.split(","), (v.strip() for v in line.split(",")))) for line in proc.stdout.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() and all(p.strip().isdigit() for p in visible.split(",")):
        rows = [rows[int(i)] for i in visible.split(",") if int(i) < len(rows)]
    return rows


def describe(selected: list[str] | None = None) -> dict[str, Any]:
    """This machine; with `selected` (sweep --gpus), only those GPUs, as the run saw them."""
    found = gpus()
    if selected is not None:
        found = [found[int(i)] for i in selected if i.strip().isdigit() and int(i) < len(found)]
    return {
        "hostname": socket.gethostname(),
        "platform": f"{platform.system().lower()}-{platform.machine()}",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpu_count": len(found),
        "gpu": found[0]["name"] if found else "cpu",
        "gpus": found,
    }
