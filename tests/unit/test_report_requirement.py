"""requirement.py: what two exact answers on two axes state together, as a table of scripted answers."""

from __future__ import annotations

from typing import Any

import pytest

from harness.analysis import requirement
from harness.analysis.attribution import Transition
from harness.analysis.requirement import as_constraints, requirements

IMPORT = "ImportError: cannot import name '_maybe_shard_state_dict_for_tp' (...) @ transformers/integrations/peft.py:load_adapter"
INIT = "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized' @ accelerate/utils/modeling.py:x"
BNB = "RuntimeError: Tensor.item() cannot be called on meta tensors @ bitsandbytes/functional.py:as_dict"
CPU = "cpu · linux-x86_64 · Python 3.11"


def answer(
    axis: str, kind: str, before: str, after: str, held: dict[str, str], *, sig: str = IMPORT, scenario: str = "t", **extra: Any
) -> Transition:
    cells = (f"{axis}{before}-{held}", f"{axis}{after}-{held}")
    return Transition(
        scenario, sig, axis, kind, before, after, tuple(held.items()), CPU, before_cell=cells[0], after_cell=cells[1], **extra
    )  # type: ignore[arg-type]


TF = {"torch": "2.13.0", "peft": "0.18.0"}  # the transformers line: peft held at the old release
PEFT = {"torch": "2.13.0", "transformers": "5.8.0"}  # the peft line: transformers held at a release that has the import
CAME = answer("transformers", "introduced", "5.5.4", "5.6.0", TF)
WENT = answer("peft", "fixed", "0.18.1", "0.19.0", PEFT)
ACC = {"torch": "2.13.0", "transformers": "5.6.2", "bitsandbytes": "0.49.2"}
BITS = {"torch": "2.13.0", "transformers": "5.6.2", "accelerate": "1.13.0"}

#: (answers, the requirements they state); each case without one says why in its comment
CASES = [
    # the opening paragraph of issue 39: introduced by transformers with peft held, fixed by peft with transformers held
    pytest.param([CAME, WENT], ["transformers>=5.6.0 needs peft>=0.19.0"], id="introduced-and-fixed"),
    pytest.param([WENT, CAME], ["transformers>=5.6.0 needs peft>=0.19.0"], id="order-does-not-matter"),
    # fixed by either library: the side named first is the library the signature blames (accelerate)
    pytest.param(
        [
            answer("accelerate", "fixed", "1.13.0", "1.14.0", ACC, sig=INIT),
            answer("bitsandbytes", "fixed", "0.49.2", "0.50.0", BITS, sig=INIT),
        ],
        ["accelerate<1.14.0 needs bitsandbytes>=0.50.0"],
        id="fixed-by-either",
    ),
    pytest.param(
        [
            answer("accelerate", "fixed", "1.13.0", "1.14.0", ACC, sig=BNB),
            answer("bitsandbytes", "fixed", "0.49.2", "0.50.0", BITS, sig=BNB),
        ],
        ["bitsandbytes<0.50.0 needs accelerate>=1.14.0"],
        id="fixed-by-either-blamed-first",
    ),
    # both introduced: it takes both new releases, so one new release needs the other old
    pytest.param(
        [
            answer("transformers", "introduced", "5.5.4", "5.6.0", {"torch": "2.13.0", "peft": "0.19.1"}),
            answer("peft", "introduced", "0.18.1", "0.19.0", PEFT),
        ],
        ["transformers>=5.6.0 needs peft<0.19.0"],
        id="introduced-by-both",
    ),
    # an introduction reads first, whichever library the signature blames
    pytest.param(
        [
            answer("transformers", "fixed", "5.5.4", "5.6.0", {"torch": "2.13.0", "peft": "0.19.1"}),
            answer("peft", "introduced", "0.18.1", "0.19.0", {"torch": "2.13.0", "transformers": "5.5.1"}),
        ],
        ["peft>=0.19.0 needs transformers>=5.6.0"],
        id="introduced-reads-first",
    ),
    # the transformers line fixed again later: the introduction's side is an interval, stated as one
    pytest.param(
        [CAME, answer("transformers", "fixed", "5.8.0", "5.9.0", TF), WENT],
        ["transformers>=5.6.0,<5.9.0 needs peft>=0.19.0"],
        id="interval-when",
    ),
    # no requirement: peft's answer is a range (0.18.2 lies between and was not built)
    pytest.param([CAME, answer("peft", "fixed", "0.18.1", "0.19.0", PEFT, not_built=("0.18.2",))], [], id="range-needs"),
    # no requirement: transformers' answer is a range (5.5.5 inconclusive)
    pytest.param([answer("transformers", "introduced", "5.5.4", "5.6.0", TF, inconclusive=("5.5.5 (flaky)",)), WENT], [], id="range-when"),
    # no requirement: the later fix that bounds the transformers line is itself a range
    pytest.param([CAME, answer("transformers", "fixed", "5.8.0", "5.10.0", TF, not_built=("5.9.0",)), WENT], [], id="range-bound"),
    # no requirement: two machines never say one thing together
    pytest.param([CAME, Transition(**{**WENT.__dict__, "machine": "NVIDIA H200 · linux-x86_64 · Python 3.12"})], [], id="two-machines"),
    # no requirement: the two lines hold torch at different versions (a third library may be the cause)
    pytest.param([CAME, answer("peft", "fixed", "0.18.1", "0.19.0", {"torch": "2.12.0", "transformers": "5.8.0"})], [], id="third-axis"),
    # no requirement: the peft line holds transformers 5.5.1, which passes: not on the introduction's failing side
    pytest.param([CAME, answer("peft", "fixed", "0.18.1", "0.19.0", {"torch": "2.13.0", "transformers": "5.5.1"})], [], id="off-side"),
    # no requirement: the transformers line holds peft 0.19.1, past the fix
    pytest.param(
        [answer("transformers", "introduced", "5.5.4", "5.6.0", {"torch": "2.13.0", "peft": "0.19.1"}), WENT], [], id="off-side-2"
    ),
    # no requirement: two answers of one failure on one axis are its two ends, not two libraries
    pytest.param([CAME, answer("transformers", "fixed", "5.8.0", "5.9.0", TF)], [], id="one-axis"),
    # no requirement: another failure's answer
    pytest.param([CAME, answer("peft", "fixed", "0.18.1", "0.19.0", PEFT, sig=INIT)], [], id="two-failures"),
    # no requirement: another scenario's answer
    pytest.param([CAME, answer("peft", "fixed", "0.18.1", "0.19.0", PEFT, scenario="u")], [], id="two-scenarios"),
    # no requirement: a commit is on no side of a release specifier
    pytest.param([CAME, answer("peft", "fixed", "0.18.1", "git+https://x/peft@abc", PEFT)], [], id="a-commit"),
]


