"""summary.py: repeats folded into one word per cell and scenario; failure families by frequency."""

from __future__ import annotations

import io
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from harness.render.fit import HANG, hang
from harness.render.summary import render
from harness.render.tally import cell_statuses, failure_families


def rows_of(statuses: list[str], cell: str = "c1", scenario: str = "lora") -> list[dict[str, object]]:
    return [{"cell_id": cell, "scenario": scenario, "repeat": i, "status": s} for i, s in enumerate(statuses)]


#: statuses of the repeats of one scenario in one cell -> the word shown (`status.fold`, the
#: dashboard's word too: one rule for both)
FOLDS = [
    (["pass"], "pass"),
    (["pass", "pass", "pass"], "pass"),
    (["fail", "fail"], "fail"),
    (["pass", "fail", "pass"], "fail 1/3 mixed"),
    (["fail", "pass", "fail"], "fail 2/3 mixed"),
    (["timeout", "pass"], "timeout 1/2 mixed"),
    # the worst status is named: a crash (a signal) ranks above an exception
    (["crash", "error", "pass"], "crash 1/3 mixed"),
    (["pass", "oom", "crash", "crash"], "crash 2/4 mixed"),
    # a scenario that never reached its setup is no pass: it is named too
    (["pass", "inconclusive"], "inconclusive 1/2 mixed"),
]


@pytest.mark.parametrize(("statuses", "word"), FOLDS)
def test_cell_statuses_folds_repeats(statuses: list[str], word: str) -> None:
    assert cell_statuses(rows_of(statuses)) == {"c1": {"lora": word}}


def test_cell_statuses_keeps_cells_and_scenarios_apart() -> None:
    rows = rows_of(["pass", "fail", "pass"]) + rows_of(["pass"], scenario="merge") + rows_of(["crash"], cell="c2")
    assert cell_statuses(rows) == {"c1": {"lora": "fail 1/3 mixed", "merge": "pass"}, "c2": {"lora": "crash"}}


def failing(signature: str, scenario: str, library: str = "", status: str = "error") -> dict[str, object]:
    return {"cell_id": "c", "scenario": scenario, "status": status, "signature": signature, "blamed_library": library}


def test_failure_families_sorted_by_count() -> None:
    rows = [
        failing("KeyError: <key> @ transformers/masking_utils.py:f", "b", "transformers"),
        failing("TypeError: <class>.__new__() ... @ accelerate/utils/modeling.py:set_module_tensor_to_device", "a", "accelerate"),
        failing("KeyError: <key> @ transformers/masking_utils.py:f", "a", "transformers"),
        failing("KeyError: <key> @ transformers/masking_utils.py:f", "b", "transformers", status="fail"),
        failing("crash: SIGSEGV", "c", status="crash"),
        failing("TypeError: <class>.__new__() ... @ accelerate/utils/modeling.py:set_module_tensor_to_device", "c", "accelerate"),
        # not failures: a pass and a not_applicable carrying a signature, a failure without one
        failing("ignored: pass", "a", status="pass"),
        failing("ignored: n/a", "a", status="not_applicable"),
        failing("", "a", status="error"),
    ]
    assert failure_families(rows) == [
        ("KeyError: <key> @ transformers/masking_utils.py:f", "transformers", 3, ["a", "b"]),
        ("TypeError: <class>.__new__() ... @ accelerate/utils/modeling.py:set_module_tensor_to_device", "accelerate", 2, ["a", "c"]),
        ("crash: SIGSEGV", "", 1, ["c"]),
    ]


def test_failure_families_ties_broken_by_signature() -> None:
    rows = [failing("b-sig", "s"), failing("a-sig", "s")]
    assert [f[0] for f in failure_families(rows)] == ["a-sig", "b-sig"]
    assert failure_families(rows_of(["pass", "pass"])) == []


def test_render_shows_folded_words_and_families() -> None:
    rows = [
        {**r, "signature": "KeyError: <key> @ transformers/x.py:f" if r["status"] != "pass" else "", "blamed_library": "transformers"}
        for r in rows_of(["pass", "error", "pass"])
    ]
    buffer = io.StringIO()
    render(rows, Console(file=buffer, width=200, color_system=None), title="run r-1", wide=True)
    text = buffer.getvalue()
    assert "error 1/3 mixed" in text
    assert "KeyError: <key> @ transformers/x.py:f" in text
    assert "pass: 2" in text and "error: 1" in text


