"""The one answering driver (`answering.answer` over `analysis.answer`) and what moved with it:
refinement's rounds as a pure search with a probe seam, the one order in bisection, the one
parser of an `exclude_newer` moment."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.answer import answer_rows
from harness.analysis.attribution import UNLISTED
from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.analysis.refine import Probe, search
from harness.analysis.versions import moment
from harness.storage import attributed
from harness.storage.shardfile import ShardStore
from harness.storage.store import Store
from harness.workflows.answering import answer, failure_answers

REPO = Path(__file__).resolve().parents[2]
CPU = {"platform": "linux-x86_64", "gpu": "cpu", "python": "3.11"}
MACHINE = "cpu · linux-x86_64 · Python 3.11"
SIG = "TypeError: x @ accelerate/utils/modeling.py:f"
RELEASES = [f"1.{m}.0" for m in range(10, 20)]  # 1.10.0 … 1.19.0


def row(acc: str, signature: str, tf: str = "5.6.2", scenario: str = "load", **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "r",
        "cell_id": f"tf{tf}-acc{acc}",
        "scenario": scenario,
        "repeat": 0,
        "status": "error" if signature else "pass",
        "signature": signature,
        "versions": {"torch": "2.13.0", "transformers": tf, "accelerate": acc},
        **CPU,
        **extra,
    }


# -- the answers --------------------------------------------------------------------------------
def test_an_axis_nobody_listed_gives_ranges_listed_releases_name_what_was_not_built() -> None:
    rows = [row("1.10.0", SIG), row("1.12.0", "")]
    (unlisted,) = answer_rows(rows, {}).transitions
    assert unlisted.not_built == (UNLISTED,) and unlisted.is_range
    (listed,) = answer_rows(rows, {"accelerate": RELEASES}).transitions
    assert listed.headline() == "fixed between accelerate 1.10.0 (fails) and 1.12.0 (passes); not built: 1.11.0"
    assert answer_rows(rows, {}).unlisted == ("accelerate",) and answer_rows(rows, {"accelerate": RELEASES}).unlisted == ()


def test_narrowed_answers_count_every_version_the_read_ran() -> None:
    # the other scenario ran 1.11.0: on the narrowed scenario's line, 1.11.0 is a release not built
    rows = [row("1.10.0", SIG), row("1.12.0", ""), row("1.11.0", "", scenario="other")]
    found = answer_rows(rows, {}).narrowed(r for r in rows if r["scenario"] == "load")
    (t,) = found.transitions
    assert t.not_built == ("1.11.0",) and found.attributed == 2


def test_refinement_state_machine_classes_and_known_good() -> None:
    rows = [row("1.10.0", SIG), row("1.12.0", ""), row("1.12.0", "", origin="refine", cell_id="probe")]
    found = answer_rows(rows, {"accelerate": RELEASES})
    assert found.machines_of() == [MACHINE] and found.machines_of("cpu") == [MACHINE] and found.machines_of("1x") == []
    assert found.machine_label() == MACHINE
    assert [t.after for t in found.open_ranges(MACHINE)] == ["1.12.0"]
    assert found.probe_cells == 1
    assert found.machine_classes == ["cpu"]
    (good,) = found.known_good
    assert dict(good.result.versions)["accelerate"] == "1.12.0" and found.known_good_by_class() == {"cpu": good}


def test_nothing_is_attributed_until_asked() -> None:
    found = answer_rows([row("1.10.0", SIG), row("1.12.0", "")], {})
    assert "attribution" not in found.__dict__
    assert found.transitions and "attribution" in found.__dict__


def _records(db: Any) -> None:
    """Two lines of accelerate with no release list, and a flaky cell: the same into either kind of file."""
    host = {"platform": "linux-x86_64", "gpu": "cpu"}
    db.ensure_run("r", "m.toml", "", {"python": "3.11"}, "0", host)
    for acc, tf, statuses in [("1.10.0", "5.6.2", "e"), ("1.12.0", "5.6.2", "p"), ("1.10.0", "5.7.0", "e"), ("1.12.0", "5.7.0", "ep")]:
        cell = f"tf{tf}-acc{acc}"
        versions = {"torch": "2.13.0", "transformers": tf, "accelerate": acc}
        db.record_cell(CellRecord("r", cell, "3.11", versions, [], versions, {}, {}, "ready", "", 1.0, False))
        for repeat, word in enumerate(statuses):
            status, signature = (Status.ERROR, SIG) if word == "e" else (Status.PASS, "")
            db.add_outcome(Outcome("r", cell, "load", repeat, status, signature=signature, started_at="2026-01-01T00:00:00"))


def test_either_kind_of_results_file_answers_alike_unlisted_axes_included(tmp_path: Path) -> None:
    with Store(tmp_path / "r.duckdb") as duck, ShardStore(tmp_path / "r.jsonl") as shard:
        _records(duck)
        _records(shard)
        from_duck, from_shard = answer(duck, "r"), answer(shard)
    assert [t.describe() for t in from_duck.transitions] == [t.describe() for t in from_shard.transitions]
    (t,) = from_duck.transitions
    assert t.not_built == (UNLISTED,)  # nobody listed accelerate's releases: "fixed in 1.12.0" would claim too much
    assert [f.cell_id for f in from_duck.flaky] == ["tf5.7.0-acc1.12.0"]
    assert answer(shard, where=lambda rows: [r for r in rows if r["transformers"] == "5.7.0"]).transitions == ()


def test_the_failures_page_reads_stored_answers_only_while_they_are_current(tmp_path: Path) -> None:
    keys = ["scenario", "signature", "kind", "axis", "before", "after", "untested", "held", "machine", "how", "description"]
    with Store(tmp_path / "r.duckdb") as store:
        _records(store)
        fresh = failure_answers(store)  # nothing stored: computed now
        store.replace_transitions(answer(store).to_rows(), scope="")
        stored = failure_answers(store)  # stored after the newest outcome: read
        assert (fresh.stored, stored.stored) == (False, True)
        assert stored.summary == fresh.summary and [r["kind"] for r in stored.summary] == ["fixed", "flaky"]
        assert "other_machine" in stored.summary[0]
        assert [{k: t[k] for k in keys} for t in stored.of(SIG)] == [{k: t[k] for k in keys} for t in fresh.of(SIG)]
        assert fresh.of(SIG) and fresh.of("no such signature") == []
        # an outcome that started after the answers were stored: they no longer describe the file
        later = datetime.now(UTC).replace(tzinfo=None).isoformat()
        store.add_outcome(Outcome("r", "tf5.6.2-acc1.12.0", "load", 1, Status.ERROR, signature=SIG, started_at=later))
        assert failure_answers(store).stored is False and attributed.answers_current(store) is False


def test_a_merge_that_adds_outcomes_drops_the_stored_answers(tmp_path: Path) -> None:
    with ShardStore(tmp_path / "shard.jsonl") as shard:
        _records(shard)
        shard.add_outcome(Outcome("r", "tf5.6.2-acc1.10.0", "other", 0, Status.PASS, started_at="2026-01-01T00:00:00"))
    from harness.storage.shardfile import read_records

    with Store(tmp_path / "r.duckdb") as store:
        _records(store)
        store.replace_transitions(answer(store).to_rows(), scope="")
        assert attributed.answers_current(store)
        assert store.merge_records(read_records(tmp_path / "shard.jsonl")) == 1  # only "other" is new
        assert attributed.transitions(store) == [] and not attributed.answers_current(store)
        store.replace_transitions(answer(store).to_rows(), scope="")
        assert store.merge_records(read_records(tmp_path / "shard.jsonl")) == 0  # nothing new: the answers stay
        assert attributed.answers_current(store)


def test_answers_attribute_found_none_of_are_current_until_an_outcome_comes_after(tmp_path: Path) -> None:
    # Every failure the same in every cell: attribute stores no answer, and says when by a stamp.
    # Without it the Failures and Support pages took "none stored" for "not current" and read
    # every loud row again on each first render.
    with Store(tmp_path / "r.duckdb") as store:
        host = {"platform": "linux-x86_64", "gpu": "cpu"}
        store.ensure_run("r", "m.toml", "", {"python": "3.11"}, "0", host)
        for acc in ("1.10.0", "1.12.0"):
            versions = {"torch": "2.13.0", "transformers": "5.6.2", "accelerate": acc}
            store.record_cell(CellRecord("r", f"acc{acc}", "3.11", versions, [], versions, {}, {}, "ready", "", 1.0, False))
            store.add_outcome(Outcome("r", f"acc{acc}", "load", 0, Status.ERROR, signature=SIG, started_at="2026-01-01T00:00:00"))
        assert not attributed.answers_current(store)  # nothing attributed yet
        found = answer(store)
        assert found.to_rows("") == []
        store.replace_transitions(found.to_rows(""), scope="")
        assert attributed.answers_current(store) and failure_answers(store).stored
        store.replace_transitions([], scope="r")  # another scope's answers say nothing of all runs'
        assert attributed.answers_current(store)
        later = datetime.now(UTC).replace(tzinfo=None).isoformat()
        store.add_outcome(Outcome("r", "acc1.10.0", "other", 0, Status.PASS, started_at=later))
        assert not attributed.answers_current(store) and not failure_answers(store).stored


def test_a_merge_that_adds_outcomes_drops_the_stamp_of_no_answers(tmp_path: Path) -> None:
    with ShardStore(tmp_path / "shard.jsonl") as shard:
        shard.ensure_run("r", "m.toml", "", {"python": "3.11"}, "0", {"platform": "linux-x86_64", "gpu": "cpu"})
        shard.add_outcome(Outcome("r", "c", "other", 0, Status.PASS, started_at="2025-01-01T00:00:00"))
    from harness.storage.shardfile import read_records

    with Store(tmp_path / "r.duckdb") as store:
        store.ensure_run("r", "m.toml", "", {"python": "3.11"}, "0", {"platform": "linux-x86_64", "gpu": "cpu"})
        store.add_outcome(Outcome("r", "c", "load", 0, Status.PASS, started_at="2025-01-01T00:00:00"))
        store.replace_transitions([], scope="")
        assert attributed.answers_current(store)
        assert store.merge_records(read_records(tmp_path / "shard.jsonl")) == 1  # older than the stamp, and new
        assert not attributed.answers_current(store)


def test_no_face_attributes_by_itself() -> None:
    # `attribute(` is called by the answer alone: no call site can leave the unlisted axes out.
    callers = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        if path.name in ("attribution.py", "answer.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "attribute":
                callers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert callers == []


# -- refinement's rounds: a pure search with a probe seam -----------------------------------------
@dataclass
class World:
    """Stored rows and a truth: the build seam stores what a probe cell would show."""

    fixed_in: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    built: list[str] = field(default_factory=list)

    def shows(self, acc: str) -> str:
        return SIG if RELEASES.index(acc) < RELEASES.index(self.fixed_in) else ""

    def answers(self) -> tuple[Any, list[str]]:
        found = answer_rows(self.rows, {"accelerate": RELEASES})
        return found.transitions, found.machines_of()

    def build(self, probes: Any) -> int:
        for p in probes:
            self.built.append(p.value)
            self.rows.append(row(p.value, self.shows(p.value)))
        return len(probes)


def test_the_search_narrows_a_range_to_the_exact_release() -> None:
    world = World("1.16.0", [row("1.10.0", SIG), row("1.19.0", "")])
    rounds: list[int] = []
    report = search(world.answers, world.build, on_round=lambda n, plan: rounds.append(n))
    (t,) = world.answers()[0]
    assert t.exact and (t.before, t.after) == ("1.15.0", "1.16.0")
    assert report.rounds == len(rounds) == len(world.built) <= 4 and report.envs_built == len(world.built)
    assert report.stopped == "" and report.line().startswith(f"refinement: {len(world.built)} probe cell(s) on 1 line(s)")


def test_the_search_stops_at_its_limit_and_says_so() -> None:
    world = World("1.16.0", [row("1.10.0", SIG), row("1.19.0", "")])
    report = search(world.answers, world.build, limit=1)
    assert world.built == ["1.15.0"] and report.stopped == "refine_limit of 1 probe cell(s) reached"
    (t,) = world.answers()[0]
    assert t.is_range


def test_the_search_never_builds_a_probe_twice() -> None:
    # a build whose outcomes land on no line (another machine class): the search stops, it does not loop
    world = World("1.16.0", [row("1.10.0", SIG), row("1.19.0", "")])
    seen: list[Probe] = []
    report = search(world.answers, lambda probes: seen.extend(probes) or 0)
    assert len(seen) == 1 and "did not narrow its range" in report.stopped


def test_the_search_asks_nothing_where_no_range_is_open() -> None:
    world = World("1.11.0", [row("1.10.0", SIG), row("1.11.0", "")])
    report = search(world.answers, world.build)
    assert world.built == [] and report.line() == "refinement: no range between tested releases to narrow"


# -- one order, one parser ------------------------------------------------------------------------
def test_one_parser_of_an_exclude_newer_moment() -> None:
    assert moment("") is None
    assert moment("2026-11-20") == datetime(2026, 11, 20, tzinfo=UTC)
    assert moment("2026-11-20T12:00:00Z") == datetime(2026, 11, 20, 12, tzinfo=UTC)
    for text in ("period", "yesterday", "2026-11-20 noon", "2026-13-01"):
        with pytest.raises(ValueError):
            moment(text)


@dataclass
class _Release:
    version: Any
    yanked: bool = False


class _Index:
    def __init__(self, *versions: str, yanked: tuple[str, ...] = ()) -> None:
        from packaging.version import Version

        self.found = {v: _Release(Version(v), v in yanked) for v in versions}

    def releases(self, package: str) -> dict[str, _Release]:
        return self.found


def test_release_steps_are_the_final_releases_between_the_ends_good_end_first() -> None:
    from harness.errors import BadInput
    from harness.workflows.bisecting import release_steps

    index = _Index("1.9.0", "1.10.0", "1.11.0rc1", "1.11.0", "1.12.0", "1.13.0", yanked=("1.12.0",))
    assert [s.value for s in release_steps(index, "acc", "1.10.0", "1.13.0")] == ["1.10.0", "1.11.0", "1.13.0"]  # type: ignore[arg-type]
    assert [s.value for s in release_steps(index, "acc", "1.13.0", "1.10.0")] == ["1.13.0", "1.11.0", "1.10.0"]  # type: ignore[arg-type]
    with pytest.raises(BadInput, match=r"1\.12\.0 is not a release on the index"):
        release_steps(index, "acc", "1.9.0", "1.12.0")  # type: ignore[arg-type]


def test_one_end_from_the_stored_outcomes_is_the_nearest_in_releases_between() -> None:
    from packaging.version import Version

    from harness.inputs.matrix import Candidate, Cell
    from harness.workflows.bisecting import BisectOptions, _fill_end_from_rows

    base = Cell((Candidate("torch", "version", "2.13.0"), Candidate("accelerate", "version", "0")), "3.11")

    def stored(acc: str, status: str) -> dict[str, object]:
        return {"versions": {"torch": "2.13.0", "accelerate": acc}, "status": status}

    # 2.0.0 is one release away from 1.9.0 (1.10.0 between); 1.5.0 is three (1.6.0, 1.7.0, 1.8.0)
    releases = [Version(v) for v in ("1.5.0", "1.6.0", "1.7.0", "1.8.0", "1.9.0", "1.10.0", "2.0.0")]
    options = BisectOptions("s", "accelerate", good="1.9.0")
    _fill_end_from_rows(options, base, "s", [stored("1.5.0", "error"), stored("2.0.0", "error"), stored("1.9.0", "pass")], releases)
    assert options.bad == "2.0.0"


# -- machine differences: compared only where a release cannot explain them -----------------------
GPU = {"platform": "linux-x86_64", "gpu": "NVIDIA H200", "gpu_count": 1, "python": "3.11"}


def on(machine: dict[str, Any], torch: str, acc: str, signature: str, cell: str = "") -> dict[str, Any]:
    where = "gpu" if machine is GPU else "cpu"
    return {**row(acc, signature, cell_id=cell or f"{where}-t{torch}-a{acc}"), **machine, "versions": {"torch": torch, "accelerate": acc}}


def differences(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    found = answer_rows(rows, {"accelerate": RELEASES}).machine_differences
    return [(m.axis, m.fails_with, m.passes_with, m.fails_cell, m.passes_cell) for m in found]


def test_a_failure_on_one_machine_only_with_the_same_versions_is_a_difference_of_machines() -> None:
    rows = [on(GPU, "2.13.0", "1.10.0", SIG), on(CPU, "2.13.0", "1.10.0", "")]
    assert differences(rows) == [("", "", "", "gpu-t2.13.0-a1.10.0", "cpu-t2.13.0-a1.10.0")]


def test_one_axis_that_changed_with_the_machine_is_named_and_not_blamed() -> None:
    # torch 2.11.0 ran only on the GPU machine, 2.13.0 only on the CPU one
    rows = [on(GPU, "2.11.0", "1.10.0", SIG), on(CPU, "2.13.0", "1.10.0", "")]
    assert differences(rows) == [("torch", "2.11.0", "2.13.0", "gpu-t2.11.0-a1.10.0", "cpu-t2.13.0-a1.10.0")]
    # the CPU machine ran 2.11.0 too: a line on one machine speaks to it, no machine difference
    assert differences([*rows, on(CPU, "2.11.0", "1.12.0", "")]) == []
    # two axes differ: never a machine difference
    assert differences([on(GPU, "2.11.0", "1.10.0", SIG), on(CPU, "2.13.0", "1.12.0", "")]) == []


def test_the_first_pair_in_cell_order_speaks_for_each_difference() -> None:
    rows = [
        on(GPU, "2.13.0", "1.10.0", SIG, "g1"),
        on(GPU, "2.13.0", "1.12.0", SIG, "g2"),
        on(CPU, "2.13.0", "1.12.0", "", "c2"),
        on(CPU, "2.13.0", "1.10.0", "", "c1"),
    ]
    assert differences(rows) == [("", "", "", "g1", "c1")]
