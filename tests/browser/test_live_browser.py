"""The dashboard in a real browser while a real sweep writes its results file: the page, opened
before the sweep started and never reloaded, shows the outcomes as they arrive and the sweep's
progress; the sweep completes with every outcome, stored once. Light cells (packaging as the
axis) and scenarios that take a second each, so the sweep lasts long enough to be watched."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from harness.storage.store import Store
from tests.browser.conftest import REPO, streamlit_command
from tests.browser.test_dashboard_browser import settle
from tests.conftest import run_cli
from tests.integration.test_sweep_light import write_matrix

SCENARIOS = 6
CELLS = ["23.2", "24.0"]
TOTAL = SCENARIOS * len(CELLS)


def banner_count(page: Any) -> int:
    text = page.get_by_text(re.compile(r"^Data: ")).first.inner_text()
    found = re.search(r"([\d,]+) outcomes", text)
    assert found, text
    return int(found[1].replace(",", ""))


def test_the_dashboard_follows_a_sweep_as_it_writes(
    browser: Any, launch: Callable[[list[str], int], str], port: int, tmp_path: Path, env_root: Path, screenshots: Path
) -> None:
    matrix = write_matrix(tmp_path / "matrix.toml", CELLS)
    scenarios = []
    for i in range(SCENARIOS):
        path = tmp_path / f"step{i}.py"
        path.write_text(f"import time\ntime.sleep(1.2)\nprint('step {i}')\n")
        scenarios.append(path)
    base = ["sweep", "--matrix", str(matrix), "--env-root", str(env_root), "--no-progress", "--no-refine"]
    sweep = [*base]
    for path in scenarios:
        sweep += ["--scenario", str(path)]
    warm = run_cli(*base, "--db", str(tmp_path / "warm.duckdb"), "--scenario", str(scenarios[0]))
    assert warm.returncode == 0, warm.stdout + warm.stderr  # the envs exist: the sweep below is all scenarios
    db = tmp_path / "live.duckdb"
    Store(db).close()  # an empty results file, opened in the dashboard before the sweep starts

    url = launch(streamlit_command(db, port), port)
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, base_url=url)
    page = context.new_page()
    page.set_default_timeout(45_000)
    try:
        page.goto("/")
        page.get_by_text("holds no outcomes yet").wait_for()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with (tmp_path / "sweep.log").open("wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "harness", *sweep, "--db", str(db)], cwd=REPO, stdout=log, stderr=log, env=env)
        seen: list[int] = []
        live_lines: list[str] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                count = banner_count(page)
            except Exception:  # between two reruns, or before the first outcome
                count = -1
            if count >= 0 and (not seen or count != seen[-1]):
                seen.append(count)
            for info in page.get_by_text(re.compile(r"^Live: a sweep is writing")).all():
                live_lines.append(info.inner_text())
            if proc.poll() is not None and seen and seen[-1] == TOTAL:
                break
            if len(seen) == 3:
                page.screenshot(path=str(screenshots / "live-sweep-in-progress.png"), full_page=True)
            time.sleep(0.5)
        assert proc.wait(timeout=60) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
        # Never reloaded: the page followed the sweep by itself, outcome by outcome (more or less).
        assert seen == sorted(seen) and seen[-1] == TOTAL, seen
        assert len([n for n in seen if 0 < n < TOTAL]) >= 2, seen
        assert any(re.search(r"\d+ done · \d+ running · \d+ left", line) for line in live_lines), live_lines[-3:]
        page.get_by_text(f"{TOTAL} outcomes").first.wait_for()
        settle(page)
        # It says so when the sweep is over: at the latest on the refresh after the run's end was recorded
        # (the last outcomes can show a refresh before it, on a loaded machine).
        page.get_by_text(re.compile(r"^Live: a sweep is writing")).first.wait_for(state="detached", timeout=30_000)
        page.screenshot(path=str(screenshots / "live-sweep-done.png"), full_page=True)
    finally:
        context.close()
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT count(*), count(DISTINCT (cell_id, scenario, repeat)) FROM outcomes").fetchone()
    con.close()
    assert rows == (TOTAL, TOTAL)
