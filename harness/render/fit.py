"""Lines fitted to the console's width: a longer one wraps at spaces, its continuation lines indented
under its start (`hang`), printed without rich's own wrapping (`emit`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment, Segments
from rich.text import Text

#: A wrapped line's continuation lines start this much deeper than the line itself.
HANG = 4


# -- fitting the width -------------------------------------------------------------------------
def hang(text: Text, width: int, by: int = HANG) -> list[Text]:
    """`text`'s lines, each within `width` cells: a longer one broken at its last space that fits
    (mid-word where none does), its continuation lines indented `by` more than its own start
    (at most half the width)."""
    if "\n" not in text.plain:  # most lines: no copy of the text to split
        return _hang_line(text, width, by)
    lines: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        lines += _hang_line(line, width, by)
    return lines


def hang_plain(text: str, width: int, by: int = HANG) -> list[str]:
    """`hang` of unstyled text: the same lines, without a rich Text made for each."""
    out: list[str] = []
    for line in text.split("\n"):
        if cell_len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        pad = min(lead + by, width // 2)
        for k, (start, cut) in enumerate(_hang_spans(line, width, lead, width - pad)):
            piece = line[start:cut].rstrip()
            out.append(" " * pad + piece if k else piece)
    return out


def _hang_line(line: Text, width: int, by: int) -> list[Text]:
    plain = line.plain
    if cell_len(plain) <= width:
        return [line]
    lead = len(plain) - len(plain.lstrip(" "))
    pad = min(lead + by, width // 2)
    spans = _hang_spans(plain, width, lead, width - pad)
    # one `divide` at every cut, not a slice per piece: each slice of a Text re-reads all its spans
    pieces = line.divide(offset for span in spans for offset in span)
    out: list[Text] = []
    for k in range(len(spans)):
        piece = pieces[2 * k + 1]
        piece.rstrip()
        if out:
            piece.pad_left(pad)
        out.append(piece)
    return out


def _hang_spans(plain: str, width: int, lead: int, room_after: int) -> list[tuple[int, int]]:
    """(start, end) of each piece of `plain` that `_hang_line` prints: the first within `width`,
    the others within `room_after`; each broken at the last space that fits (mid-word where none
    does), the spaces at a break dropped."""
    # one cell per character: no width to add up (the ASCII ones are; the few others, asked once each)
    narrow = plain.isascii() or all(map(_one_cell, set(plain).difference(_ASCII)))
    spans: list[tuple[int, int]] = []
    start, floor, room = 0, lead, width  # the first line keeps its own indent: no break inside it
    while start < len(plain):
        end = min(start + room, len(plain)) if narrow else _fits(plain, start, room)
        if end == len(plain) or plain[end] == " ":
            cut = end
        else:
            space = plain.rfind(" ", floor, end)
            cut = space if space > floor else max(end, start + 1)  # one word longer than the room: folded
        spans.append((start, cut))
        start = cut
        while start < len(plain) and plain[start] == " ":
            start += 1
        floor, room = start, room_after
    return spans


_ASCII = frozenset(map(chr, range(128)))


@lru_cache(maxsize=4096)
def _one_cell(char: str) -> bool:
    return cell_len(char) == 1


def _fits(plain: str, start: int, room: int) -> int:
    """Where a piece of `plain` from `start` ends that takes at most `room` cells."""
    end, used = start, 0
    while end < len(plain) and used + cell_len(plain[end]) <= room:
        used += cell_len(plain[end])
        end += 1
    return end


def say_all(console: Console, markups: Sequence[str]) -> None:
    """`say` of each, in one print: the same text."""
    width = console.width  # asked once: rich measures the terminal each time
    if console.color_system is None:  # no colour shows (`emit_plain`): each line's text is fitted, not its styled pieces
        plain = [part for markup in markups for part in hang_plain(_text(console, markup).plain, width)]
        if plain:
            emit_plain(console, plain)
        return
    fitted = [part for markup in markups for part in hang(_text(console, markup), width)]
    if fitted:
        emit(console, fitted)


def say(console: Console, markup: str) -> None:
    """Print `markup` as `console.print` would, each line fitted to the console's width (`hang`)."""
    emit(console, hang(_text(console, markup), console.width))


def _text(console: Console, markup: str) -> Text:
    """`markup` as `console.print` would read it; highlighted only where colours are shown."""
    return console.render_str(markup, highlight=None if console.color_system else False)


def emit(console: Console, lines: Sequence[Text]) -> None:
    """Print lines already fitted to the width, as they are (`emit_plain` where no colour shows)."""
    if console.color_system is None:
        emit_plain(console, [line.plain for line in lines])
        return
    console.print(Text("\n").join(lines), no_wrap=True, overflow="ignore")


def emit_plain(console: Console, lines: Sequence[str]) -> None:
    """Print unstyled lines already fitted to the width. Without colours (a pipe, a file,
    `NO_COLOR`) rich prints each line's plain text: here handed to it as one segment per line,
    as rich's layout of a suite's thousands of styled pieces took seconds (and one text of them
    all, minutes: rich splits it line by line, copying the rest each time)."""
    fits = all(text.isascii() and len(text) <= console.width for text in lines)  # else rich crops, as before
    console.print(Segments([Segment(text + "\n") for text in lines]), end="", crop=not fits)
