"""A sweep's plan: what it is asked (`SweepOptions`), and what it will do, validated before anything is written.

`plan` reads the matrix, resolves its cells against the index, finds the scenarios or the
team's suite (`suite_for`) and names the run (`default_run_id`: the same matrix, scenario and
test files and code under test resume the same run; `run_inputs` is what it depends on besides
the cells). With a shard, the plan holds only this shard's cells, or with a suite its pieces of
them (`shard_layout`, balanced by the stored seconds). What the run records besides its
outcomes is here too: its suite (`suite_record`) and the releases of its axes (`run_releases`).
`running/sweep.py` runs the plan.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from harness import __version__
from harness.analysis import versions
from harness.errors import BadInput
from harness.inputs.candidates import (
    RELEASES_FILE,
    IndexUnreachable,
    PackageIndex,
    ResolvedMatrix,
    index_for,
    install_tags,
    listed_releases,
    python_version_of,
    resolve_matrix,
)
from harness.inputs.fingerprint import code_digest
from harness.inputs.matrix import Cell, MatrixSpec, load_matrix, shard_cells
from harness.inputs.scenarios import Scenario, select
from harness.inputs.testsource import check_source
from harness.running.shards import SETUP_SECONDS, Durations, Layout, Piece, cell_weights, lay_out
from harness.running.testsuite import Suite, make_suite, needed_packages
from harness.storage import queries
from harness.storage.opening import open_results
from harness.storage.resultsfile import SqlResultsFile
from harness.storage.shardfile import ShardStore


@dataclass
class SweepOptions:
    matrix: Path
    db: Path
    cells: list[str] = field(default_factory=list)  # only these cell ids
    scenarios: list[str] = field(default_factory=list)  # names or paths; overrides the matrix
    run_id: str = ""
    fresh: bool = False  # a new run (new id), so every outcome is computed again
    model: str = ""
    adapter: str = ""
    device: str = ""
    env_root: Path | None = None
    jobs: int = 1  # cells built and run at once; with GPUs, each job gets one GPU
    gpus: list[str] | None = None  # GPU ids to use (default: every GPU nvidia-smi sees)
    shard: tuple[int, int] | None = None  # (i, n): run only the i-th of n deterministic slices
    durations: Path | None = None  # with a suite and a shard: the results file whose stored seconds balance the shards (else `db`)
    lookahead: bool = True  # a job prepares its next cell while it runs one
    zygote: bool = True  # fork servers from one torch zygote per torch build (and learned preloads)
    help_tail: bool = True  # with several jobs: once no cell is left, idle jobs share the running ones
    keep_servers: float = 0.0  # seconds each cell's fork server stays parked for the next sweep (running/kept.py)
    # A team's pytest suite as the checks (`harness/running/testsuite.py`): test paths under `tests_root`
    # (the folder where the team types `pytest`), pytest's -k and -m, and the suite's own test
    # dependencies, installed in every cell beside pytest and the plugins its configuration names.
    tests: list[str] = field(default_factory=list)
    tests_root: str = ""
    keyword: str = ""
    marker: str = ""
    test_requirements: list[str] = field(default_factory=list)
    # A package's own tests (`harness/inputs/testsource.py`): `tests_git` holds them, and each cell
    # runs those of the tag of the `tests_of` version installed there.
    tests_of: str = ""
    tests_git: str = ""
    allow_empty: bool = False  # a cell whose -k/-m selects no test does not fail the sweep (else [tests] allow_empty)
    #: Appended to the default run id: a scheduled run's own id (the CI run's), which its shards
    #: and its reruns share, so that each night truly runs (`default_run_id`).
    run_tag: str = ""
    #: Resolve every cell as of this moment (the matrix's `exclude_newer`, given on the command line):
    #: a night replayed, the packages under the pins as the index had them then.
    exclude_newer: str = ""


@dataclass
class SweepPlan:
    options: SweepOptions
    spec: MatrixSpec
    resolved: ResolvedMatrix
    index: PackageIndex
    scenarios: list[Scenario]
    cells: list[Cell]
    run_id: str
    matrix_text: str
    #: With a suite and --shard: this shard's piece of each of its cells (`shards.Piece`), and the
    #: stored seconds its cut cells' tests are dealt by. Empty: whole cells (or no shard).
    pieces: dict[str, Piece] = field(default_factory=dict)
    durations: Durations = field(default_factory=dict)
    #: What the outcomes depend on besides the cells (`run_inputs`): recorded with the run.
    inputs: dict[str, Any] = field(default_factory=dict)


def default_run_id(matrix_text: str, scenarios: list[Scenario], inputs: dict[str, Any] | None = None) -> str:
    """Same matrix, same scenario and test files, same code under test -> same run, so a rerun
    resumes it; a change to any of them starts a new one (docs/matrix.md, "Runs and resume").
    `inputs`: `run_inputs`, whose code under test counts (a suite's is in its digest already)."""
    h = hashlib.sha256(matrix_text.encode())
    for scenario in sorted(scenarios, key=lambda s: s.name):
        h.update(f"{scenario.name}:{scenario.digest()}".encode())
    if inputs and inputs.get("paths"):
        h.update(json.dumps(inputs["paths"], sort_keys=True).encode())
    h.update(__version__.encode())
    return "r-" + h.hexdigest()[:10]


def run_inputs(scenarios: Sequence[Scenario], cells: Sequence[Cell]) -> dict[str, Any]:
    """What a run's outcomes depend on besides each cell's environment, as its settings record
    it (`inputs`): each scenario file's content, a suite's test files, configuration and code
    under test (`Suite.inputs`), and each local path candidate's code (`fingerprint.code_digest`).
    `harness changes` calls a flip flaky only where all of it stayed the same."""
    found: dict[str, Any] = {"scenarios": {s.name: s.digest() for s in scenarios if not isinstance(s, Suite)}}
    suite = next((s for s in scenarios if isinstance(s, Suite)), None)
    if suite is not None:
        found["tests"] = suite.inputs()
    paths = {f"{c.package}={c.value}": code_digest(Path(c.value)) for cell in cells for c in cell.candidates if c.kind == "path"}
    found["paths"] = dict(sorted(paths.items()))
    return found


def run_tag(text: str) -> str:
    """A run tag as it goes into the run id: letters, digits, dots and dashes (BadInput otherwise).

    >>> run_tag("12345678-2")
    '12345678-2'
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,63}", text):
        raise BadInput(f"--run-tag {text!r} is not a tag; give letters, digits, dots and dashes (e.g. the CI run's number)")
    return text


def plan(options: SweepOptions) -> SweepPlan:
    """Validate everything a sweep needs before anything is written."""
    spec = load_matrix(options.matrix, lenient=True)
    if options.exclude_newer:
        try:
            versions.moment(options.exclude_newer)
        except ValueError:
            raise BadInput(
                f"--exclude-newer {options.exclude_newer!r} is not a date; write e.g. 2026-11-20 or 2026-11-20T12:00:00Z"
            ) from None
        spec.settings.exclude_newer = options.exclude_newer
    index = index_for(spec.settings)
    resolved = resolve_matrix(spec, index)
    suite = suite_for(options, spec)
    named = options.scenarios or spec.settings.scenarios  # the command line's, else the matrix's `scenarios`
    scenarios: list[Scenario] = select(named) if named or not suite else []
    if suite is not None:
        scenarios.append(suite)
    cells = resolved.cells
    if options.cells:
        known = {c.id: c for c in cells}
        unknown = [c for c in options.cells if c not in known]
        if unknown:
            raise BadInput(f"unknown cell id(s) {', '.join(map(repr, unknown))}; list them with `harness list --matrix {options.matrix}`")
        cells = [known[c] for c in options.cells]
    text = options.matrix.read_text()
    inputs = run_inputs(scenarios, resolved.cells)
    # a night replayed as of another date is another run: its cells resolve otherwise
    replayed = f"{text}\n# --exclude-newer {options.exclude_newer}" if options.exclude_newer else text
    run_id = options.run_id or default_run_id(replayed, scenarios, inputs)
    if options.run_tag and not options.run_id:
        run_id += "-" + run_tag(options.run_tag)
    if options.fresh and not options.run_id:
        run_id += datetime.now(UTC).strftime("-%Y%m%dT%H%M%S")
    done = SweepPlan(options, spec, resolved, index, scenarios, cells, run_id, text, inputs=inputs)
    if options.shard:
        index_of, count = options.shard
        layout, done.durations = shard_layout(done, count)
        done.pieces = layout.pieces(index_of) if layout is not None else {}
        done.cells = [c for c in cells if c.id in done.pieces] if layout is not None else shard_cells(cells, index_of, count)
    return done


def shard_layout(plan: SweepPlan, count: int) -> tuple[Layout | None, Durations]:
    """With a suite, the layout of `count` shards of the plan's cells (`shards.lay_out`), balanced
    by the seconds the durations file stores for the suite's tests (`--durations`, else `--db`),
    and those seconds; (None, seconds) for scenarios alone, whose cells are dealt round robin.

    The run being swept is left out of the stored seconds: a shard writes its own outcomes
    into its file, and a rerun that read them would cut its cells elsewhere than the first
    start did (and than the other shards do)."""
    suite = any(isinstance(s, Suite) for s in plan.scenarios)
    path = plan.options.durations or plan.options.db
    stored = stored_durations(path, plan.run_id, suites=suite)
    if not suite:
        names = {s.name for s in plan.scenarios}
        return None, {c: {n: v for n, v in tests.items() if n in names} for c, tests in stored.items()}
    ids = [c.id for c in plan.cells]
    weights, timed = cell_weights(ids, stored)
    return lay_out(ids, weights, count, SETUP_SECONDS if timed else 0.0, timed=timed), stored


def stored_durations(path: Path, exclude_run: str, *, suites: bool) -> dict[str, dict[str, float]]:
    """`queries.durations` of a results file of either kind; {} where there is none."""
    if not path.is_file():
        return {}
    with open_results(path, read_only=True) as found:
        if isinstance(found, ShardStore):
            return found.durations(exclude_run, suites=suites)
        return queries.durations(cast(SqlResultsFile, found), exclude_run, suites=suites)


def _suite(options: SweepOptions, spec: MatrixSpec) -> Suite | None:
    """The pytest suite to run, from the command line or the matrix's [tests] table; None if neither names one."""
    table = spec.tests
    paths = options.tests or list(table.get("paths", []))
    root = options.tests_root or str(table.get("root", "")) or ("." if paths else "")
    package, repo = options.tests_of or str(table.get("of", "")), options.tests_git or str(table.get("git", ""))
    if not paths and not root and not package and not repo:
        return None
    keyword = options.keyword or str(table.get("k", ""))
    marker = options.marker or str(table.get("m", ""))
    timeout = float(table["timeout"]) if table.get("timeout") else None
    if package or repo:
        cache = (options.env_root or Path(spec.settings.env_dir)).resolve() / "suites"
        return make_suite(cache, paths, keyword, marker, timeout, check_source(package, repo, cache))
    return make_suite(root, paths, keyword, marker, timeout)


def _test_requirements(options: SweepOptions, spec: MatrixSpec) -> list[str]:
    return [*map(str, spec.tests.get("requirements", [])), *options.test_requirements]


def suite_for(options: SweepOptions, spec: MatrixSpec) -> Suite | None:
    """The suite of the command line or the matrix's [tests] table, with what every cell needs to
    run it (pytest, its plugins, the suite's requirements) added to `spec`'s extra requirements:
    a sweep, a bisection and a watch build their cells alike. None if neither names a suite."""
    suite = _suite(options, spec)
    if suite is not None:
        source, cache = suite.source, suite.root
        config = (lambda name: source.read_config(name, cache)) if source is not None else suite.root
        spec.settings.extra_requirements = [*spec.settings.extra_requirements, *needed_packages(config, _test_requirements(options, spec))]
    return suite


def suite_record(scenarios: list[Scenario], spec: MatrixSpec, options: SweepOptions) -> dict[str, Any]:
    """The run's suite as its settings record it (`tests`), so that `harness report`, `bisect` and
    `watch` know it from the results file alone; {} for a run of scenarios only."""
    suite = next((s for s in scenarios if isinstance(s, Suite)), None)
    if suite is None:
        return {}
    source = suite.source
    where = {"of": source.package, "git": source.repo} if source is not None else {}
    selection = {"root": str(suite.root), "paths": list(suite.paths), "k": suite.keyword, "m": suite.marker}
    return {"tests": {**selection, "requirements": _test_requirements(options, spec), **where}}


def scenario_env(options: SweepOptions) -> dict[str, str]:
    env = {}
    if options.model:
        env["HARNESS_MODEL"] = options.model
    if options.adapter:
        env["HARNESS_ADAPTER"] = options.adapter
    if options.device:
        env["HARNESS_DEVICE"] = options.device
    return env


def run_releases(plan: SweepPlan, find_links: list[str]) -> dict[str, list[tuple[str, datetime | None]]]:
    """Per axis with releases: every release the index offers the run's Python on this platform
    (what a range between tested versions is made of).

    With `no_index` (an offline runner's wheelhouse) the index is never asked: the lists
    come from the wheelhouse's RELEASES_FILE, written where the index was reachable
    (`harness wheelhouse --refine-budget`). Without one, a folder of the wheels this matrix
    needed says nothing of what lies between them, so nothing is listed and the run's
    answers stay ranges until `harness attribute` asks the index.
    """
    settings = plan.spec.settings
    axes = [axis for axis, cands in plan.resolved.axes.items() if any(c.kind == "version" for c in cands)]
    exclude = settings.exclude_newer
    moment = versions.moment(exclude) if exclude != "period" else None  # "period": each cell's own moment
    if settings.no_index:
        return shipped_releases(find_links, axes, moment)
    tags = install_tags(python_version_of(settings.python))
    listed: dict[str, list[tuple[str, datetime | None]]] = {}
    for axis in axes:
        try:
            listed[axis] = [(str(r.version), r.upload_time) for r in listed_releases(plan.index, axis, tags, moment)]
        except IndexUnreachable:
            continue  # attribution then treats the axis as unlisted: its answers stay ranges
    return listed


def shipped_releases(folders: list[str], axes: list[str], moment: datetime | None) -> dict[str, list[tuple[str, datetime | None]]]:
    """The release lists a wheelhouse carries (candidates.RELEASES_FILE) for `axes`, uploaded by `moment`."""
    for folder in folders:
        path = Path(folder) / RELEASES_FILE
        if path.is_file():
            data = json.loads(path.read_text())
            listed: dict[str, list[tuple[str, datetime | None]]] = {}
            for axis in axes:
                if axis in data:
                    pairs = [(str(v), datetime.fromisoformat(t) if t else None) for v, t in data[axis]]
                    listed[axis] = [(v, t) for v, t in pairs if moment is None or t is None or t <= moment]
            return listed
    return {}
