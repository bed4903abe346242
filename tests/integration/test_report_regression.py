"""The real regression of issue 39, end to end: a report an upstream maintainer acts on.

transformers 5.6.0's `load_adapter` imports `peft.utils.save_and_load._maybe_shard_state_dict_for_tp`,
which peft 0.19.0 added: with an older peft every adapter load through transformers fails with an
ImportError raised in transformers. tests/data/adapter_suite holds it twice, as a test of a small
pytest suite and as a scenario. Each is swept over transformers 5.5.1 / 5.8.0 × peft 0.18.0 /
0.19.1 (torch 2.13.0 CPU) from a copy of the suite in a temporary folder, refinement building
the releases between, and then:

- attribution is exact on both axes (introduced in transformers 5.6.0 with peft 0.18.0 held,
  fixed in peft 0.19.0 with transformers 5.8.0 held), and the requirement they state is
  "transformers>=5.6.0 needs peft>=0.19.0": in `harness attribute` (text and --json), the
  report's summary, `harness pin --constraints` and the published page; without refinement the
  answers are ranges, and no requirement is stated;
- the report of the test and the one of the scenario name no folder of this machine;
- its traceback is at most 40 lines with the frame under test marked;
- the one-file repro, run by `uv run` in a fresh environment, fails with the signature, and
  its passing twin passes.

Needs the index (transformers and peft), uv and PIP_FIND_LINKS with the CPU torch wheel; skips,
saying which is missing, without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

from harness.running.envs import uv_binary
from tests.conftest import REPO, run_cli

SUITE = REPO / "tests" / "data" / "adapter_suite"
MATRIX = """[matrix]
python = "3.11"
find_links = ["$PIP_FIND_LINKS"]
timeout = 300

[axes]
torch = ["2.13.0"]
transformers = ["5.5.1", "5.8.0"]
peft = ["0.18.0", "0.19.1"]
"""
TEST = "tests/test_adapter.py::test_load_adapter_roundtrip"
SCENARIO = "adapter_load"
SIG = (
    "ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load' (...)"
    " @ transformers/integrations/peft.py:load_adapter"
)
REQUIREMENT = "transformers>=5.6.0 needs peft>=0.19.0"
#: the four cells of the two exact answers, and what the failure did in each
CELLS = [
    ("torch2.13.0-tf5.5.4-peft0.18.0", "passes"),
    ("torch2.13.0-tf5.6.0-peft0.18.0", "fails"),
    ("torch2.13.0-tf5.8.0-peft0.18.1", "fails"),
    ("torch2.13.0-tf5.8.0-peft0.19.0", "passes"),
]


def _missing() -> str:
    """What this machine lacks for the real sweep, or ""."""
    folder = os.environ.get("PIP_FIND_LINKS", "")
    if not folder:
        return "needs PIP_FIND_LINKS naming a folder with the CPU torch 2.13.0 wheel"
    if not list(Path(folder).glob("torch-2.13.0+cpu-*.whl")):
        return f"needs the torch 2.13.0+cpu wheel in PIP_FIND_LINKS ({folder}): none there"
    try:
        uv_binary()
    except FileNotFoundError as exc:
        return f"needs uv: {exc}"
    try:
        urllib.request.urlopen("https://pypi.org/simple/peft/", timeout=15).close()
    except OSError as exc:
        return f"needs the index (PyPI) for the transformers and peft releases: {exc}"
    return ""


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the suite in a temporary folder: the folder the sweeps run in, and the suite's root."""
    missing = _missing()
    if missing:
        pytest.skip(missing)
    where = tmp_path_factory.mktemp("sweep") / "adapter_suite"
    shutil.copytree(SUITE, where)
    (where / "matrix.toml").write_text(MATRIX)
    return where


