"""verdict.interpret: from what a scenario process left behind to status, message and signature."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.interpret import RawRun, interpret
from harness.analysis.outcome import Status

SP = "/work/.nox/cell-1/lib/python3.11/site-packages/"
SCENARIO = "/work/scenarios/gemma4_lora_inner_linear.py"
TIMEOUT = 300.0


def raw(
    record: dict[str, Any] | None = None, exit_code: int | None = 0, sig: int | None = None, timed_out: bool = False, output: str = ""
) -> RawRun:
    return RawRun(record=record, exit_code=exit_code, signal=sig, timed_out=timed_out, seconds=1.5, output_tail=output)


ERROR_RECORD = {
    "status": "error",
    "exception_type": "builtins.KeyError",
    "message": "'sliding_attention'",
    "frames": [
        [SCENARIO, 40, "<module>"],
        [SP + "torch/nn/modules/module.py", 1784, "_call_impl"],
        [SP + "transformers/masking_utils.py", 812, "create_masks_for_generate"],
    ],
    "traceback": "Traceback (most recent call last):\n  ...\nKeyError: 'sliding_attention'\n",
}
FAIL_RECORD = {
    "status": "fail",
    "exception_type": "_kit.ScenarioFailed",
    "message": "merged output differs from adapter output by 0.25",
    "frames": [[SCENARIO, 77, "<module>"], ["/work/scenarios/_kit.py", 44, "check"]],
    "traceback": "Traceback ...",
}
NA_RECORD = {"status": "not_applicable", "exception_type": "_kit.NotApplicable", "message": "needs a CUDA device", "frames": []}
OOM_RECORD = {
    "status": "oom",
    "exception_type": "torch.OutOfMemoryError",
    "message": "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB",
    "frames": [[SCENARIO, 12, "<module>"], [SP + "torch/nn/modules/module.py", 1784, "_call_impl"]],
}

FAULTHANDLER_IN_BNB = f"""Fatal Python error: Segmentation fault

Current thread 0x00007f4b77e29b80 (most recent call first):
  File "{SP}bitsandbytes/functional.py", line 480 in as_dict
  File "{SP}bitsandbytes/nn/modules.py", line 300 in __getstate__
  File "{SP}peft/tuners/lora/bnb.py", line 90 in merge
  File "{SCENARIO}", line 5 in <module>
"""
FAULTHANDLER_IN_USER_CODE = f"""Fatal Python error: Segmentation fault

Current thread 0x00007f4b77e29b80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "{SCENARIO}", line 5 in <module>
"""
TRACEBACK_OUTPUT = f"""loading checkpoint shards: 100%
Traceback (most recent call last):
  File "{SCENARIO}", line 5, in <module>
    model = get_peft_model(model, config)
  File "{SP}peft/tuners/lora/model.py", line 355, in _create_new_module
    raise ValueError(msg)
