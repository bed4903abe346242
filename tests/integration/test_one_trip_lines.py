"""One trip on a matrix whose ranges come only from [[include]] lines (issue #38), on light CPU cells.

Two real changes, each on a line only an [[include]] entry makes: `packaging.metadata` is new in
packaging 23.1 (the line 22.0 → 24.2, typing-extensions 4.8.0 held), `typing_extensions.TypeIs`
in 4.10.0 (the line 4.8.0 → 4.12.2, packaging 22.0 held). The wheelhouse is prepared here
against the real index (skipped without it); "the runner" sweeps offline from it alone, each
trip with its own env root, and its account says per line how each answer was reached:

- a wheelhouse without --refine-budget: no release lists, so ranges the wheelhouse did not
  hold; merged back here, `harness refine --plan` plans both include lines;
- a budget too small: ranges because the budget ran out, and the budget that holds every line;
- a second trip with that budget: exact on every line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

PACKAGING = ["23.0", "23.1", "23.2", "24.0", "24.1"]  # between 22.0 and 24.2
TYPING = ["4.9.0", "4.10.0", "4.11.0", "4.12.0", "4.12.1"]  # between 4.8.0 and 4.12.2
SCENARIOS = {
    "needs_metadata.py": "from packaging import metadata  # new in packaging 23.1\nprint(metadata.__name__)\n",
    "needs_typeis.py": "from typing_extensions import TypeIs  # new in typing_extensions 4.10.0\nprint(TypeIs)\n",
}
NO_DUCKDB = "import sys; sys.modules['duckdb'] = None; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
LINES = ("packaging, with typing-extensions 4.8.0:", "typing-extensions, with packaging 22.0:")
EXACT = (
    "exact: needs_metadata: fixed in packaging 23.1 (after 23.0)",
    "exact: needs_typeis: fixed in typing-extensions 4.10.0 (after 4.9.0)",
)


@pytest.fixture(scope="module")
def online() -> None:
    try:
        urllib.request.urlopen("https://pypi.org/simple/packaging/", timeout=15).close()
    except OSError as exc:
        pytest.skip(f"the index cannot be reached ({exc}): the wheelhouse is prepared from it")


def _matrix(path: Path, wheelhouse: Path | None = None) -> Path:
    """Every axis lists one release; the two [[include]] entries make the only ranges. With a
    wheelhouse, the runner's copy: no index, the wheelhouse its only source."""
    offline = f'no_index = true\nfind_links = ["{wheelhouse}"]\n' if wheelhouse else ""
    body = """
        [axes]
        packaging = ["22.0"]
        typing-extensions = ["4.8.0"]

        [[include]]
        packaging = "24.2"

        [[include]]
        packaging = "22.0"
        typing-extensions = "4.12.2"
    """
    path.write_text('[matrix]\npython = "3.11"\ntimeout = 60\npreload = []\n' + offline + textwrap.dedent(body))
    return path


def _wheelhouse(work: Path, name: str, *budget: str) -> tuple[Path, str]:
    out = work / name
    args = ["--matrix", str(_matrix(work / "here.toml")), "--out", str(out), "--python-version", "3.11", "--no-tools"]
    proc = run_cli("wheelhouse", *args, *(("--refine-budget", *budget) if budget else ()))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return out, " ".join(proc.stdout.split())


