"""A sweep into a JSON-lines shard (no DuckDB needed on the runner), then merged twice: no duplicates, nothing lost."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests.conftest import run_cli


def test_shards_merge_without_duplicates_or_loss(tmp_path: Path, env_root: Path) -> None:
    ok = tmp_path / "ok.py"
    ok.write_text("print('ok')\n")
    bad = tmp_path / "bad.py"
    bad.write_text("raise KeyError('sliding_attention')\n")
    matrix = tmp_path / "m.toml"
    matrix.write_text('[matrix]\npreload = []\n[axes]\npackaging = ["23.2", "24.0"]\n')
    shard_a, shard_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for shard, cell in ((shard_a, "packaging23.2"), (shard_b, "packaging24.0")):
        proc = run_cli(
            "sweep",
            "--matrix",
            str(matrix),
            "--db",
            str(shard),
            "--env-root",
            str(env_root),
            "--cell",
            cell,
            "--scenario",
            str(ok),
            "--scenario",
            str(bad),
            "--no-progress",
        )
        assert proc.returncode == 0, proc.stderr
    # a shard is plain JSON lines a human can read
    kinds = [json.loads(line)["type"] for line in shard_a.read_text().splitlines()]
    assert kinds.count("outcome") == 2 and kinds.count("cell") == 1
    # a line cut short by a kill -9 is skipped, not fatal
    with shard_b.open("a") as fh:
        fh.write('{"type": "outcome", "run_id": "r-trunc')
    db = tmp_path / "merged.duckdb"
    for _ in range(2):  # merging the same shards twice adds nothing the second time
        proc = run_cli("merge", "--db", str(db), str(shard_a), str(shard_b))
        assert proc.returncode == 0, proc.stderr
    assert "0 duplicate key(s)" in proc.stdout
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT installed->>'packaging', scenario, status, NULLIF(signature, '') FROM outcomes_v ORDER BY ALL").fetchall()
    con.close()
    assert rows == [
        ("23.2", "bad", "error", "KeyError: <key>"),
        ("23.2", "ok", "pass", None),
        ("24.0", "bad", "error", "KeyError: <key>"),
        ("24.0", "ok", "pass", None),
    ]
    # a DuckDB file merges into another one the same way
    db2 = tmp_path / "again.duckdb"
    proc = run_cli("merge", "--db", str(db2), str(db), str(db))
    assert proc.returncode == 0, proc.stderr
    assert "4 current outcome(s), 0 history row(s), 0 duplicate key(s)" in proc.stdout


def test_merge_of_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    proc = run_cli("merge", "--db", str(tmp_path / "x.duckdb"), str(tmp_path / "absent.jsonl"))
    assert proc.returncode == 2
    assert "absent.jsonl" in proc.stderr
    assert not (tmp_path / "x.duckdb").exists()
