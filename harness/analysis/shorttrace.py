"""Short tracebacks for reports: the last frames, each with its line, the frame under test marked. Pure.

What a maintainer reads is pytest's `--tb=short` (or Python's own format, for a scenario): one
location and one source line per frame, then the exception. Stored tracebacks are longer:
pytest's long format repeats every function's source up to the failing line (a transformers
docstring is 40 lines of it), and a scenario's starts in the harness's own child process. Both
come out here as at most `limit` lines: the innermost frames that fit, the exception, and the
frame the signature blames marked `← transformers: the innermost frame under test`.

>>> text = '''Traceback (most recent call last):
...   File "/h/harness/running/incell/scenario.py", line 9, in run_scenario
...     runpy.run_path(scenario)
...   File "/s/scenarios/load.py", line 4, in <module>
...     model.load()
...   File "/e/lib/python3.11/site-packages/accelerate/hooks.py", line 330, in init_hook
...     set_module_tensor_to_device(module, name, "meta")
...                                ^^^^^^^^^^^^^^^^^^^^
... TypeError: bad'''
>>> print(short_traceback(text, "TypeError: bad @ accelerate/hooks.py:init_hook"))
Traceback (most recent call last):
  File "/s/scenarios/load.py", line 4, in <module>
    model.load()
  File "/e/lib/python3.11/site-packages/accelerate/hooks.py", line 330, in init_hook  ← accelerate: the innermost frame under test
    set_module_tensor_to_device(module, name, "meta")
TypeError: bad
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.analysis.signature import library_of

LIMIT = 40
#: How many lines of the exception's message are kept: a module repr in a message runs on for pages.
MESSAGE_LINES = 8
_PY_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
#: The harness's own frames around a scenario: the child that ran it (its in-cell package, or
#: child.py in tracebacks stored before it was one), and runpy.
_MACHINERY = re.compile(r"(?:[/\\]harness[/\\](?:running[/\\])?(?:child\.py|incell[/\\]\w+\.py)|[/\\]runpy\.py|<frozen runpy>)$")
_CHAINS = ("The above exception was the direct cause of the following exception:", "During handling of the above exception")
#: pytest's line between two entries of its long format: `_ _ _ _ …`.
_SEPARATOR = re.compile(r"^(?:_ )+_\s*$")
_LOCATION = re.compile(r"^(?P<file>[^\s>E].*?|E\S.*?):(?P<line>\d+):(?: (?P<rest>.*))?$")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(?P<name>\w+)")


@dataclass(frozen=True)
class _Frame:
    file: str
    line: int
    function: str
    source: tuple[str, ...]  # the line(s) of source shown under it, as they will be printed


def short_traceback(text: str, signature: str = "", limit: int = LIMIT) -> str:
    """`text` (Python's traceback, or pytest's long or short report) in at most `limit` lines."""
    if "Traceback (most recent call last)" in text:
        return _python(text, _blamed(signature), limit)
    if any(line.startswith("E ") for line in text.splitlines()) and any(_LOCATION.match(line) for line in text.splitlines()):
        return _pytest(text, _blamed(signature), limit)
    return _tail(text, limit)


def frames_of(text: str) -> list[tuple[str, str]]:
    """(file, function) of every frame of the last traceback in `text`, outermost first, in either format.

    >>> frames_of('site-packages/peft/x.py:9: in load\\n    f()\\nE   KeyError: 1')
    [('site-packages/peft/x.py', 'load')]
    """
    if "Traceback (most recent call last)" in text:
        return [(f.file, f.function) for f in _python_frames(text.rstrip().splitlines())[0]]
    return [(f.file, f.function) for f in _pytest_frames(text.rstrip().splitlines())[0]]


def _blamed(signature: str) -> tuple[str, str]:
    """(path inside its library, function) of the frame a signature names: `accelerate/hooks.py`, `init_hook`."""
    location = signature.rsplit(" @ ", 1)[1] if " @ " in signature else ""
    path, _, function = location.rpartition(":")
    return path, function


def _mark(frame: _Frame, blamed: tuple[str, str]) -> bool:
    library, relative = library_of(frame.file, (blamed[0].split("/", 1)[0],)) if blamed[0] else ("", "")
    return bool(library) and relative == blamed[0] and frame.function == blamed[1]


def _marker(blamed: tuple[str, str]) -> str:
    return f"  ← {blamed[0].split('/', 1)[0]}: the innermost frame under test"


def _tail(text: str, limit: int) -> str:
    kept = text.rstrip().splitlines()
    cut = len(kept) - (limit - 1)
    return (f"… ({cut} line(s) above)\n" + "\n".join(kept[-(limit - 1) :])) if cut > 0 else "\n".join(kept)


def _message(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) > MESSAGE_LINES:
        return [*lines[:MESSAGE_LINES], f"… ({len(lines) - MESSAGE_LINES} more line(s) of the message)"]
    return lines


def _fit(frames: list[_Frame], room: int) -> tuple[list[_Frame], int]:
    """The innermost frames whose lines fit in `room` (one line is kept to say how many were left out)."""
    kept: list[_Frame] = []
    used = 0
    for frame in reversed(frames):
        size = 1 + len(frame.source)
        left = len(frames) - len(kept) - 1
        if used + size + (1 if left else 0) > room:
            break
        kept.insert(0, frame)
        used += size
    return kept, len(frames) - len(kept)


# -- Python's format ---------------------------------------------------------------------------
def _python_frames(lines: list[str]) -> tuple[list[_Frame], list[str], bool]:
    """(frames, the exception's lines, whether it is the last of chained exceptions) of the last traceback."""
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=-1)
    if start < 0:
        return [], [], False
    chained = any(line.startswith(_CHAINS) for line in lines[:start])
    frames: list[_Frame] = []
    i = start + 1
    while i < len(lines):
        match = _PY_FRAME.match(lines[i])
        if not match:
            if lines[i].strip() and not lines[i][0].isspace():
                break  # the exception
            i += 1
            continue
        i += 1
        source: list[str] = []
        while i < len(lines) and lines[i][:1].isspace() and not _PY_FRAME.match(lines[i]):
            if not _CARETS.match(lines[i]) and len(source) < 2:
                source.append(lines[i])
            i += 1
        frames.append(_Frame(match["file"], int(match["line"]), match["func"], tuple(source)))
    return frames, lines[i:], chained


