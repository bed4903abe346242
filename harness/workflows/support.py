"""The Support page's tables (`analysis.support`): computed from a results file's answer, and kept
in the file by the commands that write it (`storage.cached`), so that a reader shows them at once.

`support_of` is what the dashboard and the published page read; `keep_support` what `harness
sweep`, `merge` and `compact` call after they wrote the file. `harness attribute` keeps none: with
the answers it stores, the page decides its tables in DuckDB (`_support_in_sql`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.analysis.answer import Answer
from harness.analysis.attribution import Transition
from harness.analysis.pin import DEFAULT_RANKING, full_ranking, preference
from harness.analysis.rows import CellFacts, axis_sort, cell_facts, group_of, names_are_suite
from harness.analysis.support import (
    Chosen,
    LineCell,
    SupportTable,
    line_cell,
    lines_of,
    support_tables,
    table_of,
    tables_from_json,
    tables_to_json,
)
from harness.storage.support_rows import Misses, Pair
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

    if not cached.holds(store, SUPPORT):  # none kept: no need to hash every outcome for the key (0.2 s)
        return None
    kept = cached.read(store, SUPPORT, cached.state_key(store))
    return tables_from_json(kept) if kept is not None else None


def keep_support(store: Any) -> bool:
    """After a command wrote outcomes into the file (a read-write Store): compute the Support page's
    tables and keep them in it, under the state they were computed from (4.8 s at 20,000 tests × 20
    cells, once a night instead of on every first render). Kept only where the state did not change
    while they were computed (another writer); returns whether they were."""
    from harness.storage import cached

    key = cached.state_key(store)
    if cached.read(store, SUPPORT, key) is not None:
        return True
    payload = support_payload_now(store)
    if payload is None or cached.state_key(store) != key:
        return False
    cached.write(store, SUPPORT, key, payload)
    return True


def support_payload_now(store: Any) -> str | None:
    """The Support page's tables of the file as it is (its stored answers marked, while current), as
    kept in the file (`cached`); None where they cannot be computed: the page computes them itself
    and shows the error there, and the writing command must not fail for it."""
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
    """The support tables computed from the file: decided in DuckDB (`storage.support_rows`) where
    it can (1.4 s at 2,000,000 outcomes, where reading the loud rows took 6.7 s), else from its answer."""
    decided = _support_in_sql(store) if hasattr(store, "fetch") else None  # a runner's JSON-lines shard has no SQL
    return decided if decided is not None else _support_read(store)


def _support_in_sql(store: Any) -> tuple[tuple[SupportTable, ...], str] | None:
    """The tables from DuckDB's aggregates, equal to `_support_read`'s; None where the file's
    answers to mark are not stored (current), or the known-good choice needs Python's rule."""
    from harness.storage import attributed, support_rows

    with store.reading():  # one view of the file for every read below
        if not attributed.answers_current(store):  # the answers to mark would be attributed now, from every row
            return None
        pairs, facts = _pairs(support_rows.cell_rows(store))
        with support_rows.reading(store, pairs) as read:
            decided = read.known_good() if read is not None else None
            if read is None or decided is None:
                return None
            cells: dict[tuple[str, str], LineCell] = {}
            for pair in pairs:
                cells.setdefault((pair.machine, pair.cell_id), line_cell(pair.cell_id, facts[(pair.run_id, pair.cell_id)]))
            chosen = [_chosen(m, decided.classes[m], facts, pairs) for m in _classes(pairs) if m in decided.classes]
            lines = lines_of(chosen, cells)
            suite = decided.suite
            on_lines = {(line.machine, c.cell_id) for line in lines for c in line.cells}
            lined = [i for i, p in enumerate(pairs) if (p.machine, p.cell_id) in on_lines]
            counts: dict[str, dict[str, dict[str, dict[str, int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
            for machine, cell_id, row, status, n in read.square_counts(lined, suite):
                square = counts[machine][cell_id][row]  # a cell's runs, and a row's tests counted apart: added up
                square[status] = square.get(status, 0) + n
        ends = [(line.library, line.cells[0].machine, [c.cell_id for c in line.cells]) for line in lines]
        stored = support_rows.line_transitions(store, ends)
        marked = [Transition.from_dict(r) for r in stored]
        releases = store.known_releases()
    group = group_of if suite else _itself
    tables = tuple(table_of(line, counts[line.machine], releases, marked, group) for line in lines)
    return tables, "test group" if suite else "scenario"


def _itself(scenario: str) -> str:
    return scenario


def _pairs(rows: list[dict[str, Any]]) -> tuple[list[Pair], dict[tuple[str, str], CellFacts]]:
    """Each (run, cell) with its machine class and candidate: the (run, cell)s of one class with one
    installed freeze are one candidate (`pin.candidates_of`); none without installed versions."""
    keys: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    pairs, facts = [], {}
    for row in rows:
        found = cell_facts(row)
        run, cell = str(row["run_id"]), str(row["cell_id"])
        facts[(run, cell)] = found
        key = tuple(sorted(found.installed.items()))
        candidate = keys.setdefault((found.machine_class, key), len(keys)) if key else None
        pairs.append(Pair(run, cell, found.machine_class, candidate))
    return pairs, facts


def _classes(pairs: Sequence[Pair]) -> list[str]:
    """The machine classes in `knowngood.known_good_sets`' order: `cpu`, the GPU classes by name, then "" (no host)."""
    found = {p.machine for p in pairs}
    return [*sorted(found - {""}, key=lambda c: (c != "cpu", c)), *([""] if "" in found else [])]


def _chosen(machine: str, decided: Misses, facts: dict[tuple[str, str], CellFacts], pairs: Sequence[Pair]) -> Chosen | None:
    """The known-good cell of a class (`pin.choose_among` over the candidates left after the drops):
    the qualifying candidate of the newest versions by the default ranking, then the greatest cell id."""
    versions = {p.candidate: dict(facts[(p.run_id, p.cell_id)].installed) for p in reversed(pairs) if p.machine == machine}
    order = full_ranking(DEFAULT_RANKING, {a for c in decided.joined for a in versions[c]})
    qualifying = [c for c in decided.joined if decided.last[c] <= decided.stop]
    if not qualifying:
        return None

    def rank(candidate: int) -> tuple[Any, ...]:
        return (*(preference(versions[candidate].get(axis)) for axis in order), min(decided.joined[candidate]))

    best = sorted(qualifying, key=rank, reverse=True)[0]
    held = versions[best]
    return Chosen(machine, min(decided.joined[best]), {a: held[a] for a in axis_sort(held)})


def _support_read(store: Any) -> tuple[tuple[SupportTable, ...], str]:
    """The support tables from the file's answer (every loud row read). The answers to mark are
    those `harness attribute` stored, while current: attributing 100,000 outcomes again takes ~10 s."""
    from harness.storage import attributed

    found = answer(store, loud=True)
    current = attributed.answers_current(store)  # the tables mark exact answers only (`support._marks`)
    stored = [Transition.from_dict(r) for r in attributed.transitions(store, "", exact=True)] if current else None
    return _support_from(found, stored)


def _support_from(found: Answer, marked: Sequence[Transition] | None) -> tuple[tuple[SupportTable, ...], str]:
    suite = names_are_suite(found.scenarios)
    return tuple(support_tables(found, group_of if suite else None, marked)), "test group" if suite else "scenario"
