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
    from harness.running.plan import SweepOptions

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
    from harness.running.plan import SweepOptions

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


# -- value types and defaults of the sweep's flags (and `harness plan`'s, which lays out its shards) --
def default_results_folder(db: Path) -> None:
    """The folder of the default --db (`results/`), made where it is missing, as pytest, nox and uv
    make theirs. Only the default's: a --db the user named in a missing folder may be a typo, and
    stays an error that says so."""
    if db is DEFAULT_DB:  # argparse hands the default object itself over when --db is not given
        db.parent.mkdir(parents=True, exist_ok=True)


def options_gpus(selected: str | None) -> int:
    """How many GPUs a sweep would use: those --gpus names, else every one nvidia-smi sees."""
    from harness.running import hostinfo

    return len([g for g in selected.split(",") if g.strip()]) if selected else len(hostinfo.gpus())


def parse_shard(text: str) -> tuple[int, int]:
    """ "2/4" -> (2, 4); anything else is bad input that names the fix."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise BadInput(f"--shard {text!r} must look like i/n, e.g. 1/4") from None
    if not 1 <= index <= count:
        raise BadInput(f"--shard {text!r}: i must be between 1 and n, e.g. 1/{max(count, 1)}")
    return index, count


def keep_seconds(text: str) -> float | str:
    """`--keep-servers SECONDS`: a number of seconds, 0 or more, or auto."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: give --keep-servers (or {KEEP_ENV}) seconds between 0 and 604800, e.g. 900, or auto")
    return value


def jobs_count(text: str) -> int | str:
    """`--jobs N` or `--jobs auto`."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of jobs, or auto") from None


def add_jobs(p: argparse.ArgumentParser) -> None:
    """How a sweep runs its cells on this machine: jobs, GPUs, preparing ahead, sharing the tail, the zygote, kept servers."""
    import os

    from harness.running import kept
    from harness.running.gpus import MAX_CPU_JOBS

    p.add_argument(
        "--jobs",
        type=jobs_count,
        default="auto",
        help="cells built and run at once; with GPUs each job gets one (CUDA_VISIBLE_DEVICES). Default auto: one job on a machine "
        f"with GPUs (every GPU for the lone job), else one per CPU core, at most {MAX_CPU_JOBS}",
    )
    p.add_argument("--gpus", default=None, help="GPU ids to use, e.g. 0,1 (default: every GPU nvidia-smi sees)")
    p.add_argument(
        "--no-lookahead",
        action="store_true",
        help="prepare each cell only when its turn comes (default: a job builds its next cell's env and fork server while it runs one)",
    )
    p.add_argument(
        "--no-tail-help",
        action="store_true",
        help="with --jobs > 1, an idle job never shares a running cell (default: once no cell is left, an idle job starts a "
        "second fork server for the running cell with the most time left and takes its scenarios too, where that saves time)",
    )
    p.add_argument(
        "--no-zygote",
        action="store_true",
        help="every cell's fork server imports torch and the matrix's preload itself (default: forked from one process per torch "
        "build that has imported torch, preloading what the cell's scenarios imported last time; matrix key `zygote`)",
    )
    p.add_argument(
        "--keep-servers",
        type=keep_seconds,
        default=os.environ.get(kept.KEEP_ENV, "auto"),
        metavar="SECONDS",
        help="keep each cell's fork server, with its imports, for the next sweep of the same cell on this machine, parked for "
        f"up to SECONDS idle (0: they exit with the sweep). Default auto: {kept.KEEP_WITH_GPUS:.0f} s on a machine with GPUs, "
        f"0 without (the default's default: {kept.KEEP_ENV}); see `harness servers`",
    )


#: `running.kept.KEEP_ENV`, named here so that every command's flags load without the runner.
KEEP_ENV = "HARNESS_KEEP_SERVERS"
