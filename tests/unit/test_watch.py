"""The watch's decisions (`harness.analysis.watch`), as tables: the known-good set, what is new, which
cells to build, and what their outcomes say (regression, known, no evidence, fixed) with the exit status.

The same over real releases, through the CLI: tests/integration/test_watch_cli.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from harness.analysis import watch
from harness.analysis.attribution import Transition
from harness.analysis.watch import GuardedSet, Target, WatchReport, known_good, new_releases, newest_held, plan_targets, verdict

CPU = "cpu · linux-x86_64 · Python 3.11"
SIG = "InvalidVersion: Invalid version: '<version>' @ packaging/version.py:__init__"


def row(
    versions: Mapping[str, str],
    scenario: str,
    status: str = "pass",
    signature: str = "",
    run: str = "r-1",
    repeat: int = 0,
    installed: Mapping[str, str] | None = None,
    message: str = "",
    gpu: str = "cpu",
) -> dict[str, Any]:
    cell = "-".join(f"{a}{v}" for a, v in versions.items())
    return {
        "run_id": run,
        "cell_id": cell,
        "scenario": scenario,
        "repeat": repeat,
        "status": status,
        "signature": signature,
        "message": message,
        "versions": dict(versions),
        "installed": dict(installed or versions),
        "gpu": gpu,
        "platform": "linux-x86_64",
        "python": "3.11",
        "started_at": f"2026-11-2{repeat} 04:00:00",
    }


def cell(versions: Mapping[str, str], run: str = "r-1", **statuses: str) -> list[dict[str, Any]]:
    """Rows of one cell: scenario=status, or scenario="error:SIGNATURE"."""
    out = []
    for scenario, word in statuses.items():
        status, _, signature = word.partition(":")
        out.append(row(versions, scenario, status, signature, run))
    return out


OLD = {"packaging": "21.3", "six": "1.16.0"}
NEW = {"packaging": "23.0", "six": "1.16.0"}

# -- the known-good set ------------------------------------------------------------------------------
#: (rows, expected known-good versions or None, guarded, dropped)
KNOWN_GOOD = [
    pytest.param(cell(OLD, a="pass", b="pass"), OLD, ("a", "b"), (), id="one-cell"),
    # the newer cell fails `b`: the older one, where both pass, is the known-good set
    pytest.param(cell(OLD, a="pass", b="pass") + cell(NEW, a="pass", b=f"error:{SIG}"), OLD, ("a", "b"), (), id="newest-that-passes"),
    # inconclusive is never a pass: the newer cell does not qualify
    pytest.param(cell(OLD, a="pass") + cell(NEW, a="inconclusive"), OLD, ("a",), (), id="inconclusive-is-no-pass"),
    # one failing repeat of two (flaky) disqualifies the newer cell
    pytest.param(
        [*cell(OLD, a="pass"), row(NEW, "a", "pass"), row(NEW, "a", "error", SIG, repeat=1)], OLD, ("a",), (), id="flaky-is-no-pass"
    ),
    # `b` passes only where `a` fails: no cell passes both; the scenario keeping more cells out is dropped
    pytest.param(
        cell(OLD, a="pass", b=f"error:{SIG}")
        + cell(NEW, a="pass", b=f"error:{SIG}")
        + cell({"packaging": "22.0", "six": "1.16.0"}, a="fail", b="pass"),
        NEW,
        ("a",),
        ("b",),
        id="dropped",
    ),
    # nothing passes anywhere: there is no known-good set to watch from
    pytest.param(cell(OLD, a=f"error:{SIG}"), None, (), (), id="nothing-passes"),
]


@pytest.mark.parametrize(("rows", "versions", "guarded", "dropped"), KNOWN_GOOD)
def test_known_good(
    rows: list[dict[str, Any]], versions: dict[str, str] | None, guarded: tuple[str, ...], dropped: tuple[str, ...]
) -> None:
    found = known_good(rows)
    if versions is None:
        assert found is None
        return
    assert found is not None
    assert dict(found.versions) == versions
    assert (found.guarded, found.dropped) == (guarded, dropped)
    assert dict(found.requested) == versions


def test_known_good_records_what_failed_there() -> None:
    found = known_good(cell(OLD, a="pass", b=f"error:{SIG}"))
    assert found is not None and found.failing() == ["b"] and dict(found.signatures) == {"b": SIG}


# -- what is new ----------------------------------------------------------------------------------------
def _good(rows: list[dict[str, Any]]) -> GuardedSet:
    found = known_good(rows)
    assert found is not None
    return found


#: (rows, axes, expected held)
HELD = [
    pytest.param(cell(OLD, a="pass"), ["packaging", "six"], {"packaging": "21.3", "six": "1.16.0"}, id="plain"),
    # the watch's own failing cell does not count: the release it tested stays new (a rerun says the same)
    pytest.param(
        cell(OLD, a="pass") + cell(NEW, "watch-1", a=f"error:{SIG}"), ["packaging"], {"packaging": "21.3"}, id="watch-cell-left-out"
    ),
    # a watched release that passed is the known-good set: it is held
    pytest.param(cell(OLD, a="pass") + cell(NEW, "watch-1", a="pass"), ["packaging"], {"packaging": "23.0"}, id="accepted"),
    # the user's own sweep holds a newer release that fails: held all the same (a known failure, not new)
    pytest.param(cell(OLD, a="pass") + cell(NEW, a=f"error:{SIG}"), ["packaging"], {"packaging": "23.0"}, id="own-sweep-newer"),
    # a local build (2.13.0+cpu) is held as its public release
    pytest.param([row({"torch": "2.13.0"}, "a", installed={"torch": "2.13.0+cpu"})], ["torch"], {"torch": "2.13.0"}, id="local-version"),
    # only the watched axes
    pytest.param(cell(OLD, a="pass"), ["six"], {"six": "1.16.0"}, id="axes-filter"),
]


@pytest.mark.parametrize(("rows", "axes", "held"), HELD)
def test_newest_held(rows: list[dict[str, Any]], axes: list[str], held: dict[str, str]) -> None:
    assert newest_held(rows, axes, known_good(rows)) == held


#: (held, listed, expected new)
NEW_RELEASES = [
    pytest.param({"packaging": "21.3"}, {"packaging": ["20.9", "21.3"]}, {}, id="nothing-newer"),
    # unsorted input, oldest first out; 1.10 after 1.9 (never compared as text)
    pytest.param({"six": "1.9.0"}, {"six": ["1.10.0", "1.9.1", "1.8.0"]}, {"six": ["1.9.1", "1.10.0"]}, id="version-order"),
    # a backport on an older line released later is not newer
    pytest.param({"packaging": "22.0"}, {"packaging": ["21.3.1", "23.0"]}, {"packaging": ["23.0"]}, id="backport-not-newer"),
    # an axis the index could not list gives nothing (the driver refuses that case before)
    pytest.param({"packaging": "21.3"}, {}, {}, id="unlisted"),
]


@pytest.mark.parametrize(("held", "listed", "expected"), NEW_RELEASES)
def test_new_releases(held: dict[str, str], listed: dict[str, list[str]], expected: dict[str, list[str]]) -> None:
    assert new_releases(held, listed) == expected


def test_one_target_per_axis_moves_only_that_axis() -> None:
    good = _good(cell({"torch": "2.13.0", "transformers": "5.6.2", "peft": "0.19.1"}, a="pass"))
    targets = plan_targets(good, {"peft": ["0.20.0"], "transformers": ["5.7.0", "5.8.0"]})
    assert [(t.axis, t.release, t.new) for t in targets] == [("transformers", "5.8.0", ("5.7.0", "5.8.0")), ("peft", "0.20.0", ("0.20.0",))]
    assert dict(targets[0].requested) == {"torch": "2.13.0", "transformers": "5.8.0", "peft": "0.19.1"}
    assert targets[0].held == (("torch", "2.13.0"), ("peft", "0.19.1"))  # reading order, the moved axis left out
    assert dict(targets[1].requested)["transformers"] == "5.6.2"


# -- the verdict ------------------------------------------------------------------------------------------
EXACT = Transition("b", SIG, "packaging", "introduced", "21.3", "22.0", (("six", "1.16.0"),), CPU, before_cell="x", after_cell="y")
RANGE = Transition(
    "b", SIG, "packaging", "introduced", "21.3", "23.0", (("six", "1.16.0"),), CPU, not_built=("22.0",), before_cell="x", after_cell="y"
)
OTHER_LINE = Transition("b", SIG, "packaging", "introduced", "21.3", "22.0", (("six", "1.17.0"),), CPU)
GOOD_ROWS = cell(OLD, a="pass", b="pass", c=f"fail:{SIG}")

#: (target cell rows (run watch-1), other rows, transitions, expected (kind, scenario, status, answer) findings, expected fixed, exit)
VERDICTS = [
    pytest.param(cell(NEW, "watch-1", a="pass", b="pass", c="fail:x"), [], [], [], (), 0, id="passes"),
    pytest.param(
        cell(NEW, "watch-1", a="pass", b=f"error:{SIG}"),
        [],
        [EXACT],
        [("regression", "b", "error", "introduced in packaging 22.0 (after 21.3)")],
        (),
        1,
        id="regression-exact",
    ),
    # refinement off or limited: the answer says what was not built
    pytest.param(
        cell(NEW, "watch-1", a="pass", b=f"error:{SIG}"),
        [],
        [RANGE],
        [("regression", "b", "error", "introduced between packaging 21.3 (passes) and 23.0 (fails); not built: 22.0")],
        (),
        1,
        id="regression-range",
    ),
    # an answer on another line (six 1.17.0) is not this line's: the plain fact instead
    pytest.param(
        cell(NEW, "watch-1", a="pass", b=f"error:{SIG}"),
        [],
        [OTHER_LINE],
        [("regression", "b", "error", "fails with packaging 23.0")],
        (),
        1,
        id="regression-no-answer-on-this-line",
    ),
    # one repeat of two fails: still a regression, and the word says how often
    pytest.param(
        [row(NEW, "a", run="watch-1"), row(NEW, "b", run="watch-1"), row(NEW, "b", "error", SIG, "watch-1", repeat=1)],
        [],
        [EXACT],
        [("regression", "b", "error 1/2 mixed", "introduced in packaging 22.0 (after 21.3)")],
        (),
        1,
        id="flaky-regression",
    ),
    # inconclusive and an env that would not build say nothing: never a pass, never a regression
    pytest.param(
        [*cell(NEW, "watch-1", a="inconclusive"), row(NEW, "b", "unresolvable", run="watch-1", message="no solution\nfor six")],
        [],
        [],
        [("no_evidence", "a", "inconclusive", ""), ("no_evidence", "b", "unresolvable", "")],
        (),
        0,
        id="no-evidence",
    ),
    # the user's own sweep already failed this way with packaging 22.0: known, not new
    pytest.param(
        cell(NEW, "watch-1", a="pass", b=f"error:{SIG}"),
        cell({"packaging": "22.0", "six": "1.16.0"}, b=f"error:{SIG}"),
        [EXACT],
        [("known", "b", "error", "introduced in packaging 22.0 (after 21.3)")],
        (),
        0,
        id="known",
    ),
    # the known-good set's failing `c` passes with the new release
    pytest.param(cell(NEW, "watch-1", a="pass", b="pass", c="pass"), [], [], [], ("c",), 0, id="fixed"),
    # nothing stored for the target yet (a dry run)
    pytest.param([], [], [], [("not_run", "a", "", ""), ("not_run", "b", "", "")], (), 0, id="not-run"),
]


@pytest.mark.parametrize(("target_rows", "others", "transitions", "findings", "fixed", "exit_status"), VERDICTS)
def test_verdict(
    target_rows: list[dict[str, Any]],
    others: list[dict[str, Any]],
    transitions: list[Transition],
    findings: list[tuple[str, str, str, str]],
    fixed: tuple[str, ...],
    exit_status: int,
) -> None:
    everything = GOOD_ROWS + others + target_rows
    good = _good(GOOD_ROWS + others)
    assert good.guarded == ("a", "b")
    [target] = plan_targets(good, {"packaging": ["22.0", "23.0"]})
    [result] = verdict(good, [target], everything, [r for r in everything if r["run_id"] == "watch-1"], transitions, CPU)
    assert [(f.kind, f.scenario, f.status, f.answer) for f in result.findings] == findings
    assert result.fixed == fixed
    report = WatchReport("r.duckdb", CPU, "2023-01-10", good, (("packaging", "21.3"),), (("packaging", ("22.0", "23.0")),), (result,))
    assert report.exit_status == exit_status
    if exit_status:
        [regression] = report.regressions
        assert regression.signature == SIG and regression.cell_id == "packaging23.0-six1.16.0"


def test_a_regression_names_the_release_and_the_one_before_it() -> None:
    good = _good(GOOD_ROWS)
    [target] = plan_targets(good, {"packaging": ["22.0", "23.0"]})
    rows = GOOD_ROWS + cell(NEW, "watch-1", a="pass", b=f"error:{SIG}")
    [result] = verdict(good, [target], rows, [r for r in rows if r["run_id"] == "watch-1"], [EXACT], CPU)
    [finding] = result.regressions
    assert (finding.release, finding.before, finding.exact, finding.tested) == ("22.0", "21.3", True, "23.0")
    assert finding.conditions == f"with six 1.16.0 on {CPU}"
    report = WatchReport("r.duckdb", CPU, "2023-01-10", good, (("packaging", "21.3"),), (("packaging", ("22.0", "23.0")),), (result,))
    assert report.headline() == "1 regression(s): b with packaging 22.0"
    text = "\n".join(report.text())
    assert f"REGRESSION b: {SIG} — introduced in packaging 22.0 (after 21.3) with six 1.16.0 on {CPU}" in text
    assert text.splitlines()[-1] == "exit 1: 1 regression(s): b with packaging 22.0"
    markdown = report.markdown()
    assert markdown.startswith("## ❌ harness watch: 1 regression(s)")
    assert f"| `b` | `{SIG}` | packaging **22.0** | 21.3 | six 1.16.0 on {CPU} | error |" in markdown
    data = json.loads(report.json())
    assert data["exit_status"] == 1
    assert data["regressions"][0] | {"release": "22.0", "before": "21.3", "exact": True} == data["regressions"][0]
    assert data["new"] == {"packaging": ["22.0", "23.0"]} and data["known_good"]["guarded"] == ["a", "b"]


def test_nothing_new_is_exit_0_and_says_so() -> None:
    good = _good(GOOD_ROWS)
    report = WatchReport("r.duckdb", CPU, "", good, (("packaging", "21.3"),), ())
    assert report.exit_status == watch.EXIT_NOTHING_BROKE
    assert report.headline() == "nothing new: no release newer than the results file holds"
    assert "| packaging | 21.3 | none | — | — |" in report.markdown()
    assert "releases as of now" in report.text()[0]


def test_a_passing_release_is_the_new_known_good_set() -> None:
    good = _good(GOOD_ROWS)
    [target] = plan_targets(good, {"packaging": ["23.0"]})
    rows = GOOD_ROWS + cell(NEW, "watch-1", a="pass", b="pass")
    [result] = verdict(good, [target], rows, rows[-2:], [], CPU)
    report = WatchReport("r.duckdb", CPU, "", good, (("packaging", "21.3"),), (("packaging", ("23.0",)),), (result,))
    assert report.headline() == "no regression; new known-good: packaging 23.0"
    # and tomorrow it is held, so nothing is new
    assert newest_held(rows, ["packaging"], known_good(rows)) == {"packaging": "23.0"}


def test_machines_are_never_mixed() -> None:
    rows = [*cell(OLD, a="pass"), row(NEW, "a", gpu="NVIDIA H200")]
    assert watch.on_machine(rows, CPU) == rows[:1]


def test_target_describes_the_releases_it_stands_for() -> None:
    target = Target("packaging", "23.0", ("22.0", "23.0"), (), ())
    assert target.describe() == "packaging 23.0 (new: 22.0, 23.0)"
