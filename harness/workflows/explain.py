"""`harness explain`: every regression and fix since the last run narrowed to its cause, by running it.

For each change `harness changes` finds (`workflows.changes`), in the cell where it changed:
what moved between its two runs (`analysis.explain.moves`, from what the results file recorded);
where exactly one thing moved, that is the cause and nothing runs. Otherwise the search of
`analysis.explain` drives probes built here, each running only the changed tests (or scenarios),
`repeats` times, in the night before's environment with some moves brought to the change's night:

- packages: the night before's freeze with the chosen packages at their new versions, installed
  from those exact pins (a set that does not resolve is no answer: `Look.UNBUILT`);
- a git axis: its commit set to one of the range's, the repository cloned once (a local path or
  file URL is read in place);
- the team's code: a clean checkout of one of its commits (`git archive`: tests included), the
  suite run from it; a path candidate inside the repository is installed from the checkout.

The probes' outcomes go to a JSON-lines file of their own (never the results file: a probe is
no cell of the matrix); what was found goes to the results file's `causes` (`storage.causes`),
where every reader shows it beside the change. A budget of probes or minutes bounds the whole
run; what it left unexplained says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from io import BytesIO
from pathlib import Path
from typing import Any

from harness.analysis.changes import Change
from harness.analysis.explain import (
    Config,
    Explanation,
    Facts,
    Look,
    Move,
    Sides,
    Step,
    commit_link,
    explain,
    parse_budget,
    state_of,
    with_commits,
)
from harness.analysis.rows import json_map
from harness.analysis.versions import git_url_without_ref
from harness.errors import BadInput
from harness.inputs.candidates import ResolvedMatrix, index_for
from harness.inputs.matrix import Candidate, Cell, MatrixSpec, Settings
from harness.inputs.scenarios import Scenario, select
from harness.running.plan import SweepOptions, SweepPlan
from harness.running.sweep import Sweep
from harness.running.testsuite import Suite
from harness.storage import causes
from harness.storage.shardfile import ShardStore
from harness.storage.store import Store
from harness.workflows.changes import EXPLAINED, Report, changes_of


@dataclass
class ExplainOptions:
    db: Path
    since: str = ""  # compare with this run or date (default: the run before the newest sweep)
    budget: str = "30"  # the most probes in all (`20`), or minutes (`30m`)
    repeats: int = 3  # each probe runs the changed tests this many times; repeats that disagree: flaky
    env_root: Path | None = None  # where the probes' environments live (default: the runs' own env folder)
    only: list[str] = field(default_factory=list)  # node ids, files or scenarios: explain only their changes


@dataclass(frozen=True)
class Target:
    """One change to explain: a kind and signature first shown by `after_run` in `cells` (which
    saw the same moves), probed in the first of them with its `tests`."""

    kind: str
    signature: str
    before_run: str
    after_run: str
    cells: tuple[str, ...]
    changes: tuple[Change, ...]  # of the first cell
    moves: tuple[Move, ...]

    @property
    def cell(self) -> str:
        return self.cells[0]

    @property
    def tests(self) -> list[str]:
        return sorted({c.node for c in self.changes})

    def describe(self) -> str:
        what = self.tests[0] if len(self.tests) == 1 else f"{len(self.tests)} tests"
        where = self.cell if len(self.cells) == 1 else f"{self.cell} (and {len(self.cells) - 1} more cell(s) with the same moves)"
        return f"{'regressed' if self.kind == 'regressed' else 'fixed'}: {what}: {self.signature or 'pass'} in {where}"


@dataclass
class Explained:
    target: Target
    found: Explanation
    seconds: float


def explain_file(options: ExplainOptions, on_line: Callable[[str], None] = print) -> list[Explained]:
    """Explain the changes of `options.db` since `options.since` and store what was found."""
    if options.repeats < 1:
        raise BadInput(f"--repeats {options.repeats}: each probe runs the changed tests at least once; give 2 or more to see flaky ones")
    try:
        probes, seconds = parse_budget(options.budget)
    except ValueError as err:
        raise BadInput(str(err)) from None
    if not options.db.is_file():
        raise BadInput(f"no results file at {str(options.db)!r}; pass --db with the file a sweep wrote")
    with Store(options.db, read_only=True) as store:
        report = changes_of(store, options.since)
        if report is None:
            on_line(f"{options.db}: nothing to explain (one run, or a file before the history split)")
            return []
        targets = targets_of(report, options.only)
        runs = {r["run_id"]: r for r in store.fetch("SELECT run_id, matrix_path, matrix_text, settings, host FROM runs")}
        cells = {(r["run_id"], r["cell_id"]): r for r in store.fetch("SELECT run_id, cell_id, python, inherited FROM cells")}
        recorded = causes.facts(store, {(t.before_run, t.cell) for t in targets} | {(t.after_run, t.cell) for t in targets})
    if not targets:
        on_line("nothing to explain: no test started failing or was fixed since " + report.baseline.run.run_id)
        return []
    started = time.monotonic()
    left = probes or 10**9

    def spent() -> bool:
        return seconds > 0 and time.monotonic() - started > seconds

    done: list[Explained] = []
    with _Probes(options, runs, cells) as probing:
        for target in targets:
            began = time.monotonic()
            on_line(f"explaining {target.describe()}")
            facts = (recorded.get((target.before_run, target.cell)), recorded.get((target.after_run, target.cell)))
            found = _explain_one(target, facts, probing, left, spent, on_line)
            left = max(0, left - len(found.probes))
            done.append(Explained(target, found, time.monotonic() - began))
            on_line(f"  cause: {found.describe()}")
    _store(options.db, done)
    return done


def targets_of(report: Report, only: Sequence[str] = ()) -> list[Target]:
    """The regressions and fixes of a report, one per (kind, signature, runs) and set of cells
    that saw the same moves, in report order (regressions first)."""
    buckets: dict[tuple[str, str, str, str, str], dict[str, list[Change]]] = defaultdict(lambda: defaultdict(list))
    for change in report.changes.items:
        if change.kind not in EXPLAINED or (only and not any(_selects(s, change.node) for s in only)):
            continue
        key = (change.kind, change.machine, change.signature, change.before_run, change.after_run)
        buckets[key][change.cell_id].append(change)
    found = []
    for (kind, _, signature, before, after), by_cell in buckets.items():
        by_moves: dict[tuple[Move, ...], list[str]] = defaultdict(list)
        for cell, changes in sorted(by_cell.items()):
            by_moves[report.moves_of(changes[0])].append(cell)
        for moved, cells in by_moves.items():
            found.append(Target(kind, signature, before, after, tuple(cells), tuple(by_cell[cells[0]]), moved))
    return sorted(found, key=lambda t: (t.kind != "regressed", t.signature, t.cell))


def _selects(selector: str, node: str) -> bool:
    from harness.analysis.selection import selects

    return selects(selector, node)


def _explain_one(
    target: Target,
    facts: tuple[Facts | None, Facts | None],
    probing: _Probes,
    budget: int,
    spent: Callable[[], bool],
    on_line: Callable[[str], None],
) -> Explanation:
    before, after = facts
    moved = list(target.moves)
    if before is None or after is None:
        return Explanation("static" if moved else "nothing", tuple(moved))  # the file holds no record of one of the runs
    if not budget:
        return Explanation("budget", tuple(moved), left="; ".join(m.describe() for m in moved) + " (the budget was spent before it)")
    moved = [with_commits(m, len(probing.steps(m, before, after)) - 1) if m.ranged else m for m in moved]
    sides = _sides(target)

    def probe(config: Config) -> tuple[Look, str]:
        look, detail = probing.probe(target, config, before, after, sides)
        on_line(f"  probe {config.describe()}: {look.value}" + (f" ({detail})" if detail else ""))
        return look, detail

    found = explain(moved, probe, lambda m: probing.steps(m, before, after), budget=budget, spent=spent)
    if found.commit is not None and found.culprits:
        (move,) = found.culprits
        url = _origin(after.commit.get("repo", "")) if move.kind == "code" else after.freeze.get(move.name, "")
        found.link = commit_link(url, found.commit.sha)
    return found


def _origin(repo: str) -> str:
    """The URL of a repository's `origin` remote ("" where it has none)."""
    done = subprocess.run(["git", "-C", repo, "remote", "get-url", "origin"], capture_output=True, text=True) if repo else None
    return done.stdout.strip() if done is not None and done.returncode == 0 else ""


