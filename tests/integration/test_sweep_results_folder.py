"""`harness sweep --tests tests/` in a new project (#49 item 3): the default results file's folder
is made, as pytest, nox and uv make theirs; a --db the user named in a missing folder stays an
error (it may be a typo), one line, exit 2, nothing made.

One light cell (packaging 24.0, pytest installed for the suite), through the real CLI.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli

MATRIX = """
[matrix]
python = "3.11"
timeout = 30

[axes]
packaging = ["24.0"]
"""


def _project(folder: Path) -> Path:
    """A project as `harness init` leaves it before its first sweep: a matrix and a suite, no results/."""
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_one.py").write_text("import packaging\n\n\ndef test_imports():\n    assert packaging.__version__\n")
    (folder / "matrix.toml").write_text(MATRIX)
    return folder


def test_the_default_results_folder_is_made(tmp_path: Path, env_root: Path) -> None:
    project = _project(tmp_path / "project")
    proc = run_cli("sweep", "--tests", "tests/", "--env-root", str(env_root), "--no-progress", "--no-refine", cwd=project)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    assert (project / "results" / "compat.duckdb").is_file()
    assert "1 outcome(s) computed" in proc.stdout


def test_a_db_in_a_folder_the_user_named_stays_an_error(tmp_path: Path, env_root: Path) -> None:
    project = _project(tmp_path / "project")
    proc = run_cli("sweep", "--tests", "tests/", "--db", "reslts/compat.duckdb", "--env-root", str(env_root), "--no-progress", cwd=project)
    assert proc.returncode == 2, proc.stderr + proc.stdout[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "folder 'reslts' does not exist; create it or pass --db with another path" in lines[0], proc.stderr
    assert sorted(p.name for p in project.iterdir()) == ["matrix.toml", "tests"]  # nothing made, results/ included
