"""The known-good set per machine class, and pins over a selection of tests (`harness.analysis.pin`), as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.analysis.knowngood import known_good_sets
from harness.analysis.machines import find_machine, newest_machine
from harness.analysis.pin import Constraints, choose
from harness.analysis.rows import machine_class
from harness.analysis.selection import select_tests, selects

CPU = {"gpu": "cpu", "gpu_count": 0, "platform": "linux-x86_64"}
H200 = {"gpu": "NVIDIA H200", "gpu_count": 1, "platform": "linux-x86_64"}
H200X2 = {"gpu": "NVIDIA H200", "gpu_count": 2, "platform": "linux-x86_64"}
TORCH = {id(CPU): "2.13.0+cpu", id(H200): "2.11.0+cu130", id(H200X2): "2.11.0+cu130"}


def rows(machine: dict[str, Any], tf: str, run: str = "r1", started: str = "2026-11-21T10:00:00", **statuses: str) -> list[dict[str, Any]]:
    """One cell on one machine: transformers `tf`, one row per scenario=status."""
    versions = {"torch": TORCH[id(machine)], "transformers": tf}
    return [
        {
            "run_id": run,
            "cell_id": f"{machine['gpu']}-{machine['gpu_count']}-tf{tf}",
            "scenario": scenario,
            "repeat": 0,
            "status": status,
            "signature": "RuntimeError: x @ transformers/a.py:f" if status == "error" else "",
            "message": "needs 1 GPU(s); this runner has 0" if status == "not_applicable" else "",
            "versions": json.dumps(versions),
            "installed": json.dumps(versions),
            "inherited": "{}",
            "python": "3.12",
            "started_at": started,
            **machine,
        }
        for scenario, status in statuses.items()
    ]


NA = "not_applicable"

# -- machine classes -----------------------------------------------------------------------------------
#: (row, class)
CLASSES = [
    (CPU, "cpu"),
    (H200, "1x NVIDIA H200"),
    (H200X2, "2x NVIDIA H200"),
    # an older row without the GPU count: the model alone
    ({"gpu": "NVIDIA H100 80GB HBM3", "platform": "linux-x86_64"}, "NVIDIA H100 80GB HBM3"),
    # no GPU column but a host: a CPU run
    ({"platform": "darwin-arm64"}, "cpu"),
    # a hand-made row with no host at all: no class to name
    ({}, ""),
]


@pytest.mark.parametrize(("row", "expected"), CLASSES)
def test_machine_class_is_the_gpu_model_and_count_or_cpu(row: dict[str, Any], expected: str) -> None:
    assert machine_class(row) == expected


STORED = ["cpu", "1x NVIDIA H200", "2x NVIDIA H200"]
#: (what the user typed, the class it names or None)
FOUND = [
    ("cpu", "cpu"),
    ("CPU", "cpu"),
    ("2x NVIDIA H200", "2x NVIDIA H200"),
    ("2xh200", "2x NVIDIA H200"),  # case, spaces and the word NVIDIA do not matter
    ("1x nvidia h200", "1x NVIDIA H200"),
    ("any", "any"),
    ("h200", None),  # ambiguous between one and two GPUs: never guessed
    ("4x NVIDIA H200", None),  # not stored
    ("H100", None),
]


@pytest.mark.parametrize(("text", "expected"), FOUND)
def test_find_machine(text: str, expected: str | None) -> None:
    assert find_machine(text, STORED) == expected


def test_the_default_machine_is_the_newest_runs() -> None:
    older = rows(CPU, "5.6.2", run="cpu-run", started="2026-11-21T10:00:00", a="pass")
    newer = rows(H200, "5.6.2", run="gpu-run", started="2026-11-22T09:00:00", g="pass")
    assert newest_machine(older + newer) == "1x NVIDIA H200"
    assert newest_machine(older) == "cpu"
    assert newest_machine([]) == ""


# -- the known-good set per machine -------------------------------------------------------------------
#: (rows, machine class -> (expected transformers, kept, not applicable there)); the case says what it shows
PER_MACHINE = [
    pytest.param(
        # the GPU scenario `g` is not applicable on the CPU and `c` not on the GPU: neither counts against the other
        rows(CPU, "5.6.2", c="pass", g=NA)
        + rows(CPU, "5.23.0", c="pass", g=NA)
        + rows(H200, "5.6.2", c=NA, g="pass")
        + rows(H200, "5.23.0", c=NA, g="pass"),
        {"cpu": ("5.23.0", ("c",), ("g",)), "1x NVIDIA H200": ("5.23.0", ("g",), ("c",))},
        id="gpu-scenario-not-counted-on-cpu-and-vice-versa",
    ),
    pytest.param(
        # a failure on one machine keeps only that machine's set back
        rows(CPU, "5.6.2", c="pass", g=NA)
        + rows(CPU, "5.23.0", c="error", g=NA)
        + rows(H200, "5.6.2", c="pass", g="pass")
        + rows(H200, "5.23.0", c="pass", g="pass"),
        {"cpu": ("5.6.2", ("c",), ("g",)), "1x NVIDIA H200": ("5.23.0", ("c", "g"), ())},
        id="a-cpu-failure-does-not-hold-the-gpu-back",
    ),
    pytest.param(
        # `two` needs two GPUs: it counts on 2x H200 and is not applicable on 1x
        rows(H200, "5.23.0", g="pass", two=NA)
        + rows(H200X2, "5.6.2", g="pass", two="pass")
        + rows(H200X2, "5.23.0", g="pass", two="error"),
        {"1x NVIDIA H200": ("5.23.0", ("g",), ("two",)), "2x NVIDIA H200": ("5.6.2", ("g", "two"), ())},
        id="gpu-count-is-part-of-the-class",
    ),
]


@pytest.mark.parametrize(("outcomes", "expected"), PER_MACHINE)
def test_one_known_good_set_per_machine(
    outcomes: list[dict[str, Any]], expected: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]
) -> None:
    found = {k.machine: k for k in known_good_sets(outcomes)}
    assert list(found) == list(expected)  # cpu first, then the GPU classes by name
    for machine, (tf, kept, idle) in expected.items():
        known = found[machine]
        assert dict(known.result.versions)["transformers"] == tf, machine
        assert (known.kept, known.not_applicable) == (kept, idle), machine
        assert known.result.constraints.machine == machine


def test_a_machine_where_nothing_passes_says_so_and_names_what_fails() -> None:
    outcomes = rows(CPU, "5.23.0", c="pass") + rows(H200, "5.23.0", c="error", g="error")
    found = {k.machine: k for k in known_good_sets(outcomes)}
    assert found["cpu"].result.found and found["cpu"].kept == ("c",)
    gpu = found["1x NVIDIA H200"]
    assert not gpu.result.found and gpu.passing == () and gpu.failing == ("c", "g")


def test_pooling_every_machine_is_what_per_machine_sets_avoid() -> None:
    # The old single set over every machine: the CPU cell lacks `g`, so it cannot hold both.
    outcomes = rows(CPU, "5.23.0", c="pass", g=NA) + rows(H200, "5.6.2", c=NA, g="pass")
    pooled = choose(outcomes, ["c", "g"])
    assert not pooled.found
    assert [k.result.found for k in known_good_sets(outcomes)] == [True, True]


# -- a selection of tests ---------------------------------------------------------------------------
NODE_IDS = [
    "tests/test_lora.py::TestLora::test_merge[4bit]",
    "tests/test_lora.py::TestLora::test_merge[8bit]",
    "tests/test_lora.py::TestLora::test_load",
    "tests/test_lora.py::test_plain",
    "tests/gpu/test_offload.py::test_split",
    "tests/test_broken.py",  # the file could not be collected in some cell
    "tests/test_broken.py::test_x",
    "tests/test_only_broken.py",  # could not be collected anywhere: no test of it stored
]
#: (selectors, chosen, selectors that chose nothing)
SELECTIONS = [
    (["tests/test_lora.py::TestLora::test_load"], ["tests/test_lora.py::TestLora::test_load"], []),
    (["tests/test_lora.py::TestLora"], NODE_IDS[:3], []),
    # a test with all its parametrizations
    (["tests/test_lora.py::TestLora::test_merge"], NODE_IDS[:2], []),
    (["tests/test_lora.py"], NODE_IDS[:4], []),
    (["./tests/test_lora.py"], NODE_IDS[:4], []),  # as typed from the suite's root
    (["tests/gpu/", "tests/test_lora.py::test_plain"], ["tests/test_lora.py::test_plain", "tests/gpu/test_offload.py::test_split"], []),
    (["tests"], [n for n in NODE_IDS if n != "tests/test_broken.py"], []),
    # the file's own node id is a collection error: its tests are what must pass
    (["tests/test_broken.py"], ["tests/test_broken.py::test_x"], []),
    # unless it has no test stored at all: then the collection error is the evidence
    (["tests/test_only_broken.py"], ["tests/test_only_broken.py"], []),
    # a prefix of a name is not a selection: tests/test_lo is neither a file nor a folder
    (["tests/test_lo", "tests/test_lora.py::TestLoraX"], [], ["tests/test_lo", "tests/test_lora.py::TestLoraX"]),
]


@pytest.mark.parametrize(("selectors", "chosen", "empty"), SELECTIONS)
def test_select_tests(selectors: list[str], chosen: list[str], empty: list[str]) -> None:
    assert select_tests(NODE_IDS, selectors) == (chosen, empty)


#: Names whose prefixes trip a naive prefix test: a file that extends another's name, a sibling
#: folder, parametrizations, a class and a function of one name.
TRICKY = [
    *NODE_IDS,
    "tests/test_lora.py-old::test_a",
    "tests/test_lora.pyx::test_a",
    "tests2/test_lora.py::test_a",
    "tests/test_lora.py::TestLoraX::test_a",
    "tests/test_lora.py::test_plain[1]",
    "tests/test_lora.py::test_plain[1][2]",
    "scenario_a",
    "scenario_a_b",
]


def _scan(stored: list[str], selectors: list[str]) -> tuple[list[str], list[str]]:
    """The plain definition select_tests must agree with: every selector against every name."""
    with_tests = {n.split("::", 1)[0] for n in stored if "::" in n}
    chosen: set[str] = set()
    empty = []
    for selector in selectors:
        found = [n for n in stored if selects(selector, n) and ("::" in n or n not in with_tests)]
        empty += [] if found else [selector]
        chosen.update(found)
    return [n for n in stored if n in chosen], empty


def test_select_tests_agrees_with_a_scan_of_every_name() -> None:
    # every name, every prefix of a name at a separator, and folders as typed
    candidates = set(TRICKY)
    for name in TRICKY:
        for cut in ("::", "[", "/"):
            parts = name.split(cut)
            candidates.update(cut.join(parts[:k]) for k in range(1, len(parts)))
    candidates |= {"tests/", "./tests/test_lora.py", "tests\\gpu", "tests/test_lo", "scenario"}
    for selector in sorted(candidates):
        assert select_tests(TRICKY, [selector]) == _scan(TRICKY, [selector]), selector
    assert select_tests(TRICKY, sorted(candidates)) == _scan(TRICKY, sorted(candidates))


def test_a_pin_over_one_class_of_tests_ignores_the_others() -> None:
    merge = ["tests/test_lora.py::TestLora::test_merge[4bit]", "tests/test_lora.py::TestLora::test_merge[8bit]"]
    outcomes = [
        *rows(CPU, "5.6.2", **{merge[0]: "pass", merge[1]: "pass", "tests/test_lora.py::test_plain": "pass"}),
        # the newest transformers breaks a test outside the selection only
        *rows(CPU, "5.23.0", **{merge[0]: "pass", merge[1]: "pass", "tests/test_lora.py::test_plain": "error"}),
        *rows(H200, "5.23.0", **{merge[0]: "error", merge[1]: "error"}),
    ]
    chosen, _ = select_tests({r["scenario"] for r in outcomes}, ["tests/test_lora.py::TestLora"])
    result = choose(outcomes, sorted(chosen), Constraints(machine="cpu"))
    assert dict(result.versions)["transformers"] == "5.23.0"
    assert result.candidates == 2  # the GPU's cell is another machine's
    assert result.describe()[0].startswith(
        "pin for tests/test_lora.py::TestLora::test_merge[4bit], tests/test_lora.py::TestLora::test_merge[8bit]"
    )
    everything = choose(outcomes, sorted({r["scenario"] for r in outcomes if "::" in r["scenario"]}), Constraints(machine="cpu"))
    assert dict(everything.versions)["transformers"] == "5.6.2"


def test_many_tests_are_named_by_file_in_the_pins_text() -> None:
    names = [f"tests/test_big.py::test_{i}" for i in range(40)]
    outcomes = rows(CPU, "5.23.0", **dict.fromkeys(names, "pass"))
    text = choose(outcomes, names, Constraints(machine="cpu")).describe()
    assert text[0].startswith("pin for 40 tests in tests/test_big.py (")
    assert "  40 tests: every outcome passed (40 outcome(s))" in text
    assert all(len(line) < 200 for line in text)


# -- watch and report name the set for their machine ---------------------------------------------
#: (stored classes, this host's class, the class a watch reads)
NEAREST = [
    (["cpu", "1x NVIDIA H200"], "cpu", "cpu"),
    (["cpu", "1x NVIDIA H200", "2x NVIDIA H200"], "2x NVIDIA H200", "2x NVIDIA H200"),
    # a sweep with --gpus 0 on this two-GPU host stored a one-GPU class: the watch reads it
    (["cpu", "1x NVIDIA H200"], "2x NVIDIA H200", "1x NVIDIA H200"),
    # never a class with more GPUs than this host has, nor another model
    (["2x NVIDIA H200"], "1x NVIDIA H200", ""),
    (["1x NVIDIA H100 80GB HBM3"], "1x NVIDIA H200", ""),
    (["1x NVIDIA H200"], "cpu", ""),
]


@pytest.mark.parametrize(("classes", "host", "expected"), NEAREST)
def test_the_watch_reads_its_hosts_class(classes: list[str], host: str, expected: str) -> None:
    from harness.analysis.watch import nearest_class

    assert nearest_class(classes, host) == expected


def test_the_watchs_known_good_set_names_its_machine() -> None:
    from harness.analysis.watch import known_good

    good = known_good(rows(H200, "5.23.0", g="pass"))
    assert good is not None and good.machine_class == "1x NVIDIA H200"
    assert good.named() == "known-good set on 1x NVIDIA H200"


def test_a_report_names_the_known_good_set_of_its_machine() -> None:
    from harness.analysis.report import render_signature_report

    outcomes = rows(CPU, "5.6.2", c="error", g=NA) + rows(CPU, "5.23.0", c="pass", g=NA) + rows(H200, "5.23.0", c="pass", g="pass")
    known = {k.machine: k for k in known_good_sets(outcomes)}
    body = render_signature_report("RuntimeError: x @ transformers/a.py:f", outcomes, known_good=known)
    assert "### Known-good set on cpu" in body and "### Known-good set on 1x NVIDIA H200" not in body
    assert "`torch 2.13.0+cpu, transformers 5.23.0` (cell `cpu-0-tf5.23.0`)" in body
    assert "`c` passes there." in body
