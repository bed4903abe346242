"""Every command has help text and is documented for users (as sqlite-utils' test_docs does)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])


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
