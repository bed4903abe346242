"""Shards balanced by stored durations (`running.shards`): whole cells or cut ones (`lay_out`), a cut
cell's tests dealt to its pieces (`split_tests`), the weights where durations are missing."""

from __future__ import annotations

import random

import pytest

from harness.running.shards import cell_weights, lay_out, split_tests

LAYOUTS = [
    # (id, weights, shards, setup, each shard's (cell, part) pieces)
    ("equal-cells-whole-round-robin", [1, 1, 1, 1], 2, 0.0, [[("c0", 0), ("c2", 0)], [("c1", 0), ("c3", 0)]]),
    # fewer cells than shards: each cut, so no shard idles
    ("two-cells-four-shards-cut", [1, 1], 4, 0.0, [[("c0", 0)], [("c0", 1)], [("c1", 0)], [("c1", 1)]]),
    # one long cell and small ones: whole cells leave the long one alone as the longest shard; cut it
    ("long-cell-cut", [10, 2, 2, 2], 2, 0.0, [[("c0", 0)], [("c0", 1), ("c1", 0), ("c2", 0), ("c3", 0)]]),
    # longest first into the least loaded shard: 5 | 4+1 fits exactly, no cut needed
    ("whole-cells-fit", [5, 4, 1], 2, 0.0, [[("c0", 0)], [("c1", 0), ("c2", 0)]]),
    # a setup dearer than what a cut saves keeps cells whole: 6+setup against two pieces paying it twice
    ("setup-keeps-cells-whole", [6, 4], 2, 5.0, [[("c0", 0)], [("c1", 0)]]),
    ("one-shard-everything", [3, 1], 1, 0.0, [[("c0", 0), ("c1", 0)]]),
    # a cut pays: 1/3 + 5 s of setup in each of three shards is less than 1 + 5 in one
    ("tiny-cell-cut-even-with-setup", [1], 3, 5.0, [[("c0", 0)], [("c0", 1)], [("c0", 2)]]),
    # cells whose stored seconds are all 0 (every test skipped) still spread, one a shard
    ("zero-weights-whole", [0, 0], 2, 0.0, [[("c0", 0)], [("c1", 0)]]),
]


@pytest.mark.parametrize(("weights", "count", "setup", "expected"), [c[1:] for c in LAYOUTS], ids=[c[0] for c in LAYOUTS])
def test_lay_out(weights: list[float], count: int, setup: float, expected: list[list[tuple[str, int]]]) -> None:
    cells = [f"c{i}" for i in range(len(weights))]
    layout = lay_out(cells, weights, count, setup)
    assert [[(p.cell, p.part) for p in shard] for shard in layout.shards] == expected
    # every cell's pieces share it all, and the same shares tuple rides on each piece
    pieces = [p for shard in layout.shards for p in shard]
    for cell in cells:
        mine = sorted((p for p in pieces if p.cell == cell), key=lambda p: p.part)
        assert [p.part for p in mine] == list(range(len(mine)))
        assert len({p.shares for p in mine}) == 1 and sum(mine[0].shares) == pytest.approx(1.0)


def test_layouts_are_within_3_percent_of_the_ideal() -> None:
    """Against McNaughton's bound for cuts that each pay a setup: every cell's work and setup,
    plus one setup per shard boundary a cell may cross, spread evenly (or the longest cell, whole)."""
    rng = random.Random(29)
    for _ in range(300):
        weights = [rng.uniform(0.1, 100) for _ in range(rng.randint(1, 12))]
        count, setup = rng.randint(1, 8), rng.choice([0.0, 1.0, 5.0])
        layout = lay_out([f"c{i}" for i in range(len(weights))], weights, count, setup)
        longest = max(layout.expected(i) for i in range(1, count + 1))
        bound = (sum(weights) + setup * (len(weights) + count - 1)) / count
        assert longest <= 1.03 * max(bound, setup) + 1e-6, (weights, count, setup)


SPLITS = [
    # (id, node ids in collection order, stored seconds, shares, the pieces' tests)
    ("longest-first-least-filled", ["a", "b", "c", "d"], {"a": 3.0, "b": 1.0, "c": 1.0, "d": 1.0}, [0.5, 0.5], [["a"], ["b", "c", "d"]]),
    ("no-durations-by-count", ["a", "b", "c", "d", "e"], {}, [0.5, 0.5], [["a", "c", "e"], ["b", "d"]]),
    # a new test with no stored seconds counts the mean of those stored (2 s)
    ("unknown-gets-the-mean", ["a", "b", "new"], {"a": 3.0, "b": 1.0}, [0.5, 0.5], [["a"], ["b", "new"]]),
    # unequal shares (a cell wrapped over a shard boundary): 3/4 and 1/4 of the work
    ("unequal-shares", ["a", "b", "c", "d"], {}, [0.75, 0.25], [["a", "b", "c"], ["d"]]),
    ("more-pieces-than-tests", ["a"], {"a": 1.0}, [0.5, 0.5], [["a"], []]),
]


@pytest.mark.parametrize(("nodeids", "seconds", "shares", "expected"), [c[1:] for c in SPLITS], ids=[c[0] for c in SPLITS])
def test_split_tests(nodeids: list[str], seconds: dict[str, float], shares: list[float], expected: list[list[str]]) -> None:
    assert split_tests(nodeids, seconds, shares) == expected


def test_split_partitions_and_balances_uneven_durations() -> None:
    rng = random.Random(4)
    nodeids = [f"t::{i}" for i in range(400)]
    seconds = {n: rng.lognormvariate(0, 1.2) for n in nodeids}
    pieces = split_tests(nodeids, seconds, [0.25] * 4)
    assert sorted(n for p in pieces for n in p) == sorted(nodeids)
    loads = [sum(seconds[n] for n in p) for p in pieces]
    assert max(loads) <= 1.02 * sum(loads) / 4
    # the same inputs, the same deal: shards that never talk agree
    assert split_tests(list(nodeids), dict(seconds), [0.25] * 4) == pieces


WEIGHTS = [
    # (id, cells, durations, weights, timed)
    ("none-stored-by-count", ["a", "b"], {}, [1.0, 1.0], False),
    ("sum-of-tests", ["a", "b"], {"a": {"x": 1.0, "y": 2.0}, "b": {"x": 4.0}}, [3.0, 4.0], True),
    # a cell the file has not seen (a new release) weighs the mean of those it has
    ("new-cell-the-mean", ["a", "new"], {"a": {"x": 1.0, "y": 2.0}}, [3.0, 3.0], True),
    # another cell's tests (a refinement probe's) count for nothing
    ("other-cells-ignored", ["a"], {"a": {"x": 1.0}, "probe": {"x": 50.0}}, [1.0], True),
]


@pytest.mark.parametrize(("cells", "durations", "weights", "timed"), [c[1:] for c in WEIGHTS], ids=[c[0] for c in WEIGHTS])
def test_cell_weights(cells: list[str], durations: dict[str, dict[str, float]], weights: list[float], timed: bool) -> None:
    assert cell_weights(cells, durations) == (weights, timed)
