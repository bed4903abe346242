"""From what a scenario process left behind to a status, a message and a signature. Pure."""

from __future__ import annotations

import signal as signals
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.signature import DEFAULT_LIBRARIES, Frame, Signature, make_signature, parse_traceback, status_signature
from harness.analysis.status import Status

_SIGXFSZ = getattr(signals, "SIGXFSZ", 25)


@dataclass
class RawRun:
    """What a scenario process left behind, before interpretation."""

    record: dict[str, Any] | None  # the child's result JSON, if it got to write one
    exit_code: int | None
    signal: int | None
    timed_out: bool
    seconds: float
    output_tail: str
    metrics: dict[str, Any] = field(default_factory=dict)
    imported: list[str] = field(default_factory=list)  # installed modules the scenario imported (leaves)
    run_seconds: float | None = None  # the scenario file's own run in its process (the child's clock)
    import_seconds: float | None = None  # of that, its imports (Python 3.12+; running/incell/scenario.py, _import_clock)
    imports_culprit: dict[str, str] = field(default_factory=dict)  # module -> the CUDA culprit's library it imports


@dataclass
class Interpretation:
    status: Status
    message: str
    signature: Signature | None
    exception_type: str = ""
    traceback: str = ""


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _frames(record: dict[str, Any]) -> list[Frame]:
    return [Frame(str(f[0]), int(f[1]), str(f[2])) for f in record.get("frames") or []]


#: The metric `_kit.reached()` records when a scenario confirms its declared setup.
SETUP_REACHED = "setup_reached"

#: Device memory exhausted, in the words of the errors that are not torch.OutOfMemoryError (which
#: the child already calls `oom`): older torch's RuntimeError, cuBLAS, a raw CUDA error from a
#: library's own kernels (bitsandbytes), torch.AcceleratorError.
OOM_WORDS = (
    "cuda out of memory",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
    "cudaerrormemoryallocation",
    "hip out of memory",
)
#: The scenario's process saw no GPU at all: the driver or the device is gone, or
#: CUDA_VISIBLE_DEVICES names none. Not "invalid device ordinal": a device map pointing at a
#: GPU that does not exist is a bug a library can have.
NO_GPU_WORDS = (
    "no cuda gpus are available",
    "no cuda-capable device is detected",
    "found no nvidia driver on your system",
    "cuda driver initialization failed",
    "cudaerrornodevice",
    "cuda_error_no_device",
)


def interpret(raw: RawRun, timeout: float, libraries: Iterable[str] = DEFAULT_LIBRARIES, setup: str = "", gpus: int = 0) -> Interpretation:
    """The outcome of one scenario process. `setup`: the state the scenario declared it must reach
    (`SETUP`); a pass that never confirmed it is `inconclusive`, not a pass. `gpus`: how many GPUs
    the scenario declared it needs (the harness saw them when it started the scenario)."""
    meaning = _gpu_faults(_interpret(raw, timeout, tuple(libraries)), gpus)
    if setup and meaning.status == Status.PASS and raw.metrics.get(SETUP_REACHED) is not True:
        return Interpretation(
            Status.INCONCLUSIVE, f"never confirmed its setup ({setup}); a scenario that declares SETUP must call _kit.reached()", None
        )
    return meaning


def _gpu_faults(meaning: Interpretation, gpus: int) -> Interpretation:
    """An error that is really the GPU's: out of memory (`oom`, still a failure), or, for a
    scenario that needs a GPU, no GPU at all (`not_applicable`: the runner lost the device the
    harness counted when it started the scenario, which says nothing about the versions under
    test, as a GPU scenario on a machine without one says nothing). A scenario that needs no
    GPU and meets this error has found a bug (a library that insists on CUDA): it stays `error`."""
    if meaning.status != Status.ERROR:
        return meaning
    words = meaning.message.lower()
    if any(w in words for w in OOM_WORDS):
        return Interpretation(Status.OOM, meaning.message, meaning.signature, meaning.exception_type, meaning.traceback)
    if gpus and any(w in words for w in NO_GPU_WORDS):
        reason = (
            f"needs {gpus} GPU(s), but its process saw none ({meaning.message.splitlines()[0][:300]}): the GPU vanished or "
            "CUDA_VISIBLE_DEVICES names none; check nvidia-smi on the runner, then rerun with --fresh to compute it again"
        )
        return Interpretation(Status.NOT_APPLICABLE, reason, None, meaning.exception_type, meaning.traceback)
    return meaning


def _interpret(raw: RawRun, timeout: float, libs: tuple[str, ...]) -> Interpretation:
    if raw.timed_out:
        return Interpretation(Status.TIMEOUT, f"no result after {timeout:g}s; the process group was killed", status_signature("timeout"))
    record = raw.record
    if record is not None:
        status = Status(record.get("status", "error"))
        if status == Status.PASS:
            return Interpretation(Status.PASS, "", None)
        exc_type = str(record.get("exception_type", ""))
        message = str(record.get("message", ""))
        short = exc_type.rsplit(".", 1)[-1]
        if status in (Status.NOT_APPLICABLE, Status.INCONCLUSIVE):
            return Interpretation(status, message, None, short)
        sig = make_signature(short, message, _frames(record), libs)
        return Interpretation(status, f"{short}: {message}".strip(), sig, short, str(record.get("traceback", "")))
    if raw.signal is not None:
        name = _signal_name(raw.signal)
        if raw.signal == _SIGXFSZ:
            return Interpretation(
                Status.CRASH, "output exceeded the harness's limit; the scenario was stopped", status_signature("crash", name)
            )
        return Interpretation(Status.CRASH, f"killed by {name}", _crash_signature(name, raw.output_tail, libs))
    if raw.exit_code not in (0, None):
        parsed = parse_traceback(raw.output_tail)
        if parsed:
            exc_type, message, frames = parsed
            return Interpretation(
                Status.ERROR, f"{exc_type}: {message}", make_signature(exc_type, message, frames, libs), exc_type.rsplit(".", 1)[-1]
            )
        return Interpretation(
            Status.CRASH, f"exited with code {raw.exit_code} without a result", status_signature("crash", f"exit {raw.exit_code}")
        )
    return Interpretation(Status.PASS, "exited 0 without writing a result", None)


def _crash_signature(name: str, output: str, libraries: tuple[str, ...]) -> Signature:
    """A native crash still names a library when faulthandler printed the Python stack."""
    frames = []
    lines = output.splitlines()
    # faulthandler prints other threads first; only the crashing thread's stack is evidence.
    current = max((i for i, line in enumerate(lines) if line.startswith("Current thread")), default=-1)
    if current >= 0:
        lines = lines[current + 1 :]
        end = next((i for i, line in enumerate(lines) if not line.strip() or line.startswith("Thread ")), len(lines))
        lines = lines[:end]
    for line in lines:
        line = line.strip()
        if line.startswith('File "') and " line " in line:
            path = line.split('"')[1]
            func = line.rsplit(" in ", 1)[-1]
            frames.append(Frame(path, 0, func))
    # faulthandler prints innermost first
    sig = make_signature("crash", name, list(reversed(frames)), libraries)
    return sig if sig.location else status_signature("crash", name)
