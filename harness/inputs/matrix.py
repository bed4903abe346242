"""The matrix: parse and validate `matrix.toml`, then expand it into cells.

Parsing and expansion are pure. Checking versions against the index and resolving git refs
is I/O and lives in `candidates.py`; it returns the per-axis candidate lists that `expand`
takes. Every mistake in a file is collected before failing, so a user fixes them in one go.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.analysis.versions import git_ref, git_url_without_ref, order_key
from harness.errors import MatrixError

__all__ = ["git_ref", "git_url_without_ref"]  # re-exported: matrix files name git sources

CandidateKind = Literal["version", "git", "path", "inherit"]
Pick = Literal["all", "newest-patch", "newest-minor", "newest"]

#: Short names keep cell ids readable in `nox -l`; any other package uses its own name.
ABBREVIATIONS = {"transformers": "tf", "accelerate": "acc", "bitsandbytes": "bnb"}

SETTINGS_KEYS = {
    "python",
    "scenarios",
    "timeout",
    "repeats",
    "index_url",
    "extra_index_urls",
    "find_links",
    "exclude_newer",
    "isolation",
    "preload",
    "extra_requirements",
    "env_dir",
    "no_index",
    "refine",
    "refine_limit",
    "refine_lines",
    "zygote",
}
TOP_KEYS = {"matrix", "axes", "include", "exclude", "tests"}
#: The [tests] table: a team's pytest suite as the checks (harness/running/testsuite.py).
TESTS_KEYS: dict[str, type | tuple[type, ...]] = {
    "root": str,
    "of": str,
    "git": str,
    "paths": list,
    "k": str,
    "m": str,
    "requirements": list,
    "timeout": (int, float),
    "allow_empty": bool,  # a selection that matches no test in a cell is not a failure
}
PICKS = ("all", "newest-patch", "newest-minor", "newest")
# What the fork server imports once per cell, in order. A module that initialises CUDA at
# import (bitsandbytes does when it sees a GPU) is dropped there, and only it; the torch.compile
# stack bitsandbytes pulls in comes first so that it stays preloaded even then.
DEFAULT_PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "transformers",
    "transformers.modeling_utils",
    "accelerate",
    "peft",
    "bitsandbytes",
)
_GIT_URL = re.compile(r"^git\+(https?|ssh|file)://(?:[\w.\-]+@)?[^\s@]+(?:@[\w./\-]+)?$")


@dataclass(frozen=True)
class Candidate:
    """One entry of one axis: a release, a git source, a local path, or inherited."""

    package: str
    kind: CandidateKind
    value: str = ""  # version, git URL (with @ref), path; "" for inherit
    commit: str = ""  # resolved git commit (filled by candidates.py)
    disambiguator: str = ""  # set by expand() when two candidates of an axis share a label

    def label(self) -> str:
        base = self._label()
        return f"{base}-{self.disambiguator}" if self.disambiguator else base

    def _label(self) -> str:
        short = ABBREVIATIONS.get(self.package, self.package)
        if self.kind == "version":
            return f"{short}{self.value}"
        if self.kind == "git":
            return f"{short}-git-{_slug(git_ref(self.value))}"
        if self.kind == "path":
            return f"{short}-path-{_slug(Path(self.value).name)}"
        return f"{short}-inherit"

    def requirement(self) -> str:
        """The line handed to the resolver (inherit is handled by the env builder)."""
        if self.kind == "version":
            return f"{self.package}=={self.value}"
        if self.kind == "git":
            url = self.value
            if self.commit:
                url = f"{git_url_without_ref(url)}@{self.commit}"
            return f"{self.package} @ {url}"
        if self.kind == "path":
            return f"{self.package} @ {Path(self.value).resolve().as_uri()}"
        return self.package

    def sort_key(self) -> tuple[Any, ...]:
        """The harness's one order (`versions.order_key`): releases by version, then sources."""
        return order_key(self.value if self.kind != "inherit" else "")


def _slug(text: str) -> str:
    return re.sub(r"[^\w.]+", "-", text).strip("-")[:24] or "x"


