"""report.py for an upstream maintainer (#39): nothing of the machine in it, the requirement stated, the repro's section."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.analysis.attribution import attribute, to_rows
from harness.analysis.report import example_of, passing_of, render_cell_report, render_signature_report
from harness.analysis.repro import Repro

HOME = "/home/ann"
SUITE = f"{HOME}/work/suite"  # where the sweep ran: the suite's root
ENVS = "/srv/harness-envs"  # --env-root
TMP = "/tmp"
WHEELS = "/opt/wheels"
ENV = f"{ENVS}/torch2.13.0-tf{{tf}}-peft{{peft}}-c4fef2c25fb6/lib/python3.11/site-packages"
TEST = "tests/test_adapter.py::test_load_adapter_roundtrip"
SIG = (
    "ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load' (...)"
    " @ transformers/integrations/peft.py:load_adapter"
)
MESSAGE = "ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load' ({env}/peft/utils/x.py)"
DOC = "\n".join(f"            line {i} of the docstring pytest's long format repeats" for i in range(60))
LONG = """tmp_path = PosixPath('/tmp/pytest-of-ann/pytest-11/test_load_adapter_roundtrip0')

    def test_load_adapter_roundtrip(tiny_model, tmp_path):
        model = tiny_model()
>       model.load_adapter(str(tmp_path))

tests/test_adapter.py:14:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

peft_model_id = '/tmp/pytest-of-ann/pytest-11/test_load_adapter_roundtrip0'

    def load_adapter(self, peft_model_id=None):
        \"\"\"
{doc}
        \"\"\"
>       from peft.utils.save_and_load import _maybe_shard_state_dict_for_tp
E       {message}

