"""The pure bisection, driven by scripted verdicts (as mozregression's tests do)."""

from __future__ import annotations

import math

import pytest

from harness.analysis.bisect import BisectError, Probe, Verdict, bisect, repeat_verdict

G, B, S = Verdict.GOOD, Verdict.BAD, Verdict.SKIP


def scripted(verdicts: dict[int, Verdict | Exception], default_bad_from: int) -> tuple[list[int], object]:
    asked: list[int] = []

    def probe(c: int) -> Verdict:
        asked.append(c)
        v = verdicts.get(c)
        if isinstance(v, Exception):
            raise v
        if v is not None:
            return v
        return B if c >= default_bad_from else G

    return asked, probe


#: (n candidates, first bad index, scripted overrides, expected (last_good, first_bad), expected undecided)
CASES = [
    (10, 6, {}, (5, 6), []),
    (2, 1, {}, (0, 1), []),  # adjacent ends: nothing to probe between them
    (100, 1, {}, (0, 1), []),  # the change is right after the good end
    (100, 99, {}, (98, 99), []),  # ...or right at the bad end
    (10, 6, {5: S}, (4, 6), [5]),  # a skip next to the change leaves a range
    (10, 6, {5: S, 6: S}, (4, 7), [5, 6]),  # two skips: the change is in 5, 6 or 7
    (10, 6, {2: S}, (5, 6), []),  # a skip far from the change costs nothing in precision
    (10, 6, {5: RuntimeError("env build blew up")}, (4, 6), [5]),  # an exception is a skip, not a crash
]


@pytest.mark.parametrize(("n", "first_bad", "overrides", "expected", "undecided"), CASES)
def test_bisect_finds_the_change(n: int, first_bad: int, overrides: dict, expected: tuple[int, int], undecided: list[int]) -> None:
    asked, probe = scripted(overrides, first_bad)
    result = bisect(list(range(n)), probe)  # type: ignore[arg-type]
    assert (result.last_good, result.first_bad) == expected
    assert result.undecided == undecided
    assert result.exact == (not undecided)
    assert len(set(asked)) == len(asked)  # no candidate is probed twice


@pytest.mark.parametrize("n", [3, 10, 54, 200, 1000])
def test_probes_grow_with_log2_of_the_candidates(n: int) -> None:
    asked, probe = scripted({}, n // 3 or 1)
    bisect(list(range(n)), probe)  # type: ignore[arg-type]
    # two ends verified, then at most ceil(log2(n)) probes inside
    assert len(asked) <= 2 + math.ceil(math.log2(n))


def test_the_ends_are_verified() -> None:
    _, probe = scripted({0: B}, 5)
    with pytest.raises(BisectError, match="good end 0 is bad"):
        bisect(list(range(10)), probe)  # type: ignore[arg-type]
    _, probe = scripted({9: G}, 5)
    with pytest.raises(BisectError, match="bad end 9 is good"):
        bisect(list(range(10)), probe)  # type: ignore[arg-type]
    _, probe = scripted({0: S}, 5)
    with pytest.raises(BisectError, match="good end 0 is skip"):
        bisect(list(range(10)), probe)  # type: ignore[arg-type]


def test_without_verification_the_ends_are_trusted() -> None:
    asked, probe = scripted({}, 6)
    result = bisect(list(range(10)), probe, verify_ends=False)  # type: ignore[arg-type]
    assert result.first_bad == 6 and 0 not in asked and 9 not in asked


def test_handler_sees_every_probe_in_order_and_the_search_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[tuple[int, str, int]] = []

    class Handler:
        def probed(self, probe: Probe[int], remaining: int) -> None:
            seen.append((probe.candidate, probe.verdict.value, remaining))

    _, probe = scripted({5: RuntimeError("boom")}, 6)
    result = bisect(list(range(10)), probe, handler=Handler())  # type: ignore[arg-type]
    assert [s[0] for s in seen] == [p.candidate for p in result.probes]
    assert seen[:2] == [(0, "good", 10), (9, "bad", 10)]
    assert any(p.detail == "RuntimeError: boom" for p in result.probes)
    assert capsys.readouterr().out == ""


def test_too_few_candidates() -> None:
    with pytest.raises(BisectError):
        bisect([1], lambda c: G)


#: (statuses of N repeats, allowed failures, verdict)
REPEATS = [
    (["pass", "pass", "pass"], 0, G),
    (["pass", "fail", "pass"], 0, B),  # strict: one failure in three makes it bad
    (["pass", "fail", "pass"], 1, G),  # tolerant: at most one failure
    (["error", "crash", "timeout"], 1, B),
    (["pass", "not_applicable"], 0, S),  # cannot judge a cell where the scenario does not apply
    (["unresolvable"], 0, S),
    (["install_failed"], 0, S),
    ([], 0, S),
]


@pytest.mark.parametrize(("statuses", "allowed", "verdict"), REPEATS)
def test_repeat_policy(statuses: list[str], allowed: int, verdict: Verdict) -> None:
    assert repeat_verdict(statuses, allowed) == verdict
