"""One stored outcome row as the analysis reads it: its axes, its exact versions, its machine. Pure.

Rows are shaped like the view `outcomes_v` (`queries.outcome_rows`) or a JSON-lines shard's
outcome records: JSON columns arrive as text or as dicts, and both are read the same way.

>>> row = {"versions": '{"torch": "2.13.0", "accelerate": "1.14.0"}', "installed": '{"torch": "2.13.0+cpu"}',
...        "platform": "linux-x86_64", "gpu": "cpu", "python": "3.11"}
>>> points(row)["torch"], installed(row)["torch"], machine_of(row).label()
(Point(value='2.13.0', commit=''), '2.13.0+cpu', 'cpu · linux-x86_64 · Python 3.11')
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter
from types import MappingProxyType
from typing import Any

from packaging.utils import canonicalize_name

from harness.analysis.versions import Point, release

#: The axes in the order people read them; any other axis (any PyPI package can be one) follows by name.
AXIS_ORDER = ("torch", "transformers", "accelerate", "peft", "bitsandbytes")
_PYTHON = re.compile(r"^(\d+)\.(\d+)")
_CUDA_LABEL = re.compile(r"^cu(\d+)(\d)$")  # torch's local version label: +cu130 -> 13.0, +cu129 -> 12.9


def axis_sort(axes: Iterable[str]) -> list[str]:
    return sorted(set(axes), key=lambda a: (AXIS_ORDER.index(a) if a in AXIS_ORDER else len(AXIS_ORDER), a))


@lru_cache(maxsize=4096)
def canonical(package: str) -> str:
    # cached: a 100k-outcome store asks for the same few hundred names millions of times
    return str(canonicalize_name(package))


def json_map(value: Any) -> Mapping[str, Any]:
    """A JSON object column as DuckDB returns it (text) or as a dict; read-only (parsed text is shared)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        return _parse(value)
    return dict(value)


@lru_cache(maxsize=8192)
def _parse(text: str) -> Mapping[str, Any]:
    # Every repeat and scenario of a cell carries the same freeze: parse it once.
    parsed = json.loads(text)
    return MappingProxyType(parsed if isinstance(parsed, dict) else {})


def _by_name(value: Any) -> Mapping[str, str]:
    if isinstance(value, str):
        return _by_name_text(value)
    return {canonical(k): str(v) for k, v in json_map(value).items()}


@lru_cache(maxsize=8192)
def _by_name_text(text: str) -> Mapping[str, str]:
    return MappingProxyType({canonical(k): str(v) for k, v in json_map(text).items()})


# -- one cell's facts, read once --------------------------------------------------------------
#: The columns every fact below is read from: what a cell and its run's host hold, not the outcome.
_CELL_COLUMNS = (
    "versions", "installed", "inherited", "git_commits", "platform", "gpu", "gpu_count",
    "python_version", "python", "host_python", "cuda_runtime", *AXIS_ORDER,
)  # fmt: skip


@dataclass(frozen=True, eq=False)  # hashed by identity: one object per cell, a key for per-cell work
class CellFacts:
    """What one cell's columns say (`cell_facts`); read-only."""

    asked: Mapping[str, str]  # `versions` by canonical name, as stored ({} when a row has none)
    requested: Mapping[str, str]
    points: Mapping[str, Point]
    installed: Mapping[str, str]
    machine: Machine
    machine_class: str


_CACHE: dict[tuple[Any, Any], tuple[tuple[Any, ...], CellFacts]] = {}
_CACHE_LIMIT = 65536


def cell_facts(row: Mapping[str, Any]) -> CellFacts:
    """What a row's cell columns say, computed once per cell of a run.

    Every outcome of a cell carries the same cell columns (the view joins them in): at 20,000
    tests x 20 cells, parsing them per row was most of the time attribution and the known-good
    set took. The cache is keyed by (run, cell) and checked against the columns themselves,
    so rows made by hand that reuse a cell id with other versions are read afresh.
    """
    raw, key = _cell_columns(row)
    return _facts_of(row, raw, key)


