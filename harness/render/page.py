"""The published page (`harness publish`): what it says of a results file (`Site`, `site_of`)
and its HTML, one self-contained index.html (data and scripts inline, nothing fetched)."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import __version__
from harness.analysis import export, heatmap
from harness.analysis.answer import Answer
from harness.analysis.grouping import answer_groups
from harness.analysis.knowngood import KnownGoodSet
from harness.analysis.pin import describe_names
from harness.analysis.quiet import weight
from harness.analysis.requirement import StatedRequirement, requirements
from harness.analysis.rows import CellFacts, group_of, names_are_suite
from harness.analysis.shortsignature import without_location
from harness.analysis.status import SEVERITY, status_of
from harness.analysis.support import SupportTable, support_tables
from harness.errors import BadInput
from harness.render.summary import context, inferred_text, never_changes
from harness.render.tally import STATUS, Tally, grouped, tally
from harness.storage import queries
from harness.storage.opening import open_results
from harness.workflows.answering import answer
from harness.workflows.support import kept_support

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "publish"
SCRIPTS = ("vega-6.4.0.min.js", "vega-lite-6.5.0.min.js")
#: The page's heatmap, row names included, in pixels: the page's column is 1,200 px wide.
WIDTH = 1150


# -- what the page says ----------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerLine:
    """One answer as `harness summary` prints it: the scenarios and failure, the release, the machine, how many lines."""

    scenarios: str
    signature: str
    blamed: str
    headline: str
    kind: str
    exact: bool
    machine: str
    lines: int
    tests: int
    held: str  # the other axes the lines held: `torch 2.13.0, accelerate 1.13.0|1.15.0, …`
    inferred: str = ""  # `inferred on 7 more line(s), not built there (…)`: ranges that agree with this exact answer
    inferred_held: str = ""  # the other axes those lines held
    inferred_lines: int = 0


@dataclass(frozen=True)
class KnownGoodRow:
    """One machine class's known-good set, its pin and its evidence."""

    machine: str
    versions: tuple[tuple[str, str], ...]
    cell_id: str
    passes: str  # `passes 5 of the 5 scenario(s) that pass somewhere on it (10 not applicable there)`
    dropped: str  # what no tested set also passes ("" when none)
    requirements: str  # requirements.txt: the pin
    install: str  # `pip install torch==… transformers==…`
    evidence: str  # runs, dates, machines


@dataclass(frozen=True)
class Run:
    run_id: str
    machines: str
    first: str
    last: str
    cells: int
    outcomes: int


@dataclass(frozen=True)
class Site:
    """Everything the page shows, computed once (the dashboard's Support page reads it too)."""

    source: str
    outcomes: int
    cells: int
    scenarios: int
    statuses: tuple[tuple[str, int], ...]
    machines: tuple[str, ...]
    first: str
    last: str
    answers: tuple[AnswerLine, ...]
    steady: tuple[tuple[str, str, str], ...]  # (scenarios, signature, blamed) failing wherever they run
    notes: tuple[str, ...]  # machine differences, flaky cells, inconclusive scenarios
    known_good: tuple[KnownGoodRow, ...]
    tables: tuple[SupportTable, ...]
    runs: tuple[Run, ...]
    heatmap: dict[str, Any]
    rows_are: str  # "scenario" or "test file"
    #: What two exact answers of one failure on one machine state (`analysis.requirement`): the requirement, then why.
    requirements: tuple[tuple[str, str], ...] = ()
    #: `harness changes` since the run before the newest sweep: its headline, the history's depth, and
    #: per machine and kind the lines (empty for a file of one run).
    since: str = ""
    history: str = ""
    changes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def counted(self) -> str:
        """What `scenarios` counts: a suite's tests (its heatmap's rows are their files), or scenarios."""
        return "test(s)" if self.rows_are == "test file" else "scenario(s)"

    @property
    def exact(self) -> int:
        """Exact answers, counted as the summary counts lines: one per line of the matrix."""
        return sum(a.lines for a in self.answers if a.exact)