def _python(text: str, blamed: tuple[str, str], limit: int) -> str:
    frames, raised, chained = _python_frames(text.rstrip().splitlines())
    while frames and _MACHINERY.search(frames[0].file):
        frames.pop(0)  # the harness's child and runpy: a maintainer's run starts at the scenario
    message = _message(raised)
    header = ["Traceback (most recent call last):" + (" (the last of chained exceptions)" if chained else "")]
    kept, cut = _fit(frames, limit - len(header) - len(message))
    out = list(header)
    if cut:
        out.append(f"  … {cut} earlier frame(s)")
    for frame in kept:
        location = f'  File "{frame.file}", line {frame.line}, in {frame.function}'
        out.append(location + (_marker(blamed) if _mark(frame, blamed) else ""))
        out += frame.source
    return "\n".join(out + message)


# -- pytest's formats --------------------------------------------------------------------------
def _pytest_frames(lines: list[str]) -> tuple[list[_Frame], list[str], bool]:
    """(frames, the `E` lines, whether it is the last of chained exceptions) of pytest's long or short format."""
    chain = [i for i, line in enumerate(lines) if line.startswith(_CHAINS)]
    if chain:
        lines = lines[chain[-1] + 1 :]
    entries: list[list[str]] = [[]]
    if any(_SEPARATOR.match(line) for line in lines):
        for line in lines:
            if _SEPARATOR.match(line):
                entries.append([])
            else:
                entries[-1].append(line)
    else:  # the short format (a suite's own `--tb=short`): each location starts an entry
        for line in lines:
            if entries[-1] and _is_location(line) and any(_is_location(e) for e in entries[-1]):
                entries.append([])
            entries[-1].append(line)
    frames: list[_Frame] = []
    message: list[str] = []
    for entry in entries:
        found = _entry(entry)
        if found is not None:
            frames.append(found[0])
            message = found[1] or message
    return frames, message, bool(chain)


def _pytest(text: str, blamed: tuple[str, str], limit: int) -> str:
    frames, raised, chained = _pytest_frames(text.rstrip().splitlines())
    message = _message(raised)
    kept, cut = _fit(frames, limit - len(message) - (1 if chained else 0))
    out = ["(the last of chained exceptions)"] if chained else []
    if cut:
        out.append(f"… {cut} earlier frame(s)")
    for frame in kept:
        where = f"{frame.file}:{frame.line}" + (f": in {frame.function}" if frame.function else ":")
        out.append(where + (_marker(blamed) if _mark(frame, blamed) else ""))
        out += frame.source
    return "\n".join(out + message)


def _is_location(line: str) -> bool:
    return not line.startswith(("E ", ">", " ")) and _LOCATION.match(line) is not None


def _entry(lines: list[str]) -> tuple[_Frame, list[str]] | None:
    """One entry of pytest's long (or short) format -> (its frame, its `E` lines)."""
    at = [i for i, line in enumerate(lines) if _is_location(line)]
    if not at:
        return None  # the head of an entry the stored text cut
    location = _LOCATION.match(lines[at[-1]])
    assert location is not None
    body = lines[: at[-1]]
    rest = (location["rest"] or "").strip()
    function = rest.removeprefix("in ").strip() if rest.startswith("in ") else ""
    failing = next((i for i, line in enumerate(body) if line.startswith(">")), None)
    if not function and failing is not None:
        function = next((m["name"] for line in reversed(body[:failing]) if (m := _DEF.match(line))), "")
    source: tuple[str, ...] = ()
    if failing is not None:
        source = ("    " + body[failing][1:].strip(),)
    else:  # the short format: the line under the location
        below = [line for line in lines[at[-1] + 1 :] if line.startswith(" ") and line.strip()]
        source = ("    " + below[0].strip(),) if below else ()
    errors = [line for line in lines if line.startswith("E ")]
    errors = ["E   " + line[1:].strip() for line in errors]
    return _Frame(location["file"], int(location["line"]), function, source), errors