def _cell_rows(acc: str, bnb: str, scenario: str, status: str, signature: str = "", message: str = "") -> dict[str, object]:
    return {
        "run_id": "r",
        "cell_id": f"acc{acc}-bnb{bnb}",
        "scenario": scenario,
        "repeat": 0,
        "status": status,
        "signature": signature,
        "message": message,
        "blamed_library": "accelerate" if signature else "",
        "versions": {"torch": "2.13.0", "accelerate": acc, "bitsandbytes": bnb},
        "gpu": "cpu",
        "platform": "linux-x86_64",
        "python": "3.11",
    }


def test_the_summary_leads_with_answers_and_fits_100_columns() -> None:
    from harness.analysis.attribution import attribute

    sig = "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized' @ accelerate/utils/modeling.py:f"
    rows = []
    for acc in ("1.13.0", "1.14.0"):
        for bnb in ("0.49.2", "0.50.2"):
            broken = acc == "1.13.0" and bnb == "0.49.2"
            rows.append(_cell_rows(acc, bnb, "load", "error" if broken else "pass", sig if broken else ""))
            rows.append(_cell_rows(acc, bnb, "lora", "pass"))
            rows.append(_cell_rows(acc, bnb, "gpu_only", "not_applicable", message="needs 1 GPU(s); this runner has 0"))
    buffer = io.StringIO()
    known = {"accelerate": ["1.13.0", "1.14.0"], "bitsandbytes": ["0.49.2", "0.50.0", "0.50.2"]}
    render(rows, Console(file=buffer, width=100, color_system=None), title="run r", attribution=attribute(rows, known_versions=known))
    text = buffer.getvalue()
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines)
    # answers first, in the attribution's words: exact where built, a range naming what was not
    assert text.index("Answers") < text.index("Known-good set") < text.index("Grid")
    # each answer names its machine and every other axis it held
    at = lines.index("    fixed in accelerate 1.14.0 (after 1.13.0)")
    assert lines[at + 1] == "      on cpu · linux-x86_64 · Python 3.11, 1 line(s): torch 2.13.0, bitsandbytes 0.49.2"
    assert "fixed between bitsandbytes 0.49.2 (fails) and 0.50.2 (passes); not built: 0.50.0" in text
    assert "accelerate 1.14.0, bitsandbytes 0.50.2" in text  # the known-good set
    # the grid: scenarios as rows, short labels with a legend of what varies; GPU scenarios folded
    assert "  A  acc 1.13.0 bnb 0.49.2" in lines and "  D  acc 1.14.0 bnb 0.50.2" in lines
    assert any(line.startswith("load ") and line.split()[1:] == ["E", ".", ".", "."] for line in lines)
    assert "not applicable on this machine (needs 1 GPU(s)): gpu_only" in text
    assert not any(line.startswith("gpu_only") for line in lines)


def test_a_test_suite_is_summarised_by_family_and_file_never_a_line_per_test() -> None:
    # 120 tests in two files over two cells; 40 tests of one file broke in accelerate 1.14.0 with
    # one signature, 3 others of it fail everywhere: one answer line each, one grid row per file
    from harness.analysis.attribution import attribute

    sig = "KeyError: <key> @ accelerate/hooks.py:f"
    rows = []
    for acc in ("1.13.0", "1.14.0"):
        for i in range(60):
            broken = acc == "1.14.0" and i < 40
            status, signature = ("error", sig) if broken else ("fail", "AssertionError: off by <n>") if i >= 57 else ("pass", "")
            rows.append(_cell_rows(acc, "0.49.2", f"tests/test_lora.py::TestLora::test_case[{i}]", status, signature))
            rows.append(_cell_rows(acc, "0.49.2", f"tests/test_io.py::test_save[{i}]", "pass"))
    buffer = io.StringIO()
    known = {"accelerate": ["1.13.0", "1.14.0"]}
    render(rows, Console(file=buffer, width=100, color_system=None), attribution=attribute(rows, known_versions=known))
    text = buffer.getvalue()
    assert "40 tests in tests/test_lora.py::TestLora: KeyError: <key> (accelerate)" in text
    assert "introduced in accelerate 1.14.0 (after 1.13.0)" in text
    assert "3 tests in tests/test_lora.py::TestLora: AssertionError: off by <n>" in text
    assert "test_case[7]" not in text  # no test named one by one
    grid = text[text.index("Grid") :].splitlines()
    assert any(line.startswith("tests/test_io.py (60)") for line in grid)
    assert any(line.startswith("tests/test_lora.py::TestLora (60)") for line in grid)
    assert len(text.splitlines()) < 40


