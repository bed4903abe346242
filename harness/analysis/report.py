"""Reports: a markdown issue body for a failure signature or for one cell, written from evidence. Pure.

What a maintainer needs to act, in the order they read it: a title, where to file it (the
repository of the innermost frame under test, with cross-links to the other libraries in the
trace), the exact versions, where it passes and where it fails (the contrast table, the
columns that vary in bold), which release introduced or fixed it, a repro command, and the
end of the traceback. Nothing here queries or prints: `harness report` feeds it rows.

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
import re
import shlex
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.analysis.attribution import Transition
from harness.analysis.export import Sources
from harness.analysis.knowngood import KnownGoodSet
from harness.analysis.redact import local_paths
from harness.analysis.repro import build_notes, gpu_note, indexes
from harness.analysis.requirement import StatedRequirement
from harness.analysis.requirement import requirements as stated_requirements
from harness.analysis.rows import (
    Machine,
    axis_sort,
    distance,
    installed,
    is_test,
    machine_class,
    machine_of,
    minor_version,
    node_ids,
    suite_of_run,
)
from harness.analysis.shorttrace import LIMIT, frames_of, short_traceback
from harness.analysis.signature import DEFAULT_LIBRARIES, library_of
from harness.analysis.status import ENV_PROBLEMS, FAILURES, Status, across_runs
from harness.analysis.versions import requirement, version_key

#: Library (canonical name) -> the GitHub repository that takes its issues.
REPOSITORIES = {
    "transformers": "huggingface/transformers",
    "accelerate": "huggingface/accelerate",
    "peft": "huggingface/peft",
    "bitsandbytes": "bitsandbytes-foundation/bitsandbytes",
    "torch": "pytorch/pytorch",
    "tokenizers": "huggingface/tokenizers",
    "safetensors": "huggingface/safetensors",
    "huggingface-hub": "huggingface/huggingface_hub",
    "diffusers": "huggingface/diffusers",
    "trl": "huggingface/trl",
    "optimum": "huggingface/optimum",
}
#: torch raises on behalf of its callers (module calls, meta checks): never a cross-link of its own.
_SUBSTRATE = frozenset({"torch"})
_MAX_CONTRAST_ROWS = 24
#: A failure seen in many tests: the summary lists this many, the contrast table has a column for this many.
_SHOWN_TESTS = 12
_TABLE_COLUMNS = 4


def repository(library: str) -> str:
    """`accelerate` -> `huggingface/accelerate`; "" for a library we know no tracker of."""
    return REPOSITORIES.get(str(canonicalize_name(library)), "") if library else ""


def shorten_paths(text: str) -> str:
    """Runner-specific prefixes out: `/tmp/envs/x/lib/python3.11/site-packages/peft/…` -> `site-packages/peft/…`."""
    return local_paths(text)


def _tail(text: str, lines: int = LIMIT) -> str:
    kept = text.rstrip().splitlines()
    cut = len(kept) - lines
    return (f"… ({cut} line(s) above)\n" if cut > 0 else "") + "\n".join(kept[-lines:])


def _fence(text: str, lang: str = "text") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def code(text: str) -> str:
    """Inline code that survives backticks inside: `x`, or ``a `b` c``."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _short(signature: str, limit: int = 160) -> str:
    """A long signature cut in its message, keeping ` @ location` whole: the location names the library."""
    if len(signature) <= limit:
        return signature
    message, at, location = signature.rpartition(" @ ") if " @ " in signature else (signature, "", "")
    keep = max(limit - len(at) - len(location) - 1, 40)
    return message[:keep].rstrip() + "…" + at + location