{env}/transformers/integrations/peft.py:509: ImportError"""
PY_TRACEBACK = """Traceback (most recent call last):
  File "{home}/src/harness/harness/running/child.py", line 68, in run_scenario
    runpy.run_path(scenario, run_name="__main__")
  File "{suite}/scenarios/adapter_load.py", line 37, in <module>
    model.load_adapter(folder)
  File "{env}/transformers/integrations/peft.py", line 509, in load_adapter
    from peft.utils.save_and_load import _maybe_shard_state_dict_for_tp
{message}"""
RUNS = {
    "r1": {
        "run_id": "r1",
        "matrix_path": f"{SUITE}/matrix.toml",
        "settings": {
            "find_links": ["$PIP_FIND_LINKS"],
            "find_links_expanded": [WHEELS],
            "index_url": "",
            "extra_requirements": ["pytest"],
            "env_dir": ENVS,
            "tests": {"root": SUITE, "paths": ["tests"], "k": "", "m": "", "requirements": []},
        },
        "host": {"platform": "linux-x86_64", "gpu": "cpu", "gpus": []},
    }
}
#: the machine's folders, as `harness report` hands them over (`commands.report.machine_roots`)
ROOTS = [(SUITE, ""), (ENVS, "<envs>"), (WHEELS, "<find-links>"), (TMP, "<tmp>"), (HOME, "~")]
#: (transformers, peft, fails): the corner of issue 39, both answers exact (every release between was built)
CELLS = [
    ("5.5.4", "0.18.0", False),
    ("5.6.0", "0.18.0", True),
    ("5.8.0", "0.18.0", True),
    ("5.8.0", "0.18.1", True),
    ("5.8.0", "0.19.0", False),
]


def cell_id(tf: str, peft: str) -> str:
    return f"torch2.13.0-tf{tf}-peft{peft}"


def rows_of(scenario: str, python_traceback: bool) -> list[dict[str, Any]]:
    rows = []
    for tf, peft, fails in CELLS:
        env = ENV.format(tf=tf, peft=peft)
        message = MESSAGE.format(env=env)
        trace = (
            PY_TRACEBACK.format(home=HOME, suite=SUITE, env=env, message=message)
            if python_traceback
            else LONG.format(doc=DOC, message=message, env=env)
        )
        versions = {"torch": "2.13.0", "transformers": tf, "peft": peft}
        freeze = {**versions, "torch": "2.13.0+cpu", "pytest": "9.2.0", "tinypkg": f"file://{HOME}/src/tinypkg"}
        rows.append(
            {
                "run_id": "r1",
                "cell_id": cell_id(tf, peft),
                "scenario": scenario,
                "repeat": 0,
                "status": "error" if fails else "pass",
                "signature": SIG if fails else "",
                "signature_family": "374af917ca77" if fails else "",
                "blamed_library": "transformers" if fails else "",
                "exception_type": "ImportError" if fails else "",
                "message": message if fails else "",
                "traceback": trace if fails else "",
                "output_tail": "",
                "versions": json.dumps(versions),
                "installed": json.dumps(freeze),
                "python": "3.11",
                "platform": "linux-x86_64",
                "gpu": "cpu",
                "started_at": "2026-11-26 22:57:00",
                **{axis: freeze[axis] for axis in versions},
            }
        )
    return rows


def transitions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    known = {"transformers": ["5.5.4", "5.6.0", "5.8.0"], "peft": ["0.18.0", "0.18.1", "0.19.0"], "torch": ["2.13.0"]}
    return to_rows(attribute(rows, known_versions=known))


def report(scenario: str, python_traceback: bool, **extra: Any) -> str:
    rows = rows_of(scenario, python_traceback)
    return render_signature_report(SIG, rows, transitions(rows), runs=RUNS, db="results/compat.duckdb", roots=ROOTS, **extra)


LOCAL = [pytest.param(folder, id=name) for name, folder in (("tmp", TMP + "/"), ("home", HOME), ("env-root", ENVS), ("sweep", SUITE))]


@pytest.mark.parametrize("folder", LOCAL)
@pytest.mark.parametrize(("scenario", "python_traceback"), [(TEST, False), ("adapter_load", True)], ids=["test", "scenario"])
def test_a_report_names_no_folder_of_the_machine(scenario: str, python_traceback: bool, folder: str) -> None:
    body = report(scenario, python_traceback)
    assert folder not in body
    assert WHEELS not in body  # the run's folder of wheels: said, not named


def test_the_paths_are_written_from_their_roots() -> None:
    body = report(TEST, False)
    title = next(line for line in body.splitlines() if line.startswith("**Suggested title:**"))
    # one line of at most 100 characters: the exception (the file it names left out, then cut) and its library
    assert (
        title == "**Suggested title:** ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.sa… (transformers)"
    )
    assert "python -m pytest tests/test_adapter.py::test_load_adapter_roundtrip" in body  # from the suite's root
    assert "--matrix matrix.toml --cell torch2.13.0-tf5.8.0-peft0.18.1 --tests " + TEST + " --tests-root ." in body
    assert "tinypkg @ file://~/src/tinypkg" in body  # a local package is one of the home folder's


def test_the_traceback_is_short_with_the_frame_under_test_marked() -> None:
    for body in (report(TEST, False), report("adapter_load", True)):
        trace = body.split("### Traceback (the last frames)\n\n", 1)[1].split("\n```\n", 1)[0]
        lines = trace.splitlines()[1:]  # after the fence
        assert len(lines) <= 40 and "docstring" not in trace
        assert [line for line in lines if "←" in line] == [
            line for line in lines if "transformers/integrations/peft.py" in line and "509" in line
        ]
        assert "← transformers: the innermost frame under test" in trace
        assert "child.py" not in trace


def test_the_summary_states_the_missing_requirement_with_its_cells() -> None:
    body = report(TEST, False)
    summary = body.split("### Summary\n\n", 1)[1].split("\n\n", 1)[0]
    assert summary.splitlines()[:3] == [
        "- **Missing requirement: `transformers>=5.6.0 needs peft>=0.19.0`** (on cpu · linux-x86_64 · Python 3.11).",
        "  - introduced in transformers 5.6.0 (after 5.5.4) with torch 2.13.0, peft 0.18.0 held",
        "  - fixed in peft 0.19.0 (after 0.18.1) with torch 2.13.0, transformers 5.8.0 held",
    ]
    assert (
        f"  - cells: `{cell_id('5.5.4', '0.18.0')}` passes; `{cell_id('5.6.0', '0.18.0')}` fails; "
        f"`{cell_id('5.8.0', '0.18.1')}` fails; `{cell_id('5.8.0', '0.19.0')}` passes"
    ) in summary


def test_no_requirement_from_a_range() -> None:
    rows = [r for r in rows_of(TEST, False) if r["cell_id"] != cell_id("5.8.0", "0.18.1")]  # 0.18.1 not built: peft's is a range
    known = {"transformers": ["5.5.4", "5.6.0", "5.8.0"], "peft": ["0.18.0", "0.18.1", "0.19.0"]}
    moves = to_rows(attribute(rows, known_versions=known))
    assert any(t["axis"] == "peft" and t["untested"] == ["0.18.1"] for t in moves)
    body = render_signature_report(SIG, rows, moves, runs=RUNS, roots=ROOTS)
    assert "Missing requirement" not in body


def test_the_example_and_its_passing_neighbour_one_step_away() -> None:
    rows = rows_of(TEST, False)
    moves = transitions(rows)
    example = example_of(SIG, rows, moves)
    assert example["cell_id"] == cell_id("5.8.0", "0.18.1")  # the newest failing set, newest first on the blamed library
    passing = passing_of(example, rows, moves)
    assert passing is not None
    assert (passing[0]["cell_id"], passing[1]) == (cell_id("5.8.0", "0.19.0"), "peft 0.19.0 instead of 0.18.1")
    # no answer steps from 5.6.0 with peft 0.18.0 (its fix lies on the 5.8.0 line): the nearest passing neighbour
    lone = next(r for r in rows if r["cell_id"] == cell_id("5.6.0", "0.18.0"))
    near = passing_of(lone, rows, moves)
    assert near is not None and near[1] == "transformers 5.5.4 instead of 5.6.0"


def test_the_one_file_repro_leads_the_reproduce_section_and_its_text_is_left_as_written() -> None:
    script = "# /// script\n# dependencies = []\n# ///\nprint('/tmp is the code of the suite, not a path to rewrite')\n"
    body = report(TEST, False, repro=Repro("repro.py", script, "repro-passing.py", "peft 0.19.0 instead of 0.18.1"))
    section = body.split("### Reproduce\n\n", 1)[1].split("### Traceback", 1)[0]
    assert section.startswith("One file, nothing to check out: `repro.py` (below) is a [PEP 723]")
    assert "uv run repro.py           # fails (exit 1) and prints the signature" in section
    assert "uv run repro-passing.py   # peft 0.19.0 instead of 0.18.1: passes (exit 0)" in section
    # the build that failed, where the script gets it, and the folder of wheels instead
    assert (
        "It ran with torch 2.13.0+cpu, the PyTorch index's CPU build: the script takes torch from https://download.pytorch.org/whl/cpu"
        in section
    )
    assert "`UV_FIND_LINKS=/path/to/wheels uv run --no-sources repro.py`" in section
    assert f"```python\n{script.rstrip()}\n```" in section  # the script as written: the user's code is not rewritten
    assert "Or, in an environment of your own:" in section


def test_a_cell_report_names_no_folder_of_the_machine() -> None:
    rows = rows_of(TEST, False)
    body = render_cell_report(cell_id("5.8.0", "0.18.1"), rows, transitions=transitions(rows), runs=RUNS, roots=ROOTS)
    for folder in (TMP + "/", HOME, ENVS, SUITE, WHEELS):
        assert folder not in body
    assert "← transformers: the innermost frame under test" in body