#: A row's cell columns and its (run, cell), read in C: a suite's answers ask 400,000 rows.
_RAW, _KEY = itemgetter(*_CELL_COLUMNS), itemgetter("run_id", "cell_id")


def _cell_columns(row: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, Any]]:
    try:
        return _RAW(row), _KEY(row)
    except KeyError:  # a row made by hand, without every column: a missing one reads as None
        return tuple(map(row.get, _CELL_COLUMNS)), (row.get("run_id"), row.get("cell_id"))


def _facts_of(row: Mapping[str, Any], raw: tuple[Any, ...], key: tuple[Any, Any]) -> CellFacts:
    hit = _CACHE.get(key)
    if hit is not None and hit[0] == raw:  # the same objects, as `queries.outcome_rows` shares them: no text compared
        return hit[1]
    facts = _read_facts(row)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = (raw, facts)
    return facts


def _read_facts(row: Mapping[str, Any]) -> CellFacts:
    wanted = _requested(row)
    found = _installed(row, wanted)
    machine = _machine_of(row, found)
    asked = MappingProxyType(dict(_by_name(row.get("versions"))))
    points_of = MappingProxyType(_points(row, wanted))
    return CellFacts(asked, MappingProxyType(wanted), points_of, MappingProxyType(found), machine, _machine_class(row))


def by_cell(rows: Iterable[Mapping[str, Any]]) -> dict[CellFacts, list[Mapping[str, Any]]]:
    """Rows by the cell they ran in (`cell_facts`), in the order the cells first appear."""
    groups: dict[CellFacts, list[Mapping[str, Any]]] = {}
    last: tuple[Any, ...] = ()
    group: list[Mapping[str, Any]] = []
    for row in rows:
        raw, key = _cell_columns(row)
        if (raw, key) != last:  # rows come by cell: most are the previous row's cell
            group = groups.setdefault(_facts_of(row, raw, key), [])
            last = (raw, key)
        group.append(row)
    return groups


def requested(row: Mapping[str, Any]) -> dict[str, str]:
    """axis -> the value the cell asked for (`1.14.0`, a git URL, a path, `inherit`).

    The axes are the keys of `versions`, or the five axis columns when a row has none.
    """
    return dict(cell_facts(row).requested)


def _requested(row: Mapping[str, Any]) -> dict[str, str]:
    versions = _by_name(row.get("versions"))
    if versions:
        return dict(versions)
    return {axis: str(row[axis]) for axis in AXIS_ORDER if row.get(axis)}


def points(row: Mapping[str, Any]) -> dict[str, Point]:
    """axis -> the candidate the cell ran, as compared along an axis.

    A git or path candidate carries its commit; an inherited axis is placed by the version the
    base interpreter really had (what was tested).
    """
    return dict(cell_facts(row).points)


def _points(row: Mapping[str, Any], wanted: Mapping[str, str]) -> dict[str, Point]:
    commits = json_map(row.get("git_commits"))
    found = _by_name(row.get("installed"))
    inherited = _by_name(row.get("inherited"))
    out = {}
    for axis, value in wanted.items():
        if value == "inherit":
            value = inherited.get(axis) or found.get(axis) or value
        out[axis] = Point(value, str(commits.get(axis) or ""))
    return out


def installed(row: Mapping[str, Any]) -> dict[str, str]:
    """axis -> the exact version the cell ran (`2.13.0+cpu`): its freeze, else inherited, else requested."""
    return dict(cell_facts(row).installed)


def _installed(row: Mapping[str, Any], wanted: Mapping[str, str]) -> dict[str, str]:
    found, inherited = _by_name(row.get("installed")), _by_name(row.get("inherited"))
    out = {}
    for axis, value in wanted.items():
        exact = found.get(axis) or inherited.get(axis) or value or str(row.get(axis) or "")
        if exact:
            out[axis] = exact
    return out


