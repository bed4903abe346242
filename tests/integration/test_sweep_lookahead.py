"""A job prepares its next cell (env build, fork-server preload) while it still runs one."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from harness.analysis.outcome import Outcome
from harness.inputs.matrix import Cell
from harness.running.envs import EnvResult
from harness.running.plan import SweepOptions, plan
from harness.running.schedule import Feed
from harness.running.sweep import Sweep, _close_runner, _Prepared
from harness.storage.opening import open_results as open_store
from tests.integration.test_sweep_light import write_matrix


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, cell: Cell) -> None:
        with self._lock:
            self.events.append((kind, cell.id))

    def start(self, total: int) -> None: ...
    def cell_started(self, cell: Cell) -> None:
        self._add("started", cell)

    def env_built(self, cell: Cell, env: EnvResult) -> None: ...
    def scenario_started(self, cell: Cell, scenario: str, repeat: int) -> None: ...
    def outcome(self, outcome: Outcome, cell: Cell) -> None:
        self._add("outcome", cell)

    def finish(self) -> None: ...


@pytest.mark.parametrize("lookahead", [True, False])
def test_the_next_cell_is_prepared_while_this_one_runs(tmp_path: Path, env_root: Path, lookahead: bool) -> None:
    matrix = write_matrix(tmp_path / "m.toml", ["23.2", "24.0", "24.1"])
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(1.5)\nprint('done')\n")
    options = SweepOptions(matrix=matrix, db=tmp_path / "out.jsonl", scenarios=[str(slow)], env_root=env_root)
    options.lookahead = lookahead
    recorder = Recorder()
    with open_store(options.db) as store:
        outcomes = Sweep(plan(options), store, recorder).run()
    assert [o.status.value for o in outcomes] == ["pass"] * 3
    cells = [cell for kind, cell in recorder.events if kind == "started"]
    assert len(cells) == 3
    # with lookahead, cell k+1 starts (is prepared) before cell k's only scenario has finished;
    # without (--no-lookahead), only after
    for k in range(2):
        before = recorder.events.index(("started", cells[k + 1])) < recorder.events.index(("outcome", cells[k]))
        assert before is lookahead
    # and outcomes still come in cell order
    assert [cell for kind, cell in recorder.events if kind == "outcome"] == cells


class FakeRunner:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _prepared(name: str) -> _Prepared:
    return _Prepared(cell=name, todo=[], env=None, runner=FakeRunner())  # type: ignore[arg-type]


def test_the_feed_prepares_ahead_in_order_but_never_more_than_ahead() -> None:
    started: list[str] = []
    most = [0]
    taken = [0]

    def prepare(cell: str, todo: list) -> _Prepared:  # type: ignore[type-arg]
        started.append(cell)
        most[0] = max(most[0], len(started) - taken[0])
        return _prepared(cell)

    feed = Feed([(c, []) for c in "abcde"], lambda item: prepare(*item), ahead=1, dispose=_close_runner)
    got = []
    while (item := feed.next()) is not None:
        time.sleep(0.05)  # "running" the cell: the next one is prepared meanwhile
        assert started[-1] == min("e", chr(ord(item.cell) + 1))  # type: ignore[arg-type]
        taken[0] += 1
        got.append(item.cell)
    assert got == list("abcde") and started == list("abcde")
    assert most[0] <= 2  # the one running and at most one prepared ahead


def test_any_job_takes_the_next_prepared_cell() -> None:
    # two jobs; whichever asks first gets the next cell: a prepared cell is never bound to a
    # job that is still busy while another sits idle
    feed = Feed([(c, []) for c in "abc"], lambda item: _prepared(item[0]), ahead=2, dispose=_close_runner)
    first, second = feed.next(), feed.next()
    assert {first.cell, second.cell} == {"a", "b"}  # type: ignore[union-attr]
    third: list[object] = []
    t = threading.Thread(target=lambda: third.append(feed.next()))
    t.start()
    t.join(5)
    assert third and third[0].cell == "c"  # type: ignore[attr-defined]
    assert feed.next() is None


def test_a_failed_preparation_reaches_the_job_and_close_frees_what_is_left() -> None:
    made: dict[str, _Prepared] = {}

    def prepare(cell: str, todo: list) -> _Prepared:  # type: ignore[type-arg]
        if cell == "b":
            raise RuntimeError("the fork server did not start")
        made[cell] = _prepared(cell)
        return made[cell]

    feed = Feed([(c, []) for c in "abc"], lambda item: prepare(*item), ahead=1, dispose=_close_runner)
    assert feed.next() is made["a"]
    with pytest.raises(RuntimeError, match="fork server"):
        feed.next()
    for _ in range(100):  # "c" is prepared ahead, in the background
        if "c" in made:
            break
        time.sleep(0.02)
    time.sleep(0.1)
    feed.close()  # the sweep stops: nobody will take "c"
    assert feed.next() is None
    assert made["c"].runner.closed  # type: ignore[union-attr]
    assert not made["a"].runner.closed  # type: ignore[union-attr]  # taken: its job closes it


FAKE_TORCH = "import types\ncuda = types.SimpleNamespace(is_initialized=lambda: False)\n"
# "initialises CUDA" at import, as bitsandbytes does on a GPU; counts its imports in a file
GREEDY = """
import os, torch
with open(os.environ["GREEDY_LOG"], "a") as log:
    log.write("imported\\n")
