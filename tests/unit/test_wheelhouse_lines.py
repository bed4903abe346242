"""The wheelhouse's refinement plan takes its ranges from the lines of the expanded cells (issue #38).

An offline runner refines only what its wheelhouse holds. A range lies between two cells that
differ in one axis with the rest held, wherever they come from: the product of `[axes]`, an
`[[include]]` entry, or the cells on either side of an `[[exclude]]` hole. The index here is a
find-links folder of empty wheels: the plan reads only their names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis import lines
from harness.analysis.attribution import UNLISTED, Transition
from harness.inputs.candidates import PackageIndex, ResolvedMatrix, resolve_matrix
from harness.inputs.matrix import parse_matrix
from harness.workflows.wheelhouse import refinement_order, spans

RELEASES = {
    "transformers": ["5.10.4", "5.11.0", "5.22.2", "5.23.0"],
    "accelerate": ["1.13.0", "1.14.0", "1.15.0"],
    "peft": ["0.19.1"],
    "bitsandbytes": ["0.49.2", "0.50.0", "0.50.1", "0.50.2"],
}

# Every axis lists one release: the ranges come only from the two [[include]] entries (the
# issue's H200 matrix, its transformers range left out). Unnamed axes take the newest listed.
INCLUDE_ONLY = """
[matrix]
python = "3.12"
[axes]
transformers = ["5.23.0"]
accelerate = ["1.13.0"]
peft = ["0.19.1"]
bitsandbytes = ["0.49.2"]
[[include]]
accelerate = "1.15.0"
[[include]]
bitsandbytes = "0.50.2"
"""


@pytest.fixture
def index(tmp_path: Path) -> PackageIndex:
    links = tmp_path / "links"
    links.mkdir()
    for package, versions in RELEASES.items():
        for version in versions:
            (links / f"{package}-{version}-py3-none-any.whl").write_bytes(b"")
    return PackageIndex(no_index=True, find_links=[str(links)])


def _resolved(text: str, index: PackageIndex) -> ResolvedMatrix:
    return resolve_matrix(parse_matrix(text), index)


def test_ranges_that_come_only_from_include_entries_are_held_with_their_release_lists(index: PackageIndex) -> None:
    resolved = _resolved(INCLUDE_ONLY, index)
    found = spans(resolved, index, "3.12")
    assert {(s.axis, s.low, s.high, s.between) for s in found} == {
        ("accelerate", "1.13.0", "1.15.0", ("1.14.0",)),
        ("bitsandbytes", "0.49.2", "0.50.2", ("0.50.0", "0.50.1")),
    }
    # the release lists the runner reads instead of the index: one per axis with such a range
    assert {s.axis for s in found} == {"accelerate", "bitsandbytes"}
    order = refinement_order(resolved, found)
    held = {(axis, value): sorted(c.id for c in cells) for axis, value, cells in order}
    # each release between is built on its own line: the include's other axes held
    assert held == {
        ("accelerate", "1.14.0"): ["tf5.23.0-acc1.14.0-peft0.19.1-bnb0.49.2"],
        ("bitsandbytes", "0.50.0"): ["tf5.23.0-acc1.13.0-peft0.19.1-bnb0.50.0"],
        ("bitsandbytes", "0.50.1"): ["tf5.23.0-acc1.13.0-peft0.19.1-bnb0.50.1"],
    }


# Every axis lists the same releases; an [[exclude]] hole takes transformers 5.11.0 out of the
# accelerate 1.15.0 row, so that row's transformers line runs from 5.10.4 to 5.22.2 and must
# hold 5.11.0 on it (refinement there builds the excluded release as a probe).
EXCLUDE_HOLE = """
[matrix]
python = "3.12"
[axes]
transformers = ["5.10.4", "5.11.0", "5.22.2"]
accelerate = ["1.13.0", "1.15.0"]
[[exclude]]
transformers = "5.11.0"
accelerate = "1.15.0"
"""


def test_an_exclude_hole_joins_the_cells_on_either_side_and_holds_what_it_skips(index: PackageIndex) -> None:
    resolved = _resolved(EXCLUDE_HOLE, index)
    found = spans(resolved, index, "3.12")
    along = sorted((s.low, s.high, s.between, dict(s.held)["accelerate"]) for s in found if s.axis == "transformers")
    assert along == [
        ("5.10.4", "5.11.0", (), "1.13.0"),
        ("5.10.4", "5.22.2", ("5.11.0",), "1.15.0"),
        ("5.11.0", "5.22.2", (), "1.13.0"),
    ]
    order = {(axis, value): [c.id for c in cells] for axis, value, cells in refinement_order(resolved, found)}
    assert order[("transformers", "5.11.0")] == ["tf5.11.0-acc1.15.0"]
    assert order[("accelerate", "1.14.0")] == ["tf5.10.4-acc1.14.0", "tf5.22.2-acc1.14.0"]  # 5.11.0 has no 1.15.0 to pair with


# -- lines.ranges: a table of cells ---------------------------------------------------------
KNOWN = {"a": ["1.0", "1.1", "2.0", "2.1", "3.0"], "b": ["1", "2", "3"], "torch": ["2.12.0", "2.13.0", "2.14.0"]}

#: (cells as id -> values, expected ranges as (axis, low, high, held, low cell, between))
RANGES = [
    # the product of two axes: two lines along each
    (
        {"p": {"a": "1.0", "b": "1"}, "q": {"a": "1.0", "b": "3"}, "r": {"a": "2.0", "b": "1"}, "s": {"a": "2.0", "b": "3"}},
        [
            ("a", "1.0", "2.0", (("b", "1"),), "p", ("1.1",)),
            ("a", "1.0", "2.0", (("b", "3"),), "q", ("1.1",)),
            ("b", "1", "3", (("a", "1.0"),), "p", ("2",)),
            ("b", "1", "3", (("a", "2.0"),), "r", ("2",)),
        ],
    ),
    # three releases on a line: neighbours only, never the pair that spans the middle one
    (
        {"p": {"a": "1.0"}, "q": {"a": "2.0"}, "r": {"a": "3.0"}},
        [("a", "1.0", "2.0", (), "p", ("1.1",)), ("a", "2.0", "3.0", (), "q", ("2.1",))],
    ),
    # cells in any order: a line is sorted by version (1.10 after 1.9), its low cell the older one
    ({"new": {"a": "3.0"}, "old": {"a": "1.0"}}, [("a", "1.0", "3.0", (), "old", ("1.1", "2.0", "2.1"))]),
    # neighbouring releases: a range with nothing between still needs the axis' release list
    ({"p": {"a": "2.0"}, "q": {"a": "2.1"}}, [("a", "2.0", "2.1", (), "p", ())]),
    # a cell alone on each of its lines: no range
    ({"p": {"a": "1.0", "b": "1"}, "q": {"a": "2.0", "b": "2"}}, []),
    # inherit, a git source and a path are no release: they end no range, but are held like any value
    (
        {
            "p": {"torch": "inherit", "a": "1.0"},
            "q": {"torch": "inherit", "a": "2.0"},
            "g": {"torch": "inherit", "a": "git+https://h/a@main"},
            "d": {"torch": "inherit", "a": "/src/a"},
        },
        [("a", "1.0", "2.0", (("torch", "inherit"),), "p", ("1.1",))],
    ),
    # a local build answers for its public release: nothing between 2.13.0+cpu and the index's 2.13.0
    ({"p": {"torch": "2.12.0"}, "q": {"torch": "2.13.0+cpu"}}, [("torch", "2.12.0", "2.13.0+cpu", (), "p", ())]),
    # "2.0" and "2.0.0" are one release: one point on the line, the first cell's
    ({"p": {"a": "2.0"}, "q": {"a": "2.0.0"}, "r": {"a": "3.0"}}, [("a", "2.0", "3.0", (), "p", ("2.1",))]),
    # an axis the index did not list: the range stands, with nothing known between
    ({"p": {"c": "1"}, "q": {"c": "5"}}, [("c", "1", "5", (), "p", ())]),
]


@pytest.mark.parametrize(("cells", "expected"), RANGES)
def test_ranges_are_the_neighbouring_releases_of_every_line(cells: dict[str, dict[str, str]], expected: list[tuple]) -> None:
    got = [(r.axis, r.low, r.high, r.held, r.low_cell, r.between) for r in lines.ranges(cells, KNOWN)]
    assert got == expected


#: (ranges as (axis, between), expected (axis, value, depth, how many lines) in the budget's order)
ORDERS = [
    # one range: its bisection levels in turn
    ([("a", ("1", "2", "3"))], [("a", "2", 0, 1), ("a", "1", 1, 1), ("a", "3", 1, 1)]),
    # two ranges: every range's first level before any second level
    (
        [("a", ("1", "2", "3")), ("b", ("7", "8", "9"))],
        [("a", "2", 0, 1), ("b", "8", 0, 1), ("a", "1", 1, 1), ("a", "3", 1, 1), ("b", "7", 1, 1), ("b", "9", 1, 1)],
    ),
    # one release between on two lines: taken once, at its earliest level, for both lines
    ([("a", ("1", "2", "3")), ("a", ("2", "3"))], [("a", "2", 0, 2), ("a", "3", 0, 2), ("a", "1", 1, 1)]),
    # nothing between: nothing to hold
    ([("a", ())], []),
]


@pytest.mark.parametrize(("spans_", "expected"), ORDERS)
def test_the_budget_takes_a_bisection_level_of_every_range_at_a_time(spans_: list[tuple[str, tuple[str, ...]]], expected: list) -> None:
    found = [lines.Range(axis, "0", "99", (("x", str(k)),), f"c{k}", between) for k, (axis, between) in enumerate(spans_)]
    assert [(h.axis, h.value, h.depth, len(h.ranges)) for h in lines.holding_order(found)] == expected


def test_the_doctests() -> None:
    import doctest

    assert doctest.testmod(lines).failed == 0


# -- what a wheelhouse held, and the trip's account ----------------------------------------------
LINE = lines.Range("accelerate", "1.13.0", "1.16.0", (("transformers", "5.23.0"),), "c", ("1.14.0", "1.15.0"))
HOLDING = lines.Holding(
    held={("accelerate", "1.15.0")},
    left_out={("accelerate", "1.14.0"): 0.4, ("bitsandbytes", "0.50.0"): 12.0},
    unbuildable={("peft", "0.20.0"): "unresolvable: peft 0.20.0 needs torch>=2.14"},
    listed={"accelerate", "bitsandbytes", "peft"},
    ranges=[
        LINE,
        lines.Range("bitsandbytes", "0.49.2", "0.50.2", (), "c", ("0.50.0",)),
        lines.Range("peft", "0.19.1", "0.21.2", (), "c", ("0.20.0",)),
    ],
    budget_mib=40.0,
    mib=33.3,
)


def test_a_holding_survives_the_manifest_and_names_the_lines_it_left_out() -> None:
    import json

    back = lines.Holding.from_manifest(json.loads(json.dumps(HOLDING.to_manifest())))
    assert (back.held, back.left_out, back.unbuildable, back.listed) == (
        HOLDING.held,
        HOLDING.left_out,
        HOLDING.unbuildable,
        HOLDING.listed,
    )
    assert [(r.axis, r.low, r.high, r.held, r.between) for r in back.ranges] == [
        (r.axis, r.low, r.high, r.held, r.between) for r in HOLDING.ranges
    ]
    assert HOLDING.to_hold_all() == 47.0  # 33.3 held + 0.4 + 12.0 left out, 2 % over, rounded up
    assert [s.text() for s in lines.shortfalls(HOLDING)] == [
        "accelerate 1.13.0 → 1.16.0 with transformers 5.23.0: 1 of 2 release(s) between not held (1.14.0), 0.4 MiB",
        "bitsandbytes 0.49.2 → 0.50.2: 1 of 1 release(s) between not held (0.50.0), 12 MiB",
        "peft 0.19.1 → 0.21.2: cannot hold 0.20.0 (unresolvable: peft 0.20.0 needs torch>=2.14)",
    ]
    unweighed = lines.Holding(left_out={("a", "1"): None}, mib=3.0)
    assert unweighed.to_hold_all() is None


def test_an_older_manifest_reads_as_what_it_held() -> None:
    old = lines.Holding.from_manifest({"held": [["transformers", "5.11.0"]], "left_out": [["transformers", "5.12.0"]], "mib": 12.5})
    assert old.held == {("transformers", "5.11.0")} and old.left_out == {("transformers", "5.12.0"): None} and old.ranges == []


def _t(not_built: tuple[str, ...] = (), inconclusive: tuple[str, ...] = (), axis: str = "accelerate", after: str = "1.16.0") -> Transition:
    return Transition(
        "s", "sig", axis, "fixed", "1.13.0", after, (("transformers", "5.23.0"),), "cpu", not_built=not_built, inconclusive=inconclusive
    )


#: (the answer, the wheelhouse's holding, how it was reached, words its detail holds)
REACHED = [
    (_t(), HOLDING, "exact", ""),
    # the budget ran out before 1.14.0: a larger one holds it
    (_t(("1.14.0",)), HOLDING, "budget", "left out by the budget: 1.14.0, 0.4 MiB; --refine-budget 47 holds every line"),
    # no release list reached the runner: which releases lie between was not known there
    (_t((UNLISTED,)), HOLDING, "not held", "no release list of accelerate"),
    # a release the wheelhouse never planned (a line it did not know)
    (_t(("1.14.5",)), HOLDING, "not held", "not held: 1.14.5"),
    # a wheelhouse made without --refine-budget records no refinement
    (_t(("1.14.0",)), None, "not held", "records no refinement: make it with --refine-budget"),
    # held, but refinement stopped before it (refine_limit, the time limit): the same wheelhouse will do
    (_t(("1.15.0",)), HOLDING, "not built", "held, not built: 1.15.0 (rerun the sweep with the same wheelhouse: it resumes)"),
    # the budget counts first: a larger one is what another trip needs
    (_t(("1.14.0", "1.15.0")), HOLDING, "budget", "held, not built: 1.15.0"),
    # cannot be built on this line whatever the budget
    (_t(("0.20.0",), axis="peft", after="0.21.2"), HOLDING, "cannot", "0.20.0: unresolvable: peft 0.20.0 needs torch>=2.14"),
    # every release between ran and said nothing: no trip helps
    (_t((), ("1.14.0 (not_applicable)",)), HOLDING, "cannot", "inconclusive: 1.14.0 (not_applicable)"),
    # a git source at one end: the commits between are no wheelhouse's matter (nor are the releases after the other end)
    (_t(("1.14.0", "1.15.0"), after="main@0123456789ab"), HOLDING, "cannot", "harness bisect --git"),
]


@pytest.mark.parametrize(("transition", "holding", "kind", "words"), REACHED)
def test_how_each_answer_was_reached(transition: Transition, holding: lines.Holding | None, kind: str, words: str) -> None:
    found = lines.reached(transition, holding)
    assert found.reached == kind
    assert words in found.detail
    assert found.second_trip_helps == (kind in ("budget", "not held", "not built"))


def test_the_account_goes_line_by_line_and_says_where_a_second_trip_helps() -> None:
    exact = _t()
    other = Transition("s2", "sig2", "accelerate", "fixed", "1.13.0", "1.16.0", exact.held, "cpu", not_built=("1.14.0",))
    stuck = Transition("s", "sig", "bitsandbytes", "fixed", "0.49.2", "0.50.2", (), "cpu", inconclusive=("0.50.0 (crash)",))
    found = lines.account([exact, other, stuck], HOLDING)
    assert [(a.axis, [r.reached for r in a.answers], a.exact, a.second_trip_helps) for a in found] == [
        ("accelerate", ["exact", "budget"], False, True),
        ("bitsandbytes", ["cannot"], False, False),
    ]
    text = lines.account_text(found)
    assert text[0] == "account on cpu: 2 line(s) of the matrix with an answer: 0 exact, 2 with a range; a second trip can help on 1"
    assert text[1] == "  accelerate, with transformers 5.23.0:"
    assert text[2] == "    exact: s: fixed in accelerate 1.16.0 (after 1.13.0)"
    assert text[3].startswith("    a range: the budget ran out: s2: fixed between accelerate 1.13.0 (fails) and 1.16.0 (passes)")
    only = lines.account_text(lines.account([exact], HOLDING))
    assert only[0] == "account on cpu: 1 line(s) of the matrix with an answer: 1 exact, 0 with a range"
