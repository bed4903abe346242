"""Readers and writers of one results file at once (store.py with journal.py), on real files and
real processes: a reader never blocks a writer, a writer never blocks a reader, every record is
folded once, and what a failure leaves behind is whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.errors import EXIT_BAD_INPUT, StoreError, StoreLocked
from harness.storage import journal, queries, store
from harness.storage.store import Store

REPO = Path(__file__).resolve().parents[2]
RUN = "r-live"


def outcome(scenario: str, repeat: int = 0, status: Status = Status.PASS, cell: str = "c1", run: str = RUN) -> Outcome:
    return Outcome(run, cell, scenario, repeat, status, message=f"{scenario}/{repeat}", started_at="2026-11-23T10:00:00")


def cell(cell_id: str, version: str, run: str = RUN) -> CellRecord:
    pins = {"packaging": version}
    return CellRecord(run, cell_id, "3.11", pins, [f"packaging=={version}"], pins, {}, {}, "ready", "", 1.0, False)


@contextmanager
def process(code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Run `code` (with `args`) in another Python process until the block ends, once it printed 'ready'."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == "ready", f"the helper process said {line!r}"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def count_raw(db: Path) -> int:
    """What a user's own read-only SQL sees, from another process (DuckDB's lock is per process)."""
    code = (
        f"import duckdb; c = duckdb.connect({str(db)!r}, read_only=True); print(c.execute('SELECT count(*) FROM outcomes').fetchone()[0])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def count_harness(db: Path) -> int:
    """What a harness reader (summary, the dashboard) sees, from another process."""
    code = (
        "from harness.storage.store import Store; from harness.storage import queries; "
        f"s = Store({str(db)!r}, read_only=True); print(queries.row_count(s)); s.close()"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "live.duckdb"


@pytest.fixture
def never_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers fold only when they close: what readers see mid-way then comes from the journal."""
    monkeypatch.setattr(store, "FOLD_SECONDS", 3600.0)


def test_readers_open_the_file_while_a_writer_has_it(db: Path, never_fold: None) -> None:
    # Before the journal, a sweep's Store held DuckDB's write lock for its whole life: this
    # read-only connect from another process failed with "Could not set lock on file".
    with Store(db) as writer:
        writer.record_cell(cell("c1", "24.0"))
        for name in ("a", "b", "c"):
            assert writer.add_outcome(outcome(name))
        assert count_raw(db) == 0  # the user's SQL: the file as of the last fold (none yet)
        assert count_harness(db) == 3  # a harness reader adds the journal's records
        assert writer.done_keys(RUN) == {("c1", "a", 0), ("c1", "b", 0), ("c1", "c", 0)}
        rows = queries.outcome_rows(writer, RUN)
        assert [json.loads(r["installed"])["packaging"] for r in rows] == ["24.0"] * 3  # the view joins the journaled cell too
    assert count_raw(db) == 3  # closing folded everything
    assert not journal.folder_of(db).exists()  # and left nothing beside the file


def test_a_writer_never_waits_for_a_reader(db: Path) -> None:
    Store(db).close()
    # A user's read-only session left open in a REPL: before, the sweep could not even open the file.
    holder = f"""
        import duckdb, sys
        c = duckdb.connect({str(db)!r}, read_only=True)
        print('ready', flush=True)
        for line in sys.stdin:
            print(c.execute('SELECT count(*) FROM outcomes').fetchone()[0], flush=True)
    """
    with process(holder) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        started = time.monotonic()
        with Store(db) as writer:
            for i in range(30):
                assert writer.add_outcome(outcome(f"s{i}"))
                assert writer.fold(wait=1.0)  # the reader's lock does not stop a fold: it goes into a copy
        assert time.monotonic() - started < 30
        assert count_raw(db) == 30  # a new connection opens the swapped-in file
        proc.stdin.write("again\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "0"  # the open session keeps its snapshot, and works
    assert not journal.folder_of(db).exists()


def test_the_last_outcome_reaches_the_file_without_waiting_for_the_next(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A GPU scenario may run for minutes: the outcome before it must not wait for its successor
    # to reach the file that a user's own SQL reads.
    monkeypatch.setattr(store, "FOLD_SECONDS", 0.5)
    with Store(db) as writer:
        writer.add_outcome(outcome("first"))
        deadline = time.monotonic() + 20
        while count_raw(db) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert count_raw(db) == 1


def test_two_writers_fold_each_key_once(db: Path) -> None:
    # Two processes journal overlapping keys (two sweeps of one run); the file keeps one row a key.
    code = """
        import sys
        from harness.storage import store
        from harness.storage.store import Store
        from harness.analysis.outcome import Outcome, Status
        store.FOLD_SECONDS = 0.0  # fold after every record: the two writers take turns on the file
        with Store(sys.argv[1]) as s:
            print("ready", flush=True)
            for i in range(int(sys.argv[2]), int(sys.argv[3])):
                s.add_outcome(Outcome("r-live", "c1", f"s{i}", 0, Status.PASS, message=sys.argv[4]))
    """
    Store(db).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(db), a, b, who], env={**os.environ, "PYTHONPATH": str(REPO)})
        for a, b, who in (("0", "40", "first"), ("20", "60", "second"))
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with Store(db, read_only=True) as reader:
        assert queries.row_count(reader) == 60
        assert queries.duplicate_key_count(reader) == 0
    assert not journal.folder_of(db).exists()


