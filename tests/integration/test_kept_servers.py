"""Fork servers kept between sweeps (`harness/running/kept.py`): real interpreters, real Unix
sockets, real `harness sweep` runs. A kept server must serve the next sweep of its cell as a
fresh one would (that sweep's folder, variables and lifeline), and never a cell whose files or
environment differ."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.running import kept
from harness.running.runner import CellRunner
from tests.conftest import REPO, run_cli
from tests.integration.test_sweep_light import EXPECTED, outcomes, write_matrix, write_scenarios

WHERE = """
import json, os, sys
mods = sorted(m for m in ("slow_lib", "extra_lib") if m in sys.modules)
print(json.dumps({"server": os.getppid(), "cwd": os.getcwd(), "cell": os.environ.get("HARNESS_CELL_DIR"),
                  "path0": os.environ["PATH"].split(os.pathsep)[0], "mods": mods}))
"""


@pytest.fixture
def kept_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private socket folder per test; whatever parked there is stopped after."""
    folder = tmp_path / "kept"
    monkeypatch.setenv(kept.KEPT_DIR_ENV, str(folder))
    yield folder
    for server in kept.parked():
        kept.stop(server.path)


@pytest.fixture(scope="module")
def cell_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real virtualenv (no pip: the in-cell package needs the standard library only)."""
    env = tmp_path_factory.mktemp("cellenv") / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    return str(env / "bin" / "python")


def _libs(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "slow_lib.py").write_text("import time\ntime.sleep(1.0)\n")
    (tmp_path / "extra_lib.py").write_text("")
    (tmp_path / "where.py").write_text(WHERE)
    return {"PYTHONPATH": str(tmp_path)}


def _run(python: str, tmp_path: Path, env: dict[str, str], preload: list[str], keep: float = 60) -> tuple[dict, CellRunner]:
    with CellRunner(python, preload=preload, env=env, keep=keep) as runner:
        raw = runner.run(tmp_path / "where.py", timeout=30)
        assert raw.record == {"status": "pass"}, raw.output_tail
        seen = json.loads(raw.output_tail)
        seen["runner_tmp"] = str(runner.tmp)
        seen["runner_path0"] = runner.env["PATH"].split(os.pathsep)[0]
    return seen, runner


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process ended (a zombie counts: a plain server is this test's unreaped child)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_the_next_runner_of_the_cell_takes_the_kept_server_in_its_own_folder(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    env = _libs(tmp_path)
    first, runner1 = _run(cell_python, tmp_path, env, ["slow_lib"])
    assert (runner1.server.starts, runner1.server.kept_taken) == (1, 0)
    assert [p.pid for p in kept.parked()] == [first["server"]]
    second, runner2 = _run(cell_python, tmp_path, env, ["slow_lib"])
    assert (runner2.server.starts, runner2.server.kept_taken) == (0, 1)
    assert second["server"] == first["server"]
    assert runner2.server.kept_seconds < 1.0  # slow_lib's second of import was not paid again
    # the scenario runs where a fresh server of this runner would have put it
    assert second["cwd"] == second["runner_tmp"] != first["cwd"]
    assert second["cell"] == os.path.join(second["runner_tmp"], "cell")
    assert second["path0"] == second["runner_path0"]  # its PATH (the pip shim in its folder), not the first's
    assert second["mods"] == ["slow_lib"]


def test_what_the_new_preload_adds_is_imported_at_attach(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    env = _libs(tmp_path)
    first, _ = _run(cell_python, tmp_path, env, ["slow_lib"])
    second, runner = _run(cell_python, tmp_path, env, ["slow_lib", "extra_lib"])
    assert second["server"] == first["server"]
    assert runner.server.preloaded == ["slow_lib", "extra_lib"]
    assert list(runner.server.preload_seconds) == ["extra_lib"]  # only what it lacked
    assert second["mods"] == ["extra_lib", "slow_lib"]


def test_another_environment_or_other_files_get_another_server(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    env = _libs(tmp_path)
    first, _ = _run(cell_python, tmp_path, env, ["slow_lib"])
    other_var, _ = _run(cell_python, tmp_path, {**env, "OMP_NUM_THREADS": "3"}, ["slow_lib"])
    assert other_var["server"] != first["server"]  # read at import by torch: part of the key
    # a distribution installed into the env since: its server is not the cell's any more
    site = next(Path(cell_python).parent.parent.glob("lib/python*/site-packages"))
    info = site / "newdist-1.0.dist-info"
    info.mkdir()
    try:
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: newdist\nVersion: 1.0\n")
        (info / "RECORD").write_text("")
        rebuilt, runner = _run(cell_python, tmp_path, env, ["slow_lib"])
    finally:
        for f in info.iterdir():
            f.unlink()
        info.rmdir()
    assert rebuilt["server"] not in (first["server"], other_var["server"])
    assert runner.server.kept_taken == 0


def test_a_parked_server_exits_when_idle_for_its_time(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    first, _ = _run(cell_python, tmp_path, _libs(tmp_path), [], keep=1)
    assert _gone(first["server"])
    assert kept.parked() == []
    assert list(kept_dir.glob("*.sock")) == []


def test_a_parked_server_no_sweep_can_reach_exits(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    """Its socket removed (a cleaned temp folder): it goes within seconds, not after its 600."""
    first, _ = _run(cell_python, tmp_path, _libs(tmp_path), [], keep=600)
    assert not _gone(first["server"], within=0.5)
    for sock in kept_dir.glob("*.sock"):
        sock.unlink()
    assert _gone(first["server"], within=15)


def test_the_scenario_of_a_kept_server_dies_with_the_sweep_that_attached(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    """kill -9 of the second sweep mid-scenario: its lifeline, handed over at attach, ends the
    scenario and the server, as for a server it started."""
    env = _libs(tmp_path)
    first, _ = _run(cell_python, tmp_path, env, [])
    pid_file = tmp_path / "scenario.pid"
    (tmp_path / "hang.py").write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from harness.running.runner import CellRunner
        with CellRunner({cell_python!r}, preload=[], env={env!r}, keep=60) as runner:
            runner.run(Path({str(tmp_path / "hang.py")!r}), timeout=600)
    """)
    sweep = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and sweep.poll() is None, "the scenario never started"
            time.sleep(0.05)
        scenario = int(pid_file.read_text())
        assert kept.parked() == []  # taken: no other sweep can find it meanwhile
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
        assert _gone(scenario), "the scenario outlived the sweep that ran it"
        assert _gone(first["server"]), "the server outlived the sweep that held it"
    finally:
        if sweep.poll() is None:
            sweep.kill()


