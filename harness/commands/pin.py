"""`harness pin`: the newest version set on which the chosen scenarios or tests pass (`workflows.pinning`), written out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from harness.analysis import export
from harness.commands import flags
from harness.errors import EXIT_OK, EXIT_RUN_FAILED
from harness.workflows.pinning import pin_file, stated_constraints


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pin",
        help="the newest version set on which the chosen scenarios all pass, with evidence; requirements, constraints, pylock.toml",
        description="Among the stored cells of one machine class where every chosen scenario or test passed (every repeat, "
        "every run), the newest by the ranking, with the evidence and the newer versions that were excluded and why. "
        "See docs/pins-and-reports.md.",
    )
    flags.add_db(p)
    p.add_argument("--scenario", action="append", default=[], help="a scenario (or test node id) that must pass (repeatable)")
    p.add_argument(
        "--test",
        action="append",
        default=[],
        metavar="SELECTION",
        help="tests that must pass: a node id, a file (tests/test_x.py), a class (tests/test_x.py::TestX) or a folder (repeatable)",
    )
    p.add_argument(
        "-m",
        "--marker",
        default="",
        help="tests whose stored pytest markers match this expression, as pytest reads -m (within --test when given)",
    )
    p.add_argument(
        "--machine",
        default="",
        help="the machine class to pin for: cpu, '1x NVIDIA H200', '2x NVIDIA H200' (case, spaces and NVIDIA do not matter), "
        "or any (all pooled); default: the newest run's",
    )
    p.add_argument(
        "--fix", action="append", default=[], help="hold an axis: torch=2.13.0 (also matches 2.13.0+cpu) or transformers<5.20 (repeatable)"
    )
    p.add_argument("--gpu", default="", help="only evidence from runs whose GPU name contains this, e.g. H200 or cpu")
    p.add_argument("--platform", default="", help="only evidence from runs whose platform contains this, e.g. linux-x86_64")
    p.add_argument("--rank", default="", help="axes in order of preference (default: transformers,peft,accelerate,bitsandbytes,torch)")
    p.add_argument("--out", type=Path, default=None, help="write requirements.txt, constraints.txt and pylock.toml into this folder")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument(
        "--constraints",
        action="store_true",
        help="print instead the requirements the results state ('transformers>=5.6.0 needs peft>=0.19.0') as pip constraints "
        "for your own requirements: those of --scenario/--test, or all, on the machine class",
    )


def run(args: argparse.Namespace, console: Console) -> int:

    db = flags.existing_duckdb(args.db)
    if args.constraints:
        print(stated_constraints(Path(db), args.scenario, args.test, args.machine), end="")
        return EXIT_OK
    chosen = {"machine": args.machine, "tests": args.test, "marker": args.marker}
    result, files, sources = pin_file(Path(db), args.scenario, args.fix, args.gpu, args.platform, args.rank, args.out, **chosen)
    if not result.found:
        print(json.dumps(result.to_dict()) if args.json else "\n".join(result.describe()))
        return EXIT_RUN_FAILED
    commands = {"pip": export.install_command(result, "pip", sources), "uv": export.install_command(result, "uv", sources)}
    if args.json:
        written = files.files if files else {}
        print(json.dumps({**result.to_dict(), "install": commands, "files": written, "lock_note": files.lock_note if files else ""}))
        return EXIT_OK
    print("\n".join(result.describe()))
    print(commands["pip"])
    print(commands["uv"])
    if files and files.files:
        print(f"wrote {', '.join(files.files.values())}")
    if files and files.lock_note:
        print(files.lock_note)
    return EXIT_OK
