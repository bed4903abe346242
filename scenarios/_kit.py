"""The scenario kit: outcomes, metrics and peak memory for scenario files.

Stdlib-only at import time, because it runs inside a cell's virtualenv where only the
libraries under test are installed (torch is imported lazily, and only if present).

    from _kit import check, metric, not_applicable, reached

    SETUP = "a 4-bit layer is offloaded"              # the state the check needs (read by the harness)
    reached(offloaded_layers > 0, f"{offloaded_layers} layers offloaded")   # else: status `inconclusive`
    metric("max_abs_logit_diff", 0.0132)
    check(tokens_agree, "merged output differs from adapter output")
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

# A metric is one JSON scalar, so the harness can store it in a column without parsing.
MetricValue = int | float | str | bool | None

_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_metrics: dict[str, MetricValue] = {}


class ScenarioFailed(Exception):
    """The scenario's own check failed: the harness records status `fail`."""


class NotApplicable(Exception):
    """The scenario cannot say anything in this cell: status `not_applicable`."""


class Inconclusive(Exception):
    """The scenario ran but never reached the state it checks: status `inconclusive`.

    Neither a pass nor a failure: attribution, pins and reports never count it as evidence.
    """


def check(cond: object, message: str) -> None:
    """Raise ScenarioFailed(message) unless `cond` is truthy."""
    if not cond:
        raise ScenarioFailed(message)


def not_applicable(reason: str) -> NoReturn:
    raise NotApplicable(reason)


def inconclusive(reason: str) -> NoReturn:
    raise Inconclusive(reason)


def reached(cond: object, detail: str = "") -> None:
    """Confirm the scenario's declared setup (its module-level `SETUP`) before it checks anything.

    Falsy `cond`: status `inconclusive`, saying which state was missed and what was seen
    (`detail`). Either way the outcome is recorded as the metric `setup_reached`; a scenario
    that declares a SETUP and ends without a truthy confirmation is `inconclusive` too, never
    a pass. Record the numbers behind `cond` as metrics first, so the row shows why.
    """
    setup = str(getattr(sys.modules.get("__main__"), "SETUP", "") or "the state it checks")
    # Recorded either way, so a scenario that confirms its setup in steps (after a load, then
    # after a re-dispatch) never leaves a True from an earlier step beside the later miss.
    metric("setup_reached", bool(cond))
    if not cond:
        raise Inconclusive(f"did not reach its setup: {setup}" + (f" ({detail})" if detail else ""))


def metric(name: str, value: MetricValue) -> None:
    """Record one metric; every call rewrites the whole metrics file.

    Rewriting on every call means a scenario that dies later (crash, timeout) still
    leaves the metrics it had recorded.
    """
    if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"invalid metric name: {name!r} (letters, digits, '_', '.', '-')")
    _metrics[name] = _json_scalar(name, value)
    path = os.environ.get("HARNESS_METRICS")
    if path:
        _write_json_atomically(path, _metrics)
    else:
        print(f"metric {name}={_metrics[name]}", flush=True)


def metrics() -> dict[str, MetricValue]:
    """A copy of the metrics recorded so far in this process."""
    return dict(_metrics)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Record the wall-clock seconds of the `with` body as metric `name`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        metric(name, round(time.perf_counter() - start, 4))


def device() -> str:
    """The device the scenario should use: HARNESS_DEVICE, else cuda if torch sees one."""
    chosen = os.environ.get("HARNESS_DEVICE")
    if chosen:
        return chosen
    import torch  # lazily: the kit itself must import without torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def peak_memory() -> dict[str, float]:
    """Peak memory so far, in MiB: `peak_rss_mib` always, `peak_cuda_mib` if CUDA was used."""
    peaks = {"peak_rss_mib": _peak_rss_mib()}
    cuda = _peak_cuda_mib()
    if cuda is not None:
        peaks["peak_cuda_mib"] = cuda
    return peaks


def record_peak_memory() -> dict[str, float]:
    """Store peak_memory() as metrics and return it."""
    peaks = peak_memory()
    for name, value in peaks.items():
        metric(name, value)
    return peaks


def _peak_rss_mib() -> float:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in bytes on macOS and in KiB on Linux.
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return round(maxrss / scale, 1)


def _peak_cuda_mib() -> float | None:
    # Only look if the scenario imported torch: importing it here would cost seconds,
    # and a process that never imported torch has used no CUDA memory.
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    total = sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
    return round(float(total) / (1024 * 1024), 1)


def _json_scalar(name: str, value: object) -> MetricValue:
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        # NaN and infinities are not JSON; keep them readable rather than dropping them.
        return value if math.isfinite(value) else repr(value)
    item = getattr(value, "item", None)  # a torch or numpy scalar
    if callable(item):
        return _json_scalar(name, item())
    raise TypeError(f"metric {name!r}: expected a number, str, bool or None, got {value!r}")


def _write_json_atomically(path: str, data: dict[str, MetricValue]) -> None:
    # Write beside the target then rename, so a reader never sees a half-written file.
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".metrics-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
