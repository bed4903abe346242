"""Exact answers on real, light cells: a gapped matrix gives a range that names what was not built,
and refinement (the sweep's default, or `harness refine`) builds the releases between until the
answer is exact. A real API change: `packaging.metadata` exists from packaging 23.1 on.

The matrix tests packaging 22.0 and 24.2 only; between them the index has 23.0, 23.1, 23.2, 24.0
and 24.1. Two lines (six 1.16.0 and 1.17.0) share the transition.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import duckdb
import pytest

from harness.running.envs import uv_binary
from tests.conftest import git, run_cli

SCENARIO = "from packaging import metadata  # new in packaging 23.1\nprint(metadata.__name__)\n"
BETWEEN = ["23.0", "23.1", "23.2", "24.0", "24.1"]
CPU = "cpu · linux-x86_64 · Python 3.11"


def write_matrix(path: Path, refine: bool = True) -> Path:
    path.write_text(
        textwrap.dedent(f"""
        [matrix]
        python = "3.11"
        timeout = 60
        preload = []
        refine = {"true" if refine else "false"}

        [axes]
        packaging = ["22.0", "24.2"]
        six = ["1.16.0", "1.17.0"]
    """)
    )
    return path


def sweep(work: Path, env_root: Path, *extra: str, refine: bool = True) -> tuple[Path, str]:
    scenario = work / "needs_metadata.py"
    scenario.write_text(SCENARIO)
    matrix = write_matrix(work / "matrix.toml", refine)
    db = work / "out.duckdb"
    args = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--scenario", str(scenario)]
    proc = run_cli(*args, *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return db, proc.stdout


def answers(db: Path) -> list[tuple[str, str, str, str]]:
    proc = run_cli("attribute", "--db", str(db), "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    return sorted((r["held"].get("six", ""), r["description"].split(" — ")[0], r["how"], r["machine"]) for r in records)


@pytest.fixture(scope="module")
def gapped(tmp_path_factory: pytest.TempPathFactory, env_root: Path) -> tuple[Path, str]:
    return sweep(tmp_path_factory.mktemp("gapped"), env_root, refine=False)


def test_a_gapped_matrix_gives_a_range_naming_the_releases_not_built(gapped: tuple[Path, str]) -> None:
    db, out = gapped
    expected = f"fixed between packaging 22.0 (fails) and 24.2 (passes); not built: {', '.join(BETWEEN)}"
    assert expected in " ".join(out.split())  # the summary's words (rich may wrap a long cell)
    assert "fixed in packaging" not in out
    assert "refinement: no range between tested releases to narrow (refine = false in the matrix)" in " ".join(out.split())
    assert answers(db) == [(six, expected, "range", CPU) for six in ("1.16.0", "1.17.0")]
    # the releases the index listed are stored with the run
    with duckdb.connect(str(db), read_only=True) as con:
        listed = [r[0] for r in con.sql("SELECT version FROM releases WHERE axis = 'packaging'").fetchall()]
    assert set(BETWEEN) <= set(listed)


def test_refinement_makes_every_line_exact_and_shares_the_boundary(tmp_path: Path, env_root: Path) -> None:
    db, out = sweep(tmp_path, env_root)
    assert "refinement round 1:" in out
    exact = "fixed in packaging 23.1 (after 23.0)"
    assert answers(db) == [(six, exact, "refined", CPU) for six in ("1.16.0", "1.17.0")]
    with duckdb.connect(str(db), read_only=True) as con:
        probes = con.sql("SELECT cell_id, origin FROM cells WHERE origin = 'refine' ORDER BY cell_id").fetchall()
        statuses = dict(con.sql("SELECT cell_id, status FROM outcomes_v").fetchall())
    # a bisection of 5 releases is at most 3 builds; the other line builds the boundary and the one before it
    assert 2 <= len(probes) <= 3 + 2
    assert all(statuses[cell] in ("pass", "error") for cell, _ in probes)  # every probe an ordinary stored outcome
    # a rerun resumes: nothing is built again
    again = run_cli(*_rerun_args(tmp_path, env_root))
    assert again.returncode == 0 and "0 outcome(s) computed" in again.stdout
    assert "refinement: no range between tested releases to narrow" in again.stdout


def _rerun_args(work: Path, env_root: Path) -> list[str]:
    return [
        "sweep", "--matrix", str(work / "matrix.toml"), "--db", str(work / "out.duckdb"), "--env-root", str(env_root),
        "--no-progress", "--scenario", str(work / "needs_metadata.py"),
    ]  # fmt: skip


def test_harness_refine_over_a_results_file(tmp_path: Path, env_root: Path, gapped: tuple[Path, str]) -> None:
    db = tmp_path / "copy.duckdb"
    db.write_bytes(gapped[0].read_bytes())
    work = gapped[0].parent
    args = ["refine", "--db", str(db), "--matrix", str(work / "matrix.toml"), "--env-root", str(env_root)]
    # the sweep ran a scenario from outside scenarios/: refine must be told where it is
    missing = run_cli(*args)
    assert missing.returncode == 2 and "pass each file with --scenario" in missing.stderr and "needs_metadata" in missing.stderr
    proc = run_cli(*args, "--scenario", str(work / "needs_metadata.py"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "probes stored under run refine-" in " ".join(proc.stdout.split())
    assert [a[1] for a in answers(db)] == ["fixed in packaging 23.1 (after 23.0)"] * 2


def test_refine_limit_leaves_what_it_did_not_build_as_a_range(tmp_path: Path, env_root: Path) -> None:
    db, out = sweep(tmp_path, env_root, "--refine-limit", "1")
    assert "stopped: refine_limit of 1 probe cell(s) reached" in " ".join(out.split())
    descriptions = [a[1] for a in answers(db)]
    assert all(d.startswith("fixed between packaging") and "not built:" in d for d in descriptions)


def test_two_machines_merged_give_no_cross_machine_transition(tmp_path: Path, gapped: tuple[Path, str]) -> None:
    """The same results, and a copy claiming another machine where 24.2 still fails: never a transition across."""
    here = gapped[0]
    other = tmp_path / "gpu.duckdb"
    other.write_bytes(here.read_bytes())
    with duckdb.connect(str(other)) as con:
        con.execute('UPDATE runs SET run_id = \'r-gpu\', host = \'{"platform": "linux-x86_64", "gpu": "NVIDIA H200"}\'')
        for table in ("cells", "outcomes", "releases"):
            con.execute(f"UPDATE {table} SET run_id = 'r-gpu'")
        # on this "machine" the newer cells fail too, with the same signature
        con.execute("UPDATE outcomes SET status = 'error', signature = (SELECT max(signature) FROM outcomes) WHERE cell_id LIKE '%24.2%'")
    merged = tmp_path / "merged.duckdb"
    assert run_cli("merge", "--db", str(merged), str(here), str(other)).returncode == 0
    proc = run_cli("attribute", "--db", str(merged), "--json", "--offline")
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    moves = [r for r in records if r["kind"] in ("introduced", "fixed")]
    assert {r["machine"] for r in moves} == {CPU}  # the H200 run alone shows no change along any axis
    machines = [r for r in records if r["kind"] == "machine"]
    # 24.2 passes on the CPU and fails on the H200 with the same versions: a difference of machines
    assert machines and all(r["machine"].startswith("NVIDIA H200") and r["other_machine"] == CPU for r in machines)
    assert "a difference of machines, not of releases" in machines[0]["description"]


def _probepkg(repo: Path, wheels: Path) -> dict[str, str]:
    """A git repository of an installable package with release tags, and wheels of its releases in a find-links folder.

    v0.1.0 is broken; the fix lands in a commit between v0.1.0 and v0.2.0; v0.3.0 follows.
    Returns the shas by name.
    """
    (repo / "probepkg").mkdir(parents=True)
    history = [
        ("0.1.0", True, "Release 0.1.0", "v0.1.0"),
        ("0.1.0", True, "Refactor the loader (#40)", ""),
        ("0.1.0", True, "Docs (#41)", ""),
        ("0.1.0", False, "Fix the meta tensor (#42)", ""),
        ("0.1.0", False, "Tests (#43)", ""),
        ("0.2.0", False, "Release 0.2.0", "v0.2.0"),
        ("0.3.0", False, "Release 0.3.0", "v0.3.0"),
    ]
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for version, broken, message, tag in history:
        (repo / "pyproject.toml").write_text(
            f'[project]\nname = "compat-harness-probepkg"\nversion = "{version}"\n'
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        )
        (repo / "probepkg" / "__init__.py").write_text(f"BROKEN = {broken}\n")
        (repo / "CHANGES").write_text(f"{message}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", message)
        shas[message] = git(repo, "rev-parse", "HEAD")
        if tag:
            git(repo, "tag", tag)
            proc = subprocess.run([uv_binary(), "build", "--wheel", "-q", "-o", str(wheels), str(repo)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
    return shas


def test_refine_with_a_clone_names_the_commit_and_its_pr(tmp_path: Path, env_root: Path) -> None:
    shas = _probepkg(tmp_path / "repo", tmp_path / "wheels")
    scenario = tmp_path / "fixed.py"
    scenario.write_text("import probepkg\nassert not probepkg.BROKEN, 'still broken'\n")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        f'[matrix]\npython = "3.11"\npreload = []\nfind_links = ["{tmp_path / "wheels"}"]\n'
        '[axes]\ncompat-harness-probepkg = ["0.1.0", "0.3.0"]\n'
    )
    db = tmp_path / "out.duckdb"
    proc = run_cli(
        "sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--scenario", str(scenario)
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "fixed in compat-harness-probepkg 0.2.0 (after 0.1.0)" in " ".join(proc.stdout.split())  # 0.2.0 refined from find-links
    proc = run_cli(
        "refine", "--db", str(db), "--matrix", str(matrix), "--env-root", str(env_root), "--scenario", str(scenario),
        "--git", f"compat-harness-probepkg={tmp_path / 'repo'}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    text = " ".join(proc.stdout.split())
    fix = shas["Fix the meta tensor (#42)"]
    assert f"fixed by commit {fix[:12]} Fix the meta tensor (#42)" in text
    assert f"the commit before it is {shas['Docs (#41)'][:12]}" in text
    # the Support page over answers between commits: no release column for them, and no error
    # (decided in DuckDB from the answers `refine` stored)
    from harness.storage.store import Store
    from harness.workflows import support as publish

    with Store(db, read_only=True) as store:
        tables, _ = publish.support_of(store)
        assert publish._support_in_sql(store) == (tables, "scenario")
    assert any(t.library == "compat-harness-probepkg" for t in tables)


def test_a_plan_for_an_offline_runner_narrows_the_range_in_one_trip(tmp_path: Path, env_root: Path, gapped: tuple[Path, str]) -> None:
    # `refine --plan` builds nothing: it writes the probe cells of the next rounds, whichever way
    # each probe goes, as a matrix to prepare (`harness wheelhouse`) and run where the runner is
    import tomllib

    db = tmp_path / "copy.duckdb"
    db.write_bytes(gapped[0].read_bytes())
    work = gapped[0].parent
    plan = tmp_path / "probes.toml"
    proc = run_cli("refine", "--db", str(db), "--matrix", str(work / "matrix.toml"), "--plan", str(plan), "--rounds", "2")
    assert proc.returncode == 0, proc.stderr
    assert "releases to prepare: packaging 23.1, packaging 23.2, packaging 24.1" in " ".join(proc.stdout.split())
    parsed = tomllib.loads(plan.read_text())
    assert parsed["matrix"]["refine"] is False and parsed["matrix"]["scenarios"] == ["needs_metadata"]
    assert len(parsed["include"]) == 6 - 1  # 3 releases × 2 lines; the first cell is the axes' product
    listed = run_cli("list", "--matrix", str(plan))
    assert listed.returncode == 0 and len(listed.stdout.split()) == 6
    # run it "on the runner" into its own file, merge, and attribute: 22.0 .. 23.1 is all that is left
    shard = tmp_path / "runner.jsonl"
    args = ["sweep", "--matrix", str(plan), "--db", str(shard), "--env-root", str(env_root), "--no-progress"]
    assert run_cli(*args, "--scenario", str(work / "needs_metadata.py")).returncode == 0
    assert run_cli("merge", "--db", str(db), str(shard)).returncode == 0
    assert [a[1] for a in answers(db)] == ["fixed between packaging 22.0 (fails) and 23.1 (passes); not built: 23.0"] * 2


def _offline_matrix(path: Path, wheelhouse: Path) -> Path:
    """The runner's copy of the gapped matrix: no index, the wheelhouse as its only source."""
    text = write_matrix(path).read_text().replace("refine = true", f'refine = true\nno_index = true\nfind_links = ["{wheelhouse}"]')
    path.write_text(text.replace('six = ["1.16.0", "1.17.0"]', 'six = ["1.17.0"]'))
    return path


