"""The flags several commands share, worded once: `--matrix`, `--db`, a pytest suite's flags, `--allow-empty`,
`--run-tag`, `--durations`, and what they become (a sweep's suite options, a results file to read).

A command's own flags live beside it (`commands/X.py`'s `add_parser`); these are the ones whose
help text and meaning must be the same wherever they appear, so `harness sweep --tests` and
`harness wheelhouse --tests` can never drift apart.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import BadInput

if TYPE_CHECKING:  # the sweep's machinery is imported where a command runs, not when the CLI starts
    from harness.running.sweep import SweepOptions

DEFAULT_MATRIX = Path("matrix.toml")
DEFAULT_DB = Path("results/compat.duckdb")


def add_matrix(p: argparse.ArgumentParser, help: str = "matrix file (default: matrix.toml)") -> None:
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help=help)


def add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help="DuckDB results file (default: results/compat.duckdb)")


def add_suite(p: argparse._ActionsContainer) -> None:
    """A team's pytest suite as the checks: what `sweep` runs and what `wheelhouse` prepares for."""
    p.add_argument(
        "--tests",
        nargs="+",
        default=[],
        metavar="PATH",
        help="run this pytest suite's tests, each node id one outcome (paths under --tests-root)",
    )
    p.add_argument("--tests-root", default="", help="the folder where you run pytest (its conftest.py and configuration apply; default .)")
    p.add_argument("--test-requirement", action="append", default=[], help="with --tests: a test dependency for every cell (repeatable)")
    p.add_argument(
        "--tests-of",
        default="",
        metavar="PACKAGE",
        help="run PACKAGE's own tests, from --tests-git at the tag of each cell's installed version",
    )
    p.add_argument(
        "--tests-git", default="", metavar="PATH_OR_URL", help="with --tests-of: the package's git repository (a clone, a mirror or a URL)"
    )


def suite_options(args: argparse.Namespace, options: SweepOptions | None = None) -> SweepOptions:
    """`add_suite`'s flags onto `options` (new ones for `args.matrix` when None)."""
    from harness.running.sweep import SweepOptions

    options = options or SweepOptions(args.matrix, Path())
    options.tests, options.tests_root, options.test_requirements = args.tests, args.tests_root, args.test_requirement
    options.tests_of, options.tests_git = args.tests_of, args.tests_git
    return options


def add_allow_empty(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="with a suite: a cell where -k/-m selects none of the collected tests does not fail the run "
        '(default: exit 1, "selects 0 of N collected tests"; the [tests] table\'s allow_empty = true)',
    )


def add_run_tag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-tag",
        default="",
        help="a scheduled run's own tag (the CI run's number), added to the default run id: each night runs afresh, its shards share it",
    )


def add_durations(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--durations",
        type=Path,
        default=None,
        metavar="FILE",
        help="with a suite: the results file (.duckdb or .jsonl) whose stored test seconds balance the shards, as pytest-split's "
        "durations do (default: the --db file; its runs other than this one; by count where none is stored)",
    )


def existing_duckdb(path: Path) -> str:
    """The --db of a command that reads outcomes: an existing DuckDB file, not a shard."""
    db = str(path)
    if path.suffix == ".jsonl":
        raise BadInput(f"--db {db!r} is a JSON-lines shard; bring it into a DuckDB store first: harness merge {db} --db store.duckdb")
    if not path.exists():
        raise BadInput(f"database {db!r} does not exist; run a sweep first or pass --db with an existing results file")
    return db
