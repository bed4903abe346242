"""Keep credentials, and the machine's own paths, out of everything the harness stores or hands on.

Scenarios may need `HF_TOKEN` to reach a real checkpoint, so the child still receives it; but
its value is masked in captured output, tracebacks, messages and the environment record.

A report leaves the machine (it is pasted into an upstream issue), so every path in it is
written from its root (`local_paths`): an env's files from `site-packages/`, a suite's files
from the suite's root, the rest from the temporary folder or the home folder they lie in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

SECRET_NAME = re.compile(r"(^HF_TOKEN$|_TOKEN$|_KEY$|_SECRET$|^TOKEN$|PASSWORD)", re.IGNORECASE)
MASK = "***"
#: Values shorter than this are not masked: masking "1" would shred every number in a log.
MIN_SECRET_LENGTH = 4


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """Every secret value, longest first so a value containing another is masked whole."""
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def mask(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment as stored: secret names kept (useful to know it was set), values masked."""
    return {k: (MASK if is_secret_name(k) else v) for k, v in sorted(environ.items())}


# -- paths -------------------------------------------------------------------------------------
#: Where a word of a path starts (after a space, a quote or a parenthesis): each pattern below
#: matches from there. Any match within a word also matches from its start (its `[^\s"'(]*`
#: takes the rest in), so the matches are the same; without it, each pattern was tried from every
#: character of every word: 0.15 s a pattern over a suite's 140 KB report.
_WORD = r"""(?<![^\s"'(])"""
#: Everything up to an interpreter's `site-packages/`: the env's folder, which names this machine.
_SITE = re.compile(_WORD + r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\](?:site|dist)-packages[/\\]""")
#: A cell's env folder wherever it lies (`envs.env_location`: the cell's id, then 12 hex digits of its request).
_ENV = re.compile(_WORD + r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\][\w.+-]+-[0-9a-f]{12}(?=[/\\\s"')]|$)""")
#: An interpreter's standard library (`/usr/lib/python3.11/runpy.py`).
_STDLIB = re.compile(_WORD + r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\]lib[/\\]python3\.\d+[/\\](?!site-packages|dist-packages)""")
#: The harness's own checkout or installed copy: its files from `harness/` and `scenarios/`.
_CHECKOUT = re.compile(_WORD + r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\](harness|scenarios)[/\\]""")
#: A home folder by its usual places, whoever's it is.
#: Where a path starts: not inside a longer one, or right after `file://`.
_START = r"(?:(?<=file://)|(?<![\w.~/\\-]))"
_HOME = re.compile(_START + r"""(?:/home/[^/\s"'()]+|/Users/[^/\s"'()]+|/root)(?=[/\\\s"'()]|$)""")


def local_paths(text: str, roots: Sequence[tuple[str, str]] = ()) -> str:
    """Every path of this machine in `text` written from its root.

    roots: (absolute folder, what to write instead) pairs, applied longest first: "" writes
    the paths under it relative to it (a suite's root: `tests/test_x.py`), a label such as
    `<tmp>` keeps the rest (`<tmp>/pytest-of-me/t0`). A path pytest wrote relative to its
    rootdir (`../../tmp/x`) is matched too. Home folders become `~`.

    >>> local_paths('File "/tmp/envs/c-1b61/lib/python3.11/site-packages/peft/x.py", line 3')
    'File "site-packages/peft/x.py", line 3'
    >>> local_paths("/home/me/suite/tests/t.py and ../../../tmp/pytest-of-me/t0", [("/home/me/suite", ""), ("/tmp", "<tmp>")])
    'tests/t.py and <tmp>/pytest-of-me/t0'
    >>> local_paths("/tmp/envs/torch2.13.0-tf5.8.0-peft0.18.0-c4fef2c25fb6/bin/python")
    '<env>/bin/python'
    >>> local_paths("cache in /home/me/.cache/uv")
    'cache in ~/.cache/uv'
    """
    text = _SITE.sub("site-packages/", text)
    text = _ENV.sub("<env>", text)
    text = _STDLIB.sub("<stdlib>/", text)
    text = _CHECKOUT.sub(r"\1/", text)
    for root, label in sorted({(r.rstrip("/\\"), v) for r, v in roots if r.rstrip("/\\")}, key=lambda r: -len(r[0])):
        text = _root_pattern(root).sub(_writer(label), text)
    return _HOME.sub("~", text)


def _root_pattern(root: str) -> re.Pattern[str]:
    """`root` as an absolute path, or climbed to from a relative one (`../../tmp`), as a whole path segment."""
    bare = re.escape(root.lstrip("/\\"))
    return re.compile(rf"""{_START}(?:(?:\.\.[/\\])+{bare}|{re.escape(root)})(?P<rest>[/\\]|(?=[\s"'():,;]|$))""")


def _writer(label: str) -> Callable[[re.Match[str]], str]:
    """What a path under a root becomes: `label/rest`, or the rest alone (the root itself: `.`)."""

    def written(match: re.Match[str]) -> str:
        rest = match.group("rest")
        if label:
            return label + rest
        return "" if rest else "."

    return written
