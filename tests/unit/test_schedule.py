"""Which running cell an idle job shares at the end of a sweep (`schedule.worth_helping`)."""

from __future__ import annotations

import pytest

from harness.schedule import Running, spares_for, worth_helping

CASES = [
    # (id, running cells, sweep mean seconds, the cell to help or None)
    ("nothing-running", [], 3.0, None),
    ("long-tail-helped", [Running(left=10, seconds_each=3.0, start_seconds=6.5)], 3.0, 0),
    # 2 scenarios of 3 s left: (6 - 6.5) / 2 < 0, a second server would finish later
    ("short-tail-not-worth-a-server", [Running(left=2, seconds_each=3.0, start_seconds=6.5)], 3.0, None),
    ("one-scenario-left-never", [Running(left=1, seconds_each=100.0, start_seconds=0.1)], 3.0, None),
    # no scenario of the cell finished yet: the sweep's mean stands in
    ("unknown-uses-sweep-mean", [Running(left=5, seconds_each=None, start_seconds=6.5)], 3.0, 0),
    ("unknown-and-cheap-sweep", [Running(left=5, seconds_each=None, start_seconds=6.5)], 0.5, None),
    # the one with the most to gain, not the first
    (
        "most-gain-wins",
        [Running(left=4, seconds_each=3.0, start_seconds=1.0), Running(left=9, seconds_each=3.0, start_seconds=1.0)],
        3.0,
        1,
    ),
    # a dear server start can outweigh more scenarios left
    (
        "start-cost-counts",
        [Running(left=9, seconds_each=1.0, start_seconds=8.5), Running(left=4, seconds_each=3.0, start_seconds=1.0)],
        3.0,
        1,
    ),
]


@pytest.mark.parametrize(("running", "mean", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_worth_helping(running: list[Running], mean: float, expected: int | None) -> None:
    assert worth_helping(running, mean) == expected


SPARE_CASES = [
    # (id, running cells, sweep mean seconds, spares allowed, the cells that get one, in order)
    ("none-allowed", [Running(left=9, seconds_each=3.0, start_seconds=6.5)], 3.0, 0, []),
    ("the-longest-first", [Running(4, 3.0, 6.5), Running(9, 3.0, 6.5), Running(6, 3.0, 6.5)], 3.0, 2, [1, 2]),
    # seconds left, not scenarios left: 5 x 4 s outweighs 9 x 1 s
    ("time-not-count", [Running(9, 1.0, 6.5), Running(5, 4.0, 6.5)], 3.0, 1, [1]),
    # the cell just handed out has run nothing yet: the sweep's mean stands in (22 x 3 s)
    ("fresh-cell-uses-mean", [Running(3, 5.0, 6.5), Running(22, None, 6.5)], 3.0, 1, [1]),
    # one scenario left: its own job runs it, a helper would take nothing
    ("one-left-never", [Running(1, 60.0, 6.5), Running(2, 1.0, 6.5)], 3.0, 2, [1]),
    ("fewer-cells-than-spares", [Running(5, 2.0, 6.5)], 3.0, 3, [0]),
    # nothing finished anywhere yet (two cells handed out at once): the one started last
    ("tie-goes-to-the-last-started", [Running(6, None, 6.5), Running(6, None, 6.5)], 0.0, 1, [1]),
]


@pytest.mark.parametrize(("running", "mean", "n", "expected"), [c[1:] for c in SPARE_CASES], ids=[c[0] for c in SPARE_CASES])
def test_spares_for(running: list[Running], mean: float, n: int, expected: list[int]) -> None:
    assert spares_for(running, mean, n) == expected
