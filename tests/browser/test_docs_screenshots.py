"""The pictures in docs/dashboard.md: every page of the dashboard and the published page, over the shipped results.

    HARNESS_DOCS_SCREENSHOTS=docs/images .venv/bin/python -m pytest tests/browser/test_docs_screenshots.py

writes them into docs/images/ (without the variable: artifacts/screenshots/docs/, as any
browser test's). At 1440×1000, as a new user opens them; JPEG, to keep the committed files small.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

WINDOW = {"width": 1440, "height": 1000}
#: (url path, title, file name, what must be drawn before the picture is taken)
PAGES = [
    ("/", "Matrix", "matrix", '[data-testid="stVegaLiteChart"] svg .mark-rect path'),
    ("/failures", "Failures", "failures", '[data-testid="stDataFrame"]'),
    ("/cell?cell=torch2.13.0-tf5.6.2-acc1.13.0-peft0.19.1-bnb0.49.2&scenario=gemma4_peft_split_4bit_load", "Cell", "cell", "pre"),
    ("/compare", "Compare", "compare", '[data-testid="stDataFrame"]'),
    ("/pin", "Pin", "pin", '[data-testid="stMultiSelect"]'),
    ("/support", "Support", "support", '[data-testid="stDataFrame"]'),
]


@pytest.fixture(scope="module")
def pictures(screenshots: Path) -> Path:
    folder = Path(os.environ.get("HARNESS_DOCS_SCREENSHOTS") or screenshots / "docs")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _settle(page: Any) -> None:
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]')
    page.wait_for_function("() => document.querySelectorAll('[data-testid=stSkeleton]').length === 0")


@pytest.mark.parametrize(("path", "title", "name", "drawn"), PAGES, ids=[p[2] for p in PAGES])
def test_docs_screenshot_of_a_page(browser: Any, shipped_server: str, pictures: Path, path: str, title: str, name: str, drawn: str) -> None:
    context = browser.new_context(viewport=WINDOW, base_url=shipped_server)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(path)
        page.get_by_role("heading", name=title, level=1).wait_for()
        _settle(page)
        page.wait_for_selector(drawn)
        page.wait_for_timeout(500)  # the charts' last transition
        assert not page.locator('[data-testid="stException"]').count()
        page.screenshot(path=str(pictures / f"{name}.jpg"), type="jpeg", quality=70)
    finally:
        context.close()


def test_docs_screenshot_of_the_published_page(browser: Any, dashboard_db: Path, pictures: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "harness", "publish", "--db", str(dashboard_db), "--out", str(out)], check=True, capture_output=True
    )
    context = browser.new_context(viewport=WINDOW, offline=True)
    page = context.new_page()
    try:
        page.goto((out / "index.html").as_uri())
        page.wait_for_selector("#heatmap[data-drawn=true]")
        page.screenshot(path=str(pictures / "published.jpg"), type="jpeg", quality=70)
        page.locator("#support").scroll_into_view_if_needed()
        page.screenshot(path=str(pictures / "published-support.jpg"), type="jpeg", quality=70)
    finally:
        context.close()
