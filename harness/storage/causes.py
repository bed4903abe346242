"""Why each change happened: what `harness explain` found, kept beside the outcomes (table `causes`),
and what a results file recorded of the two runs around a change (`facts`): the answers read both,
and never probe.

A change is keyed by the run that first showed it, its cell, its kind (regressed, fixed) and its
signature (the failure now for a regression, then for a fix): `analysis.changes.Change` carries
all four.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness.analysis.explain import Explanation, Facts
from harness.analysis.rows import json_map
from harness.storage.resultsfile import SqlResultsFile

#: (after_run, cell_id, kind, signature)
Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class Found:
    """A stored cause: the verdict and its one line, and the whole explanation (`Explanation.to_dict`)."""

    verdict: str
    text: str
    explanation: Mapping[str, Any]
    probes: int
    seconds: float


def read(store: SqlResultsFile, runs: Iterable[str] = ()) -> dict[Key, Found]:
    """The stored causes (of changes first shown by `runs`; every one where none is named)."""
    if not store.has_table("causes"):
        return {}
    wanted = sorted(set(runs))
    where = f" WHERE after_run IN ({', '.join('?' for _ in wanted)})" if wanted else ""
    rows = store.fetch(f"SELECT * FROM causes{where}", wanted)
    return {
        (r["after_run"], r["cell_id"], r["kind"], r["signature"]): Found(
            str(r["verdict"] or ""), str(r["text"] or ""), json_map(r["explanation"]), int(r["probes"] or 0), float(r["seconds"] or 0.0)
        )
        for r in rows
    }


def row(key: Key, before_run: str, tests: Iterable[str], found: Explanation, seconds: float) -> list[Any]:
    """A `causes` row for `write`."""
    after_run, cell_id, kind, signature = key
    explanation = found.to_dict()
    stamp = datetime.now(UTC).replace(tzinfo=None)
    return [
        after_run, before_run, cell_id, kind, signature, json.dumps(sorted(set(tests))), found.verdict, found.describe(),
        json.dumps(explanation), len(found.probes), round(seconds, 3), stamp,
    ]  # fmt: skip


COLUMNS = (
    "after_run",
    "before_run",
    "cell_id",
    "kind",
    "signature",
    "tests",
    "verdict",
    "text",
    "explanation",
    "probes",
    "seconds",
    "explained_at",
)


def write(con: Any, rows: Iterable[list[Any]]) -> int:
    """Store causes in place of the ones of the same changes (in the writer's transaction)."""
    found = list(rows)
    marks = ", ".join("?" for _ in COLUMNS)
    for values in found:
        con.execute(f"INSERT OR REPLACE INTO causes ({', '.join(COLUMNS)}) VALUES ({marks})", values)
    return len(found)


# -- what the file recorded of a run in a cell -------------------------------------------------------
def facts(store: SqlResultsFile, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Facts]:
    """(run, cell) -> what the results file recorded there that an outcome depends on
    (`analysis.explain.Facts`): the cell's freeze and git commits, the run's test files, the
    suite's configuration and the code under test, and the machine (driver, CUDA runtime)."""
    wanted = sorted(set(pairs))
    if not wanted:
        return {}
    runs = sorted({run for run, _ in wanted})
    marks = ", ".join("?" for _ in runs)
    recorded = {
        str(r["run_id"]): (json_map(json_map(r["settings"]).get("inputs")), json_map(r["host"]))
        for r in store.fetch(f"SELECT run_id, settings, host FROM runs WHERE run_id IN ({marks})", runs)
    }
    cells = store.fetch(
        f"SELECT run_id, cell_id, installed, git_commits, cuda_runtime FROM cells WHERE run_id IN ({marks})",
        runs,
    )
    found: dict[tuple[str, str], Facts] = {}
    for cell in cells:
        key = (str(cell["run_id"]), str(cell["cell_id"]))
        if key not in wanted:
            continue
        inputs, host = recorded.get(key[0], ({}, {}))
        tests = json_map(inputs.get("tests"))
        gpus = host.get("gpus") or []
        first = gpus[0] if gpus and isinstance(gpus[0], Mapping) else {}
        machine = {
            "driver": str(first.get("driver_version") or ""),
            "cuda": str(cell["cuda_runtime"] or ""),
            "gpu": str(host.get("gpu") or ""),
        }
        found[key] = Facts(
            freeze={str(k): str(v) for k, v in json_map(cell["installed"]).items()},
            git={str(k): str(v) for k, v in json_map(cell["git_commits"]).items()},
            # a suite's test files, or the scenario files by name: what a change's file is looked up by
            files={str(k): str(v) for k, v in (json_map(tests.get("files")) or json_map(inputs.get("scenarios"))).items()},
            config=str(tests.get("config") or ""),
            code=str(tests.get("code") or ""),
            commit={str(k): str(v) for k, v in json_map(tests.get("commit")).items()},
            machine={k: v for k, v in machine.items() if v},
        )
    return found
