"""One error base for the harness; `main()` turns each into one line and an exit code."""

from __future__ import annotations

#: Exit codes. Bad input is 2 (nothing was written); a run that could not finish is 1; a run
#: stopped by Ctrl-C is 130 and by SIGTERM 143 (the shell's 128 + signal; rerun to resume).
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class HarnessError(Exception):
    """Base class. The message is one line that names the bad value and the fix."""

    exit_code = EXIT_RUN_FAILED


class BadInput(HarnessError, ValueError):
    """The user's input (matrix file, flags, paths) is wrong; nothing has been written."""

    exit_code = EXIT_BAD_INPUT


class MatrixError(BadInput):
    """A matrix file with one or more mistakes; all of them are reported at once."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        joined = "; ".join(problems)
        super().__init__(f"{source}: {len(problems)} problem(s): {joined}")


class StoreError(BadInput):
    """The results database path is unusable (not writable, not a DuckDB file)."""


class MemoryLimit(StoreError):
    """DuckDB needed more memory than the harness lets it have (`HARNESS_DUCKDB_MEMORY`) and could not spill."""


class RunFailed(HarnessError):
    """The harness itself could not complete (not a scenario failing: that is an outcome)."""


class StoreLocked(StoreError):
    """Another process kept DuckDB's lock on the results file for longer than the harness waits."""
