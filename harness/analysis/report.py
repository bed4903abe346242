"""Reports: a markdown issue body for a failure signature or for one cell, written from evidence. Pure.

What a maintainer needs to act, in the order they read it: a title, where to file it (the
repository of the innermost frame under test, with cross-links to the other libraries in the
trace), the exact versions, where it passes and where it fails (the contrast table, the
columns that vary in bold), which release introduced or fixed it, a repro command, and the
end of the traceback. Nothing here queries or prints: `harness report` feeds it rows.

This module assembles the sections; their parts live by concept: where to file it and its title
(`analysis.filing`), the contrast table (`analysis.contrast`), the Reproduce section
(`analysis.repro`), the markdown pieces (`analysis.markdown`).

>>> rows = [
...     {"run_id": "r1", "cell_id": f"acc{acc}", "scenario": "load", "repeat": 0, "status": status, "signature": sig,
...      "versions": {"torch": "2.13.0", "accelerate": acc}, "blamed_library": "accelerate" if sig else ""}
...     for acc, status, sig in [("1.13.0", "error", "TypeError: x @ accelerate/hooks.py:init_hook"), ("1.14.0", "pass", "")]
... ]
>>> body = render_signature_report("TypeError: x @ accelerate/hooks.py:init_hook", rows)
>>> "**File at:** huggingface/accelerate" in body, "| **1.14.0** | passes |" in body
(True, True)
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.analysis.attribution import Transition
from harness.analysis.contrast import cells_on_machines, contrast_table, outcome_word
from harness.analysis.filing import blamed, exception_line, file_at_lines, libraries_in_trace, suggested_title
from harness.analysis.knowngood import KnownGoodSet
from harness.analysis.markdown import code, fence, table_cell
from harness.analysis.redact import local_paths
from harness.analysis.repro import SCRIPT_MARK, Repro, reproduce_lines
from harness.analysis.requirement import StatedRequirement
from harness.analysis.requirement import requirements as stated_requirements
from harness.analysis.rows import axis_sort, distance, installed, machine_class, machine_of, minor_version, node_ids, to_minute
from harness.analysis.shortsignature import short_signature
from harness.analysis.shorttrace import LIMIT, short_traceback
from harness.analysis.signature import DEFAULT_LIBRARIES
from harness.analysis.status import ENV_PROBLEMS, FAILURES, Status
from harness.analysis.versions import requirement, version_key

#: A failure seen in many tests: the summary lists this many, the contrast table has a column for this many.
_SHOWN_TESTS = 12
_TABLE_COLUMNS = 4


def shorten_paths(text: str) -> str:
    """Runner-specific prefixes out: `/tmp/envs/x/lib/python3.11/site-packages/peft/…` -> `site-packages/peft/…`."""
    return local_paths(text)


def _tail(text: str, lines: int = LIMIT) -> str:
    kept = text.rstrip().splitlines()
    cut = len(kept) - lines
    return (f"… ({cut} line(s) above)\n" if cut > 0 else "") + "\n".join(kept[-lines:])


def _trace(row: Mapping[str, Any]) -> str:
    """The last frames, each with its line, the frame under test marked (`shorttrace`), at most 40 lines."""
    text = str(row.get("traceback") or "")
    if not text.strip():
        message = str(row.get("message") or "")
        tail = str(row.get("output_tail") or "")
        text = "\n".join(t for t in (tail.rstrip(), message) if t.strip() and t.strip() not in tail)
    return short_traceback(text, str(row.get("signature") or ""))


def _paragraph(doc: str) -> str:
    """A docstring's first paragraph on one line, ending with a full stop."""
    text = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return text if not text or text.endswith((".", "!", "?")) else text + "."


