"""analysis/refine.py: which cells to build so that ranges become exact, driven against a simulated world.

The world says, for each line and release, whether a scenario fails; the loop is the driver's:
attribute the rows, ask for the next probes, "build" them (add their rows), until none is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.analysis.attribution import UNLISTED, Transition, attribute
from harness.analysis.refine import Line, next_probes, open_ranges, plan_round, probes_needed

CPU = {"platform": "linux-x86_64", "gpu": "cpu", "python": "3.11"}
MACHINE = "cpu · linux-x86_64 · Python 3.11"
SIG = "TypeError: x @ accelerate/utils/modeling.py:f"
OTHER = "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward"
RELEASES = [f"1.{m}.{p}" for m in range(10, 20) for p in range(3)]  # 1.10.0 … 1.19.2: 30 releases

#: world(scenario, held transformers, accelerate) -> the signature it fails with, or "" for a pass
World = Callable[[str, str, str], str]


def fixed_at(boundary: str, signature: str = SIG) -> World:
    """Fails before `boundary`, passes from it on, on every line."""
    return lambda scenario, tf, acc: signature if _v(acc) < _v(boundary) else ""


def _v(value: str) -> tuple[int, ...]:
    return tuple(int(p) for p in value.split("."))


def row(scenario: str, tf: str, acc: str, signature: str, machine: dict[str, str] = CPU) -> dict[str, Any]:
    return {
        "run_id": "r",
        "cell_id": f"tf{tf}-acc{acc}",
        "scenario": scenario,
        "repeat": 0,
        "status": "error" if signature else "pass",
        "signature": signature,
        "versions": {"torch": "2.13.0", "transformers": tf, "accelerate": acc},
        **machine,
    }


def refine(world: World, scenarios: list[str], lines: list[str], ends: tuple[str, str], share: str = "all") -> tuple[list[Any], int]:
    """Sweep both ends on every line, then refine until nothing is asked; (final transitions, probe cells built)."""
    rows = [row(s, tf, acc, world(s, tf, acc)) for s in scenarios for tf in lines for acc in ends]
    built = 0
    for _ in range(200):
        transitions = attribute(rows, known_versions={"accelerate": RELEASES}).transitions
        probes = next_probes(transitions, MACHINE, share)  # type: ignore[arg-type]
        if not probes:
            return list(transitions), built
        for probe in probes:
            tf = dict(probe.line.held)["transformers"]
            built += 1
            rows += [row(s, tf, probe.value, world(s, tf, probe.value)) for s in probe.scenarios]
    raise AssertionError("refinement did not end")


def test_a_range_becomes_exact_in_log2_probes() -> None:
    # 1.10.0 fails, 1.19.2 passes; 28 releases between were not built; the fix is 1.14.1
    transitions, built = refine(fixed_at("1.14.1"), ["load"], ["5.6.2"], ("1.10.0", "1.19.2"))
    (t,) = transitions
    assert t.exact and t.headline() == "fixed in accelerate 1.14.1 (after 1.14.0)"
    assert built <= probes_needed(28) == 5


@pytest.mark.parametrize("boundary", RELEASES[1:])
def test_every_boundary_is_found_exactly(boundary: str) -> None:
    transitions, built = refine(fixed_at(boundary), ["load"], ["5.6.2"], ("1.10.0", "1.19.2"))
    (t,) = transitions
    assert (t.before, t.after, t.exact) == (RELEASES[RELEASES.index(boundary) - 1], boundary, True)
    assert built <= 5


def test_two_failures_in_one_span_share_their_first_probe() -> None:
    def world(scenario: str, tf: str, acc: str) -> str:
        return fixed_at("1.12.0")(scenario, tf, acc) if scenario == "a" else fixed_at("1.17.1", OTHER)(scenario, tf, acc)

    transitions = attribute([row(s, "5.6.2", acc, world(s, "5.6.2", acc)) for s in "ab" for acc in ("1.10.0", "1.19.2")],
                            known_versions={"accelerate": RELEASES}).transitions  # fmt: skip
    (probe,) = next_probes(transitions, MACHINE)
    assert probe.scenarios == ("a", "b")  # one cell runs both
    final, built = refine(world, ["a", "b"], ["5.6.2"], ("1.10.0", "1.19.2"))
    assert sorted(t.headline() for t in final) == [
        "fixed in accelerate 1.12.0 (after 1.11.2)",
        "fixed in accelerate 1.17.1 (after 1.17.0)",
    ]
    assert built < 2 * probes_needed(28)  # less than two bisections


def test_lines_that_share_a_transition_share_its_boundary() -> None:
    lines = ["5.6.2", "5.8.0", "5.10.4", "5.23.0"]
    final, built = refine(fixed_at("1.14.1"), ["load"], lines, ("1.10.0", "1.19.2"))
    assert [t.headline() for t in final] == ["fixed in accelerate 1.14.1 (after 1.14.0)"] * 4
    # the leader bisects (at most 5), each other line builds the boundary and the release before it
    assert built <= 5 + 2 * 3


def test_a_line_where_the_failure_behaves_otherwise_is_bisected_on_its_own() -> None:
    def world(scenario: str, tf: str, acc: str) -> str:
        return fixed_at("1.17.0" if tf == "5.23.0" else "1.14.1")(scenario, tf, acc)

    final, _ = refine(world, ["load"], ["5.6.2", "5.23.0"], ("1.10.0", "1.19.2"))
    along = [t for t in final if t.axis == "accelerate"]  # (where the lines differ, transformers has its own answers)
    assert [(dict(t.held)["transformers"], t.after, t.exact) for t in along] == [("5.6.2", "1.14.1", True), ("5.23.0", "1.17.0", True)]


def test_share_first_refines_one_line_and_leaves_the_others_ranges() -> None:
    final, built = refine(fixed_at("1.14.1"), ["load"], ["5.6.2", "5.23.0"], ("1.10.0", "1.19.2"), share="first")
    assert [t.exact for t in final] == [True, False]
    assert "not built:" in final[1].headline() and built <= 5


def test_ranges_a_build_cannot_narrow_ask_for_nothing() -> None:
    held = (("torch", "2.13.0"),)
    only_inconclusive = Transition(
        "s", SIG, "accelerate", "fixed", "1.13.0", "1.15.0", held, MACHINE, inconclusive=("1.14.0 (not_applicable)",)
    )
    unlisted = Transition("s", SIG, "accelerate", "fixed", "1.13.0", "1.15.0", held, MACHINE, not_built=(UNLISTED,))
    git_end = Transition("s", SIG, "accelerate", "fixed", "1.13.0", "main@0123456789ab", held, MACHINE, not_built=("1.14.0",))
    other_machine = Transition(
        "s", SIG, "accelerate", "fixed", "1.13.0", "1.15.0", held, "NVIDIA H200 · linux-x86_64", not_built=("1.14.0",)
    )
    assert open_ranges([only_inconclusive, unlisted, git_end, other_machine], MACHINE) == []
    plan = plan_round([only_inconclusive, unlisted, git_end, other_machine], MACHINE)
    assert plan.probes == [] and plan.waiting == 0


def test_a_probe_names_its_line_and_why() -> None:
    t = Transition("s", SIG, "accelerate", "fixed", "1.13.0", "1.15.0", (("torch", "2.13.0"),), MACHINE, not_built=("1.14.0",),
                   before_cell="c1")  # fmt: skip
    (probe,) = next_probes([t], MACHINE)
    assert probe.line == Line(MACHINE, "accelerate", (("torch", "2.13.0"),))
    assert (probe.value, probe.base_cell, probe.why) == ("1.14.0", "c1", "middle of 1 not built")


@pytest.mark.parametrize(("k", "builds"), [(0, 0), (1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4), (28, 5)])
def test_probes_needed_is_ceil_log2_k_plus_1(k: int, builds: int) -> None:
    assert probes_needed(k) == builds
