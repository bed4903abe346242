"""`harness explain` on real nights: real uv envs of real releases, a team's real git repository,
a local upstream with a dozen commits, the probes' real pytest workers; then `harness changes`.

- packages moved under the pins (each night resolved as of its own date, `--exclude-newer`): the one
  whose move alone reproduces the change is named among five that moved;
- a git axis moved by twelve commits, one of which breaks the test: that commit, in at most
  ⌈log2(12)⌉ + 1 probes;
- the team's own code moved by seven commits: its first bad commit;
- a test that flips on every run while the team's commits are bisected: inconclusive (flaky), no culprit;
- a commit of docs alone and a test that flips: flaky, not a regression (the code under test is its
  source files' content, not the commit).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from tests.conftest import git, git_package, run_cli

MATRIX = """
[matrix]
python = "3.11"
timeout = 60

[axes]
{axes}

[tests]
root = "{root}"
paths = ["tests"]
{extra}
"""
#: Two nights a quarter apart: packaging 24.1 -> 24.2 (which added `packaging.licenses`), and
#: certifi, charset-normalizer, pytest and urllib3 moved beside it.
NIGHTS = ("2024-10-01", "2024-12-23")


def _repo(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "the team's package and tests")


def _sweep(tmp_path: Path, env_root: Path, tag: str, date: str = NIGHTS[1], env: dict[str, str] | None = None) -> str:
    args = ["sweep", "--matrix", str(tmp_path / "m.toml"), "--db", str(tmp_path / "r.duckdb"), "--env-root", str(env_root)]
    proc = run_cli(*args, "--no-progress", "--no-refine", "--run-tag", tag, "--exclude-newer", date, env=env)
    assert proc.returncode in (0, 1), proc.stderr + proc.stdout[-3000:]
    found = re.search(r"^run (\S+):", proc.stdout, re.M)
    assert found is not None, proc.stdout
    return found.group(1)


def _explain(tmp_path: Path, env_root: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    proc = run_cli("explain", "--db", str(tmp_path / "r.duckdb"), "--env-root", str(env_root), *extra, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    return proc.stdout


def _changes(tmp_path: Path) -> dict[str, Any]:
    proc = run_cli("changes", "--db", str(tmp_path / "r.duckdb"), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _probes(said: str) -> list[str]:
    return [line for line in said.splitlines() if line.strip().startswith("probe ")]


def test_the_package_whose_move_alone_reproduces_it_among_several_that_moved(tmp_path: Path, env_root: Path) -> None:
    team = tmp_path / "team"
    tests = "def test_license():\n    from packaging.licenses import canonicalize_license_expression\n\n"
    tests += '    assert canonicalize_license_expression("mit") == "MIT"\n'
    _repo(team, {"tests/test_lic.py": tests, "conftest.py": ""})
    extra = 'requirements = ["packaging", "certifi", "urllib3", "charset-normalizer"]'
    (tmp_path / "m.toml").write_text(MATRIX.format(axes='idna = ["3.10"]', root=team, extra=extra))
    _sweep(tmp_path, env_root, "night-1", NIGHTS[0])
    _sweep(tmp_path, env_root, "night-2", NIGHTS[1])
    (change,) = _changes(tmp_path)["changes"]
    assert change["kind"] == "fixed" and "packaging.licenses" in change["signature"]
    moved = {m["name"]: (m["before"], m["after"]) for m in change["moved"]}
    assert moved["packaging"] == ("24.1", "24.2") and len(moved) >= 4, moved  # several moved under the pins
    assert "cause" not in change

    said = _explain(tmp_path, env_root)
    assert "cause: packaging 24.1 → 24.2 (alone reproduces it" in said, said
    (change,) = _changes(tmp_path)["changes"]
    assert change["cause"]["verdict"] == "culprit" and [c["name"] for c in change["cause"]["culprits"]] == ["packaging"]
    assert len(_probes(said)) <= 2 * math.ceil(math.log2(len(moved))) + 2, said
    text = run_cli("changes", "--db", str(tmp_path / "r.duckdb")).stdout
    assert "cause: packaging 24.1 → 24.2" in text and "moved: " in text


def test_the_commit_of_a_git_axis_that_broke_a_test_within_log2_probes(tmp_path: Path, env_root: Path) -> None:
    upstream = tmp_path / "tinypkg"
    git_package(upstream, [("ANSWER = 1\n", "the start")])
    team = tmp_path / "team"
    _repo(team, {"tests/test_t.py": "import tinypkg\n\n\ndef test_answer():\n    assert tinypkg.ANSWER == 1\n", "conftest.py": ""})
    (tmp_path / "m.toml").write_text(MATRIX.format(axes=f'tinypkg = ["git+file://{upstream}@main"]', root=team, extra=""))
    _sweep(tmp_path, env_root, "night-1")
    for i in range(1, 13):  # a dozen commits upstream; the seventh breaks the test
        (upstream / "tinypkg" / "__init__.py").write_text(f"ANSWER = {2 if i >= 7 else 1}  # {i}\n")
        git(upstream, "commit", "-qam", f"commit {i} (#{200 + i})")
    _sweep(tmp_path, env_root, "night-2")
    said = _explain(tmp_path, env_root)
    probes = _probes(said)
    assert len(probes) <= math.ceil(math.log2(12)) + 1, said
    assert "cause: tinypkg commit" in said and "commit 7 (#207)" in said and "(12 commits)" in said, said
    (change,) = _changes(tmp_path)["changes"]
    assert change["cause"]["commit"]["subject"] == "commit 7 (#207)" and change["cause"]["commit"]["pr"] == "207"


def test_your_first_bad_commit(tmp_path: Path, env_root: Path) -> None:
    team = tmp_path / "team"
    tests = "from teampkg import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n"
    _repo(team, {"teampkg/__init__.py": "VALUE = 1\n", "tests/test_team.py": tests, "conftest.py": ""})
    (tmp_path / "m.toml").write_text(MATRIX.format(axes='idna = ["3.10"]', root=team, extra=""))
    _sweep(tmp_path, env_root, "night-1")
    for i in range(1, 8):  # seven commits of the team's; the fifth breaks the test
        (team / "teampkg" / "notes.py").write_text(f"# note {i}\n")
        if i == 5:
            (team / "teampkg" / "__init__.py").write_text("VALUE = 2\n")
        git(team, "add", ".")
        git(team, "commit", "-qm", f"change {i}")
    _sweep(tmp_path, env_root, "night-2")
    said = _explain(tmp_path, env_root)
    cause = r"your commit [0-9a-f]{7} change 5 of your code [0-9a-f]{7}\.\.[0-9a-f]{7} \(7 commits\)"
    assert re.search(f"cause: {cause}", said), said
    assert len(_probes(said)) <= math.ceil(math.log2(7)) + 1, said
    # everywhere the change is shown, its cause is shown: changes (text, markdown), the summary's head, the page, the report
    db = str(tmp_path / "r.duckdb")
    for shown in (run_cli("changes", "--db", db).stdout, run_cli("changes", "--db", db, "--markdown").stdout):
        assert re.search(f"cause: {cause}", shown) and "moved: your code" in shown, shown
    head = " ".join(run_cli("summary", "--db", db).stdout.split("History:")[0].split())  # the terminal's width wraps it
    assert re.search(f"\\+ tests/test_team.py::test_value — cause: {cause}", head), head
    run_cli("publish", "--db", db, "--out", str(tmp_path / "site"))
    since = (tmp_path / "site" / "index.html").read_text().split('id="matrix"')[0]
    assert re.search(cause, since), since[-2000:]
    report = run_cli("report", "--db", db, "--test", "tests/test_team.py::test_value").stdout
    assert "## Why it changed" in report and re.search(cause, report), report[-2000:]


def test_a_test_that_flips_during_the_bisection_is_inconclusive_and_names_no_culprit(tmp_path: Path, env_root: Path) -> None:
    team = tmp_path / "team"
    flips = "import os\nfrom pathlib import Path\n\n\ndef test_flips():\n"
    flips += '    seen = Path(os.environ["TEAM_COUNTER"])\n    n = int(seen.read_text() or 0) if seen.exists() else 0\n'
    flips += "    seen.write_text(str(n + 1))\n    assert n % 2 == 0, 'odd runs fail'\n"
    _repo(team, {"teampkg/__init__.py": "", "tests/test_flips.py": flips, "conftest.py": ""})
    (tmp_path / "m.toml").write_text(MATRIX.format(axes='idna = ["3.10"]', root=team, extra=""))
    env = {"TEAM_COUNTER": str(tmp_path / "counter")}
    _sweep(tmp_path, env_root, "night-1", env=env)  # run 0: passes
    for i in range(1, 5):
        (team / "teampkg" / "__init__.py").write_text(f"X = {i}\n")
        git(team, "commit", "-qam", f"change {i}")
    _sweep(tmp_path, env_root, "night-2", env=env)  # run 1: fails
    (change,) = _changes(tmp_path)["changes"]
    assert change["kind"] == "regressed"  # the code moved: a regression until a probe says otherwise
    said = _explain(tmp_path, env_root, env=env)
    assert "cause: inconclusive (flaky)" in said and "your commit" not in said, said
    (change,) = _changes(tmp_path)["changes"]
    assert change["cause"]["verdict"] == "flaky" and change["cause"]["commit"] is None


def test_a_docs_only_commit_keeps_nothing_changed_and_a_flip_across_it_is_flaky(tmp_path: Path, env_root: Path) -> None:
    team = tmp_path / "team"
    tests = 'import os\n\n\ndef test_environment():\n    assert os.environ.get("TEAM_FLIP", "0") == "0"\n'
    _repo(team, {"teampkg/__init__.py": "VALUE = 1\n", "tests/test_team.py": tests, "conftest.py": "", "README.md": "# team\n"})
    (tmp_path / "m.toml").write_text(MATRIX.format(axes='idna = ["3.10"]', root=team, extra=""))
    _sweep(tmp_path, env_root, "night-1")
    (team / "README.md").write_text("# team\n\nNow with docs.\n")
    (team / "docs").mkdir()
    (team / "docs" / "conf.py").write_text("project = 'team'\n")
    git(team, "add", ".")
    git(team, "commit", "-qm", "docs only")
    _sweep(tmp_path, env_root, "night-2", env={"TEAM_FLIP": "1"})
    found = _changes(tmp_path)
    assert [(c["kind"], c["test"].split("::")[-1]) for c in found["changes"]] == [("flaky", "test_environment")], found
    assert "+0 failing" in found["headline"] and "1 flaky" in found["headline"]


def test_a_budget_says_what_it_left_unexplained(tmp_path: Path, env_root: Path) -> None:
    team = tmp_path / "team"
    tests = "from teampkg import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n"
    _repo(team, {"teampkg/__init__.py": "VALUE = 1\n", "tests/test_team.py": tests, "conftest.py": ""})
    (tmp_path / "m.toml").write_text(MATRIX.format(axes='idna = ["3.10"]', root=team, extra=""))
    _sweep(tmp_path, env_root, "night-1")
    for i in range(1, 9):
        (team / "teampkg" / "__init__.py").write_text(f"VALUE = {1 if i < 6 else 2}  # {i}\n")
        git(team, "commit", "-qam", f"change {i}")
    _sweep(tmp_path, env_root, "night-2")
    said = _explain(tmp_path, env_root, "--budget", "1")
    assert len(_probes(said)) == 1 and "cause: not explained within the budget (1 probe(s)): still in play your code" in said, said
    bad = run_cli("explain", "--db", str(tmp_path / "r.duckdb"), "--budget", "soon")
    assert bad.returncode == 2 and "--budget 'soon'" in bad.stderr and "30m" in bad.stderr
