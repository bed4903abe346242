"""The tail help of a sweep (`schedule`): which running cell an idle job shares (`worth_helping`),
which get a server started ahead (`spares_for`), and `Tail`'s answers to scripted events."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from harness.running.schedule import Help, Idle, Running, Shared, Tail, spares_for, worth_helping

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


# -- the tail's decisions, as scripts of events ----------------------------------------------------
# What the sweep tells `Tail` (under its lock) as its jobs run, and what each call answers; the
# sweep only carries the answers out (starts a spare server, shares a cell, sleeps, goes home).


@dataclass(frozen=True)
class Start:
    """A job starts running `cell` (`left` scenarios, `runnable` of them runnable here), its
    server started in `start` s; `last`: the feed has no cell left. Answers: the spares to start."""

    cell: str
    left: int
    start: float = 6.5
    runnable: int | None = None
    last: bool = False
    mean: float = 0.0

    def __call__(self, tail: Tail[str]) -> object:
        runnable = self.left if self.runnable is None else self.runnable
        return tail.started(self.cell, self.left, runnable, self.start, last=self.last, mean=self.mean)


@dataclass(frozen=True)
class Run:
    """Some job of `cell` takes `n` of its scenarios and each finishes in `seconds`."""

    cell: str
    n: int
    seconds: float = 1.0

    def __call__(self, tail: Tail[str]) -> object:
        for _ in range(self.n):
            tail.took(self.cell, runnable=True)
            tail.finished(self.cell, self.seconds)
        return None


@dataclass(frozen=True)
class GoIdle:
    """A job finds no cell to take (it counts as idle until `Back`)."""

    def __call__(self, tail: Tail[str]) -> object:
        return tail.job_idle()


@dataclass(frozen=True)
class Ask:
    """The idle job asks what to do, the sweep's mean scenario seconds being `mean`."""

    mean: float = 1.0

    def __call__(self, tail: Tail[str]) -> object:
        return tail.next_for_idle(self.mean)


@dataclass(frozen=True)
class Back:
    """The idle job stops waiting: it helps, goes home, or the sweep stopped."""

    def __call__(self, tail: Tail[str]) -> object:
        return tail.job_back()


@dataclass(frozen=True)
class Gone:
    """A job ends (nothing left for it, the sweep stopped)."""

    def __call__(self, tail: Tail[str]) -> object:
        return tail.job_gone()


@dataclass(frozen=True)
class Failed:
    """The helper's server for `cell` did not start."""

    cell: str

    def __call__(self, tail: Tail[str]) -> object:
        return tail.helper_failed(self.cell)


@dataclass(frozen=True)
class Done:
    """A job is done with `cell`. Answers: whether it was its last (the cell leaves the tail)."""

    cell: str

    def __call__(self, tail: Tail[str]) -> object:
        return tail.done(self.cell)


@dataclass(frozen=True)
class End:
    """The jobs are over. Answers: the cells whose spares nobody took."""

    def __call__(self, tail: Tail[str]) -> object:
        return tail.end()


Step = Start | Run | GoIdle | Ask | Back | Gone | Failed | Done | End
WAIT, HOME = Idle.WAIT, Idle.HOME

