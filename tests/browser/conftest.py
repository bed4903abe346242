"""A real dashboard server and a real browser: Debian's chromium, driven by Playwright.

Skips (with the reason) when /usr/bin/chromium or the playwright package is missing; CI
installs the browser with dashboard/install_browser.sh. Playwright's own browser downloads
are never used. Screenshots go to artifacts/screenshots/ (kept as test artifacts).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"streamlit did not answer at {url} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def dashboard_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped results file: real outcomes, and no lock shared with anyone."""
    target = tmp_path_factory.mktemp("browser") / "default.duckdb"
    shutil.copy(REPO / "results" / "default.duckdb", target)
    return target


@contextmanager
def serving(command: list[str], port: int, log: Path) -> Iterator[str]:
    """Run a dashboard server until the block ends; yields its URL once /_stcore/health answers."""
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def streamlit_command(db: Path, port: int) -> list[str]:
    command = [sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "app.py")]
    command += ["--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1"]
    return [*command, "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", "--", "--db", str(db)]


@pytest.fixture(scope="session")
def server(dashboard_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    port = _free_port()
    with serving(streamlit_command(dashboard_db, port), port, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def shipped_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server on the shipped results/default.duckdb itself (opened read-only), so that pictures name it as users see it."""
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    port = _free_port()
    db = Path("results") / "default.duckdb"  # relative to the server's folder, the checkout: the banner shows this
    with serving(streamlit_command(db, port), port, tmp_path_factory.mktemp("streamlit") / "shipped.log") as url:
        yield url


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[list[str], int], str]]:
    """Start a server with any command line (e.g. `harness dashboard`); stopped after the test."""
    with ExitStack() as stack:
        yield lambda command, port: stack.enter_context(serving(command, port, tmp_path / f"server-{port}.log"))


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install it with dashboard/install_browser.sh (as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing: pip install -e '.[dev]'")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, server: str, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, accept_downloads=True, base_url=server)
    tab = context.new_page()
    tab.set_default_timeout(45_000)
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture
def port() -> int:
    return _free_port()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
