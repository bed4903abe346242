"""Benchmark: the dashboard's first render and a filter change, per page, on a large store.

    .venv/bin/python benchmarks/make_large_store.py --out results/large.duckdb     # once: 100,000 outcomes
    .venv/bin/python benchmarks/bench_dashboard.py --db results/large.duckdb [--repeats 5] [--connection all]

Each page is driven with Streamlit's AppTest (the script runs as in a server, without a
browser). *First render*: a new session with every st.cache_data / st.cache_resource entry
cleared, so all its queries hit DuckDB (modules are imported once beforehand, as in a running
server). *Filter change*: the rerun after one widget changes in that session (the page's
other cached results stay warm, as they would). Medians of N repeats, with min and max;
targets from the issue: first render under 2 s, a filter change under 1 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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


def _pick(at: AppTest, key: str, index: int) -> None:
    widget = at.multiselect(key=key)
    widget.set_value([widget.options[index]])


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=REPO / "results" / "large.duckdb")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--connection", choices=["held", "per-query", "cached", "all"], default="held", help="how the dashboard opens the file"
    )
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
        f"{args.db}: {row[0]:,} outcomes, {row[1]:,} cells, {row[2]} scenarios; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}; median of {args.repeats} (min–max)"
    )
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
        for case in cases():
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
