"""attribution.py: transitions along each axis with the other axes held fixed, from outcome rows alone."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from harness.analysis.attribution import Transition, attribute, seen_versions, to_rows
from harness.render.summary import render, render_transitions

SIG = (
    "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized'"
    " @ accelerate/utils/modeling.py:set_module_tensor_to_device"
)
OTHER = "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward"
ACC_MAIN = "git+https://github.com/huggingface/accelerate@main"
# Value order (0… before f…) is the opposite of commit order in COMMITS: a test that passes
# only when commit_order is used.
SHA_OLD = "f" * 40
SHA_MID = "7" * 40
SHA_NEW = "0" * 40
COMMITS = {"accelerate": [SHA_OLD, SHA_MID, SHA_NEW]}

BASE = {"torch": "2.13.0", "transformers": "5.6.2", "accelerate": "1.13.0", "peft": "0.19.1"}
HELD_ACC = "torch 2.13.0, transformers 5.6.2, peft 0.19.1"  # BASE without accelerate
HELD_TF = "torch 2.13.0, accelerate 1.13.0, peft 0.19.1"  # BASE without transformers
HELD_ALL = "torch 2.13.0, transformers 5.6.2, accelerate 1.13.0, peft 0.19.1"  # all of BASE

#: what one repeat shows: status and signature
SHOWS = {
    "has": ("error", SIG),
    "pass": ("pass", ""),
    "other": ("error", OTHER),
    "n/a": ("not_applicable", ""),
    "inc": ("inconclusive", ""),
    "unresolvable": ("unresolvable", "unresolvable: <n> conflicts"),
}


def cell(statuses: str, run: str = "r1", commit: str = "", started: str = "", **axes: str) -> list[dict[str, Any]]:
    """Rows of one cell: BASE with `axes` changed, one row per word of `statuses`."""
    versions = {**BASE, **axes}
    cell_id = "-".join(f"{k}{v}" for k, v in versions.items()) + (f"-{commit[:4]}" if commit else "")
    rows = []
    for repeat, word in enumerate(statuses.split()):
        status, signature = SHOWS[word]
        rows.append(
            {
                "run_id": run,
                "cell_id": cell_id,
                "scenario": "load",
                "repeat": repeat,
                "status": status,
                "signature": signature,
                "signature_family": "fam-" + signature[:3] if signature else "",
                "versions": versions,
                "git_commits": {"accelerate": commit} if commit else {},
                "started_at": started,
            }
        )
    return rows


def rows_of(*cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for c in cells for row in c]


#: (rows, attribute() keyword arguments, [(signature, describe())] in the order returned)
CASES = [
    pytest.param(
        # pass -> fail between neighbouring releases: a point, with the other axes named
        rows_of(cell("pass", accelerate="1.13.0"), cell("has", accelerate="1.14.0")),
        {},
        [(SIG, f"introduced in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}")],
        id="simple-introduced",
    ),
    pytest.param(
        # fail -> pass -> pass: one fix, not one per clean neighbour
        rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0"), cell("pass", accelerate="1.15.0")),
        {},
        [(SIG, f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}")],
        id="simple-fixed",
    ),
    pytest.param(
        # releases the index knows but the sweep skipped make a range; 1.16.0 lies outside it
        rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.15.0")),
        {"known_versions": {"accelerate": ["1.13.0", "1.14.0", "1.14.1", "1.15.0", "1.16.0"]}},
        [(SIG, f"fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0, 1.14.1 — with {HELD_ACC}")],
        id="gap-gives-range",
    ),
    pytest.param(
        # a version tested on another line (peft 0.21.2) is known, so this line's gap shows it
        rows_of(
            cell("has", accelerate="1.13.0"),
            cell("pass", accelerate="1.15.0"),
            cell("pass", accelerate="1.14.0", peft="0.21.2"),
        ),
        {},
        [(SIG, f"fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0 — with {HELD_ACC}")],
        id="gap-known-from-other-lines",
    ),
    pytest.param(
        # fixed, then broken again: two transitions, in version order
        rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0"), cell("has", accelerate="1.15.0")),
        {},
        [
            (SIG, f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}"),
            (SIG, f"introduced in accelerate 1.15.0 (after 1.14.0) — with {HELD_ACC}"),
        ],
        id="comes-back",
    ),
    pytest.param(
        # Gemma 4 does not exist before transformers 5.5: not_applicable is not a pass, so no fix
        rows_of(cell("n/a", transformers="5.4.0"), cell("has", transformers="5.5.0"), cell("has", transformers="5.6.2")),
        {},
        [],
        id="not-applicable-is-not-a-fix",
    ),
    pytest.param(
        # ... and not_applicable between a failure and a pass widens the fix to a range
        rows_of(cell("has", transformers="5.5.0"), cell("n/a", transformers="5.5.1"), cell("pass", transformers="5.6.2")),
        {},
        [(SIG, f"fixed between transformers 5.5.0 (fails) and 5.6.2 (passes); inconclusive: 5.5.1 (not_applicable) — with {HELD_TF}")],
        id="not-applicable-between",
    ),
    pytest.param(
        # an env that did not build says nothing either way
        rows_of(cell("unresolvable", accelerate="1.12.0"), cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0")),
        {},
        [(SIG, f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}")],
        id="unresolvable-is-skipped",
    ),
    pytest.param(
        # 1.14.0 fails with another bug: it is neither "has" nor "clean" for SIG, so SIG's fix is a
        # range; the other signature gets its own fix, and no "introduced" from SIG's cell
        rows_of(cell("has", accelerate="1.13.0"), cell("other", accelerate="1.14.0"), cell("pass", accelerate="1.15.0")),
        {},
        [
            (OTHER, f"fixed in accelerate 1.15.0 (after 1.14.0) — with {HELD_ACC}"),
            (SIG, f"fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); inconclusive: 1.14.0 (other failure) — with {HELD_ACC}"),
        ],
        id="other-signature-is-a-skip",
    ),
    pytest.param(
        # 1.14.0 fails in 2 of 3 repeats: stepped over, so the fix is a range naming it
        rows_of(cell("has", accelerate="1.13.0"), cell("has pass has", accelerate="1.14.0"), cell("pass", accelerate="1.15.0")),
        {},
        [(SIG, f"fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); inconclusive: 1.14.0 (flaky 2/3) — with {HELD_ACC}")],
        id="flaky-is-stepped-over",
    ),
    pytest.param(
        # runs that never reached the setup (inconclusive) say nothing: the runs that did decide,
        # so an older unproven run neither hides the fix nor makes the cells look flaky
        rows_of(cell("has", accelerate="1.13.0"), cell("inc", run="r0", accelerate="1.13.0"), cell("inc pass", accelerate="1.14.0")),
        {},
        [(SIG, f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}")],
        id="inconclusive-repeats-are-not-evidence",
    ),
    pytest.param(
        # ... but a cell with nothing but inconclusive repeats is no pass: the fix is a range
        rows_of(cell("has", accelerate="1.13.0"), cell("inc inc", accelerate="1.14.0"), cell("pass", accelerate="1.15.0")),
        {},
        [(SIG, f"fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); inconclusive: 1.14.0 (inconclusive) — with {HELD_ACC}")],
        id="only-inconclusive-is-a-range",
    ),
    pytest.param(
        # the same combination in two runs disagreeing is flaky too: repeats are pooled over runs
        rows_of(cell("pass", accelerate="1.13.0"), cell("has", accelerate="1.14.0"), cell("pass", run="r2", accelerate="1.14.0")),
        {},
        [],
        id="flaky-across-runs",
    ),
    pytest.param(
        # either library fixes it: reported on both axes, each holding the other at its old value;
        # the cell with both new versions is clean on both lines and adds nothing
        rows_of(
            cell("has", accelerate="1.13.0", bitsandbytes="0.49.2"),
            cell("pass", accelerate="1.14.0", bitsandbytes="0.49.2"),
            cell("pass", accelerate="1.13.0", bitsandbytes="0.50.0"),
            cell("pass", accelerate="1.14.0", bitsandbytes="0.50.0"),
        ),
        {},
        [
            (SIG, f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}, bitsandbytes 0.49.2"),
            (SIG, f"fixed in bitsandbytes 0.50.0 (after 0.49.2) — with {HELD_ALL}"),
        ],
        id="either-of-two-libraries",
    ),
    pytest.param(
        # git candidates come after releases and follow commit_order (even against the order in
        # which they were tested); the listed commit between the two is untested
        rows_of(
            cell("has", accelerate="1.13.0"),
            cell("has", commit=SHA_OLD, started="2026-04-20T09:00:00", accelerate=ACC_MAIN),
            cell("pass", run="r2", commit=SHA_NEW, started="2026-04-01T09:00:00", accelerate=ACC_MAIN),
        ),
        {"commit_order": COMMITS},
        [
            (
                SIG,
                "fixed between accelerate main@ffffffffffff (fails) and main@000000000000 (passes); not built: 777777777777"
                f" — with {HELD_ACC}",
            )
        ],
        id="git-commit-order",
    ),
    pytest.param(
        # without commit_order, a moving ref is ordered by when each commit was first tested
        rows_of(
            cell("has", accelerate="1.13.0"),
            cell("has", commit=SHA_OLD, started="2026-04-01T09:00:00", accelerate=ACC_MAIN),
            cell("pass", run="r2", commit=SHA_NEW, started="2026-04-20 09:00:00", accelerate=ACC_MAIN),
        ),
        {},
        [(SIG, f"fixed in accelerate main@000000000000 (after main@ffffffffffff) — with {HELD_ACC}")],
        id="git-by-first-tested",
    ),
    pytest.param(
        # with neither, commits fall back to value order (0… first), which flips the story: the
        # last resort, shown here so that a change to it is deliberate
        rows_of(
            cell("has", accelerate="1.13.0"),
            cell("has", commit=SHA_OLD, accelerate=ACC_MAIN),
            cell("pass", run="r2", commit=SHA_NEW, accelerate=ACC_MAIN),
        ),
        {},
        [
            (SIG, f"fixed in accelerate main@000000000000 (after 1.13.0) — with {HELD_ACC}"),
            (SIG, f"introduced in accelerate main@ffffffffffff (after main@000000000000) — with {HELD_ACC}"),
        ],
        id="git-by-value-last-resort",
    ),
    pytest.param(
        # a release after the git source's base: releases always come first, git after them,
        # and every release newer than `before` is untested when `after` is a git source
        rows_of(cell("has", accelerate="1.13.0"), cell("pass", commit=SHA_NEW, accelerate=ACC_MAIN)),
        {"known_versions": {"accelerate": ["1.12.0", "1.13.0", "1.14.0"]}},
        [(SIG, f"fixed between accelerate 1.13.0 (fails) and main@000000000000 (passes); not built: 1.14.0 — with {HELD_ACC}")],
        id="git-after-releases",
    ),
    pytest.param(
        # rows arrive in any order, and 1.10.0 > 1.9.0 (as strings it would be the other way round)
        list(reversed(rows_of(cell("has", accelerate="1.9.0"), cell("pass", accelerate="1.10.0"), cell("pass", accelerate="1.11.0")))),
        {},
        [(SIG, f"fixed in accelerate 1.10.0 (after 1.9.0) — with {HELD_ACC}")],
        id="unsorted-rows-version-order",
    ),
]


@pytest.mark.parametrize(("rows", "kwargs", "expected"), CASES)
def test_transitions(rows: list[dict[str, Any]], kwargs: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    result = attribute(rows, **kwargs)
    assert [(t.signature, t.describe()) for t in result.transitions] == expected


def test_versions_as_json_strings_like_duckdb_returns_them() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("pass", commit=SHA_NEW, accelerate=ACC_MAIN))
    for row in rows:
        row["versions"] = json.dumps(row["versions"])
        row["git_commits"] = json.dumps(row["git_commits"])
        row["installed"] = json.dumps({"torch": "2.13.0+cpu"})
    (t,) = attribute(rows).transitions
    assert (t.kind, t.axis, t.before, t.after) == ("fixed", "accelerate", "1.13.0", "main@000000000000")
    assert dict(t.held) == {"torch": "2.13.0", "transformers": "5.6.2", "peft": "0.19.1"}


def test_inherited_axis_takes_the_installed_version() -> None:
    # torch = "inherit": what the base interpreter had is the tested version, and it is ordered as one
    rows = []
    for torch, word in (("2.12.0", "pass"), ("2.13.0+cpu", "has")):
        for row in cell(word, accelerate="1.13.0"):
            rows.append(
                {**row, "cell_id": f"c-{torch}", "versions": {**row["versions"], "torch": "inherit"}, "installed": {"torch": torch}}
            )
    (t,) = attribute(rows).transitions
    assert (t.axis, t.kind, t.before, t.after) == ("torch", "introduced", "2.12.0", "2.13.0+cpu")


def test_rows_without_versions_fall_back_to_axis_columns() -> None:
    # a JSON-lines shard's rows have no `versions`, only the axis columns from the freeze
    rows = []
    for row in rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0")):
        versions = row.pop("versions")
        rows.append({**row, **versions})
    assert [t.describe() for t in attribute(rows).transitions] == [f"fixed in accelerate 1.14.0 (after 1.13.0) — with {HELD_ACC}"]


def test_rows_without_any_versions_are_ignored() -> None:
    rows = [{"run_id": "r", "cell_id": "c", "scenario": "s", "repeat": 0, "status": "error", "signature": SIG}]
    assert attribute(rows).transitions == () and attribute(rows).flaky == ()


def test_flaky_cells_are_reported() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("has pass has", accelerate="1.14.0"), cell("pass", accelerate="1.15.0"))
    (flaky,) = attribute(rows).flaky
    assert (flaky.signature, flaky.failed, flaky.repeats) == (SIG, 2, 3)
    assert dict(flaky.versions)["accelerate"] == "1.14.0"
    assert flaky.describe() == "flaky: 2 of 3 repeat(s) with torch 2.13.0, transformers 5.6.2, accelerate 1.14.0, peft 0.19.1"


def test_a_cell_whose_runs_disagree_is_flaky_across_runs_not_in_its_repeats() -> None:
    # repeats = 1: one repeat a run, the first run failed and the second passed
    rows = rows_of(cell("pass", accelerate="1.13.0"), cell("has", accelerate="1.14.0"), cell("pass", run="r2", accelerate="1.14.0"))
    (flaky,) = attribute(rows).flaky
    assert (flaky.across_runs, flaky.runs_failed, flaky.runs_total) == (True, 1, 2)
    versions = "torch 2.13.0, transformers 5.6.2, accelerate 1.14.0, peft 0.19.1"
    assert flaky.describe() == f"flaky across runs: failed in 1 of 2 runs with the same versions ({versions})"
    assert flaky.count() == "1/2 runs" and flaky.to_dict()["across_runs"] is True
    # the history saw the newest run flip with nothing changed (`queries.mark_flaky`): the run before counts too
    marked = rows_of(cell("pass", accelerate="1.13.0"), cell("has", accelerate="1.14.0"))
    for row in marked[1:]:
        row.update(flaky_signature=SIG, flaky_across="flaky across runs: passed in r0, failed in r1 (…) with nothing changed")
    (flaky,) = attribute(marked).flaky
    assert flaky.describe() == f"flaky across runs: failed in 1 of 2 runs with nothing changed ({versions})"
    # repeats of one run that disagree are flaky within the run, as before
    (within,) = attribute(rows_of(cell("has pass", accelerate="1.14.0"), cell("pass", run="r2", accelerate="1.14.0"))).flaky
    assert within.describe() == f"flaky: 1 of 3 repeat(s) with {versions}" and within.count() == "1/3 repeats"


def test_a_cell_passing_sometimes_and_failing_otherwise_is_not_flaky_for_a_signature_it_never_showed() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("pass other", accelerate="1.14.0"), cell("pass", accelerate="1.15.0"))
    result = attribute(rows)
    assert [(f.signature, f.failed, f.repeats) for f in result.flaky] == [(OTHER, 1, 2)]
    assert [t.describe() for t in result.transitions if t.signature == SIG] == [
        f"fixed between accelerate 1.13.0 (fails) and 1.15.0 (passes); inconclusive: 1.14.0 (other failure) — with {HELD_ACC}"
    ]


def test_transition_records_family_cells_and_runs() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("pass", run="r2", accelerate="1.14.0"))
    (t,) = attribute(rows).transitions
    assert t.signature_family == "fam-Typ"
    assert (t.before_cell, t.after_cell) == (rows[0]["cell_id"], rows[1]["cell_id"])
    assert t.runs == ("r1", "r2")
    d = t.to_dict()
    assert d["held"] == {"torch": "2.13.0", "transformers": "5.6.2", "peft": "0.19.1"}
    assert (d["kind"], d["before"], d["after"], d["untested"]) == ("fixed", "1.13.0", "1.14.0", [])
    assert d["description"] == t.describe()
    json.dumps(d)  # the --json output and the stored row must serialise


def test_scenarios_are_kept_apart() -> None:
    # the same signature in two scenarios with opposite stories: one transition each
    lora = [{**r, "scenario": "lora"} for r in rows_of(cell("pass", accelerate="1.13.0"), cell("has", accelerate="1.14.0"))]
    load = rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0"))
    assert [(t.scenario, t.kind) for t in attribute(load + lora).transitions] == [("load", "fixed"), ("lora", "introduced")]


def test_describe_caps_a_long_untested_list() -> None:
    t = Transition(
        "s", SIG, "transformers", "fixed", "5.0.0", "5.9.0", (("torch", "2.13.0"),), not_built=tuple(f"5.{i}.0" for i in range(1, 9))
    )
    assert (
        t.describe() == "fixed between transformers 5.0.0 (fails) and 5.9.0 (passes); not built: 5.1.0, 5.2.0, 5.3.0, 5.4.0, 5.5.0, 5.6.0"
        " and 2 more — with torch 2.13.0"
    )
    single_axis = Transition("s", SIG, "peft", "introduced", "0.19.1", "0.21.2", ())
    assert single_axis.describe() == "introduced in peft 0.21.2 (after 0.19.1)"


def test_to_rows_for_the_transitions_table() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("has pass", accelerate="1.14.0"), cell("pass", accelerate="1.15.0"))
    stored = to_rows(attribute(rows), scope="r1")
    assert [(r["kind"], r["axis"], r["before"], r["after"], r["scope"]) for r in stored] == [
        ("fixed", "accelerate", "1.13.0", "1.15.0", "r1"),
        ("flaky", "", "", "", "r1"),
    ]
    assert stored[0]["inconclusive"] == ["1.14.0 (flaky 1/2)"]
    assert stored[1]["held"]["accelerate"] == "1.14.0" and stored[1]["before_cell"] == rows[1]["cell_id"]


def test_seen_versions() -> None:
    rows = rows_of(cell("pass", accelerate="1.13.0"), cell("pass", commit=SHA_NEW, accelerate=ACC_MAIN))
    assert seen_versions(rows)["accelerate"] == ["1.13.0", ACC_MAIN]


def test_sweep_summary_names_the_transitions() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0"))
    buffer = io.StringIO()
    render(rows, Console(file=buffer, width=400, color_system=None), title="run r1", attribution=attribute(rows), wide=True)
    text = buffer.getvalue()
    assert "transitions" in text
    assert "fixed in accelerate" in text and "1.14.0 (after 1.13.0)" in text


def test_summary_without_transitions_prints_no_transitions_table() -> None:
    rows = rows_of(cell("has", accelerate="1.13.0"), cell("has", accelerate="1.14.0"))
    buffer = io.StringIO()
    render(rows, Console(file=buffer, width=400, color_system=None), attribution=attribute(rows), wide=True)
    assert "failure signatures" in buffer.getvalue() and "transitions" not in buffer.getvalue()


def test_render_transitions_prints_signatures_literally() -> None:
    # signatures are user data: square brackets must not be read as rich markup (or crash it)
    rows = [
        {**r, "signature": "ValueError: bad [red]value[/] @ peft/x.py:f"} if r["signature"] else r
        for r in rows_of(cell("has", accelerate="1.13.0"), cell("pass", accelerate="1.14.0"))
    ]
    buffer = io.StringIO()
    render_transitions(attribute(rows).transitions, Console(file=buffer, width=400, color_system=None))
    assert "ValueError: bad [red]value[/] @ peft/x.py:f" in buffer.getvalue()
    assert "fixed in accelerate" in buffer.getvalue() and "1.14.0 (after 1.13.0)" in buffer.getvalue()
