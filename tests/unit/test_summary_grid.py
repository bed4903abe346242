"""The grid's blocks drawn by hand (`summary.grid_block`) read as the rich Table they replace.

The summary drew each block as a borderless rich Table; at a suite's size (950 groups x 20
cells) its layout took 2 s. `reference` is that table, as the summary built it; the lines must be
the same text, character for character, trailing spaces, wide characters and cut names included.
"""

from __future__ import annotations

import io
import random

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from harness.render.grid import MARK, STYLE, grid_block

KEYS = [*MARK, "", "mixed", "unknown"]


def reference(labels: list[str], names: list[str], keys: list[list[str]], width: int) -> str:
    console = Console(file=io.StringIO(), width=400, color_system=None)
    table = Table(show_header=True, box=None, pad_edge=False, padding=(0, 1))
    table.add_column("scenario", overflow="ellipsis", max_width=width, no_wrap=True)
    for text in labels:
        table.add_column(text, justify="center", no_wrap=True)
    for name, row in zip(names, keys):
        table.add_row(escape(name), *(f"[{STYLE.get(k, 'white')}]{MARK.get(k, ' ')}[/]" for k in row))
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def drawn(labels: list[str], names: list[str], keys: list[list[str]], width: int) -> str:
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(Text("\n").join(grid_block(labels, names, keys, width)), no_wrap=True, overflow="ignore")
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(120))
def test_a_block_reads_as_the_table_it_replaces(seed: int) -> None:
    rnd = random.Random(seed)
    labels = [chr(65 + i) if i < 26 else str(i) for i in range(rnd.randint(1, 60))]  # A..Z, then 26, 27, ...
    names = [
        "".join(rnd.choice("abcdéü_/[]. 日本") for _ in range(rnd.randint(1, 30))) + rnd.choice(["", "::TestX::test_y[4bit]", " (12)"])
        for _ in range(rnd.randint(1, 6))
    ]
    width = min(rnd.randint(8, 45), max(cell_len(n) for n in ["scenario", *names]))
    keys = [[rnd.choice(KEYS) for _ in labels] for _ in names]
    assert drawn(labels, names, keys, width) == reference(labels, names, keys, width)
