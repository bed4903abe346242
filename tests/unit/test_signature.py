"""signature.py: masking, blame and families of failures; parsing tracebacks from free text."""

from __future__ import annotations

import traceback

import pytest

from harness.analysis.signature import Frame, library_of, make_signature, mask_message, parse_traceback, status_signature

SP = "/work/.nox/cell-1/lib/python3.11/site-packages/"
SP_OTHER = "/home/ci/.venvs/cell-7/lib/python3.12/site-packages/"
WIN_SP = "C:\\Users\\me\\venv\\Lib\\site-packages\\"
USER = Frame("/work/scenarios/gemma4_lora_inner_linear.py", 40, "<module>")


def f(path: str, function: str, lineno: int = 10, prefix: str = SP) -> Frame:
    return Frame(prefix + path, lineno, function)


TF_MASK = f("transformers/masking_utils.py", "create_masks_for_generate", 812)
SET_TENSOR = f("accelerate/utils/modeling.py", "set_module_tensor_to_device", 330)
AS_DICT = f("bitsandbytes/functional.py", "as_dict", 480)
META = f("torch/_meta_registrations.py", "meta_local_scalar_dense", 7001)
CALL_IMPL = f("torch/nn/modules/module.py", "_call_impl", 1784)
LORA = f("peft/tuners/lora/model.py", "_create_new_module", 355)

GEMMA_REPR_TINY = """Target module Gemma4ClippableLinear(
  (linear): Linear(in_features=32, out_features=64, bias=False)
) is not supported. Currently, only the following modules are supported: `torch.nn.Linear`, `torch.nn.Embedding`, `torch.nn.Conv1d`."""
GEMMA_REPR_REAL = GEMMA_REPR_TINY.replace("32", "2560").replace("64", "10240")
#: the same module with two more children: a repr of more than 3 lines
GEMMA_REPR_BIG = GEMMA_REPR_TINY.replace(
    "  (linear)", "  (input_clip): Clip(min=-3.5, max=3.5)\n  (output_clip): Clip(min=-8.0, max=8.0)\n  (linear)"
)

