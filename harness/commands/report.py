"""`harness report`: find the failure or cell the user named, gather its evidence, render the issue body.

The markdown is `analysis.report` (pure); this module matches the user's words to one stored
signature or cell (bad input names the fix), picks the contrast (passing rows of the same
scenarios; a cell's neighbours one version apart), and answers them through `answering.answer`
(every version the file ran and every release the index listed known), so the report's answers
are the same as `harness attribute`'s.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.analysis.report import render_cell_report, render_signature_report
from harness.analysis.rows import distance, installed, machine_of, signature_of
from harness.analysis.status import FAILURES
from harness.commands.answer import answer
from harness.errors import BadInput
from harness.inputs.scenarios import available, load_scenario
from harness.storage import queries
from harness.storage.store import Store


def find_signature(failing: Sequence[Mapping[str, Any]], wanted: str, db: str) -> str:
    """The one stored signature the user means: its text, its family hash, or a part of it."""
    wanted = wanted.strip()
    found = {signature_of(r) for r in failing if wanted in (r["signature"], r["signature_family"])}
    if not found:
        found = {signature_of(r) for r in failing if wanted.casefold() in signature_of(r).casefold()}
    if not found:
        raise BadInput(f"no failing outcome in {db!r} has a signature matching {wanted!r}; `harness summary --db {db}` lists them")
    if len(found) > 1:
        families = sorted({f"{r['signature_family']} ({(r['signature'] or '')[:60]})" for r in failing if r["signature"] in found})
        raise BadInput(f"{wanted!r} matches {len(found)} signatures; pass one family hash: {'; '.join(families)}")
    return found.pop()


def _scenario_texts(scenarios: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    known = available()
    files = {s: f"scenarios/{known[s].name}" for s in scenarios if s in known}
    docs = {}
    for s in scenarios:
        if s in known:
            try:
                docs[s] = load_scenario(known[s]).doc
            except BadInput:
                docs[s] = ""
    return files, docs


def report_file(db: Path, signature: str = "", cell: str = "") -> str:
    """The markdown issue body for one failure signature or one cell of a results file."""
    if bool(signature) == bool(cell):
        raise BadInput("pass exactly one of --signature (text, family hash or a part of it) and --cell (an id from `harness summary`)")
    name = str(db)
    with Store(db, read_only=True) as store:
        found = answer(store)
        everything = found.rows
        runs = queries.runs(store)
        if signature:
            failing = [r for r in everything if r["status"] in FAILURES]
            chosen = find_signature(failing, signature, name)
            scenarios = sorted({r["scenario"] for r in failing if signature_of(r) == chosen})
            # Tracebacks of this failure only; the other rows are the contrast (each carries its cell's freeze).
            traced = queries.outcome_rows_with_traces(store, scenarios, signature=chosen)
            keys = {(r["run_id"], r["cell_id"], r["scenario"], r["repeat"]) for r in traced}
            named = set(scenarios)  # a set: a signature of a suite names hundreds of tests, read against every outcome
            rows = traced + [
                r for r in everything if r["scenario"] in named and (r["run_id"], r["cell_id"], r["scenario"], r["repeat"]) not in keys
            ]
            records: list[dict[str, Any]] = []
        else:
            own = queries.outcome_rows_with_traces(store, cell_id=cell)
            if not own:
                ids = sorted({r["cell_id"] for r in everything})
                near = difflib.get_close_matches(cell, ids, n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(near)}?" if near else f"; `harness summary --db {name}` lists the cells"
                raise BadInput(f"no outcomes for cell {cell!r} in {name!r}{hint}")
            scenarios = sorted({r["scenario"] for r in own})
            named = set(scenarios)  # a set: a cell of a suite ran 20,000 tests, read against every outcome
            # The neighbours (one axis different, same machine) are the contrast, and the lines attribution walks through this cell.
            mine, where = installed(own[0]), machine_of(own[0])
            adjacent = {  # decided once per cell, not per outcome
                facts for facts in found.cells if facts.machine == where and distance(facts.installed, mine) == 1
            }
            neighbours = {r["cell_id"] for facts in adjacent for r in found.cells[facts] if r["cell_id"] != cell and r["scenario"] in named}
            rows = own + [r for r in everything if r["cell_id"] in neighbours and r["scenario"] in named]
            records = queries.cell_records(store, cell)
    # Every version any cell used is known (a gap on one line may be tested on another), and every release the index listed.
    # An axis whose releases the file never listed is "unlisted", as in `harness attribute --offline`.
    transitions = found.narrowed(rows).to_rows()
    files, docs = _scenario_texts(scenarios)
    # The known-good set of each machine class, so the report names the one for its own machine.
    known_good = found.known_good_by_class()
    if signature:
        return render_signature_report(
            chosen, rows, transitions, runs=runs, scenario_files=files, scenario_docs=docs, db=name, known_good=known_good
        )
    return render_cell_report(
        cell,
        rows,
        records[0] if records else None,
        transitions=transitions,
        runs=runs,
        scenario_files=files,
        scenario_docs=docs,
        db=name,
        known_good=known_good,
    )
