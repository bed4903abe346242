"""`harness init [DIR]`: a project of the user's own, from the files in harness/templates/init/.

A commented `matrix.toml` for the stack (with a commented `[tests]` table: the team's own
pytest suite as the checks), `scenarios/` with a plain-script example and one that uses the
scenario kit, a GitHub Actions workflow (on demand and nightly: a sharded sweep
with `harness plan`, a merge, `harness watch`, the results file and the report uploaded, and
the compatibility table published by `harness publish`: an artifact, and GitHub Pages where
the repository turns it on), a short README and a `.gitignore`. The templates are real files
(linted, parsed and run by the tests; the workflow also audited by zizmor and GitHub's schema,
tests/integration/test_workflow_audit.py), copied byte for byte except for the harness's
version in the workflow.

Nothing is overwritten: if any of the files exists, nothing is written and the message names
them. A failure half-way (a full disk) removes what was written.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from harness import __version__
from harness.errors import EXIT_OK, BadInput

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "init"
#: template file -> where it goes in the project (dot files ship without their dot: package data skips none, editors hide them)
FILES = {
    "matrix.toml": "matrix.toml",
    "scenarios/example_train_step.py": "scenarios/example_train_step.py",
    "scenarios/example_lora_merge.py": "scenarios/example_lora_merge.py",
    "workflow.yml": ".github/workflows/compat.yml",
    "README.md": "README.md",
    "gitignore": ".gitignore",
    "results.gitignore": "results/.gitignore",  # results/ exists from the start, and its files stay out of git
}
VERSION_MARK = "@VERSION@"


@dataclass(frozen=True)
class Scaffold:
    """What `init` wrote, relative to the project folder."""

    root: Path
    files: tuple[str, ...]


def render(template: str) -> str:
    """A template's text as it is written: the workflow installs the harness that wrote it."""
    return (TEMPLATES / template).read_text().replace(VERSION_MARK, __version__)


def init_project(root: Path) -> Scaffold:
    """Write the project into `root` (created if missing); refuse, writing nothing, if any file exists."""
    if root.exists() and not root.is_dir():
        raise BadInput(f"{str(root)!r} is a file; give a folder for the project, e.g. harness init compat/")
    clashes = [target for target in FILES.values() if (root / target).exists() or (root / target).is_symlink()]
    if clashes:
        raise BadInput(
            f"{str(root)!r} already has {', '.join(clashes)}; nothing written: init an empty folder "
            "(harness init compat/) or move those aside"
        )
    texts = {target: render(template) for template, target in FILES.items()}  # every template read before anything is written
    made_dirs: list[Path] = []
    written: list[Path] = []
    try:
        for target, text in texts.items():
            path = root / target
            missing = [p for p in [path.parent, *path.parent.parents] if not p.exists()]
            for folder in reversed(missing):
                folder.mkdir()
                made_dirs.append(folder)
            with path.open("x") as out:  # "x": never replace a file that appeared meanwhile
                written.append(path)
                out.write(text)
    except OSError as exc:
        for path in reversed(written):
            path.unlink(missing_ok=True)
        for folder in reversed(made_dirs):
            folder.rmdir()
        raise BadInput(f"cannot write the project into {str(root)!r} ({exc.strerror or exc}); nothing was left behind") from exc
    return Scaffold(root, tuple(texts))


def next_steps(scaffold: Scaffold) -> list[str]:
    """The lines `harness init` prints."""
    where = str(scaffold.root)
    lines = [f"wrote {len(scaffold.files)} file(s) into {where}:", *(f"  {f}" for f in scaffold.files), "next:"]
    if scaffold.root.resolve() != Path.cwd().resolve():
        lines.append(f"  cd {where}")
    lines += [
        "  harness sweep        # every cell of matrix.toml x scenarios/ -> results/compat.duckdb",
        "                       # (or your pytest suite: fill in matrix.toml's [tests] table, or --tests PATH…)",
        "  harness dashboard    # the outcomes in the browser (needs the [dashboard] extra)",
        "  harness watch        # new releases against the known-good set; exit 1 names what broke",
        "  then commit it: .github/workflows/compat.yml runs the sweep and the watch nightly (set HARNESS_PACKAGE in it)",
        "                  and publishes the table as a site (to GitHub Pages too: see the top of the workflow)",
    ]
    return lines


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="scaffold a project of your own: matrix.toml, scenarios/ with two examples, a CI workflow, a README",
        description="Writes a commented matrix.toml for the torch/transformers/accelerate/peft stack, scenarios/ with a "
        "plain-script example and one that uses the scenario kit, .github/workflows/compat.yml (on demand and nightly: "
        "a sharded sweep, a merge, `harness watch`, the results and the report uploaded), a README and a .gitignore. "
        "Overwrites nothing: if one of the files exists, nothing is written. See docs/tool.md.",
    )
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), help="the project folder (default: the current one; created if missing)")


def run(args: argparse.Namespace, console: Console) -> int:
    print("\n".join(next_steps(init_project(args.dir))))
    return EXIT_OK
