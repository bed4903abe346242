"""The dashboard in a real browser: every page loads, a click in the matrix opens the cell, a pin downloads.

Over a copy of the shipped results/default.duckdb (the default CPU sweep). Each test leaves a
screenshot in artifacts/screenshots/.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

PAGES = [("/", "Matrix"), ("/failures", "Failures"), ("/cell", "Cell"), ("/compare", "Compare"), ("/pin", "Pin"), ("/support", "Support")]
PIN_SCENARIO = "gemma4_lora_inner_linear"  # passes in every cell of the default sweep


def settle(page: Any) -> None:
    """Wait until the script run is over and every element has replaced its loading skeleton."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]')
    page.wait_for_function("() => document.querySelectorAll('[data-testid=stSkeleton]').length === 0")


def open_page(page: Any, path: str, title: str) -> float:
    began = time.monotonic()
    page.goto(path)
    page.get_by_role("heading", name=title, level=1).wait_for()
    settle(page)
    return time.monotonic() - began


@pytest.mark.parametrize(("path", "title"), PAGES)
def test_every_page_loads_and_names_its_data(page: Any, screenshots: Path, path: str, title: str) -> None:
    seconds = open_page(page, path, title)
    banner = page.get_by_text(re.compile(r"^Data: ")).first.inner_text()
    assert "default.duckdb" in banner and "outcomes" in banner
    assert not page.locator('[data-testid="stException"]').count(), page.locator('[data-testid="stException"]').first.inner_text()
    page.screenshot(path=str(screenshots / f"page-{title.lower()}.png"), full_page=True)
    assert seconds < 30, f"{title} took {seconds:.1f} s to load"


def test_clicking_a_matrix_table_cell_opens_that_cell(page: Any, screenshots: Path) -> None:
    open_page(page, "/", "Matrix")
    page.get_by_text("Table: one row per cell").click()  # the old table, under the heatmap
    settle(page)
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.wait_for()
    # The grid is a canvas; its accessible mirror holds the text of each cell (column 0 = torch).
    page.wait_for_selector("#glide-cell-5-0", state="attached")
    first_row = page.evaluate("() => [0, 1, 2, 3, 4].map(i => document.getElementById(`glide-cell-${i}-0`).textContent)")
    scenario = page.evaluate("() => document.querySelector('[role=columnheader][aria-colindex=\"6\"]').textContent")
    box = grid.bounding_box()
    # Five pinned axis columns of 75 px, then the scenarios (125 px each): click the first scenario of row 1.
    page.mouse.click(box["x"] + 5 * 75 + 60, box["y"] + 35 + 17)
    page.wait_for_url(re.compile(r"/cell\?"))
    page.get_by_role("heading", name="Cell", level=1).wait_for()
    settle(page)
    _, transformers, accelerate, peft, bnb = first_row
    assert f"tf{transformers}-acc{accelerate}-peft{peft}-bnb{bnb}" in page.url
    assert f"scenario={scenario}" in page.url
    chosen = page.get_by_role("combobox", name="cell").input_value()
    assert f"tf{transformers}-acc{accelerate}-peft{peft}-bnb{bnb}" in chosen
    page.screenshot(path=str(screenshots / "cell-from-matrix-click.png"), full_page=True)


def test_a_pin_downloads(page: Any, screenshots: Path, tmp_path: Path) -> None:
    open_page(page, "/pin", "Pin")
    box = page.get_by_test_id("stMultiSelect").first
    box.click()
    page.keyboard.type(PIN_SCENARIO)
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")
    page.get_by_text("Newest passing set").wait_for()
    settle(page)
    page.screenshot(path=str(screenshots / "pin-chosen.png"), full_page=True)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download requirements.txt").click()
    saved = tmp_path / "requirements.txt"
    download.value.save_as(saved)
    text = saved.read_text()
    assert download.value.suggested_filename == "requirements.txt"
    assert PIN_SCENARIO in text.splitlines()[0]  # the header names what must pass
    assert re.search(r"^transformers==\S+$", text, re.M) and re.search(r"^accelerate==\S+$", text, re.M)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download constraints.txt").click()
    download.value.save_as(tmp_path / "constraints.txt")
    constraints = (tmp_path / "constraints.txt").read_text()
    # the constraints are the winning cell's whole freeze: torch is in it, and they agree with the pins
    assert re.search(r"^torch==\d+\.\d+", constraints, re.M)
    pinned = re.search(r"^transformers==(\S+)$", text, re.M)
    assert pinned and f"transformers=={pinned.group(1)}" in constraints.splitlines()


def test_harness_dashboard_starts_the_server(launch: Callable[[list[str], int], str], dashboard_db: Path, port: int) -> None:
    """`harness dashboard` (what `nox -s dashboard` runs) serves the app; no browser needed."""
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    url = launch([sys.executable, "-m", "harness", "dashboard", "--db", str(dashboard_db), "--headless", "--port", str(port)], port)
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200 and b"<html" in response.read().lower()