def signature_of(row: Mapping[str, Any]) -> str:
    """The failure's identity: its signature, or its status when it has none (a timeout, say)."""
    return str(row.get("signature") or row["status"])


def distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """How many axes two cells' versions differ in (an axis one of them lacks counts)."""
    return sum(a.get(axis) != b.get(axis) for axis in {*a, *b})


# -- machines --------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Machine:
    """What must match for two outcomes to be compared: platform, CPU or GPU model, Python, CUDA runtime."""

    platform: str = ""
    accelerator: str = ""  # "cpu", or the GPU's name ("NVIDIA H200")
    python: str = ""  # major.minor of the cell's interpreter
    cuda: str = ""  # the CUDA runtime the cell's torch was built for; "" for a CPU build

    def label(self) -> str:
        """`NVIDIA H200 · linux-x86_64 · Python 3.12 · CUDA 13.0`; `cpu · linux-x86_64 · Python 3.11`; "" when nothing is known."""
        if self == Machine():
            return ""
        parts = [self.accelerator or "?", self.platform or "?", f"Python {self.python or '?'}"]
        if self.cuda:
            parts.append(f"CUDA {self.cuda}")
        return " · ".join(parts)


def minor_version(text: str) -> str:
    """`3.12` of `3.12.3`; "" for anything that is no version (the path of an interpreter).

    >>> minor_version("3.12.3"), minor_version("/opt/torch/.venv/bin/python3")
    ('3.12', '')
    """
    match = _PYTHON.match(text or "")
    return f"{match.group(1)}.{match.group(2)}" if match else ""


def _cuda_from_torch(version: str) -> str:
    """`2.11.0+cu130` -> `13.0`: the build's local label names its CUDA runtime (older rows lack the column)."""
    local = (release(version).local or "") if release(version) is not None else ""  # type: ignore[union-attr]
    match = _CUDA_LABEL.match(local)
    return f"{int(match.group(1))}.{match.group(2)}" if match else ""


def machine_of(row: Mapping[str, Any]) -> Machine:
    """The machine class of a row: from the run's host and the cell's interpreter and torch build.

    Python comes from the cell's own interpreter (`python_version`), else from the matrix's
    `python` setting when it is a version, else from the host's Python (a path setting names an
    interpreter on that host).
    """
    return cell_facts(row).machine


def _machine_of(row: Mapping[str, Any], found: Mapping[str, str]) -> Machine:
    python = (
        minor_version(str(row.get("python_version") or ""))
        or minor_version(str(row.get("python") or ""))
        or minor_version(str(row.get("host_python") or ""))
    )
    cuda = str(row.get("cuda_runtime") or "") or _cuda_from_torch(found.get("torch", ""))
    # A row with no host at all (pure tests, hand-made rows) has no machine class to name.
    accelerator = str(row.get("gpu") or ("cpu" if row.get("platform") else ""))
    return Machine(str(row.get("platform") or ""), accelerator, python, cuda)


# -- machine classes -------------------------------------------------------------------------
def machine_class(row: Mapping[str, Any]) -> str:
    """What a known-good set is chosen per: `cpu`, or the GPU model with how many the run saw.

    The GPU count is part of the class because a scenario that needs two GPUs is
    `not_applicable` on one; platform, Python and CUDA are not (a pin pools them and names
    them as its evidence). "" for a row with no host at all (hand-made rows).

    >>> machine_class({"gpu": "NVIDIA H200", "gpu_count": 2}), machine_class({"gpu": "cpu", "gpu_count": 0, "platform": "linux-x86_64"})
    ('2x NVIDIA H200', 'cpu')
    """
    return cell_facts(row).machine_class


def _machine_class(row: Mapping[str, Any]) -> str:
    gpu = str(row.get("gpu") or "")
    if not gpu or gpu.lower() == "cpu":
        return "cpu" if gpu or row.get("platform") else ""
    try:
        count = int(row.get("gpu_count") or 0)
    except (TypeError, ValueError):
        count = 0
    return f"{count}x {gpu}" if count > 0 else gpu