def _trip(work: Path, wheelhouse: Path) -> tuple[Path, list[str]]:
    """Sweep on "the runner" from the wheelhouse alone; (its results, its account's lines)."""
    for name, text in SCENARIOS.items():
        (work / name).write_text(text)
    matrix = _matrix(work / f"runner-{wheelhouse.name}.toml", wheelhouse)
    results = work / f"{wheelhouse.name}.jsonl"
    run = ["sweep", "--matrix", str(matrix), "--db", str(results), "--env-root", str(work / f"envs-{wheelhouse.name}"), "--no-progress"]
    # the sweep and its account run as on the runner: with no DuckDB, into and from the .jsonl shard
    scenarios = (a for name in SCENARIOS for a in ("--scenario", str(work / name)))
    proc = subprocess.run([sys.executable, "-c", NO_DUCKDB, *run, *scenarios], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    told = subprocess.run(
        [sys.executable, "-c", NO_DUCKDB, "refine", "--account", "--db", str(results), "--matrix", str(matrix)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert told.returncode == 0, told.stderr + told.stdout
    return results, [line.strip() for line in told.stdout.splitlines()]


def test_the_wheelhouse_holds_what_include_lines_need_and_their_release_lists(online: None, tmp_path: Path) -> None:
    wheelhouse, printed = _wheelhouse(tmp_path, "wh", "5")
    held = {p.name.split("-")[1] for p in wheelhouse.glob("*.whl")}
    assert set(PACKAGING + TYPING) <= held, held
    assert "10 of 10 release(s) between tested ones held" in printed and "release lists of 2 axis(es)" in printed
    assert "left out" not in printed
    releases = json.loads((wheelhouse / "harness-releases.json").read_text())
    assert set(PACKAGING) <= {v for v, _ in releases["packaging"]} and set(TYPING) <= {v for v, _ in releases["typing-extensions"]}
    lines = json.loads((wheelhouse / "harness-wheelhouse.json").read_text())["refinement"]["lines"]
    assert [(r["axis"], r["low"], r["high"], r["held"]) for r in lines] == [
        ("packaging", "22.0", "24.2", {"typing-extensions": "4.8.0"}),
        ("typing-extensions", "4.8.0", "4.12.2", {"packaging": "22.0"}),
    ]


def test_a_budget_that_runs_out_says_so_and_the_budget_it_names_makes_every_line_exact(online: None, tmp_path: Path) -> None:
    # one wheel of each line's first bisection level fits; the rest is left out, weighed
    small, printed = _wheelhouse(tmp_path, "small", "0.1")
    assert "left out: packaging 22.0 → 24.2 with typing-extensions 4.8.0: 4 of 5 release(s) between not held" in printed
    assert "left out: typing-extensions 4.8.0 → 4.12.2 with packaging 22.0: 4 of 5 release(s) between not held" in printed
    needed = re.search(r"to hold them all: the same command with --refine-budget ([\d.]+)", printed)
    assert needed, printed
    _, told = _trip(tmp_path, small)
    assert told[0].endswith("2 line(s) of the matrix with an answer: 0 exact, 2 with a range; a second trip can help on 2"), told
    for title in LINES:
        answer = told[told.index(title) + 1]
        assert answer.startswith("a range: the budget ran out:") and f"--refine-budget {needed[1]} holds every line" in answer, told

    # the second trip, with the budget the first one named
    enough, printed = _wheelhouse(tmp_path, "enough", needed[1])
    assert "left out" not in printed, printed
    _, told = _trip(tmp_path, enough)
    assert told == [told[0], LINES[0], EXACT[0], LINES[1], EXACT[1]], told
    assert told[0].endswith("2 line(s) of the matrix with an answer: 2 exact, 0 with a range")


def test_without_a_budget_the_ranges_were_not_held_and_a_plan_here_covers_the_include_lines(online: None, tmp_path: Path) -> None:
    bare, _ = _wheelhouse(tmp_path, "bare")
    results, told = _trip(tmp_path, bare)
    for title in LINES:
        answer = told[told.index(title) + 1]
        assert answer.startswith("a range: the wheelhouse did not hold the releases between:") and "no release list of" in answer, told
    # merged back here: the index lists what lies between, and the plan builds on both include lines
    merged = tmp_path / "merged.duckdb"
    assert run_cli("merge", "--db", str(merged), str(results)).returncode == 0
    plan = tmp_path / "probes.toml"
    proc = run_cli("refine", "--db", str(merged), "--matrix", str(tmp_path / "here.toml"), "--plan", str(plan), "--rounds", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    printed = " ".join(proc.stdout.split())
    assert "6 probe cell(s) on 2 line(s)" in printed, printed
    assert "packaging 23.1, packaging 23.2, packaging 24.1" in printed and "typing-extensions 4.10.0" in printed, printed
    assert "left out" not in printed
    # a plan narrowed to one axis names the line it leaves out
    proc = run_cli("refine", "--db", str(merged), "--matrix", str(tmp_path / "here.toml"), "--plan", str(plan), "--axis", "packaging")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "left out: typing-extensions, with packaging 22.0: not along --axis packaging" in " ".join(proc.stdout.split())


def test_the_account_of_a_stored_h200_trip_is_exact_on_every_line() -> None:
    # the H200 one trip of matrices/gpu-one-trip.toml, as its runner wrote it (no wheelhouse kept)
    stored = REPO / "results" / "gpu" / "h200-one-trip" / "one-trip.jsonl"
    proc = run_cli("refine", "--account", "--db", str(stored), "--matrix", str(REPO / "matrices" / "gpu-one-trip.toml"))
    assert proc.returncode == 0, proc.stderr
    told = [line.strip() for line in proc.stdout.splitlines()]
    assert told[0] == (
        "account on NVIDIA H200 · linux-x86_64 · Python 3.12 · CUDA 13.0: 3 line(s) of the matrix with an answer: 3 exact, 0 with a range"
    )
    assert "exact: gpu_peft_device_map_generate: fixed in transformers 5.23.0 (after 5.22.2)" in told
    assert sum(line.startswith("exact: ") for line in told) == 8 and not any(line.startswith("a range") for line in told)
