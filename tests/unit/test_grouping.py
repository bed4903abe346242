"""Answers grouped per failure, and ranges inferred from another line's exact answer (`analysis.grouping`)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from harness.analysis.attribution import Attribution, Transition
from harness.analysis.grouping import answer_groups, inferred_from
from harness.render.summary import render_answers

RELEASES = ["5.6.2", "5.9.0", "5.10.4", "5.11.0", "5.15.0", "5.23.0"]


def _t(
    before: str,
    after: str,
    acc: str,
    *,
    kind: str = "fixed",
    machine: str = "cpu",
    scenario: str = "towers",
    inconclusive: tuple[str, ...] = (),
) -> Transition:
    """A transition along transformers on the line held at accelerate `acc`; releases between its ends not built."""
    between = tuple(RELEASES[RELEASES.index(before) + 1 : RELEASES.index(after)])
    return Transition(
        scenario,
        "TypeError: finfo",
        "transformers",
        kind,  # type: ignore[arg-type]
        before,
        after,
        (("accelerate", acc),),
        machine,
        not_built=tuple(v for v in between if v not in inconclusive),
        inconclusive=inconclusive,
    )


EXACT = _t("5.10.4", "5.11.0", "1.13.0")
WIDE = _t("5.6.2", "5.23.0", "1.15.0")


@pytest.mark.parametrize(
    ("others", "expected"),
    [
        # the line's ends agree with the exact answer's releases: inferred
        ([WIDE], True),
        # the range starts at the exact answer's release before: still within
        ([_t("5.10.4", "5.23.0", "1.15.0")], True),
        # the range ends at the exact answer's release: still within
        ([_t("5.6.2", "5.11.0", "1.15.0")], True),
        # the exact answer lies outside the range: that line changed elsewhere
        ([_t("5.11.0", "5.23.0", "1.15.0")], False),
        ([_t("5.6.2", "5.10.4", "1.15.0")], False),
        # another machine class, another direction, another scenario: not the same failure there
        ([_t("5.6.2", "5.23.0", "1.15.0", machine="1x NVIDIA H100")], False),
        ([_t("5.6.2", "5.23.0", "1.15.0", kind="introduced")], False),
        ([_t("5.6.2", "5.23.0", "1.15.0", scenario="other")], False),
        # a release between ran and said nothing: evidence the answer cannot be carried across
        ([_t("5.6.2", "5.23.0", "1.15.0", inconclusive=("5.15.0",))], False),
    ],
)
def test_a_range_is_inferred_only_where_the_exact_answer_lies_within_it(others: list[Transition], expected: bool) -> None:
    found = inferred_from([EXACT, *others])
    assert (id(others[0]) in found) is expected
    if expected:
        assert found[id(others[0])] is EXACT


def test_two_exact_answers_that_disagree_infer_nothing() -> None:
    # fixed in 5.11.0 on one line and in 5.9.0 on another: which one holds on the third is unknown
    other_exact = _t("5.6.2", "5.9.0", "1.14.0")
    assert inferred_from([EXACT, other_exact, WIDE]) == {}
    # the two exact lines agree with each other: the third is inferred
    same = _t("5.10.4", "5.11.0", "1.14.0")
    assert inferred_from([EXACT, same, WIDE]) == {id(WIDE): EXACT}


def test_groups_put_inferred_lines_under_their_answer_and_ranges_after_exact_ones() -> None:
    alone = _t("5.6.2", "5.23.0", "1.16.0", scenario="other")
    groups = dict(answer_groups([WIDE, EXACT, alone]))
    [towers] = groups[("towers", "TypeError: finfo")]
    assert towers.headline == "fixed in transformers 5.11.0 (after 5.10.4)"
    assert (towers.lines, towers.inferred_lines, towers.inferred) == (1, 1, (WIDE,))
    [other] = groups[("other", "TypeError: finfo")]
    assert other.headline.startswith("fixed between transformers 5.6.2 (fails) and 5.23.0 (passes)")
    assert not other.exact and not other.inferred


def test_the_summary_says_which_lines_are_inferred_and_not_built() -> None:
    out = io.StringIO()
    render_answers([], Attribution(transitions=(EXACT, WIDE), flaky=()), Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "fixed in transformers 5.11.0 (after 5.10.4)" in text
    assert "on cpu, 1 line(s): accelerate 1.13.0" in text
    assert "inferred on 1 more line(s), not built there (their ends agree with it): accelerate 1.15.0" in text
    assert "between" not in text  # the range is not printed again as a range


def test_doctests() -> None:
    import doctest

    from harness.analysis import grouping

    assert doctest.testmod(grouping).failed == 0
