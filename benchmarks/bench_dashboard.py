"""Benchmark: the dashboard's first render and a filter change, per page, on a large store.

    .venv/bin/python benchmarks/make_large_store.py --out results/large.duckdb     # once: 100,000 outcomes
    .venv/bin/python benchmarks/bench_dashboard.py --db results/large.duckdb [--repeats 5] [--connection all]

Each page is driven with Streamlit's AppTest (the script runs as in a server, without a
browser). *First render*: a new session with every st.cache_data / st.cache_resource entry
cleared, so all its queries hit DuckDB (modules are imported once beforehand, as in a running
server). *Filter change*: the rerun after one widget changes in that session (the page's
other cached results stay warm, as they would). Medians of N repeats, with min and max;
targets from the issue: first render under 2 s, a filter change under 1 s.

A test suite's results, in a real browser (issue #21: 20,000 test ids × 20 cells):

    .venv/bin/python benchmarks/make_large_store.py --tests 20000 --cells 20 --out results/suite.duckdb
    .venv/bin/python benchmarks/bench_dashboard.py --db results/suite.duckdb --browser [--repeats 3] [--search float16]

starts `streamlit run dashboard/app.py` on the file and drives Debian's chromium through
Playwright (as tests/browser/ does). Each repeat starts a new server and a new browser profile
and times, from `goto` until the page's data line is shown, the script run is over, no element
is still a loading skeleton, the grid's rows are in and the heatmap is drawn (a canvas, or an
SVG square: a Vega view draws after its element arrives; all checked in the page at every
animation frame, `_SHOWN`): the *server's first visit* (Python
imports streamlit, pandas, altair; the browser downloads Streamlit's scripts), reported, not
targeted; then, after touching the file's mtime so that every cached query and connection is
new (the modules stay imported, the browser keeps its cache, as for a returning user of a
running server), the Matrix page's *first render* (the grid of files × cells), and how much of
it passed before the page's title showed (Streamlit's own start, before any query); a *new
session* of the Matrix (another tab: the server's caches warm); the *search* (typing the text
and Enter until the narrowed grid is drawn); and the first render of Failures, Cell and
Compare after it. Medians of the repeats; the target (issue #21): first render and search
each under 2 s.

The History page over a month of nights, in the same real browser (issue #46 item 4):

    .venv/bin/python benchmarks/make_large_store.py --tests 20000 --cells 20 --runs 30 --drift 0.01 --out /tmp/h30.duckdb
    .venv/bin/python benchmarks/bench_dashboard.py --db /tmp/h30.duckdb --history [--repeats 3]

times, as above (a new server per repeat, the file touched so that no query is cached), the
History page's *first render* (the list of files with their strips, until its rows are in),
then each filter change until the narrowed list is drawn: *changed in the last 3 runs*, *flaky
across runs* on top of it, and *runs shown* cut to the newest 10; then, reported, not targeted,
opening a file (a click on its row: its tests) and a test (its runs × cells and its changes).
Targets (issue #46): first render under 2 s, a filter change under 1 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
APP = REPO / "dashboard" / "app.py"
FIRST_TARGET = 2.0
CHANGE_TARGET = 1.0


@dataclass
class Case:
    page: str  # views/<page>.py
    change: str  # what the filter change does, in words
    act: Callable[[AppTest], object]  # the change
    first: list[float] = field(default_factory=list)
    changed: list[float] = field(default_factory=list)


def _second_option(at: AppTest, key: str) -> str:
    widget = at.selectbox(key=key)
    return str(widget.options[1])


def _another(at: AppTest, key: str) -> None:
    """Choose another value in selectbox `key`: the last option that is not the one shown (never a rerun of a cached read)."""
    widget = at.selectbox(key=key)
    widget.set_value(next(o for o in reversed(widget.options) if o != widget.value))


def _pick(at: AppTest, key: str, index: int) -> None:
    widget = at.multiselect(key=key)
    widget.set_value([widget.options[index]])


def _pick_any(at: AppTest, keys: list[str], index: int) -> None:
    """The first of these filters the page shows (a filter with one value in the file gets no widget)."""
    shown = {w.key for w in at.multiselect}
    _pick(at, next(k for k in keys if k in shown), index)


def _pin_marker(at: AppTest) -> None:
    """A suite's Pin page: tests chosen by `-m 'not slow'`, then the Pin button (the timed run)."""
    at.text_input(key="pin_marker").set_value("not slow").run()
    at.button(key="pin_go").click()


