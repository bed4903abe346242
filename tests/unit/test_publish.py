"""`harness publish`: one self-contained page with the summary's answers; and the heatmap and support tables it draws.

Over the shipped results/default.duckdb (1,557 outcomes, 88 cells, 22 scenarios: 40 exact
answers in the summary), and over small hand-made rows where a table must say one thing.
"""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import heatmap
from harness.analysis.answer import answer_rows
from harness.analysis.support import support_tables
from harness.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "results" / "default.duckdb"
EXAMPLE = REPO / "docs" / "example-site" / "index.html"
#: (headline, machine, lines, the other axes held) of every answer
Answer = tuple[str, str, int, str]


def summary_answers(text: str) -> list[Answer]:
    """The answers `harness summary` printed (at a width where no line wraps): a headline, then `on M, N line(s): held`."""
    block = text.split("\nAnswers\n", 1)[1].split("\nKnown-good set per machine", 1)[0].splitlines()
    found = []
    for headline, where in itertools.pairwise(block):
        match = re.match(r"^      on (.+), (\d+) line\(s\)(?:, \d+ tests)?: (.+)$", where)
        if headline.startswith("    ") and headline.strip().startswith(("fixed ", "introduced ")) and match:
            found.append((headline.strip(), match.group(1), int(match.group(2)), match.group(3)))
    return sorted(found)


def page_answers(page: str) -> list[tuple[Answer, bool]]:
    """(answer, exact) for every answer row of a published page."""
    rows = re.findall(r'<tr class="answer [a-z]+" ([^>]*)>.*?<td>(\d+) line\(s\)(?:, \d+ tests)?: ([^<]*)</td></tr>', page)
    out = []
    for attributes, _, held in rows:
        data = {k: html.unescape(v) for k, v in re.findall(r'data-([a-z]+)="([^"]*)"', attributes)}
        out.append(((data["headline"], data["machine"], int(data["lines"]), html.unescape(held)), data["exact"] == "true"))
    return sorted(out)