#: (exception type, message, frames) -> (signature text, library, location)
SIGNATURES = [
    pytest.param(
        "KeyError",
        "0",
        [USER, CALL_IMPL, TF_MASK],
        "KeyError: <key> @ transformers/masking_utils.py:create_masks_for_generate",
        "transformers",
        "transformers/masking_utils.py:create_masks_for_generate",
        id="keyerror-number",
    ),
    pytest.param(
        "builtins.KeyError",
        "'sliding_attention'",
        [USER, TF_MASK],
        "KeyError: <key> @ transformers/masking_utils.py:create_masks_for_generate",
        "transformers",
        "transformers/masking_utils.py:create_masks_for_generate",
        id="keyerror-qualified-type",
    ),
    pytest.param(
        "TypeError",
        "Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'",
        [USER, f("transformers/modeling_utils.py", "from_pretrained"), SET_TENSOR],
        "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
        " @ accelerate/utils/modeling.py:set_module_tensor_to_device",
        "accelerate",
        "accelerate/utils/modeling.py:set_module_tensor_to_device",
        id="params4bit-new",
    ),
    # torch raises for its caller: the meta check blames bitsandbytes, which asked for .item()
    pytest.param(
        "RuntimeError",
        "Tensor.item() cannot be called on meta tensors",
        [USER, LORA, f("bitsandbytes/nn/modules.py", "__getstate__"), AS_DICT, f("torch/_ops.py", "__call__"), META],
        "RuntimeError: Tensor.item() cannot be called on meta tensors @ bitsandbytes/functional.py:as_dict",
        "bitsandbytes",
        "bitsandbytes/functional.py:as_dict",
        id="meta-item-blames-bitsandbytes-not-torch",
    ),
    # torch is blamed only when nothing above it is a library under test
    pytest.param(
        "RuntimeError",
        "expected scalar type Float but found Half",
        [USER, CALL_IMPL, f("torch/nn/functional.py", "linear")],
        "RuntimeError: expected scalar type Float but found Half @ torch/nn/functional.py:linear",
        "torch",
        "torch/nn/functional.py:linear",
        id="only-torch-blames-innermost-torch",
    ),
    # the innermost library frame wins, not the outermost
    pytest.param(
        "AttributeError",
        "'NoneType' object has no attribute 'weight'",
        [USER, f("transformers/trainer.py", "train"), LORA, SET_TENSOR],
        "AttributeError: 'NoneType' object has no attribute 'weight' @ accelerate/utils/modeling.py:set_module_tensor_to_device",
        "accelerate",
        "accelerate/utils/modeling.py:set_module_tensor_to_device",
        id="innermost-library",
    ),
    # numpy is not a library under test: blame falls through to peft
    pytest.param(
        "ValueError",
        "bad input",
        [USER, LORA, f("numpy/core/fromnumeric.py", "sum")],
        "ValueError: bad input @ peft/tuners/lora/model.py:_create_new_module",
        "peft",
        "peft/tuners/lora/model.py:_create_new_module",
        id="other-site-packages-skipped",
    ),
    pytest.param(
        "ValueError",
        "bad value",
        [USER, Frame("/work/scenarios/_kit.py", 3, "check")],
        "ValueError: bad value",
        "",
        "",
        id="user-code-only",
    ),
    pytest.param("ValueError", "bad value", [], "ValueError: bad value", "", "", id="no-frames"),
    # a file named like a library outside site-packages is user code
    pytest.param(
        "ValueError",
        "bad value",
        [Frame("/work/peft/tuners/lora/model.py", 3, "f")],
        "ValueError: bad value",
        "",
        "",
        id="library-name-outside-site-packages",
    ),
    pytest.param(
        "ValueError",
        "bad value",
        [USER, f("peft\\tuners\\lora\\model.py", "_create_new_module", prefix=WIN_SP)],
        "ValueError: bad value @ peft/tuners/lora/model.py:_create_new_module",
        "peft",
        "peft/tuners/lora/model.py:_create_new_module",
        id="windows-site-packages",
    ),
    pytest.param(
        "ImportError",
        "cannot import name 'x'",
        [f("torch/__init__.py", "<module>", prefix="/usr/lib/python3/dist-packages/")],
        "ImportError: cannot import name 'x' @ torch/__init__.py:<module>",
        "torch",
        "torch/__init__.py:<module>",
        id="dist-packages",
    ),
    # peft_extras is not peft
    pytest.param(
        "ValueError", "bad value", [f("peft_extras/x.py", "g")], "ValueError: bad value", "", "", id="library-prefix-is-not-library"
    ),
    pytest.param(
        "ValueError",
        GEMMA_REPR_TINY,
        [USER, LORA],
        "ValueError: Target module Gemma4ClippableLinear(...) is not supported. Currently, only the following modules are supported:"
        " `torch.nn.Linear`, `torch.nn.Embedding`, `torch.nn.Conv1d`. @ peft/tuners/lora/model.py:_create_new_module",
        "peft",
        "peft/tuners/lora/model.py:_create_new_module",
        id="module-repr-collapsed",
    ),
]


@pytest.mark.parametrize(("exc_type", "message", "frames", "text", "library", "location"), SIGNATURES)
def test_make_signature(exc_type: str, message: str, frames: list[Frame], text: str, library: str, location: str) -> None:
    sig = make_signature(exc_type, message, frames)
    assert (sig.text, sig.library, sig.location) == (text, library, location)
    assert sig.exception_type == exc_type.rsplit(".", 1)[-1]
    assert len(sig.family) == 12 and sig.family == make_signature(exc_type, message, frames).family


def test_libraries_argument_limits_blame() -> None:
    frames = [USER, LORA, SET_TENSOR]
    assert make_signature("ValueError", "x", frames, libraries=("peft",)).library == "peft"
    assert make_signature("ValueError", "x", frames, libraries=("transformers",)).library == ""


