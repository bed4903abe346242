"""A scenario runs inside its cell's env as if activated: `python`, `pip` and console scripts
are the cell's, not the host's (bitsandbytes shells out to `pip list` at import)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.running.envs import uv_binary
from harness.running.runner import CellRunner, activation

PROBE = """
import os, shutil, subprocess
print("python", shutil.which("python"))
print("pip", shutil.which("pip"))
print("venv", os.environ["VIRTUAL_ENV"])
print(subprocess.run("pip list | grep -i demo", shell=True, capture_output=True, text=True).stdout.strip())
"""


def _bare_env(root: Path) -> Path:
    """A real uv venv (no pip in it) holding one made-up distribution."""
    subprocess.run([uv_binary(), "venv", "--quiet", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    info = site / "demo_pkg-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2.3\n")
    (info / "RECORD").write_text("")
    (info / "INSTALLER").write_text("uv\n")
    return root / "bin" / "python"


def test_scenarios_see_the_cells_python_and_a_pip_that_lists_the_cell(tmp_path: Path) -> None:
    python = _bare_env(tmp_path / "env")
    scenario = tmp_path / "probe.py"
    scenario.write_text(PROBE)
    for isolation in ("fork", "process"):
        with CellRunner(str(python), isolation=isolation) as runner:
            raw = runner.run(scenario, timeout=60)
            tools = runner.tmp / "bin"
        lines = dict(line.split(" ", 1) for line in raw.output_tail.strip().splitlines()[:3])
        assert lines["python"] == str(python), isolation
        assert lines["pip"] == str(tools / "pip"), isolation
        assert lines["venv"] == str(tmp_path / "env"), isolation
        # uv's pip, bound to the cell: the made-up package is there, the host's are not
        assert raw.output_tail.strip().splitlines()[3].split() == ["demo-pkg", "1.2.3"], raw.output_tail


def test_a_python_outside_any_venv_leaves_path_alone(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert activation(str(tmp_path / "bin" / "python"), tmp_path / "tools", "/usr/bin") == {}
    assert not (tmp_path / "tools").exists()


def test_an_env_with_its_own_pip_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "bin" / "pip").write_text("")
    env = activation(str(tmp_path / "bin" / "python"), tmp_path / "tools", "/usr/bin")
    assert env == {"PATH": f"{tmp_path / 'bin'}:/usr/bin", "VIRTUAL_ENV": str(tmp_path)}
