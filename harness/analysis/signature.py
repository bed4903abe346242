"""Failure signatures: the normalized identity of a failure, stable across releases.

A signature is the exception type, the message with its volatile parts masked (numbers,
addresses, shapes, module reprs, dictionary keys) and the innermost frame inside a library
under test, which also names the library to blame. Pure functions only.

>>> sig = make_signature("KeyError", "22", [Frame("/v/site-packages/transformers/models/x.py", 9, "forward")])
>>> sig.text
'KeyError: <key> @ transformers/models/x.py:forward'
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Libraries whose frames may take the blame. torch is the substrate: it raises on behalf of
#: its callers (meta-tensor checks, Module.__call__), so a higher-level library above it in
#: the stack is blamed first.
DEFAULT_LIBRARIES = ("torch", "transformers", "accelerate", "peft", "bitsandbytes")
SUBSTRATE = frozenset({"torch"})

#: Exceptions whose whole message is one volatile value (the missing key or attribute index).
_WHOLE_MESSAGE_IS_KEY = frozenset({"KeyError"})

_SITE_DIRS = re.compile(r"[/\\](?:site|dist)-packages[/\\]")


@dataclass(frozen=True)
class Frame:
    filename: str
    lineno: int
    function: str


@dataclass(frozen=True)
class Signature:
    exception_type: str
    message: str  # masked
    library: str  # the library to blame ("" when no frame lies in a library under test)
    location: str  # "library/relative/path.py:function" of the blamed frame
    text: str  # one readable line; the family key is its hash

    @property
    def family(self) -> str:
        return hashlib.sha1(self.text.encode()).hexdigest()[:12]


# Order matters: structured values first, bare numbers last.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"torch\.Size\(\[[^\]]*\]\)"), "<shape>"),
    (re.compile(r"\[(?:\s*-?\d+\s*,)*\s*-?\d+\s*\]"), "<shape>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.\-+]+){2,}"), "<path>"),
    (re.compile(r"\b(\w+)\.(__new__|__init__)\(\)"), r"<class>.\2()"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+){2,3}(?:[.+\-]?[A-Za-z]\w*)?(?![\w])"), "<version>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\s*(?:[KMGT]i?B|bytes)\b"), "<size>"),
    (re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])"), "<n>"),
)


def _collapse_reprs(message: str) -> str:
    """`Gemma4ClippableLinear(\\n (linear): Linear(in_features=32, ...)\\n)` -> `Gemma4ClippableLinear(...)`.

    Module reprs carry sizes and nesting that differ between a tiny and a real model.
    """
    out: list[str] = []
    depth = 0
    for char in message:
        if char == "(":
            depth += 1
            if depth == 1:
                out.append("(")
            continue
        if char == ")" and depth:
            depth -= 1
            if depth == 0:
                inner_start = len(out) - 1 - out[::-1].index("(")
                inner = "".join(out[inner_start + 1 :])
                # Keep short argument-free calls such as `__new__()` readable.
                if inner.strip():
                    del out[inner_start + 1 :]
                    out.append("...")
                out.append(")")
            continue
        if depth <= 1:
            out.append(char)
    return "".join(out)


def mask_message(exception_type: str, message: str) -> str:
    """Mask what varies between runs and releases; keep what names the bug."""
    if exception_type in _WHOLE_MESSAGE_IS_KEY:
        return "<key>"
    # Collapse module reprs over the whole message first: a repr spans many lines.
    text = _collapse_reprs(" ".join(line.strip() for line in message.strip().splitlines()))
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return re.sub(r"\s+", " ", text).strip()[:300]


def library_of(filename: str, libraries: Iterable[str] = DEFAULT_LIBRARIES) -> tuple[str, str]:
    """Return (library, path relative to site-packages) for a frame, or ("", "")."""
    parts = _SITE_DIRS.split(filename)
    if len(parts) < 2:
        return "", ""
    relative = parts[-1].replace("\\", "/")
    top = relative.split("/", 1)[0].removesuffix(".py")
    for lib in libraries:
        if top == lib.replace("-", "_"):
            return lib, relative
    return "", ""


def blamed_frame(frames: Sequence[Frame], libraries: Iterable[str] = DEFAULT_LIBRARIES) -> tuple[str, str]:
    """The innermost frame in a library under test, skipping the substrate when possible."""
    libs = tuple(libraries)
    fallback = ("", "")
    for frame in reversed(frames):
        lib, relative = library_of(frame.filename, libs)
        if not lib:
            continue
        location = f"{relative}:{frame.function}"
        if lib in SUBSTRATE:
            if fallback == ("", ""):
                fallback = (lib, location)
            continue
        return lib, location
    return fallback


def make_signature(
    exception_type: str,
    message: str,
    frames: Sequence[Frame],
    libraries: Iterable[str] = DEFAULT_LIBRARIES,
) -> Signature:
    short_type = exception_type.rsplit(".", 1)[-1]
    masked = mask_message(short_type, message)
    library, location = blamed_frame(frames, libraries)
    text = f"{short_type}: {masked}"
    if location:
        text += f" @ {location}"
    return Signature(short_type, masked, library, location, text)


def status_signature(status: str, detail: str = "") -> Signature:
    """Signature for outcomes with no exception: crash by signal, timeout, env problems."""
    detail = mask_message(status, detail) if detail else ""
    text = f"{status}: {detail}" if detail else status
    return Signature(status, detail, "", "", text)


_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.<>]*)(?::(?: (?P<msg>.*))?)?$")


def parse_traceback(text: str) -> tuple[str, str, list[Frame]] | None:
    """Parse the last Python traceback in free text (a child that died before reporting).

    The exception line is the first unindented line after the frames; the message runs on
    until the text ends or another traceback starts, as `str(exc)` would.
    """
    lines = text.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=-1)
    if start < 0:
        return None
    frames: list[Frame] = []
    for i in range(start + 1, len(lines)):
        match = _FRAME_LINE.match(lines[i])
        if match:
            frames.append(Frame(match["file"], int(match["line"]), match["func"]))
            continue
        if not lines[i] or lines[i][0].isspace():
            continue
        exc = _EXC_LINE.match(lines[i])
        if not exc:
            return None
        rest = []
        for line in lines[i + 1 :]:
            if line.startswith("Traceback (most recent call last)") or line.startswith("During handling"):
                break
            rest.append(line)
        message = "\n".join([exc["msg"] or "", *rest]).strip()
        return exc["type"], message, frames
    return None