#: pairs that are one bug and must share a family
SAME_FAMILY = [
    pytest.param(("KeyError", "0", [USER, TF_MASK]), ("KeyError", "'sliding_attention'", [USER, TF_MASK]), id="keyerror-key"),
    pytest.param(
        ("TypeError", "Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'", [USER, SET_TENSOR]),
        ("TypeError", "Int8Params.__new__() got an unexpected keyword argument '_is_hf_initialized'", [USER, SET_TENSOR]),
        id="params4bit-int8params",
    ),
    pytest.param(("ValueError", GEMMA_REPR_TINY, [LORA]), ("ValueError", GEMMA_REPR_REAL, [LORA]), id="module-repr-sizes"),
    pytest.param(
        ("RuntimeError", "bad tensor at 0x7f3a2b1c4d90", [CALL_IMPL]),
        ("RuntimeError", "bad tensor at 0x55d0c0ffee00", [CALL_IMPL]),
        id="addresses",
    ),
    pytest.param(
        ("RuntimeError", "expected torch.Size([2, 3]), got torch.Size([4])", [CALL_IMPL]),
        ("RuntimeError", "expected torch.Size([2560, 10240]), got torch.Size([1, 8, 2560])", [CALL_IMPL]),
        id="torch-size",
    ),
    pytest.param(
        ("RuntimeError", "mat1 and mat2 shapes cannot be multiplied: [2, 3] and [4, 5]", [CALL_IMPL]),
        ("RuntimeError", "mat1 and mat2 shapes cannot be multiplied: [8, 2560] and [10240, 2560]", [CALL_IMPL]),
        id="list-shapes",
    ),
    pytest.param(
        ("OSError", "Unable to load weights from /tmp/pytest-1/tiny/model.safetensors", [LORA]),
        ("OSError", "Unable to load weights from /home/me/.cache/huggingface/hub/models--google--gemma/model.safetensors", [LORA]),
        id="paths",
    ),
    pytest.param(
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 20.00 MiB", [CALL_IMPL]),
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 1.50 GiB", [CALL_IMPL]),
        id="sizes",
    ),
    pytest.param(
        ("ImportError", "peft 0.19.1 requires transformers>=5.5.0 but found 5.4.2", [LORA]),
        ("ImportError", "peft 0.21.2 requires transformers>=5.6.0 but found 5.4.0.dev0", [LORA]),
        id="versions",
    ),
    pytest.param(("ValueError", "expected 3 values, got 4", [LORA]), ("ValueError", "expected 1 values, got 12", [LORA]), id="numbers"),
    # the line number and the venv's location change between releases and runners
    pytest.param(
        ("KeyError", "0", [f("transformers/masking_utils.py", "create_masks_for_generate", 812)]),
        ("KeyError", "0", [f("transformers/masking_utils.py", "create_masks_for_generate", 901, prefix=SP_OTHER)]),
        id="lineno-and-venv",
    ),
    pytest.param(
        ("ValueError", GEMMA_REPR_TINY, [LORA]),
        ("ValueError", GEMMA_REPR_BIG, [LORA]),
        id="module-repr-over-three-lines",
    ),
]


@pytest.mark.parametrize(("a", "b"), SAME_FAMILY)
def test_same_family(a: tuple[str, str, list[Frame]], b: tuple[str, str, list[Frame]]) -> None:
    sa, sb = make_signature(*a), make_signature(*b)
    assert sa.text == sb.text
    assert sa.family == sb.family


#: pairs that are different bugs and must not share a family
DIFFERENT_FAMILY = [
    pytest.param(
        ("KeyError", "0", [TF_MASK]), ("KeyError", "0", [f("transformers/masking_utils.py", "sliding_window_mask")]), id="other-function"
    ),
    pytest.param(
        ("RuntimeError", "Tensor.item() cannot be called on meta tensors", [AS_DICT]),
        ("RuntimeError", "Cannot copy out of meta tensor; no data!", [AS_DICT]),
        id="other-message",
    ),
    pytest.param(("ValueError", "bad", [LORA]), ("TypeError", "bad", [LORA]), id="other-type"),
    pytest.param(("ValueError", "bad", [LORA]), ("ValueError", "bad", [SET_TENSOR]), id="other-library"),
    pytest.param(
        ("ValueError", "dtype float16 not supported", [LORA]),
        ("ValueError", "dtype bfloat16 not supported", [LORA]),
        id="digits-inside-words-kept",
    ),
    pytest.param(("SIGSEGV", "", []), ("SIGABRT", "", []), id="other-signal"),
    pytest.param(
        ("OSError", "cannot open /tmp/a/b.bin because the header is too large", [LORA]),
        ("OSError", "cannot open /tmp/a/b.bin because the file is truncated", [LORA]),
        id="words-after-a-path",
    ),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT_FAMILY)
def test_different_family(a: tuple[str, str, list[Frame]], b: tuple[str, str, list[Frame]]) -> None:
    assert make_signature(*a).family != make_signature(*b).family


