"""Parallel cells, deterministic shards and scheduler plans, through the real CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb

from tests.conftest import run_cli

VERSIONS = ["23.2", "24.0", "24.1", "24.2", "25.0"]


def _setup(tmp_path: Path) -> tuple[Path, list[str]]:
    matrix = tmp_path / "m.toml"
    quoted = ", ".join(f'"{v}"' for v in VERSIONS)
    matrix.write_text(f"[matrix]\npreload = []\n[axes]\npackaging = [{quoted}]\n")
    scenarios = []
    for name, body in (
        ("ok", "import packaging\nprint(packaging.__version__)\n"),
        ("bad", "raise KeyError(1)\n"),
        ("two_gpus", "REQUIRES = {'gpus': 2}\n"),
    ):
        path = tmp_path / f"{name}.py"
        path.write_text(body)
        scenarios += ["--scenario", str(path)]
    return matrix, scenarios


def _rows(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT cell_id, scenario, repeat, status, output_tail FROM outcomes ORDER BY ALL").fetchall()
    con.close()
    return rows


def test_parallel_jobs_give_the_same_outcomes_as_serial(tmp_path: Path, env_root: Path) -> None:
    matrix, scenarios = _setup(tmp_path)
    serial, parallel = tmp_path / "serial.duckdb", tmp_path / "parallel.duckdb"
    for db, jobs in ((serial, "1"), (parallel, "3")):
        proc = run_cli(
            "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--jobs", jobs, *scenarios
        )
        assert proc.returncode == 0, proc.stderr
    assert _rows(serial) == _rows(parallel)
    assert len(_rows(parallel)) == len(VERSIONS) * 3
    # each cell really ran its own release
    assert {(r[0], r[4].strip()) for r in _rows(parallel) if r[1] == "ok"} == {(f"packaging{v}", v) for v in VERSIONS}


def test_shards_partition_the_cells_and_merge_back(tmp_path: Path, env_root: Path) -> None:
    matrix, scenarios = _setup(tmp_path)
    shards = []
    for i in (1, 2, 3):
        shard = tmp_path / f"shard-{i}.jsonl"
        proc = run_cli(
            "sweep",
            "--matrix",
            str(matrix),
            "--db",
            str(shard),
            "--env-root",
            str(env_root),
            "--no-progress",
            "--shard",
            f"{i}/3",
            *scenarios,
        )
        assert proc.returncode == 0, proc.stderr
        shards.append(shard)
    cells_per_shard = [{json.loads(line)["cell_id"] for line in s.read_text().splitlines() if '"type": "cell"' in line} for s in shards]
    assert sum(len(c) for c in cells_per_shard) == len(VERSIONS)
    assert set().union(*cells_per_shard) == {f"packaging{v}" for v in VERSIONS}
    db = tmp_path / "merged.duckdb"
    proc = run_cli("merge", "--db", str(db), *map(str, shards))
    assert proc.returncode == 0, proc.stderr
    assert len(_rows(db)) == len(VERSIONS) * 3


def test_bad_shard_is_bad_input(tmp_path: Path) -> None:
    matrix, scenarios = _setup(tmp_path)
    proc = run_cli("sweep", "--matrix", str(matrix), "--db", str(tmp_path / "x.duckdb"), "--shard", "4/3", *scenarios)
    assert proc.returncode == 2 and "--shard '4/3'" in proc.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_plan_for_github_actions_and_slurm(tmp_path: Path) -> None:
    matrix, _ = _setup(tmp_path)
    proc = run_cli("plan", "--matrix", str(matrix), "--shards", "2", "--format", "github-actions")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [e["shard"] for e in plan["include"]] == ["1/2", "2/2"]
    assert sum(e["cells"] for e in plan["include"]) == len(VERSIONS)
    slurm = run_cli("plan", "--matrix", str(matrix), "--shards", "2", "--format", "slurm").stdout
    assert "#SBATCH --array=1-2" in slurm and '--shard "$SLURM_ARRAY_TASK_ID/2"' in slurm


def _visible(tmp_path: Path, *args: str) -> dict[tuple[str, str], tuple[str, str]]:
    """Run a sweep whose scenarios print what GPUs and threads they were given."""
    matrix = tmp_path / "m.toml"
    matrix.write_text('[matrix]\npreload = []\n[axes]\npackaging = ["23.2", "24.0", "24.1", "24.2"]\n')
    show = "import os\nprint(os.environ.get('CUDA_VISIBLE_DEVICES', '-'), os.environ.get('OMP_NUM_THREADS', '-'))\n"
    scenarios = []
    for name, head in (("one_gpu", "REQUIRES = {'gpus': 1}\n"), ("two_gpus", "REQUIRES = {'gpus': 2}\n")):
        (tmp_path / f"{name}.py").write_text(head + show)
        scenarios += ["--scenario", str(tmp_path / f"{name}.py")]
    db = tmp_path / "gpus.duckdb"
    proc = run_cli("sweep", "--matrix", str(matrix), "--db", str(db), "--no-progress", *args, *scenarios)
    assert proc.returncode == 0, proc.stderr
    return {(r[0], r[1]): (r[3], r[4].strip()) for r in _rows(db)}


def test_each_job_gets_its_own_gpu_and_a_share_of_the_cores(tmp_path: Path, env_root: Path) -> None:
    seen = _visible(tmp_path, "--env-root", str(env_root), "--gpus", "0,1", "--jobs", "2")
    one = {cell: out for (cell, scenario), out in seen.items() if scenario == "one_gpu"}
    assert all(status == "pass" for status, _ in one.values())
    gpus = {out.split()[0] for _, out in one.values()}
    assert gpus == {"0", "1"}  # both GPUs used, one each
    import os

    assert {out.split()[1] for _, out in one.values()} == {str(max(1, (os.cpu_count() or 1) // 2))}
    # the two-GPU scenario waits for both GPUs, in every cell
    two = [out for (cell, scenario), out in seen.items() if scenario == "two_gpus"]
    assert len(two) == 4 and all(status == "pass" and out.split()[0] == "0,1" for status, out in two)


def test_gpus_narrows_a_serial_sweep(tmp_path: Path, env_root: Path) -> None:
    seen = _visible(tmp_path, "--env-root", str(env_root), "--gpus", "1")
    assert {out for (_, s), (status, out) in seen.items() if s == "one_gpu"} == {"1 -"}
    # one GPU visible: the two-GPU scenario is not applicable rather than run on one
    assert {status for (_, s), (status, _) in seen.items() if s == "two_gpus"} == {"not_applicable"}


def _tail_sweep(tmp_path: Path, env_root: Path, label: str, *extra: str) -> tuple[list[tuple], float]:
    """Three cells on two jobs: the third cell runs alone at the end unless an idle job helps it."""
    matrix = tmp_path / "tail.toml"
    matrix.write_text('[matrix]\npreload = []\n[axes]\npackaging = ["23.2", "24.0", "24.1"]\n')
    scenarios = []
    for i in range(6):
        path = tmp_path / f"slow_{i}.py"
        # the fork server's pid: which server of its cell ran the scenario
        path.write_text("import os, time\ntime.sleep(1.0)\nprint(os.getppid())\n")
        scenarios += ["--scenario", str(path)]
    db = tmp_path / f"tail-{label}.duckdb"
    started = time.monotonic()
    proc = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--jobs", "2", *extra, *scenarios
    )
    assert proc.returncode == 0, proc.stderr
    return _rows(db), time.monotonic() - started


def test_an_idle_job_shares_the_last_cell_and_the_outcomes_stay_the_same(tmp_path: Path, env_root: Path) -> None:
    _tail_sweep(tmp_path, env_root, "warm", "--no-tail-help")  # envs built, page cache warm: both timed sweeps reuse them
    alone, alone_wall = _tail_sweep(tmp_path, env_root, "alone", "--no-tail-help")
    helped, helped_wall = _tail_sweep(tmp_path, env_root, "helped")
    servers = {mode: {} for mode in ("alone", "helped")}
    for mode, rows in (("alone", alone), ("helped", helped)):
        for cell, _, _, _, tail in rows:
            servers[mode].setdefault(cell, set()).add(tail.strip())
    assert [r[:4] for r in alone] == [r[:4] for r in helped]  # same cells, scenarios and statuses
    assert {r[3] for r in helped} == {"pass"} and len(helped) == 18
    # without help every cell has one fork server; with it, one cell was run by two
    assert all(len(pids) == 1 for pids in servers["alone"].values())
    assert sorted(len(pids) for pids in servers["helped"].values()) == [1, 1, 2]
    # 12 s of scenarios on two jobs: the tail alone is 6 s, shared about 3 s
    assert helped_wall < alone_wall - 1.5, (helped_wall, alone_wall)
