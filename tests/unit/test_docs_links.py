"""The docs hold together: every relative link in README.md and docs/ resolves (a file that
exists, and a heading of it where the link names one), README stays a page a newcomer reads in
five minutes, and docs/cli.md is what the parser prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it.

    >>> slug("What explaining a change costs (issue #46, 2026-11-28)")
    'what-explaining-a-change-costs-issue-46-2026-11-28'
    >>> slug("Servers kept between sweeps (`--keep-servers`)")
    'servers-kept-between-sweeps---keep-servers'
    """
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def links(page: Path) -> list[str]:
    return [m.group(1) for m in _LINK.finditer(_FENCE.sub("", page.read_text()))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target) or not re.fullmatch(r"[\w./#%-]+", target):
            continue  # a URL, a mail address; or no link at all (a regex's brackets in a code span)
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(f"{target}: no {found.relative_to(REPO) if found.is_relative_to(REPO) else found}")
        elif anchor and found.suffix == ".md" and anchor not in anchors(found):
            broken.append(f"{target}: {found.name} has no heading #{anchor}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_short_and_points_into_the_docs() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "README.md is for a newcomer's five minutes: move the rest into docs/"
    assert "./run sweep" in readme and "./run test" in readme and "docs/index.md" in readme


def test_the_cli_page_is_what_the_parser_prints() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "cli_reference.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


_LAYERS = ("analysis", "inputs", "storage", "running", "workflows", "render", "commands")
_SOURCES = [*sorted((REPO / "harness").rglob("*.py")), *sorted((REPO / "dashboard").rglob("*.py")), *PAGES]


def _defines(path: Path, name: str) -> bool:
    return bool(re.search(rf"^\s*(?:async def|def|class) {name}\b|^\s*{name}\b\s*[:=]|\b{name}\b\s*=", path.read_text(), re.M))


def test_every_module_and_name_a_docstring_or_page_names_exists() -> None:
    """A docstring or page that names `layer/module.py`, `harness.layer.module` or `layer.module.name`
    names what is there (a moved module leaves no stale name behind)."""
    layers = "|".join(_LAYERS)
    stale = []
    for path in _SOURCES:
        text = path.read_text()
        for m in re.finditer(rf"\b(?:harness/)?({layers})/([a-z_]\w*)\.py\b", text):
            if not (REPO / "harness" / m.group(1) / f"{m.group(2)}.py").exists():
                stale.append(f"{path.relative_to(REPO)}: {m.group(0)}")
        for m in re.finditer(rf"`((?:harness\.)?({layers})\.(\w+)(?:\.(\w+))?)", text):
            module = REPO / "harness" / m.group(2) / f"{m.group(3)}.py"
            if m.group(1).startswith("inputs.tests"):
                continue  # a run's recorded inputs (JSON), not the package
            if not module.exists() or (m.group(4) and not _defines(module, m.group(4))):
                stale.append(f"{path.relative_to(REPO)}: {m.group(1)}")
    assert not stale, "names that are not there: " + "; ".join(stale)
