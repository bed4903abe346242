"""shorttrace.py and redact.local_paths: the traceback a maintainer reads, and nothing of this machine in a report."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis import redact, shorttrace
from harness.analysis.redact import local_paths
from harness.analysis.shorttrace import LIMIT, frames_of, short_traceback

ENV = "/tmp/r39/envs/torch2.13.0-tf5.8.0-peft0.18.0-c4fef2c25fb6/lib/python3.11/site-packages"
SIG = (
    "ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load' (...)"
    " @ transformers/integrations/peft.py:load_adapter"
)
DOCSTRING = "\n".join(f"            line {i} of transformers' docstring, which pytest's long format repeats" for i in range(45))
#: pytest's long format as a suite's test stores it (`str(report.longrepr)`): the real regression of issue 39
PYTEST_LONG = f"""tiny_model = <function _tiny_model at 0x7f5c5c9394e0>
tmp_path = PosixPath('/tmp/pytest-of-root/pytest-11/test_load_adapter_roundtrip0')

    @pytest.mark.adapter
    def test_load_adapter_roundtrip(tiny_model, tmp_path):
        config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        peft_model = get_peft_model(tiny_model(), config)
        model = tiny_model()
>       model.load_adapter(str(tmp_path))

tests/test_adapter.py:14:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

self = LlamaForCausalLM(
  (model): LlamaModel(
    (embed_tokens): Embedding(64, 16)
  )
)
peft_model_id = '/tmp/pytest-of-root/pytest-11/test_load_adapter_roundtrip0'

    def load_adapter(
        self,
        peft_model_id: str | None = None,
        **kwargs,
    ) -> "LoadStateDictInfo":
        \"\"\"
{DOCSTRING}
        \"\"\"
        from peft import PeftType
>       from peft.utils.save_and_load import _maybe_shard_state_dict_for_tp
E       ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load' ({ENV}/peft/utils/save_and_load.py)

