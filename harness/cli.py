"""`harness`: the front door. It parses the command line, hands it to one command, and turns an
error into one line and an exit code.

Each command lives beside its work as `harness/commands/<name>.py`, offering `add_parser(sub)`
(its flags and help) and `run(args, console)` (what it does, its exit status), as pip's and
nox's commands do; this module only registers them (`COMMANDS`) and frames the run: SIGTERM as
an orderly stop, the run's scratch folder, the console's width, the cycle collector's pace.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, cast

from rich.console import Console

from harness import __version__
from harness.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, HarnessError
from harness.render.summary import WIDTH

#: Every command, in the order `harness --help` lists them; each is the module `harness/commands/<name>.py`.
COMMANDS = (
    "sweep", "servers", "list", "scenarios", "summary", "changes", "explain", "compact", "attribute", "pin", "report", "publish",
    "merge", "wheelhouse", "plan", "bisect", "refine", "dashboard", "init", "watch",
)  # fmt: skip


class Command(Protocol):
    """What a command's module offers the front door."""

    def add_parser(self, sub: argparse._SubParsersAction) -> None: ...
    def run(self, args: argparse.Namespace, console: Console) -> int: ...


def command(name: str) -> Command:
    """The module of one command, imported when it is needed: `harness summary` never loads the
    sweep's runner, and a runner's `harness sweep` never loads DuckDB."""
    return cast(Command, importlib.import_module(f"harness.commands.{name}"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with `only`, that command's alone and the others by name (parsing
    `harness <only> …` needs nothing else of them; their help comes with `harness --help`)."""
    parser = argparse.ArgumentParser(
        prog="harness", description="Version-matrix compatibility harness for torch, transformers, accelerate, peft and bitsandbytes."
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        if only is None or name == only:
            command(name).add_parser(sub)
        else:
            sub.add_parser(name)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's time limit, `timeout`, a cancelled CI job), raised in the main thread."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def console_width(compact: bool, tty: bool, columns: str) -> int | None:
    """A terminal's own width (None: rich asks it, COLUMNS first). Piped output (CI logs, files):
    the summary fits COLUMNS if it is set, else 100 columns; --wide and other commands get 200."""
    if tty:
        return None
    if not compact:
        return 200
    return int(columns) if columns.isdigit() and int(columns) >= 20 else WIDTH


#: Commands that read a file, answer, print and end: as the process, they end without freeing what
#: they read one object at a time (`_exit_now`).
ONE_SHOT = ("summary", "attribute", "pin", "report", "publish")


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI. argv None: this process is the command (`python -m harness`, the `harness` script);
    given, a caller's (tests call it in-process), which gets the exit code back, always."""
    script = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    # A command comes first (the only other words are -h and --version): only its module is needed.
    args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    # The same orderly stop as Ctrl-C: running scenarios are killed (they live in their own
    # sessions, which the scheduler's signal does not reach) and nothing half-done is stored.
    signal.signal(signal.SIGTERM, _terminate)
    # Every temporary folder of this run in one, gone when it ends; dead runs' gone now.
    from harness.running import scratch

    scratch.claim()
    compact = args.command in ("sweep", "summary") and not getattr(args, "wide", False)
    console = Console(width=console_width(compact, sys.stdout.isatty(), os.environ.get("COLUMNS", "")))
    one_shot = script and args.command in ONE_SHOT
    if one_shot:
        from harness.workflows import answering

        answering.hold_until_exit()
    with paced_collector():
        code = _run(args, console)
    if one_shot:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End the process as `sys.exit` would, less the freeing of every object one by one: over a
    suite's answers (255,000 rows, 78,000 transitions) that took 0.3-0.6 s of a 5 s summary. The
    output is flushed and the exit handlers run (this run's scratch folder goes) first."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        atexit._run_exitfuncs()
        os._exit(code)


@contextmanager
def paced_collector() -> Iterator[None]:
    """The cycle collector at a command's pace, restored after (for callers in-process).

    A command holds a results file's outcomes, 400,000 dicts for a team's suite, and makes
    thousands of objects more per step of an answer. At the collector's default pace its full
    collections walked them all again and again: 1.2 s of a 20,000-test summary, 0.4 s at this
    one (`gc.callbacks`). They hold no cycles: reference counting frees them.
    """
    pace = gc.get_threshold()
    gc.set_threshold(50_000, 20, 10)
    try:
        yield
    finally:
        gc.set_threshold(*pace)


def _run(args: argparse.Namespace, console: Console) -> int:
    try:
        return command(args.command).run(args, console)
    except HarnessError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("harness: stopped by SIGTERM; rerun the same command to resume", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("harness: interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
