"""`harness report`: find the failure or cell the user named, gather its evidence, render the issue body.

The markdown is `analysis.report` (pure); this module matches the user's words to one stored
signature or cell (bad input names the fix), picks the contrast (passing rows of the same
scenarios; a cell's neighbours one version apart), and answers them through `answering.answer`
(every version the file ran and every release the index listed known), so the report's answers
are the same as `harness attribute`'s.

What leaves the machine names nothing of it: every path is written from its root (the
machine's folders, `machine_roots`, handed to `redact.local_paths`). `--repro FILE` writes the
one-file repro (`analysis.repro`) and its passing twin beside it, from the files this module
gathers: a scenario's code and the helpers it imports, or a test's file, the conftest.py files
above it, the local modules they import and the suite's pytest configuration. `--all` writes
one report per failure family and an index.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.analysis import signature as signature_module
from harness.analysis.answer import Answer
from harness.analysis.filing import file_at, repository
from harness.analysis.markdown import table_cell
from harness.analysis.redact import local_paths
from harness.analysis.report import example_of, passing_of, render_cell_report, render_signature_report
from harness.analysis.repro import Repro, ReproSpec, pep723_script, repro_pins
from harness.analysis.requirement import StatedRequirement, of_signature, requirements
from harness.analysis.rows import distance, installed, is_test, machine_of, minor_version, node_ids, signature_of, suite_of_run
from harness.analysis.status import FAILURES
from harness.errors import BadInput
from harness.inputs import bundled
from harness.inputs.imports import imported, scenario_imports
from harness.inputs.scenarios import available, load_scenario, lookup_names
from harness.storage import queries, recorded
from harness.storage.store import Store
from harness.workflows.answering import answer
from harness.workflows.changes import cause_markdown

#: A test's suite carried into a repro: at most this many files (a conftest that imports half the repository is no repro).
_MOST_FILES = 60
_CONFIGS = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def find_signature(failing: Sequence[Mapping[str, Any]], wanted: str, db: str) -> str:
    """The one stored signature the user means: its text, its family hash, or a part of it."""
    wanted = wanted.strip()
    found = {signature_of(r) for r in failing if wanted in (r["signature"], r["signature_family"])}
    if not found:
        found = {signature_of(r) for r in failing if wanted.casefold() in signature_of(r).casefold()}
    if not found:
        raise BadInput(f"no failing outcome in {db!r} has a signature matching {wanted!r}; `harness summary --db {db}` lists them")
    if len(found) > 1:
        families = sorted({f"{r['signature_family']} ({(r['signature'] or '')[:60]})" for r in failing if r["signature"] in found})
        raise BadInput(f"{wanted!r} matches {len(found)} signatures; pass one family hash: {'; '.join(families)}")
    return found.pop()


def _test_signature(failing: Sequence[Mapping[str, Any]], test: str, wanted: str, db: str) -> tuple[str, str]:
    """(the test's identity, its failure's signature) for `--test NODEID` (with `--signature`, the one both name)."""
    mine = [r for r in failing if test in (r["scenario"], r.get("node_id"))]
    if not mine:
        tests = sorted({str(r["scenario"]) for r in failing if is_test(str(r["scenario"]))})
        near = difflib.get_close_matches(test, tests, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else f"; {len(tests)} failing test(s) stored: `harness report --all` lists them"
        raise BadInput(f"--test {test!r} never failed in {db!r}{hint}")
    chosen = find_signature(mine, wanted, db) if wanted else ""
    if not chosen:
        found = sorted({signature_of(r) for r in mine})
        if len(found) > 1:
            families = sorted({f"{r['signature_family']} ({(r['signature'] or '')[:60]})" for r in mine})
            raise BadInput(f"--test {test!r} fails with {len(found)} signatures; add --signature, one family hash: {'; '.join(families)}")
        chosen = found[0]
    return str(mine[0]["scenario"]), chosen


def _scenario_texts(scenarios: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    known = available()
    files = {s: f"scenarios/{known[s].name}" for s in scenarios if s in known}
    docs = {}
    for s in scenarios:
        if s in known:
            try:
                docs[s] = load_scenario(known[s]).doc
            except BadInput:
                docs[s] = ""
    return files, docs


def machine_roots(runs: Mapping[str, Mapping[str, Any]], db: Path) -> list[tuple[str, str]]:
    """The folders of this machine a report may meet, and how to write the paths under them:
    a suite's root and the current folder (the sweep's, usually) relative, the rest by a label."""
    roots: list[tuple[str, str]] = []
    for run in runs.values():
        settings = run.get("settings") or {}
        root = str(suite_of_run(run).get("root") or "")
        if root.startswith("/"):
            roots.append((root, ""))
        roots += [(str(f), "<find-links>") for f in settings.get("find_links_expanded") or [] if str(f).startswith("/")]
        envs = str(settings.get("env_dir") or "")
        roots += [(envs, "<envs>")] if envs.startswith("/") else []
        roots += interpreter_roots(str(settings.get("python") or ""))
    checkout = bundled.checkout()
    roots += [(str(checkout), "")] if checkout else []
    roots += [(str(Path.cwd()), ""), (str(db.resolve().parent), ""), (tempfile.gettempdir(), "<tmp>"), (str(Path.home()), "~")]
    return roots


def interpreter_roots(python: str) -> list[tuple[str, str]]:
    """A matrix's `python` that is an interpreter's path (a GPU runner's `/opt/torch/.venv/bin/python3`):
    the interpreter as `<python>` and the environment it lies in as `<base-env>`; [] for a version.

    >>> interpreter_roots("/opt/torch/.venv/bin/python3")
    [('/opt/torch/.venv/bin/python3', '<python>'), ('/opt/torch/.venv', '<base-env>')]
    >>> interpreter_roots("/usr/bin/python3.12"), interpreter_roots("3.12")
    ([('/usr/bin/python3.12', '<python>')], [])
    """
    if not python.startswith("/"):
        return []
    path = PurePosixPath(python)
    roots = [(python, "<python>")]
    env = path.parent.parent if path.parent.name == "bin" else None
    if env is not None and str(env) not in ("/", "/usr", "/usr/local"):  # a system prefix holds more than this interpreter
        roots.append((str(env), "<base-env>"))
    return roots


def _shown_db(db: Path) -> str:
    """The results file as the report's footer names it: as given, or by its name where that is a path of this machine."""
    return db.name if db.is_absolute() else str(db)


# -- gathering the evidence ------------------------------------------------------------------
@dataclass
class _Read:
    """One read of a results file, for one report or many."""

    db: Path
    found: Answer
    runs: dict[str, dict[str, Any]]
    store: Store
    roots: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.db)