def test_a_killed_writers_journal_is_read_and_then_folded_once(db: Path) -> None:
    code = """
        import os, sys
        from harness.storage import store
        from harness.storage.store import Store
        from harness.analysis.outcome import Outcome, Status
        store.FOLD_SECONDS = 3600.0
        s = Store(sys.argv[1])
        for i in range(5):
            s.add_outcome(Outcome("r-live", "c1", f"s{i}", 0, Status.PASS))
        with open(s._writer.journal.path, "ab") as fh:  # the kill cut the next line short
            fh.write(b'{"type": "outcome", "run_id": "r-li')
        print("ready", flush=True)
        import time; time.sleep(120)
    """
    with process(code, str(db)) as proc:
        (path,) = journal.journals(db)
        assert journal.writer_alive(path)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not journal.writer_alive(path)  # the kernel dropped its lock
    assert count_harness(db) == 5  # readers see the dead writer's whole records, not its half line
    with Store(db) as writer:
        assert writer.done_keys(RUN) == {("c1", f"s{i}", 0) for i in range(5)}
        assert writer.add_outcome(outcome("s5"))
    assert count_raw(db) == 6
    assert not journal.folder_of(db).exists()


def test_the_journal_layer_follows_the_fold_rules(db: Path, never_fold: None) -> None:
    with Store(db) as first:
        first.record_cell(cell("c1", "23.2"))
        first.add_outcome(outcome("a", status=Status.FAIL))
        first.record_releases(RUN, {"packaging": [("23.2", None), ("24.0", None)]})
    with Store(db) as second:
        second.record_cell(cell("c1", "24.0"))  # a rebuilt cell: the latest facts win
        second.add_outcome(outcome("b"))
        second.record_releases(RUN, {"packaging": [("24.0", None)]})  # a newer list replaces the run's
        second._known.clear()  # as if another process had written "a": the file's row must win
        assert second.add_outcome(outcome("a", status=Status.PASS)) is False
        with Store(db, read_only=True) as reader:
            rows = {r["scenario"]: r for r in queries.outcome_rows(reader)}
            found = {k: (r["status"], json.loads(r["installed"])["packaging"]) for k, r in rows.items()}
            assert found == {"a": ("fail", "24.0"), "b": ("pass", "24.0")}
            assert queries.known_releases(reader) == {"packaging": ["24.0"]}
            assert queries.row_count(reader, "cells") == 1
    with Store(db, read_only=True) as reader:  # folded: the same answers from the tables alone
        assert {r["scenario"]: r["status"] for r in queries.outcome_rows(reader)} == {"a": "fail", "b": "pass"}
        assert queries.known_releases(reader) == {"packaging": ["24.0"]}


