"""The closed set of outcome statuses and the record one scenario run in one cell produces."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """What happened to one scenario in one cell.

    The split mirrors nox: "could not build the environment" (unresolvable, install_failed)
    stays apart from "the check failed" (fail) and "it blew up" (error, crash, oom, timeout).
    """

    PASS = "pass"
    FAIL = "fail"  # the scenario's own check failed (parity, wrong device)
    ERROR = "error"  # an uncaught exception
    CRASH = "crash"  # killed by a signal, or exited non-zero without a traceback
    TIMEOUT = "timeout"
    OOM = "oom"
    UNRESOLVABLE = "unresolvable"  # the pins do not resolve: the resolver's words are kept
    INSTALL_FAILED = "install_failed"
    NOT_APPLICABLE = "not_applicable"

    @property
    def is_failure(self) -> bool:
        return self in FAILURES

    @property
    def is_env_problem(self) -> bool:
        return self in (Status.UNRESOLVABLE, Status.INSTALL_FAILED)


FAILURES = frozenset({Status.FAIL, Status.ERROR, Status.CRASH, Status.TIMEOUT, Status.OOM})


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

    def serialize(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
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