def test_a_module_that_initialises_cuda_at_attach_restarts_the_server_without_it(kept_dir: Path, cell_python: str, tmp_path: Path) -> None:
    env = _libs(tmp_path)
    (tmp_path / "torch.py").write_text("import types\ncuda = types.SimpleNamespace(is_initialized=lambda: False)\n")
    (tmp_path / "greedy_lib.py").write_text("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    first, _ = _run(cell_python, tmp_path, env, ["torch"])
    second, runner = _run(cell_python, tmp_path, env, ["torch", "greedy_lib"])
    assert runner.server.cuda_culprits == ["greedy_lib"]
    assert second["server"] != first["server"]  # the kept one imported it, so it could not serve
    assert runner.server.preloaded == ["torch"]


def test_two_sweeps_keep_their_servers_and_store_the_same_outcomes(kept_dir: Path, tmp_path: Path, env_root: Path) -> None:
    """The real CLI: the second sweep takes both cells' servers, every failure mode of the light
    cells ends as it did (a scenario that hung, crashed or flooded left its server usable), and
    `harness servers --stop` ends them."""
    matrix = write_matrix(tmp_path / "matrix.toml", ["23.2", "24.0"])
    scenarios = write_scenarios(tmp_path / "scen")
    # the default folder: in the system's temp directory, not in the sweep's scratch folder there
    # (which goes when the sweep ends)
    temp = Path(tempfile.mkdtemp(prefix="kt-", dir="/tmp"))  # short: a socket's path holds 107 bytes
    extra = {kept.KEPT_DIR_ENV: "", "XDG_RUNTIME_DIR": "", "TMPDIR": str(temp)}
    folder = temp / f"compat-harness-{os.getuid()}"
    runs = []
    for name in ("one", "two"):
        args = ["sweep", "--matrix", str(matrix), "--db", str(tmp_path / f"{name}.duckdb"), "--env-root", str(env_root)]
        args += ["--no-progress", "--keep-servers", "120", *[a for s in scenarios for a in ("--scenario", s)]]
        proc = run_cli(*args, env=extra)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        runs.append(proc.stdout)
    assert "kept from an earlier sweep" not in runs[0]
    assert "2 fork server(s) parked on this machine for the next sweep of their cells, each until 120 s idle" in runs[0]
    assert "kept from an earlier sweep" in runs[1] and "(2)" in runs[1].split("kept from an earlier sweep")[1][:20]
    one, two = outcomes(tmp_path / "one.duckdb"), outcomes(tmp_path / "two.duckdb")
    assert {k: (r["status"], r["signature"]) for k, r in one.items()} == {k: (r["status"], r["signature"]) for k, r in two.items()}
    assert {r["status"] for (_, s), r in two.items() if s in EXPECTED} == set(EXPECTED.values())
    assert len(list(folder.glob("*.sock"))) == 2
    listed = run_cli("servers", env=extra)
    assert listed.returncode == 0 and listed.stdout.count("parked, exits in") == 2, listed.stdout
    stopped = run_cli("servers", "--stop", env=extra)
    assert stopped.stdout.count("stopped") == 2, stopped.stdout
    assert run_cli("servers", env=extra).stdout.strip() == "no fork server is kept"
    shutil.rmtree(temp)


def test_bad_keep_values_and_a_shared_socket_folder_are_refused(tmp_path: Path) -> None:
    bad = run_cli("sweep", "--keep-servers", "-5", "--no-progress")
    assert bad.returncode == 2 and "'-5': give --keep-servers (or HARNESS_KEEP_SERVERS) seconds between 0 and 604800" in bad.stderr
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    proc = run_cli("servers", env={kept.KEPT_DIR_ENV: str(open_dir)})
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("harness: error: cannot keep fork servers:") and "0o777" in proc.stderr
    deep = tmp_path / ("d" * 100)
    proc = run_cli("sweep", "--keep-servers", "60", "--no-progress", env={kept.KEPT_DIR_ENV: str(deep)})
    assert proc.returncode == 2 and "too long for a socket's path" in proc.stderr and not deep.exists()