def _signature_rows(read: _Read, chosen: str) -> tuple[list[Mapping[str, Any]], list[str]]:
    """(this failure's outcomes with their tracebacks, plus the other outcomes of its scenarios: the contrast), its scenarios."""
    failing = [r for r in read.found.rows if r["status"] in FAILURES]
    scenarios = sorted({r["scenario"] for r in failing if signature_of(r) == chosen})
    traced = queries.outcome_rows_with_traces(read.store, scenarios, signature=chosen)
    keys = {(r["run_id"], r["cell_id"], r["scenario"], r["repeat"]) for r in traced}
    named = set(scenarios)  # a set: a signature of a suite names hundreds of tests, read against every outcome
    rows = traced + [
        r for r in read.found.rows if r["scenario"] in named and (r["run_id"], r["cell_id"], r["scenario"], r["repeat"]) not in keys
    ]
    return rows, scenarios


def _signature_report(read: _Read, chosen: str, lead: str = "", repro: Path | None = None) -> tuple[str, list[Path]]:
    """(the markdown of one failure, the scripts written) — the scripts only with `repro`."""
    rows, scenarios = _signature_rows(read, chosen)
    transitions = read.found.narrowed(rows).to_rows()
    files, docs = _scenario_texts(scenarios)
    written: list[Path] = []
    link = None
    if repro is not None:
        link, written = _write_repro(read, chosen, rows, transitions, lead, repro)
    markdown = render_signature_report(
        chosen,
        rows,
        transitions,
        runs=read.runs,
        scenario_files=files,
        scenario_docs=docs,
        db=_shown_db(read.db),
        known_good=read.found.known_good_by_class(),
        lead=lead,
        repro=link,
        roots=read.roots,
    )
    return markdown + cause_markdown(read.store, chosen), written  # the culprit `harness explain` found, where it ran


def report_file(db: Path, signature: str = "", cell: str = "", *, test: str = "", repro: Path | None = None) -> str:
    """The markdown issue body for one failure signature (or the failure of one test), or one cell of a results file."""
    return report(db, signature, cell, test=test, repro=repro)[0]