@pytest.mark.parametrize(
    ("budget", "answer", "open_note"),
    [
        # every release between fits: the runner's own refinement ends exact, in one trip
        ("5", "fixed in packaging 23.1 (after 23.0)", ""),
        # one wheel's worth: the first bisection level only (23.2); the answer names what it lacked
        ("0.08", "fixed between packaging 22.0 (fails) and 23.2 (passes); not built: 23.0, 23.1", "4 of 5 release(s) between not held"),
    ],
)
def test_one_trip_a_wheelhouse_with_a_refine_budget_refines_offline(
    tmp_path: Path, env_root: Path, budget: str, answer: str, open_note: str
) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    here = write_matrix(tmp_path / "here.toml")
    here.write_text(here.read_text().replace('six = ["1.16.0", "1.17.0"]', 'six = ["1.17.0"]'))
    args = ["--matrix", str(here), "--out", str(wheelhouse), "--python-version", "3.11", "--no-tools", "--refine-budget", budget]
    prepared = run_cli("wheelhouse", *args)
    assert prepared.returncode == 0, prepared.stderr + prepared.stdout
    printed = " ".join(prepared.stdout.split())
    assert "release lists of 1 axis(es)" in printed
    assert (open_note in printed) if open_note else ("may stay open" not in printed)
    releases = json.loads((wheelhouse / "harness-releases.json").read_text())
    assert [v for v, _ in releases["packaging"] if "22.0" <= v <= "24.2"] == ["22.0", *BETWEEN, "24.2"]

    # "on the runner": offline, its own env root; the sweep refines by itself from the wheelhouse
    scenario = tmp_path / "needs_metadata.py"
    scenario.write_text(SCENARIO)
    matrix = _offline_matrix(tmp_path / "runner.toml", wheelhouse)
    db = tmp_path / "runner.jsonl"
    run = ["sweep", "--matrix", str(matrix), "--db", str(db), "--env-root", str(tmp_path / "runner-envs"), "--no-progress"]
    proc = run_cli(*run, "--scenario", str(scenario))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # merged back here, the answer stands as the runner left it
    merged = tmp_path / "merged.duckdb"
    assert run_cli("merge", "--db", str(merged), str(db)).returncode == 0
    assert [a[1] for a in answers(merged)] == [answer]
