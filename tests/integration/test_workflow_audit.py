"""The GitHub Actions workflows we hand to people are safe to adopt as they are.

Two workflows: the one `harness init` writes into a user's repository, and the complete one in
docs/runners.md (self-hosted GPU runners). Each must
- fit GitHub's workflow schema (check-jsonschema's built-in `vendor.github-workflows`);
- give zizmor (`--offline`) nothing of medium or high severity: every action pinned to a full
  commit SHA named by its release in a comment, no checkout that keeps its token, `${{ }}`
  values passed into `run:` through `env:`, and least-privilege `permissions:`.
The same rules are also read from the YAML directly, so that they hold where zizmor is not
installed, and a workflow with the old mistakes must make zizmor speak (an audit that reads
nothing would pass anything).

`harness plan`'s JSON is the sweep job's matrix as it is (`fromJSON(needs.plan.outputs.shards)`):
it must be one line (it goes through `$GITHUB_OUTPUT`), fit the schema's `include` shape, and
carry every `matrix.*` key the workflows use, with scenarios and with a filled `[tests]` table.

zizmor and check-jsonschema come with the dev extras (`pip install -e '.[dev]'`); without them
these tests skip and say so, except on CI (`CI` set), where the dev extras are installed and a
missing tool is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.commands.flags import parse_shard
from harness.commands.init import init_project
from tests.conftest import REPO, run_cli

yaml = pytest.importorskip("yaml", reason="the workflows are read with PyYAML (pip install -e '.[dev]')")

DOCS = REPO / "docs" / "runners.md"
#: a pinned action: owner/repo[/path]@<40 hex> # v<release>
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
RELEASE_COMMENT = re.compile(r"#\s*(v\d+(\.\d+)*)\s*$")
EXPRESSION = re.compile(r"\$\{\{")


def tool(name: str) -> str:
    """The tool's path: beside this Python (the venv's bin) or on PATH; else skip, saying how to get it."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found:
        return found
    why = f"{name} is not installed: it comes with the dev extras (pip install -e '.[dev]')"
    if os.environ.get("CI"):
        pytest.fail(f"{why}; on CI the dev extras must install it")
    pytest.skip(why)


def docs_workflow() -> str:
    """The complete workflow of docs/runners.md: its YAML block that starts `name: compat-sweep`."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    [text] = [b for b in blocks if b.startswith("name: compat-sweep\n")]
    return text


@pytest.fixture(scope="module")
def workflows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each workflow as a file: init's where init writes it, the docs' copied out of the page."""
    root = tmp_path_factory.mktemp("workflows")
    init_project(root / "compat")
    docs = root / "docs" / "compat-sweep.yml"
    docs.parent.mkdir()
    docs.write_text(docs_workflow())
    return {"init": root / "compat" / ".github" / "workflows" / "compat.yml", "docs": docs}


