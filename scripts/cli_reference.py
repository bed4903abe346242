"""Write docs/cli.md, the command line's reference, from the parser's own help (`harness X --help`).

    .venv/bin/python scripts/cli_reference.py            # writes docs/cli.md
    .venv/bin/python scripts/cli_reference.py --check    # exit 1 where docs/cli.md is not what the parser says

tests/unit/test_docs_links.py runs the check: the page never drifts from the code.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAGE = ROOT / "docs" / "cli.md"


def reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the page wraps the same everywhere
    from harness.cli import COMMANDS, build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    out = [
        "# The command line",
        "",
        "Every command's `--help`, as the parser prints it (written by `scripts/cli_reference.py`; a test",
        "checks that it is current). Exit codes: 0 an answer, 1 a failed run or a regression found, 2 bad",
        "input (one line naming the bad value and the fix).",
        "",
        "```",
        parser.format_help().rstrip(),
        "```",
    ]
    for name in COMMANDS:
        out += ["", f"## harness {name}", "", "```", subs[name].format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def main() -> int:
    text = reference()
    if "--check" in sys.argv[1:]:
        if PAGE.read_text() != text:
            print(f"{PAGE} is not what the parser says; run: python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