MASKS = [
    ("RuntimeError", "object at 0x7f3a2b1c4d90 is gone", "object at <addr> is gone"),
    (
        "RuntimeError",
        "mat1 and mat2 shapes cannot be multiplied: [2, 3] and [4, 5]",
        "mat1 and mat2 shapes cannot be multiplied: <shape> and <shape>",
    ),
    ("RuntimeError", "index [-1] out of range", "index <shape> out of range"),
    ("OSError", "No such file: /home/me/.cache/huggingface/hub/model.safetensors", "No such file: <path>"),
    ("OSError", "No such file: C:\\Users\\me\\model.safetensors", "No such file: <path>"),
    (
        "OutOfMemoryError",
        "Tried to allocate 20.00 MiB; 3 GiB free of 79.19 GB; 512 bytes",
        "Tried to allocate <size>; <size> free of <size>; <size>",
    ),
    (
        "ImportError",
        "needs torch 2.13.0+cpu, transformers 5.24.0.dev0 and peft 0.19.1",
        "needs torch <version>, transformers <version> and peft <version>",
    ),
    ("ValueError", "expected 3 but got -4 (ratio 0.5, eps 1e-5)", "expected <n> but got <n> (...)"),
    ("ValueError", "expected 3 but got -4; ratio 0.5, eps 1e-5", "expected <n> but got <n>; ratio <n>, eps <n>"),
    # digits inside identifiers name things, they are not values
    ("ValueError", "Gemma4ClippableLinear in layers_12 with float16", "Gemma4ClippableLinear in layers_12 with float16"),
    ("TypeError", "Int8Params.__init__() takes 2 positional arguments", "<class>.__init__() takes <n> positional arguments"),
    ("TypeError", "Tensor.item() is not allowed", "Tensor.item() is not allowed"),
    ("KeyError", "'model.layers.0.self_attn.q_proj.weight'", "<key>"),
    # the whole message is kept (a module repr spans many lines), whitespace folded
    (
        "ValueError",
        "  first line\n   second   line\nthird line\nfourth line is kept",
        "first line second line third line fourth line is kept",
    ),
    ("ValueError", "", ""),
]


@pytest.mark.parametrize(("exc_type", "message", "expected"), MASKS)
def test_mask_message(exc_type: str, message: str, expected: str) -> None:
    assert mask_message(exc_type, message) == expected


def test_mask_message_removes_torch_size_numbers() -> None:
    masked = mask_message("RuntimeError", "expected torch.Size([2, 3]) but got torch.Size([2560, 10240])")
    assert not any(ch.isdigit() for ch in masked)
    assert masked.startswith("expected torch.Size(") and " but got " in masked


def test_mask_message_is_capped() -> None:
    assert len(mask_message("ValueError", "word " * 500)) == 300


def test_mask_message_collapses_module_repr_and_drops_its_numbers() -> None:
    masked = mask_message("ValueError", GEMMA_REPR_REAL)
    assert masked.startswith("Target module Gemma4ClippableLinear(...) is not supported.")
    assert "2560" not in masked and "in_features" not in masked


LIBRARY_OF = [
    (SP + "transformers/models/gemma4/modeling_gemma4.py", ("transformers", "transformers/models/gemma4/modeling_gemma4.py")),
    (WIN_SP + "bitsandbytes\\nn\\modules.py", ("bitsandbytes", "bitsandbytes/nn/modules.py")),
    ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", ("torch", "torch/nn/modules/module.py")),
    (SP + "peft.py", ("peft", "peft.py")),  # a single-module distribution
    (SP + "numpy/core/fromnumeric.py", ("", "")),
    ("/work/scenarios/gemma4_lora_inner_linear.py", ("", "")),
    ("<frozen importlib._bootstrap>", ("", "")),
]


@pytest.mark.parametrize(("filename", "expected"), LIBRARY_OF)
def test_library_of(filename: str, expected: tuple[str, str]) -> None:
    assert library_of(filename) == expected


def test_status_signature() -> None:
    assert status_signature("timeout").text == "timeout"
    crash = status_signature("crash", "SIGSEGV")
    assert (crash.text, crash.library, crash.location, crash.message) == ("crash: SIGSEGV", "", "", "SIGSEGV")
    assert (
        status_signature("unresolvable", "transformers==5.6.2 needs torch>=2.14.0").text
        == "unresolvable: transformers==<version> needs torch>=<version>"
    )
    assert status_signature("crash", "SIGSEGV").family != status_signature("crash", "SIGBUS").family


