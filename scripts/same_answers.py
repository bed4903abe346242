"""Do two harness trees give the same answers over the same results files? Or one harness over two files?

    .venv/bin/python scripts/same_answers.py --before 01440fa results/default.duckdb /tmp/suite-5000.duckdb ...
    .venv/bin/python scripts/same_answers.py --against newest-only.duckdb thirty-nights.duckdb

With --against, this checkout's harness answers each file and the one given, which must agree
field by field, outcome counts included: a file that holds earlier runs of the same outcomes
answers as the file of the newest run alone (its history never changes today's answers).

For each file, this checkout's harness and the one of --before (a commit, exported from git into
a temporary folder) each read the file as every face does (`workflows.answering.answer`, the
quiet tests as one stand-in; a tree from before it reads every outcome, `queries.outcome_rows`)
and compute the attribution (`analysis.attribution.attribute`, with the releases the file lists: transitions,
flaky cells, machine differences) and the known-good set of every machine class
(`analysis.knowngood.known_good_sets`: the versions, the kept and dropped scenarios, the excluded
newer versions and why). They must be equal field by field; the script prints each side's
time and exits 1 at the first file where they differ. Files a newer harness wrote are read
read-only, through the view each harness lays over them. Written to check that making the
answers linear in outcomes (issue #28) changed no answer; a results file whose suite has
test identities (migration 0009) is answered by identity on the newer side only, so compare
files without made-up parameter ids.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ANSWER = r"""
import json, sys, time
from harness.analysis import attribution
try:
    from harness.analysis.knowngood import known_good_sets
except ImportError:  # a tree from before analysis/knowngood.py (#47)
    from harness.analysis.pin import known_good_sets
from harness.storage import queries
from harness.storage.opening import open_results

store = open_results(sys.argv[1], read_only=True)
start = time.perf_counter()
try:  # the answering driver every face reads through, the quiet tests as one stand-in (#48)
    from harness.workflows.answering import answer
    try:
        read = answer(store, loud=True)
    except TypeError:  # a tree from before the quiet tests' stand-in: every row
        read = answer(store)
    found, sets, outcomes = read.attribution, read.known_good, read.attributed
except ImportError:
    try:  # the driver before workflows/ (#47), every row: the unlisted axes' answers are ranges there too
        from harness.commands.answer import answer
        read = answer(store)
        found, sets, outcomes = read.attribution, read.known_good, len(read.rows)
    except ImportError:  # a tree from before the driver: every row, attributed and chosen over
        rows = queries.outcome_rows(store)
        found = attribution.attribute(rows, known_versions=queries.known_releases(store))
        sets, outcomes = known_good_sets(rows), len(rows)
seconds = time.perf_counter() - start
answers = {
    "transitions": sorted(json.dumps(t.to_dict(), sort_keys=True, default=str) for t in found.transitions),
    "flaky": sorted(json.dumps(f.to_dict(), sort_keys=True, default=str) for f in found.flaky),
    "machines": sorted(json.dumps(m.to_dict(), sort_keys=True, default=str) for m in found.machines),
    "known_good": [
        {**k.to_dict(), "excluded": [e.describe() for e in k.result.excluded], "evidence": [repr(e) for e in k.result.evidence]}
        for k in sets
    ],
}
print(json.dumps({"seconds": seconds, "outcomes": outcomes, "answers": answers}))
"""


def answers(tree: Path, path: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ANSWER, str(path)], cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # the answer is the last line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--before", help="a commit of this repository: its harness against this one, over each file")
    which.add_argument(
        "--against", type=Path, help="a results file: this harness's answers over each file against its answers over this one"
    )
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.against is not None:
        return _against(args.against, args.files)
    with tempfile.TemporaryDirectory(prefix="same-answers-") as tmp:
        archive = subprocess.run(["git", "archive", args.before, "harness"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for path in args.files:
            old, new = answers(Path(tmp), path.resolve()), answers(ROOT, path.resolve())
            if not _compared(path, new, old, f"(before {old['seconds']:.1f} s, after {new['seconds']:.1f} s)", outcomes=False):
                return 1
    return 0


def _shared_fields(got: dict, want: dict) -> tuple[dict, dict]:
    """Both sides' answers with only the fields both name: a field one harness added since (a
    flaky cell's `runs_failed` and `runs_total`, #49) is news, not a different answer."""
    out: tuple[dict, dict] = ({}, {})
    for key in got:
        mine, theirs = ([json.loads(x) for x in side[key]] if key != "known_good" else side[key] for side in (got, want))
        if key == "known_good" or not mine or not theirs:
            out[0][key], out[1][key] = got[key], want[key]
            continue
        shared = set(mine[0]) & set(theirs[0])
        out[0][key], out[1][key] = (sorted(json.dumps({k: d[k] for k in shared}, sort_keys=True) for d in side) for side in (mine, theirs))
    return out


def _compared(path: Path, got: dict, want: dict, tail: str, *, outcomes: bool) -> bool:
    """Print one file's verdict (and which answers differ); whether they are the same."""
    counts = ", ".join(f"{len(v)} {k}" for k, v in got["answers"].items())
    mine, theirs = _shared_fields(got["answers"], want["answers"])
    same = mine == theirs and (not outcomes or got["outcomes"] == want["outcomes"])
    print(f"{path}: {got['outcomes']} outcomes, {counts}: {'same' if same else 'DIFFERENT'} {tail}")
    for key in [] if same else mine:
        if mine[key] != theirs[key]:
            print(f"  {key} differ")
    return same


def _against(base: Path, files: list[Path]) -> int:
    """Whether each file answers as `base` does: a file holding N runs of the same outcomes
    against the file holding only the newest of them (issue #37: the same answers whatever the history)."""
    want = answers(ROOT, base.resolve())
    for path in files:
        if not _compared(path, answers(ROOT, path.resolve()), want, f"as {base} ({want['outcomes']} outcomes)", outcomes=True):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
