"""Outcome statuses: the closed set, which of them count as evidence, and one word for repeats. Pure.

>>> fold({"pass": 2, "error": 1})
'error 1/3 mixed'
>>> "error" in FAILURES, is_evidence("inconclusive")
(True, False)
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class Status(enum.StrEnum):
    """What happened to one scenario in one cell.

    The split mirrors nox: "could not build the environment" (unresolvable, install_failed)
    stays apart from "the check failed" (fail) and "it blew up" (error, crash, oom, timeout).
    `inconclusive` is a scenario that ran but never reached the state it checks (no layer was
    offloaded, the offset was never on meta): neither a pass nor a failure.
    """

    PASS = "pass"
    FAIL = "fail"  # the scenario's own check failed (parity, wrong device)
    ERROR = "error"  # an uncaught exception
    CRASH = "crash"  # killed by a signal, or exited non-zero without a traceback
    TIMEOUT = "timeout"
    OOM = "oom"
    INCONCLUSIVE = "inconclusive"  # ran, but did not reach the state it checks
    UNRESOLVABLE = "unresolvable"  # the pins do not resolve: the resolver's words are kept
    INSTALL_FAILED = "install_failed"
    NOT_APPLICABLE = "not_applicable"
    XFAIL = "xfail"  # a test marked expected to fail, failing: not a regression
    XPASS = "xpass"  # a test marked expected to fail, passing (not strict): not a regression either

    @property
    def is_failure(self) -> bool:
        return self in FAILURES

    @property
    def is_env_problem(self) -> bool:
        return self in ENV_PROBLEMS


#: Not an outcome: the mark a results file's history keeps where a test left a suite's current
#: state because a newer sweep of its cell did not collect it (`storage.collections`). Such a row
#: is never current, and no answer reads it as a status; its `exception_type` says why:
#: `removed`, `not_run` (its file failed to collect: the row carries that failure's signature) or
#: `collected` (a file's collection error, or an env's failure, that the newer run no longer met).
NOT_COLLECTED = "not_collected"
#: A failure of the code path under test. Members compare equal to their text ("error").
FAILURES = frozenset({Status.FAIL, Status.ERROR, Status.CRASH, Status.TIMEOUT, Status.OOM})
#: The environment could not be built: nothing was run.
ENV_PROBLEMS = frozenset({Status.UNRESOLVABLE, Status.INSTALL_FAILED})
#: Says nothing either way about the code path: never a pass, never a failure, in attribution,
#: pins, bisection and reports.
NO_EVIDENCE = frozenset({Status.INCONCLUSIVE, Status.NOT_APPLICABLE, Status.XFAIL, Status.XPASS, *ENV_PROBLEMS})
#: Worst first: the word for a mixture of repeats names the worst status in it.
SEVERITY: tuple[Status, ...] = (
    Status.CRASH,
    Status.OOM,
    Status.ERROR,
    Status.FAIL,
    Status.TIMEOUT,
    Status.INCONCLUSIVE,
    Status.INSTALL_FAILED,
    Status.UNRESOLVABLE,
    Status.NOT_APPLICABLE,
    Status.XFAIL,
    Status.XPASS,
    Status.PASS,
)


def is_failure(status: str) -> bool:
    return status in FAILURES


def is_evidence(status: str) -> bool:
    """A pass or a failure: an outcome that says something about the code path."""
    return status == Status.PASS or status in FAILURES


def fold(counts: Mapping[str, int]) -> str:
    """One word for the repeats (over runs) of a scenario in a cell: the summary's and the dashboard's.

    Not-applicable outcomes beside applicable ones (a GPU scenario on a CPU run and on a GPU
    run) say nothing and are dropped. A mixture names its worst status and how often it
    happened; with passes among them it is `mixed`: flaky repeats, or runs that disagree.

    >>> fold({"pass": 3}), fold({"not_applicable": 1, "pass": 1}), fold({"error": 2, "fail": 1})
    ('pass', 'pass', 'error 2/3')
    """
    present = {str(s): n for s, n in counts.items() if n}
    if len(present) > 1:
        present.pop(Status.NOT_APPLICABLE, None)
    if not present:
        return ""
    if len(present) == 1:
        return next(iter(present))
    total = sum(present.values())
    worst = next((s for s in SEVERITY if s in present), sorted(present)[0])
    word = f"{worst} {present[worst]}/{total}"
    return f"{word} mixed" if Status.PASS in present else word


def fold_statuses(statuses: Iterable[str]) -> str:
    return fold(Counter(str(s) for s in statuses))


def status_of(word: str) -> str:
    """The colour key of a folded word: its status, or `mixed`."""
    return "mixed" if word.endswith("mixed") else word.partition(" ")[0]


def across_runs(
    rows: Iterable[Mapping[str, Any]], failed: Callable[[Mapping[str, Any]], bool], marked: bool = False
) -> tuple[int, int] | None:
    """(runs in which it failed, runs) for a failure flaky across runs rather than within one: each run's
    repeats agree with each other and the runs disagree. `marked`: the results file's history saw it flip
    with nothing changed (`queries.mark_flaky`), where the run that showed the other side is no longer
    current: it counts as one more run. None where the repeats of one run disagree (flaky within a run),
    or nothing flips. A row that is neither a pass nor `failed` (another failure, not applicable) is no
    evidence either way.

    >>> failed = lambda r: r["status"] == "error"
    >>> across_runs([{"run_id": "a", "status": "error"}, {"run_id": "b", "status": "pass"}], failed)
    (1, 2)
    >>> [across_runs([{"run_id": "a", "status": s}], failed, marked=True) for s in ("pass", "error")]
    [(1, 2), (1, 2)]
    >>> across_runs([{"run_id": "a", "status": "error"}, {"run_id": "a", "status": "pass"}, {"run_id": "b", "status": "pass"}], failed)
    """
    seen: dict[str, set[bool]] = defaultdict(set)
    for row in rows:
        if row["status"] == Status.PASS or failed(row):
            seen[str(row.get("run_id") or "")].add(failed(row))
    if not seen or any(len(sides) > 1 for sides in seen.values()):
        return None
    failing, runs = sum(True in sides for sides in seen.values()), len(seen)
    if 0 < failing < runs:
        return failing, runs
    if marked:  # every current run agrees; the one before them, now in the history, showed the other side
        return (failing if failing else 1), runs + 1
    return None
