"""`fit.hang_plain` of a line's text is the text of `fit.hang`'s lines: what lets `say_all` fit the plain
text where no colour shows, not a rich Text's styled pieces (the summary's 4,000 answer lines at
2,000,000 outcomes), and print the same characters."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from harness.render.fit import hang, hang_plain, say_all

LINES = [
    "short",
    "",
    "[bold]Answers[/]",
    "  [red]tests/models/test_modeling_llama.py::TestLlama::test_generate[4bit]: KeyError: 'weight' @ peft/tuners/lora/model.py[/] "
    "— introduced in peft 0.20.0 (after 0.19.1) with torch 2.13.0+cpu, transformers 5.6.2 on cpu · linux-x86_64 · Python 3.11",
    "    " + "word " * 40,
    "x" * 250,  # one word longer than the line: folded mid-word
    "first line\n  second line that is long enough to be broken somewhere " + "y" * 80 + "\n\nafter a blank",
    "wide 漢字漢字漢字 " * 12,
    "trailing spaces at a break          " + "z " * 60,
    r"escaped \[not a tag] and [dim]dim[/dim] " * 5,
]


@pytest.mark.parametrize("width", [20, 40, 100, 120])
@pytest.mark.parametrize("markup", LINES, ids=range(len(LINES)))
def test_the_plain_fit_is_the_styled_fits_text(markup: str, width: int) -> None:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    text = console.render_str(markup, highlight=False)
    assert hang_plain(text.plain, width) == [line.plain for line in hang(text, width)]


def test_say_all_prints_the_same_text_with_or_without_colour() -> None:
    plain, coloured = io.StringIO(), io.StringIO()
    say_all(Console(file=plain, width=60, color_system=None), LINES)
    say_all(Console(file=coloured, width=60, color_system="standard", force_terminal=True), LINES)
    assert plain.getvalue() == Text.from_ansi(coloured.getvalue()).plain  # the same characters, the colours dropped
