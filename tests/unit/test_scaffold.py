"""`harness init`: the files it writes parse, name real commands and options, and nothing is ever overwritten.

The workflow's commands are also run for real, from an installed wheel, in
tests/integration/test_tool_install.py.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from harness import __version__
from harness.cli import build_parser
from harness.commands.init import FILES, init_project
from harness.errors import BadInput
from harness.inputs.matrix import parse_matrix
from harness.inputs.scenarios import load_scenario, select
from tests.conftest import run_cli

yaml = pytest.importorskip("yaml", reason="the workflow is checked with PyYAML (pip install -e '.[dev]')")

#: What the runner fills in for `${{ … }}` and the workflow's variables, to read its commands as argv.
EXPRESSIONS = {"matrix.shard": "1/2", "env.TORCH_INDEX": "https://download.pytorch.org/whl/cpu"}


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    init_project(tmp_path / "compat")
    return tmp_path / "compat"


def workflow(project: Path) -> dict[Any, Any]:
    data = yaml.safe_load((project / ".github" / "workflows" / "compat.yml").read_text())
    assert isinstance(data, dict)
    return data


def shell_variables(word: str, env: dict[str, str]) -> str:
    """`$NAME` and `${NAME}` in one word of a script, from the step's environment."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), word)


def harness_commands(data: dict[Any, Any]) -> list[tuple[str, list[str]]]:
    """(job, argv after `harness`) for every `harness …` in the workflow's run steps, expressions filled in."""
    found = []

    def fill(text: str) -> str:
        return re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: EXPRESSIONS.get(m.group(1), m.group(0)), text)

    for name, job in data["jobs"].items():
        for step in job["steps"]:
            # expressions reach a script through the step's env (never pasted into it: tests/integration/test_workflow_audit.py)
            env = {k: str(v) for k, v in data["env"].items()} | {k: fill(str(v)) for k, v in (step.get("env") or {}).items()}
            script = fill(step.get("run", ""))
            lines = []
            for line in script.splitlines():
                lines += re.findall(r"\$\(([^)]*)\)", line)  # `$(harness plan …)`: a command of its own
                lines.append(re.sub(r"\$\([^)]*\)", "", line))
            for line in lines:
                words = shlex.split(line, comments=True)
                words = [shell_variables(w, env) for w in words]
                if "harness" in words:
                    start = words.index("harness") + 1
                    argv = words[start:]
                    end = next((i for i, w in enumerate(argv) if w in ("|", "||", "&&", ">>", ">")), len(argv))
                    found.append((name, argv[:end]))
    return found


def test_init_writes_every_file(project: Path) -> None:
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()) == sorted(FILES.values())


def test_the_matrix_is_the_stack_and_parses(project: Path) -> None:
    spec = parse_matrix((project / "matrix.toml").read_text())
    assert list(spec.axes) == ["torch", "transformers", "accelerate", "peft"]
    assert all(len(entries) == 1 and entries[0].kind == "version" for entries in spec.axes.values())
    assert spec.settings.find_links == ["$PIP_FIND_LINKS"]


