"""`harness servers [--stop]`: the fork servers `harness sweep --keep-servers` parked on this machine.

Each waits, with its cell's imports, for the next sweep of its cell until it has been idle for
the seconds it was kept for (`running/kept.py`); `--stop` ends them now.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console

from harness.errors import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("servers", help="the fork servers `sweep --keep-servers` kept on this machine, waiting for the next sweep")
    p.add_argument("--stop", action="store_true", help="end them now")


def run(args: argparse.Namespace, console: Console) -> int:
    """The fork servers kept by `sweep --keep-servers`; with --stop, end them."""
    from harness.running import kept

    kept.usable_dir()
    servers = kept.parked()
    if not servers:
        console.print("no fork server is kept")
        return EXIT_OK
    for server in servers:
        left = max(0.0, server.parked_at + server.idle - time.time())
        if args.stop:
            done = "stopped" if kept.stop(server.path) else "already gone"
            console.print(f"pid {server.pid} {server.prefix}: {done}", highlight=False)
        else:
            console.print(f"pid {server.pid} {server.prefix}: parked, exits in {left:.0f} s unless a sweep takes it", highlight=False)
    return EXIT_OK
