"""The answers `benchmarks/make_large_store.py` stores are those `harness attribute --offline` stores.

The benchmark files are read by every command and page measured over them: answers stored with
only the versions seen in the rows claimed "introduced in X (after Y)" where the file's release
lists say a release between was not built, and readers that trust stored answers (the dashboard,
the Support page) showed that claim while `harness attribute` gave a range.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[2]
STORED = "SELECT * EXCLUDE (computed_at) FROM transitions ORDER BY scope, seq"


@pytest.mark.parametrize("shape", [["--tests", "300", "--cells", "4"], ["--outcomes", "3000"]], ids=["suite", "scenarios"])
def test_the_made_files_answers_are_attributes(tmp_path: Path, shape: list[str]) -> None:
    db = tmp_path / "made.duckdb"
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), *shape, "--out", str(db)], check=True, capture_output=True
    )
    with duckdb.connect(str(db), read_only=True) as con:
        made = con.execute(STORED).fetchall()
        ranges = con.execute("SELECT count(*) FROM transitions WHERE how = 'range'").fetchone()
    assert made and ranges is not None and ranges[0] > 0  # a release between two tested ones was not built
    done = subprocess.run(
        [sys.executable, "-m", "harness", "attribute", "--offline", "--db", str(db)], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute(STORED).fetchall() == made