SCRIPTS: list[tuple[str, int, list[tuple[Step, object]]]] = [
    # (id, jobs, [(event, what the tail answers)])
    (
        # Cells 1 and 2 end together while job A's cell 3 is still being prepared: job B saw no
        # cell left and none running, but A is busy, so B waits; once cell 3 runs, B shares it
        # (on the two-GPU runner going home here left the tail to one GPU)
        "an-idle-job-waits-for-the-last-cell-still-being-prepared",
        2,
        [
            (Start("c1", 6), []),
            (Start("c2", 6), []),
            (Run("c1", 6, 0.6), None),
            (Done("c1"), True),  # job A takes cell 3 from the feed: it is being prepared
            (Run("c2", 6, 0.6), None),
            (Done("c2"), True),
            (GoIdle(), None),  # job B
            (Ask(0.6), WAIT),
            (Ask(0.6), WAIT),
            (Start("c3", 6, start=1.0, last=True, mean=0.6), ["c3"]),
            (Ask(0.6), Help("c3", spare=True)),
            (Back(), None),
            (Done("c3"), False),  # A's server on it
            (Done("c3"), True),  # B's
            (End(), []),
        ],
    ),
    (
        # Servers take 2 s; cell 1's scenarios 0.5 s, cell 2's 1 s. Job A ends cell 1 and takes
        # cell 3, the last: cell 3 (6 x the mean 0.67 s) has more time left than cell 2 (3 x 1 s),
        # so its second server starts now; when B ends cell 2 it shares cell 3 on that spare at once
        "the-helper-takes-the-server-started-before-it-was-idle",
        2,
        [
            (Start("c1", 6, start=2.0), []),
            (Start("c2", 6, start=2.0), []),
            (Run("c1", 6, 0.5), None),
            (Run("c2", 3, 1.0), None),
            (Done("c1"), True),
            (Start("c3", 6, start=2.0, last=True, mean=6.0 / 9), ["c3"]),
            (Run("c2", 3, 1.0), None),
            (Done("c2"), True),
            (GoIdle(), None),
            (Ask(7.0 / 10), Help("c3", spare=True)),
            (Back(), None),
        ],
    ),
    (
        # nothing worth a server (one scenario left): the idle job waits while the other runs,
        # then both go home
        "with-nothing-to-share-the-jobs-go-home-once-all-are-idle",
        2,
        [
            (Start("c1", 2, start=6.5), []),  # the last cell's env failed: it never runs, nothing to share
            (Run("c1", 1, 3.0), None),
            (GoIdle(), None),  # job B
            (Ask(3.0), WAIT),
            (Run("c1", 1, 3.0), None),
            (Done("c1"), True),
            (GoIdle(), None),  # job A
            (Ask(3.0), HOME),
            (Back(), None),
            (Ask(3.0), WAIT),  # job B, between A's two steps home
            (Gone(), None),  # A's worker ends
            (Ask(3.0), HOME),  # B
        ],
    ),
    (
        # the second helper sees what two jobs leave of the cell (20 / 2), without a spare
        "two-idle-jobs-share-one-long-cell",
        3,
        [
            (Start("c1", 20, start=1.0, last=True, mean=1.0), ["c1"]),
            (GoIdle(), None),
            (Ask(1.0), Help("c1", spare=True)),
            (Back(), None),
            (GoIdle(), None),
            (Ask(1.0), Help("c1", spare=False)),
            (Back(), None),
            (Done("c1"), False),
            (Done("c1"), False),
            (Done("c1"), True),
        ],
    ),
    (
        # a cell whose scenarios are mostly not applicable here costs nothing to finish
        "not-applicable-scenarios-are-not-worth-sharing",
        2,
        [
            (Start("c1", 6, runnable=1, last=True, mean=5.0), []),
            (GoIdle(), None),
            (Ask(5.0), WAIT),
        ],
    ),
    (
        "a-helper-whose-server-failed-gives-its-share-back",
        2,
        [
            (Start("c1", 20, last=True, mean=1.0), ["c1"]),
            (GoIdle(), None),
            (Ask(1.0), Help("c1", spare=True)),
            (Back(), None),
            (Failed("c1"), None),
            (Done("c1"), True),  # its own job's was the last
        ],
    ),
    (
        # nothing finished anywhere yet: the spare goes to the cell started last; it leaves
        # with its cell, unused (the sweep closes it), and a stop leaves the others' spares
        "spares-nobody-took-are-discarded",
        3,
        [
            (Start("c1", 6), []),
            (Start("c2", 6, last=True), ["c2", "c1"]),
            (Run("c2", 6), None),
            (Done("c2"), True),
            (End(), ["c1"]),
        ],
    ),
    (
        # a cell the tail was not told of (a single job, --no-tail-help, `run_cell`)
        "a-cell-run-alone-changes-nothing",
        2,
        [
            (Run("alone", 3), None),
            (Failed("alone"), None),
            (Done("alone"), True),
            (GoIdle(), None),
            (Ask(), WAIT),
            (End(), []),
        ],
    ),
]


@pytest.mark.parametrize(("jobs", "script"), [s[1:] for s in SCRIPTS], ids=[s[0] for s in SCRIPTS])
def test_the_tail_answers_each_event(jobs: int, script: list[tuple[Step, object]]) -> None:
    tail: Tail[str] = Tail(jobs)
    for at, (event, expected) in enumerate(script):
        assert event(tail) == expected, f"step {at}: {event}"


@pytest.mark.parametrize(("jobs", "help_tail", "sharing"), [(1, True, False), (2, False, False), (2, True, True), (4, True, True)])
def test_only_several_jobs_share_cells(jobs: int, help_tail: bool, sharing: bool) -> None:
    assert Tail(jobs, help_tail).sharing is sharing


@pytest.mark.parametrize(("jobs", "cpus", "spares"), [(2, 0, 1), (2, 16, 1), (4, 16, 3), (2, 2, 0), (4, 5, 1), (2, 3, 1)])
def test_spares_start_ahead_only_on_cores_no_job_uses(jobs: int, cpus: int, spares: int) -> None:
    # the last cell handed out: every running cell with time left is a candidate for a spare
    tail: Tail[str] = Tail(jobs, cpus=cpus)
    chosen: list[str] = []
    for k in range(jobs):
        chosen += tail.started(f"cell{k}", left=9, runnable=9, start_seconds=3.0, last=k == jobs - 1, mean=1.0)
    assert len(chosen) == spares


@pytest.mark.parametrize(
    ("shared", "expected"),
    [
        # its jobs split what is left; before any finished, the sweep's mean stands in
        (Shared(left=9, runnable=9, start_seconds=6.5), Running(9, None, 6.5)),
        (Shared(left=9, runnable=9, start_seconds=6.5, jobs=2, ran=3, seconds=6.0), Running(5, 2.0, 6.5)),
        # not-applicable scenarios cost nothing; a spare's imports are done: a helper starts at once
        (Shared(left=9, runnable=4, start_seconds=6.5, spare=True), Running(4, None, 0.0)),
    ],
)
def test_a_running_cell_as_an_idle_job_sees_it(shared: Shared, expected: Running) -> None:
    assert shared.running() == expected
