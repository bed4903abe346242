"""One sweep asks the package index once per distribution (`envs.IndexSeen`): real uv, the real index.

The first env resolves online and records what it fetched; a second env whose lock names only
those distributions resolves and installs from uv's cache (`--offline`); an env that needs a
distribution this sweep never fetched asks the index again. Each env holds exactly what an
online resolution would give it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.inputs.candidates import index_for, resolve_matrix
from harness.inputs.matrix import parse_matrix
from harness.running.envs import IndexSeen, build_env, lock_names

pytestmark = pytest.mark.slow

MATRIX = """
[matrix]
python = "3.11"
[axes]
packaging = ["23.2", "24.0"]
"""
OTHER = """
[matrix]
python = "3.11"
[axes]
six = ["1.16.0"]
"""


def test_lock_names_are_normalised_and_skip_comments(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# via x\nTyping_Extensions==4.12.2\nzope.interface==6.0\nmylib @ file:///w/mylib-1.0-py3-none-any.whl\n    # via y\n")
    assert lock_names(lock) == {"typing-extensions", "zope-interface", "mylib"}
    seen = IndexSeen()
    assert not seen
    seen.add({"typing-extensions"})
    assert seen and seen.covers({"typing-extensions"}) and not seen.covers({"typing-extensions", "mylib"})


def test_the_second_env_of_a_sweep_resolves_from_what_the_first_fetched(tmp_path: Path) -> None:
    spec = parse_matrix(MATRIX)
    cells = resolve_matrix(spec, index_for(spec.settings)).cells
    other = parse_matrix(OTHER)
    cells += resolve_matrix(other, index_for(other.settings)).cells
    seen = IndexSeen()
    first = build_env(cells[0], spec.settings, tmp_path, [], seen=seen)
    assert first.ready, first.message
    assert not first.from_cache  # nothing fetched yet in this sweep: the index is asked
    assert seen.covers({"packaging"})
    second = build_env(cells[1], spec.settings, tmp_path, [], seen=seen)
    assert second.ready, second.message
    assert second.from_cache
    assert {first.freeze["packaging"], second.freeze["packaging"]} == {"23.2", "24.0"}
    # a distribution this sweep has not fetched (six): the index is asked, and then it is known
    third = build_env(cells[2], other.settings, tmp_path, [], seen=seen)
    assert third.ready and not third.from_cache and third.freeze["six"] == "1.16.0"
    assert seen.covers({"packaging", "six"})
    # without a record of this sweep's fetches (another sweep, or none), the index is asked again
    again = build_env(cells[1], spec.settings, tmp_path / "other", [], seen=IndexSeen())
    assert again.ready and not again.from_cache and again.freeze == second.freeze


def test_two_builders_of_one_env_take_turns_and_the_second_reuses_it(tmp_path: Path) -> None:
    """Two sweeps (or two test workers) sharing an env folder: without the build lock both would
    clear and build the same env at once, and one would run in an env the other was emptying."""
    from concurrent.futures import ThreadPoolExecutor

    spec = parse_matrix(MATRIX)
    cell = resolve_matrix(spec, index_for(spec.settings)).cells[0]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: build_env(cell, spec.settings, tmp_path, []), range(2)))
    assert all(r.ready for r in results), [r.message for r in results]
    assert sorted(r.reused for r in results) == [False, True]
    assert results[0].location == results[1].location
    assert results[0].freeze == results[1].freeze