def _cell_text(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _when(value: Any) -> str:
    return str(value or "").replace("T", " ")[:16]


# -- cells -----------------------------------------------------------------------------------
@dataclass
class _Cell:
    """One cell's outcomes on one machine class (outcomes of two machines are never pooled)."""

    cell_id: str
    versions: dict[str, str]
    machine: str = ""
    rows: dict[str, list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    def all_rows(self) -> list[Mapping[str, Any]]:
        return [r for rows in self.rows.values() for r in rows]

    def sort_key(self) -> tuple[Any, ...]:
        return (*(version_key(self.versions.get(a)) for a in axis_sort(self.versions)), self.machine, self.cell_id)


def _group(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], _Cell]:
    """(cell id, machine label) -> the cell's outcomes there."""
    cells: dict[tuple[str, str], _Cell] = {}
    for row in rows:
        key = (str(row.get("cell_id") or ""), machine_of(row).label())
        if key not in cells:
            cells[key] = _Cell(key[0], installed(row), key[1])
        cells[key].rows[str(row["scenario"])].append(row)
    return cells


def _word(rows: Sequence[Mapping[str, Any]], signature: str | None = None) -> str:
    """One scenario in one cell as a table entry: `passes`, `**fails** (error)`, `flaky: fails 1/3`,
    `flaky across runs: fails in 1 of 2 runs`, …

    With `signature`, a failure with another signature is `other failure`; without, every
    failure is named by its exception type. A cell whose history flipped with nothing changed
    (`queries.mark_flaky`) is flaky across runs, whatever its current outcomes say.
    """
    if not rows:
        return "not run"
    n = len(rows)
    count = f" {n}/{n}" if n > 1 else ""
    statuses = Counter(str(r["status"]) for r in rows)
    marked = any("flaky_across" in r and signature in (None, r.get("flaky_signature")) for r in rows)
    if statuses[Status.PASS] == n and not marked:
        return f"passes{count}"
    if signature is not None:
        hits = [r for r in rows if r["status"] in FAILURES and (r.get("signature") or r["status"]) == signature]
        if len(hits) == n and not marked:
            return f"**fails** ({hits[0]['status']}){count}"
        if hits or marked:
            return _flaky_word(rows, hits, marked)
    failing = [r for r in rows if r["status"] in FAILURES]
    if (failing and statuses[Status.PASS]) or (marked and (failing or statuses[Status.PASS] == n)):
        return _flaky_word(rows, failing, marked)
    if failing:
        status, kind = str(failing[0]["status"]), str(failing[0].get("exception_type") or "")
        if signature is not None:
            return f"other failure: {kind or status}"
        return f"**{status}**{count}" + (f": {kind}" if kind else "")
    status = statuses.most_common(1)[0][0]
    return status.replace("_", " ")


def _flaky_word(rows: Sequence[Mapping[str, Any]], failing: Sequence[Mapping[str, Any]], marked: bool) -> str:
    """`flaky across runs: fails in 1 of 2 runs` where each run agreed with itself, else `flaky: fails 1/3` (its repeats)."""
    mine = {id(r) for r in failing}
    split = across_runs(rows, lambda r: id(r) in mine, marked)
    return f"flaky across runs: fails in {split[0]} of {split[1]} runs" if split else f"flaky: fails {len(failing)}/{len(rows)}"


def _contrast(
    cells: Sequence[_Cell],
    scenarios: Sequence[str],
    signature: str | None,
    focus: Iterable[str] = (),
    mark: str = "",
    evidence: Iterable[str] = (),
) -> list[str]:
    """The markdown table: one row per cell, every axis, the varying axes in bold.

    focus: cells to keep and mark (`← this cell`). evidence: cells to keep first when there
    are too many to show (the ones the attribution compares).
    """
    if not cells:
        return []
    focus = set(focus)
    shown = _select(cells, scenarios, signature, focus, set(evidence))
    omitted = len(cells) - len(shown)
    axes = axis_sort({a for c in shown for a in c.versions})
    varying = {a for a in axes if len({c.versions.get(a) for c in shown}) > 1}
    machines = len({c.machine for c in shown}) > 1  # outcomes of two machines are never compared: say which is which
    header = [f"**{a}**" if a in varying else a for a in axes] + (["**machine**"] if machines else []) + [f"`{s}`" for s in scenarios]
    header += ["cell"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cell in shown:
        values = [f"**{cell.versions.get(a, '')}**" if a in varying else cell.versions.get(a, "") for a in axes]
        words = [_word(cell.rows.get(s, []), signature) for s in scenarios]
        label = f"`{cell.cell_id}`" + (f" {mark}" if mark and cell.cell_id in focus else "")
        where = [f"**{cell.machine}**"] if machines else []
        lines.append("| " + " | ".join(_cell_text(v) for v in [*values, *where, *words, label]) + " |")
    if omitted:
        lines.append(
            f"\n{omitted} more cell(s) not shown: the rows above are the ones the attribution compares and failing cells "
            "next to passing ones; `harness summary` lists every cell."
        )
    return lines


def _select(cells: Sequence[_Cell], scenarios: Sequence[str], signature: str | None, focus: set[str], evidence: set[str]) -> list[_Cell]:
    """Every cell when they fit; else the focused and evidence cells, then failing cells with a passing neighbour."""
    ordered = sorted(cells, key=lambda c: c.sort_key())
    if len(ordered) <= _MAX_CONTRAST_ROWS:
        return ordered
    keep = [c for c in ordered if c.cell_id in focus or c.cell_id in evidence]
    if len(keep) < _MAX_CONTRAST_ROWS:

        def fails(cell: _Cell) -> bool:
            return any(_word(cell.rows.get(s, []), signature).startswith(("**", "flaky")) for s in scenarios)

        failing = [c for c in ordered if fails(c)]
        passing_shadows = {key for c in ordered if not fails(c) for key in _shadows(c)}
        contrasts = [c for c in failing if _shadows(c) & passing_shadows]
        # One failing cell and its passing neighbours at a time, until the table is full.
        for cell in contrasts:
            if len(keep) >= _MAX_CONTRAST_ROWS:
                break
            mine = _shadows(cell)
            group = [cell, *(c for c in ordered if not fails(c) and _shadows(c) & mine)]
            keep += [c for c in group if c not in keep][: _MAX_CONTRAST_ROWS - len(keep)]
    chosen = {id(c) for c in keep[: _MAX_CONTRAST_ROWS * 2]}
    return [c for c in ordered if id(c) in chosen]


def _shadows(cell: _Cell) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The cell with one axis left out, for every axis: two cells one axis apart share exactly one."""
    items = sorted(cell.versions.items())
    return {(axis, tuple(i for i in items if i[0] != axis)) for axis, _ in items}


# -- traces and blame ------------------------------------------------------------------------
def _trace(row: Mapping[str, Any]) -> str:
    """The last frames, each with its line, the frame under test marked (`shorttrace`), at most 40 lines."""
    text = str(row.get("traceback") or "")
    if not text.strip():
        message = str(row.get("message") or "")
        tail = str(row.get("output_tail") or "")
        text = "\n".join(t for t in (tail.rstrip(), message) if t.strip() and t.strip() not in tail)
    return short_traceback(text, str(row.get("signature") or ""))


def libraries_in_trace(traceback: str, libraries: Iterable[str] = DEFAULT_LIBRARIES) -> list[tuple[str, str]]:
    """(library, innermost `path.py:function` of it) for every library under test in the trace, outermost first."""
    innermost: dict[str, str] = {}
    for filename, function in frames_of(traceback):
        lib, relative = library_of(filename, tuple(libraries))
        if lib:
            innermost.pop(lib, None)  # re-insert: the order is that of the innermost frames
            innermost[lib] = f"{relative}:{function}" if function else relative
    return list(innermost.items())


def _blamed(rows: Sequence[Mapping[str, Any]], signature: str, transitions: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(library, why): the frame the signature names; else the library whose releases the answers move."""
    counted = Counter(str(r.get("blamed_library") or "") for r in rows if r.get("blamed_library"))
    if counted:
        library = counted.most_common(1)[0][0]
        location = signature.split(" @ ", 1)[1] if " @ " in signature else ""
        return library, f"the innermost frame under test is `{location}`" if location else "the innermost frame under test is in it"
    if " @ " in signature:
        location = signature.rsplit(" @ ", 1)[1]
        return location.split("/", 1)[0], f"the innermost frame under test is `{location}`"
    return _by_releases(transitions, str(rows[0].get("scenario") or "") if rows else "")


def file_at(rows: Sequence[Mapping[str, Any]], signature: str, transitions: Sequence[Mapping[str, Any]]) -> str:
    """The library a failure is filed at, as its report's "File at" names it; "" where undetermined."""
    return _blamed(rows, signature, [t for t in transitions if t.get("signature", signature) == signature])[0]


#: The answers a "File at" line quotes at most.
_QUOTED = 3


def _by_releases(transitions: Sequence[Mapping[str, Any]], scenario: str) -> tuple[str, str]:
    """(library, why) where the failing frame is the scenario's or the test's own code: the library whose
    releases introduced or fixed it, where one explains it. That is the only axis the answers move; else
    the only one with an exact introduction (its releases brought it, whatever others did); else, with
    no introduction, the only one with an exact fix. ("", "") where none does."""
    moves = [Transition.from_dict(t) for t in transitions if t.get("kind") in ("introduced", "fixed") and t.get("axis")]
    axes = {t.axis for t in moves}
    introduced = {t.axis for t in moves if t.kind == "introduced" and t.exact}
    fixed = {t.axis for t in moves if t.kind == "fixed" and t.exact}
    chosen = axes if len(axes) == 1 else introduced if len(introduced) == 1 else fixed if not introduced and len(fixed) == 1 else set()
    if not chosen:
        return "", ""
    axis = next(iter(chosen))
    mine = [t for t in moves if t.axis == axis]
    answers = list(dict.fromkeys(t.headline() for t in sorted(mine, key=lambda t: (not t.exact, t.kind != "introduced"))))
    own = "the test's own code" if is_test(scenario) else "the scenario's own check"
    only = "only " if len(axes) == 1 else ""
    why = f"the failing frame is {own}, and {only}{axis}'s releases change it: {'; '.join(answers[:_QUOTED])}"
    fixes = sorted((t.after for t in mine if t.kind == "fixed" and t.exact), key=version_key)
    if fixes and any(t.kind == "introduced" for t in mine):  # (a fix alone has its note above the summary)
        why += f". It is fixed in {axis} {fixes[0]}: file only if it fails with the newest release, or say there that it is fixed"
    return axis, why


def _file_at(library: str, why: str, others: Sequence[tuple[str, str]]) -> list[str]:
    repo = repository(library)
    if repo:
        lines = [f"**File at:** {repo} — {why} ([new issue](https://github.com/{repo}/issues/new))."]
    elif library:
        lines = [f"**File at:** the `{library}` project — {why}."]
    else:
        lines = ["**File at:** undetermined — no frame inside a library under test, and no single library's releases explain it."]
    links = [f"{repository(lib) or lib} (`{where}`)" for lib, where in others if lib != library and lib not in _SUBSTRATE]
    if links:
        lines.append(f"**Cross-link:** {', '.join(links)} — also in the traceback.")
    return lines


def _headline(row: Mapping[str, Any]) -> str:
    """The exception as raised, first line: `TypeError: Params4bit.__new__() got …`."""
    message = str(row.get("message") or "").strip()
    first = message.splitlines()[0].strip() if message else ""
    kind = str(row.get("exception_type") or "")
    if kind and first and not first.startswith(kind):
        first = f"{kind}: {first}"
    first = local_paths(first or str(row.get("signature") or row["status"]))  # cut after: a path cut in two is not found again
    return first if len(first) <= 140 else first[:139] + "…"


#: A suggested title fits in a line of an issue tracker's list.
TITLE_LIMIT = 100


def suggested_title(headline: str, library: str, version: str = "", limit: int = TITLE_LIMIT) -> str:
    """The exception and its library in at most `limit` characters: `… (accelerate 1.13.0)`, the version
    left out where it does not fit, the message cut where the library alone does not; a file the message
    ends on (`(site-packages/peft/x.py)`) left out first.

    >>> suggested_title("TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'", "accelerate", "1.13.0")
    "TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized' (accelerate)"
    >>> len(suggested_title("ScenarioFailed: keys " + str([f"model.layers.{i}.mlp" for i in range(20)]), "peft", "0.19.0"))
    100
    """
    headline = re.sub(r" \((?:[\w.<>~-]+/)+[\w.-]+\.py\)$", "", headline)  # the file of an ImportError: no title needs it
    tails = [f" ({library} {version})", f" ({library})"] if library and version else [f" ({library})"] if library else [""]
    for tail in tails:
        if len(headline) + len(tail) <= limit:
            return headline + tail
    return headline[: limit - len(tails[-1]) - 1].rstrip() + "…" + tails[-1]


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
    lines += [f"| {a} | {_cell_text(versions[a])} |" for a in axis_sort(versions)]
    gpu = row.get("gpu") or host.get("gpu") or ""
    details = [
        ("python", _python(row, record)),
        ("CUDA", machine_of(row).cuda),  # what torch's build was built for (`+cu130`, or PyPI's default build)
        ("platform", row.get("platform") or host.get("platform") or ""),
        ("GPU", gpu + _gpu_detail(host)),
        ("run", f"{row.get('run_id', '')}, {_when(row.get('started_at'))} UTC"),
    ]
    lines += [f"| {k} | {_cell_text(str(v))} |" for k, v in details if v]
    freeze = (record or {}).get("installed") or row.get("installed") or {}
    if isinstance(freeze, str):
        freeze = json.loads(freeze) if freeze else {}
    if freeze:
        body = "\n".join(requirement(p, str(v)) for p, v in sorted(freeze.items()))
        lines += ["", f"<details><summary>Every installed package ({len(freeze)}, from the env's <code>uv pip freeze</code>)</summary>", ""]
        lines += [_fence(body), "", "</details>"]
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


@dataclass(frozen=True)
class Repro:
    """The one-file repro `harness report --repro` wrote beside the report (`analysis.repro`), and its passing twin."""

    name: str  # `repro.py`: the report names it by its file name only
    script: str  # its text, shown collapsed in the report
    passing_name: str = ""  # `repro-passing.py`, or "" where no passing set lies one step away
    change: str = ""  # what the passing set changes: `peft 0.19.0 instead of 0.18.1`
    gpus: int = 0  # the GPUs the scenario needs (its REQUIRES)


def _public(url: str) -> bool:
    """An index another machine can reach: http(s), and not this host."""
    return url.startswith(("https://", "http://")) and re.match(r"https?://(?:localhost|127\.|0\.0\.0\.0|\[::1\])", url) is None


def repro_pins(row: Mapping[str, Any], run: Mapping[str, Any], tests: bool) -> list[str]:
    """What reproduces `row`'s cell: its axes exactly and, for a test, what the run added for its suite (pytest, plugins)."""
    versions = installed(row)
    pins = [requirement(a, versions[a]) for a in axis_sort(versions)]
    return pins + (_suite_pins(run.get("settings") or {}, row, versions) if tests else [])


def _repro(
    cell_id: str,
    row: Mapping[str, Any],
    scenarios: Sequence[str],
    runs: Mapping[str, Mapping[str, Any]],
    scenario_files: Mapping[str, str],
    nodes: Mapping[str, str] | None = None,
    repro: Repro | None = None,
) -> list[str]:
    """How to reproduce `scenarios` in one cell: the one-file script when one was written, then the
    commands; a test by the node id that cell's pytest gave it (`nodes`: identity -> node id, `rows.node_ids`).
    Nothing in it names this machine: a PyTorch-index build gets that public index, a local source a comment."""
    run = runs.get(str(row.get("run_id")), {})
    settings = run.get("settings") or {}
    sources = Sources.from_settings(settings)
    tests = [(nodes or {}).get(s, s) for s in scenarios if is_test(s)]
    pins = repro_pins(row, run, bool(tests))
    public = [u for u in (sources.index_url, *sources.extra_index_urls) if u and _public(u)]
    index = (["--index-url", sources.index_url] if sources.index_url in public else []) + [
        w for u in sources.extra_index_urls if u in public for w in ("--extra-index-url", u)
    ]
    builds = list(dict.fromkeys(url for _, url in indexes(pins) if url not in public))
    index += [w for url in builds for w in ("--extra-index-url", url)]
    lines = ["```bash"]
    install = " ".join(_quote(w) for w in ["pip", "install", *index, *pins])
    lines += ["# the failing versions, exactly (every other package: the freeze above)", install]
    local = [u for u in (sources.index_url, *sources.extra_index_urls) if u and not _public(u)]
    if local or settings.get("find_links"):
        lines.append("# the run also took packages from a source of its machine's own (a folder of wheels or a local index)")
    matrix = str(run.get("matrix_path") or "matrix.toml")
    matrix = matrix if not matrix.startswith(("/", "\\")) and ":" not in matrix[:3] else matrix.replace("\\", "/").rsplit("/", 1)[-1]
    picks = [f"--scenario {_quote(s)}" for s in scenarios if not is_test(s)]
    if len(tests) < len(scenarios):
        lines.append("# the scenario: a standalone script; its helpers (_*.py) sit next to it in the harness's scenarios/")
        lines += [f"python {scenario_files.get(s) or f'scenarios/{s}.py'}" for s in scenarios if not is_test(s)]
    if tests:
        suite = suite_of_run(run)
        package, repo = str(suite.get("of") or ""), str(suite.get("git") or "")
        if package:
            shown = repo if repo and _public(repo) else ""
            version = installed(row).get(package, "")
            lines.append(f"# the tests of {package} {version}: from a checkout of {shown or 'its repository'} at that tag")
            where = f" --tests-of {_quote(package)}" + (f" --tests-git {_quote(shown or f'<a clone of {package}>')}" if repo else "")
        else:
            lines.append("# the test, from the suite's root: where it runs pytest (its conftest.py files and configuration apply)")
            where = " --tests-root ." if suite.get("root") else ""
        lines += [f"python -m pytest {' '.join(_quote(t) for t in tests)}"]
        picks.append(f"--tests {' '.join(_quote(t) for t in tests)}{where}")
    lines += [
        "# or let the harness build the env and run it" + (" (from the same folder)" if tests and not suite_of_run(run).get("of") else ""),
        f"harness sweep --matrix {_quote(matrix)} --cell {cell_id} {' '.join(picks)}",
        "```",
    ]
    return (_one_file(repro, pins, machine_of(row)) if repro else []) + lines


def _one_file(repro: Repro, pins: Sequence[str], machine: Machine | None = None) -> list[str]:
    """The one-file repro first: the two commands, where it failed, which torch build and how to get it (and
    how to run it without that GPU), the script collapsed."""
    width = max(len(repro.name), len(repro.passing_name))
    out = [
        f"One file, nothing to check out: `{repro.name}` (below) is a [PEP 723](https://peps.python.org/pep-0723/) script that pins "
        "the failing set and carries the code that fails; [uv](https://docs.astral.sh/uv/) builds a fresh environment for it.",
        "",
        "```bash",
        f"uv run {repro.name.ljust(width)}   # fails (exit 1) and prints the signature",
    ]
    if repro.passing_name:
        out.append(f"uv run {repro.passing_name.ljust(width)}   # {repro.change}: passes (exit 0)")
    out.append("```")
    if machine:
        out += ["", f"It failed on {machine.label()}." + (f" {gpu_note(repro.gpus)}" if repro.gpus else "")]
    for sentence, command in build_notes(pins, machine.cuda if machine else "", repro.name):
        out += ["", sentence + (f" `{command}`" if command else "")]
    lines = len(repro.script.splitlines())
    out += ["", f"<details><summary><code>{repro.name}</code> ({lines} lines)</summary>", "", _SCRIPT, "", "</details>", ""]
    out += ["Or, in an environment of your own:", ""]
    return out


#: Where the script goes in a report: after the paths of the rest are written from their roots (the script is left as it is).
_SCRIPT = "<!-- harness report: the script -->"


def _suite_pins(settings: Mapping[str, Any], row: Mapping[str, Any], versions: Mapping[str, str]) -> list[str]:
    """The packages a run added to every cell for its suite (`extra_requirements`: pytest, plugins,
    the suite's requirements), at the versions this cell's freeze has; unpinned where it has none."""
    freeze = {str(canonicalize_name(k)): str(v) for k, v in _freeze(row).items()}
    axes = {str(canonicalize_name(a)) for a in versions}
    pins = []
    for wanted in settings.get("extra_requirements") or []:
        try:
            name = str(canonicalize_name(Requirement(str(wanted)).name))
        except InvalidRequirement:
            continue
        if name not in axes:
            pins.append(requirement(name, freeze[name]) if name in freeze else str(wanted))
    return list(dict.fromkeys(pins))


def _freeze(row: Mapping[str, Any]) -> dict[str, Any]:
    found = row.get("installed") or {}
    if isinstance(found, str):
        found = json.loads(found) if found else {}
    return dict(found) if isinstance(found, Mapping) else {}


def _quote(word: str) -> str:
    return shlex.quote(word)


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
    when = sorted(_when(r.get("started_at")) for r in rows if r.get("started_at"))
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
    passing = [s for s in scenarios if s in good.kept]
    others = [s for s in scenarios if s not in good.kept and s not in good.not_applicable]
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
    signature: str, rows: Iterable[Mapping[str, Any]], transitions: Iterable[Mapping[str, Any]] = (), lead: str = ""
) -> Mapping[str, Any]:
    """The outcome a signature report shows and reproduces: of the scenario (or test) that leads
    (`lead`, else the one failing in most cells, then the clearest contrast), the newest failing
    set, newest first on the blamed library's axis."""
    rows = list(rows)
    hits = [r for r in rows if r["status"] in FAILURES and (r.get("signature") or r["status"]) == signature]
    if not hits:
        raise ValueError(f"no failing outcome has the signature {signature!r}")
    scenarios = _ordered(signature, rows, hits, lead)
    primary = [r for r in hits if r["scenario"] == scenarios[0]]
    library, _ = _blamed(hits, signature, [t for t in transitions if t.get("signature", signature) == signature])
    order = [library, *axis_sort(installed(primary[0]))] if library else axis_sort(installed(primary[0]))
    return max(primary, key=lambda r: (*(version_key(installed(r).get(a)) for a in order), _when(r.get("started_at"))))


def _ordered(signature: str, rows: Sequence[Mapping[str, Any]], hits: Sequence[Mapping[str, Any]], lead: str = "") -> list[str]:
    """The scenarios a signature shows in: `lead` first, then those failing in most cells, then the clearest contrast."""
    showing = {r["scenario"] for r in hits}
    grouped = _group(r for r in rows if r["scenario"] in showing)

    def counts(scenario: str) -> tuple[int, int]:
        words = [_word(c.rows[scenario], signature) for c in grouped.values() if c.rows.get(scenario)]
        return sum(w.startswith("**fails**") for w in words), sum(w.startswith("passes") for w in words)

    return sorted({str(s) for s in showing}, key=lambda s: (s != lead, -counts(s)[0], -counts(s)[1], s))


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
    grouped = _group(r for r in rows if r["scenario"] in set(scenarios))

    def counts(scenario: str) -> tuple[int, int, int, int]:
        """(cells where it fails with this signature, where it passes, where it is flaky, cells tested) for one scenario."""
        words = [_word(c.rows[scenario], signature) for c in grouped.values() if c.rows.get(scenario)]
        fails, passes = sum(w.startswith("**fails**") for w in words), sum(w.startswith("passes") for w in words)
        return fails, passes, sum(w.startswith("flaky") for w in words), len(words)

    relevant = [r for r in rows if r["scenario"] in set(scenarios)]
    library, why = _blamed(hits, signature, moves)
    libs = tuple(dict.fromkeys([*DEFAULT_LIBRARIES, *(a for c in grouped.values() for a in c.versions)]))
    example = example_of(signature, rows, moves, lead)
    trace = _trace(example)
    versions = installed(example)
    headline = _headline(example)
    title = suggested_title(headline, library, versions.get(library, ""))

    out = [f"<!-- harness report: {signature} -->", f"**Suggested title:** {title}", ""]
    out += _file_at(library, why, libraries_in_trace(str(example.get("traceback") or ""), libs))
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
    out += ["", _fence(local_paths(str(example.get("message") or headline).strip())), ""]
    out += ["### Environment (the newest failing set)", "", *_environment(example, cells.get(str(example["cell_id"])), runs), ""]
    # The cells of the transitions the attribution section lists, and the example, come first.
    compared = {str(t.get(k)) for t in _listed(moves) for k in ("before_cell", "after_cell") if t.get(k)} | {str(example["cell_id"])}
    table = _contrast(list(grouped.values()), scenarios[:_TABLE_COLUMNS], signature, evidence=compared)
    out += ["### Where it passes and where it fails", "", *table, ""]
    if len(scenarios) > _TABLE_COLUMNS:
        out += [f"(the first {_TABLE_COLUMNS} of {len(scenarios)} with this failure; the summary above counts each)", ""]
    out += ["### Attribution", "", *_attribution(moves), ""]
    out += _known_good(known_good or {}, example, scenarios)
    nodes = node_ids(rows, str(example["cell_id"]))
    out += ["### Reproduce", "", *_repro(str(example["cell_id"]), example, scenarios[:_TABLE_COLUMNS], runs, files, nodes, repro), ""]
    out += ["### Traceback (the last frames)", "", _fence(trace) if trace.strip() else "(none recorded)", ""]
    family = str(example.get("signature_family") or "")
    out += _footer(relevant, runs, db, f"signature {code(signature)}" + (f" (family `{family}`)" if family else ""))
    return _written("\n".join(out) + "\n", roots, repro)


def _written(markdown: str, roots: Sequence[tuple[str, str]], repro: Repro | None) -> str:
    """Every path written from its root, then the script put in as it is (it is the user's code)."""
    markdown = local_paths(markdown, roots)
    if repro is None:
        return markdown
    return markdown.replace(_SCRIPT, _fence(repro.script.rstrip("\n"), "python"), 1)


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
    grouped = _group(rows)
    own = [c for (cid, _), c in grouped.items() if cid == cell_id]
    if not own:
        raise ValueError(f"no outcome of cell {cell_id!r}")
    # A cell run on several machines: the report is about the machine of its newest outcome.
    cell = max(own, key=lambda c: max(_when(r.get("started_at")) for r in c.all_rows()))
    moves = list(transitions)
    scenarios = sorted(cell.rows)
    failing = [s for s in scenarios if any(r["status"] in FAILURES for r in cell.rows[s])]
    env_problem = [s for s in scenarios if all(r["status"] in ENV_PROBLEMS for r in cell.rows[s])]
    example = max(cell.all_rows(), key=lambda r: _when(r.get("started_at")))
    named = ", ".join(f"{a} {v}" for a, v in ((a, cell.versions[a]) for a in axis_sort(cell.versions)))

    if failing:
        first = next(r for r in cell.rows[failing[0]] if r["status"] in FAILURES)
        lead = _headline(first) if len(failing) == 1 else f"{len(failing)} of {len(scenarios)} scenarios fail"
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
        library, why = _blamed([hit], signature, moves_here)
        trace = _trace(hit)
        libs = tuple(dict.fromkeys([*DEFAULT_LIBRARIES, *cell.versions]))
        sections += [f"#### `{scenario}`: {_word(cell.rows[scenario])}", ""]
        doc = _paragraph(docs.get(scenario, ""))
        sections += [doc, ""] if doc else []
        sections += _file_at(library, why, libraries_in_trace(str(hit.get("traceback") or ""), libs))
        sections += ["", f"Signature: {code(signature)}", ""]
        if moves_here:
            sections += ["Attribution:", "", *_attribution(moves_here), ""]
        fenced = _fence(trace) if trace.strip() else "(no traceback recorded)"
        if len(failing) > 2:  # many failures: keep the page scannable
            sections += ["<details><summary>Traceback (tail)</summary>", "", fenced, "", "</details>", ""]
        else:
            sections += [fenced, ""]

    out += ["### Summary", ""]
    out += ["| scenario | outcome | signature |", "|---|---|---|"]
    for scenario in scenarios:
        srows = cell.rows[scenario]
        sig = next((str(r.get("signature") or "") for r in srows if r["status"] != Status.PASS and r.get("signature")), "")
        short = _short(sig)
        shown = str(srows[0].get("node_id") or scenario) if srows else scenario  # this cell's own node id
        out.append(f"| `{shown}` | {_cell_text(_word(srows))} | {_cell_text(code(short) if sig else '')} |")
    out.append("")
    out += ["### Environment", "", *_environment(example, cell_record, runs), ""]
    out += _known_good(known_good or {}, example, failing)
    record = cell_record or {}
    if record.get("env_status") and record.get("env_status") != "ready":
        out += [f"The environment did not build ({record['env_status']}); the resolver's or installer's words:", ""]
        out += [_fence(_tail(str(record.get("env_message") or ""))), ""]
    if failing:
        # Neighbours on the same machine only: another machine's outcome is no contrast.
        neighbours = [
            c
            for c in grouped.values()
            if c is cell or (c.machine == cell.machine and distance(c.versions, cell.versions) == 1 and any(s in c.rows for s in failing))
        ]
        out += ["### This cell and its neighbours (one version different)", ""]
        out += [*_contrast(neighbours, failing, None, focus=[cell_id], mark="← this cell"), ""]
        out += ["### Failures", "", *sections]
        out += ["### Reproduce", "", *_repro(cell_id, example, failing, runs, files, node_ids(rows, cell_id)), ""]
    out += _footer([r for r in rows if r.get("cell_id") == cell_id], runs, db, f"cell `{cell_id}`")
    return _written("\n".join(out) + "\n", roots, None)
