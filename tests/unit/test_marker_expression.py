"""`selection.marker_matches`, pytest's `-m`, over a table of expressions and marker sets: the same
answer however often a set is asked (it is worked out once per expression and set), from a list or a
set, and a bad expression is refused each time it is asked."""

from __future__ import annotations

import pytest

from harness.analysis.selection import marker_matches

CASES = [
    ("slow", set(), False),
    ("slow", {"slow"}, True),
    ("not slow", set(), True),
    ("not slow", {"slow", "gpu"}, False),
    ("gpu and not slow", {"gpu"}, True),
    ("gpu and not slow", {"gpu", "slow"}, False),
    ("(a or b) and not c", {"b"}, True),
    ("(a or b) and not c", {"b", "c"}, False),
    ("a or b or c", {"d"}, False),
    ("not (a and b)", {"a", "b"}, False),
]


@pytest.mark.parametrize(("expression", "markers", "expected"), CASES)
def test_the_answer_is_pytests_each_time(expression: str, markers: set[str], expected: bool) -> None:
    assert [marker_matches(expression, markers) for _ in range(3)] == [expected] * 3
    assert marker_matches(expression, sorted(markers)) is expected  # a list of markers says the same


@pytest.mark.parametrize("expression", ["slow and", "slow ==", "import os"])
def test_a_bad_expression_is_refused_every_time(expression: str) -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="-m"):
            marker_matches(expression, {"slow"})