# -- parse_traceback --------------------------------------------------------------------------


class CustomLoadError(Exception):
    pass


def _inner(value: int) -> None:
    raise ValueError(f"bad value {value}")


def _outer() -> None:
    _inner(3)


def _format(func: object) -> str:
    try:
        func()  # type: ignore[operator]
    except BaseException:
        return traceback.format_exc()
    raise AssertionError("did not raise")


def test_parse_real_traceback() -> None:
    # output before the traceback is noise; what follows the exception line is its message
    # (multi-line messages such as module reprs), so the traceback ends the text here
    text = "loading model...\nsome warning\n" + _format(_outer)
    parsed = parse_traceback(text)
    assert parsed is not None
    exc_type, message, frames = parsed
    assert (exc_type, message) == ("ValueError", "bad value 3")
    assert [fr.function for fr in frames] == ["_format", "_outer", "_inner"]
    assert all(fr.filename == __file__ for fr in frames)
    assert all(isinstance(fr.lineno, int) and fr.lineno > 0 for fr in frames)


def test_parse_traceback_takes_the_last_of_chained_tracebacks() -> None:
    def chained() -> None:
        try:
            {}["missing"]
        except KeyError as exc:
            raise CustomLoadError("could not load") from exc

    parsed = parse_traceback(_format(chained))
    assert parsed is not None
    exc_type, message, frames = parsed
    assert exc_type.endswith("CustomLoadError")  # module-qualified: test_signature.CustomLoadError
    assert message == "could not load"
    assert frames[-1].function == "chained"


def test_parse_traceback_feeds_make_signature() -> None:
    text = f'''Traceback (most recent call last):
  File "/work/scenarios/s.py", line 3, in <module>
    model.merge_and_unload()
  File "{SP}peft/tuners/lora/model.py", line 900, in merge_and_unload
    self._unload()
  File "{SP}bitsandbytes/functional.py", line 480, in as_dict
    x.item()
RuntimeError: Tensor.item() cannot be called on meta tensors
'''
    parsed = parse_traceback(text)
    assert parsed is not None
    sig = make_signature(*parsed)
    assert sig.text == "RuntimeError: Tensor.item() cannot be called on meta tensors @ bitsandbytes/functional.py:as_dict"
    assert parsed[2][1] == Frame(f"{SP}peft/tuners/lora/model.py", 900, "merge_and_unload")


NO_TRACEBACK = [
    "",
    "Segmentation fault (core dumped)\n",
    "INFO all good\nValueError: printed by a logger, not raised\n",
    # a header with no exception line after it: the output was cut off
    'Traceback (most recent call last):\n  File "/x.py", line 1, in <module>\n',
]


@pytest.mark.parametrize("text", NO_TRACEBACK)
def test_parse_traceback_without_a_traceback(text: str) -> None:
    assert parse_traceback(text) is None
    # the same noise before a real traceback neither hides it nor leaks into it
    parsed = parse_traceback(text + _format(_outer))
    assert parsed is not None and parsed[:2] == ("ValueError", "bad value 3")


def _bare_assert() -> None:
    # compiled here, not imported: pytest's assert rewriting would add a message
    exec(compile("assert 1 + 1 == 3", "/work/scenarios/s.py", "exec"))


def _scenario_failed() -> None:
    class ScenarioFailed(Exception):
        pass

    raise ScenarioFailed("merged output differs")


UNPARSED_TRACEBACKS = [
    pytest.param(
        _bare_assert,
        "AssertionError",
        "",
        id="bare-assert",
    ),
    pytest.param(
        _scenario_failed,
        "ScenarioFailed",
        "merged output differs",
        id="type-without-error-suffix",
    ),
]


@pytest.mark.parametrize(("func", "exc_type", "message"), UNPARSED_TRACEBACKS)
def test_parse_traceback_any_exception_line(func: object, exc_type: str, message: str) -> None:
    parsed = parse_traceback(_format(func))
    assert parsed is not None
    assert parsed[0].rsplit(".", 1)[-1] == exc_type
    assert parsed[1] == message