def to_minute(value: Any) -> str:
    """When a row ran, to the minute: a DuckDB timestamp or ISO text -> `2026-11-21 14:05` (UTC, as stored).

    >>> to_minute("2026-11-21T14:05:09.5"), to_minute(None)
    ('2026-11-21 14:05', '')
    """
    return str(value or "").replace("T", " ")[:16]


@lru_cache(maxsize=1 << 18)  # a suite's answers ask it for each of its tests again and again: 684,000 times to publish 2,000,000 outcomes
def group_of(scenario: str) -> str:
    """Where a test node id lives (its file, or file::Class); a scenario is its own group.

    >>> group_of("tests/test_x.py::TestLora::test_merge[4bit]"), group_of("tests/test_y.py::test_a"), group_of("gemma4_lora")
    ('tests/test_x.py::TestLora', 'tests/test_y.py', 'gemma4_lora')
    """
    parts = scenario.split("::")
    return "::".join(parts[:2]) if len(parts) > 2 else parts[0]


# -- a suite's tests across its releases -----------------------------------------------------------
def as_tests(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as the answers read them: `scenario` is what makes two cells' rows the same check
    (a test's identity across the suite's releases, `test_id`, where one was stored), and
    `node_id` what that cell's pytest called it (what reports, repros and bisections print).
    Rows without a `test_id` (scenarios, files written before 0009) keep their scenario as both.
    Changes the rows in place; returns them. Idempotent.

    >>> row = as_tests([{"scenario": "t.py::test_x[config_kwargs45]", "test_id": "t.py::test_x[config_kwargs#3fa2c1d0]"}])[0]
    >>> row["scenario"], row["node_id"]
    ('t.py::test_x[config_kwargs#3fa2c1d0]', 't.py::test_x[config_kwargs45]')
    >>> as_tests([{"scenario": "load", "test_id": None}])[0]["scenario"]
    'load'
    """
    for row in rows:
        if "node_id" in row:
            continue
        node = row["scenario"]
        row["node_id"] = node
        row["scenario"] = row.get("test_id") or node
    return rows


def node_ids(rows: Iterable[Mapping[str, Any]], cell_id: str) -> dict[str, str]:
    """Identity -> the node id one cell's pytest gave it (`as_tests`' rows)."""
    return {str(r["scenario"]): str(r.get("node_id") or r["scenario"]) for r in rows if str(r.get("cell_id")) == cell_id}


#: Past this many tests, answers and grids list files (or classes), not each test.
GRID_ROWS = 60


def is_test(scenario: str) -> bool:
    """A pytest node id (`tests/test_x.py::test_y`, or a file that failed to import), not a scenario's name.

    >>> is_test("tests/test_x.py::TestA::test_b[1]"), is_test("tests/test_x.py"), is_test("gemma4_lora_inner_linear")
    (True, True, False)
    """
    return "::" in scenario or scenario.endswith(".py") or "/" in scenario


def suite_of_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """The suite a run swept (root, paths, k, m, requirements; `of`/`git` for a package's own
    tests): as its settings recorded it, else its matrix's [tests] table (files written before
    runs recorded their suite); {} when neither says."""
    recorded = (run.get("settings") or {}).get("tests")
    if isinstance(recorded, dict):
        return recorded
    try:
        table = tomllib.loads(str(run.get("matrix_text") or "")).get("tests")
    except tomllib.TOMLDecodeError:
        return {}
    return table if isinstance(table, dict) else {}


def is_suite(rows: Iterable[Mapping[str, Any]]) -> bool:
    """More tests than a grid lists one by one: rows are then test files (heatmap) and groups (tables)."""
    return names_are_suite({str(r["scenario"]) for r in rows})


def names_are_suite(names: set[str] | frozenset[str]) -> bool:
    """`is_suite`, of the tests' names (`Answer.scenarios`: the quiet ones among them)."""
    return len(names) > GRID_ROWS and any("::" in n for n in names)
