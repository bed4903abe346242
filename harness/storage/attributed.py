"""The answers `harness attribute` stored (table `transitions`): all of them or one scope's, per
signature the distinct answers and how many lines of the matrix gave each, and whether they still
describe every outcome. A file from before migration 0003 has no table: no answers.
"""

from __future__ import annotations

from typing import Any

from harness.storage import cached, clauses
from harness.storage.resultsfile import SqlResultsFile

_TRANSITION_JSON = ("untested", "inconclusive", "held", "runs")


def transitions(
    store: SqlResultsFile, scope: str | None = None, signature: str | None = None, *, exact: bool = False
) -> list[dict[str, Any]]:
    """Stored answers (JSON columns decoded), of one scope and one signature if given, in attribution's order;
    `exact`: only the exact ones (built or refined on both sides: what the Support page marks), where
    a suite's 78,000 ranges would take seconds to decode for nothing.

    A file opened read-only from before migration 0003 has no table yet: no transitions.
    """
    if not store.has_table("transitions"):
        return []
    where, params = [], []
    if exact:  # nothing between the two ends untested or inconclusive (`Transition.exact`), as stored
        where.append("COALESCE(untested, 'null') IN ('[]', 'null') AND COALESCE(inconclusive, 'null') IN ('[]', 'null')")
    if scope is not None:
        where.append("scope = ?")
        params.append(scope)
    if signature is not None:
        where.append("signature = ?")
        params.append(signature)
    sql = "SELECT * FROM transitions" + (" WHERE " + " AND ".join(where) if where else "")
    return clauses.decode(store.fetch(sql + " ORDER BY scope, scenario, seq", params), _TRANSITION_JSON)


def transition_scopes(store: SqlResultsFile) -> list[str]:
    if not store.has_table("transitions"):
        return []
    return [r["scope"] for r in store.fetch("SELECT DISTINCT scope FROM transitions ORDER BY 1")]


def transition_summary(store: SqlResultsFile, scope: str = "") -> list[dict[str, Any]]:
    """Per signature, one row per distinct answer (kind, axis, both ends, what lies between, machine),
    with how many lines of the matrix gave it: the failures table's words."""
    if not store.has_table("transitions"):
        return []
    machine = "COALESCE(machine, '')" if "machine" in clauses.columns(store, "transitions") else "''"
    rows = store.fetch(
        f"SELECT signature, kind, axis, before, after, untested, inconclusive, {machine} AS machine, "
        "any_value(description) AS description, count(*) AS lines "
        "FROM transitions WHERE scope = ? GROUP BY ALL ORDER BY signature, kind, axis, before, after",
        [scope],
    )
    return clauses.decode(rows, ("untested", "inconclusive"))


def transition_answer_groups(store: SqlResultsFile, scope: str = "") -> list[dict[str, Any]]:
    """`transition_summary`'s rows with each one's `other_machine` too (where a machine difference
    passes): every field an answer's words are made of, so that no reader takes the stored
    description apart."""
    if not store.has_table("transitions"):
        return []
    found = clauses.columns(store, "transitions")
    machine = "COALESCE(machine, '')" if "machine" in found else "''"
    other = "COALESCE(other_machine, '')" if "other_machine" in found else "''"
    rows = store.fetch(
        f"SELECT signature, kind, axis, before, after, untested, inconclusive, {machine} AS machine, {other} AS other_machine, "
        "any_value(description) AS description, count(*) AS lines "
        "FROM transitions WHERE scope = ? GROUP BY ALL ORDER BY signature, kind, axis, before, after",
        [scope],
    )
    return clauses.decode(rows, ("untested", "inconclusive"))


def answers_current(store: SqlResultsFile) -> bool:
    """Whether the answers `harness attribute` stored for all runs describe every outcome: each
    was computed after the newest outcome started (a merge that adds outcomes drops them). Where
    it stored none (every failure the same in every cell), its stamp says when (`cached.stamp`)."""
    if not store.has_table("transitions"):
        return False
    rows = store.fetch(
        "SELECT (SELECT min(computed_at) FROM transitions WHERE scope = '') AS computed, "
        "(SELECT count(*) FROM transitions WHERE scope = '') AS stored, (SELECT max(started_at) FROM outcomes) AS newest"
    )
    computed, stored, newest = rows[0]["computed"], rows[0]["stored"], rows[0]["newest"]
    if not stored:
        computed = cached.stamped(store, "")
    return computed is not None and (newest is None or computed >= newest)
