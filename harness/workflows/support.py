"""The Support page's tables (`analysis.support`): computed from a results file's answer, and kept
in the file by the commands that write it (`storage.cached`), so that a reader shows them at once.

`support_of` is what the dashboard and the published page read; `keep_support` what `harness
sweep`, `merge`, `attribute` and `compact` call after they wrote the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.analysis.answer import Answer
from harness.analysis.attribution import Transition
from harness.analysis.rows import group_of, names_are_suite
from harness.analysis.support import SupportTable, support_tables, tables_from_json, tables_to_json
from harness.workflows.answering import answer

#: The name the Support page's tables are kept under in the results file (storage/cached.py).
SUPPORT = "support"


def support_of(store: Any) -> tuple[tuple[SupportTable, ...], str]:
    """The dashboard's Support page: (the support tables, what a row is), as the command that last
    wrote the file kept them (`keep_support`) while the file is as it was then, else computed."""
    kept = _kept(store)
    return kept if kept is not None else _support_now(store)


def kept_support(store: Any) -> tuple[SupportTable, ...] | None:
    """The support tables the command that last wrote the file kept, while the file is as it was
    then; else None (the caller has the answer to compute them from)."""
    kept = _kept(store)
    return kept[0] if kept is not None else None


def _kept(store: Any) -> tuple[tuple[SupportTable, ...], str] | None:
    if not hasattr(store, "fetch"):  # a runner's JSON-lines shard keeps none
        return None
    from harness.storage import cached  # DuckDB: only where a results file is read

    kept = cached.read(store, SUPPORT, cached.state_key(store))
    return tables_from_json(kept) if kept is not None else None


def keep_support(store: Any, found: Answer | None = None) -> bool:
    """After a command wrote the file (a read-write Store): compute the Support page's tables and
    keep them in it, under the state they were computed from (4.8 s at 20,000 tests × 20 cells,
    once a night instead of on every first render). `found`: the file's whole answer, attributed
    and stored just now (`harness attribute`), which the tables are then made from without reading
    the file again. Kept only where the state did not change while they were computed (another
    writer); returns whether they were."""
    from harness.storage import cached

    key = cached.state_key(store)
    if cached.read(store, SUPPORT, key) is not None:
        return True
    payload = support_payload(found) if found is not None else support_payload_now(store)
    if payload is None or cached.state_key(store) != key:
        return False
    cached.write(store, SUPPORT, key, payload)
    return True


def support_payload(found: Answer) -> str | None:
    """The Support page's tables of a file's whole answer (attributed just now), as kept in the
    file (`cached`); None where they cannot be computed: the page computes them itself and shows
    the error there, and the writing command must not fail for it."""
    try:
        return tables_to_json(*_support_from(found, found.transitions))
    except Exception:
        return None


def support_payload_now(store: Any) -> str | None:
    """`support_payload` of the file as it is (its stored answers marked, while current)."""
    try:
        return tables_to_json(*_support_now(store))
    except Exception:
        return None


def keep_support_of(db: Path) -> None:
    """`keep_support` on the DuckDB file at `db` (nothing for a JSON-lines shard: the runner's).
    Best effort: where another writer holds the file (a second sweep into it), the tables are
    not kept and readers compute them, as before; the sweep that asked does not wait or fail."""
    if db.suffix == ".jsonl" or not db.is_file():
        return
    from harness.errors import StoreError
    from harness.storage.store import Store

    try:
        with Store(db, lock_wait=1.0) as store:
            keep_support(store)
    except StoreError:
        pass


def _support_now(store: Any) -> tuple[tuple[SupportTable, ...], str]:
    """The support tables computed from the file. The answers to mark are those `harness attribute`
    stored, while current: attributing 100,000 outcomes again takes ~10 s."""
    from harness.storage import attributed

    found = answer(store, loud=True)
    current = attributed.answers_current(store)  # the tables mark exact answers only (`support._marks`)
    stored = [Transition.from_dict(r) for r in attributed.transitions(store, "", exact=True)] if current else None
    return _support_from(found, stored)


def _support_from(found: Answer, marked: Sequence[Transition] | None) -> tuple[tuple[SupportTable, ...], str]:
    suite = names_are_suite(found.scenarios)
    return tuple(support_tables(found, group_of if suite else None, marked)), "test group" if suite else "scenario"