ValueError: r=16 is larger than in_features=8
"""
GEMMA_MESSAGE = """Target module Gemma4ClippableLinear(
  (linear): Linear(in_features=32, out_features=64, bias=False)
) is not supported."""

#: (raw run) -> (status, message, signature text or None, blamed library, exception type)
VERDICTS = [
    pytest.param(raw({"status": "pass"}), Status.PASS, "", None, "", "", id="pass"),
    pytest.param(
        raw(ERROR_RECORD, exit_code=1),
        Status.ERROR,
        "KeyError: 'sliding_attention'",
        "KeyError: <key> @ transformers/masking_utils.py:create_masks_for_generate",
        "transformers",
        "KeyError",
        id="error-record",
    ),
    pytest.param(
        raw(FAIL_RECORD, exit_code=1),
        Status.FAIL,
        "ScenarioFailed: merged output differs from adapter output by 0.25",
        "ScenarioFailed: merged output differs from adapter output by <n>",
        "",
        "ScenarioFailed",
        id="fail",
    ),
    pytest.param(raw(NA_RECORD, exit_code=1), Status.NOT_APPLICABLE, "needs a CUDA device", None, "", "NotApplicable", id="not-applicable"),
    pytest.param(
        raw(OOM_RECORD, exit_code=1),
        Status.OOM,
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB",
        "OutOfMemoryError: CUDA out of memory. Tried to allocate <size>. GPU <n> has a total capacity of <size>"
        " @ torch/nn/modules/module.py:_call_impl",
        "torch",
        "OutOfMemoryError",
        id="oom",
    ),
    # a record with no status is an error, not a pass
    pytest.param(
        raw({"exception_type": "builtins.RuntimeError", "message": "boom"}, exit_code=1),
        Status.ERROR,
        "RuntimeError: boom",
        "RuntimeError: boom",
        "",
        "RuntimeError",
        id="record-without-status",
    ),
    # the timeout wins over whatever was left behind
    pytest.param(
        raw({"status": "pass"}, exit_code=None, timed_out=True),
        Status.TIMEOUT,
        "no result after 300s; the process group was killed",
        "timeout",
        "",
        "",
        id="timed-out",
    ),
    pytest.param(
        raw(None, exit_code=None, sig=signal.SIGSEGV), Status.CRASH, "killed by SIGSEGV", "crash: SIGSEGV", "", "", id="sigsegv-no-stack"
    ),
    pytest.param(
        raw(None, exit_code=None, sig=signal.SIGSEGV, output=FAULTHANDLER_IN_BNB),
        Status.CRASH,
        "killed by SIGSEGV",
        "crash: SIGSEGV @ bitsandbytes/functional.py:as_dict",
        "bitsandbytes",
        "",
        id="sigsegv-stack-in-bitsandbytes",
    ),
    pytest.param(
        raw(None, exit_code=None, sig=signal.SIGSEGV, output=FAULTHANDLER_IN_USER_CODE),
        Status.CRASH,
        "killed by SIGSEGV",
        "crash: SIGSEGV",
        "",
        "",
        id="sigsegv-stack-in-user-code",
    ),
    pytest.param(raw(None, exit_code=None, sig=signal.SIGKILL), Status.CRASH, "killed by SIGKILL", "crash: SIGKILL", "", "", id="sigkill"),
    pytest.param(raw(None, exit_code=None, sig=signal.SIGABRT), Status.CRASH, "killed by SIGABRT", "crash: SIGABRT", "", "", id="sigabrt"),
    pytest.param(
        raw(None, exit_code=None, sig=signal.SIGXFSZ),
        Status.CRASH,
        "output exceeded the harness's limit; the scenario was stopped",
        "crash: SIGXFSZ",
        "",
        "",
        id="sigxfsz",
    ),
    pytest.param(
        raw(None, exit_code=3), Status.CRASH, "exited with code 3 without a result", "crash: exit <n>", "", "", id="exit-3-no-record"
    ),
    pytest.param(
        raw(None, exit_code=1, output=TRACEBACK_OUTPUT),
        Status.ERROR,
        "ValueError: r=16 is larger than in_features=8",
        "ValueError: r=<n> is larger than in_features=<n> @ peft/tuners/lora/model.py:_create_new_module",
        "peft",
        "ValueError",
        id="exit-1-traceback-in-output",
    ),
    pytest.param(raw(None, exit_code=0), Status.PASS, "exited 0 without writing a result", None, "", "", id="exit-0-no-record"),
]


@pytest.mark.parametrize(("run", "status", "message", "signature", "library", "exception_type"), VERDICTS)
def test_interpret(run: RawRun, status: Status, message: str, signature: str | None, library: str, exception_type: str) -> None:
    verdict = interpret(run, TIMEOUT)
    assert verdict.status is status
    assert verdict.message == message
    assert verdict.exception_type == exception_type
    if signature is None:
        assert verdict.signature is None
    else:
        assert verdict.signature is not None
        assert verdict.signature.text == signature
        assert verdict.signature.library == library


def test_interpret_keeps_the_childs_traceback() -> None:
    assert interpret(raw(ERROR_RECORD, exit_code=1), TIMEOUT).traceback == ERROR_RECORD["traceback"]


def test_interpret_timeout_message_names_the_timeout() -> None:
    assert interpret(raw(None, exit_code=None, timed_out=True), 2.5).message == "no result after 2.5s; the process group was killed"


def test_interpret_blames_only_the_given_libraries() -> None:
    verdict = interpret(raw(ERROR_RECORD, exit_code=1), TIMEOUT, libraries=("torch", "peft"))
    assert verdict.signature is not None
    assert verdict.signature.library == "torch"
    assert verdict.signature.location == "torch/nn/modules/module.py:_call_impl"


def test_same_failure_same_family_from_record_or_from_output() -> None:
    frames = [[SCENARIO, 5, "<module>"], [SP + "peft/tuners/lora/model.py", 355, "_create_new_module"]]
    record = {"status": "error", "exception_type": "builtins.ValueError", "message": GEMMA_MESSAGE, "frames": frames}
    output = (
        f'Traceback (most recent call last):\n  File "{SCENARIO}", line 5, in <module>\n'
        f'  File "{SP}peft/tuners/lora/model.py", line 355, in _create_new_module\nValueError: {GEMMA_MESSAGE}\n'
    )
    from_record = interpret(raw(record, exit_code=1), TIMEOUT).signature
    from_output = interpret(raw(None, exit_code=1, output=output), TIMEOUT).signature
    assert from_record is not None and from_output is not None
    assert from_output.text == from_record.text


def test_interpret_unknown_signal_number() -> None:
    verdict = interpret(raw(None, exit_code=None, sig=200), TIMEOUT)
    assert (verdict.status, verdict.message) == (Status.CRASH, "killed by signal 200")


# -- real native crashes, so the faulthandler format is the interpreter's own ---------------

CRASHER = """
import ctypes

