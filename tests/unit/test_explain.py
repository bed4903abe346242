"""`analysis.explain` as tables: what moved between two runs, and the search that narrows a change
to its cause over scripted probes (as `test_bisect.py` drives the bisection)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from harness.analysis.explain import Config, Facts, Look, Move, Sides, Step, explain, moves, parse_budget

A, B, C = (Move("package", n, "1.0", "2.0") for n in ("alpha", "beta", "gamma"))
MANY = [Move("package", f"p{i:02d}", "1.0", "2.0") for i in range(10)]
GIT = Move("git", "tinypkg", "c00", "c12")
CODE = Move("code", "/repo", "a0", "a7")
DRIVER = Move("machine", "driver", "570", "580")
COMMITS = [Step(f"c{i:02d}", f"commit {i} (#{200 + i})") for i in range(13)]  # c00 the night before's, c12 the change's


def reproduces(*culprits: str) -> Callable[[Config], Look]:
    """A probe on which the change shows where every one of `culprits` is brought forward."""
    return lambda config: Look.AFTER if set(culprits) <= config.names() else Look.BEFORE


def from_commit(first_bad: int, move: Move = GIT) -> Callable[[Config], Look]:
    def probe(config: Config) -> Look:
        at = dict((m.name, s) for m, s in config.at)
        if move.name in at:
            return Look.AFTER if int(at[move.name].sha[1:]) >= first_bad else Look.BEFORE
        return Look.AFTER if move in config.applied else Look.BEFORE

    return probe


CASES = [
    # (moves, probe, verdict, culprits, most probes): why
    ([A], reproduces("alpha"), "culprit", ["alpha"], 0),  # exactly one thing moved: the cause, with no probe
    ([A, B, C], reproduces("beta"), "culprit", ["beta"], 4),  # a few: one at a time, then a second look
    (MANY, reproduces("p07"), "culprit", ["p07"], 2 * math.ceil(math.log2(10)) + 2),  # many: halved (ddmin)
    ([A, B, C], reproduces("alpha", "gamma"), "set", ["alpha", "gamma"], 8),  # only together
    ([A, B], lambda config: Look.BEFORE, "nowhere", [], 4),  # not even all of them: the change is elsewhere
    ([A, DRIVER], lambda config: Look.AFTER, "elsewhere", ["driver"], 1),  # the night before's state fails on today's machine
    ([DRIVER], lambda config: Look.AFTER, "static", [], 0),  # nothing a probe can undo
    ([], lambda config: Look.AFTER, "nothing", [], 0),
]


@pytest.mark.parametrize(("moved", "probe", "verdict", "culprits", "most"), CASES)
def test_explain(moved: list[Move], probe: Callable[[Config], Look], verdict: str, culprits: list[str], most: int) -> None:
    found = explain(moved, probe)
    assert found.verdict == verdict, found.describe()
    assert sorted(m.name for m in found.culprits) == culprits
    assert len(found.probes) <= most, [p.config.describe() for p in found.probes]


def test_a_git_axis_moved_alone_is_bisected_to_its_commit_within_log2_probes() -> None:
    found = explain([GIT], from_commit(7), lambda m: COMMITS)
    assert found.verdict == "culprit" and found.commit == COMMITS[7] and found.last_good == COMMITS[6]
    assert len(found.probes) <= math.ceil(math.log2(12)) + 1  # the bisection and one second look
    assert found.commit.pr == "207" and "commit 7 (#207)" in found.describe()


def test_your_code_among_packages_is_found_then_its_commits_bisected() -> None:
    steps = [Step(f"a{i}", f"change {i}") for i in range(8)]
    found = explain([A, CODE], from_commit(5, CODE), lambda m: steps if m == CODE else ())
    assert (found.verdict, found.commit) == ("culprit", steps[5]) and found.culprits == (CODE,)


def test_a_probe_whose_repeats_disagree_ends_the_search_without_a_culprit() -> None:
    looks = iter([Look.BEFORE, Look.FLAKY])
    found = explain([GIT], lambda config: next(looks), lambda m: COMMITS)
    assert found.verdict == "flaky" and found.commit is None and "disagreed" in found.describe()
    assert found.describe().startswith("inconclusive (flaky)")


def test_a_culprit_that_does_not_show_the_change_a_second_time_is_no_culprit() -> None:
    seen: dict[str, int] = {}

    def once(config: Config) -> Look:  # beta reproduces the first time only
        key = config.describe()
        seen[key] = seen.get(key, 0) + 1
        return Look.AFTER if "beta" in config.names() and seen[key] == 1 else Look.BEFORE

    found = explain([A, B, C], once)
    assert found.verdict == "flaky" and "second time" in found.describe()


def test_a_budget_says_what_it_left() -> None:
    found = explain(MANY, reproduces("p07"), budget=2)
    assert found.verdict == "budget" and len(found.probes) == 2 and "p07" in found.left
    assert found.describe().startswith("not explained within the budget (2 probe(s)): still in play")


def test_probes_that_do_not_build_are_no_answer() -> None:
    def probe(config: Config) -> Look:
        if "alpha" in config.names() and "beta" not in config.names():
            return Look.UNBUILT  # alpha's new version needs beta's
        return Look.AFTER if "alpha" in config.names() else Look.BEFORE

    found = explain([A, B, C], probe)
    assert found.verdict == "set" and sorted(m.name for m in found.culprits) == ["alpha", "beta"]


# -- what moved ------------------------------------------------------------------------------------
MOVES = [
    # (before, after, files, described): why
    (Facts({"a": "1"}), Facts({"a": "2"}), (), ["a 1 → 2"]),
    (Facts({"a": "1"}), Facts({"a": "1", "b": "3"}), (), ["b (not installed) → 3"]),  # a new dependency
    (Facts({"x": "git+u@1"}, {"x": "1"}), Facts({"x": "git+u@2"}, {"x": "2"}), (), ["x 1..2"]),  # a git axis, not a package
    (Facts(code="src:1", commit={"commit": "aaa"}), Facts(code="src:1", commit={"commit": "bbb"}), (), []),  # docs only: no move
    (Facts(code="src:1", commit={"commit": "aaa"}), Facts(code="src:2", commit={"commit": "bbb"}), (), ["your code aaa..bbb"]),
    (Facts(files={"t.py": "1"}, code="src:1"), Facts(files={"t.py": "2"}, code="src:1"), ("t.py",), ["t.py changed"]),  # outside git
    (Facts(machine={"driver": "570"}), Facts(machine={"driver": "580"}), (), ["driver 570 → 580"]),
]


@pytest.mark.parametrize(("before", "after", "files", "described"), MOVES)
def test_moves(before: Facts, after: Facts, files: tuple[str, ...], described: list[str]) -> None:
    assert [m.describe() for m in moves(before, after, files)] == described


LOOKS = [
    # (sides, repeats, look): why
    (Sides({"t": "pass"}, {"t": "E"}), [{"t": "E"}] * 2, Look.AFTER),
    (Sides({"t": "pass"}, {"t": "E"}), [{"t": "pass"}] * 2, Look.BEFORE),
    (Sides({"t": "pass"}, {"t": "E"}), [{"t": "E"}, {"t": "pass"}], Look.FLAKY),  # the repeats disagree
    (Sides({"t": "pass"}, {"t": "E"}), [{"t": "F"}], Look.OTHER),  # another failure: neither side
    (Sides({"t": "pass", "u": "pass"}, {"t": "E", "u": "E"}), [{"t": "E", "u": "pass"}], Look.AFTER),  # any test broken
    (Sides({"t": "E"}, {"t": "pass"}, regression=False), [{"t": "pass"}], Look.AFTER),  # a fix: passing is after
    (Sides({"t": "E", "u": "E"}, {"t": "pass", "u": "pass"}, regression=False), [{"t": "pass", "u": "E"}], Look.BEFORE),
    (Sides({"t": "pass"}, {"t": "E"}), [], Look.UNBUILT),
]


@pytest.mark.parametrize(("sides", "repeats", "look"), LOOKS)
def test_look(sides: Sides, repeats: list[dict[str, str]], look: Look) -> None:
    assert sides.look(repeats) == look


@pytest.mark.parametrize("text", ["0", "abc", "5h", "-3"])
def test_a_budget_that_is_no_number_of_probes_or_minutes_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="give a number of probes"):
        parse_budget(text)


def test_a_file_that_stopped_collecting_is_probed_against_the_night_its_tests_ran() -> None:
    from harness.analysis.changes import Change
    from harness.workflows.explain import Target, _sides

    error = Change("regressed", "m", "c", "t.py", "t.py", "", "fail", "ImportError: x", "r1", "r2", ("t.py::a",))
    sides = _sides(Target("regressed", "ImportError: x", "r1", "r2", ("c",), (error,), ()))
    assert (sides.before, sides.after) == ({"t.py": "pass"}, {"t.py": "ImportError: x"})  # the file collected the night before
    assert sides.look([{"t.py": "pass"}]) == Look.BEFORE and sides.look([{"t.py": "ImportError: x"}]) == Look.AFTER