def _other_library(at: AppTest) -> None:
    widget = at.selectbox(key="support_library")
    widget.set_value(next(o for o in widget.options if o != widget.value))


def suite_cases() -> list[Case]:
    """A test suite's file (issue #28): the pages as a suite shows them."""
    return [
        Case("matrix", "search the tests for 'float16'", lambda at: at.text_input(key="f_search").set_value("float16")),
        Case(
            "failures", "filter one axis to one version", lambda at: _pick_any(at, ["f_gpu", "f_transformers", "f_accelerate", "f_peft"], 0)
        ),
        Case("cell", "choose another cell", lambda at: _another(at, "cell_pick")),
        Case("compare", "choose another cell B", lambda at: _another(at, "compare_b")),
        Case("pin", "pin the tests -m 'not slow' selects", _pin_marker),
        Case("support", "choose another library", _other_library),
        Case("history", "changed in the last 3 runs", lambda at: at.number_input(key="h_changed").set_value(3)),
    ]


def cases() -> list[Case]:
    return [
        Case("matrix", "filter transformers to one version", lambda at: _pick(at, "f_transformers", -1)),
        Case("failures", "filter GPU to one", lambda at: _pick(at, "f_gpu", 0)),
        Case("cell", "choose another cell", lambda at: at.selectbox(key="cell_pick").set_value(_second_option(at, "cell_pick"))),
        Case("compare", "choose another cell B", lambda at: at.selectbox(key="compare_b").set_value(_second_option(at, "compare_a"))),
        Case(
            "pin",
            "choose two scenarios",
            lambda at: at.multiselect(key="pin_scenarios").set_value(
                ["gemma4_lora_inner_linear", "gemma4_peft_split_4bit_load"]
                if "gemma4_peft_split_4bit_load" in at.multiselect(key="pin_scenarios").options
                else at.multiselect(key="pin_scenarios").options[:2]
            ),
        ),
        Case("pin", "choose every scenario that passes somewhere", lambda at: at.button(key="pin_all_passing").click()),
        Case("support", "choose another library", _other_library),
    ]


def _clear() -> None:
    """A cold start: no cached query results, no open connection."""
    import streamlit as st

    from dashboard import common

    st.cache_data.clear()
    st.cache_resource.clear()
    common._held.close_all()


def _check(at: AppTest, where: str) -> None:
    if at.exception:
        raise SystemExit(f"{where}: the page raised: {at.exception[0].value}")


def measure(case: Case, repeats: int, warm: AppTest) -> None:
    for _ in range(repeats):
        at = AppTest.from_file(str(APP), default_timeout=120)
        # AppTest scans the installed packages for components on an instance's first run (~0.5 s);
        # a server does that once at start-up, so hand every session the scan already made.
        at._bidi_component_manager = warm._bidi_component_manager
        if case.page != "matrix":
            at.run()  # the default page registers the navigation, which switch_page needs
            at.switch_page(f"views/{case.page}.py")
        _clear()
        began = time.perf_counter()
        at.run()
        case.first.append(time.perf_counter() - began)
        _check(at, f"{case.page} first render")
        case.act(at)
        began = time.perf_counter()
        at.run()
        case.changed.append(time.perf_counter() - began)
        _check(at, f"{case.page} after '{case.change}'")


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


# -- a test suite in a real browser -------------------------------------------------------------
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
BROWSER_STEPS = [
    "server's first visit",
    "matrix: first render",
    "  of which to the page title",
    "matrix: new session",
    "search",
    "failures",
    "cell",
    "compare",
]
#: The steps the issue sets a target for.
TARGETED = ("matrix: first render", "search")
HISTORY_STEPS = {  # step -> its target in seconds (None: reported only)
    "server's first visit": None,
    "history: first render": FIRST_TARGET,
    "  of which to the page title": None,
    "changed in the last 3 runs": CHANGE_TARGET,
    "and flaky across runs": CHANGE_TARGET,
    "runs shown: newest 10": CHANGE_TARGET,
    "open a file (click its row)": None,
    "open a test (click its row)": None,
}


