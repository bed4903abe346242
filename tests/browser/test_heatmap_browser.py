"""The Matrix heatmap and the published page in Chromium, at 1440×1000, over the shipped results.

- every scenario of the shipped file is on the Matrix page, its name whole, with no horizontal scroll;
- a click on a square of the heatmap opens that cell, at that scenario;
- `harness publish`'s page opens from file:// with the network off, asks nothing of any host,
  draws its heatmap and gives the answers `harness summary` gives;
- every run of columns of the version strips says its version, inside its own run (across it, or
  rotated up it where it does not fit across), at 3 and at 27 columns, on the published page and
  on the dashboard's Matrix page (#49 item 5).

The screenshots go to artifacts/screenshots/; `test_docs_screenshots` writes the pictures of
docs/dashboard.md (HARNESS_DOCS_SCREENSHOTS=docs/images, see there).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage.store import Store
from tests.browser.conftest import streamlit_command

WINDOW = {"width": 1440, "height": 1000}
HEATMAP = '[data-testid="stVegaLiteChart"]'


def settle(page: Any) -> None:
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]')
    page.wait_for_function("() => document.querySelectorAll('[data-testid=stSkeleton]').length === 0")


@pytest.fixture
def window(browser: Any, server: str) -> Iterator[Any]:
    context = browser.new_context(viewport=WINDOW, base_url=server)
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    try:
        yield tab
    finally:
        context.close()


def open_matrix(page: Any) -> None:
    page.goto("/")
    page.get_by_role("heading", name="Matrix", level=1).wait_for()
    settle(page)
    page.wait_for_selector(f"{HEATMAP} svg .mark-rect path")


def scenarios_of(db: Path) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT DISTINCT scenario FROM outcomes ORDER BY 1").fetchall()]


def test_every_scenario_is_on_the_matrix_without_horizontal_scrolling(window: Any, dashboard_db: Path, screenshots: Path) -> None:
    open_matrix(window)
    # every text the heatmap draws, with where it is: Streamlit draws Vega-Lite as SVG
    labels = window.evaluate(
        f"""() => Array.from(document.querySelectorAll('{HEATMAP} svg text')).map(t => {{
            const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.right, r.top, r.bottom]; }})"""
    )
    shown = {text: box for text, *box in labels}
    expected = scenarios_of(dashboard_db)
    assert len(expected) == 22
    missing = [s for s in expected if s not in shown]  # a name cut short ("gemma4_peft_split_4…") would be missing too
    assert not missing, f"not on the Matrix page (or cut short): {missing}"
    for name in expected:
        left, right, top, bottom = shown[name]
        assert left >= 0 and right <= WINDOW["width"], f"{name} is outside the window: {left:.0f}–{right:.0f} px"
        assert bottom > top
    widths = window.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " document.querySelector('[data-testid=stMain]').scrollWidth, document.querySelector('[data-testid=stMain]').clientWidth]"
    )
    assert widths[0] <= widths[1] and widths[2] <= widths[3], f"the page scrolls sideways: {widths}"
    box = window.locator(HEATMAP).first.bounding_box()
    assert box["x"] + box["width"] <= WINDOW["width"]
    window.screenshot(path=str(screenshots / "matrix-heatmap-1440.png"))


def _square_at(page: Any, scenario: str) -> dict[str, Any]:
    """The centre of the first coloured square in `scenario`'s row (the squares are SVG paths of the heatmap's rect mark)."""
    return page.evaluate(
        f"""(name) => {{
        const label = Array.from(document.querySelectorAll('{HEATMAP} svg text')).find(t => t.textContent === name);
        const y = (label.getBoundingClientRect().top + label.getBoundingClientRect().bottom) / 2;
        const squares = Array.from(document.querySelectorAll('{HEATMAP} svg g.mark-rect path'))
            .map(p => p.getBoundingClientRect())
            .filter(r => r.top <= y && y <= r.bottom && r.width > 2 && r.height > 8 && r.left > label.getBoundingClientRect().right);
        squares.sort((a, b) => a.left - b.left);
        return {{x: squares[0].left + squares[0].width / 2, y: y}};
    }}""",
        scenario,
    )


def test_clicking_a_heatmap_square_opens_that_cell(window: Any, screenshots: Path) -> None:
    open_matrix(window)
    scenario = "gemma4_lora_inner_linear"  # passes in every cell where it runs
    point = _square_at(window, scenario)
    window.mouse.move(point["x"], point["y"])
    tooltip = window.locator("#vg-tooltip-element")
    tooltip.wait_for(state="visible")
    text = tooltip.inner_text()
    assert scenario in text
    cell = re.search(r"cell id\s+(\S+)", text)
    assert cell, text
    window.mouse.click(point["x"], point["y"])
    window.wait_for_url(re.compile(r"/cell\?"))
    window.get_by_role("heading", name="Cell", level=1).wait_for()
    settle(window)
    assert f"cell={cell.group(1)}" in window.url and f"scenario={scenario}" in window.url
    assert window.get_by_role("combobox", name="cell").input_value() == cell.group(1)
    window.screenshot(path=str(screenshots / "cell-from-heatmap-click.png"))


# -- the published page ------------------------------------------------------------------------------
def publish(db: Path, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "harness", "publish", "--db", str(db), "--out", str(out)], check=True, capture_output=True)
    return out / "index.html"


def summary_answers(db: Path) -> list[tuple[str, str, int]]:
    """(headline, machine, lines) of every answer `harness summary` prints (wide enough that nothing wraps)."""
    env = {**os.environ, "COLUMNS": "2000"}
    text = subprocess.run(
        [sys.executable, "-m", "harness", "summary", "--db", str(db)], capture_output=True, text=True, env=env, check=True
    ).stdout
    lines = text.split("\nAnswers\n", 1)[1].split("\nKnown-good set per machine", 1)[0].splitlines()
    found = []
    for headline, where in itertools.pairwise(lines):
        match = re.match(r"^      on (.+), (\d+) line\(s\)", where)
        if match and headline.strip().startswith(("fixed ", "introduced ")):
            found.append((headline.strip(), match.group(1), int(match.group(2))))
    return sorted(found)


def test_the_published_page_opens_offline_with_the_summary_answers(
    browser: Any, dashboard_db: Path, tmp_path: Path, screenshots: Path
) -> None:
    page_file = publish(dashboard_db, tmp_path / "site")
    context = browser.new_context(viewport=WINDOW, offline=True)
    asked: list[str] = []
    context.on("request", lambda request: asked.append(request.url))
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        tab.goto(page_file.as_uri())
        tab.wait_for_selector("#heatmap[data-drawn=true]", timeout=30_000)
        assert not errors, errors
        assert asked == [page_file.as_uri()], f"the page asked for more than itself: {asked}"
        answers = tab.evaluate(
            """() => Array.from(document.querySelectorAll('tr.answer')).map(r =>
                [r.dataset.headline, r.dataset.machine, Number(r.dataset.lines), r.dataset.exact === 'true',
                 r.offsetParent !== null])"""
        )
        assert all(visible for *_, visible in answers)
        assert sorted((h, m, n) for h, m, n, _, _ in answers) == summary_answers(dashboard_db)
        assert sum(n for _, _, n, exact, _ in answers if exact) == 40
        drawn = set(tab.evaluate("() => Array.from(document.querySelectorAll('#heatmap svg text')).map(t => t.textContent)"))
        assert set(scenarios_of(dashboard_db)) <= drawn  # every scenario has its row in the drawn heatmap
        assert tab.locator("#heatmap svg g.mark-rect path").count() > 800
        tab.screenshot(path=str(screenshots / "published-site-1440.png"))
    finally:
        context.close()


# -- the version strips (#49 item 5) ---------------------------------------------------------------------
TRANSFORMERS, ACCELERATE, PEFT = ("5.10.4", "5.22.2", "5.23.0"), ("1.13.0", "1.14.0", "1.15.0"), ("0.19.1", "0.20.0", "0.21.2")


def strips_db(folder: Path, columns: int) -> Path:
    """A results file of 3 cells (transformers 5.10.4, 5.22.2, 5.23.0) or 27 (× accelerate × peft); the load
    fails with 5.10.4, so transformers varies fastest (the busiest axis) and each of its runs is one column."""
    combos = (
        [(tf, ACCELERATE[0], PEFT[0]) for tf in TRANSFORMERS] if columns == 3 else list(itertools.product(TRANSFORMERS, ACCELERATE, PEFT))
    )
    path = folder / f"strips-{columns}.duckdb"
    with Store(path) as store:
        store.ensure_run("r1", "matrix.toml", "[axes]", {"python": "3.11"}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu", "gpus": []})
        for tf, acc, peft in combos:
            versions = {"torch": "2.13.0", "transformers": tf, "accelerate": acc, "peft": peft}
            cell = f"torch2.13.0-tf{tf}-acc{acc}-peft{peft}"
            pins = [f"{k}=={v}" for k, v in versions.items()]
            store.record_cell(
                CellRecord("r1", cell, "3.11", versions, pins, {**versions, "torch": "2.13.0+cpu"}, {}, {}, "ready", "", 1.0, False)
            )
            for scenario in ("gemma4_peft_split_4bit_load", "gemma4_lora_inner_linear"):
                fails = scenario.endswith("load") and tf == "5.10.4"
                sig = "KeyError: <key> @ transformers/modeling_utils.py:load" if fails else ""
                store.add_outcome(
                    Outcome("r1", cell, scenario, 0, Status.ERROR if fails else Status.PASS, message="KeyError: 22" if fails else "",
                            signature=sig, signature_family="5d41402abc4b" if fails else "", blamed_library="transformers" if fails else "",
                            exception_type="KeyError" if fails else "", seconds=1.0, started_at="2026-11-21T10:00:00")
                )  # fmt: skip
    return path


#: For every shaded run of a version strip (its tooltip names the version): the texts drawn inside it. The strips
#: are the concatenated views above the heatmap; a run's label is a text of the same view that lies within the run.
STRIP_LABELS = """(root) => {
    const svg = document.querySelector(root + ' svg');
    const runs = Array.from(svg.querySelectorAll('g.mark-rect.role-mark path[aria-label*="version: "]'));
    return runs.map(run => {
        const view = Array.from(run.parentNode.classList).find(c => c.startsWith('concat_')).split('_layer_')[0];
        const version = run.getAttribute('aria-label').split('version: ')[1];
        const box = run.getBoundingClientRect();
        const inside = Array.from(svg.querySelectorAll(`g.mark-text.role-mark[class*="${view}_layer_"] text`))
            .filter(t => t.textContent)
            .map(t => [t.textContent, t.getBoundingClientRect()])
            .filter(([, r]) => r.left >= box.left - 1 && r.right <= box.right + 1 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1)
            .map(([text, r]) => [text, r.width < r.height]);
        return [version, box.width, inside];
    });
}"""


def assert_every_run_says_its_version(page: Any, root: str, columns: int) -> None:
    runs = page.evaluate(STRIP_LABELS, root)
    tf = [r for r in runs if r[0] in TRANSFORMERS]
    assert len(tf) == columns, runs  # transformers varies fastest: one run per column
    for version, width, inside in runs:
        assert [text for text, _ in inside] == [version], f"the run of {version} ({width:.0f} px wide) shows {inside}"
    # a column too narrow for "5.10.4" across it has it rotated up it
    assert all(up for _, width, inside in tf for _, up in inside if width < len("5.10.4") * 6.2 + 4)


@pytest.mark.parametrize("columns", [3, 27])
def test_every_strip_run_of_the_published_page_says_its_version(browser: Any, tmp_path: Path, screenshots: Path, columns: int) -> None:
    page_file = publish(strips_db(tmp_path, columns), tmp_path / "site")
    context = browser.new_context(viewport=WINDOW, offline=True)
    tab = context.new_page()
    try:
        tab.goto(page_file.as_uri())
        tab.wait_for_selector("#heatmap[data-drawn=true]", timeout=30_000)
        assert_every_run_says_its_version(tab, "#heatmap", columns)
        tab.locator("#heatmap").screenshot(path=str(screenshots / f"published-strips-{columns}.png"))
    finally:
        context.close()


@pytest.mark.parametrize("columns", [3, 27])
def test_every_strip_run_of_the_dashboard_matrix_says_its_version(
    browser: Any, launch: Any, port: int, tmp_path: Path, screenshots: Path, columns: int
) -> None:
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    url = launch(streamlit_command(strips_db(tmp_path, columns), port), port)
    context = browser.new_context(viewport=WINDOW, base_url=url)
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    try:
        open_matrix(tab)
        assert_every_run_says_its_version(tab, HEATMAP, columns)
        tab.locator(HEATMAP).first.screenshot(path=str(screenshots / f"matrix-strips-{columns}.png"))
    finally:
        context.close()
