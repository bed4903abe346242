r"""Markdown pieces every report writes: fenced blocks, inline code, text safe in a table cell or a line. Pure.

>>> fence("a ``` b"), code("a `b`"), table_cell("a|b\nc"), plain_text("<class 'X'> | y")
('````text\na ``` b\n````', '`` a `b` ``', 'a\\|b c', "&lt;class 'X'&gt; \\| y")
"""

from __future__ import annotations


def fence(text: str, lang: str = "text") -> str:
    """A fenced block that survives a fence inside the text."""
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def code(text: str) -> str:
    """Inline code that survives backticks inside: `x`, or ``a `b` c``."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table_cell(text: str) -> str:
    """Text safe inside a markdown table cell: pipes escaped, line breaks as spaces."""
    return text.replace("|", "\\|").replace("\n", " ")


def plain_text(text: str) -> str:
    """Text shown as written in a line of markdown (a list item): pipes escaped, angle brackets as
    entities, so `<class 'X'>` is never read as HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