# -- fitting the console's width ---------------------------------------------------------------------
HANG_CASES = [
    # (id, text, width, the lines)
    ("fits-untouched", "  short line", 20, ["  short line"]),
    # broken at the last space that fits; continuation lines HANG deeper than the line's start
    ("hangs-under-its-start", "  one two three four", 12, ["  one two", "      three", "      four"]),
    ("spaces-at-a-break-go", "ab  cd   ef", 10, ["ab  cd", "    ef"]),
    # a word longer than the room is folded; the indent itself is never a break
    ("a-long-word-is-folded", "x" * 25, 10, ["x" * 10, "    " + "x" * 6, "    " + "x" * 6, "    xxx"]),
    ("no-break-inside-the-indent", "      abcdefghijkl", 10, ["      abcd", "     efghi", "     jkl"]),
    # each line of the text hangs under its own start; at most half the width goes to the indent
    ("lines-apart", "a b\n  c d e f", 5, ["a b", "  c d", "  e f"]),
    # cells, not characters: a wide character takes two
    ("wide-characters", "日本語 日本語", 8, ["日本語", "    日本", "    語"]),
]


@pytest.mark.parametrize(("text", "width", "lines"), [c[1:] for c in HANG_CASES], ids=[c[0] for c in HANG_CASES])
def test_hang(text: str, width: int, lines: list[str]) -> None:
    assert [line.plain for line in hang(Text(text), width)] == lines


def test_hang_keeps_the_styles() -> None:
    lines = hang(Text.from_markup("[bold]aaa bbb[/] ccc"), 8)
    assert [(line.plain, [(s.start, s.end, s.style) for s in line.spans]) for line in lines] == [
        ("aaa bbb", [(0, 7, "bold")]),
        ("    ccc", []),
    ]


def _wide_matrix() -> list[dict[str, object]]:
    """30 cells (6 accelerate x 5 bitsandbytes), long signatures and names: lines that must wrap."""
    sig = "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized' @ accelerate/utils/modeling.py:f"
    steady = "ValueError: Target module Gemma4ClippableLinear(...) is not supported. Currently, only the following @ peft/x.py:f"
    rows = []
    for acc in ("1.10.0", "1.11.0", "1.12.0", "1.13.0", "1.14.0", "1.15.0"):
        for bnb in ("0.46.0", "0.47.0", "0.48.0", "0.49.2", "0.50.2"):
            broken = acc < "1.14.0"
            rows.append(
                _cell_rows(acc, bnb, "gemma4_peft_split_4bit_load_double_quant", "error" if broken else "pass", sig if broken else "")
            )
            rows.append(_cell_rows(acc, bnb, "gemma4_lora_broad_targets", "error", steady))
            rows.append(_cell_rows(acc, bnb, "lora", "pass"))
            rows.append(_cell_rows(acc, bnb, "gpu_only", "not_applicable", message="needs 1 GPU(s); this runner has 0"))
    return rows


def _rendered(rows: list[dict[str, object]], width: int) -> list[str]:
    from harness.analysis.attribution import attribute

    buffer = io.StringIO()
    known = {"accelerate": ["1.10.0", "1.11.0", "1.12.0", "1.13.0", "1.14.0", "1.15.0"]}
    render(
        rows,
        Console(file=buffer, width=width, color_system=None),
        title="a title long enough to wrap at forty",
        attribution=attribute(rows, known_versions=known),
    )
    return buffer.getvalue().splitlines()


