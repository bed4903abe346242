"""nox sessions over the matrix: one session per cell, plus the whole sweep.

    nox -l                                  every cell of matrix.toml, by readable id
    nox -s torch2.13.0-tf5.6.2-acc1.13.0-peft0.19.1-bnb0.49.2    exactly one cell
    nox -s sweep                            every cell (same as `harness sweep`)
    nox -t cells                            every cell, one session each

Set HARNESS_MATRIX to use another matrix file. Arguments after `--` go to `harness sweep`
(e.g. `nox -s sweep -- --db results/mine.duckdb`). Each cell's virtualenv is created by nox's
uv backend (nox.virtualenv.VirtualEnv, venv_backend="uv") inside the harness, so sweep,
bisect and these sessions share one env-building path and one env per cell.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["sweep"]

MATRIX = Path(os.environ.get("HARNESS_MATRIX", "matrix.toml"))


def _cell_ids() -> list[str]:
    from harness.errors import HarnessError
    from harness.inputs.candidates import resolve_matrix
    from harness.inputs.matrix import load_matrix

    try:
        return [cell.id for cell in resolve_matrix(load_matrix(MATRIX, lenient=True)).cells]
    except HarnessError as exc:
        print(f"noxfile: no cell sessions: {exc}", file=sys.stderr)
        return []


def _harness(session: nox.Session, *args: str) -> None:
    session.run(sys.executable, "-m", "harness", *args, *session.posargs, external=True)


@nox.session(venv_backend="none")
def sweep(session: nox.Session) -> None:
    """Every cell of the matrix: build, run, store, summarise."""
    _harness(session, "sweep", "--matrix", str(MATRIX))


def _make_cell_session(cell_id: str) -> None:
    def run_cell(session: nox.Session) -> None:
        _harness(session, "sweep", "--matrix", str(MATRIX), "--cell", cell_id)

    run_cell.__doc__ = f"One cell: {cell_id}"
    nox.session(name=cell_id, venv_backend="none", tags=["cells"])(run_cell)


for _cell in _cell_ids():
    _make_cell_session(_cell)


@nox.session(venv_backend="none")
def dashboard(session: nox.Session) -> None:
    """The dashboard (Streamlit) over results/compat.duckdb, else the shipped results/default.duckdb; `-- --db FILE` for another."""
    _harness(session, "dashboard")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The test suite (the same command .ci/run runs)."""
    session.run("bash", ".ci/run", external=True)
