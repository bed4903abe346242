"""One cell's checks run on its runner, and the outcome each makes: a scenario (applicable here?
its timeout, its run interpreted) or a team's suite (its workers, this shard's slice of a cut
cell, each test's outcome as its worker reports it, and what the selection said).

The sweep (`sweep.py`) decides which checks run where and when, and stores what comes back;
this module turns a runner's runs into outcomes. It stores nothing and keeps no time.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.analysis import outcome
from harness.analysis.interpret import Interpretation, RawRun, interpret
from harness.analysis.outcome import Collection, Outcome
from harness.analysis.status import Status
from harness.errors import BadInput
from harness.inputs.scenarios import Scenario, applicability
from harness.inputs.testsource import NoTests
from harness.running.runner import CellRunner
from harness.running.shards import Durations, Piece, split_tests
from harness.running.testsuite import Suite, interpret_result, meaning, run_suite


@dataclass(frozen=True)
class Checks:
    """What every check of one run shares: its id, the variables a scenario gets (a real model,
    adapter or device asked for), the matrix's timeout for a check that names none, the libraries
    under test (what a signature blames), the secrets to mask, and with a shard the pieces of its
    cut cells and the stored seconds they are dealt by."""

    run_id: str
    env: Mapping[str, str]
    timeout: float
    libraries: tuple[str, ...]
    secrets: list[str]
    pieces: Mapping[str, Piece]
    durations: Durations

    def scenario(
        self, runner: CellRunner, cell_id: str, scenario: Scenario, repeat: int, freeze: Mapping[str, str], gpus: int, env: dict[str, str]
    ) -> tuple[Outcome, RawRun | None]:
        """One scenario on the runner, and its run (None: not applicable here, nothing ran)."""
        reason = applicability(scenario, freeze, gpus)
        if reason:
            return outcome.not_applicable(self.run_id, cell_id, scenario.name, repeat, reason), None
        timeout = float(scenario.timeout or self.timeout)
        started = datetime.now(UTC).replace(tzinfo=None).isoformat()
        raw = runner.run(scenario.path, timeout, {**self.env, **env})
        said = interpret(raw, timeout, self.libraries, setup=scenario.setup, gpus=scenario.requires.gpus)
        return outcome.scenario_outcome(self.run_id, cell_id, scenario.name, repeat, said, raw, self.secrets, started), raw

    def suite_here(self, suite: Suite, cell_id: str, freeze: dict[str, str]) -> Suite | Outcome:
        """The suite as this cell runs it (a package's own tests: those of its installed version's
        tag), or the inconclusive outcome that says why it could not be had."""
        try:
            return suite.in_cell(freeze)
        except (NoTests, subprocess.CalledProcessError) as err:
            said = str(err) if isinstance(err, NoTests) else f"git failed: {(err.stderr or '').strip()[:300]}"
            return _no_tests(self.run_id, cell_id, suite, said)

    def suite(
        self, runner: CellRunner, cell_id: str, suite: Suite, env: dict[str, str], done: list[str], tally: SuiteTally
    ) -> Iterator[Outcome]:
        """The suite's tests on the runner (`done`: those stored already, left out), each outcome
        as `tally` lets it out; a worker that crashes or times out is followed by another."""
        events, output = runner.tmp / "suite-events.jsonl", runner.tmp / "suite-output.log"
        timeout = float(suite.timeout or self.timeout)
        env_vars = {**self.env, **env}
        cut = self._cut(cell_id, runner.tmp / "suite-keep.json")

        def start(skip: list[str]) -> tuple[int | None, int | None]:
            return runner.run_suite_worker(suite.root, suite.args(), events, skip, output, env_vars, cut[1] if cut else None)

        for event in run_suite(start, runner.kill_running, events, timeout, done=done, cut=cut):
            if event.get("event") == "imported":
                runner.imports[str(suite.path.resolve())] = [str(m) for m in event.get("modules", [])]
            yield from tally.take(event, suite_outcome(self.run_id, cell_id, event, list(self.libraries), list(self.secrets), suite))

    def _cut(self, cell_id: str, keep: Path) -> tuple[Callable[[list[str]], list[str]], Path] | None:
        """This shard's slice of a cut cell's tests, once collected (`shards.split_tests`); None: all of them."""
        piece = self.pieces.get(cell_id)
        if piece is None or piece.whole:
            return None
        seconds = self.durations.get(cell_id, {})
        return (lambda selection: split_tests(selection, seconds, piece.shares)[piece.part]), keep


def suite_outcome(
    run_id: str, cell_id: str, event: dict[str, Any], libraries: list[str], secrets: list[str], suite: Suite
) -> Outcome | None:
    """One worker event -> one stored outcome (a test's result, a file that failed to import,
    a worker that never got to a test); None for the events that are not outcomes."""
    kind = event.get("event")
    if kind == "collect_error":
        event = {**event, "status": "error", "phase": "collection", "message": event.get("message", "")}
    elif kind == "worker_died":
        event = {**event, "nodeid": " ".join(suite.paths) or ".", "status": "crash", "exception_type": "worker"}
    elif kind != "result":
        return None
    result = interpret_result(event, libraries)
    marks = {"markers": [str(m) for m in event["markers"]]} if event.get("markers") else {}
    raw = RawRun(record=None, exit_code=None, signal=None, timed_out=False, seconds=result.seconds, output_tail="", metrics=marks)
    made = outcome.scenario_outcome(run_id, cell_id, result.nodeid, 0, meaning(result, libraries), raw, secrets)
    made.test_id = result.test_id
    return made


class SuiteTally:
    """One cell's suite events in the order they come, and what they say about its selection.

    A file that failed to collect is stored only once pytest took the selection ("selection"):
    when pytest refuses it ("usage_error": an -m naming an unknown marker under
    --strict-markers, or any expression the harness's process could not check) the sweep stops
    with BadInput and nothing of the suite is stored in the cell. A selection that keeps no test
    of those collected is no outcome (no node id ran; a rerun runs the collection again and says
    it again): `end` notes it on the sweep's lists, for its exit status.

    What the run collected goes to `collected` once (`Collection`): the selection's tests and the
    files that failed to collect, when pytest took the selection; or, where a worker died before
    it collected anything, the worker's crash alone (no test of the cell ran).
    """

    def __init__(self, run_id: str, cell_id: str, suite: Suite, collected: Callable[[Collection], None] | None = None) -> None:
        self.run_id, self.cell_id, self.suite = run_id, cell_id, suite
        self.selection: dict[str, Any] = {}
        self.held: list[Outcome] = []
        self.outcomes = 0
        self.collected = collected
        self.errors: dict[str, str] = {}  # files that failed to collect: node id -> signature
        self.died: Outcome | None = None  # the worker's crash before it ran a test
        self.recorded = False

    def take(self, event: dict[str, Any], found: Outcome | None) -> list[Outcome]:
        """The outcomes to store now, in order (none while a collection error waits)."""
        kind = event.get("event")
        if kind == "usage_error":
            said = str(event.get("message", "")).strip().splitlines()
            raise BadInput(
                f"pytest refuses the suite's selection ({self.words()}) in cell {self.cell_id}: {said[0] if said else 'a usage error'}; "
                "fix -k/-m (or the [tests] table's k/m)"
            )
        if kind in ("selection", "collected"):
            self.selection = self.selection or event  # "collected" alone: pytest stopped it after collecting (a node id not found)
        if kind == "collect_error" and found is not None:
            self.errors[found.scenario] = found.signature or found.status.value
        if kind == "worker_died" and found is not None:
            self.died = found
        if kind == "selection" and isinstance(event.get("tests"), list):
            self._record([str(t) for t in event["tests"]], self.errors)
        if found is not None:
            self.held.append(found)
        if kind == "collect_error" and not self.selection:
            return []
        ready, self.held = self.held, []
        self.outcomes += len(ready)
        return ready

    def end(self, empty: list[str], uncollected: list[str], *, stopped: bool) -> None:
        """After the suite's last event: held errors are already out (the child's "imported" comes
        last); a selection of no test noted on `empty`, no collection at all on `uncollected`."""
        if not stopped and self.died is not None and not self.selection:
            self._record([self.died.scenario], {self.died.scenario: self.died.signature or self.died.status.value})
        if stopped or self.outcomes:
            return
        if self.selection.get("event") == "selection" and not int(self.selection.get("selected", 0)):
            collected = int(self.selection.get("collected", 0))
            empty.append(f"{self.cell_id}: {self.words()} selects 0 of {collected} collected tests")
        elif not self.selection:
            uncollected.append(
                f"{self.cell_id}: pytest ended before it collected the suite (no test ran); "
                f"run `python -m pytest --collect-only` in {self.suite.root} with the cell's interpreter to see why"
            )

    def _record(self, tests: list[str], errors: dict[str, str]) -> None:
        if self.collected is None or self.recorded:
            return  # a worker started again after a crash collects the same selection
        self.recorded = True
        selection = {"paths": list(self.suite.paths), "k": self.suite.keyword, "m": self.suite.marker}
        self.collected(Collection(self.run_id, self.cell_id, selection, [*tests, *(e for e in errors if e not in tests)], dict(errors)))

    def words(self) -> str:
        """The selection as the command line gives it: -k 'x' -m 'y', else the paths."""
        flags = [f"{flag} {value!r}" for flag, value in (("-k", self.suite.keyword), ("-m", self.suite.marker)) if value]
        return " ".join(flags) or " ".join(self.suite.paths) or "the suite"


def _no_tests(run_id: str, cell_id: str, suite: Suite, why: str) -> Outcome:
    """The suite could not be had in this cell (no tag for its version): inconclusive, not a failure."""
    name = " ".join(suite.paths) or (f"{suite.source.package} tests" if suite.source else ".")
    said = Interpretation(Status.INCONCLUSIVE, why, None, "")
    raw = RawRun(record=None, exit_code=None, signal=None, timed_out=False, seconds=0.0, output_tail="")
    return outcome.scenario_outcome(run_id, cell_id, name, 0, said, raw, [])
