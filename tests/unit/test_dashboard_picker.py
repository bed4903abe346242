"""The dashboard's one reading of an st.dataframe selection (dashboard/common.py: picked_row, picked_text)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from dashboard import common


def event(*rows: Any) -> SimpleNamespace:
    """What st.dataframe returns with on_select="rerun", as far as the helpers read it."""
    return SimpleNamespace(selection=SimpleNamespace(rows=list(rows), columns=[], cells=[]))


FRAME = pd.DataFrame({"test": ["t::a", "t::b", "t::c"], "cells": [1, 2, 3]})


@pytest.mark.parametrize(
    ("rows", "size", "expected"),
    [
        ((), 3, None),  # nothing selected
        ((0,), 3, 0),
        ((2,), 3, 2),  # the last row
        ((3,), 3, None),  # out of range: the table shrank under a kept selection
        ((7,), 0, None),  # an empty table
        ((-1,), 3, None),  # never a row counted from the end
        ((5, 1), 3, 1),  # the first selected row that the table still has
        ((1, 2), 3, 1),  # a multi-row selection: its first row
        (("2",), 3, 2),  # an index as text, as history.py read it
    ],
)
def test_picked_row(rows: tuple[Any, ...], size: int, expected: int | None) -> None:
    assert common.picked_row(event(*rows), range(size)) == expected


@pytest.mark.parametrize(
    ("rows", "column", "default", "expected"),
    [
        ((), "test", None, None),  # nothing selected, no default
        ((), "test", "focus", "focus"),  # nothing selected: the default
        ((1,), "test", "focus", "t::b"),  # a selected row's value wins over the default
        ((2,), "test", None, "t::c"),
        ((0,), "cells", None, "1"),  # always text
        ((3,), "test", "focus", "focus"),  # out of range: the default
        ((3,), "test", None, None),
    ],
)
def test_picked_text(rows: tuple[Any, ...], column: str, default: str | None, expected: str | None) -> None:
    assert common.picked_text(event(*rows), FRAME, column, default) == expected


def test_a_list_bounds_like_its_table() -> None:
    # cell.py and history.py bound the index by the list the table was drawn from
    order = [{"scenario": "a"}, {"scenario": "b"}]
    assert common.picked_row(event(1), order) == 1
    assert common.picked_row(event(2), order) is None
    assert common.picked_row(event(0), []) is None