@pytest.mark.parametrize(("answers", "stated"), CASES)
def test_requirements(answers: list[Transition], stated: list[str]) -> None:
    assert [r.text() for r in requirements(answers)] == stated


def test_a_requirement_names_the_cells_that_show_it_and_the_other_side() -> None:
    [stated] = requirements([CAME, WENT])
    assert stated.cells() == [
        (CAME.before_cell, "passes"),
        (CAME.after_cell, "fails"),
        (WENT.before_cell, "fails"),
        (WENT.after_cell, "passes"),
    ]
    assert stated.otherwise() == "transformers<5.6.0"
    assert stated.lines() == [
        "introduced in transformers 5.6.0 (after 5.5.4) with torch 2.13.0, peft 0.18.0 held",
        "fixed in peft 0.19.0 (after 0.18.1) with torch 2.13.0, transformers 5.8.0 held",
    ]
    record = stated.to_dict()
    assert (record["kind"], record["requirement"], record["machine"]) == ("requirement", "transformers>=5.6.0 needs peft>=0.19.0", CPU)
    assert record["when"] == {"axis": "transformers", "specifier": ">=5.6.0"}
    assert record["needs"] == {"axis": "peft", "specifier": ">=0.19.0"}
    assert [c["cell_id"] for c in record["cells"]] == [c for c, _ in stated.cells()]


def test_one_requirement_for_a_failure_seen_in_many_tests_and_on_many_lines() -> None:
    other = {"torch": "2.13.0", "peft": "0.18.1"}
    answers = [
        CAME,
        WENT,
        answer("transformers", "introduced", "5.5.4", "5.6.0", other),  # a second transformers line, peft 0.18.1 held
        answer("transformers", "introduced", "5.5.4", "5.6.0", TF, scenario="u"),
        answer("peft", "fixed", "0.18.1", "0.19.0", PEFT, scenario="u"),
    ]
    [stated] = requirements(answers)
    assert stated.scenarios == ("t", "u")
    assert len(stated.evidence) == 3  # (t: two transformers lines × the peft line) + (u: one pair)


def test_constraints_name_the_needed_side_and_why() -> None:
    text = as_constraints(requirements([CAME, WENT]))
    lines = text.splitlines()
    assert lines[-1] == "peft>=0.19.0"
    assert "# transformers>=5.6.0 needs peft>=0.19.0: t fails otherwise on " + CPU in lines
    assert "#   or, to keep peft<0.19.0: transformers<5.6.0" in lines
    assert [line for line in lines if line and not line.startswith("#")] == ["peft>=0.19.0"]  # pip reads one constraint
    assert as_constraints([]).startswith("# no requirement stated")


def test_doctests() -> None:
    import doctest

    assert doctest.testmod(requirement).failed == 0
