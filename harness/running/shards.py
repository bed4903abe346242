"""Which part of a sweep each of n scheduler tasks runs: whole cells, or with a suite, slices of cells' tests.

Pure: no I/O, no clock. The same inputs give every shard the same layout, so n tasks that
never talk to each other partition the work (each computes the layout, runs its own part).

- Scenario cells (no suite): cells dealt round robin by id (`shard_cells`), as before.
- A suite: each cell weighs its tests' stored seconds (`cell_weights`; by count where no
  durations are stored). `lay_out` puts whole cells into the least loaded shard, longest first,
  and cuts cells into pieces instead (wrapping them over consecutive shards, as McNaughton's
  rule does) where that gives a shorter longest shard once each extra piece pays `setup`
  (another collection, its env and fork server). A shard collects once per cell it touches.
- Within a cut cell, once collected, `split_tests` deals its tests to the pieces as
  pytest-split's least_duration does: longest first, each to the piece least filled against
  its share; a test with no stored duration counts the mean of the cell's that have one.
  Only the cell's own stored seconds count (not another cell's of the same node id): a
  refinement's probes, stored later under other cells, never move a cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: What another piece of a cell costs a shard when durations are known, in seconds: its fork
#: server's start and the suite's collection on an env already built (2-10 s on this VM).
SETUP_SECONDS = 5.0
#: A cut must shorten the longest shard by more than this fraction to be worth its setups.
GAIN = 0.02

#: cell id -> node id -> seconds, from a results file's earlier runs of the suite.
Durations = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Piece:
    """A shard's part of one cell: `shares[part]` of its expected work (all of it when whole)."""

    cell: str
    part: int  # which piece of the cell, 0-based; piece 0 also runs the cell's scenarios
    shares: tuple[float, ...]  # every piece's share of the cell, in order, the same in each piece
    seconds: float  # expected: its share of the cell's weight, plus `setup`

    @property
    def whole(self) -> bool:
        return len(self.shares) == 1


@dataclass(frozen=True)
class Layout:
    """The pieces of each shard (shard i/n is `shards[i - 1]`) and what their numbers mean."""

    shards: tuple[tuple[Piece, ...], ...]
    timed: bool  # weights are stored seconds (else every cell counts 1 and nothing is a second)

    def expected(self, index: int) -> float:
        """Shard `index` (1-based): the sum of its pieces' weights (seconds when `timed`)."""
        return sum(p.seconds for p in self.shards[index - 1])

    def pieces(self, index: int) -> dict[str, Piece]:
        return {p.cell: p for p in self.shards[index - 1]}


def cell_weights(cells: Sequence[str], durations: Durations) -> tuple[list[float], bool]:
    """Each cell's expected seconds (the sum of its tests' stored seconds), and whether they are
    seconds. A cell with none stored gets the mean of those that have them; with none stored at
    all, every cell weighs 1 (by count).

    >>> cell_weights(["a", "b", "c"], {"a": {"t1": 2.0, "t2": 4.0}, "b": {"t1": 2.0}})
    ([6.0, 2.0, 4.0], True)
    >>> cell_weights(["a", "b"], {})
    ([1.0, 1.0], False)
    """
    known = {c: sum(durations[c].values()) for c in cells if durations.get(c)}
    if not known:
        return [1.0] * len(cells), False
    mean = sum(known.values()) / len(known)
    return [known.get(c, mean) for c in cells], True


def lay_out(cells: Sequence[str], weights: Sequence[float], count: int, setup: float = 0.0, *, timed: bool = True) -> Layout:
    """The layout of `count` shards: whole cells where that is as even, else some cells cut.

    >>> [[p.cell for p in s] for s in lay_out(["a", "b", "c", "d"], [1, 1, 1, 1], 2).shards]
    [['a', 'c'], ['b', 'd']]
    >>> [[(p.cell, p.part) for p in s] for s in lay_out(["a", "b"], [1, 1], 4).shards]
    [[('a', 0)], [('a', 1)], [('b', 0)], [('b', 1)]]
    """
    whole = _whole_cells(weights, count, setup)
    best: Cut = [[(i, 0, (1.0,)) for i in shard] for shard in whole]
    longest = max((sum(weights[i] + setup for i in s) for s in whole), default=0.0)
    cut = _wrapped(weights, count, setup)
    if cut is not None and cut[1] < longest * (1 - GAIN):
        best = cut[0]
    shards = tuple(tuple(Piece(cells[i], part, shares, weights[i] * shares[part] + setup) for i, part, shares in s) for s in best)
    return Layout(shards, timed)