@dataclass(frozen=True)
class Cell:
    """One combination of versions. Its id is stable and readable."""

    candidates: tuple[Candidate, ...]
    python: str

    @property
    def id(self) -> str:
        return "-".join(c.label() for c in self.candidates)

    def candidate(self, package: str) -> Candidate | None:
        return next((c for c in self.candidates if c.package == package), None)

    def with_candidate(self, candidate: Candidate) -> Cell:
        """This cell with one axis changed (a probe of refinement or bisection); the axis is added if missing."""
        others = tuple(c for c in self.candidates if c.package != candidate.package)
        if len(others) == len(self.candidates):
            return Cell((*self.candidates, candidate), self.python)
        return Cell(tuple(candidate if c.package == candidate.package else c for c in self.candidates), self.python)

    def as_dict(self) -> dict[str, str]:
        return {c.package: (c.value if c.kind != "inherit" else "inherit") for c in self.candidates}

    def __str__(self) -> str:  # like nox's Param: "a=1, b=2"
        return ", ".join(f"{c.package}={c.value or c.kind}" for c in self.candidates)


@dataclass(frozen=True)
class AxisEntry:
    """An axis entry as written, before the index is consulted."""

    kind: Literal["version", "specifier", "git", "path", "inherit"]
    value: str = ""
    pick: Pick = "all"
    limit: int = 0  # keep only the newest N after picking; 0 = no limit


@dataclass
class Settings:
    python: str = "3.11"
    scenarios: list[str] = field(default_factory=list)  # empty = every scenario in scenarios/
    timeout: float = 300.0
    repeats: int = 1
    index_url: str = ""
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    exclude_newer: str = ""  # "", "period" or an RFC 3339 date
    isolation: Literal["fork", "process"] = "fork"
    # Imported once per cell by the fork server (import, then fork per scenario). Importing
    # transformers.modeling_utils is most of the cost (~6 s of ~11 s on a 2-core machine).
    # Nothing here may touch CUDA: a forked child cannot use a CUDA context of its parent.
    preload: list[str] = field(default_factory=lambda: list(DEFAULT_PRELOAD))
    # One process per torch build imports `preload`'s torch entries, and each cell's fork
    # server is forked from it; the servers preload what the cell's scenarios imported last
    # time (learned) instead of the rest of `preload`. false: every server imports `preload`.
    zygote: bool = True
    extra_requirements: list[str] = field(default_factory=list)
    env_dir: str = ".nox"
    # After the cells, build releases between tested ones until every range is exact (`refinement`).
    refine: bool = True
    refine_limit: int = 0  # most probe cells a sweep builds; 0: as many as the ranges need
    refine_lines: Literal["all", "first"] = "all"  # "all": every line of the matrix exact; "first": one line per failure, the rest ranges


@dataclass
class MatrixSpec:
    settings: Settings
    axes: dict[str, list[AxisEntry]]
    include: list[dict[str, str]] = field(default_factory=list)
    exclude: list[dict[str, str]] = field(default_factory=list)
    source: str = "matrix.toml"
    #: Mistakes found while parsing; resolution adds its own and reports all of them at once.
    problems: list[str] = field(default_factory=list)
    tests: dict[str, Any] = field(default_factory=dict)  # the [tests] table, checked


def load_matrix(path: Path, *, lenient: bool = False) -> MatrixSpec:
    """Read and parse a matrix file. `lenient` keeps going past mistakes (see `parse_matrix_lenient`)."""
    try:
        text = path.read_text()
    except OSError as exc:
        fix = "pass --matrix with an existing file, or write one with `harness init`"
        raise MatrixError(str(path), [f"cannot read the matrix file ({exc.strerror}); {fix}"]) from exc
    return parse_matrix_lenient(text, str(path)) if lenient else parse_matrix(text, str(path))


def parse_matrix(text: str, source: str = "matrix.toml") -> MatrixSpec:
    spec = parse_matrix_lenient(text, source)
    if spec.problems:
        raise MatrixError(source, spec.problems)
    return spec