torch.cuda.is_initialized = lambda: True
"""


def test_cuda_culprits_are_remembered_across_cells_and_sweeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text(FAKE_TORCH)
    (fake / "greedy_lib.py").write_text(GREEDY)
    log = tmp_path / "greedy.log"
    monkeypatch.setenv("PYTHONPATH", str(fake))
    monkeypatch.setenv("GREEDY_LOG", str(log))
    matrix = write_matrix(tmp_path / "m.toml", ["23.2", "24.0"])
    matrix.write_text(matrix.read_text().replace("preload = []", 'preload = ["torch", "greedy_lib"]'))
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nassert 'greedy_lib' not in sys.modules\n")
    env_root = tmp_path / "envs"

    def sweep(run_id: str) -> list[str]:
        options = SweepOptions(matrix=matrix, db=tmp_path / f"{run_id}.jsonl", scenarios=[str(probe)], env_root=env_root, run_id=run_id)
        with open_store(options.db) as store:
            return [o.status.value for o in Sweep(plan(options), store).run()]

    assert sweep("first") == ["pass", "pass"]
    # found once, in the first cell's server; the second cell never tried it
    assert log.read_text().count("imported") == 1
    assert sweep("second") == ["pass", "pass"]
    assert log.read_text().count("imported") == 1  # the next sweep on this env root knew already


def test_the_helper_takes_a_server_started_before_it_was_idle(tmp_path: Path, env_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real sweep does what `schedule.Tail`'s scripts say (tests/unit/test_schedule.py).
    # Every fork server takes 2 s to start: it preloads a module that sleeps. Cell 1's
    # scenarios take 0.5 s, cells 2 and 3's 1 s. Job A ends cell 1 first and takes cell 3, the
    # last: the feed is empty, so a second server for cell 3 starts then, in the background.
    # When job B ends cell 2 about 3 s later it shares cell 3 at once, instead of idling 2 s
    # while a server starts (by when cell 3's own job would have taken what was left).
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "slow_start.py").write_text("import time\ntime.sleep(2)\n")
    monkeypatch.setenv("PYTHONPATH", str(modules))
    matrix = write_matrix(tmp_path / "m.toml", ["23.2", "24.0", "24.1"])
    matrix.write_text(matrix.read_text().replace("preload = []", 'preload = ["slow_start"]'))
    scenarios = []
    for i in range(6):
        path = tmp_path / f"slow_{i}.py"
        path.write_text(
            "import os, time\nfrom importlib.metadata import version\n"
            "time.sleep(0.5 if version('packaging') == '23.2' else 1.0)\nprint(os.getppid())\n"
        )
        scenarios.append(str(path))
    options = SweepOptions(matrix=matrix, db=tmp_path / "out.jsonl", scenarios=scenarios, env_root=env_root)
    options.jobs = 2
    options.zygote = False  # learned preloads (zygotes' companions) would drop slow_start once learned
    # a spare starts ahead only on a core no job uses: a machine of 16 cores, as the GPU runner
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    with open_store(options.db) as store:
        sweep = Sweep(plan(options), store)
        outcomes = sweep.run()
    assert [o.status.value for o in outcomes] == ["pass"] * 18
    assert "tail help: 1 server(s) (1 started ahead, 0 unused)" in sweep.timing_line()
    by_cell: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_cell.setdefault(o.cell_id[-4:], []).append(o)
    servers = {cell: {o.output_tail.strip() for o in rows} for cell, rows in by_cell.items()}
    assert {cell: len(pids) for cell, pids in servers.items()} == {"23.2": 1, "24.0": 1, "24.1": 2}
    own = by_cell["24.1"][0].output_tail.strip()  # cell 3's first scenario ran on its own server
    helper = [o for o in by_cell["24.1"] if o.output_tail.strip() != own]
    started = [datetime.fromisoformat(o.started_at).timestamp() for o in helper]
    cell2_end = max(datetime.fromisoformat(o.started_at).timestamp() + o.seconds for o in by_cell["24.0"])
    # the helper's first scenario began as job B went idle, not a server start (2 s) later
    assert min(started) - cell2_end < 1.0, (min(started) - cell2_end, len(helper))