@contextmanager
def _server(db: Path, log: Path) -> Iterator[str]:
    """`streamlit run dashboard/app.py -- --db DB` on a free port, until the block ends; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    command = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen([*command, "--", "--db", str(db)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"streamlit did not start:\n{log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


#: The end of a timed step, checked in the page at every animation frame: `ready` (a regular
#: expression) is shown in a visible text element, the script run is over, no element is still a
#: loading skeleton and, with `grid`, a dataframe is visible with its rows in (its accessible
#: mirror's first cell; the second where the first column is a selectable grid's row markers).
#: Playwright's own waits check these too, but re-check a missing element only every 500 ms
#: once it has waited ~0.3 s: each of a step's waits ended up to half a second after its
#: condition held, so the same page measured 1.4 s or 1.9 s at random.
_SHOWN = """([ready, grid, chart]) => {
    const visible = (e) => {
        const box = e.getBoundingClientRect();
        return box.width > 0 && box.height > 0 && getComputedStyle(e).visibility !== 'hidden';
    };
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    if (document.querySelector('[data-testid="stSkeleton"]')) return false;
    if (grid && !(document.querySelector('#glide-cell-0-0, #glide-cell-1-0')
                  && [...document.querySelectorAll('[data-testid="stDataFrame"]')].some(visible))) return false;
    if (chart && !document.querySelector('[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg .mark-rect path'))
        return false;
    const pattern = new RegExp(ready);
    return [...document.querySelectorAll('[data-testid="stMarkdownContainer"], [data-testid="stCaptionContainer"]')]
        .some((e) => pattern.test(e.textContent.replace(/\\s+/g, ' ')) && visible(e));
}"""
#: The page's title is shown: its level-1 heading holds `title`.
_TITLED = "(title) => [...document.querySelectorAll('h1')].some((h) => h.textContent.includes(title) && h.getClientRects().length > 0)"


def _shown(page: Any, ready: str, *, grid: bool = False, chart: bool = False) -> None:
    """Until `ready` is shown, the run is over, nothing is a skeleton (and the grid's rows are in, and
    with `chart` the heatmap's marks are drawn: a canvas, or an SVG square): see _SHOWN."""
    page.wait_for_function(_SHOWN, arg=[ready, grid, chart], polling="raf")


def _open(page: Any, path: str, title: str, ready: str, *, grid: bool = False, chart: bool = False) -> tuple[float, float]:
    """Seconds from `goto` until the page's `ready` text is shown and the run is over (and, with
    `grid`, its grid's rows are in; with `chart`, its heatmap drawn), and until its title showed."""
    began = time.perf_counter()
    page.goto(path)
    page.wait_for_function(_TITLED, arg=title, polling="raf")
    titled = time.perf_counter() - began
    _shown(page, ready, grid=grid, chart=chart)
    return time.perf_counter() - began, titled


def browser_main(db: Path, repeats: int, search: str) -> int:
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing: install it with dashboard/install_browser.sh (as root)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {step: [] for step in BROWSER_STEPS}
    log = Path(tempfile.mkdtemp(prefix="bench-dashboard-")) / "server.log"
    matched = ""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for repeat in range(repeats):
                with _server(db, log) as url:
                    # One browser profile per server, one tab per session: Streamlit's scripts and
                    # styles come from the browser's cache after the first visit, as for any returning user.
                    context = chromium.new_context(viewport={"width": 1500, "height": 1000}, base_url=url)
                    for step in ("server's first visit", "matrix: first render", "matrix: new session"):
                        if step == "matrix: first render":
                            # Every query cache and connection is keyed by the file's mtime: a new one
                            # is a file nobody read yet (the modules stay imported, as in a running server).
                            os.utime(db)
                        page = context.new_page()
                        page.set_default_timeout(60_000)
                        took, titled = _open(page, "/", "Matrix", r"test\(s\) in", grid=True, chart=True)
                        times[step].append(took)
                        if step == "matrix: first render":
                            times["  of which to the page title"].append(titled)
                        if step != "matrix: new session":
                            page.close()
                    box = page.get_by_role("textbox", name="Search test ids")
                    box.fill(search)
                    began = time.perf_counter()
                    box.press("Enter")
                    _shown(page, f"matching {re.escape(search)}", grid=True, chart=True)
                    times["search"].append(time.perf_counter() - began)
                    matched = page.get_by_text(re.compile(r"test\(s\) matching")).first.inner_text()
                    times["failures"].append(_open(page, "/failures", "Failures", r"failure signature\(s\)")[0])
                    times["cell"].append(_open(page, "/cell", "Cell", r"test\(s\) in")[0])
                    times["compare"].append(_open(page, "/compare", "Compare", r"test\(s\) differ")[0])
                    context.close()
                print(
                    f"repeat {repeat + 1}/{repeats} (load {os.getloadavg()[0]:.1f}): "
                    + ", ".join(f"{k.strip()} {v[-1]:.2f} s" for k, v in times.items()),
                    flush=True,
                )
        finally:
            chromium.close()
    print(f"\nsearch `{search}`: {matched.split(' — ')[0]}")
    print("| step | median | min–max | target |\n|---|---|---|---|")
    failed = False
    for step, values in times.items():
        median = statistics.median(values)
        target = (f"< {FIRST_TARGET:.0f} s " + ("ok" if median < FIRST_TARGET else "**over**")) if step in TARGETED else ""
        failed |= step in TARGETED and median >= FIRST_TARGET
        print(f"| {step} | {median:.2f} s | {min(values):.2f}–{max(values):.2f} | {target} |")
    return 1 if failed else 0


def _click_row(page: Any, row: int) -> None:
    """Select row `row` of the page's first grid by its row marker (header 35 px, rows 34 px: the History page's)."""
    box = page.locator('[data-testid="stDataFrame"]').first.bounding_box()
    page.mouse.click(box["x"] + 12, box["y"] + 35 + 34 * row + 17)


def history_main(db: Path, repeats: int) -> int:
    """The History page in chromium: first render, three filter changes, a file and a test opened."""
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing: install it with dashboard/install_browser.sh (as root)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {step: [] for step in HISTORY_STEPS}
    log = Path(tempfile.mkdtemp(prefix="bench-history-")) / "server.log"
    said = ""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for repeat in range(repeats):
                with _server(db, log) as url:
                    context = chromium.new_context(viewport={"width": 1500, "height": 1000}, base_url=url)
                    for step in ("server's first visit", "history: first render"):
                        if step == "history: first render":
                            os.utime(db)  # a file nobody read yet: every query and connection new
                        page = context.new_page()
                        page.set_default_timeout(60_000)
                        took, titled = _open(page, "/history", "History", r"test\(s\)", grid=True)
                        times[step].append(took)
                        if step == "history: first render":
                            times["  of which to the page title"].append(titled)
                            said = page.get_by_text(re.compile(r"test\(s\)")).first.inner_text()
                        else:
                            page.close()
                    box = page.get_by_role("spinbutton", name="Changed in the last N runs")
                    box.fill("3")
                    began = time.perf_counter()
                    box.press("Enter")
                    _shown(page, r"changed in the last 3 run\(s\)", grid=True)
                    times["changed in the last 3 runs"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    page.get_by_text("Flaky across runs", exact=True).click()
                    _shown(page, r"run\(s\), flaky across runs", grid=True)
                    times["and flaky across runs"].append(time.perf_counter() - began)
                    page.get_by_text("Flaky across runs", exact=True).click()
                    _shown(page, r"changed in the last 3 run\(s\) (in|·)", grid=True)
                    page.get_by_role("combobox", name="Runs shown").click()
                    began = time.perf_counter()
                    page.get_by_role("option", name="newest 10").click()
                    _shown(page, r"10 of \d+ run\(s\)", grid=True)
                    times["runs shown: newest 10"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    _click_row(page, 0)
                    _shown(page, r"changed in the last 3 run\(s\), in tests/", grid=True)
                    times["open a file (click its row)"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    _click_row(page, 0)
                    _shown(page, r"^tests/\S+::\S+$")  # the caption names the test chosen, and only it
                    times["open a test (click its row)"].append(time.perf_counter() - began)
                    context.close()
                print(
                    f"repeat {repeat + 1}/{repeats} (load {os.getloadavg()[0]:.1f}): "
                    + ", ".join(f"{k.strip()} {v[-1]:.2f} s" for k, v in times.items()),
                    flush=True,
                )
        finally:
            chromium.close()
    print(f"\nthe list: {said}")
    print("| step | median | min–max | target |\n|---|---|---|---|")
    failed = False
    for step, values in times.items():
        median, target = statistics.median(values), HISTORY_STEPS[step]
        verdict = "" if target is None else f"< {target:.0f} s " + ("ok" if median < target else "**over**")
        failed |= target is not None and median >= target
        print(f"| {step} | {median:.2f} s | {min(values):.2f}–{max(values):.2f} | {verdict} |")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=REPO / "results" / "large.duckdb")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--connection", choices=["held", "per-query", "cached", "all"], default="held", help="how the dashboard opens the file"
    )
    parser.add_argument("--browser", action="store_true", help="a test suite's Matrix in chromium: first render and a search")
    parser.add_argument("--search", default="float16", help="with --browser: the text typed into the search box")
    parser.add_argument("--history", action="store_true", help="the History page in chromium: first render and filter changes")
    parser.add_argument("--page", action="append", default=[], help="AppTest: only this page (repeatable; default: every page)")
    args = parser.parse_args()
    if not args.db.exists():
        print(f"{args.db} does not exist; make it first: .venv/bin/python benchmarks/make_large_store.py --out {args.db}", file=sys.stderr)
        return 2
    os.environ["HARNESS_DASHBOARD_DB"] = str(args.db.resolve())
    import duckdb

    with duckdb.connect(str(args.db), read_only=True) as con:
        row = con.execute("SELECT count(*), count(DISTINCT cell_id), count(DISTINCT scenario) FROM outcomes").fetchone()
    assert row is not None
    print(
        f"{args.db}: {row[0]:,} outcomes, {row[1]:,} cells, {row[2]:,} scenarios; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}; median of {args.repeats} (min–max)"
    )
    if args.browser:
        return browser_main(args.db.resolve(), args.repeats, args.search)
    if args.history:
        return history_main(args.db.resolve(), args.repeats)
    modes = ["held", "per-query", "cached"] if args.connection == "all" else [args.connection]
    import streamlit.logger

    streamlit.logger.set_log_level("error")  # "missing ScriptRunContext" and the like: AppTest noise
    warm = AppTest.from_file(str(APP), default_timeout=120)  # imports streamlit, altair, pandas: a running server has them
    warm.run()
    failed = False
    for mode in modes:
        from dashboard import common

        common.CONNECTION = mode
        print(f"\nconnection: {mode}")
        print("| page | first render | target | filter change | target | what changes |\n|---|---|---|---|---|---|")
        with duckdb.connect(str(args.db), read_only=True) as con:
            suite = bool(con.execute("SELECT count(*) FROM outcomes WHERE scenario LIKE '%::%'").fetchone()[0])  # type: ignore[index]
        for case in [c for c in (suite_cases() if suite else cases()) if not args.page or c.page in args.page]:
            measure(case, args.repeats, warm)
            first, changed = statistics.median(case.first), statistics.median(case.changed)
            ok_first = "ok" if first < FIRST_TARGET else "**over**"
            ok_change = "ok" if changed < CHANGE_TARGET else "**over**"
            failed |= first >= FIRST_TARGET or changed >= CHANGE_TARGET
            print(
                f"| {case.page} | {_fmt(case.first)} | < {FIRST_TARGET:.0f} s {ok_first} | {_fmt(case.changed)} | "
                f"< {CHANGE_TARGET:.0f} s {ok_change} | {case.change} |",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
