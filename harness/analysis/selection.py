"""pytest's selection of tests, read from what a results file stores: node ids, files, classes and
folders (`selects`, `select_tests`), `-m` expressions over stored markers (`marker_matches`), and
whether one sweep's selection holds every test another's could select (`covers`). Pure.

A sweep of a suite collects what its selection (`paths`, `-k`, `-m`) selects; a test that a newer
run of the same cell did not collect has left the suite only where that run's selection would have
selected it (`covers`): a narrower sweep (`-k lora`) says nothing of the tests it never asked for.

>>> covers(Selection(("tests",)), Selection(("tests/test_a.py::test_x",)))
True
>>> covers(Selection(("tests",), keyword="lora"), Selection(("tests",)))
False
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class Selection:
    """A sweep's selection of a suite's tests: its paths (empty: pytest's own default), `-k` and `-m`."""

    paths: tuple[str, ...] = ()
    keyword: str = ""
    marker: str = ""

    @classmethod
    def of(cls, recorded: Mapping[str, Any] | None) -> Selection:
        """From what a collection (or a run's `tests` settings) records: `{"paths": [...], "k": "", "m": ""}`."""
        found = recorded or {}
        return cls(tuple(str(p) for p in found.get("paths") or ()), str(found.get("k") or ""), str(found.get("m") or ""))


def covers(new: Selection, old: Selection) -> bool:
    """Whether every test `old` could select, `new` selects too, as far as the two selections
    alone tell: each of `old`'s paths lies within one of `new`'s (a folder holds its files, a file
    its tests), and `new` filters by no `-k` or `-m` that `old` did not filter by as well. pytest's
    default paths (none given) cover only the default: what they collect depends on the suite's
    configuration, which a selection does not say.

    >>> covers(Selection(("tests/",)), Selection(("tests/unit", "tests/test_b.py")))
    True
    >>> covers(Selection(("tests/unit",)), Selection(("tests",))), covers(Selection(("./",)), Selection(("tests",)))
    (False, True)
    >>> covers(Selection(), Selection()), covers(Selection(), Selection(("tests",)))
    (True, False)
    >>> covers(Selection(("tests",), marker="not gpu"), Selection(("tests",), marker="not gpu"))
    True
    """
    if (new.keyword and new.keyword != old.keyword) or (new.marker and new.marker != old.marker):
        return False
    wide, narrow = _paths(new.paths), _paths(old.paths)
    if not wide or not narrow:
        return not wide and not narrow
    return all(any(q == "." or p == q or p.startswith((f"{q}/", f"{q}::", f"{q}[")) for q in wide) for p in narrow)


def _paths(paths: Iterable[str]) -> list[str]:
    return [_selector(p).rstrip("/") or "." for p in paths if p.strip()]


def _selector(text: str) -> str:
    return text.strip().replace("\\", "/").removeprefix("./")


def selects(selector: str, name: str) -> bool:
    """Whether a selection names this stored scenario or test node id, as pytest would read it.

    A node id, a file (`tests/test_x.py`), a class (`tests/test_x.py::TestX`), a test with all
    its parametrizations (`tests/test_x.py::test_f`), a folder (`tests/`), or a scenario's name.
    """
    chosen = _selector(selector).rstrip("/")
    if name == chosen or name.startswith((f"{chosen}::", f"{chosen}[")):
        return True
    return "::" not in chosen and name.split("::", 1)[0].startswith(f"{chosen}/")


_MARKER_TOKEN = re.compile(r"\s*(\(|\)|and\b|or\b|not\b|[A-Za-z_][\w.]*)")


def marker_matches(expression: str, markers: Iterable[str]) -> bool:
    """pytest's `-m` expression (marker names with and, or, not, parentheses) against a test's markers.

    >>> marker_matches("gpu and not slow", {"gpu"}), marker_matches("gpu and not slow", {"gpu", "slow"})
    (True, False)
    >>> marker_matches("(a or b) and not c", {"b"})
    True
    """
    # worked out once per expression and set of markers: a suite's 100,000 tests carry a few sets
    return _matches(expression, frozenset(markers))


@lru_cache(maxsize=4096)
def _matches(expression: str, markers: frozenset[str]) -> bool:
    words, at = [], 0
    while at < len(expression.rstrip()):
        m = _MARKER_TOKEN.match(expression, at)
        if not m:
            left = expression[at:].strip()
            raise ValueError(f"-m {expression!r}: unexpected {left!r}; use marker names with and, or, not and parentheses")
        token = m.group(1)
        words.append(token if token in ("(", ")", "and", "or", "not") else str(token in markers))
        at = m.end()
    try:
        # only True, False, and, or, not and parentheses are left: nothing to run but logic
        return bool(eval(" ".join(words), {"__builtins__": {}}, {}))
    except SyntaxError:
        raise ValueError(f"-m {expression!r} is not a marker expression; e.g. -m 'gpu and not slow'") from None


def select_tests(stored: Iterable[str], selectors: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the stored names the selectors choose, in stored order; the selectors that chose nothing).

    A file's own node id (`tests/test_x.py`, stored when the file could not be collected in some
    cell) is chosen only when the file has no test stored: its tests are what a pin must pass,
    and a cell where it could not be collected already lacks their outcomes.

    >>> stored = ["t/test_a.py::TestX::test_1[0]", "t/test_a.py::TestX::test_1[1]", "t/test_a.py::test_2"]
    >>> stored += ["t/test_b.py::test_3", "t/test_b.py"]
    >>> select_tests(stored, ["t/test_a.py::TestX"])
    (['t/test_a.py::TestX::test_1[0]', 't/test_a.py::TestX::test_1[1]'], [])
    >>> select_tests(stored, ["t/test_b.py", "t/test_c.py"])
    (['t/test_b.py::test_3'], ['t/test_c.py'])
    """
    names = list(dict.fromkeys(stored))
    with_tests = {n.split("::", 1)[0] for n in names if "::" in n}
    ordered = sorted(names)
    chosen: set[str] = set()
    empty = []
    for selector in selectors:
        found = [n for n in _selected(ordered, selector) if "::" in n or n not in with_tests]
        if not found:
            empty.append(selector)
        chosen.update(found)
    return [n for n in names if n in chosen], empty


def _selected(ordered: Sequence[str], selector: str) -> list[str]:
    """The names in sorted `ordered` that `selects(selector, name)` chooses.

    Every name a selector chooses is the selector itself or starts with one of its prefixes, so
    each is a run of the sorted list: a lookup per selector, not a scan of every name (an `-m`
    over a 20,000-test suite hands thousands of node ids here).
    """
    chosen = _selector(selector).rstrip("/")
    prefixes = [f"{chosen}::", f"{chosen}["] + ([] if "::" in chosen else [f"{chosen}/"])
    found = [chosen] if _contains(ordered, chosen) else []
    for prefix in prefixes:
        at = bisect_left(ordered, prefix)
        while at < len(ordered) and ordered[at].startswith(prefix):
            found.append(ordered[at])
            at += 1
    return [n for n in found if selects(selector, n)]


def _contains(ordered: Sequence[str], name: str) -> bool:
    at = bisect_left(ordered, name)
    return at < len(ordered) and ordered[at] == name