def _sides(target: Target) -> Sides:
    """Each changed test's state on both sides, as the two runs showed it."""
    before: dict[str, str] = {}
    after: dict[str, str] = {}
    for change in target.changes:
        # a file's collection error that is new (its tests ran before): the file collected then
        old = "pass" if change.before in ("pass", "") else (change.before_signature or change.signature or change.before)
        new = "pass" if change.after == "pass" else (change.signature or change.after)
        before[change.node], after[change.node] = (old or "pass"), new
    return Sides(before, after, regression=target.kind == "regressed")


def _store(db: Path, done: Sequence[Explained]) -> None:
    rows = []
    for item in done:
        t = item.target
        for cell in t.cells:
            rows.append(causes.row((t.after_run, cell, t.kind, t.signature), t.before_run, t.tests, item.found, item.seconds))
    if not rows:
        return
    with Store(db) as store, store.writing() as con:
        causes.write(con, rows)


# -- probes ------------------------------------------------------------------------------------------
class _Probes:
    """The probes of one `harness explain`: their environments, checkouts and the sweep that runs them."""

    def __init__(self, options: ExplainOptions, runs: Mapping[str, Mapping[str, Any]], cells: Mapping[tuple[str, str], Mapping[str, Any]]):
        self.options, self.runs, self.cells = options, runs, cells
        self.scratch = Path(tempfile.mkdtemp(prefix="harness-explain-"))
        self.shard_path = self.scratch / "probes.jsonl"
        self.shard: ShardStore | None = None
        self.sweep: Sweep | None = None
        self.count = 0
        self._steps: dict[Move, list[Step]] = {}

    def __enter__(self) -> _Probes:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sweep is not None:
            self.sweep.close()
        if self.shard is not None:
            self.shard.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- what a probe runs
    def probe(self, target: Target, config: Config, before: Facts, after: Facts, sides: Sides) -> tuple[Look, str]:
        run = self.runs.get(target.after_run) or {}
        settings = json_map(run.get("settings"))
        freeze, commit = self._state(config, before, after)
        try:
            root = self._code_at(after, commit)
            checks = self._checks(target, settings, root)
            cell = self._cell(target, freeze, after, root)
        except _CannotProbe as err:
            return Look.UNBUILT, str(err)
        sweep = self._sweep(target, settings, run)
        repeats: list[dict[str, str]] = []
        statuses: list[str] = []
        for r in range(self.options.repeats):
            self.count += 1
            run_id = f"explain-p{self.count}"
            sweep.as_run(run_id)
            ran = sweep.run_cell(cell, [(check, r if not isinstance(check, Suite) else 0) for check in checks])
            if not ran.env.ready:
                first = (ran.env.message or ran.env.status).strip().splitlines()
                return Look.UNBUILT, f"{ran.env.status}: {first[-1][:200] if first else ''}"
            states = _states(target.tests, [asdict(o) | {"status": o.status.value} for o in ran.outcomes])
            repeats.append(states)
            statuses.append(",".join(sorted({s or "not collected" for s in states.values()})))
        return sides.look(repeats), f"{len(repeats)} run(s): " + " | ".join(statuses)

    def _state(self, config: Config, before: Facts, after: Facts) -> tuple[dict[str, str], str]:
        """The probe's freeze and the team's commit: the night before's, with the config's moves brought forward."""
        freeze = dict(before.freeze)
        commit = before.commit.get("commit", "")
        for move in config.applied:
            if move.kind == "package":
                if move.after:
                    freeze[move.name] = move.after
                else:
                    freeze.pop(move.name, None)
            elif move.kind == "git":
                freeze[move.name] = after.freeze.get(move.name, "")
            elif move.kind == "code":
                commit = after.commit.get("commit", "")
        for move, step in config.at:
            if move.kind == "git":
                url = after.freeze.get(move.name) or before.freeze.get(move.name, "")
                freeze[move.name] = f"{git_url_without_ref(url)}@{step.sha}"
            elif move.kind == "code":
                commit = step.sha
        return freeze, commit

    def _code_at(self, after: Facts, commit: str) -> Path | None:
        """The team's repository at `commit` (a clean checkout, kept for the run), or None where it recorded none."""
        repo = after.commit.get("repo", "")
        if not repo or not commit:
            return None
        target = self.scratch / "code" / commit
        if not target.exists():
            try:
                archive = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit], capture_output=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError) as err:
                said = err.stderr.decode(errors="replace").strip() if isinstance(err, subprocess.CalledProcessError) else str(err)
                raise _CannotProbe(f"cannot check out {commit[:12]} of {repo}: {said[-200:]}") from None
            target.mkdir(parents=True)
            with tarfile.open(fileobj=BytesIO(archive)) as tar:
                tar.extractall(target, filter="data")
        return target

    def _checks(self, target: Target, settings: Mapping[str, Any], checkout: Path | None) -> list[Scenario]:
        """The changed tests as a suite narrowed to their node ids (rooted in the checkout), or the changed scenarios."""
        suite = json_map(settings.get("tests"))
        if suite:
            if suite.get("of") or suite.get("git"):
                raise _CannotProbe("a package's own tests are checked out per cell: not probed")
            root = Path(str(suite.get("root") or "."))
            repo = _repo_of(root)
            if checkout is not None and repo is not None:
                root = checkout / root.resolve().relative_to(repo)
            if not root.is_dir():
                raise _CannotProbe(f"the tests' root {str(root)!r} is not here; run explain where the sweep ran")
            return [Suite(name="pytest", path=root / "conftest.py", root=root.resolve(), paths=tuple(target.tests))]
        try:
            return select(target.tests)
        except BadInput as err:
            raise _CannotProbe(f"the scenarios are not here: {err}") from None

    def _cell(self, target: Target, freeze: Mapping[str, str], after: Facts, checkout: Path | None) -> Cell:
        record = self.cells.get((target.after_run, target.cell)) or {}
        inherited = json_map(record.get("inherited"))
        repo = after.commit.get("repo", "")
        candidates = []
        for name, value in sorted(freeze.items()):
            if name in inherited:
                candidates.append(Candidate(name, "inherit"))
            elif value.startswith("git+"):
                candidates.append(Candidate(name, "git", value, value.rsplit("@", 1)[-1]))
            elif value.startswith("file://"):
                path = Path(value.removeprefix("file://"))
                if checkout is not None and repo and path.is_relative_to(repo):
                    path = checkout / path.relative_to(repo)  # the team's package, from the commit probed
                candidates.append(Candidate(name, "path", str(path)))
            elif value:
                candidates.append(Candidate(name, "version", value))
        return Cell(tuple(candidates), str(record.get("python") or "3.11"))

    def _sweep(self, target: Target, settings: Mapping[str, Any], run: Mapping[str, Any]) -> Sweep:
        if self.sweep is None:
            known = {f.name for f in fields(Settings)}
            chosen = Settings(**{k: v for k, v in settings.items() if k in known})
            chosen.extra_requirements, chosen.exclude_newer, chosen.refine = [], "", False  # exact pins, no refinement
            spec = MatrixSpec(chosen, {})
            text = str(run.get("matrix_text") or "")
            resolved = ResolvedMatrix(spec, {axis: [] for axis in _axes(text)}, [])
            env_root = self.options.env_root or Path(chosen.env_dir)
            options = SweepOptions(Path(str(run.get("matrix_path") or "matrix.toml")), self.shard_path, env_root=env_root)
            self.shard = ShardStore(self.shard_path)
            plan = SweepPlan(options, spec, resolved, index_for(chosen), [], [], "explain-p0", text)
            self.sweep = Sweep(plan, self.shard)
        return self.sweep

    # -- a ranged move's commits
    def steps(self, move: Move, before: Facts, after: Facts) -> list[Step]:
        """The commits of a git axis's or the team's range, the night before's end first; [] where
        the repository cannot be read here."""
        if not move.ranged:
            return []
        if move in self._steps:
            return self._steps[move]
        repo = after.commit.get("repo", "") if move.kind == "code" else self._clone(after.freeze.get(move.name, ""))
        found = commit_steps(repo, move.before, move.after) if repo else []
        self._steps[move] = found
        return found

    def _clone(self, url: str) -> str:
        """A local repository of a git axis's URL: the path itself for a local one, else a clone kept beside the envs."""
        if "://" not in url:
            return ""  # not a git source: nothing to walk
        bare = git_url_without_ref(url).removeprefix("git+")
        if bare.startswith("file://"):
            return bare.removeprefix("file://")
        if Path(bare).is_dir():
            return bare
        root = (self.options.env_root or Path(".nox")).resolve() / "git-mirrors" / re.sub(r"[^\w.-]+", "-", bare)[-80:]
        try:
            if root.is_dir():
                subprocess.run(["git", "-C", str(root), "fetch", "--quiet", "origin"], capture_output=True, check=True, timeout=600)
            else:
                root.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(
                    ["git", "clone", "--quiet", "--bare", "--filter=blob:none", bare, str(root)],
                    capture_output=True,
                    check=True,
                    timeout=600,
                )
        except (OSError, subprocess.SubprocessError):
            return ""
        return str(root)