def test_the_examples_are_a_plain_script_and_a_kit_scenario(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    found = {s.name: s for s in select([])}  # the project's own scenarios/, from its folder
    assert sorted(found) == ["example_lora_merge", "example_train_step"]
    plain, kit = found["example_train_step"], found["example_lora_merge"]
    assert plain.requires.packages == () and "_kit" not in plain.path.read_text()
    assert dict(kit.requires.packages) == {"transformers": ">=4.45", "peft": ">=0.13"} and kit.timeout == 120
    assert "from _kit import check, metric" in kit.path.read_text()
    assert load_scenario(plain.path).doc.startswith("Three LoRA training steps")


def test_the_workflow_runs_on_demand_and_nightly(project: Path) -> None:
    data = workflow(project)
    triggers = data[True] if True in data else data["on"]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in triggers
    assert re.fullmatch(r"\d+ \d+ \* \* \*", triggers["schedule"][0]["cron"])
    assert data["env"]["HARNESS_PACKAGE"] == f"compat-harness=={__version__}"
    assert "@VERSION@" not in (project / ".github" / "workflows" / "compat.yml").read_text()
    jobs = data["jobs"]
    assert list(jobs) == ["plan", "sweep", "watch", "issue", "site", "pages"]
    assert [jobs[j]["needs"] for j in list(jobs)[1:]] == ["plan", "sweep", "watch", "watch", "site"]
    # the shards come from `harness plan`, through the plan job's output
    assert jobs["sweep"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    assert jobs["plan"]["outputs"]["shards"] == "${{ steps.plan.outputs.shards }}"
    uploads = [s["with"] for s in jobs["watch"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and {"results/compat.duckdb", "watch.md", "watch.json"} <= set(uploads[0]["path"].split())
    # a regression fails the watch job (exit 1) and, nightly, the issue job opens an issue with the markdown report
    assert jobs["issue"]["if"] == "${{ failure() && github.event_name == 'schedule' }}"
    [issue] = [s for s in jobs["issue"]["steps"] if "gh issue create" in s.get("run", "")]
    assert "jq -e '.exit_status == 1' watch.json" in issue["run"] and "--body-file issue.md" in issue["run"]
    assert "cat watch.md > issue.md" in issue["run"] and "cat changes.md >> issue.md" in issue["run"]  # the report, then what changed
    downloaded = next(s for s in jobs["issue"]["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact"))
    assert downloaded["with"] == {"name": uploads[0]["name"]}  # the report the watch uploaded, at the paths it had
    # the site: `harness publish` over the same results, uploaded; Pages deploys it only where turned on
    site = next(s for s in jobs["site"]["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact"))
    assert site["with"] == {"name": "compat-results"} and "results/compat.duckdb" in uploads[0]["path"].split()
    pages = [str(s.get("uses", "")).split("@")[0] for s in jobs["pages"]["steps"]]
    assert pages == ["actions/download-artifact", "actions/upload-pages-artifact", "actions/deploy-pages"]


def test_every_harness_command_in_the_workflow_parses(project: Path) -> None:
    commands = harness_commands(workflow(project))
    assert [(job, argv[0]) for job, argv in commands] == [
        ("plan", "plan"),
        ("sweep", "sweep"),
        ("watch", "merge"),
        ("watch", "explain"),
        ("watch", "summary"),
        ("watch", "changes"),
        ("watch", "watch"),
        ("site", "publish"),
    ]
    parser = build_parser()
    known = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for _, argv in commands:
        if argv[0] == "publish" and "publish" not in known:
            # `harness publish` (#31) is being built beside this workflow: until it lands, its agreed interface
            assert argv == ["publish", "--db", "results/compat.duckdb", "--out", "site"]
            continue
        parser.parse_args(argv)  # an unknown option or a bad value exits here (SystemExit)
    sweep = dict(zip(commands[1][1][1::2], commands[1][1][2::2]))
    assert sweep["--shard"] == "1/2" and sweep["--db"] == "results/compat.duckdb" and "--run-tag" in sweep  # each night its own run


def test_init_refuses_to_overwrite_and_leaves_the_folder_untouched(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("our project\n")
    (tmp_path / "train.py").write_text("print('ours')\n")
    before = snapshot(tmp_path)
    with pytest.raises(BadInput) as info:
        init_project(tmp_path)
    assert "already has README.md" in str(info.value) and "nothing written" in str(info.value)
    assert snapshot(tmp_path) == before


def test_a_failure_half_way_leaves_nothing_behind(tmp_path: Path) -> None:
    # `.github` is a file: the workflow's folder cannot be made, after matrix.toml and scenarios/ were written
    (tmp_path / ".github").write_text("not a folder\n")
    with pytest.raises(BadInput) as info:
        init_project(tmp_path)
    assert "nothing was left behind" in str(info.value)
    assert snapshot(tmp_path) == {".github": b"not a folder\n"}


def test_init_into_an_existing_folder_without_clashes(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('ours')\n")
    init_project(tmp_path)
    assert (tmp_path / "train.py").read_text() == "print('ours')\n"
    assert (tmp_path / "matrix.toml").is_file()


def test_the_cli_refuses_in_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text("# ours\n")
    before = snapshot(tmp_path)
    proc = run_cli("init", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"harness: error: {str(tmp_path)!r} already has matrix.toml; nothing written: init an empty folder "
        "(harness init compat/) or move those aside"
    ]
    assert snapshot(tmp_path) == before


def test_the_cli_writes_and_says_what_next(tmp_path: Path) -> None:
    proc = run_cli("init", "compat", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"wrote {len(FILES)} file(s) into compat:"
    assert "  cd compat" in proc.stdout.splitlines() and "harness watch" in proc.stdout
    assert (tmp_path / "compat" / ".github" / "workflows" / "compat.yml").is_file()


def test_the_matrix_has_a_commented_tests_table_that_parses_once_filled_in(project: Path) -> None:
    text = (project / "matrix.toml").read_text()
    assert "\n# [tests]\n" in text and parse_matrix(text).tests == {}  # commented out: scenarios/ run
    # uncommented, as a team fills it in: a valid [tests] table (each key's type checked by the matrix's parser)
    start = text.index("\n# [tests]\n") + 1
    filled = text[:start] + "\n".join(line.removeprefix("# ") for line in text[start:].splitlines())
    tests = parse_matrix(filled).tests
    assert tests == {"root": ".", "paths": ["tests/"], "k": "not slow", "requirements": ["parameterized"], "timeout": 120}


def test_the_workflow_runs_the_suite_of_a_filled_tests_table(project: Path) -> None:
    # the sweep and the watch read [tests] from the matrix: their commands name no scenario that would replace it
    commands = harness_commands(workflow(project))
    sweeps = [argv for _, argv in commands if argv[0] in ("sweep", "watch")]
    assert len(sweeps) == 2 and all("--matrix" in argv and "matrix.toml" in argv and "--scenario" not in argv for argv in sweeps)
    assert "[tests] table of matrix.toml" in (project / ".github" / "workflows" / "compat.yml").read_text()
