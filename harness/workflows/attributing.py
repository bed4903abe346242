"""`harness attribute`: read a results file, learn the releases between tested versions, attribute, store.

The answers are `answering.answer`'s, as every face's; this module adds what `harness attribute`
alone does: it asks the index the runs used for the releases of each axis (`answering.refreshed`,
unless offline), without which a gap between two tested releases would be invisible and "fixed
in X" would claim more than was built, and it stores the answers in the file's `transitions` table.
The requirements two exact answers state together (`analysis.requirement`) come with them; they
are derived, never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.attribution import Attribution
from harness.analysis.requirement import StatedRequirement, requirements
from harness.errors import BadInput
from harness.storage.store import Store
from harness.workflows.answering import answer, refreshed


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
    # The Support page's tables are not kept with the answers: with them stored, the page decides
    # its tables in DuckDB (`support._support_in_sql`, 1.3 s at 2,000,000 outcomes), where making
    # them here from the answer, and the file's state twice for their key, cost 2.3 s of attribute's 5.7.
    with Store(db) as store:  # read-write: the answers are stored next to the outcomes
        with store.reading():  # one view of the file for the reads (a writer's store opens one per read otherwise)
            found = answer(store, run_id or None, loud=not scenarios)  # a few scenarios named: every row of theirs
        if not found.rows:
            hint = f" for run {run_id!r}; see `harness summary --db {db}`" if run_id else ""
            raise BadInput(f"no outcomes in {str(db)!r}{hint}")
        if scenarios:
            stored = sorted(found.scenarios)
            unknown = [s for s in scenarios if s not in stored]
            if unknown:
                raise BadInput(f"no outcomes for scenario(s) {', '.join(map(repr, unknown))} in {str(db)!r}; stored: {', '.join(stored)}")
        if not offline:
            found = refreshed(store, found)
        if scenarios:
            # Every scenario's versions are known releases: a gap on one line may be tested on another.
            found = found.narrowed(r for r in found.rows if r["scenario"] in scenarios)
        store.replace_transition_columns(found.to_columns(run_id), scope=run_id, scenarios=scenarios)
    return Attributed(found.attribution, found.attributed, found.unlisted, tuple(requirements(found.transitions)))