class _CannotProbe(Exception):
    """What a probe needs is not here: no answer (`Look.UNBUILT`), with why."""


def commit_steps(repo: str, old: str, new: str) -> list[Step]:
    """First-parent commits from `old` to `new`, `old` first; where `old` is not an ancestor of `new`
    (a ref moved from a release branch to main), from their merge base. [] where git cannot say."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else ""

    base = old if subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", old, new], capture_output=True).returncode == 0 else ""
    base = base or git("merge-base", old, new).strip()
    if not base:
        return []
    log = git("log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{base}..{new}")
    subject = git("log", "-1", "--format=%s", base).strip()
    return [
        Step(git("rev-parse", base).strip() or base, subject),
        *(Step(*line.split("\t", 1)) for line in log.splitlines() if "\t" in line),
    ]


def _repo_of(folder: Path) -> Path | None:
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None


def _axes(matrix_text: str) -> list[str]:
    """The axes a run's matrix named: the libraries under test, which a failure's signature blames."""
    try:
        return list(tomllib.loads(matrix_text).get("axes", {}))
    except tomllib.TOMLDecodeError:
        return []


def _states(tests: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each changed test's state in one run of a probe: its outcome, or for a file's collection
    error "pass" where the file collected (its tests have outcomes), "" where nothing says."""
    by_node = {str(r["scenario"]): state_of(str(r["status"]), str(r.get("signature") or "")) for r in rows}
    found = {}
    for test in tests:
        if test in by_node:
            found[test] = by_node[test]
        elif "::" not in test and any(node.startswith(f"{test}::") for node in by_node):
            found[test] = "pass"  # the file collected: its error is gone
        else:
            found[test] = ""
    return found
