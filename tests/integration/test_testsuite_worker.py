"""A team's pytest suite run by the harness's worker and controller, on real pytest processes
forked from a real fork server: one collection, one result per node id, and a segfault or a
hang costs its own test only (tests/data/team_suite is a suite written for this)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.analysis.status import Status
from harness.running.runner import CellRunner
from harness.running.testsuite import interpret_result, make_suite, meaning, run_suite

SUITE = Path(__file__).resolve().parent.parent / "data" / "team_suite"
FILE = "checks/check_sample.py"
EXPECTED = {
    "test_fixture": ("pass", ""),
    "test_param[1]": ("pass", ""),
    "test_param[2]": ("pass", ""),
    "test_param[3]": ("fail", "AssertionError: 3 is too big"),
    "test_skipped": ("not_applicable", "needs a GPU"),
    "test_xfail": ("xfail", "known bug"),
    "test_xpass": ("xpass", "fixed upstream"),
    "test_xpass_strict": ("fail", "[XPASS(strict)] must fail"),
    "test_library_error": ("error", "InvalidVersion: Invalid version: 'not a version'"),
    "test_setup_error": ("error", "in setup: RuntimeError: the fixture could not start"),
    "test_teardown_error": ("error", "in teardown: OSError: the fixture could not clean up"),
    "test_warning_is_an_error": ("error", "DeprecationWarning: old API"),
    "test_segfault": ("crash", "killed by SIGSEGV"),
    "test_after_crash": ("pass", ""),
    "test_hang": ("timeout", "no result after 3s; its worker was killed"),
    "test_after_hang": ("pass", ""),
}


def _run(tmp_path: Path, isolation: str, **selection: str) -> tuple[dict[str, dict], list[dict]]:
    suite = make_suite(SUITE, [FILE], **selection)
    results: dict[str, dict] = {}
    events = []
    with CellRunner(sys.executable, isolation=isolation, preload=["packaging.version"]) as runner:
        start = lambda skip: runner.run_suite_worker(suite.root, suite.args(), tmp_path / "events.jsonl", skip, tmp_path / "out.log", {})  # noqa: E731
        for event in run_suite(start, runner.kill_running, tmp_path / "events.jsonl", timeout=3.0):
            events.append(event)
            if event["event"] == "result":
                assert event["nodeid"] not in results, f"{event['nodeid']} reported twice"
                results[event["nodeid"]] = event
    return results, events


@pytest.mark.parametrize("isolation", ["fork", "process"])
def test_every_node_id_gets_its_status_and_the_tests_after_a_crash_and_a_hang_run(tmp_path: Path, isolation: str) -> None:
    results, events = _run(tmp_path, isolation)
    libraries = ["packaging"]
    got = {}
    for nodeid, event in results.items():
        result = interpret_result(event, libraries)
        got[nodeid.removeprefix(FILE + "::")] = (result.status, result.message)
    assert got == EXPECTED
    # addopts' -m 'not excluded' applied, as under plain pytest in that folder
    assert not any("test_excluded" in n for n in results)
    # one collection, and one more after each worker that died (the crash, the hang)
    assert sum(e["event"] == "collected" for e in events) == 3
    # the signature names the library the exception came from, or none for the team's own code
    error = meaning(interpret_result(results[FILE + "::test_library_error"], libraries), libraries)
    assert error.signature is not None and error.signature.library == "packaging"
    own = meaning(interpret_result(results[FILE + "::test_param[3]"], libraries), libraries)
    assert own.signature is not None and own.signature.library == "" and own.status == Status.FAIL


def test_a_selection_by_keyword_and_marker_and_the_modules_the_session_imported(tmp_path: Path) -> None:
    results, events = _run(tmp_path, "fork", keyword="param or after", marker="not slowish")
    chosen = sorted(n.removeprefix(FILE + "::") for n in results)
    assert chosen == ["test_after_crash", "test_after_hang", "test_param[1]", "test_param[2]", "test_param[3]"]
    imported = [e for e in events if e["event"] == "imported"]
    assert len(imported) == 1 and "packaging.version" not in imported[0]["modules"]  # preloaded: not new


def test_tests_already_stored_are_not_run_again(tmp_path: Path) -> None:
    suite = make_suite(SUITE, [FILE], keyword="param")
    with CellRunner(sys.executable, isolation="fork", preload=[]) as runner:
        start = lambda skip: runner.run_suite_worker(suite.root, suite.args(), tmp_path / "e.jsonl", skip, tmp_path / "o.log", {})  # noqa: E731
        done = [f"{FILE}::test_param[1]", f"{FILE}::test_param[2]"]
        ran = [e["nodeid"] for e in run_suite(start, runner.kill_running, tmp_path / "e.jsonl", 30.0, done=done) if e["event"] == "result"]
    assert ran == [f"{FILE}::test_param[3]"]
