"""Parallel cells, deterministic shards and scheduler plans, through the real CLI."""

from __future__ import annotations

import json
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