def parse_matrix_lenient(text: str, source: str = "matrix.toml") -> MatrixSpec:
    """Parse what can be parsed and record every mistake in `problems` (malformed TOML still raises)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(source, [f"malformed TOML ({exc}); fix the syntax at that line"]) from exc
    problems: list[str] = []
    for key in sorted(set(data) - TOP_KEYS):
        problems.append(f"unknown top-level key {key!r}; expected one of {sorted(TOP_KEYS)}")
    settings = _parse_settings(data.get("matrix", {}), problems)
    axes = _parse_axes(data.get("axes", {}), problems)
    include = _parse_selectors(data.get("include", []), "include", axes, problems)
    exclude = _parse_selectors(data.get("exclude", []), "exclude", axes, problems)
    tests = _parse_tests(data.get("tests", {}), problems)
    return MatrixSpec(settings, axes, include, exclude, source, problems, tests)


def _parse_tests(raw: Any, problems: list[str]) -> dict[str, Any]:
    """[tests]: root = "." (where the team types pytest), paths = ["tests"], k, m, requirements, timeout;
    or of = "peft" and git = PATH_OR_URL: that package's own tests at each cell's tag."""
    if not isinstance(raw, dict):
        problems.append('[tests] must be a table, e.g. [tests] paths = ["tests"]')
        return {}
    kept = {}
    for key, value in raw.items():
        kind = TESTS_KEYS.get(key)
        if kind is None:
            problems.append(f"unknown key {key!r} in [tests]; expected one of {sorted(TESTS_KEYS)}")
        elif (
            not isinstance(value, kind)
            or (isinstance(value, bool) and kind is not bool)
            or (isinstance(value, list) and not all(isinstance(v, str) for v in value))
        ):
            named = {list: "a list of strings", str: "a string", bool: "true or false"}
            wanted = named[kind] if isinstance(kind, type) and kind in named else "a number of seconds"
            problems.append(f"[tests] {key} = {value!r} has the wrong type; give {wanted}")
        elif key in ("k", "m") and (complaint := pytest_expression_problem(str(value), f"-{key}")):
            problems.append(f"[tests] {key} = {value!r}: pytest says {complaint}; give an expression pytest accepts")
        else:
            kept[key] = value
    return kept


def pytest_expression_problem(expression: str, option: str) -> str:
    """pytest's complaint about a -k or -m expression, as pytest words it; "" when it has none,
    or when pytest does not import here (the harness does not need it to run: the cells then
    say it, `incell/suite.py`'s "usage_error"). The check is pytest's own parser.

    >>> pytest_expression_problem("lora and not slow", "-k")
    ''
    >>> pytest_expression_problem("and or", "-k")
    "Wrong expression passed to '-k': and or: at column 1: expected not OR left parenthesis OR identifier; got and"
    """
    try:
        from _pytest.mark.expression import Expression
    except ImportError:
        return ""
    text = expression.lstrip() if option == "-k" else expression  # as pytest reads each
    if not text:
        return ""
    try:
        Expression.compile(text)
    except SyntaxError as err:  # pytest 8 and 9 raise this; the message as `pytest -k` prints it
        return f"Wrong expression passed to '{option}': {err.text}: at column {err.offset}: {err.msg}"
    except Exception as err:  # an older pytest's ParseError: "at column N: ..."
        return f"Wrong expression passed to '{option}': {text}: {err}"
    return ""


def _parse_settings(raw: Any, problems: list[str]) -> Settings:
    settings = Settings()
    if not isinstance(raw, dict):
        problems.append("[matrix] must be a table")
        return settings
    for key in sorted(set(raw) - SETTINGS_KEYS):
        problems.append(f"unknown key {key!r} in [matrix]; expected one of {sorted(SETTINGS_KEYS)}")
    expected: dict[str, type | tuple[type, ...]] = {
        "python": str,
        "scenarios": list,
        "timeout": (int, float),
        "repeats": int,
        "index_url": str,
        "extra_index_urls": list,
        "find_links": list,
        "exclude_newer": str,
        "isolation": str,
        "preload": list,
        "extra_requirements": list,
        "env_dir": str,
        "no_index": bool,
        "refine": bool,
        "refine_limit": int,
        "refine_lines": str,
        "zygote": bool,
    }
    for key, kind in expected.items():
        if key not in raw:
            continue
        value = raw[key]
        # bool is an int in Python; `timeout = true` is still a mistake
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            problems.append(f"[matrix] {key} = {value!r} has the wrong type; expected {_type_name(kind)}")
            continue
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            problems.append(f"[matrix] {key} = {value!r}: every item must be a string")
            continue
        setattr(settings, key, value)
    if settings.timeout <= 0:
        problems.append(f"[matrix] timeout = {settings.timeout!r} must be a positive number of seconds")
    if settings.repeats < 1:
        problems.append(f"[matrix] repeats = {settings.repeats!r} must be at least 1")
    if settings.refine_limit < 0:
        problems.append(f"[matrix] refine_limit = {settings.refine_limit!r} must be 0 (no limit) or a positive number of probe cells")
    if settings.refine_lines not in ("all", "first"):
        problems.append(
            f'[matrix] refine_lines = {settings.refine_lines!r}; use "all" (every line exact) or "first" (one line per failure)'
        )
    if settings.isolation not in ("fork", "process"):
        problems.append(f'[matrix] isolation = {settings.isolation!r}; use "fork" or "process"')
    if settings.exclude_newer not in ("", "period") and not re.match(r"^\d{4}-\d{2}-\d{2}", settings.exclude_newer):
        problems.append(f'[matrix] exclude_newer = {settings.exclude_newer!r}; use "period" or a date like "2026-04-24"')
    return settings


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {"str": "a string", "list": "a list", "int": "an integer", "float": "a number", "bool": "true or false"}
    return " or ".join(names.get(k.__name__, k.__name__) for k in kinds)


def _parse_axes(raw: Any, problems: list[str]) -> dict[str, list[AxisEntry]]:
    axes: dict[str, list[AxisEntry]] = {}
    if not isinstance(raw, dict) or not raw:
        problems.append('[axes] must be a table with at least one axis, e.g. transformers = ["5.6.2"]')
        return axes
    for name, value in raw.items():
        package = str(canonicalize_name(name))
        values = value if isinstance(value, list) else [value]
        if not values:
            problems.append(f"axis {name!r} is empty; give at least one version")
            continue
        entries = [e for v in values if (e := parse_axis_entry(name, v, problems)) is not None]
        axes[package] = entries
    return axes


def parse_axis_entry(axis: str, value: Any, problems: list[str]) -> AxisEntry | None:
    """One value of an axis: "5.6.2", "inherit", "git+https://…@ref", "./path", or a table."""
    if isinstance(value, dict):
        return _parse_specifier_table(axis, value, problems)
    if not isinstance(value, str):
        problems.append(f"axis {axis!r}: {value!r} is not a version string or table")
        return None
    text = value.strip()
    if text == "inherit":
        return AxisEntry("inherit")
    if text.startswith("git+") or text.startswith("git@"):
        if not _GIT_URL.match(text):
            problems.append(f"axis {axis!r}: bad git source {text!r}; write git+https://host/org/repo@ref or git+file:///path/to/repo@ref")
            return None
        return AxisEntry("git", text)
    if text.startswith(("/", "./", "../", "~", "file://")):
        return AxisEntry("path", text.removeprefix("file://"))
    if any(op in text for op in "<>=!~,"):
        return _parse_specifier_table(axis, {"specifier": text}, problems)
    try:
        Version(text)
    except InvalidVersion:
        problems.append(
            f'axis {axis!r}: invalid version {text!r}; use a release such as "1.13.0", '
            'a specifier such as ">=1.10,<1.16", a git+ URL or "inherit"'
        )
        return None
    return AxisEntry("version", text)


def _parse_specifier_table(axis: str, table: dict[str, Any], problems: list[str]) -> AxisEntry | None:
    unknown = set(table) - {"specifier", "pick", "limit"}
    if unknown:
        problems.append(f"axis {axis!r}: unknown key(s) {sorted(unknown)} in specifier table; use specifier, pick, limit")
    spec = table.get("specifier")
    pick = table.get("pick", "all")
    limit = table.get("limit", 0)
    before = len(problems)
    if not isinstance(spec, str):
        problems.append(f'axis {axis!r}: a table needs specifier = ">=X,<Y"')
    else:
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            problems.append(f'axis {axis!r}: invalid specifier {spec!r}; write e.g. ">=1.10,<1.16"')
    if pick not in PICKS:
        problems.append(f"axis {axis!r}: pick = {pick!r}; use one of {list(PICKS)}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        problems.append(f"axis {axis!r}: limit = {limit!r} must be a non-negative integer")
    if len(problems) > before or not isinstance(spec, str):
        return None
    return AxisEntry("specifier", spec, pick, limit)


def _parse_selectors(raw: Any, what: str, axes: Mapping[str, list[AxisEntry]], problems: list[str]) -> list[dict[str, str]]:
    if not isinstance(raw, list):
        problems.append(f"[[{what}]] must be an array of tables")
        return []
    out: list[dict[str, str]] = []
    for i, table in enumerate(raw):
        if not isinstance(table, dict):
            problems.append(f"[[{what}]] #{i + 1} must be a table")
            continue
        selector: dict[str, str] = {}
        for name, value in table.items():
            package = str(canonicalize_name(name))
            if package not in axes:
                problems.append(f"[[{what}]] #{i + 1} names {name!r}, which is not an axis; add it under [axes] or remove it")
                continue
            entry = parse_axis_entry(name, value, problems) if isinstance(value, str) else None
            if entry is None or entry.kind == "specifier":
                if isinstance(value, str) and entry is not None:
                    problems.append(f'[[{what}]] #{i + 1}: {name} = {value!r} must be one version, git source, path or "inherit"')
                elif not isinstance(value, str):
                    problems.append(f"[[{what}]] #{i + 1}: {name} = {value!r} must be a string")
                continue
            selector[package] = value.strip()
        out.append(selector)
    return out


def pick_versions(versions: Sequence[Version], pick: Pick, limit: int = 0) -> list[Version]:
    """Choose among matching releases: all, the newest patch of each minor, of each major, or the newest.

    >>> [str(v) for v in pick_versions([Version(x) for x in ["1.0.0", "1.0.1", "1.1.0"]], "newest-patch")]
    ['1.0.1', '1.1.0']
    """
    ordered = sorted(set(versions))
    if pick == "newest":
        chosen = ordered[-1:]
    elif pick in ("newest-patch", "newest-minor"):
        width = 2 if pick == "newest-patch" else 1
        newest: dict[tuple[int, ...], Version] = {}
        for v in ordered:
            newest[v.release[:width]] = v
        chosen = sorted(newest.values())
    else:
        chosen = ordered
    return chosen[-limit:] if limit else chosen


def _matches(cell: Cell, selector: Mapping[str, str]) -> bool:
    for package, value in selector.items():
        cand = cell.candidate(package)
        if cand is None:
            return False
        if cand.kind == "inherit":
            if value != "inherit":
                return False
        elif not _same_value(cand, value):
            return False
    return True


def _same_value(cand: Candidate, value: str) -> bool:
    """ "2.13" and "2.13.0" are one release: compare versions as versions, the rest as text."""
    if cand.kind == "version":
        try:
            return Version(cand.value) == Version(value)
        except InvalidVersion:
            return False
    return cand.value == value


def _disambiguate(cands: Sequence[Candidate]) -> list[Candidate]:
    """Two forks at @main (or two checkouts named peft) would share an id: add a short hash."""
    labels = [c.label() for c in cands]
    out = []
    for cand, label in zip(cands, labels):
        if labels.count(label) > 1:
            cand = replace(cand, disambiguator=hashlib.sha1(cand.value.encode()).hexdigest()[:6])
        out.append(cand)
    return out


def expand(
    axes: Mapping[str, Sequence[Candidate]],
    python: str,
    include: Sequence[Mapping[str, Candidate]] = (),
    exclude: Sequence[Mapping[str, str]] = (),
) -> list[Cell]:
    """Cartesian product of the axes, minus excludes, plus includes; stable order, no duplicates.

    An include names some axes; the others take that axis's newest candidate.
    """
    axes = {name: _disambiguate(cands) for name, cands in axes.items()}
    names = list(axes)
    cells: list[Cell] = []
    for combo in itertools.product(*(axes[n] for n in names)):
        cell = Cell(tuple(combo), python)
        if not any(_matches(cell, sel) for sel in exclude):
            cells.append(cell)
    for inc in include:
        chosen = tuple(inc.get(n) or _newest(axes[n]) for n in names)
        cells.append(Cell(chosen, python))
    seen: set[str] = set()
    unique = []
    for cell in cells:
        if cell.id not in seen:
            seen.add(cell.id)
            unique.append(cell)
    return unique


def _newest(cands: Sequence[Candidate]) -> Candidate:
    versions = [c for c in cands if c.kind == "version"]
    return max(versions, key=lambda c: Version(c.value)) if versions else cands[-1]


def shard_cells(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The `index`-th (1-based) of `count` deterministic slices: by id, round robin.

    >>> [c.id for c in shard_cells([Cell((Candidate("a", "version", v),), "3.11") for v in "1 2 3".split()], 2, 2)]
    ['a2']
    """
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: the index must be between 1 and {count}")
    ordered = sorted(cells, key=lambda c: c.id)
    return [c for k, c in enumerate(ordered) if k % count == index - 1]