def _answers(found: Answer, counted: Tally) -> list[AnswerLine]:
    """The summary's Answers block (`summary.render_answers`), as data: the same grouping, order and words."""
    blamed = counted.blamed
    out = []
    for (_, signature), groups in answer_groups(found.transitions):
        names = grouped(t.scenario for g in groups for t in (*g.members, *g.inferred))
        for g in groups:
            out.append(
                AnswerLine(
                    names,
                    without_location(signature),
                    blamed.get(signature, ""),
                    g.headline,
                    g.kind,
                    g.exact,
                    g.machine,
                    g.lines,
                    g.tests,
                    context([m.held for m in g.members]),
                    inferred_text(g) if g.inferred else "",
                    context([m.held for m in g.inferred]) if g.inferred else "",
                    g.inferred_lines,
                )
            )
    return out


def _steady(found: Answer, counted: Tally) -> list[tuple[str, str, str]]:
    blamed = counted.blamed
    steady: dict[tuple[str, str], list[str]] = defaultdict(list)
    for scenario, signature in never_changes(counted, found.attribution):
        steady[(group_of(scenario), signature)].append(scenario)
    return [(grouped(names), without_location(sig), blamed.get(sig, "")) for (_, sig), names in sorted(steady.items())]


def _notes(found: Answer, counted: Tally) -> list[str]:
    notes = [f"{m.scenario}: {m.headline()}" for m in found.machine_differences]
    notes += [f"{f.scenario}: {f.describe()}" for f in found.flaky]
    inconclusive = sorted(map(str, counted.inconclusive))
    if inconclusive:
        notes.append(f"inconclusive (never reached the state it checks) in some cell: {', '.join(inconclusive)}")
    return notes


def _known_good(known: KnownGoodSet) -> KnownGoodRow | None:
    result = known.result
    if not result.found:
        return None
    idle = f" ({len(known.not_applicable)} not applicable there)" if known.not_applicable else ""
    passes = f"passes {len(known.kept)} of the {len(known.passing)} scenario(s) that pass somewhere on it{idle}"
    dropped = f"no tested set also passes: {describe_names(known.dropped)}" if known.dropped else ""
    when = (
        result.first_seen[:10] if result.first_seen[:10] == result.last_seen[:10] else f"{result.first_seen[:10]} … {result.last_seen[:10]}"
    )
    evidence = f"run {', '.join(result.runs)}; {when}; on {'; '.join(result.machines) or known.machine}"
    return KnownGoodRow(
        known.machine or "unknown machine",
        result.versions,
        result.cell_ids[0],
        passes,
        dropped,
        export.requirements_txt(result),
        export.install_command(result),
        evidence,
    )


def _runs(cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]]) -> list[Run]:
    """Each run: its machines, first and last outcome, cells and outcomes; from the rows by cell
    (`Answer.cells`: a cell's rows are one run's), so a suite's 400,000 rows are not read one by one."""
    machines: dict[str, set[str]] = defaultdict(set)
    times: dict[str, list[str]] = defaultdict(list)
    ids: dict[str, set[str]] = defaultdict(set)
    outcomes: Counter[str] = Counter()
    for facts, rows in cells.items():  # a cell of `by_cell` is one (run, cell): its first row names both
        if not rows:
            continue
        run = str(rows[0]["run_id"])
        machines[run].add(facts.machine.label())
        times[run] += _first_and_last(rows)
        ids[run].add(str(rows[0]["cell_id"]))
        outcomes[run] += sum(map(weight, rows))
    return sorted(
        (
            Run(run, "; ".join(sorted(machines[run] - {""})), min(times[run], default=""), max(times[run], default=""), len(ids[run]), n)
            for run, n in outcomes.items()
        ),
        key=lambda r: (r.first, r.run_id),
    )