def _sweep(place: Path, env_root: Path, db: Path, *what: str) -> Path:
    sweep = ["sweep", "--matrix", "matrix.toml", "--db", str(db), "--env-root", str(env_root), "--no-progress", *what]
    proc = run_cli(*sweep, cwd=place, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return db


@pytest.fixture(scope="module")
def suite_db(place: Path, env_root: Path) -> Path:
    return _sweep(place, env_root, place.parent / "suite.duckdb", "--tests", "tests", "--tests-root", str(place))


@pytest.fixture(scope="module")
def scenario_db(place: Path, env_root: Path) -> Path:
    return _sweep(place, env_root, place.parent / "scenario.duckdb", "--scenario", SCENARIO)


@pytest.fixture(scope="module")
def reports(place: Path, suite_db: Path, scenario_db: Path) -> dict[str, Path]:
    """`harness report --signature _maybe_shard --repro … --out …` of the test and of the scenario, run from the sweep's folder."""
    made = {}
    for kind, db in (("test", suite_db), ("scenario", scenario_db)):
        out = place.parent / f"report-{kind}"
        proc = run_cli(
            "report",
            "--db",
            str(db),
            "--signature",
            "_maybe_shard",
            "--repro",
            str(out / "repro.py"),
            "--out",
            str(out / "issue.md"),
            cwd=place,
        )
        assert proc.returncode == 0, proc.stderr
        made[kind] = out
    return made


def test_two_exact_answers_state_the_requirement(suite_db: Path, place: Path, tmp_path: Path) -> None:
    proc = run_cli("attribute", "--db", str(suite_db), "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    answers = sorted(r["description"].split(" — ")[0] for r in records if r["kind"] in ("introduced", "fixed"))
    assert answers == ["fixed in peft 0.19.0 (after 0.18.1)", "introduced in transformers 5.6.0 (after 5.5.4)"]
    [stated] = [r for r in records if r["kind"] == "requirement"]
    assert (stated["requirement"], stated["scenarios"], stated["signature"]) == (REQUIREMENT, [TEST], SIG)
    assert [(c["cell_id"], c["failure"]) for c in stated["cells"]] == CELLS
    assert stated["machine"].startswith("cpu · linux")

    text = run_cli("attribute", "--db", str(suite_db), "--offline")
    assert f"missing requirement: {REQUIREMENT} on cpu" in text.stdout, text.stdout

    constraints = run_cli("pin", "--db", str(suite_db), "--constraints")
    assert constraints.returncode == 0, constraints.stderr
    assert constraints.stdout.splitlines()[-1] == "peft>=0.19.0"
    assert f"# {REQUIREMENT}: {TEST} fails otherwise on cpu" in constraints.stdout
    assert "#   or, to keep peft<0.19.0: transformers<5.6.0" in constraints.stdout

    site = run_cli("publish", "--db", str(suite_db), "--out", str(tmp_path / "site"))
    assert site.returncode == 0, site.stderr
    assert 'data-requirement="transformers&gt;=5.6.0 needs peft&gt;=0.19.0"' in (tmp_path / "site" / "index.html").read_text()


def test_a_range_states_no_requirement(place: Path, env_root: Path) -> None:
    # the same four cells without refinement: transformers 5.5.2…5.7.0 and peft 0.18.1, 0.19.0 unbuilt, both answers ranges
    db = _sweep(place, env_root, place.parent / "ranges.duckdb", "--tests", "tests", "--tests-root", str(place), "--no-refine")
    proc = run_cli("attribute", "--db", str(db), "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    moves = [r for r in records if r["kind"] in ("introduced", "fixed")]
    assert sorted(r["axis"] for r in moves) == ["peft", "transformers"] and all(r["how"] == "range" for r in moves)
    assert [r for r in records if r["kind"] == "requirement"] == []
    assert run_cli("pin", "--db", str(db), "--constraints").stdout.startswith("# no requirement stated")
    report = run_cli("report", "--db", str(db), "--signature", "_maybe_shard", cwd=place)
    assert report.returncode == 0 and "Missing requirement" not in report.stdout


@pytest.mark.parametrize("kind", ["test", "scenario"])
def test_the_report_names_no_folder_of_the_machine(reports: dict[str, Path], place: Path, env_root: Path, kind: str) -> None:
    folders = {
        "the temporary folder": tempfile.gettempdir().rstrip("/") + "/",
        "the home folder": str(Path.home()),
        "the env root": str(env_root),
        "the sweep's folder": str(place),
        "the folder of wheels": os.environ["PIP_FIND_LINKS"],
    }
    for name in ("issue.md", "repro.py", "repro-passing.py"):
        text = (reports[kind] / name).read_text()
        for what, folder in folders.items():
            assert folder not in text, f"{name} names {what} ({folder})"
    body = (reports[kind] / "issue.md").read_text()
    assert f"**Missing requirement: `{REQUIREMENT}`**" in body
    title = next(line for line in body.splitlines() if line.startswith("**Suggested title:** ")).removeprefix("**Suggested title:** ")
    # one line: the exception (the file it names left out, cut at 100 characters) and its library
    assert title == "ImportError: cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.sa… (transformers)"


@pytest.mark.parametrize("kind", ["test", "scenario"])
def test_the_traceback_is_short_and_marks_the_frame_under_test(reports: dict[str, Path], kind: str) -> None:
    body = (reports[kind] / "issue.md").read_text()
    trace = body.split("### Traceback (the last frames)\n\n```text\n", 1)[1].split("\n```\n", 1)[0].splitlines()
    assert len(trace) <= 40
    marked = [line for line in trace if "←" in line]
    if kind == "test":  # pytest's --tb=short, from the stored long format (which repeated a 40-line docstring)
        assert marked == [
            "site-packages/transformers/integrations/peft.py:509: in load_adapter  ← transformers: the innermost frame under test"
        ]
        assert trace[0] == "tests/test_adapter.py:14: in test_load_adapter_roundtrip"
    else:
        assert marked == [
            '  File "site-packages/transformers/integrations/peft.py", line 509, in load_adapter'
            "  ← transformers: the innermost frame under test"
        ]
    assert "hotswap" not in "\n".join(trace)  # the docstring
    assert trace[-1].endswith(
        "cannot import name '_maybe_shard_state_dict_for_tp' from 'peft.utils.save_and_load' (site-packages/peft/utils/save_and_load.py)"
    )


def _uv(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UV_FIND_LINKS": os.environ["PIP_FIND_LINKS"], "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
    return subprocess.run([uv_binary(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("kind", ["test", "scenario"])
def test_the_repro_fails_with_the_signature_and_the_passing_set_passes(reports: dict[str, Path], tmp_path: Path, kind: str) -> None:
    # elsewhere: a folder of its own with the two files and nothing else
    for name in ("repro.py", "repro-passing.py"):
        shutil.copy(reports[kind] / name, tmp_path / name)
    # the CPU build from the folder of wheels (as the script's comment says: its index left out), never PyPI's CUDA build:
    # checked before anything installs
    resolved = _uv("export", "--script", "repro.py", "--no-header", "--no-sources", cwd=tmp_path)
    if "torch==2.13.0+cpu" not in resolved.stdout:
        pytest.skip(f"uv does not resolve torch 2.13.0+cpu from PIP_FIND_LINKS here: {(resolved.stderr or resolved.stdout)[-300:]}")
    failing = _uv("run", "--isolated", "--no-sources", "repro.py", cwd=tmp_path)
    assert failing.returncode == 1, failing.stdout[-3000:] + failing.stderr[-3000:]
    assert failing.stdout.splitlines()[-2:] == [f"signature: {SIG}", "repro: fails with the reported signature"]
    passing = _uv("run", "--isolated", "--no-sources", "repro-passing.py", cwd=tmp_path)
    assert passing.returncode == 0, passing.stdout[-3000:] + passing.stderr[-3000:]
    assert passing.stdout.splitlines()[-1] == "repro: passes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repro-passing.py", "repro.py"]  # it wrote nothing beside itself
