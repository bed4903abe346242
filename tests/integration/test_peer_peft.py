"""The peer check in small, on a suite nobody here wrote: peft's own tests at tag v0.20.0, from a
git mirror of huggingface/peft fetched at run time, through `harness sweep --tests-of peft`, and
the same selection under plain `python -m pytest` in the same env: every node id's status must
be what pytest says. Skips without the mirror (HARNESS_PEFT_MIRROR, default the session's
/work/.mirror/huggingface+peft/repo) or the local CPU torch wheel. The full check (650 tests × 4
transformers releases, 3 repeats, timed) is benchmarks/bench_testsuite.py; its data lives in
results/peer/peft-0.20.0/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import duckdb
import pytest

from harness.running.testsuite import parse_verbose, pytest_word
from tests.conftest import REPO, run_cli

MIRROR = Path(os.environ.get("HARNESS_PEFT_MIRROR", "/work/.mirror/huggingface+peft/repo"))
WHEELS = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
SLICE = "(test_forward_output_finite or test_merge_layers_is_idempotent) and (Lily or IA3)"


def _has_tag() -> bool:
    git = ["git", "-C", str(MIRROR), "rev-parse", "--verify", "--quiet", "refs/tags/v0.20.0"]
    return MIRROR.exists() and subprocess.run(git, capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not _has_tag() or not list(WHEELS.glob("torch-*.whl")),
    reason="needs a git mirror of huggingface/peft with tag v0.20.0 (HARNESS_PEFT_MIRROR) and the CPU torch wheel",
)


def test_peft_own_tests_statuses_equal_plain_pytest(tmp_path: Path) -> None:
    matrix = (REPO / "matrices" / "peft-own-tests.toml").read_text()
    matrix = matrix.replace('["5.6.2", "5.13.1", "5.17.0", "5.23.0"]', '["5.23.0"]')
    matrix = matrix.replace('k = "test_forward_output_finite or test_merge_layers_is_idempotent"', f"k = {SLICE!r}".replace("'", '"'))
    (tmp_path / "m.toml").write_text(matrix)
    db, envs = tmp_path / "out.duckdb", tmp_path / "envs"
    proc = run_cli(
        "sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(db), "--env-root", str(envs), "--no-progress", "--tests-git", str(MIRROR)
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.sql("SELECT scenario, status, coalesce(message, '') FROM outcomes").fetchall()
    harness = {node: pytest_word(status, message) for node, status, message in rows}

    (python,) = envs.glob("*/bin/python")
    (checkout,) = (envs / "suites" / "tests").glob("peft-0.20.0-*")
    assert not (checkout / "src").exists()  # the tests and the configuration, never peft's source
    plain = subprocess.run(
        [str(python), "-m", "pytest", "tests/test_custom_models.py", "-k", SLICE, "-v", "-p", "no:cacheprovider"],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    said = parse_verbose(plain.stdout)
    assert len(said) > 50, plain.stdout[-2000:]
    assert harness == said
    assert {"PASSED", "SKIPPED"} <= set(said.values())  # Lily's merge skip is in the slice
