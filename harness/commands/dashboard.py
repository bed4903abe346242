"""`harness dashboard`: the Streamlit pages (dashboard/app.py) over a results file, opened read-only.

Without --db it opens results/compat.duckdb where a sweep wrote it, else the shipped sample; on
POSIX the harness becomes the Streamlit server (exec), so a signal to it reaches the server.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK, BadInput


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="browse a results file in the browser: matrix, failures, one cell, two cells, pin (Streamlit)",
        description="Start the Streamlit dashboard (dashboard/app.py) over a results file, opened read-only. "
        "Without --db: results/compat.duckdb if a sweep wrote it, else the shipped sample results/default.duckdb. "
        "See docs/dashboard.md.",
    )
    p.add_argument("--db", type=Path, default=None, help="results file (default: results/compat.duckdb, else results/default.duckdb)")
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default: 8501)")
    p.add_argument("--address", default="127.0.0.1", help="address to serve on (default: 127.0.0.1; 0.0.0.0 to share it)")
    p.add_argument("--headless", action="store_true", help="do not open a browser (servers, CI)")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.inputs import bundled

    db = args.db or (flags.DEFAULT_DB if flags.DEFAULT_DB.exists() else bundled.sample_db())
    if db is None:
        raise BadInput(f"no results file: {str(flags.DEFAULT_DB)!r} does not exist here; run `harness sweep` first or pass --db FILE")
    flags.existing_duckdb(db)
    app = bundled.dashboard_app()
    if importlib.util.find_spec("streamlit") is None:
        raise BadInput(
            "streamlit is not installed; add the dashboard extra: uv tool install --force 'compat-harness[dashboard]' "
            "(pipx: pipx inject compat-harness streamlit; a checkout: pip install -e '.[dev]')"
        )
    command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port), "--server.address", args.address]
    command += ["--server.headless", "true" if args.headless else "false", "--browser.gatherUsageStats", "false", "--", "--db", str(db)]
    console.print(f"dashboard over {db} (read-only) at http://{args.address}:{args.port}  (Ctrl+C stops it)")
    sys.stdout.flush()
    if os.name == "posix":
        os.execv(sys.executable, command)  # become the server: a signal to this process reaches it
    try:
        return subprocess.run(command).returncode
    except KeyboardInterrupt:
        return EXIT_OK