def _first_and_last(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The earliest and latest start among rows, to the minute: read in C where the starts are all
    of one comparable kind, else one by one."""
    starts = [r.get("started_at") for r in rows]
    starts += [r["first_started_at"] for r in rows if r.get("first_started_at")]  # a stand-in's earliest (`analysis.quiet`)
    present = [s for s in starts if s]
    if not present:
        return []
    try:
        return [str(min(present))[:16], str(max(present))[:16]]
    except TypeError:  # timestamps and text mixed
        minutes = [str(s)[:16] for s in present]
        return [min(minutes), max(minutes)]


def _file_of(test: str) -> str:
    return test.split("::", 1)[0]


def site_of(
    found: Answer, source: str, tables: Sequence[SupportTable] | None = None, heat: Future[list[tuple[Any, ...]]] | None = None
) -> Site:
    """What the page shows for the answered rows of one results file (`source` names it);
    `tables`: its support tables, where the file kept them (else computed from `found`); `heat`:
    the heatmap's counts of the same outcomes, where DuckDB counts them (`queries.heat_counts_aside`)."""
    rows = found.rows
    counted = tally(rows)  # one pass over the rows for every word below
    suite = names_are_suite(found.scenarios)
    group = _file_of if suite else None
    edges = heatmap.edges_from(found.transitions, group)
    if heat is None:
        names, columns, words = heatmap.from_rows(rows, group, found.quiet)
        statuses = Counter(map(str, map(STATUS, rows)))  # every row once, counted in C
        for row in [r for r in rows if "stands_for" in r]:  # a stand-in row: the passes of every quiet test
            statuses[str(row["status"])] += weight(row) - 1
    else:
        counts = heat.result()  # asked for last: DuckDB counted while the answers were worked out
        names, columns, words = heatmap.from_counts(counts, rows)
        statuses = Counter()
        for _, _, status, n in counts:
            statuses[str(status)] += n
    spec = heatmap.layout(names, columns, words, edges, heatmap.busiest_axis(edges, heatmap.varying(columns)), width=WIDTH)
    order = [s.value for s in SEVERITY]
    runs = _runs(found.cells)
    return Site(
        source=source,
        outcomes=sum(statuses.values()),
        cells=len(columns),
        scenarios=len(found.scenarios),
        statuses=tuple(sorted(statuses.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)),
        machines=tuple(found.machine_classes),
        first=min((r.first for r in runs if r.first), default=""),
        last=max((r.last for r in runs if r.last), default=""),
        answers=tuple(_answers(found, counted)),
        steady=tuple(_steady(found, counted)),
        notes=tuple(_notes(found, counted)),
        known_good=tuple(k for k in map(_known_good, found.known_good) if k is not None),
        tables=tuple(support_tables(found, group_of if suite else None) if tables is None else tables),
        runs=tuple(runs),
        heatmap=spec,
        rows_are="test file" if suite else "scenario",
        requirements=tuple((r.text(), _requirement_why(r)) for r in requirements(found.transitions)),
    )


def _requirement_why(stated: StatedRequirement) -> str:
    """`tests/…::test_x (ImportError: …): introduced in transformers 5.6.0 … held; fixed in peft 0.19.0 … held; on cpu · …`."""
    names = grouped(stated.scenarios)
    return f"{names} ({without_location(stated.signature)}): {'; '.join(stated.lines())}" + (
        f"; on {stated.machine}" if stated.machine else ""
    )


def read_site(store: Any, source: str = "") -> Site:
    """`site_of` a results file's every outcome (`harness summary`'s read); the dashboard calls it through `common.query`."""
    found = answer(store, loud=True)
    tables = kept_support(store)
    # DuckDB counts the heatmap's squares on a connection of its own while Python works out the
    # answers below (one core each): 0.3 s of Python's 2,000,000-outcome pass over the rows gone
    heat = queries.heat_counts_aside(store, by_file=names_are_suite(found.scenarios)) if hasattr(store, "fetch") else None
    return site_of(found, source or Path(str(getattr(store, "path", "results"))).name, tables, heat)


# -- the page ------------------------------------------------------------------------------------------
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no `</` can close the element early."""
    return json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")


def _requirements_html(site: Site) -> str:
    if not site.requirements:
        return ""
    items = "".join(
        f'<li class="requirement" data-requirement="{_e(text)}"><b><code>{_e(text)}</code></b>: {_e(why)}</li>'
        for text, why in site.requirements
    )
    return (
        "<h3>Missing requirements</h3><p>Two exact answers of one failure on one machine, on two libraries: "
        f"the set needs both sides at once, so one library's release needs the other's.</p><ul>{items}</ul>"
    )


def _answers_html(site: Site) -> str:
    notes = "".join(f"<li>{_e(n)}</li>" for n in site.notes)
    also = f"<h3>Also</h3><ul>{notes}</ul>" if notes else ""  # flaky cells and machine differences, answers or none
    if not site.answers and not site.steady:
        return "<p>No failure changes between two tested versions of an axis (other axes and machine held).</p>" + also
    rows = []
    for a in site.answers:
        badge = "exact" if a.exact else "range"
        tests = f", {a.tests} tests" if a.tests > 1 else ""
        rows.append(
            f'<tr class="answer {a.kind}" data-scenarios="{_e(a.scenarios)}" data-headline="{_e(a.headline)}" '
            f'data-machine="{_e(a.machine)}" data-lines="{a.lines}" data-exact="{str(a.exact).lower()}">'
            f"<td>{_e(a.scenarios)}</td><td><code>{_e(a.signature)}</code>"
            + (f" <small>({_e(a.blamed)})</small>" if a.blamed else "")
            + "</td>"
            f'<td><span class="badge {badge}">{badge}</span> <b>{_e(a.headline)}</b></td>'
            f"<td>{_e(a.machine)}</td><td>{a.lines} line(s){tests}: {_e(a.held)}"
            + (f"<br><small class='inferred'>{_e(a.inferred)}: {_e(a.inferred_held)}</small>" if a.inferred else "")
            + "</td></tr>"
        )
    table = (
        "<table class='answers'><thead><tr><th>scenario</th><th>failure</th><th>answer</th><th>machine</th><th>lines held</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    steady = "".join(
        f"<li><b>{_e(s)}</b>: <code>{_e(sig)}</code>" + (f" ({_e(who)})" if who else "") + "</li>" for s, sig, who in site.steady
    )
    return (
        _requirements_html(site)
        + table
        + (f"<h3>No tested version changes (fails in every cell where it runs)</h3><ul>{steady}</ul>" if steady else "")
        + also
    )


def _known_good_html(site: Site) -> str:
    parts = []
    for k in site.known_good:
        versions = ", ".join(f"{a} {v}" for a, v in k.versions)
        parts.append(
            f'<div class="known" data-machine="{_e(k.machine)}"><h3>{_e(k.machine)}</h3><p class="versions"><b>{_e(versions)}</b></p>'
            f"<p>{_e(k.passes)}, in cell <code>{_e(k.cell_id)}</code>" + (f"; {_e(k.dropped)}" if k.dropped else "") + "</p>"
            f"<p>Evidence: {_e(k.evidence)}</p><p>Pin (requirements.txt):</p><pre>{_e(k.requirements)}</pre>"
            f"<p>or: <code>{_e(k.install)}</code></p></div>"
        )
    return "".join(parts) or "<p>No scenario passes in any cell: no known-good set.</p>"


def _square(table: SupportTable, row: str, index: int) -> str:
    column = table.columns[index]
    if not column.built:
        return f'<td class="s-gap" title="not built: {_e(", ".join(column.not_built))}">not built</td>'
    entry = table.entry(row, index)
    status = status_of(entry.word) if entry.word else ""
    style = f' style="background:{heatmap.COLOURS[status]}"' if status in heatmap.COLOURS else ""
    mark = (
        f'<span class="mark {entry.kind}" title="{_e(entry.mark)}">{"▲" if entry.kind == "introduced" else "★"}</span>'
        if entry.mark
        else ""
    )
    exact = f' data-exact="{_e(entry.mark)}"' if entry.mark else ""
    title = f"{row} with {table.library} {column.release}: {entry.word or 'not run'}"
    return f'<td{style}{exact} title="{_e(title)}">{_e(entry.word or "—")}{mark}</td>'


def _table_html(table: SupportTable, rows_are: str) -> str:
    held = ", ".join(f"{a} {v}" for a, v in table.held)
    head = "".join(
        f'<th class="{"kg" if c.release == table.known_good else ""}">{_e(c.label)}</th>'
        if c.built
        else f'<th class="gap">{_e(c.label)}</th>'
        for c in table.columns
    )
    body = "".join(
        f"<tr><th class='row'>{_e(row)}</th>{''.join(_square(table, row, i) for i in range(len(table.columns)))}</tr>" for row in table.rows
    )
    return (
        f'<div class="support" data-machine="{_e(table.machine)}" data-library="{_e(table.library)}">'
        f"<h3>{_e(table.library)} on {_e(table.machine)}</h3><p class='held'>with {_e(held)} (the known-good set's other versions); "
        f"★ fixed here, ▲ introduced here: an exact answer (this release and the one before it both ran).</p>"
        f"<div class='scroll'><table class='grid'><thead><tr><th>{_e(rows_are)}</th>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div></div>"
    )


def _tables_html(site: Site) -> str:
    shown = [t for t in site.tables if t.built > 1]
    alone = [f"{t.library} {t.known_good} on {t.machine}" for t in site.tables if t.built <= 1]
    note = f"<p>Only one release ran on the known-good line of: {_e('; '.join(alone))}.</p>" if alone else ""
    return "".join(_table_html(t, site.rows_are) for t in shown) + note


def _runs_html(site: Site) -> str:
    rows = "".join(
        f"<tr><td><code>{_e(r.run_id)}</code></td><td>{_e(r.machines)}</td><td>{_e(r.first)}</td><td>{_e(r.last)}</td>"
        f"<td>{r.cells}</td><td>{r.outcomes:,}</td></tr>"
        for r in site.runs
    )
    return (
        "<table class='runs'><thead><tr><th>run</th><th>machine</th><th>first outcome (UTC)</th><th>last</th><th>cells</th>"
        f"<th>outcomes</th></tr></thead><tbody>{rows}</tbody></table>"
    )


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;color:#1f2328}
h1{font-size:26px;margin:20px 0 4px}h2{margin-top:36px;border-bottom:1px solid #d0d7de;padding-bottom:4px}h3{margin:18px 0 4px}
code,pre{font:12px ui-monospace,monospace}pre{background:#f6f8fa;padding:8px;overflow-x:auto}
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:3px 6px;text-align:left;vertical-align:top}
.answers td{font-size:13px}.badge{font-size:11px;border-radius:3px;padding:0 4px;color:#fff}.badge.exact{background:#1b5e20}
.badge.range{background:#8c959f}.grid td,.grid th{font-size:12px;white-space:nowrap;text-align:center}.grid th.row{text-align:left}
.grid th.kg{background:#d8f0da}
.s-gap,.grid th.gap{color:#8c959f;background:repeating-linear-gradient(45deg,#fff,#fff 4px,#f0f2f4 4px,#f0f2f4 8px)}
td[data-exact]{outline:2px solid #1f2328;outline-offset:-2px}.mark{margin-left:3px}.mark.introduced{color:#b71c1c}.mark.fixed{color:#1b5e20}
.scroll{overflow-x:auto}.meta{color:#57606a}.known{margin-bottom:12px}nav a{margin-right:12px}
#heatmap{min-height:200px}
"""


def render(site: Site) -> str:
    """The whole page: one HTML document, its scripts and data inline."""
    statuses = " · ".join(f"{s}: {n:,}" for s, n in site.statuses)
    span = site.first[:10] if site.first[:10] == site.last[:10] else f"{site.first[:10]} … {site.last[:10]}"
    scripts = "".join(f"<script>{(TEMPLATES / name).read_text()}</script>" for name in SCRIPTS)
    exact = sum(1 for a in site.answers if a.exact)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Compatibility: {_e(site.source)}</title><style>{STYLE}</style></head>
<body>
<h1>Which versions work together</h1>
<p class="meta" id="data">Data: <b>{_e(site.source)}</b> · {site.outcomes:,} outcomes · {site.cells} cell(s) ·
{site.scenarios:,} {site.counted} ·
on {_e(", ".join(site.machines) or "no recorded machine")} · {_e(span)} · {statuses}.
Published by compat-harness {_e(__version__)} (<code>harness publish</code>).</p>
<nav>{_SINCE_LINK if site.since else ""}<a href="#matrix">Matrix</a><a href="#answers">Answers</a><a href="#known-good">Known-good sets</a>
<a href="#support">Support tables</a><a href="#runs">Runs</a></nav>
{_since_html(site)}
<h2 id="matrix">Every {_e(site.rows_are)} × every cell</h2>
<p>Cells are ordered by their versions; hover a square for its cell and outcome. A tick on an edge (red: introduced, green:
fixed) is a release that attribution found changed the row there; a triangle marks the new side where the release before
it is elsewhere in this order.</p>
<div id="heatmap"></div>
<h2 id="answers">Answers</h2>
<p>{len(site.answers)} answer(s), {exact} of them exact, on {site.exact} line(s) of the matrix in all; exact: both releases ran on the line,
with the other libraries and the machine held.</p>
{_answers_html(site)}
<h2 id="known-good">Known-good set per machine</h2>
<p>The newest set of versions on which every {_e(site.rows_are)} that passes somewhere on that machine passes.</p>
{_known_good_html(site)}
<h2 id="support">Support tables</h2>
<p>Per library and machine: its releases (columns) against every {_e(site.rows_are)} (rows), with every other library at the
machine's known-good version. Columns that name releases the index lists between two that ran were not built.</p>
{_tables_html(site)}
<h2 id="runs">Runs: when and where</h2>
{_runs_html(site)}
{scripts}
<script type="application/json" id="heatmap-spec">{_script_json(site.heatmap)}</script>
<script>
(function () {{
  var spec = JSON.parse(document.getElementById("heatmap-spec").textContent);
  var view = new vega.View(vega.parse(vegaLite.compile(spec).spec), {{renderer: "svg", container: "#heatmap", hover: true}});
  view.runAsync().then(function () {{ document.getElementById("heatmap").dataset.drawn = "true"; }});
}})();
</script>
</body></html>
"""


def _with_changes(site: Site, store: Any) -> Site:
    """`site` with what changed since the run before the newest sweep (`harness changes`), where the file holds more than one run."""
    from harness.storage.store import Store
    from harness.workflows.changes import changes_of, sections

    report = changes_of(store) if isinstance(store, Store) else None
    if report is None:
        return site
    return replace(site, since=report.headline(), history=report.depth.describe(), changes=tuple(sections(report)))


_SINCE_LINK = '<a href="#since">Since the last run</a>'


def _since_html(site: Site) -> str:
    if not site.since:
        return ""
    parts = [f"<h2 id='since'>Since the last run</h2><p><b>{_e(site.since)}</b>. History: {_e(site.history)}.</p>"]
    if not site.changes:
        parts.append("<p>Nothing changed.</p>")
    for machine, title, lines in site.changes:
        items = "".join(f"<li>{_e(line)}</li>" for line in lines)
        parts.append(f"<h3>{_e(machine)}: {_e(title)}</h3><ul>{items}</ul>")
    return "".join(parts)


def publish(db: Path, out: Path) -> tuple[Path, Site]:
    """Write `out/index.html` for the results file `db`; (its path, what it shows)."""
    if not Path(db).exists():
        raise BadInput(f"no results file at {db}: run `harness sweep --db {db}` first, or pass --db an existing .duckdb or .jsonl file")
    with open_results(db, read_only=True) as store:
        site = _with_changes(read_site(store, Path(db).name), store)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out} is a file: pass a folder (it gets index.html)")
    out.mkdir(parents=True, exist_ok=True)
    page = out / "index.html"
    page.write_text(render(site), encoding="utf-8")
    return page, site


def summary_line(page: Path, site: Site) -> str:
    exact = sum(1 for a in site.answers if a.exact)
    inferred = sum(a.inferred_lines for a in site.answers)
    more = f"; inferred on {inferred} more, not built there" if inferred else ""
    return (
        f"{page}: {site.outcomes:,} outcomes, {site.cells} cells × {site.scenarios:,} {site.counted}, {len(site.answers)} answer(s) "
        f"({exact} exact, on {site.exact} line(s){more}), {len(site.known_good)} known-good set(s), "
        f"{sum(1 for t in site.tables if t.built > 1)} support table(s); {page.stat().st_size / 1024:,.0f} KiB, open it in a browser"
    )
