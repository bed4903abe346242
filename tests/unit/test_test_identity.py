"""A test's identity across the releases of its suite (`incell/suite.py`'s `test_identity`): where
pytest made a parameter's id up from the argument's name and index, the value decides; every
other id is kept as pytest printed it. Tables of (node id, callspec) -> identity."""

from __future__ import annotations

import enum
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.knowngood import known_good_sets
from harness.analysis.rows import as_tests

_PATH = Path(__file__).resolve().parents[2] / "harness" / "running" / "incell" / "suite.py"
_SPEC = importlib.util.spec_from_file_location("suite_under_test", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
child = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(child)

H = child.value_hash


class Color(enum.Enum):
    RED = 1


class Thing:
    pass


CASES: list[tuple[str, str, dict[str, Any], list[str], str]] = [
    # (what, node id, params, ids, identity)
    ("no parameters", "t.py::test_a", {}, [], "t.py::test_a"),
    (
        "a dict, made up",
        "t.py::test_x[config_kwargs45]",
        {"config_kwargs": {"r": 8}},
        ["config_kwargs45"],
        f"t.py::test_x[config_kwargs#{H({'r': 8})}]",
    ),
    (
        "the same dict renumbered",
        "t.py::test_x[config_kwargs2]",
        {"config_kwargs": {"r": 8}},
        ["config_kwargs2"],
        f"t.py::test_x[config_kwargs#{H({'r': 8})}]",
    ),
    ("printable values kept", "t.py::test_y[3-fp16]", {"n": 3, "dtype": "fp16"}, ["3-fp16"], "t.py::test_y[3-fp16]"),
    ("given ids kept", "t.py::test_z[lora]", {"cfg": {"r": 8}}, ["lora"], "t.py::test_z[lora]"),
    ("an enum kept", "t.py::test_e[Color.RED]", {"c": Color.RED}, ["Color.RED"], "t.py::test_e[Color.RED]"),
    (
        "multi-arg: only the made-up part",
        "t.py::test_m[cfg3-fp16]",
        {"cfg": {"a": 1}, "dtype": "fp16"},
        ["cfg3-fp16"],
        f"t.py::test_m[cfg#{H({'a': 1})}-fp16]",
    ),
    (
        "stacked decorators",
        "t.py::test_s[cfg1-2]",
        {"n": 2, "cfg": [1, {"b": 2}]},
        ["cfg1", "2"],
        f"t.py::test_s[cfg#{H([1, {'b': 2}])}-2]",
    ),
    (
        "a class's method",
        "t.py::TestA::test_b[model0]",
        {"model": ("lin", {"r": 1})},
        ["model0"],
        f"t.py::TestA::test_b[model#{H(('lin', {'r': 1}))}]",
    ),
    ("a printed value that looks made up is kept", "t.py::test_v[v3]", {"v": "v3"}, ["v3"], "t.py::test_v[v3]"),
    ("a string over 100 characters, made up", "t.py::test_l[text0]", {"text": "x" * 101}, ["text0"], f"t.py::test_l[text#{H('x' * 101)}]"),
    ("an instance of a class, made up", "t.py::test_o[obj1]", {"obj": Thing()}, ["obj1"], f"t.py::test_o[obj#{H(Thing())}]"),
    ("a class is printed by its name", "t.py::test_k[Thing]", {"k": Thing}, ["Thing"], "t.py::test_k[Thing]"),
    ("ids that do not match the node id: left alone", "t.py::test_q[x]", {"cfg": {}}, ["cfg0"], "t.py::test_q[x]"),
]


@pytest.mark.parametrize(("node", "params", "ids", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_identity_table(node: str, params: dict[str, Any], ids: list[str], expected: str) -> None:
    assert child.test_identity(node, params, ids) == expected


STABLE = [
    ("dict order", {"b": 1, "a": 2}, {"a": 2, "b": 1}),
    ("set order", {"x", "y", "z"}, {"z", "y", "x"}),
    ("nested", {"k": [{"b", "a"}, (1, {"q": 2, "p": 3})]}, {"k": [{"a", "b"}, (1, {"p": 3, "q": 2})]}),
    ("memory addresses", [Thing()], [Thing()]),
]


@pytest.mark.parametrize(("one", "other"), [c[1:] for c in STABLE], ids=[c[0] for c in STABLE])
def test_a_value_hashes_the_same_in_every_process_and_order(one: Any, other: Any) -> None:
    assert child.value_hash(one) == child.value_hash(other)


def test_different_values_differ() -> None:
    assert len({child.value_hash(v) for v in ({"r": 8}, {"r": 16}, [8], (8,), "8", 8, {8})}) == 7


def test_equal_values_in_one_session_are_told_apart_by_order() -> None:
    class Item:
        def __init__(self, nodeid: str, index: int) -> None:
            self.nodeid = nodeid
            self.callspec = type("C", (), {"params": {"cfg": {"r": 1}}, "indices": {"cfg": index}, "_idlist": [f"cfg{index}"]})()

    found = child.identities([Item("t.py::t[cfg0]", 0), Item("t.py::t[cfg1]", 1)])
    same = f"t.py::t[cfg#{H({'r': 1})}]"
    assert found == {"t.py::t[cfg0]": same, "t.py::t[cfg1]": same + "~2"}


# -- the answers: a test absent from a cell is "not collected there" -------------------------------
def _row(cell: str, version: str, scenario: str, status: str = "pass", test_id: str | None = None) -> dict[str, Any]:
    return {
        "run_id": "r", "cell_id": cell, "scenario": scenario, "test_id": test_id, "repeat": 0, "status": status,
        "signature": "" if status == "pass" else "ImportError: x", "versions": {"mypkg": version},
        "installed": {"mypkg": version}, "gpu": "cpu", "platform": "linux-x86_64", "python": "3.11",
    }  # fmt: skip


def test_a_test_one_release_does_not_collect_neither_disqualifies_nor_fails_its_cell() -> None:
    rows = as_tests([
        _row("old", "1.0", "t.py::test_gone"),
        _row("old", "1.0", "t.py::test_x[cfg1]", test_id="t.py::test_x[cfg#aa]"),
        _row("new", "2.0", "t.py::test_x[cfg2]", test_id="t.py::test_x[cfg#aa]"),
        _row("new", "2.0", "t.py::test_added"),
    ])  # fmt: skip
    (known,) = known_good_sets(rows)
    assert dict(known.result.versions) == {"mypkg": "2.0"}
    assert known.dropped == () and known.failing == ()
    assert set(known.kept) == {"t.py::test_gone", "t.py::test_x[cfg#aa]", "t.py::test_added"}


def test_a_test_file_that_fails_to_import_still_disqualifies_its_cell() -> None:
    rows = as_tests([
        _row("old", "1.0", "t.py::test_a"),
        _row("new", "2.0", "t.py", status="error"),  # the file's collection error: its tests were never collected
        _row("new", "2.0", "u.py::test_b"),
        _row("old", "1.0", "u.py::test_b"),
    ])  # fmt: skip
    (known,) = known_good_sets(rows)
    assert dict(known.result.versions) == {"mypkg": "1.0"}
