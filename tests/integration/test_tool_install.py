"""The harness as a tool people install: the built wheel, `uv tool install`, a project of their own.

From a wheel built from this checkout and installed with `uv tool install` into a temporary
tool folder (no PYTHONPATH: the checkout is not on the path), in a folder outside the checkout:
`harness init`, a sweep of one cell with the example scenarios (light: torch 2.13.0 CPU from
$PIP_FIND_LINKS, a tiny Llama built from a config), `harness summary`, the dashboard served by
the tool and opened in Chromium, and the commands of the GitHub Actions workflow that `init`
wrote, run locally job by job (what a runner's `uses:` steps do is done by hand: checkout is a
copy, an artifact is a copied file).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness.running.envs import uv_binary
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, _free_port, _wait_healthy

REPO = Path(__file__).resolve().parents[2]
CELL = "torch2.13.0-tf5.23.0-acc1.15.0-peft0.21.2"
#: Stands in for "the night the project was set up": no release of any axis newer than the
#: matrix's (torch 2.14.0 came out on 2026-09-02) and no download of PyPI's CUDA torch.
SETUP_NIGHT = "2026-08-01"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("PIP_FIND_LINKS"), reason="needs PIP_FIND_LINKS naming a folder with a CPU torch wheel"),
]


class Tool:
    """The installed tool: its folders, and `harness` run as a user runs it, from a folder of theirs."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.bin = root / "bin"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env |= {
            "UV_TOOL_DIR": str(root / "tools"),
            "UV_TOOL_BIN_DIR": str(self.bin),
            # the tool's own bin first, and uv (the workflow's `uv tool install`); not the checkout's venv
            "PATH": os.pathsep.join([str(self.bin), str(Path(uv_binary()).parent), self.env.get("PATH", "")]),
        }

    def run(self, command: str | list[str], cwd: Path, timeout: float = 900, **extra: str) -> subprocess.CompletedProcess[str]:
        argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command] if isinstance(command, str) else command
        return subprocess.run(argv, cwd=cwd, env={**self.env, **extra}, capture_output=True, text=True, timeout=timeout)

    def harness(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.bin / "harness"), *args], cwd)


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Tool:
    root = tmp_path_factory.mktemp("tool")
    built = subprocess.run([uv_binary(), "build", "--out-dir", str(root / "dist"), str(REPO)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    [wheel] = (root / "dist").glob("compat_harness-*.whl")
    tool = Tool(root, wheel)
    # uv picks the Python; the tool's venv gets the dashboard extra (streamlit) from the index
    installed = tool.run([uv_binary(), "tool", "install", "--python", sys.executable, f"{wheel}[dashboard]"], root)
    assert installed.returncode == 0, installed.stderr
    return tool


@pytest.fixture(scope="module")
def project(tool: Tool) -> Path:
    """`harness init` in an empty folder outside the checkout, then a sweep of one cell there."""
    home = tool.root / "work"
    home.mkdir()
    made = tool.harness("init", "compat", cwd=home)
    assert made.returncode == 0, made.stderr
    project = home / "compat"
    swept = tool.harness("sweep", "--cell", CELL, "--no-progress", cwd=project)
    assert swept.returncode == 0, swept.stderr + swept.stdout
    return project


def test_the_wheel_carries_the_dashboard_the_kit_and_the_forum_pack(tool: Tool) -> None:
    python = next((tool.root / "tools").glob("compat-harness/bin/python"))
    code = "import harness, harness.inputs.bundled as b\n"
    code += "print(harness.__file__, b.kit_dir(), b.dashboard_app(), b.checkout(), b.sample_db())"
    proc = tool.run([str(python), "-c", code], tool.root)
    assert proc.returncode == 0, proc.stderr
    where, kit, app, checkout, sample = proc.stdout.split()
    site = str(tool.root / "tools" / "compat-harness")
    assert where.startswith(site) and kit.startswith(site) and app.startswith(site)  # not the checkout's copies
    assert kit.endswith("harness/_bundled/scenarios") and app.endswith("harness/_bundled/dashboard/app.py")
    assert (checkout, sample) == ("None", "None")
    listed = tool.harness("scenarios", "--pack", "forum", cwd=tool.root)
    assert listed.returncode == 0 and "gemma4_lora_inner_linear\t" in listed.stdout
    assert len(listed.stdout.splitlines()) == len([p for p in (REPO / "scenarios").glob("*.py") if not p.name.startswith("_")])


def test_init_then_sweep_from_the_installed_tool(tool: Tool, project: Path) -> None:
    # the project's own matrix, scenarios/ and results/, from its folder: no --matrix, no --db
    summary = tool.harness("summary", "--json", cwd=project)
    assert summary.returncode == 0, summary.stderr
    rows = [json.loads(line) for line in summary.stdout.splitlines()]
    assert sorted((r["cell_id"], r["scenario"], r["status"]) for r in rows) == [
        (CELL, "example_lora_merge", "pass"),  # imports `_kit` from the wheel's bundled kit
        (CELL, "example_train_step", "pass"),
    ]
    merge = next(r for r in rows if r["scenario"] == "example_lora_merge")
    metrics = merge["metrics"] if isinstance(merge["metrics"], dict) else json.loads(merge["metrics"])
    assert 0 <= metrics["max_abs_logit_diff"] < 1e-4  # the kit's metric came back
    assert (project / "results" / "compat.duckdb").is_file()
    text = tool.harness("summary", cwd=project)
    assert text.returncode == 0
    assert "Known-good set" in text.stdout and "torch 2.13.0+cpu, transformers 5.23.0, accelerate 1.15.0, peft 0.21.2" in text.stdout


def test_the_dashboard_served_by_the_tool_opens_in_chromium(tool: Tool, project: Path) -> None:
    port = _free_port()
    log = tool.root / "dashboard.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(tool.bin / "harness"), "dashboard", "--headless", "--port", str(port)],
            cwd=project,
            env=tool.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, server, log)
        assert "dashboard over results/compat.duckdb" in log.read_text()
        if not CHROMIUM.exists():
            pytest.skip(f"{CHROMIUM} is missing: install it with dashboard/install_browser.sh (as root); the server answered")
        sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing: pip install -e '.[dev]'")
        # In a thread of its own: the browser tests' session may hold a Playwright (and its event loop) in this one.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(_open_in_chromium, sync_api, url).result()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _open_in_chromium(sync_api: Any, url: str) -> None:
    """The Matrix page names the project's results file and its outcomes; the Cell page lists both examples."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(45_000)
            page.goto(url)
            page.get_by_role("heading", name="Matrix", level=1).wait_for()
            page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]')
            banner = page.get_by_text(re.compile(r"^Data: ")).first.inner_text()
            assert "results/compat.duckdb" in banner and "2 outcomes" in banner and "1 cell(s)" in banner
            assert not page.locator('[data-testid="stException"]').count()
            page.goto(f"{url}/cell?cell={CELL}")
            page.get_by_role("heading", name="Cell", level=1).wait_for()
            # the cell's outcomes grid is a canvas; its accessible mirror holds each scenario's name
            page.wait_for_function(
                "() => ['example_lora_merge', 'example_train_step'].every(name =>"
                " [...document.querySelectorAll('[role=gridcell]')].some(cell => cell.textContent === name))"
            )
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "tool-dashboard-cell.png"), full_page=True)
            assert not page.locator('[data-testid="stException"]').count()
        finally:
            browser.close()


# -- the workflow `init` wrote, run locally -----------------------------------------------------------
def _expand(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        assert key in values, f"the local run does not know ${{{{ {key} }}}}"
        return values[key]

    return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", one, text)


class Runner:
    """A job's `run:` steps in a folder, with the workflow's env and GitHub's output files."""

    def __init__(self, tool: Tool, workflow: dict[str, Any], overrides: dict[str, str]) -> None:
        self.tool, self.workflow, self.overrides = tool, workflow, overrides

    def job(self, name: str, cwd: Path, values: dict[str, str]) -> list[tuple[dict[str, Any], subprocess.CompletedProcess[str]]]:
        done = []
        env = {k: str(v) for k, v in self.workflow["env"].items()} | self.overrides
        output, summary = cwd / ".github-output", cwd / ".github-step-summary"
        for step in self.workflow["jobs"][name]["steps"]:
            if "run" not in step or "always()" in str(step.get("if", "")) or "failure()" in str(step.get("if", "")):
                continue
            step_env = {k: _expand(str(v), values) for k, v in (step.get("env") or {}).items() if k != "UV_INDEX"}
            # UV_INDEX (PyTorch's CPU index for hosted runners) is not reachable here: $PIP_FIND_LINKS serves torch
            proc = self.tool.run(
                _expand(step["run"], values), cwd, **env, **step_env, GITHUB_OUTPUT=str(output), GITHUB_STEP_SUMMARY=str(summary)
            )
            done.append((step, proc))
            if proc.returncode != 0:
                break
        return done


def test_the_workflow_init_wrote_runs_job_by_job(tool: Tool, project: Path) -> None:
    yaml = pytest.importorskip("yaml", reason="the workflow is read with PyYAML (pip install -e '.[dev]')")
    workflow = yaml.safe_load((project / ".github" / "workflows" / "compat.yml").read_text())
    runner = Runner(tool, workflow, {"HARNESS_PACKAGE": f"{tool.wheel}[dashboard]"})
    common = {"env.PYTHON_VERSION": "3.11", "env.TORCH_INDEX": "", "github.run_id": "1"}

    # plan: `harness plan` gives the shards, through $GITHUB_OUTPUT
    steps = runner.job("plan", project, common)
    assert all(proc.returncode == 0 for _, proc in steps), [p.stderr for _, p in steps]
    key, _, value = (project / ".github-output").read_text().strip().partition("=")
    shards = json.loads(value)["include"]
    assert key == "shards" and [(s["shard"], s["cells"]) for s in shards] == [("1/2", 1), ("2/2", 0)]

    # sweep: each shard resumes from the kept results (here: the project's own, as if restored) and uploads its copy
    artifacts = tool.root / "artifacts"
    for index, shard in enumerate(shards):
        values = common | {"matrix.shard": shard["shard"], "matrix.results": shard["results"], "strategy.job-index": str(index)}
        steps = runner.job("sweep", project, values)
        assert [proc.returncode for _, proc in steps] == [0, 0], [p.stderr for _, p in steps]
        assert "outcome(s) computed" in steps[-1][1].stdout
        (artifacts / f"shard-{index}").mkdir(parents=True)
        shutil.copy(project / "results" / "compat.duckdb", artifacts / f"shard-{index}" / "compat.duckdb")

    # watch: a fresh checkout (the committed files only), the shards downloaded, merged, summarised, watched
    checkout = tool.root / "checkout"
    shutil.copytree(project, checkout, ignore=shutil.ignore_patterns(".nox", "*.duckdb*", ".github-*"))
    shutil.copytree(artifacts, checkout / "shards")
    watch_step = next(s for s in workflow["jobs"]["watch"]["steps"] if s.get("id") == "watch")
    watch_step["run"] = watch_step["run"].replace("harness watch ", f"harness watch --exclude-newer {SETUP_NIGHT} ")
    steps = runner.job("watch", checkout, common)
    names = [step.get("name") for step, _ in steps]
    assert names == [
        "Install the harness",
        "Merge the shards",
        "Why it changed",
        "Summary",
        "What changed since the last night",
        "Watch for new releases",
    ]
    assert all(proc.returncode == 0 for _, proc in steps), [(p.stdout[-2000:], p.stderr[-2000:]) for _, p in steps]
    assert "2 outcome(s) added" in steps[1][1].stdout  # the second shard's copy holds the same outcomes: no duplicates
    assert "Known-good set" in (checkout / "summary.txt").read_text()
    assert "nothing to explain: no test started failing or was fixed since r-" in (checkout / "explain.txt").read_text()
    report = json.loads((checkout / "watch.json").read_text())
    assert report["exit_status"] == 0 and report["new"] == {}
    assert report["held"] == {"torch": "2.13.0", "transformers": "5.23.0", "accelerate": "1.15.0", "peft": "0.21.2"}
    # the job summary: what changed since the last night (the shards' run, its own by --run-tag, against the
    # project's run the shards resumed from: the same outcomes), then the watch's report
    changes = (checkout / "changes.md").read_text()
    assert changes.startswith("### Changes since r-") and "+0 failing, −0 fixed, 0 flaky" in changes and "Nothing changed." in changes
    assert (checkout / ".github-step-summary").read_text() == changes + (checkout / "watch.md").read_text()
    assert (checkout / "watch.md").read_text().startswith("## ✅ harness watch: nothing new")
    # what the upload step names is all there
    upload = next(s for s in workflow["jobs"]["watch"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert all((checkout / path).is_file() for path in upload["with"]["path"].split())


@pytest.fixture(autouse=True, scope="module")
def _timing() -> Iterator[None]:
    """The module's wall time, printed with -s: the suite runs on 2 cores in CI."""
    began = time.monotonic()
    yield
    print(f"\ntest_tool_install: {time.monotonic() - began:.0f} s")
