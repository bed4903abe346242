"""Shards on a real Slurm (#29): `harness plan --format slurm`, `sbatch`, the array sweeps the
shards, the job its first task submits merges and refines. The merged results equal the same
sweep run serially, outcome by outcome (cell, scenario or node id, repeat, status, signature);
an array task ended mid-run by `scancel --signal=TERM` and resubmitted resumes, with nothing
lost or duplicated. Scenario cells, and a suite whose cells are cut into test shards.

The cluster (`slurm_cluster.start`) is munge, slurmctld and slurmd on localhost, one node with
this machine's CPUs; where it cannot start, these tests skip and say why.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO, run_cli
from tests.integration import slurm_cluster
from tests.integration.slurm_cluster import Cluster

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the local Slurm is Debian's slurm-wlm")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    if isinstance(started, str):
        pytest.skip(f"no local Slurm: {started}")
    try:
        yield started
    finally:
        started.stop()


def _env() -> dict[str, str]:
    """What the jobs inherit (sbatch exports the submitter's environment): this interpreter's `harness` first."""
    return {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO)}


def _keys(db: Path, run: str | None = None) -> dict[tuple[str, str, int], tuple[str, str]]:
    """(cell, scenario or node id, repeat) -> (status, signature) of the matrix's cells (not refinement's probes)."""
    con = duckdb.connect(str(db), read_only=True)
    where = "WHERE c.origin = 'matrix'" + (f" AND o.run_id = '{run}'" if run else "")
    rows = con.execute(
        f"SELECT o.cell_id, o.scenario, o.repeat, o.status, coalesce(o.signature, '') FROM outcomes o "
        f"JOIN cells c ON c.run_id = o.run_id AND c.cell_id = o.cell_id {where}"
    ).fetchall()
    con.close()
    found = {(r[0], r[1], r[2]): (r[3], r[4]) for r in rows}
    assert len(found) == len(rows), "a key stored twice"
    return found


def _outcomes(shard: Path) -> list[dict]:
    return [r for r in (json.loads(line) for line in shard.read_text().splitlines() if line.strip()) if r.get("type") == "outcome"]


def _submit(cluster: Cluster, work: Path, script: Path, *extra: str) -> str:
    proc = cluster.run("sbatch", "--parsable", *extra, str(script), cwd=work)
    return proc.stdout.strip().split(";")[0]


def _stop_mid_run(cluster: Cluster, work: Path, job: str, task: int, seen: int = 1) -> None:
    """TERM to array task `task` once its shard holds `seen` outcomes, as a time limit would send."""
    shard = work / "results" / f"shard-{task}.jsonl"
    deadline = time.monotonic() + 300
    while not (shard.exists() and len(_outcomes(shard)) >= seen):
        assert time.monotonic() < deadline, f"task {task} stored nothing in 300 s: {cluster.queue()}"
        time.sleep(0.2)
    # (scancel may exit non-zero where the signal reached the batch step as the job ended; the log tells)
    cluster.run("scancel", "--signal=TERM", "--full", f"{job}_{task}", check=False)


SCENARIOS = {
    "ok.py": "print('ok')\n",
    "slow.py": "import time\ntime.sleep(3)\nprint('slow')\n",
    # passes on packaging 23.x, fails from 24.0: the range 23.0 -> 24.0 is one the merge job refines (23.1, 23.2 between)
    "old_only.py": "import packaging\nassert packaging.__version__.startswith('23'), 'packaging ' + packaging.__version__\n",
}
MATRIX = '[matrix]\npython = "3.11"\ntimeout = 60\npreload = []\n[axes]\npackaging = ["23.0", "25.0", "24.0"]\n'


def test_scenario_cells_through_slurm_equal_the_serial_sweep_and_a_stopped_task_resumes(
    cluster: Cluster, tmp_path: Path, env_root: Path
) -> None:
    work = tmp_path / "project"
    work.mkdir()
    (work / "m.toml").write_text(MATRIX)
    flags = []
    for name, body in SCENARIOS.items():
        (work / name).write_text(body)
        flags += ["--scenario", name]
    serial = run_cli("sweep", "--matrix", "m.toml", "--db", "serial.duckdb", "--env-root", str(env_root), *flags, "--no-progress", cwd=work)
    assert serial.returncode == 0, serial.stderr + serial.stdout[-2000:]

    plan = run_cli("plan", "--matrix", "m.toml", "--shards", "2", "--format", "slurm", "--env-root", str(env_root), *flags, cwd=work)
    assert plan.returncode == 0, plan.stderr
    script = work / "sweep.sbatch"
    script.write_text(plan.stdout)
    env = _env()
    job = cluster.run("sbatch", "--parsable", f"--export=ALL,PATH={env['PATH']},PYTHONPATH={env['PYTHONPATH']}", str(script), cwd=work)
    array = job.stdout.strip()
    _stop_mid_run(cluster, work, array, 1)  # shard 1: packaging 23.0 and 24.0, three scenarios each (one of 3 s)
    cluster.wait_empty()
    stopped = _outcomes(work / "results" / "shard-1.jsonl")
    assert 0 < len(stopped) < 6, "the TERM came mid-run"
    log = next(work.glob(f"slurm-compat-{array}_1.log")).read_text()
    assert "stopped by SIGTERM; rerun the same command to resume" in log

    # the resubmitted task resumes: the stored outcomes are not run again; its own merge job follows
    again = _submit(cluster, work, script, f"--export=ALL,PATH={env['PATH']},PYTHONPATH={env['PYTHONPATH']}", "--array=1")
    cluster.wait_empty()
    resumed = next(work.glob(f"slurm-compat-{again}_1.log")).read_text()
    assert f"{6 - len(stopped)} outcome(s) computed, {len(stopped)} already stored (resumed)" in resumed, resumed[-1500:]
    merged = work / "results" / "compat.duckdb"
    assert _keys(merged) == _keys(work / "serial.duckdb", None) != {}
    # the merge job refined the range: probes between 23.0 and 24.0 ran only old_only, the scenario whose answer was a range
    con = duckdb.connect(str(merged), read_only=True)
    refined = "SELECT DISTINCT o.scenario FROM outcomes o JOIN cells c USING (run_id, cell_id) WHERE c.origin = 'refine'"
    probes = con.execute(refined).fetchall()
    con.close()
    assert probes == [("old_only",)]


SUITE = """import time

