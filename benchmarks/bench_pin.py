"""A pin over a large test suite: choosing the tests, then the newest passing set.

    .venv/bin/python benchmarks/make_large_store.py --tests 20000 --cells 20 --out /tmp/dsh/suite.duckdb
    .venv/bin/python benchmarks/bench_pin.py --db /tmp/dsh/suite.duckdb --repeats 3

Prints medians of `select_tests` with half the stored node ids as selectors (what `harness pin
-m EXPR` hands it), beside the plain scan of every selector against every name it replaced, and
of `choose` over half the suite and over all of it (what the dashboard's Pin page runs on its
button).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.analysis.pin import choose
from harness.analysis.selection import select_tests, selects
from harness.storage.store import Store
from harness.workflows.answering import answer


def scan(stored: Sequence[str], selectors: Sequence[str]) -> list[str]:
    """The selection as it was computed before: every selector against every stored name."""
    chosen: set[str] = set()
    for selector in selectors:
        chosen.update(n for n in stored if selects(selector, n))
    return [n for n in stored if n in chosen]


def median_of(repeats: int, call: Callable[[], object]) -> float:
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a results file of a suite (benchmarks/make_large_store.py --tests)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scan", action="store_true", help="also time the plain scan (minutes at 20,000 tests)")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"bench_pin: no results file {args.db}: make one with benchmarks/make_large_store.py --tests 20000", file=sys.stderr)
        return 2
    with Store(args.db, read_only=True) as store:
        rows = answer(store).rows
    stored = sorted({str(r["scenario"]) for r in rows})
    half = stored[::2]
    chosen, _ = select_tests(stored, half)
    print(f"{args.db}: {len(rows):,} outcomes, {len(stored):,} stored names; medians of {args.repeats}")
    print(f"select_tests, {len(half):,} node ids as selectors: {median_of(args.repeats, lambda: select_tests(stored, half)):.2f} s")
    if args.scan:
        assert scan(stored, half) == chosen, "the lookup and the scan disagree"
        print(f"  the plain scan of every name, same selectors: {median_of(1, lambda: scan(stored, half)):.2f} s (one run)")
    print(f"choose over {len(chosen):,} tests: {median_of(args.repeats, lambda: choose(rows, chosen)):.2f} s")
    print(f"choose over the whole suite ({len(stored):,}): {median_of(args.repeats, lambda: choose(rows, stored)):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