def as_dict():
    ctypes.string_at(0)
"""
WORKER = """
import time

def _download_worker(ready):
    ready.set()
    time.sleep(30)
"""
MAIN = """
import faulthandler, sys, threading
sys.path.insert(0, {site!r})
faulthandler.enable()
from bitsandbytes import functional
if {with_thread}:
    from transformers.utils import hub
    ready = threading.Event()
    threading.Thread(target=hub._download_worker, args=(ready,), daemon=True).start()
    ready.wait()
functional.as_dict()
"""


def _segfault(tmp_path: Path, with_thread: bool) -> RawRun:
    site = tmp_path / "lib" / "site-packages"
    (site / "bitsandbytes").mkdir(parents=True)
    (site / "bitsandbytes" / "__init__.py").write_text("")
    (site / "bitsandbytes" / "functional.py").write_text(CRASHER)
    (site / "transformers" / "utils").mkdir(parents=True)
    (site / "transformers" / "__init__.py").write_text("")
    (site / "transformers" / "utils" / "__init__.py").write_text("")
    (site / "transformers" / "utils" / "hub.py").write_text(WORKER)
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(MAIN.format(site=str(site), with_thread=with_thread)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    return RawRun(record=None, exit_code=None, signal=-proc.returncode, timed_out=False, seconds=0.1, output_tail=proc.stderr)


def test_real_segfault_in_a_library_blames_it(tmp_path: Path) -> None:
    verdict = interpret(_segfault(tmp_path, with_thread=False), TIMEOUT)
    assert verdict.status is Status.CRASH
    assert verdict.signature is not None
    assert verdict.signature.text == "crash: SIGSEGV @ bitsandbytes/functional.py:as_dict"
    assert verdict.signature.library == "bitsandbytes"


def test_real_segfault_blames_the_crashing_thread_not_a_background_thread(tmp_path: Path) -> None:
    run = _segfault(tmp_path, with_thread=True)
    assert "Current thread" in run.output_tail and "_download_worker" in run.output_tail
    verdict = interpret(run, TIMEOUT)
    assert verdict.signature is not None
    assert verdict.signature.library == "bitsandbytes"


def _error(message: str, exception_type: str = "builtins.RuntimeError") -> RawRun:
    frames = [[SCENARIO, 12, "main"], [SP + "torch/cuda/__init__.py", 372, "_lazy_init"]]
    return raw({"status": "error", "exception_type": exception_type, "message": message, "frames": frames}, exit_code=1)


#: (what the scenario raised, GPUs it declared it needs, the status it gets). GPU faults are data:
#: an out-of-memory in any words is `oom`; no GPU at all for a scenario that needs one is the
#: runner's loss, not the versions' (`not_applicable`); for a CPU scenario it is a library's bug.
GPU_FAULTS = [
    pytest.param(
        _error("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.81 GiB total capacity)"), 1, Status.OOM, id="old-torch-oom"
    ),
    pytest.param(
        _error("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"), 1, Status.OOM, id="raw-cuda-oom"
    ),
    pytest.param(_error("CUDA error: out of memory", "torch.AcceleratorError"), 1, Status.OOM, id="accelerator-error-oom"),
    pytest.param(_error("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), 1, Status.OOM, id="cublas-oom"),
    pytest.param(_error("No CUDA GPUs are available"), 1, Status.NOT_APPLICABLE, id="vanished-gpu"),
    pytest.param(_error("Found no NVIDIA driver on your system. Please check ..."), 1, Status.NOT_APPLICABLE, id="no-driver"),
    pytest.param(_error("CUDA error: no CUDA-capable device is detected"), 2, Status.NOT_APPLICABLE, id="no-device"),
    # a CPU scenario that meets CUDA's absence found a library insisting on CUDA: a bug, kept as an error
    pytest.param(_error("No CUDA GPUs are available"), 0, Status.ERROR, id="cpu-scenario-needs-cuda"),
    # a device map naming a GPU that does not exist is a bug a library can have, not a vanished GPU
    pytest.param(_error("CUDA error: invalid device ordinal"), 2, Status.ERROR, id="invalid-ordinal"),
    pytest.param(_error("CUDA error: CUDA driver version is insufficient for CUDA runtime version"), 1, Status.ERROR, id="old-driver"),
]


@pytest.mark.parametrize(("run", "gpus", "status"), GPU_FAULTS)
def test_gpu_faults_are_classified(run: RawRun, gpus: int, status: Status) -> None:
    meaning = interpret(run, TIMEOUT, gpus=gpus)
    assert meaning.status == status
    if status == Status.OOM:
        assert meaning.signature is not None  # still a failure, in its family
    if status == Status.NOT_APPLICABLE:
        assert "saw none" in meaning.message and "nvidia-smi" in meaning.message and meaning.signature is None
