"""The Matrix page's default library for its edges (`common.select_edge_axis`) is chosen from the
edges' counts (`heatmap.busiest_of`), as `harness.storage.pages.heatmap_edges` groups them, not from
every transition made again one by one (78,000 at 2,000,000 outcomes, on every run of the page):
the same library `heatmap.busiest_axis` chose, ties and all, for the dashboard and the published page."""

from __future__ import annotations

import pytest

from dashboard import common
from harness.analysis import heatmap

AXES = ["transformers", "accelerate", "peft"]


def _edge(axis: str, row: str = "tests/test_a.py") -> heatmap.Edge:
    return heatmap.Edge(row, "introduced", f"introduced in {axis} 2.0", axis, "a", "b", "E: x")


@pytest.mark.parametrize(
    ("weighted", "axes", "chosen"),
    [
        ([("peft", 3), ("transformers", 2)], AXES, "peft"),
        ([("peft", 1), ("transformers", 2), ("transformers", 1)], AXES, "transformers"),  # one axis, two edges
        ([("peft", 2), ("transformers", 2)], AXES, "peft"),  # a tie: the later axis in reading order
        ([("torch", 5), ("accelerate", 1)], AXES, "accelerate"),  # torch is no axis drawn: not counted
        ([("torch", 5)], ["transformers", "peft"], "peft"),  # along no axis drawn: the last
        ([], ["transformers", "peft"], "peft"),
        ([("peft", 1)], [], ""),
    ],
)
def test_the_edge_axis_from_counts_is_the_one_from_every_edge(weighted: list[tuple[str, int]], axes: list[str], chosen: str) -> None:
    edges = [(_edge(axis), n) for axis, n in weighted]
    every = [e for e, n in edges for _ in range(n)]
    assert heatmap.busiest_axis(every, axes) == chosen
    assert heatmap.busiest_of(common._by_axis(edges), axes) == chosen