def _whole_cells(weights: Sequence[float], count: int, setup: float) -> list[list[int]]:
    """Longest cell first, each into the shard with the least load so far (the fewest cells, then the lowest, on ties);
    each shard's cells back in matrix order. Equal weights give round robin."""
    loads = [0.0] * count
    shards: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        j = min(range(count), key=lambda j: (loads[j], len(shards[j]), j))  # on equal loads, the fewest cells
        loads[j] += weights[i] + setup
        shards[j].append(i)
    return [sorted(s) for s in shards]


Cut = list[list[tuple[int, int, tuple[float, ...]]]]  # per shard: (cell index, part, shares)


def _wrapped(weights: Sequence[float], count: int, setup: float) -> tuple[Cut, float] | None:
    """Cells in matrix order poured into shards of one capacity, a cell that overflows one
    continuing in the next (each piece paying `setup`): the smallest capacity that fits in
    `count` shards, found by bisection, and the longest shard's load. None: nothing to cut."""
    total = sum(weights)
    if not weights or total <= 0 or count < 2:
        return None
    low, high = total / count + setup, total + setup * (len(weights) + count)
    for _ in range(60):
        middle = (low + high) / 2
        if _pour(weights, count, setup, middle) is None:
            low = middle
        else:
            high = middle
    poured = _pour(weights, count, setup, high)
    assert poured is not None
    return poured


def _pour(weights: Sequence[float], count: int, setup: float, capacity: float) -> tuple[Cut, float] | None:
    """`_wrapped`'s fill at one capacity, or None where it needs more than `count` shards. A
    shard with less room than a hundredth of the capacity takes no sliver of a cell: a piece
    that small would pay a whole setup for nearly nothing."""
    amounts: list[list[tuple[int, float]]] = [[]]
    room = capacity
    sliver = capacity / 100
    for i, weight in enumerate(weights):
        left = weight
        while True:
            if room - setup < min(sliver, left) or (room - setup <= 0):
                amounts.append([])
                room = capacity
                if len(amounts) > count:
                    return None
            take = min(left, room - setup)
            amounts[-1].append((i, take))
            room -= take + setup
            left -= take
            if left <= 1e-9 * max(weight, 1.0):
                break
    takes: dict[int, list[float]] = {}
    for shard in amounts:
        for i, take in shard:
            takes.setdefault(i, []).append(take)
    shares = {i: tuple(t / weights[i] for t in ts) if weights[i] > 0 else (1.0,) * len(ts) for i, ts in takes.items()}
    parts: dict[int, int] = {}
    cut: Cut = [[] for _ in range(count)]
    for j, shard in enumerate(amounts):
        for i, _ in shard:
            cut[j].append((i, parts.get(i, 0), shares[i]))
            parts[i] = parts.get(i, 0) + 1
    longest = max(sum(take + setup for _, take in shard) for shard in amounts)
    return cut, longest


def split_tests(nodeids: Sequence[str], seconds: Mapping[str, float], shares: Sequence[float]) -> list[list[str]]:
    """A cut cell's collected tests dealt to its pieces, in collection order within each.

    Longest first (ties by node id), each to the piece whose load is the smallest fraction of
    its share of the whole; a test with no stored seconds counts the mean of those with some
    (1 each where none has: by count). Every piece computes the same deal from the same
    collection, so the pieces partition the cell's tests.

    >>> split_tests(["a", "b", "c", "d"], {"a": 3.0, "b": 1.0, "c": 1.0, "d": 1.0}, [0.5, 0.5])
    [['a'], ['b', 'c', 'd']]
    >>> split_tests(["a", "b", "c"], {}, [0.5, 0.5])
    [['a', 'c'], ['b']]
    """
    known = [seconds[n] for n in nodeids if n in seconds]
    mean = sum(known) / len(known) if known else 1.0
    weight = {n: seconds.get(n, mean) for n in nodeids}
    total = sum(weight.values()) or 1.0
    targets = [max(share, 0.0) * total for share in shares]
    loads = [0.0] * len(shares)
    chosen: dict[str, int] = {}
    for node in sorted(nodeids, key=lambda n: (-weight[n], n)):
        j = min((j for j in range(len(shares)) if targets[j] > 0), key=lambda j: ((loads[j] + weight[node]) / targets[j], j), default=0)
        loads[j] += weight[node]
        chosen[node] = j
    return [[n for n in nodeids if chosen[n] == j] for j in range(len(shares))]
