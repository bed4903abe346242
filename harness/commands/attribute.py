"""`harness attribute`: read a results file, learn the releases between tested versions, attribute, store.

The answers are `answering.answer`'s, as every face's; this module adds what `harness attribute`
alone does: it asks the index the runs used for the releases of each axis (`answering.refreshed`,
unless offline), without which a gap between two tested releases would be invisible and "fixed
in X" would claim more than was built, and it stores the answers in the file's `transitions` table.
The requirements two exact answers state together (`analysis.requirement`) come with them; they
are derived, never stored.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.analysis.attribution import Attribution
from harness.analysis.requirement import StatedRequirement, requirements
from harness.commands import flags
from harness.commands.answer import answer, refreshed
from harness.commands.publish import keep_support
from harness.errors import EXIT_OK, BadInput
from harness.storage.store import Store


@dataclass(frozen=True)
class Attributed:
    """What `harness attribute` computed, and from what."""

    result: Attribution
    outcomes: int
    unlisted: tuple[str, ...]  # axes whose releases on the index could not be listed: their answers are ranges
    requirements: tuple[StatedRequirement, ...] = ()  # "transformers>=5.6.0 needs peft>=0.19.0", from two exact answers


def attribute_file(db: Path, run_id: str = "", scenarios: Sequence[str] = (), *, offline: bool = False) -> Attributed:
    """Attribute the outcomes of a results file (one run, or all) and store the answers in its `transitions` table.

    The releases of each axis come from every run's stored list and, unless `offline`, from the
    index (stored under run '' for later readers). An axis that has neither is `unlisted`.
    """
    with Store(db) as store:  # read-write: the answers are stored next to the outcomes
        found = answer(store, run_id or None)
        if not found.rows:
            hint = f" for run {run_id!r}; see `harness summary --db {db}`" if run_id else ""
            raise BadInput(f"no outcomes in {str(db)!r}{hint}")
        if scenarios:
            stored = sorted({r["scenario"] for r in found.rows})
            unknown = [s for s in scenarios if s not in stored]
            if unknown:
                raise BadInput(f"no outcomes for scenario(s) {', '.join(map(repr, unknown))} in {str(db)!r}; stored: {', '.join(stored)}")
        if not offline:
            found = refreshed(store, found)
        if scenarios:
            # Every scenario's versions are known releases: a gap on one line may be tested on another.
            found = found.narrowed(r for r in found.rows if r["scenario"] in scenarios)
        store.replace_transitions(found.to_rows(run_id), scope=run_id, scenarios=scenarios)
        if not run_id and not scenarios:  # the whole file's answers, as the Support page marks them
            keep_support(store, found)
    return Attributed(found.attribution, found.attributed, found.unlisted, tuple(requirements(found.transitions)))


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attribute",
        help="for each failure and library, the release that introduced it and the one that fixed it (others held fixed)",
        description="For every failure signature and every axis, the transitions while the other axes stay fixed: "
        "'introduced in transformers X, fixed in Y'. Stored in the file's `transitions` table; see docs/attribution.md.",
    )
    flags.add_db(p)
    p.add_argument("--run-id", default="", help="only this run's outcomes (default: every run in the file)")
    p.add_argument("--scenario", action="append", default=[], help="only this scenario (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object per transition and flaky cell instead of the tables")
    p.add_argument(
        "--offline",
        action="store_true",
        help="do not ask the index for the releases between tested versions (use those stored with the runs)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.summary import render_transitions

    db = flags.existing_duckdb(args.db)
    done = attribute_file(Path(db), args.run_id, args.scenario, offline=args.offline)
    result = done.result
    if args.json:
        items = [*(t.to_dict() for t in result.transitions), *(m.to_dict() for m in result.machines), *(f.to_dict() for f in result.flaky)]
        items += [r.to_dict() for r in done.requirements]  # kind "requirement": what two exact answers state together
        for item in items:
            print(json.dumps(item))
        return EXIT_OK
    render_transitions(result.transitions, console, result.flaky, result.machines)
    if not result.transitions:
        console.print("no transitions: no failure changes between neighbouring versions of an axis with the other axes held fixed")
    if done.unlisted:
        console.print(f"the index's releases of {', '.join(done.unlisted)} could not be listed: changes along them are ranges")
    for stated in done.requirements:
        console.print(
            f"missing requirement: [bold]{escape(stated.text())}[/] on {stated.machine or 'an unrecorded machine'}", highlight=False
        )
        console.print(f"  {escape(', '.join(stated.scenarios))}: {escape(stated.signature)}", highlight=False)
        for line in stated.lines():
            console.print(f"  {escape(line)}", highlight=False)
        console.print(f"  cells: {'; '.join(f'{c} {w}' for c, w in stated.cells())}", highlight=False)
    exact = sum(t.exact for t in result.transitions)
    console.print(
        f"{len(result.transitions)} transition(s) ({exact} exact, {len(result.transitions) - exact} range(s)), "
        f"{len(result.machines)} machine difference(s), {len(result.flaky)} flaky cell(s) from {done.outcomes} outcome(s); "
        f"stored in {db} (table transitions)"
    )
    return EXIT_OK