{ENV}/transformers/integrations/peft.py:509: ImportError"""


def test_pytest_long_format_becomes_short_with_the_frame_under_test_marked() -> None:
    assert len(PYTEST_LONG.splitlines()) > 70  # the report printed its last 40 lines: the docstring
    short = short_traceback(PYTEST_LONG, SIG)
    assert short.splitlines() == [
        "tests/test_adapter.py:14: in test_load_adapter_roundtrip",
        "    model.load_adapter(str(tmp_path))",
        f"{ENV}/transformers/integrations/peft.py:509: in load_adapter  ← transformers: the innermost frame under test",
        "    from peft.utils.save_and_load import _maybe_shard_state_dict_for_tp",
        "E   ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load'"
        f" ({ENV}/peft/utils/save_and_load.py)",
    ]
    assert "docstring" not in short


def _python_traceback(frames: int, message_lines: int = 1) -> str:
    lines = ["Traceback (most recent call last):", '  File "/work/main/harness/running/child.py", line 68, in run_scenario']
    lines += ["    runpy.run_path(scenario, run_name='__main__')", '  File "<frozen runpy>", line 291, in run_path']
    for i in range(frames):
        lines += [f'  File "{ENV}/transformers/modeling_utils.py", line {100 + i}, in step_{i}', f"    step_{i + 1}()", "    ^^^^^^^^^^"]
    lines += [f'  File "{ENV}/accelerate/hooks.py", line 330, in init_hook', '    set_module_tensor_to_device(module, name, "meta")']
    lines += [f"TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized' {i}" for i in range(message_lines)]
    return "\n".join(lines)


#: (frames in the traceback, lines of its message); the short one must fit 40 lines whatever they are
SIZES = [(1, 1), (5, 1), (30, 1), (200, 1), (3, 30)]


@pytest.mark.parametrize(("frames", "message"), SIZES)
def test_a_python_traceback_keeps_the_innermost_frames_within_40_lines(frames: int, message: int) -> None:
    short = short_traceback(_python_traceback(frames, message), "TypeError: x @ accelerate/hooks.py:init_hook").splitlines()
    assert len(short) <= LIMIT
    assert short[0] == "Traceback (most recent call last):"
    marked = [line for line in short if line.endswith("← accelerate: the innermost frame under test")]
    assert marked == [f'  File "{ENV}/accelerate/hooks.py", line 330, in init_hook  ← accelerate: the innermost frame under test']
    assert not any(line.strip().startswith("^") for line in short)  # the carets cost lines and say nothing a line number does not
    assert not any("child.py" in line or "runpy" in line for line in short)  # the harness's own frames are no part of it
    shown = sum(line.startswith('  File "') for line in short)
    if shown < frames + 1:
        assert short[1] == f"  … {frames + 1 - shown} earlier frame(s)"
    assert short[-1].startswith("TypeError:") or short[-1].startswith("… (")


@pytest.mark.parametrize("child", ["/work/main/harness/running/incell/scenario.py", "/site-packages/harness/running/child.py"])
def test_the_harness_frames_are_left_out_of_a_scenarios_traceback_now_and_in_stored_ones(child: str) -> None:
    # the in-cell package ran the scenario (`incell/scenario.py`); tracebacks stored before it
    # was a package name child.py
    text = _python_traceback(1).replace("/work/main/harness/running/child.py", child)
    short = short_traceback(text, "TypeError: x @ accelerate/hooks.py:init_hook")
    assert child not in short and "runpy" not in short
    assert short.splitlines()[1] == f'  File "{ENV}/transformers/modeling_utils.py", line 100, in step_0'


def test_the_frame_under_test_is_the_one_the_signature_names_not_torch_below_it() -> None:
    text = _python_traceback(0) + "\n"
    text = text.replace(
        "TypeError:",
        f'  File "{ENV}/torch/nn/modules/module.py", line 1, in _call_impl\n    return forward(*args)\nTypeError:',
        1,
    )
    short = short_traceback(text, "TypeError: x @ accelerate/hooks.py:init_hook")
    assert "in _call_impl  ←" not in short and "in init_hook  ← accelerate" in short


def test_pytest_short_format_and_chained_exceptions() -> None:
    text = "\n".join(
        [
            "tests/test_x.py:3: in test_x",
            "    f()",
            f"{ENV}/peft/tuners/lora/model.py:9: in f",
            "    raise KeyError(1)",
            "E   KeyError: 1",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            "tests/test_x.py:5: in test_x",
            "    g()",
            f"{ENV}/peft/utils/other.py:7: in g",
            "    raise ValueError('v')",
            "E   ValueError: v",
        ]
    )
    short = short_traceback(text, "ValueError: v @ peft/utils/other.py:g").splitlines()
    assert short == [
        "(the last of chained exceptions)",
        "tests/test_x.py:5: in test_x",
        "    g()",
        f"{ENV}/peft/utils/other.py:7: in g  ← peft: the innermost frame under test",
        "    raise ValueError('v')",
        "E   ValueError: v",
    ]
    assert frames_of(text) == [("tests/test_x.py", "test_x"), (f"{ENV}/peft/utils/other.py", "g")]


def test_text_that_is_no_traceback_keeps_its_tail() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    short = short_traceback(text).splitlines()
    assert len(short) == LIMIT and short[0] == "… (61 line(s) above)" and short[-1] == "line 99"


#: (text, roots, what it is written as)
PATHS = [
    pytest.param(f'File "{ENV}/peft/x.py"', [], 'File "site-packages/peft/x.py"', id="site-packages"),
    pytest.param("/srv/envs/torch2.13.0-peft0.18.0-c4fef2c25fb6/bin/python -m x", [], "<env>/bin/python -m x", id="env-folder"),
    pytest.param("/usr/lib/python3.11/runpy.py", [], "<stdlib>/runpy.py", id="stdlib"),
    pytest.param("/home/ann/compat/scenarios/_kit.py", [], "scenarios/_kit.py", id="checkout"),
    pytest.param("see /home/ann/.cache/uv and /Users/bo/x", [], "see ~/.cache/uv and ~/x", id="home"),
    pytest.param("/data/suite/tests/test_a.py::test_b", [("/data/suite", "")], "tests/test_a.py::test_b", id="suite-root"),
    pytest.param("cd /data/suite", [("/data/suite", "")], "cd .", id="the-root-itself"),
    pytest.param("/data/suite2/x", [("/data/suite", "")], "/data/suite2/x", id="not-a-prefix-of-a-name"),
    pytest.param("../../../tmp/pytest-of-ann/t0/x", [("/tmp", "<tmp>")], "<tmp>/pytest-of-ann/t0/x", id="climbed-to"),
    pytest.param("/tmp/run/out/x and /tmp/y", [("/tmp", "<tmp>"), ("/tmp/run", "")], "out/x and <tmp>/y", id="longest-root-first"),
    pytest.param("https://example.org/a/b/c", [("/a", "<a>")], "https://example.org/a/b/c", id="a-url-is-left"),
]


@pytest.mark.parametrize(("text", "roots", "written"), PATHS)
def test_local_paths(text: str, roots: list[tuple[str, str]], written: str) -> None:
    assert local_paths(text, roots) == written


def test_the_runner_interpreter_and_its_env_are_written_as_labels() -> None:
    # a GPU runner's matrix names its interpreter (`python = "/opt/torch/.venv/bin/python3"`): its paths are the runner's
    from harness.workflows.reporting import interpreter_roots, machine_roots

    runs = {"r": {"settings": {"python": "/opt/torch/.venv/bin/python3", "env_dir": ".nox", "find_links_expanded": [".wheelhouse"]}}}
    roots = machine_roots(runs, Path("results/gpu.duckdb"))
    assert set(interpreter_roots("/opt/torch/.venv/bin/python3")) <= set(roots)
    text = "/opt/torch/.venv/bin/python3 -c 'import torch' (in /opt/torch/.venv; /opt/torch/.venv/lib/python3.12/site-packages/torch/x.py)"
    assert local_paths(text, roots) == "<python> -c 'import torch' (in <base-env>; site-packages/torch/x.py)"
    assert "/opt" not in local_paths("/opt/torch/.venv/bin/python3.12 -m pytest", interpreter_roots("/opt/torch/.venv/bin/python3.12"))


def test_doctests() -> None:
    import doctest

    from harness.workflows import reporting as report

    assert doctest.testmod(report).failed == 0

    assert doctest.testmod(shorttrace).failed == 0
    assert doctest.testmod(redact).failed == 0