def test_a_process_holding_the_file_for_writing_is_named(db: Path) -> None:
    Store(db).close()
    holder = f"import duckdb; c = duckdb.connect({str(db)!r}); print('ready', flush=True); import time; time.sleep(120)"
    with process(holder) as proc:
        with pytest.raises(StoreLocked) as info:
            Store(db, read_only=True, lock_wait=0.3).fetch("SELECT 1")
        message = str(info.value)
        assert f"(PID {proc.pid})" in message and "read_only=True" in message and "0.3 s" in message
        assert info.value.exit_code == EXIT_BAD_INPUT
        with pytest.raises(StoreLocked):
            Store(db, lock_wait=0.3)  # a writer must read the file first (resume): the same message
        reader = Store(db, read_only=True)
        reader.lock_wait = 0.2  # set after opening: the next read waits that long, not the default
        started = time.monotonic()
        with pytest.raises(StoreLocked, match=r"for 0\.2 s"):
            reader.fetch("SELECT 1")
        assert time.monotonic() - started < 10


def test_a_file_from_a_newer_harness_is_refused_untouched(db: Path) -> None:
    with Store(db) as s:
        s.con.execute("INSERT INTO schema_migrations VALUES ('0099_from_the_future', now())")
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"written by a newer harness .*0099_from_the_future.*upgrade the harness"):
        Store(db)
    assert db.read_bytes() == before
    with Store(db, read_only=True) as reader:  # readers still read what they know
        assert queries.row_count(reader) == 0


#: (what DuckDB or the OS said, fragments of the one line the user gets). Each message names the cause
#: and the fix; the storage-version texts are DuckDB's own, which this DuckDB cannot be made to produce.
MESSAGES = [
    pytest.param(
        duckdb.IOException(
            'IO Error: Could not set lock on file "/r/x.duckdb": Conflicting lock is held in /usr/bin/python3 (PID 4242). See also ...'
        ),
        ["locked by /usr/bin/python3 (PID 4242)", "close that connection"],
        id="lock",
    ),
    pytest.param(
        duckdb.IOException(
            "IO Error: Trying to read a database file with version number 69, but we can only read versions between 64 and 68.\n"
            "The database file was created with a newer version of DuckDB."
        ),
        ["storage format", "install the duckdb that wrote it"],
        id="newer-duckdb",
    ),
    pytest.param(
        duckdb.IOException('IO Error: The file "/r/x.duckdb" exists, but it is not a valid DuckDB database file!'),
        ["is not a DuckDB database", "a .duckdb file the harness created, or a new path"],
        id="not-duckdb",
    ),
    pytest.param(OSError(28, "No space left on device"), ["is full", "free some space", "resumes"], id="disk-full-os"),
    pytest.param(duckdb.IOException("IO Error: Could not write file: No space left on device"), ["is full"], id="disk-full-duckdb"),
    pytest.param(OSError(30, "Read-only file system"), ["is read-only", "writable folder"], id="read-only-folder"),
]


@pytest.mark.parametrize(("exc", "fragments"), MESSAGES)
def test_each_cause_has_its_own_message(exc: BaseException, fragments: list[str]) -> None:
    error = store.store_error("/r/x.duckdb", exc)
    assert error.exit_code == EXIT_BAD_INPUT and "\n" not in str(error)
    for fragment in fragments:
        assert fragment in str(error), str(error)


def test_a_journal_line_is_whole_or_absent(tmp_path: Path) -> None:
    # A full disk can take part of a line: the journal cuts it off again, so a reader (and the
    # next append) never meet half a record. /dev/full fails every write with ENOSPC.
    log = journal.Journal(tmp_path / "x.duckdb")
    log.append({"type": "outcome", "n": 1})
    size = log.size()
    full = os.open("/dev/full", os.O_WRONLY)
    real, log._fd = log._fd, full
    with pytest.raises(OSError) as info:
        log.append({"type": "outcome", "n": 2})
    assert journal.disk_error(info.value) == "full"
    log._fd = real
    os.close(full)
    assert log.size() == size
    log.append({"type": "outcome", "n": 3})
    records, _ = journal.read_from(log.path)
    assert [r["n"] for r in records] == [1, 3]
    assert all(json.loads(line) for line in log.path.read_text().splitlines())
    log.close(folded=False)


def test_a_shard_sweep_needs_no_duckdb(tmp_path: Path) -> None:
    # The GPU runner writes JSON-lines shards and may have no duckdb: watching must not import it.
    code = (
        "import sys; from harness.running import live; from harness.storage.shardfile import ShardStore; "
        f"s = ShardStore({str(tmp_path / 'x.jsonl')!r}); print(live.watched(s, None), 'duckdb' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.split() == ["None", "False"], proc.stderr
