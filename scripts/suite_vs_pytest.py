"""Every node id's status from a harness sweep of a suite against what plain `pytest -v` printed
in the same cell (scripts/runner_suite.sh writes both), mapped as docs/testsuites.md says.

    python scripts/suite_vs_pytest.py OUTDIR

Cells are matched by their installed versions (the `versions:` line of each plain-*.txt against
the sweep's stored freeze, torch aside). Prints a table per cell and every difference; exits 1 if any.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.running.testsuite import parse_verbose, pytest_word


def harness_words(shard: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """cell id -> node id -> (pytest's word for the stored status, the stored status)."""
    words: dict[str, dict[str, tuple[str, str]]] = {}
    for line in shard.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "outcome":
            word = pytest_word(row["status"], row.get("message") or "")
            words.setdefault(row["cell_id"], {})[row["scenario"]] = (word, row["status"])
    return words


def versions_of(shard: Path) -> dict[str, set[str]]:
    """cell id -> {"bitsandbytes==0.50.2", ...} from the stored cells' freezes."""
    found: dict[str, set[str]] = {}
    for line in shard.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "cell":
            found[row["cell_id"]] = {f"{k}=={v}" for k, v in (row.get("freeze") or {}).items()}
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0], "sweep-1.jsonl").is_file():
        print("usage: python scripts/suite_vs_pytest.py OUTDIR (scripts/runner_suite.sh's output)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    differences = 0
    for shard in sorted(out.glob("sweep-*.jsonl")):
        words, freezes = harness_words(shard), versions_of(shard)
        for plain in sorted(out.glob("plain-*.txt")):
            text = plain.read_text()
            said_pins = next((ln.split()[1:] for ln in text.splitlines() if ln.startswith("versions:")), [])
            pins = {p for p in said_pins if not p.startswith("torch==")}  # torch's local version (+cu130) is not in a freeze
            cell = next((c for c, f in freezes.items() if pins and pins <= f), None)
            if cell is None:
                print(f"{shard.name} / {plain.name}: no cell with {sorted(pins)}")
                differences += 1
                continue
            said = parse_verbose(text)
            print(f"{shard.name}, {cell}:")
            for node in sorted(set(said) | set(words.get(cell, {}))):
                ours, status = words.get(cell, {}).get(node, ("-", "-"))
                mark = "" if ours == said.get(node) else "   <-- differs"
                differences += bool(mark)
                print(f"  {node}: harness {status} ({ours}), pytest {said.get(node, '-')}{mark}")
    print(f"{differences} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
