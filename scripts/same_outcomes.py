"""Whether two results files hold the same outcomes, key by key: for a change that must keep
behaviour identical (a move of modules), sweep the same matrix before and after it and compare.

    python scripts/same_outcomes.py BEFORE.duckdb AFTER.duckdb

Keys are (run, cell, scenario, repeat); each must have the same status and signature in both.
Prints the counts and every difference; exits 0 when there is none, 1 otherwise.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from harness.storage.opening import open_results

Key = tuple[str, str, str, int]


def outcomes(path: Path) -> dict[Key, tuple[str, str]]:
    with open_results(path, read_only=True) as results:
        rows = results.outcome_rows(None)
    return {(r["run_id"], r["cell_id"], r["scenario"], int(r["repeat"])): (r["status"], r.get("signature") or "") for r in rows}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(Path(a).exists() for a in argv):
        print("usage: python scripts/same_outcomes.py BEFORE AFTER (two results files that exist)", file=sys.stderr)
        return 2
    before, after = (outcomes(Path(a)) for a in argv)
    print(f"before: {len(before)} outcomes; after: {len(after)}; {dict(Counter(s for s, _ in after.values()))}")
    differ = [f"only before: {k}" for k in before.keys() - after.keys()] + [f"only after: {k}" for k in after.keys() - before.keys()]
    differ += [f"{k}: {before[k]} -> {after[k]}" for k in sorted(before.keys() & after.keys()) if before[k] != after[k]]
    print("\n".join(differ) or "identical: every key, status and signature")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