def _outside_the_grid(lines: list[str]) -> list[str]:
    """The lines that are not the grid's tables: everything before "Grid" and from its legend on."""
    grid = lines.index("Grid (all cells: torch 2.13.0)")
    legend = next(i for i in range(grid, len(lines)) if lines[i].startswith(". pass"))
    return lines[: grid + 1] + lines[legend:]


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120])
def test_every_line_fits_and_a_wrapped_line_hangs_under_its_start(width: int) -> None:
    rows = _wide_matrix()
    lines = _rendered(rows, width)
    assert all(cell_len(line) <= width for line in lines), max(lines, key=cell_len)
    # each line of an unwrapped render is its first line here, then lines that start HANG deeper
    logical, wrapped = _outside_the_grid(_rendered(rows, 10_000)), _outside_the_grid(lines)
    assert len(wrapped) > len(logical)  # some did wrap
    at = 0
    for line in logical:
        lead = len(line) - len(line.lstrip(" "))
        assert line.startswith(wrapped[at]), (line, wrapped[at])
        got, at = "".join(wrapped[at].split()), at + 1
        while got != "".join(line.split()):
            pad = min(lead + HANG, width // 2)
            assert wrapped[at].startswith(" " * pad) and wrapped[at][pad] != " ", (line, wrapped[at])
            got, at = got + "".join(wrapped[at].split()), at + 1
    assert at == len(wrapped)


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 200])
def test_a_grid_wider_than_the_console_is_split_and_keeps_every_mark(width: int) -> None:
    lines = _rendered(_wide_matrix(), width)
    grid = lines[lines.index("Grid (all cells: torch 2.13.0)") + 1 : next(i for i, line in enumerate(lines) if line.startswith(". pass"))]
    headers = [line.split()[1:] for line in grid if line.startswith("scenario ")]
    assert [label for block in headers for label in block] == [*string.ascii_uppercase, *"abcd"]  # 30 cells, in order
    # one table while the names can shrink to fit the 30 cells (90 columns) beside them, else blocks
    assert (len(headers) == 1) is (width >= 120)
    rows = [line.split() for line in grid if not line.startswith("scenario ")]
    per_scenario: dict[str, list[str]] = {}
    for name, *marks in rows:
        per_scenario.setdefault(name, []).extend(marks)
    assert len(per_scenario) == 3 and all(len(marks) == 30 for marks in per_scenario.values())
    assert per_scenario["lora"] == ["."] * 30


@pytest.mark.parametrize(
    ("compact", "tty", "columns", "width"),
    [
        (True, False, "", 100),  # piped, nothing said: 100
        (True, False, "72", 72),  # piped with COLUMNS: it
        (True, False, "abc", 100),  # not a number: ignored
        (True, False, "5", 100),  # too narrow to lay anything out: ignored
        (False, False, "72", 200),  # --wide: the whole grid
        (True, True, "72", None),  # a terminal: rich asks it (COLUMNS first)
    ],
)
def test_the_console_width(compact: bool, tty: bool, columns: str, width: int | None) -> None:
    from harness.cli import console_width

    assert console_width(compact, tty, columns) == width


def test_the_shipped_summary_fits_columns_when_piped() -> None:
    shipped = str(Path(__file__).resolve().parents[2] / "results" / "default.duckdb")
    widths = {}
    for columns in ("", "72"):
        env = {**os.environ, "COLUMNS": columns} if columns else {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        out = subprocess.run([sys.executable, "-m", "harness", "summary", shipped], capture_output=True, text=True, env=env, check=True)
        widths[columns] = max(len(line) for line in out.stdout.splitlines())
    assert widths["72"] <= 72 < widths[""] <= 100


def test_a_suite_s_known_good_set_says_which_tests_never_pass() -> None:
    # "passes all N of its own tests" counts the tests that pass somewhere; one that fails in
    # every cell (a test that needs the hub, offline) must be said, not hidden behind "all"
    from harness.render.summary import render_known_good

    rows = [
        {"cell_id": f"c{v}", "scenario": name, "status": status, "repeat": 0, "run_id": "r", "platform": "linux-x86_64", "gpu": "cpu",
         "versions": {"peft": f"0.{v}.0"}, "signature": "OSError: hub" if status == "error" else ""}
        for v in (19, 20)
        for name, status in (("t.py::test_a", "pass"), ("t.py::test_b", "pass"), ("t.py::test_hub", "error"))
    ]  # fmt: skip
    out = io.StringIO()
    render_known_good(rows, Console(file=out, width=200, color_system=None))
    assert "passes all 2 of its own tests (1 more fail in every cell: see the answers), in cell" in out.getvalue()
