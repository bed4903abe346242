"""Every command has help text and is documented for users (as sqlite-utils' test_docs does)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import COMMANDS, build_parser, command

REPO = Path(__file__).resolve().parents[2]
DOCS = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_has_help_and_docs(command: str) -> None:
    sub = _subparsers()[command]
    assert sub.format_help().strip()
    helps = [a.help for a in sub._actions if a.dest != "help"]
    assert all(helps), f"harness {command}: an option without help text"
    assert f"harness {command}" in DOCS, f"harness {command} is not mentioned in README.md or docs/"


def test_every_parser_has_a_command() -> None:
    assert set(_subparsers()) == set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_module_offers_its_parser_and_its_run(name: str) -> None:
    module = command(name)
    assert callable(module.add_parser) and callable(module.run), f"commands/{name}.py must offer add_parser(sub) and run(args, console)"


def test_a_command_loads_only_its_own_module() -> None:
    # `harness summary` must not pay for the sweep's runner, the watch or DuckDB at start.
    code = (
        "import sys\nfrom harness.cli import build_parser\n"
        "build_parser('summary').parse_args(['summary'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('harness.commands.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "harness.commands.sweep" not in out and "harness.workflows.watching" not in out, out