def summary_of(db: Path) -> str:
    env = {**os.environ, "COLUMNS": "2000"}  # no answer wraps
    done = subprocess.run(
        [sys.executable, "-m", "harness", "summary", "--db", str(db)], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("site")
    assert main(["publish", "--db", str(SHIPPED), "--out", str(out)]) == 0
    return (out / "index.html").read_text()


def test_the_page_gives_the_summary_answers_40_of_them_exact(published: str) -> None:
    answers = page_answers(published)
    expected = summary_answers(summary_of(SHIPPED))
    assert [a for a, _ in answers] == expected
    assert sum(a[2] for a, exact in answers if exact) == 40  # exact answers, counted by line as the summary counts them


def test_the_page_asks_no_other_host_for_anything(published: str) -> None:
    assert "<script src" not in published and "<link" not in published
    markup = re.sub(r"<script\b.*?</script>", "", published, flags=re.S)  # the scripts: the browser test watches what they fetch
    # every URL in an attribute or the style sheet is a fragment of the page itself
    assert not re.findall(r'(?:src|href|action)="(?!#)[^"]*"', markup)
    assert "url(" not in markup and "@import" not in markup
    assert "vega-lite" in published.lower() and "vega.parse" in published  # the scripts are inline


def test_the_page_has_the_heatmap_known_good_sets_support_tables_and_runs(published: str) -> None:
    spec = json.loads(re.search(r'<script type="application/json" id="heatmap-spec">(.*?)</script>', published, re.S).group(1))  # type: ignore[union-attr]
    assert len(spec["datasets"]["columns"]) == 88 and len({d["row"] for d in spec["datasets"]["heat"]}) == 22
    assert len(spec["datasets"]["marks"]) > 0
    for machine in ("cpu", "1x NVIDIA H200", "2x NVIDIA H200"):
        assert f'<div class="known" data-machine="{machine}">' in published
    assert "transformers==5.23.0" in published and "pip install torch==2.13.0+cpu" in published  # the CPU machine's pin
    assert '<div class="support" data-machine="cpu" data-library="transformers">' in published
    assert "r-3ee1136e18" in published  # a run, with when and where


def test_the_example_in_the_docs_is_a_published_page_with_the_40_exact_answers() -> None:
    page = EXAMPLE.read_text()
    assert sum(a[2] for a, exact in page_answers(page) if exact) == 40
    assert "<script src" not in page


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        pytest.param(["--db", "missing.duckdb"], ["no results file at missing.duckdb", "harness sweep --db"], id="no such file"),
        pytest.param(["--db", str(SHIPPED), "--out", "{file}"], ["is a file", "pass a folder"], id="out is a file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragments: list[str]
) -> None:
    (tmp_path / "taken").write_text("x")
    args = [a.replace("{file}", str(tmp_path / "taken")) for a in args]
    os.chdir(tmp_path)
    assert main(["publish", *args, *([] if "--out" in args else ["--out", str(tmp_path / "site")])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(f in err for f in fragments)
    assert not (tmp_path / "site").exists()


# -- the support tables ----------------------------------------------------------------------------
def _row(tf: str, acc: str, scenario: str, status: str, gpu: str = "cpu") -> dict[str, Any]:
    return {
        "scenario": scenario,
        "status": status,
        "signature": "" if status == "pass" else f"E: {scenario}",
        "repeat": 0,
        "cell_id": f"tf{tf}-acc{acc}",
        "run_id": "r",
        "gpu": gpu,
        "platform": "linux-x86_64",
        "python": "3.11",
        "versions": {"torch": "2.13.0", "transformers": tf, "accelerate": acc},
    }


#: two lines along transformers: accelerate 1.15.0 (the known-good one) and 1.13.0, where `load` is fixed in 5.8.0
ROWS = [
    *(_row(tf, "1.15.0", "lora", "pass") for tf in ("5.6.2", "5.8.0", "5.10.0")),
    _row("5.6.2", "1.15.0", "load", "error"),
    _row("5.8.0", "1.15.0", "load", "pass"),
    _row("5.10.0", "1.15.0", "load", "pass"),
    _row("5.6.2", "1.13.0", "load", "error"),
    _row("5.10.0", "1.13.0", "load", "pass"),  # a range on this line: 5.8.0 did not run here
]
LISTED = {"transformers": ["5.6.2", "5.7.0", "5.8.0", "5.9.0", "5.9.1", "5.10.0"], "accelerate": ["1.13.0", "1.14.0", "1.15.0"]}


def test_a_support_table_is_the_known_good_line_with_its_gaps_and_exact_answers() -> None:
    table = next(t for t in support_tables(answer_rows(ROWS, LISTED)) if t.library == "transformers")
    assert table.machine == "cpu" and dict(table.held) == {"torch": "2.13.0", "accelerate": "1.15.0"} and table.known_good == "5.10.0"
    assert [(c.label, c.built) for c in table.columns] == [
        ("5.6.2", True),
        ("5.7.0", False),
        ("5.8.0", True),
        ("5.9.0 … 5.9.1 (2)", False),
        ("5.10.0", True),
    ]
    assert [table.entry("load", i).word for i in range(5)] == ["error", "", "pass", "", "pass"]
    assert table.marked == 0  # 5.7.0 was listed and not built: a range, not an exact answer
    assert table.rows == ("load", "lora")


def test_only_exact_answers_on_the_line_are_marked() -> None:
    listed = {**LISTED, "transformers": ["5.6.2", "5.8.0", "5.10.0"]}  # nothing between the releases that ran: exact
    tables = {t.library: t for t in support_tables(answer_rows(ROWS, listed))}
    table = tables["transformers"]
    assert table.entry("load", 1).mark == "fixed in transformers 5.8.0 (after 5.6.2)" and table.entry("load", 1).kind == "fixed"
    # the 1.13.0 line's answer (fixed between 5.6.2 and 5.10.0) is on another line: not marked here
    assert table.marked == 1
    assert [c.label for c in tables["accelerate"].columns] == ["1.13.0", "1.14.0", "1.15.0"]  # with transformers 5.10.0
    assert tables["torch"].built == 1  # one torch only: the table answers nothing about it


def test_a_line_inferred_from_another_lines_exact_answer_says_so_on_the_page(tmp_path: Path) -> None:
    from harness.render.page import render, site_of, summary_line

    # exact on the accelerate 1.15.0 line (5.8.0 built there); on 1.13.0 a range 5.6.2..5.10.0 around it
    listed = {**LISTED, "transformers": ["5.6.2", "5.8.0", "5.10.0"]}
    site = site_of(answer_rows(ROWS, listed), "rows")
    [line] = [a for a in site.answers if a.scenarios == "load"]
    assert (line.headline, line.exact, line.lines, line.inferred_lines) == ("fixed in transformers 5.8.0 (after 5.6.2)", True, 1, 1)
    assert line.inferred.startswith("inferred on 1 more line(s), not built there") and "accelerate 1.13.0" in line.inferred_held
    assert "inferred on 1 more line(s), not built there" in render(site)
    page = tmp_path / "index.html"
    page.write_text("x")
    assert "on 1 line(s); inferred on 1 more, not built there" in summary_line(page, site)


def test_each_machine_class_has_its_own_line() -> None:
    rows = [*ROWS, _row("5.6.2", "1.15.0", "load", "pass", gpu="NVIDIA H200"), _row("5.8.0", "1.15.0", "load", "error", gpu="NVIDIA H200")]
    machines = {(t.machine, t.library) for t in support_tables(answer_rows(rows, LISTED))}
    assert ("cpu", "transformers") in machines and ("NVIDIA H200", "transformers") in machines  # no gpu_count in these rows


# -- the heatmap ---------------------------------------------------------------------------------------
def _columns() -> list[heatmap.Column]:
    return [
        heatmap.Column(f"tf{tf}-acc{acc}", f"tf{tf}-acc{acc}", (("transformers", tf), ("accelerate", acc)))
        for tf in ("5.10.0", "5.6.2")
        for acc in ("1.15.0", "1.13.0")
    ]


def test_columns_are_ordered_by_versions_with_one_library_varying_fastest() -> None:
    keys = [c.key for c in heatmap.order(_columns())]
    assert keys == ["tf5.6.2-acc1.13.0", "tf5.6.2-acc1.15.0", "tf5.10.0-acc1.13.0", "tf5.10.0-acc1.15.0"]  # 5.6.2 < 5.10.0
    keys = [c.key for c in heatmap.order(_columns(), last="transformers")]
    assert keys == ["tf5.6.2-acc1.13.0", "tf5.10.0-acc1.13.0", "tf5.6.2-acc1.15.0", "tf5.10.0-acc1.15.0"]


def test_a_change_between_neighbours_is_an_edge_and_one_between_others_a_mark_inside() -> None:
    edge = heatmap.Edge(
        "load", "fixed", "fixed in transformers 5.10.0 (after 5.6.2)", "transformers", "tf5.6.2-acc1.13.0", "tf5.10.0-acc1.13.0", "E"
    )
    by_tf = heatmap.order(_columns(), last="transformers")
    (mark,) = heatmap.marks([edge], by_tf)
    assert (mark.index, mark.on_edge, mark.text) == (1, True, edge.headline)
    by_acc = heatmap.order(_columns(), last="accelerate")
    (mark,) = heatmap.marks([edge], by_acc)
    assert (mark.index, mark.on_edge) == (2, False)  # tf5.10.0-acc1.13.0 is third, its old side first


def test_flaky_cells_and_machine_differences_are_no_edges_and_the_busiest_axis_is_the_default() -> None:
    rows = [
        {
            "scenario": "s",
            "kind": "fixed",
            "axis": "accelerate",
            "after": "1.14.0",
            "after_cell": "b",
            "before_cell": "a",
            "description": "x — y",
        },
        {"scenario": "s", "kind": "flaky", "axis": "", "after_cell": "", "description": "flaky"},
        {"scenario": "s", "kind": "machine", "axis": "", "after_cell": "", "description": "machine"},
    ]
    edges = heatmap.edges_of(rows)
    assert [(e.headline, e.axis) for e in edges] == [("x", "accelerate")]
    assert heatmap.busiest_axis(edges, ["transformers", "accelerate"]) == "accelerate"
    assert heatmap.busiest_axis([], ["transformers", "accelerate"]) == "accelerate"


def test_the_spec_has_every_row_and_square_and_fits_its_width() -> None:
    columns = heatmap.order(_columns())
    squares = [heatmap.square(row, i, "pass") for row in ("a_long_scenario_name", "b") for i in range(len(columns))]
    spec = heatmap.spec(["a_long_scenario_name", "b"], columns, squares, width=500)
    heat = spec["vconcat"][-1]  # below the strips
    assert heat["layer"][0]["encoding"]["y"]["sort"] == ["a_long_scenario_name", "b"]
    assert len(spec["datasets"]["heat"]) == 8 and heat["width"] <= 500 - heatmap.label_width(["a_long_scenario_name"])
    strips = {d["a"] for d in spec["datasets"]["strips"]}
    assert strips == {"tf", "acc"}  # one strip per library that varies
    assert [view["transform"][0]["filter"]["equal"] for view in spec["vconcat"][:-1]] == ["tf", "acc"]


def test_a_version_that_does_not_fit_across_its_run_is_written_up_it() -> None:
    # 27 columns of 20 px: transformers varies fastest, one column a run; peft's runs are 9 columns wide
    columns = [
        heatmap.Column(f"c{i}", f"c{i}", (("transformers", tf), ("peft", peft)))
        for i, (peft, tf) in enumerate((p, t) for p in ("0.19.1", "0.20.0", "0.21.2") for t in ("5.10.4", "5.22.2", "5.23.0") * 3)
    ]
    strips = heatmap._strips(columns, ["peft", "transformers"], step=20)
    tf = [d for d in strips if d["a"] == "tf"]
    assert len(tf) == 27 and all(d["t"] == "" and d["r"] == d["v"] for d in tf)  # 6 characters need 41 px across: up it
    assert all(d["t"] == d["v"] and d["r"] == "" for d in strips if d["a"] == "peft")  # 180 px: across
    assert heatmap.strip_height(tf) == int(len("5.10.4") * heatmap.CHAR + 6) and heatmap.strip_height(strips[:3]) == heatmap.STRIP
    # too narrow even up it (the text's height): the tooltip says it
    assert {d["r"] for d in heatmap._strips(columns, ["transformers"], step=8)} == {""}


def test_the_support_page_marks_the_stored_answers_as_attribution_would_now() -> None:
    from harness.storage.store import Store
    from harness.workflows.answering import answer
    from harness.workflows.support import support_of

    with Store(SHIPPED, read_only=True) as store:
        tables, rows_are = support_of(store)  # the answers `harness attribute` stored: current in the shipped file
        fresh = support_tables(answer(store))
    assert rows_are == "scenario" and tables == tuple(fresh)
    assert sum(t.marked for t in tables) == 4  # cpu: transformers 5.11.0 and 5.23.0; each H200 class: accelerate 1.14.0


def test_a_suite_is_counted_in_tests_and_drawn_by_file(tmp_path: Path) -> None:
    """A suite's page and line count its tests (not "test files": the heatmap's rows are the files)."""
    db = tmp_path / "suite.duckdb"
    made = [sys.executable, str(Path(__file__).resolve().parents[2] / "benchmarks" / "make_large_store.py")]
    subprocess.run([*made, "--tests", "300", "--cells", "4", "--out", str(db)], check=True, capture_output=True)
    from harness.render.page import publish, summary_line

    page, site = publish(str(db), tmp_path / "site")
    line = summary_line(page, site)
    assert "4 cells × 300 test(s)," in line, line
    assert site.rows_are == "test file"
    assert "300 test(s) ·" in page.read_text()
