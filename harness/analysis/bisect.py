"""Bisection over an ordered list of candidates. Pure: the probe and the progress handler are
given, so the search never builds, runs or prints anything itself (mozregression's seams).

The list runs from the known-good end to the known-bad end; the answer is the first bad
candidate and the last good one before it. A candidate that cannot be judged (it does not
resolve, does not install, the scenario does not apply) is a skip: it leaves the range, and if
it sat between the answer's two ends the answer is a range, said so.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from harness.analysis.status import NO_EVIDENCE, Status

T = TypeVar("T")


class Verdict(str, enum.Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class BisectError(ValueError):
    """The ends are not what the user said (the good end fails, the bad end passes)."""


class Inconclusive(Exception):
    """Raised by a probe when the search must not go on (its repeats disagreed: a flaky probe,
    or its budget is spent): it ends the search, never judged a skip."""


@dataclass(frozen=True)
class Probe(Generic[T]):
    candidate: T
    verdict: Verdict
    detail: str = ""


class Handler(Protocol[T]):
    def probed(self, probe: Probe[T], remaining: int) -> None: ...


@dataclass
class BisectResult(Generic[T]):
    last_good: T
    first_bad: T
    probes: list[Probe[T]] = field(default_factory=list)
    #: skipped candidates between last_good and first_bad: the change is in one of them or first_bad
    undecided: list[T] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.undecided


def _judge(probe: Callable[[T], Verdict], candidate: T) -> Probe[T]:
    try:
        return Probe(candidate, probe(candidate))
    except Inconclusive:
        raise
    except Exception as exc:
        return Probe(candidate, Verdict.SKIP, f"{type(exc).__name__}: {exc}")


def bisect(
    candidates: Sequence[T],
    probe: Callable[[T], Verdict],
    *,
    verify_ends: bool = True,
    handler: Handler[T] | None = None,
) -> BisectResult[T]:
    """Find where `candidates` (good end first) turn bad, in about log2(n) probes.

    >>> bisect(list(range(10)), lambda c: Verdict.BAD if c >= 6 else Verdict.GOOD).first_bad
    6
    """
    if len(candidates) < 2:
        raise BisectError(f"need at least two candidates to bisect, got {len(candidates)}")
    probes: list[Probe[T]] = []

    def run(candidate: T, remaining: int) -> Verdict:
        result = _judge(probe, candidate)
        probes.append(result)
        if handler is not None:
            handler.probed(result, remaining)
        return result.verdict

    if verify_ends:
        if (v := run(candidates[0], len(candidates))) != Verdict.GOOD:
            raise BisectError(f"the good end {candidates[0]!r} is {v.value}, not good; pick another --good")
        if (v := run(candidates[-1], len(candidates))) != Verdict.BAD:
            raise BisectError(f"the bad end {candidates[-1]!r} is {v.value}, not bad; pick another --bad")
    window = list(range(len(candidates)))  # indexes still in play; window[0] good, window[-1] bad
    skipped: set[int] = set()
    while len(window) > 2:
        mid = len(window) // 2
        verdict = run(candidates[window[mid]], len(window) - 2)
        if verdict == Verdict.GOOD:
            window = window[mid:]
        elif verdict == Verdict.BAD:
            window = window[: mid + 1]
        else:
            skipped.add(window[mid])
            del window[mid]
    good, bad = window[0], window[-1]
    undecided = [candidates[i] for i in range(good + 1, bad) if i in skipped]
    return BisectResult(candidates[good], candidates[bad], probes, undecided)


def repeat_verdict(statuses: Sequence[str], allowed_failures: int = 0) -> Verdict:
    """The policy for flaky scenarios: good only if at most `allowed_failures` of N runs fail.

    Statuses that say nothing about the scenario (it does not apply, it did not reach its setup,
    the env cannot be built) make the candidate a skip.
    """
    if not statuses or any(s in NO_EVIDENCE for s in statuses):
        return Verdict.SKIP
    failures = sum(s != Status.PASS for s in statuses)
    return Verdict.GOOD if failures <= allowed_failures else Verdict.BAD


def stored_result(candidates: Sequence[T], verdicts: Sequence[Verdict]) -> tuple[BisectResult[T], bool] | None:
    """What probes judged already answer (a bisection's stored outcomes, read back): `candidates`
    oldest first, each with its verdict (`repeat_verdict` of its statuses). Returns the search's
    result over them from the good end and whether that end is the newer one (a fix), or None
    while fewer than two are judged or the oldest and newest judged ones agree. A skipped
    candidate between the answer's ends leaves it a range (`undecided`), as in the search.

    >>> result, fix = stored_result(["1.13.0", "1.13.1", "1.14.0"], [Verdict.BAD, Verdict.SKIP, Verdict.GOOD])
    >>> result.last_good, result.first_bad, result.undecided, fix
    ('1.14.0', '1.13.0', ['1.13.1'], True)
    """
    judged = [i for i, verdict in enumerate(verdicts) if verdict != Verdict.SKIP]
    if len(judged) < 2 or verdicts[judged[0]] == verdicts[judged[-1]]:
        return None
    fix = verdicts[judged[0]] == Verdict.BAD
    span = list(range(judged[0], judged[-1] + 1))
    found = bisect(span[::-1] if fix else span, verdicts.__getitem__, verify_ends=False)
    result = BisectResult(
        candidates[found.last_good],
        candidates[found.first_bad],
        [Probe(candidates[p.candidate], p.verdict, p.detail) for p in found.probes],
        [candidates[i] for i in found.undecided],
    )
    return result, fix