def report(db: Path, signature: str = "", cell: str = "", *, test: str = "", repro: Path | None = None) -> tuple[str, list[Path]]:
    """(the markdown issue body, the repro scripts written): `report_file`, saying what it wrote."""
    if bool(signature or test) == bool(cell):
        raise BadInput(
            "pass exactly one of --signature (text, family hash or a part of it), --test NODEID and --cell (an id from `harness summary`)"
        )
    if repro is not None and cell:
        raise BadInput("--repro writes the repro of one failure: pass --signature or --test with it, not --cell")
    name = str(db)
    with Store(db, read_only=True) as store:
        runs = recorded.runs(store)
        # a cell's report contrasts every test of the cell with its neighbours': their every row
        read = _Read(db, answer(store, loud=not cell), runs, store, machine_roots(runs, db))
        if signature or test:
            failing = [r for r in read.found.rows if r["status"] in FAILURES]
            lead, chosen = _test_signature(failing, test, signature, name) if test else ("", find_signature(failing, signature, name))
            return _signature_report(read, chosen, lead, repro)
        return _cell_report(read, cell), []


def _cell_report(read: _Read, cell: str) -> str:
    own = queries.outcome_rows_with_traces(read.store, cell_id=cell)
    found = read.found
    if not own:
        ids = sorted({r["cell_id"] for r in found.rows})
        near = difflib.get_close_matches(cell, ids, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else f"; `harness summary --db {read.name}` lists the cells"
        raise BadInput(f"no outcomes for cell {cell!r} in {read.name!r}{hint}")
    scenarios = sorted({r["scenario"] for r in own})
    named = set(scenarios)  # a set: a cell of a suite ran 20,000 tests, read against every outcome
    # The neighbours (one axis different, same machine) are the contrast, and the lines attribution walks through this cell.
    mine, where = installed(own[0]), machine_of(own[0])
    adjacent = {facts for facts in found.cells if facts.machine == where and distance(facts.installed, mine) == 1}  # once per cell
    neighbours = {r["cell_id"] for facts in adjacent for r in found.cells[facts] if r["cell_id"] != cell and r["scenario"] in named}
    rows = own + [r for r in found.rows if r["cell_id"] in neighbours and r["scenario"] in named]
    records = recorded.cell_records(read.store, cell)
    # Every version any cell used is known (a gap on one line may be tested on another), and every release the index listed.
    transitions = found.narrowed(rows).to_rows()
    files, docs = _scenario_texts(scenarios)
    return render_cell_report(
        cell,
        rows,
        records[0] if records else None,
        transitions=transitions,
        runs=read.runs,
        scenario_files=files,
        scenario_docs=docs,
        db=_shown_db(read.db),
        known_good=found.known_good_by_class(),
        roots=read.roots,
    )


# -- the one-file repro ------------------------------------------------------------------------
def _write_repro(
    read: _Read, chosen: str, rows: list[Mapping[str, Any]], transitions: list[dict[str, Any]], lead: str, path: Path
) -> tuple[Repro, list[Path]]:
    """Write `path` (the failing set) and, where a passing set lies one step away, `<stem>-passing.py` beside it."""
    example = example_of(chosen, rows, transitions, lead)
    carried = _carried(read, example)
    passing = passing_of(example, rows, transitions)
    twin = path.with_name(f"{path.stem}-passing{path.suffix or '.py'}")
    failing_about = f"The failing set: {_named(example)}."
    if passing is not None:
        failing_about += f" One step away, {twin.name} ({passing[1]}) passes."
    source = Path(signature_module.__file__).read_text()
    spec = _spec(read, example, chosen, carried, "fails", failing_about)
    script = pep723_script(spec, source, path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    written = [path]
    if passing is None:
        return Repro(path.name, script, gpus=spec.gpus), written
    about = f"The passing set: {_named(passing[0])}; one step from the failing set of {path.name}: {passing[1]}."
    twin.write_text(pep723_script(_spec(read, passing[0], chosen, carried, "passes", about), source, twin.name))
    return Repro(path.name, script, twin.name, passing[1], spec.gpus), [*written, twin]


def _named(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{a} {v}" for a, v in installed(row).items())


#: (kind, what runs, the files it needs, whether it declares SETUP, the GPUs it needs): what `_carried` finds for a repro.
Carried = tuple[str, str, tuple[tuple[str, str], ...], bool, int]


def _spec(read: _Read, row: Mapping[str, Any], signature: str, carried: Carried, expect: str, about: str) -> ReproSpec:
    kind, run, files, setup, gpus = carried
    runinfo = read.runs.get(str(row.get("run_id")), {})
    pins = repro_pins(row, runinfo, kind == "test")
    record = next(iter(recorded.cell_records(read.store, str(row["cell_id"]))), {})
    freeze = record.get("installed") or {}
    named = {p.split("==")[0].split(" @ ")[0].strip().lower() for p in pins}
    # Only releases: a package installed from a folder or a URL of this machine cannot be held elsewhere.
    held = tuple(f"{k}=={v}" for k, v in sorted(freeze.items()) if k.lower() not in named and re.fullmatch(r"[\w.!+-]+", str(v)))
    message = local_paths(str(row.get("message") or signature).strip().splitlines()[0], read.roots)
    machine = machine_of(row)  # the cells' own Python (3.12), never the matrix's `python`, which may be the runner's path
    return ReproSpec(
        title=message[:200],
        signature=signature,
        kind="test" if kind == "test" else "scenario",
        run=run,
        pins=tuple(pins),
        python=machine.python or minor_version(str(record.get("python_version") or "")),
        files=files,
        constraints=held,
        libraries=tuple(installed(row)),
        expect="fails" if expect == "fails" else "passes",
        about=about,
        setup=setup,
        machine=machine.label(),
        cuda=machine.cuda,
        gpus=gpus,
    )


def _carried(read: _Read, example: Mapping[str, Any]) -> Carried:
    """(kind, what runs, the files it needs, declares SETUP) for the example's scenario or test."""
    scenario = str(example["scenario"])
    run = read.runs.get(str(example.get("run_id")), {})
    if is_test(scenario):
        suite = suite_of_run(run)
        if suite.get("of"):
            raise BadInput(
                f"--repro: {scenario!r} is one of {suite['of']}'s own tests, run from its git tag; a one-file repro carries a suite "
                "of your own. Use the report's commands (its checkout at that tag) instead"
            )
        node = node_ids([example], str(example["cell_id"])).get(scenario, scenario)
        return "test", node, suite_files(Path(str(suite.get("root") or ".")), node), False, 0
    path = _scenario_path(scenario, run)
    try:
        loaded = load_scenario(path)
        setup, gpus = bool(loaded.setup), loaded.requires.gpus
    except BadInput:
        setup, gpus = False, 0
    return "scenario", path.name, scenario_files(path, bundled.kit_dir()), setup, gpus


def _scenario_path(name: str, run: Mapping[str, Any]) -> Path:
    chosen = [Path(str(s)) for s in (run.get("settings") or {}).get("scenarios") or [] if str(s).endswith(".py")]
    found = next((p for p in chosen if p.stem == name and p.is_file()), None) or lookup_names().get(name)
    if found is None or not found.is_file():
        raise BadInput(
            f"--repro: the file of scenario {name!r} is neither in ./scenarios/ nor a built-in pack; "
            "run `harness report` from the folder the sweep ran in"
        )
    return found


def scenario_files(path: Path, kit: Path) -> tuple[tuple[str, str], ...]:
    """The scenario's file and every helper it imports from its folder or the kit's (`_kit`, `_gemma4`, …), one folder."""
    found = {path.name: path.read_text()}
    for helper in scenario_imports(path, kit).helpers:
        found.setdefault(helper.name, helper.read_text())
    return tuple(found.items())


def suite_files(root: Path, node: str) -> tuple[tuple[str, str], ...]:
    """What pytest needs to run `node` from `root`: the test's file, the conftest.py files and `__init__.py`
    of its folders, the local modules they import (transitively), and the suite's pytest configuration."""
    if not root.is_dir():
        raise BadInput(f"--repro: the suite's root {str(root)!r} the run recorded is gone; rerun the sweep from where the suite is")
    test = root / node.split("::", 1)[0]
    if not test.is_file():
        raise BadInput(f"--repro: {node!r} names no file under the suite's root {str(root)!r}; has the suite moved since the sweep?")
    found: dict[Path, str] = {}
    todo = [test]
    folder = test.parent
    while True:
        todo += [p for p in (folder / "conftest.py", folder / "__init__.py") if p.is_file()]
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    while todo and len(found) < _MOST_FILES:
        path = todo.pop()
        if path in found:
            continue
        found[path] = path.read_text()
        todo += _local_modules(path, root)
    configs = [(name, text) for name in _CONFIGS if (text := _pytest_config(root / name))]
    files = sorted((str(p.relative_to(root)).replace("\\", "/"), text) for p, text in found.items())
    return tuple(configs[:1] + files)  # pytest reads the first configuration file it finds, in this order


def _local_modules(path: Path, root: Path) -> list[Path]:
    """The files under `root` that `path` imports: from its own folder, the root, or relative to its package."""
    out = []
    for name in imported(path.read_text()):
        dots = len(name) - len(name.lstrip("."))
        parts = [p for p in name.lstrip(".").split(".") if p]
        bases = [path.parents[dots - 1]] if dots else [path.parent, root]
        for base in bases:
            for depth in range(1, len(parts) + 1):
                stem = base.joinpath(*parts[:depth])
                for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                    if candidate.is_file() and root in candidate.parents:
                        out.append(candidate)
    return out


def _pytest_config(path: Path) -> str:
    """The part of a configuration file pytest reads (its whole `pytest.ini`; else its pytest table or section), or ""."""
    if not path.is_file():
        return ""
    text = path.read_text()
    if path.name == "pytest.ini":
        return text
    header = {"pyproject.toml": "[tool.pytest.ini_options]", "tox.ini": "[pytest]", "setup.cfg": "[tool:pytest]"}[path.name]
    kept: list[str] = []
    inside = False
    for line in text.splitlines():
        if re.match(r"^\[\[?[\w.:\-]+\]\]?\s*(?:#.*)?$", line.strip()):
            inside = line.strip().split("#")[0].strip() == header
        if inside:
            kept.append(line)
    return "\n".join(kept).strip() + "\n" if kept else ""


# -- every failure ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Written:
    """What `harness report --all` wrote."""

    index: Path
    reports: list[Path]
    scripts: list[Path]


def report_all(db: Path, out: Path, *, repro: bool = False) -> Written:
    """One report per failure family (a family seen in many tests is one report listing them), with
    `--repro` its scripts beside it, and `index.md`: each failure, where to file it, its answers."""
    with Store(db, read_only=True) as store:
        runs = recorded.runs(store)
        read = _Read(db, answer(store, loud=True), runs, store, machine_roots(runs, db))
        failing = [r for r in read.found.rows if r["status"] in FAILURES]
        if not failing:
            raise BadInput(f"no failing outcome in {str(db)!r}: nothing to report")
        stated = requirements(read.found.transitions)
        out.mkdir(parents=True, exist_ok=True)
        families: dict[str, list[Mapping[str, Any]]] = {}
        for row in failing:
            families.setdefault(signature_of(row), []).append(row)
        moves: dict[str, list[dict[str, Any]]] = {}
        for t in read.found.transitions:
            moves.setdefault(t.signature, []).append(t.to_dict())
        entries = []
        reports: list[Path] = []
        scripts: list[Path] = []
        for chosen, hits in sorted(families.items(), key=lambda item: (-len({r["scenario"] for r in item[1]}), item[0])):
            blamed = file_at(hits, chosen, moves.get(chosen, []))  # the frame's library, else the one whose releases change it
            stem = f"{blamed or 'unblamed'}-{hits[0].get('signature_family') or 'status'}"
            markdown, written = _signature_report(read, chosen, repro=out / f"{stem}.py" if repro else None)
            (out / f"{stem}.md").write_text(markdown)
            reports.append(out / f"{stem}.md")
            scripts += written
            entries.append((stem, chosen, blamed, hits, of_signature(stated, chosen)))
        index = out / "index.md"
        index.write_text(_index(entries, read))
    return Written(index, reports, scripts)


def _index(entries: list[tuple[str, str, str, list[Mapping[str, Any]], list[StatedRequirement]]], read: _Read) -> str:
    lines = [
        f"# Failures in `{_shown_db(read.db)}`",
        "",
        f"{len(entries)} failure famil{'y' if len(entries) == 1 else 'ies'}, one report each (most scenarios or tests first).",
        "",
        "| report | file at | failure | scenarios / tests | cells | answers |",
        "|---|---|---|---|---|---|",
    ]
    answers: dict[str, dict[str, None]] = {}
    for t in read.found.transitions:
        if t.exact:
            answers.setdefault(t.signature, {}).setdefault(t.headline(), None)
    for stem, chosen, blamed, hits, stated in entries:
        said = [f"**{r.text()}**" for r in stated] + list(answers.get(chosen, {}))
        cells = len({r["cell_id"] for r in hits})
        failure = table_cell(chosen)
        lines.append(
            f"| [{stem}]({stem}.md) | {repository(blamed) or blamed or '—'} | `{failure}` | {len({r['scenario'] for r in hits})} | "
            f"{cells} | {'; '.join(said) or 'no exact answer'} |"
        )
    return local_paths("\n".join(lines) + "\n", read.roots)