WHICH = ["init", "docs"]


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def steps(data: dict[Any, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in data["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


def zizmor(path: Path) -> list[dict[str, Any]]:
    """zizmor's findings for one workflow file (offline: no online audits, no token)."""
    proc = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")},
    )
    # 0: no findings; 10 + the highest severity: findings; anything else: zizmor itself failed
    assert proc.returncode == 0 or proc.returncode >= 10, proc.stderr
    findings = json.loads(proc.stdout)
    assert isinstance(findings, list)
    return findings


def describe(finding: dict[str, Any]) -> str:
    where = finding["locations"][0]["concrete"]
    row = where["location"]["start_point"]["row"] + 1
    return f"line {row}: {finding['ident']} ({finding['determinations']['severity']}): {finding['desc']}: {where['feature'].strip()}"


def schema_errors(path: Path) -> str:
    """check-jsonschema's complaint about a workflow file ('' when it fits GitHub's workflow schema)."""
    proc = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


# -- the audit ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", WHICH)
def test_the_workflow_fits_githubs_schema(workflows: dict[str, Path], which: str) -> None:
    assert schema_errors(workflows[which]) == ""


@pytest.mark.parametrize("which", WHICH)
def test_zizmor_finds_nothing_of_medium_or_high_severity(workflows: dict[str, Path], which: str) -> None:
    serious = [f for f in zizmor(workflows[which]) if f["determinations"]["severity"] in ("Medium", "High")]
    assert not serious, f"zizmor --offline on the {which} workflow:\n" + "\n".join(map(describe, serious))


#: The mistakes of the workflow `harness init` wrote before it was audited (#29), and what zizmor calls each.
UNSAFE = """\
name: unsafe
on: workflow_dispatch
jobs:
  plan:
    runs-on: ubuntu-latest
    outputs:
      shards: ${{ steps.plan.outputs.shards }}
    steps:
      - id: plan
        run: echo "shards=$(harness plan --shards 2)" >> "$GITHUB_OUTPUT"
  sweep:
    needs: plan
    runs-on: ubuntu-latest
    strategy:
      matrix: ${{ fromJSON(needs.plan.outputs.shards) }}
    steps:
      - uses: actions/checkout@v4
      - run: harness sweep --shard ${{ matrix.shard }}
      - uses: actions/upload-artifact@v4
        with: {name: shard, path: .}
"""


def test_zizmor_reads_the_workflow_and_names_each_old_mistake(tmp_path: Path) -> None:
    # guards the audit itself: a zizmor that collected no workflow would pass anything
    path = tmp_path / "unsafe.yml"
    path.write_text(UNSAFE)
    found = {f["ident"] for f in zizmor(path)}
    assert {"unpinned-uses", "artipacked", "template-injection", "excessive-permissions"} <= found, found


# -- the same rules, read from the YAML (these need no tool) ----------------------------------------------------
@pytest.mark.parametrize("which", WHICH)
def test_every_action_is_pinned_to_a_commit_named_by_its_release(workflows: dict[str, Path], which: str) -> None:
    lines = [line.strip() for line in workflows[which].read_text().splitlines() if re.match(r"\s*(- )?uses:", line)]
    assert lines
    for line in lines:
        ref, _, comment = line.split("uses:", 1)[1].partition("#")
        assert PINNED.match(ref.strip()), f"{line!r}: pin the action to a full commit SHA (uses: owner/repo@<sha> # vX.Y.Z)"
        assert RELEASE_COMMENT.search("#" + comment), f"{line!r}: name the release the SHA is, in a comment (# vX.Y.Z)"


def test_both_workflows_pin_an_action_to_the_same_release(workflows: dict[str, Path]) -> None:
    pins: dict[str, set[str]] = {}
    for path in workflows.values():
        for line in path.read_text().splitlines():
            if match := re.match(r"\s*(?:- )?uses:\s*([^@\s]+)@(\S+)\s*#\s*(\S+)", line):
                repo = "/".join(match.group(1).split("/")[:2])  # actions/cache/save and actions/cache: one repository
                pins.setdefault(repo, set()).add(f"{match.group(2)} {match.group(3)}")
    assert pins and {repo: sorted(p) for repo, p in pins.items() if len(p) > 1} == {}


@pytest.mark.parametrize("which", WHICH)
def test_no_token_is_kept_and_no_expression_is_pasted_into_a_script(workflows: dict[str, Path], which: str) -> None:
    data = load(workflows[which])
    for job, step in steps(data):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{job}: a checkout needs persist-credentials: false"
        assert not EXPRESSION.search(step.get("run", "")), f"{job}: pass ${{{{ … }}}} into `run:` through `env:`: {step['run']!r}"


@pytest.mark.parametrize("which", WHICH)
def test_permissions_are_none_by_default_and_each_job_names_its_own(workflows: dict[str, Path], which: str) -> None:
    data = load(workflows[which])
    assert data["permissions"] == {}
    writes = {name: job["permissions"] for name, job in data["jobs"].items() if "write" in job["permissions"].values()}
    if which == "docs":
        assert writes == {}
    else:  # the issue and the Pages deployment: each in a job that runs no code under test and checks nothing out
        assert writes == {"issue": {"issues": "write"}, "pages": {"pages": "write", "id-token": "write"}}
        for name in writes:
            assert not any(str(s.get("uses", "")).startswith("actions/checkout@") for s in data["jobs"][name]["steps"])
            assert not any("harness" in s.get("run", "") for s in data["jobs"][name]["steps"])


def test_pages_deploys_only_where_the_repository_turned_it_on(workflows: dict[str, Path]) -> None:
    jobs = load(workflows["init"])["jobs"]
    guard = jobs["pages"]["if"]
    assert "vars.COMPAT_PAGES == 'true'" in guard and "github.event.repository.default_branch" in guard
    assert jobs["pages"]["environment"]["name"] == "github-pages"
    # the site is an artifact everywhere; only its deployment is guarded
    assert "if" not in jobs["site"] or jobs["site"]["if"] == "${{ !cancelled() }}"
    upload = next(s for s in jobs["site"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["with"] == {"name": "compat-site", "path": "site"}


# -- the plan is the job matrix ----------------------------------------------------------------------------
#: (what the project's matrix is, shards asked for)
PLANS = [
    pytest.param("init", 1, id="init-matrix-1-shard"),
    pytest.param("init", 3, id="init-matrix-more-shards-than-cells"),  # empty shards are still jobs of the matrix
    pytest.param("cells", 3, id="four-cells-3-shards"),
    pytest.param("tests", 2, id="a-tests-table-2-shards"),  # a suite: the same interface, shards maybe of tests
]


def project_matrix(root: Path, kind: str) -> Path:
    init_project(root)
    matrix = root / "matrix.toml"
    text = matrix.read_text()
    if kind == "cells":
        text = text.replace('transformers = ["5.23.0"]', 'transformers = ["5.6.2", "5.23.0"]')
        text = text.replace('peft = ["0.21.2"]', 'peft = ["0.19.1", "0.21.2"]')
    elif kind == "tests":
        start = text.index("\n# [tests]\n") + 1
        text = text[:start] + "\n".join(line.removeprefix("# ") for line in text[start:].splitlines()) + "\n"
        (root / "tests").mkdir()
        (root / "tests" / "test_ours.py").write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    matrix.write_text(text)
    return matrix


def matrix_keys(path: Path) -> set[str]:
    """The `matrix.*` keys the workflow's `${{ }}` expressions read."""
    inside = re.findall(r"\$\{\{(.*?)\}\}", path.read_text())
    return {key for expression in inside for key in re.findall(r"\bmatrix\.([A-Za-z_][\w-]*)", expression)}


@pytest.mark.parametrize(("kind", "shards"), PLANS)
def test_the_plan_is_the_sweep_jobs_matrix(tmp_path: Path, workflows: dict[str, Path], kind: str, shards: int) -> None:
    matrix = project_matrix(tmp_path / "project", kind)
    proc = run_cli("plan", "--matrix", "matrix.toml", "--shards", str(shards), cwd=matrix.parent)
    assert proc.returncode == 0, proc.stderr
    # `echo "shards=$(harness plan …)" >> "$GITHUB_OUTPUT"`: one line, or the output file is misread
    assert proc.stdout.count("\n") == 1 and proc.stdout.endswith("\n"), proc.stdout
    plan = json.loads(proc.stdout)
    assert list(plan) == ["include"] and plan["include"], "a job matrix of `include` entries, at least one"
    entries = plan["include"]
    assert all(isinstance(e, dict) and all(isinstance(v, str | int | float | bool) for v in e.values()) for e in entries)
    assert len({e["shard"] for e in entries}) == len(entries) and all(parse_shard(e["shard"])[1] == shards for e in entries)
    for which, path in workflows.items():
        missing = matrix_keys(path) - set(entries[0])
        assert not missing, f"the {which} workflow uses matrix.{', matrix.'.join(sorted(missing))}, which the plan lacks"
        assert all(set(e) == set(entries[0]) for e in entries)  # a key some entries lack reads as '' there
    # GitHub's own schema, with the plan written in where the workflow reads it
    workflow = {("on" if key is True else key): value for key, value in load(workflows["init"]).items()}  # YAML 1.1 reads `on` as true
    workflow["jobs"]["sweep"]["strategy"]["matrix"] = plan
    literal = tmp_path / "with-plan.json"
    literal.write_text(json.dumps(workflow))
    assert schema_errors(literal) == ""


def test_the_sweep_passes_the_plans_shard_on_as_it_is(workflows: dict[str, Path]) -> None:
    # whatever a shard is (whole cells, or with a suite a slice of a cell's tests), `--shard` gets it unchanged
    for which, path in workflows.items():
        jobs = load(path)["jobs"]
        assert jobs["sweep"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
        [sweep] = [s for s in jobs["sweep"]["steps"] if "harness sweep" in s.get("run", "")]
        assert sweep["env"]["SHARD"] == "${{ matrix.shard }}" and '--shard "$SHARD"' in sweep["run"], which