import pytest

SECONDS = [2.0, 1.5, 1.0] + [0.1] * 9


@pytest.mark.parametrize("i", range(len(SECONDS)))
def test_work(i):
    time.sleep(SECONDS[i])
    assert i != 4, "four fails"
"""


def test_a_suite_in_test_shards_through_slurm_equals_the_serial_sweep(cluster: Cluster, tmp_path: Path, env_root: Path) -> None:
    work = tmp_path / "project"
    (work / "suite" / "tests").mkdir(parents=True)
    (work / "suite" / "tests" / "test_work.py").write_text(SUITE)
    (work / "m.toml").write_text('[matrix]\npython = "3.11"\ntimeout = 60\npreload = []\n[axes]\npackaging = ["23.2", "24.0"]\n')
    suite = ["--tests", "tests", "--tests-root", "suite"]
    serial = run_cli("sweep", "--matrix", "m.toml", "--db", "serial.duckdb", "--env-root", str(env_root), *suite, "--no-progress", cwd=work)
    assert serial.returncode == 0, serial.stderr + serial.stdout[-2000:]

    # 2 cells in 4 shards: each cell cut in two, balanced by the serial run's stored seconds
    # (another run id, so that they count: the run being swept never balances itself)
    args = ["--matrix", "m.toml", "--shards", "4", "--env-root", str(env_root), "--durations", "serial.duckdb", "--run-id", "sharded"]
    plan = run_cli("plan", *args, *suite, "--format", "slurm", cwd=work)
    assert plan.returncode == 0, plan.stderr
    assert plan.stderr.count("a slice of its tests") == 4 and "expected" in plan.stderr
    script = work / "sweep.sbatch"
    script.write_text(plan.stdout)
    env = _env()
    export = f"--export=ALL,PATH={env['PATH']},PYTHONPATH={env['PYTHONPATH']}"
    array = _submit(cluster, work, script, export)
    _stop_mid_run(cluster, work, array, 2)
    cluster.wait_empty()
    stopped = _outcomes(work / "results" / "shard-2.jsonl")
    assert "stopped by SIGTERM; rerun the same command to resume" in next(work.glob(f"slurm-compat-{array}_2.log")).read_text()
    again = _submit(cluster, work, script, export, "--array=2")
    cluster.wait_empty()
    log = next(work.glob(f"slurm-compat-{again}_2.log")).read_text()
    assert f", {len(stopped)} already stored (resumed)" in log, log[-1500:]

    shards = [_outcomes(work / "results" / f"shard-{i}.jsonl") for i in range(1, 5)]
    assert all(shards), "every shard ran some of the tests"
    ids = [(r["cell_id"], r["scenario"]) for shard in shards for r in shard]
    assert len(ids) == len(set(ids)) == 24, "each test of each cell in exactly one shard, once"
    merged = work / "results" / "compat.duckdb"
    last = max(work.glob("slurm-compat-*-merge.log"), key=lambda p: int(p.name.split("-")[2])).read_text()
    assert "0 duplicate key(s)" in last and "refinement: no range between tested releases to narrow" in last, last
    serial_keys = _keys(work / "serial.duckdb")
    assert _keys(merged, "sharded") == serial_keys and len(serial_keys) == 24
