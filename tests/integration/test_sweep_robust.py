"""Resume after kill -9, secrets never stored, env problems as outcomes, git and inherit axes,
and the nox sessions — each through real envs, processes and DuckDB files."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb

from tests.conftest import REPO, git_package, run_cli


def _matrix(path: Path, axes: str, extra: str = "") -> Path:
    path.write_text(f'[matrix]\npython = "3.11"\npreload = []\ntimeout = 60\n{extra}\n[axes]\n{axes}\n')
    return path


def _rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# -- kill -9 and resume -------------------------------------------------------------------


def test_kill_9_at_any_moment_then_rerun_leaves_exactly_one_outcome_per_key(tmp_path: Path, env_root: Path) -> None:
    scen = tmp_path / "scen"
    scen.mkdir()
    names = []
    for i in range(8):
        (scen / f"s{i}.py").write_text("import time\ntime.sleep(0.15)\nprint('done')\n")
        names.append(str(scen / f"s{i}.py"))
    matrix = _matrix(tmp_path / "m.toml", 'packaging = ["23.2", "24.0"]', "repeats = 2")
    db = tmp_path / "k.duckdb"
    args = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--matrix",
        str(matrix),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
        "--no-progress",
    ]
    for n in names:
        args += ["--scenario", n]
    expected = 2 * 8 * 2
    rng = random.Random(1234)
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
        time.sleep(rng.uniform(0.3, 3.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        if db.exists():
            # the database opens after every kill, and never holds a key twice
            assert _rows(
                db, "SELECT count(*) FROM (SELECT run_id, cell_id, scenario, repeat FROM outcomes GROUP BY ALL HAVING count(*) > 1)"
            ) == [(0,)]
    assert kills >= 1
    final = run_cli(*args[3:])
    assert final.returncode == 0, final.stderr
    assert _rows(db, "SELECT count(*), count(DISTINCT (cell_id, scenario, repeat)) FROM outcomes") == [(expected, expected)]
    assert _rows(db, "SELECT DISTINCT status FROM outcomes") == [("pass",)]


# -- secrets --------------------------------------------------------------------------------

SECRET_VALUES = {"HF_TOKEN": "hf_TopSecretValue123456", "MY_SERVICE_API_KEY": "key-abcdef-987654", "S3_SECRET": "s3-SeCrEt-42"}


def test_secrets_reach_the_scenario_but_are_never_stored(tmp_path: Path, env_root: Path) -> None:
    scenario = tmp_path / "leaky.py"
    scenario.write_text(
        textwrap.dedent("""
        import os, sys
        from _kit import metric
        token = os.environ["HF_TOKEN"]          # the child does receive the secret
        print("using token", token)
        print("key", os.environ["MY_SERVICE_API_KEY"], file=sys.stderr)
        metric("token_length", len(token))
        raise RuntimeError(f"401 Unauthorized for token {token} and {os.environ['S3_SECRET']}")
    """)
    )
    matrix = _matrix(tmp_path / "m.toml", 'packaging = ["24.0"]')
    db = tmp_path / "s.duckdb"
    proc = run_cli(
        "sweep",
        "--matrix",
        str(matrix),
        "--db",
        str(db),
        "--env-root",
        str(env_root),
        "--scenario",
        str(scenario),
        "--no-progress",
        env=SECRET_VALUES,
    )
    assert proc.returncode == 0, proc.stderr
    status, message, tail = _rows(db, "SELECT status, message, output_tail FROM outcomes")[0]
    assert status == "error"
    assert "401 Unauthorized for token ***" in message
    assert "using token ***" in tail
    assert _rows(db, "SELECT metrics->>'token_length' FROM outcomes") == [(str(len(SECRET_VALUES["HF_TOKEN"])),)]
    con = duckdb.connect(str(db), read_only=True)
    dump = json.dumps([con.execute(f"SELECT * FROM {t}").fetchall() for t in ("runs", "cells", "outcomes")], default=str)
    con.close()
    raw = db.read_bytes() + (db.with_suffix(".duckdb.wal").read_bytes() if db.with_suffix(".duckdb.wal").exists() else b"")
    for value in SECRET_VALUES.values():
        assert value not in dump
        assert value.encode() not in raw
        assert value not in proc.stdout + proc.stderr


# -- environment problems are outcomes -------------------------------------------------------


def test_unresolvable_and_install_failed_are_outcomes_and_the_sweep_goes_on(tmp_path: Path, env_root: Path) -> None:
    broken = tmp_path / "brokenpkg"
    broken.mkdir()
    (broken / "setup.py").write_text("raise SystemExit('this package cannot be built')\n")
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    # requests 2.31.0 needs urllib3>=1.21.1: pinning 1.20 cannot resolve
    matrix = _matrix(tmp_path / "m.toml", 'requests = ["2.31.0"]\nurllib3 = ["1.20", "2.0.7"]')
    db = tmp_path / "e.duckdb"
    proc = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    rows = dict(_rows(db, "SELECT cell_id, status FROM outcomes"))
    assert rows == {"requests2.31.0-urllib31.20": "unresolvable", "requests2.31.0-urllib32.0.7": "pass"}
    message, signature = _rows(db, "SELECT message, signature FROM outcomes WHERE status = 'unresolvable'")[0]
    assert "urllib3" in message and "No solution found" in message  # the resolver's own words
    assert signature.startswith("unresolvable:")

    matrix2 = _matrix(tmp_path / "m2.toml", f'brokenpkg = ["{broken}"]')
    db2 = tmp_path / "e2.duckdb"
    proc = run_cli(
        "sweep", "--matrix", str(matrix2), "--db", str(db2), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    status, message = _rows(db2, "SELECT status, message FROM outcomes")[0]
    assert status == "install_failed"
    assert "cannot be built" in message


# -- git and inherit ------------------------------------------------------------------------


def test_git_axis_records_the_exact_commit(tmp_path: Path, env_root: Path) -> None:
    repo = tmp_path / "tinypkg"
    head = git_package(repo, [("ANSWER = 1\n", "one"), ("ANSWER = 2\n", "two (#3976)")])[-1]
    scenario = tmp_path / "answer.py"
    scenario.write_text("import tinypkg\nassert tinypkg.ANSWER == 2, tinypkg.ANSWER\n")
    matrix = _matrix(tmp_path / "m.toml", f'tinypkg = ["git+file://{repo}@main"]')
    db = tmp_path / "g.duckdb"
    proc = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    status, commits, installed = _rows(
        db, "SELECT o.status, c.git_commits, c.installed FROM outcomes o JOIN cells c USING (run_id, cell_id)"
    )[0]
    assert status == "pass"
    assert json.loads(commits) == {"tinypkg": head}
    assert json.loads(installed)["tinypkg"].endswith(f"@{head}")


def test_inherit_takes_the_base_interpreters_package_even_when_the_base_is_a_venv(tmp_path: Path, env_root: Path) -> None:
    from harness.running.envs import uv_binary

    base = tmp_path / "base"
    subprocess.run([uv_binary(), "venv", "-q", "--python", "3.11", str(base)], check=True)
    subprocess.run([uv_binary(), "pip", "install", "-q", "--python", str(base / "bin/python"), "packaging==23.2", "idna==3.6"], check=True)
    scenario = tmp_path / "where.py"
    scenario.write_text(
        textwrap.dedent(f"""
        import packaging, importlib.metadata as m
        assert m.version("packaging") == "23.2", m.version("packaging")
        assert packaging.__file__.startswith({str(base)!r}), packaging.__file__
        import requests  # the env's own packages are installed as usual
    """)
    )
    matrix = tmp_path / "m.toml"
    matrix.write_text(f'[matrix]\npython = "{base / "bin/python"}"\npreload = []\n[axes]\npackaging = ["inherit"]\nrequests = ["2.32.3"]\n')
    db = tmp_path / "i.duckdb"
    proc = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    status, message, inherited, installed = _rows(
        db, "SELECT o.status, o.message, c.inherited, c.installed FROM outcomes o JOIN cells c USING (run_id, cell_id)"
    )[0]
    assert status == "pass", message
    assert json.loads(inherited) == {"packaging": "23.2"}
    assert json.loads(installed)["packaging"] == "23.2"
    assert json.loads(installed)["idna"] == "3.6"  # preferred from the base, not the newest release


# -- nox ------------------------------------------------------------------------------------


def test_nox_lists_every_cell_and_runs_exactly_one(tmp_path: Path, env_root: Path) -> None:
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    matrix = _matrix(tmp_path / "m.toml", 'packaging = ["23.2", "24.0"]')
    env = {**os.environ, "HARNESS_MATRIX": str(matrix), "PYTHONPATH": str(REPO)}
    nox = [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py")]
    listed = subprocess.run([*nox, "-l"], capture_output=True, text=True, env=env, cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    assert "packaging23.2" in listed.stdout and "packaging24.0" in listed.stdout
    db = tmp_path / "n.duckdb"
    ran = subprocess.run(
        [*nox, "-s", "packaging24.0", "--", "--db", str(db), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert _rows(db, "SELECT cell_id, status FROM outcomes") == [("packaging24.0", "pass")]


# -- timeouts kill the whole process group ------------------------------------------------


def test_timeout_kills_grandchildren_too(tmp_path: Path, env_root: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    scenario = tmp_path / "spawner.py"
    scenario.write_text(
        textwrap.dedent(f"""
        import subprocess, time
        TIMEOUT = 3
        child = subprocess.Popen(["sleep", "600"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    )
    matrix = _matrix(tmp_path / "m.toml", 'packaging = ["24.0"]')
    db = tmp_path / "t.duckdb"
    proc = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--scenario", str(scenario), "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    assert _rows(db, "SELECT status FROM outcomes") == [("timeout",)]
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # a zombie reaped by init is gone soon; a live `sleep 600` would stay
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return
        time.sleep(0.2)
    raise AssertionError(f"grandchild {pid} survived the timeout")


# -- period-correct resolution ---------------------------------------------------------------


def test_period_resolution_gets_the_transitive_deps_of_the_time(tmp_path: Path, env_root: Path) -> None:
    scenario = tmp_path / "ok.py"
    scenario.write_text("print('ok')\n")
    # packaging 20.0 (January 2020) depends on pyparsing with no upper bound: today that is
    # pyparsing 3.x, in January 2020 it was 2.4.x
    db = tmp_path / "p.duckdb"
    for extra, name in (('exclude_newer = "period"', "period"), ("", "latest")):
        matrix = _matrix(tmp_path / f"{name}.toml", 'packaging = ["20.0"]', extra)
        proc = run_cli(
            "sweep",
            "--matrix",
            str(matrix),
            "--db",
            str(db),
            "--env-root",
            str(env_root),
            "--scenario",
            str(scenario),
            "--no-progress",
            "--run-id",
            name,
        )
        assert proc.returncode == 0, proc.stderr
    found = dict(_rows(db, "SELECT run_id, installed->>'pyparsing' FROM cells"))
    assert found["period"].startswith("2.4."), found
    assert int(found["latest"].split(".")[0]) >= 3, found