# -- shared sections -------------------------------------------------------------------------
def _environment(row: Mapping[str, Any], record: Mapping[str, Any] | None, runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    versions = installed(row)
    run = runs.get(str(row.get("run_id")), {})
    host = run.get("host") or {}
    lines = ["| package | version |", "|---|---|"]
    lines += [f"| {a} | {table_cell(versions[a])} |" for a in axis_sort(versions)]
    gpu = row.get("gpu") or host.get("gpu") or ""
    details = [
        ("python", _python(row, record)),
        ("CUDA", machine_of(row).cuda),  # what torch's build was built for (`+cu130`, or PyPI's default build)
        ("platform", row.get("platform") or host.get("platform") or ""),
        ("GPU", gpu + _gpu_detail(host)),
        ("run", f"{row.get('run_id', '')}, {to_minute(row.get('started_at'))} UTC"),
    ]
    lines += [f"| {k} | {table_cell(str(v))} |" for k, v in details if v]
    freeze = (record or {}).get("installed") or row.get("installed") or {}
    if isinstance(freeze, str):
        freeze = json.loads(freeze) if freeze else {}
    if freeze:
        body = "\n".join(requirement(p, str(v)) for p, v in sorted(freeze.items()))
        lines += ["", f"<details><summary>Every installed package ({len(freeze)}, from the env's <code>uv pip freeze</code>)</summary>", ""]
        lines += [fence(body), "", "</details>"]
    return lines


def _python(row: Mapping[str, Any], record: Mapping[str, Any] | None) -> str:
    """The Python the cell ran (`3.12.3`), never the matrix's `python` setting, which on a runner is its interpreter's path."""
    own = str(row.get("python_version") or (record or {}).get("python_version") or "")
    return own if minor_version(own) else machine_of(row).python


def _gpu_detail(host: Mapping[str, Any]) -> str:
    gpus = host.get("gpus") or []
    if not gpus:
        return ""
    first = gpus[0]
    parts = [
        f"{first.get('memory.total', '')}".strip(),
        f"cc {first.get('compute_cap', '')}".strip(),
        f"driver {first.get('driver_version', '')}",
    ]
    return f" ({', '.join(p for p in parts if p and not p.endswith(' '))}{f', ×{len(gpus)}' if len(gpus) > 1 else ''})"


_LISTED = 12  # transitions whose cells the contrast table keeps
_GROUPS = 8  # groups the attribution section lists
_PER_GROUP = 3  # lines of the matrix shown per group


def _listed(transitions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The transitions whose cells a report shows first: the first line of each group, then the rest."""
    groups = _grouped(transitions)
    firsts = [members[0] for _, members in groups]
    rest = [t for _, members in groups for t in members[1:]]
    return [*firsts, *rest][:_LISTED]


def _grouped(transitions: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """(headline, transitions) for each scenario and answer, most lines of the matrix first.

    `fixed in accelerate 1.14.0 (after 1.13.0)` on 312 lines (other axes held at other
    versions) is one finding, not 312. An exact answer and a range are never one group: the
    headline says exactly what every member shows.
    """
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for t in transitions:
        kind = str(t.get("kind") or "")
        if kind in ("introduced", "fixed"):
            groups[(str(t.get("scenario") or ""), kind, Transition.from_dict(t).headline(), str(t.get("machine") or ""))].append(t)
        elif kind in ("flaky", "machine"):
            flaky = "flaky across runs" if t.get("across_runs") else "flaky"
            groups[(str(t.get("scenario") or ""), kind, flaky if kind == "flaky" else str(t.get("description") or ""), "")].append(t)
    out = []
    for (scenario, _, headline, _), members in groups.items():
        label = f"`{scenario}`: " if scenario else ""
        out.append((f"{label}{headline.split(' — with ')[0]}", members))
    # Releases that changed it first (exact before ranges), most lines first; machine differences and flaky cells last.
    order = {"introduced": 0, "fixed": 0, "machine": 1, "flaky": 2}
    return sorted(out, key=lambda item: (order[str(item[1][0].get("kind"))], " between " in item[0], -len(item[1]), item[0]))


def _line(t: Mapping[str, Any]) -> str:
    """One transition's line of the matrix: `with torch 2.13.0, …` (the headline says what lies between)."""
    if t.get("kind") == "flaky":
        return str(t.get("description") or "")
    held = t.get("held") or {}
    return ("with " + ", ".join(f"{a} {v}" for a, v in dict(held).items())) if held else "(no other axis)"


def _attribution(transitions: Sequence[Mapping[str, Any]]) -> list[str]:
    groups = _grouped(transitions)
    if not groups:
        return ["No release boundary among the tested cells: it fails (or passes) on every tested version of each axis that varies."]
    lines = []
    for headline, members in groups[:_GROUPS]:
        machine = str(members[0].get("machine") or "") if members[0].get("kind") in ("introduced", "fixed") else ""
        lines.append(f"- {headline}, on {len(members)} line(s) of the matrix" + (f" ({machine})" if machine else "") + ":")
        lines += [f"  - {_line(t)}" for t in members[:_PER_GROUP]]
        if len(members) > _PER_GROUP:
            lines.append(f"  - … {len(members) - _PER_GROUP} more")
    if len(groups) > _GROUPS:
        lines.append(f"- … and {len(groups) - _GROUPS} more finding(s) (`harness attribute --json`)")
    return lines


def _fixed_note(transitions: Sequence[Mapping[str, Any]]) -> list[str]:
    """A note when every answer is a fix: name the earliest release (exact) or range (not) per axis."""
    moves = [Transition.from_dict(t) for t in transitions if t.get("kind") in ("introduced", "fixed")]
    if not moves or any(t.kind == "introduced" for t in moves):
        return []
    earliest: dict[str, Transition] = {}
    for t in moves:
        if t.axis not in earliest or version_key(t.after) < version_key(earliest[t.axis].after):
            earliest[t.axis] = t
    named = "; ".join(t.headline() for _, t in sorted(earliest.items()))
    each = " (the earliest on each axis)" if len(earliest) > 1 else ""
    return [
        f"> **Fixed in a tested release?** The attribution finds it {named}{each}. "
        "File only if it still fails with the newest release; otherwise this documents the fix for people searching the error."
    ]


def _footer(rows: Sequence[Mapping[str, Any]], runs: Mapping[str, Mapping[str, Any]], db: str, extra: str = "") -> list[str]:
    run_ids = sorted({str(r.get("run_id")) for r in rows})
    when = sorted(to_minute(r.get("started_at")) for r in rows if r.get("started_at"))
    gpus = sorted({str(r.get("gpu")) for r in rows if r.get("gpu")})
    span = f"{when[0][:10]}..{when[-1][:10]}" if when and when[0][:10] != when[-1][:10] else (when[0][:10] if when else "")
    source = f" in `{db}`" if db else ""
    return [
        "---",
        f"<sub>Generated by `harness report` from {len(rows)} outcome(s){source}: run(s) {', '.join(run_ids)}"
        + (f", {span}" if span else "")
        + (f", GPU {', '.join(gpus)}" if gpus else "")
        + (f"; {extra}" if extra else "")
        + ".</sub>",
    ]


def _known_good(known: Mapping[str, KnownGoodSet], row: Mapping[str, Any], scenarios: Sequence[str]) -> list[str]:
    """The known-good set of the machine class the report is about, and whether its scenarios pass there."""
    machine = machine_class(row)
    good = known.get(machine)
    if good is None or not good.result.found:
        return []
    versions = ", ".join(f"{a} {v}" for a, v in good.result.versions)
    kept, idle = set(good.kept), set(good.not_applicable)  # sets: a suite keeps 100,000 tests, a signature names thousands
    passing = [s for s in scenarios if s in kept]
    others = [s for s in scenarios if s not in kept and s not in idle]
    out = [
        f"### Known-good set on {machine}",
        "",
        f"`{versions}` (cell `{good.result.cell_ids[0]}`): the newest tested set on which every scenario that passes on "
        f"this machine class passes ({len(good.kept)} of {len(good.passing)}).",
    ]
    if passing:
        out.append(f"{', '.join(f'`{s}`' for s in passing)} pass{'es' if len(passing) == 1 else ''} there.")
    if others:
        out.append(
            f"{', '.join(f'`{s}`' for s in others)} not among them: "
            f"`harness pin --machine '{machine}' --scenario …` names the newest set where it passes, if any."
        )
    return [*out, ""]


# -- the two reports -------------------------------------------------------------------------
def example_of(
    signature: str,
    rows: Iterable[Mapping[str, Any]],
    transitions: Iterable[Mapping[str, Any]] = (),
    lead: str = "",
    *,
    ordered: Sequence[str] | None = None,
) -> Mapping[str, Any]:
    """The outcome a signature report shows and reproduces: of the scenario (or test) that leads
    (`lead`, else the one failing in most cells, then the clearest contrast), the newest failing
    set, newest first on the blamed library's axis."""
    rows = list(rows)
    hits = [r for r in rows if r["status"] in FAILURES and (r.get("signature") or r["status"]) == signature]
    if not hits:
        raise ValueError(f"no failing outcome has the signature {signature!r}")
    scenarios = _ordered(signature, rows, hits, lead) if ordered is None else ordered  # `ordered`: the caller's, worked out once
    primary = [r for r in hits if r["scenario"] == scenarios[0]]
    library, _ = blamed(hits, signature, [t for t in transitions if t.get("signature", signature) == signature])
    order = [library, *axis_sort(installed(primary[0]))] if library else axis_sort(installed(primary[0]))
    return max(primary, key=lambda r: (*(version_key(installed(r).get(a)) for a in order), to_minute(r.get("started_at"))))


def _ordered(signature: str, rows: Sequence[Mapping[str, Any]], hits: Sequence[Mapping[str, Any]], lead: str = "") -> list[str]:
    """The scenarios a signature shows in: `lead` first, then those failing in most cells, then the clearest contrast."""
    showing = {r["scenario"] for r in hits}
    grouped = cells_on_machines(r for r in rows if r["scenario"] in showing)

    def counts(scenario: str) -> tuple[int, int]:
        words = [outcome_word(c.rows[scenario], signature) for c in grouped.values() if c.rows.get(scenario)]
        return sum(w.startswith("**fails**") for w in words), sum(w.startswith("passes") for w in words)

    counted = {str(s): counts(s) for s in showing}  # once each: the sort asked twice per comparison's key
    return sorted(counted, key=lambda s: (s != lead, -counted[s][0], -counted[s][1], s))


def passing_of(
    example: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], transitions: Iterable[Mapping[str, Any]] = ()
) -> tuple[Mapping[str, Any], str] | None:
    """(a passing outcome one step from `example`'s cell, what that step changes: `peft 0.19.0 instead of 0.18.1`).

    The step an answer takes first (a fix before an introduction: a newer release that passes
    is what a maintainer tries; exact before a range), else any neighbour on the same machine
    where every repeat passes, the newer first. None when no such cell was tested.
    """
    rows = list(rows)
    cell, scenario, machine = str(example["cell_id"]), str(example["scenario"]), machine_of(example).label()
    signature = str(example.get("signature") or example["status"])
    mine = installed(example)
    passing: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["scenario"] == scenario and machine_of(row).label() == machine and str(row["cell_id"]) != cell:
            passing.setdefault(str(row["cell_id"]), []).append(row)
    passing = {c: rs for c, rs in passing.items() if all(r["status"] == Status.PASS for r in rs)}
    steps: list[tuple[tuple[bool, bool], str]] = []
    for t in transitions:
        if t.get("scenario") != scenario or t.get("signature") != signature or t.get("kind") not in ("introduced", "fixed"):
            continue
        ends = (t.get("before_cell"), t.get("after_cell"))
        failing, other = ends if t["kind"] == "fixed" else ends[::-1]
        if failing == cell and other in passing:
            steps.append(((t["kind"] != "fixed", bool(t.get("untested") or t.get("inconclusive"))), str(other)))
    if not steps:  # no answer steps from this cell: the nearest passing neighbour
        near = [c for c, rs in passing.items() if distance(installed(rs[0]), mine) == 1]
        near.sort(key=lambda c: [version_key(v) for v in installed(passing[c][0]).values()], reverse=True)
        steps = [((False, False), c) for c in near]
    if not steps:
        return None
    chosen = passing[min(steps, key=lambda s: s[0])[1]][0]
    theirs = installed(chosen)
    changed = [a for a in axis_sort({*mine, *theirs}) if mine.get(a) != theirs.get(a)]
    return chosen, ", ".join(f"{a} {theirs.get(a, '(none)')} instead of {mine.get(a, '(none)')}" for a in changed)


def _requirement_lines(found: Sequence[StatedRequirement]) -> list[str]:
    """The report's summary of the requirements two exact answers state, each with the cells that show it."""
    out = []
    for req in found:
        where = f" (on {req.machine})" if req.machine else ""
        out.append(f"- **Missing requirement: `{req.text()}`**{where}.")
        out += [f"  - {line}" for line in req.lines()]
        cells = "; ".join(f"`{cell}` {word}" for cell, word in req.cells())
        out.append(f"  - cells: {cells}")
        if req.otherwise():
            sides = f"`{req.needs.text()}`, or `{req.otherwise()}`"
            out.append(f"  - to avoid it today, constrain one side: {sides} (`harness pin --constraints`)")
    return out


def render_signature_report(
    signature: str,
    rows: Iterable[Mapping[str, Any]],
    transitions: Iterable[Mapping[str, Any]] = (),
    cells: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    runs: Mapping[str, Mapping[str, Any]] | None = None,
    scenario_files: Mapping[str, str] | None = None,
    scenario_docs: Mapping[str, str] | None = None,
    db: str = "",
    known_good: Mapping[str, KnownGoodSet] | None = None,
    lead: str = "",
    repro: Repro | None = None,
    roots: Sequence[tuple[str, str]] = (),
) -> str:
    """An issue body for one failure signature.

    rows: outcome rows (`Store.outcomes_with_traces()`) of the scenarios it shows in, passing
    ones included: they are the contrast. transitions: attribution rows (`Store.transitions()`
    or `attribution.to_rows`); those of other signatures are ignored. cells: cell id -> its
    `cells` record (for the full freeze). runs: run id -> `Store.runs_info()` entry (settings,
    host, matrix path). scenario_files / scenario_docs: name -> path / docstring. known_good:
    machine class -> its known-good set (`knowngood.known_good_sets`): the example's is named. lead:
    the scenario or test to lead with and reproduce. repro: the one-file repro written beside
    it. roots: the machine's folders and how to write the paths under them (`redact.local_paths`).
    """
    rows = list(rows)
    runs, cells, files, docs = runs or {}, cells or {}, scenario_files or {}, scenario_docs or {}
    hits = [r for r in rows if r["status"] in FAILURES and (r.get("signature") or r["status"]) == signature]
    if not hits:
        raise ValueError(f"no failing outcome has the signature {signature!r}")
    moves = [t for t in transitions if t.get("signature", signature) == signature]
    scenarios = _ordered(signature, rows, hits, lead)
    named = set(scenarios)  # once: a set made per row took a second at a suite's 30,000 rows
    grouped = cells_on_machines(r for r in rows if r["scenario"] in named)

    def counts(scenario: str) -> tuple[int, int, int, int]:
        """(cells where it fails with this signature, where it passes, where it is flaky, cells tested) for one scenario."""
        words = [outcome_word(c.rows[scenario], signature) for c in grouped.values() if c.rows.get(scenario)]
        fails, passes = sum(w.startswith("**fails**") for w in words), sum(w.startswith("passes") for w in words)
        return fails, passes, sum(w.startswith("flaky") for w in words), len(words)

    relevant = [r for r in rows if r["scenario"] in named]
    library, why = blamed(hits, signature, moves)
    libs = tuple(dict.fromkeys([*DEFAULT_LIBRARIES, *(a for c in grouped.values() for a in c.versions)]))
    example = example_of(signature, rows, moves, lead, ordered=scenarios)
    trace = _trace(example)
    versions = installed(example)
    headline = exception_line(example)
    title = suggested_title(headline, library, versions.get(library, ""))

    out = [f"<!-- harness report: {signature} -->", f"**Suggested title:** {title}", ""]
    out += file_at_lines(library, why, libraries_in_trace(str(example.get("traceback") or ""), libs))
    note = _fixed_note(moves)
    out += ["", *note] if note else []
    out += ["", "### Summary", ""]
    out += _requirement_lines(stated_requirements(moves))
    for scenario in scenarios[:_SHOWN_TESTS]:
        failing, passing, flaky, tested = counts(scenario)
        doc = _paragraph(docs.get(scenario, ""))
        said = f"ails with it in {failing} of {tested} tested version set(s); passes in {passing}"
        said += f"; flaky in {flaky}." if flaky else "."
        out.append(f"- `{scenario}` — {doc} F{said}" if doc else f"- `{scenario}`: f{said}")
    if len(scenarios) > _SHOWN_TESTS:
        out.append(f"- … and {len(scenarios) - _SHOWN_TESTS} more with the same failure (`harness report --all` lists every one)")
    out += ["", "The error (the table below shows where):"]
    out += ["", fence(local_paths(str(example.get("message") or headline).strip())), ""]
    out += ["### Environment (the newest failing set)", "", *_environment(example, cells.get(str(example["cell_id"])), runs), ""]
    # The cells of the transitions the attribution section lists, and the example, come first.
    compared = {str(t.get(k)) for t in _listed(moves) for k in ("before_cell", "after_cell") if t.get(k)} | {str(example["cell_id"])}
    table = contrast_table(list(grouped.values()), scenarios[:_TABLE_COLUMNS], signature, evidence=compared)
    out += ["### Where it passes and where it fails", "", *table, ""]
    if len(scenarios) > _TABLE_COLUMNS:
        out += [f"(the first {_TABLE_COLUMNS} of {len(scenarios)} with this failure; the summary above counts each)", ""]
    out += ["### Attribution", "", *_attribution(moves), ""]
    out += _known_good(known_good or {}, example, scenarios)
    nodes = node_ids(rows, str(example["cell_id"]))
    out += [
        "### Reproduce",
        "",
        *reproduce_lines(str(example["cell_id"]), example, scenarios[:_TABLE_COLUMNS], runs, files, nodes, repro),
        "",
    ]
    out += ["### Traceback (the last frames)", "", fence(trace) if trace.strip() else "(none recorded)", ""]
    family = str(example.get("signature_family") or "")
    out += _footer(relevant, runs, db, f"signature {code(signature)}" + (f" (family `{family}`)" if family else ""))
    return _written("\n".join(out) + "\n", roots, repro)


def _written(markdown: str, roots: Sequence[tuple[str, str]], repro: Repro | None) -> str:
    """Every path written from its root, then the script put in as it is (it is the user's code)."""
    markdown = local_paths(markdown, roots)
    if repro is None:
        return markdown
    return markdown.replace(SCRIPT_MARK, fence(repro.script.rstrip("\n"), "python"), 1)


def render_cell_report(
    cell_id: str,
    rows: Iterable[Mapping[str, Any]],
    cell_record: Mapping[str, Any] | None = None,
    *,
    transitions: Iterable[Mapping[str, Any]] = (),
    runs: Mapping[str, Mapping[str, Any]] | None = None,
    scenario_files: Mapping[str, str] | None = None,
    scenario_docs: Mapping[str, str] | None = None,
    db: str = "",
    known_good: Mapping[str, KnownGoodSet] | None = None,
    roots: Sequence[tuple[str, str]] = (),
) -> str:
    """An issue body for one cell: every scenario's outcome there, its neighbours, each failure.

    rows: outcome rows (with traces) of the cell and, for the contrast, of other cells (the
    neighbours: one axis different). cell_record: the cell's `cells` record (freeze, env status).
    roots: the machine's folders and how to write the paths under them (`redact.local_paths`).
    """
    rows = list(rows)
    runs, files, docs = runs or {}, scenario_files or {}, scenario_docs or {}
    grouped = cells_on_machines(rows)
    own = [c for (cid, _), c in grouped.items() if cid == cell_id]
    if not own:
        raise ValueError(f"no outcome of cell {cell_id!r}")
    # A cell run on several machines: the report is about the machine of its newest outcome.
    cell = max(own, key=lambda c: max(to_minute(r.get("started_at")) for r in c.all_rows()))
    moves = list(transitions)
    scenarios = sorted(cell.rows)
    failing = [s for s in scenarios if any(r["status"] in FAILURES for r in cell.rows[s])]
    env_problem = [s for s in scenarios if all(r["status"] in ENV_PROBLEMS for r in cell.rows[s])]
    example = max(cell.all_rows(), key=lambda r: to_minute(r.get("started_at")))
    named = ", ".join(f"{a} {v}" for a, v in ((a, cell.versions[a]) for a in axis_sort(cell.versions)))

    if failing:
        first = next(r for r in cell.rows[failing[0]] if r["status"] in FAILURES)
        lead = exception_line(first) if len(failing) == 1 else f"{len(failing)} of {len(scenarios)} scenarios fail"
        title = f"{lead} with {named}"
    elif env_problem:
        title = f"{named}: the environment cannot be built ({cell.rows[env_problem[0]][0]['status']})"
    else:
        title = f"{named}: all {len(scenarios)} scenario(s) pass"
    out = [f"<!-- harness report: cell {cell_id} -->", f"**Suggested title:** {title}", ""]

    sections: list[str] = []
    for scenario in failing:
        hit = next(r for r in reversed(cell.rows[scenario]) if r["status"] in FAILURES)
        signature = str(hit.get("signature") or hit["status"])
        moves_here = [t for t in moves if t.get("signature") == signature and t.get("scenario", scenario) == scenario]
        library, why = blamed([hit], signature, moves_here)
        trace = _trace(hit)
        libs = tuple(dict.fromkeys([*DEFAULT_LIBRARIES, *cell.versions]))
        sections += [f"#### `{scenario}`: {outcome_word(cell.rows[scenario])}", ""]
        doc = _paragraph(docs.get(scenario, ""))
        sections += [doc, ""] if doc else []
        sections += file_at_lines(library, why, libraries_in_trace(str(hit.get("traceback") or ""), libs))
        sections += ["", f"Signature: {code(signature)}", ""]
        if moves_here:
            sections += ["Attribution:", "", *_attribution(moves_here), ""]
        fenced = fence(trace) if trace.strip() else "(no traceback recorded)"
        if len(failing) > 2:  # many failures: keep the page scannable
            sections += ["<details><summary>Traceback (tail)</summary>", "", fenced, "", "</details>", ""]
        else:
            sections += [fenced, ""]

    out += ["### Summary", ""]
    out += ["| scenario | outcome | signature |", "|---|---|---|"]
    for scenario in scenarios:
        srows = cell.rows[scenario]
        sig = next((str(r.get("signature") or "") for r in srows if r["status"] != Status.PASS and r.get("signature")), "")
        short = short_signature(sig)
        shown = str(srows[0].get("node_id") or scenario) if srows else scenario  # this cell's own node id
        out.append(f"| `{shown}` | {table_cell(outcome_word(srows))} | {table_cell(code(short) if sig else '')} |")
    out.append("")
    out += ["### Environment", "", *_environment(example, cell_record, runs), ""]
    out += _known_good(known_good or {}, example, failing)
    record = cell_record or {}
    if record.get("env_status") and record.get("env_status") != "ready":
        out += [f"The environment did not build ({record['env_status']}); the resolver's or installer's words:", ""]
        out += [fence(_tail(str(record.get("env_message") or ""))), ""]
    if failing:
        # Neighbours on the same machine only: another machine's outcome is no contrast.
        neighbours = [
            c
            for c in grouped.values()
            if c is cell or (c.machine == cell.machine and distance(c.versions, cell.versions) == 1 and any(s in c.rows for s in failing))
        ]
        out += ["### This cell and its neighbours (one version different)", ""]
        out += [*contrast_table(neighbours, failing, None, focus=[cell_id], mark="← this cell"), ""]
        out += ["### Failures", "", *sections]
        out += ["### Reproduce", "", *reproduce_lines(cell_id, example, failing, runs, files, node_ids(rows, cell_id)), ""]
    out += _footer([r for r in rows if r.get("cell_id") == cell_id], runs, db, f"cell `{cell_id}`")
    return _written("\n".join(out) + "\n", roots, None)
