"""The records a sweep stores: one outcome per scenario run, one cell record per environment.

The statuses themselves, and which of them count as evidence, live in `analysis.status`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.analysis.interpret import Interpretation, RawRun
from harness.analysis.redact import mask
from harness.analysis.signature import status_signature
from harness.analysis.status import ENV_PROBLEMS, FAILURES, NO_EVIDENCE, Status

__all__ = ["ENV_PROBLEMS", "FAILURES", "NO_EVIDENCE", "CellRecord", "Collection", "Outcome", "Status", "env_outcome", "scenario_outcome"]


@dataclass
class Outcome:
    """One scenario in one cell, one repeat. Serialisable; stored as one row."""

    run_id: str
    cell_id: str
    scenario: str
    repeat: int
    status: Status
    message: str = ""
    signature: str = ""
    signature_family: str = ""
    blamed_library: str = ""
    exception_type: str = ""
    traceback: str = ""
    output_tail: str = ""
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    #: A suite's test: its identity across the suite's releases where it is not the node id
    #: (`scenario`); "" otherwise (`running/incell/suite.py`, test_identity).
    test_id: str = ""

    def serialize(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        if not self.test_id:
            del data["test_id"]  # a scenario's, or a test whose identity is its node id: its records as before
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        values = dict(data)
        values["status"] = Status(values["status"])
        return cls(**values)


@dataclass
class CellRecord:
    run_id: str
    cell_id: str
    python: str
    versions: dict[str, str]
    requirements: list[str]
    freeze: dict[str, str]
    inherited: dict[str, str]
    git_commits: dict[str, str]
    env_status: str
    env_message: str
    env_seconds: float
    env_reused: bool
    cuda_runtime: str = ""  # torch.version.cuda in the cell ("" for a CPU build)
    python_version: str = ""  # the cell interpreter's own version (3.11.7): part of its machine class
    origin: str = "matrix"  # "matrix", or "refine" for a cell a refinement built to narrow a range


@dataclass
class Collection:
    """What one sweep of a suite collected in one cell: the suite's current state there.

    Every test of `tests` (identities, as outcomes key them) is in the run's selection, run here
    or by another shard of a cut cell; a file that failed to collect is in `tests` and `errors`
    (its node id -> its signature). A test that an earlier run of the cell ran, within a
    selection this one covers (`selection.covers`), and that is not here has left the current
    state (`storage.collections`)."""

    run_id: str
    cell_id: str
    selection: dict[str, Any]  # {"paths": [...], "k": "...", "m": "..."}: what the worker was given
    tests: list[str]
    errors: dict[str, str] = field(default_factory=dict)


# -- making outcomes -----------------------------------------------------------------------
def _now() -> str:
    return datetime.now(UTC).replace(tzinfo=None).isoformat()


def first_cause(message: str) -> str:
    """The resolver's first line of reasoning names the conflict; keep it as the signature detail."""
    for line in message.splitlines():
        line = line.strip()
        if line.startswith("cause:") or line.startswith("Because"):
            return line.removeprefix("cause:").strip()[:200]
    return message.strip().splitlines()[0][:200] if message.strip() else ""


def env_outcome(run_id: str, cell_id: str, scenario: str, repeat: int, status: str, message: str, secrets: Sequence[str]) -> Outcome:
    """A scenario that could not run because its cell's env did not build (unresolvable, install_failed)."""
    outcome = Outcome(run_id, cell_id, scenario, repeat, Status(status), started_at=_now())
    outcome.message = mask(message, list(secrets))
    sig = status_signature(status, first_cause(message))
    outcome.signature, outcome.signature_family = sig.text, sig.family
    return outcome


def not_applicable(run_id: str, cell_id: str, scenario: str, repeat: int, reason: str) -> Outcome:
    return Outcome(run_id, cell_id, scenario, repeat, Status.NOT_APPLICABLE, message=reason, started_at=_now())


def scenario_outcome(
    run_id: str, cell_id: str, scenario: str, repeat: int, meaning: Interpretation, raw: RawRun, secrets: Sequence[str], started: str = ""
) -> Outcome:
    """What one scenario process left behind, interpreted, with every secret masked."""
    hidden = list(secrets)
    outcome = Outcome(run_id, cell_id, scenario, repeat, meaning.status, started_at=started or _now())
    outcome.message = mask(meaning.message, hidden)[:2000]
    if meaning.signature:
        outcome.signature = mask(meaning.signature.text, hidden)
        outcome.signature_family = meaning.signature.family
        outcome.blamed_library = meaning.signature.library
    outcome.exception_type = meaning.exception_type
    outcome.traceback = mask(meaning.traceback, hidden)
    outcome.output_tail = mask(raw.output_tail, hidden)
    outcome.seconds = raw.seconds
    outcome.metrics = raw.metrics
    return outcome
