"""Versions and sources, and the one order every part of the harness sorts them in. Pure.

A candidate of an axis is a release (`1.14.0`, `2.13.0+cpu`) or a source: a git URL with the
commit that was built, or a local checkout. The order: releases by `packaging.version.Version`
(1.10.0 after 1.9.0), then sources after every release (a branch such as `@main` is newer than
the releases it was cut from): in commit order where it is known, else by when each was first
tested, else by text. Attribution, bisection, pins, reports, the summary and the dashboard all
use `order_key`; a pin's preference for released versions is its own stated rule on top of it.

>>> sorted(["5.10.4", "git+https://x/y@main", "5.6.2"], key=version_key)
['5.6.2', '5.10.4', 'git+https://x/y@main']
>>> Point("git+https://github.com/huggingface/accelerate@main", "0123456789abcdef").label()
'main@0123456789ab'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version


@lru_cache(maxsize=8192)
def release(value: str) -> Version | None:
    """`2.13.0+cpu` -> Version; a git URL, a path or `inherit` -> None."""
    try:
        return Version(value)
    except (InvalidVersion, TypeError):
        return None


# -- git sources -----------------------------------------------------------------------------
def _split_git(url: str) -> tuple[str, str]:
    """("git+ssh://git@host/repo", "ref"): a ref's '@' comes after the path starts, a user's before."""
    scheme, rest = url.split("://", 1)
    slash = rest.find("/")
    at = rest.rfind("@")
    if at > slash >= 0 or (slash < 0 and at >= 0 and scheme == "git+file"):
        return f"{scheme}://{rest[:at]}", rest[at + 1 :]
    return url, "HEAD"


def git_url_without_ref(url: str) -> str:
    return _split_git(url)[0]


def git_ref(url: str) -> str:
    return _split_git(url)[1]


# -- points ----------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Point:
    """One candidate of one axis as a cell used it: a release, or a source with its commit."""

    value: str  # the requested value: "1.14.0", "git+https://…@main", a path
    commit: str = ""  # the exact commit for git and path candidates

    @property
    def release(self) -> Version | None:
        return None if self.commit else release(self.value)

    @property
    def is_release(self) -> bool:
        return self.release is not None

    def label(self) -> str:
        """`1.14.0`; `main@0123456789ab` for a git source; `peft@0123456789ab` for a local checkout."""
        if not self.commit:
            return self.value
        if self.value.startswith("git+"):
            ref = git_ref(self.value)
            short = self.commit[:12]
            return short if self.commit.startswith(ref) or ref.startswith(short) else f"{ref}@{short}"
        return f"{Path(self.value).name or self.value}@{self.commit[:12]}"


def commit_index(commit: str, commits: Sequence[str]) -> int | None:
    """Where `commit` stands in `commits` (oldest first); full and short shas match each other."""
    if not commit:
        return None
    return next((i for i, c in enumerate(commits) if c.startswith(commit) or commit.startswith(c)), None)


def order_key(point: Point | str | None, commits: Sequence[str] = (), first_seen: str = "") -> tuple[Any, ...]:
    """The one order: nothing first, then releases by version, then sources.

    Sources go in `commits` order when listed, else by when they were first tested (a moving
    ref such as `@main` advances with time), else by value.
    """
    if point is None:
        return (-1,)
    if isinstance(point, str):
        point = Point(point)
    version = point.release
    if version is not None:
        return (0, version, "", "")
    index = commit_index(point.commit, commits)
    return (1, index if index is not None else len(commits), first_seen, point.value, point.commit)


@lru_cache(maxsize=65536)
def version_key(value: str | None) -> tuple[Any, ...]:
    """`order_key` for a plain value as stored (`5.6.2`, `2.13.0+cpu`, a git URL)."""
    return order_key(value)


def sort_values(values: Iterable[str]) -> list[str]:
    """Distinct values, oldest first."""
    return sorted(set(values), key=version_key)


def requirement(package: str, value: str) -> str:
    """`torch==2.13.0+cpu`, or `accelerate @ git+https://…@sha` for a source."""
    return f"{package}=={value}" if release(value) is not None else f"{package} @ {value}"


def between(known: Iterable[Version], low: Version, high: Version | None, *, inclusive: bool = False) -> list[Version]:
    """Releases strictly between `low` and `high` (every one newer than `low` when `high` is a
    source); with `inclusive`, the ends too where `known` holds them.

    >>> between([Version(v) for v in ("1.0", "1.1", "1.2", "1.3")], Version("1.0"), Version("1.2"), inclusive=True)
    [<Version('1.0')>, <Version('1.1')>, <Version('1.2')>]
    """
    if inclusive:
        return sorted(v for v in set(known) if low <= v and (high is None or v <= high))
    return sorted(v for v in set(known) if low < v and (high is None or v < high))


# -- moments ---------------------------------------------------------------------------------
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ][0-9:.]+)?(Z|[+-]\d{2}:?\d{2})?$")


def moment(text: str) -> datetime | None:
    """An `exclude_newer` moment (the matrix's, or `--exclude-newer`): releases uploaded after it
    do not exist yet. `2026-11-20` or an RFC 3339 time -> an aware datetime (UTC when no zone is
    given); "" -> None; anything else (`period` included: each cell's own moment) is a ValueError.

    >>> moment("2026-11-20"), moment("2026-11-20T12:00:00+01:00").utcoffset().seconds
    (datetime.datetime(2026, 11, 20, 0, 0, tzinfo=datetime.timezone.utc), 3600)
    """
    if not text:
        return None
    if not _DATE.match(text):
        raise ValueError(f"{text!r} is not a date")
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)
