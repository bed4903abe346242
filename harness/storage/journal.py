"""A writer's journal: the records one process adds to a results file, kept beside it.

DuckDB lets one process write a file and, while it does, no other process open it, not even
read-only. A sweep that held its file for hours locked out the dashboard, `harness summary`
and a user's own SQL. So a writer appends each record (run, cell, outcome, releases: the
JSON-lines format of `shardfile.py`) to its own journal, `<db>.journal/<host>-<pid>-<token>.jsonl`,
flushed and fsynced before the call returns, and `store.Store` folds the journals into the
DuckDB file in short transactions whenever the file is free. Readers read the file and the
records not folded yet (docs/store.md).

The writer holds an exclusive `flock` on its journal for its whole life: a reader that cannot
take a shared lock knows the writer still runs, and the kernel drops the lock when the process
dies, kill -9 included. Beside each journal, `<name>.status.json` says what the writer is doing
(its run, how many outcomes it queued and finished, what runs now), replaced atomically.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUFFIX = ".jsonl"
STATUS_SUFFIX = ".status.json"


def folder_of(db: Path | str) -> Path:
    """Where the journals of results file `db` live: `<db>.journal/` beside the real file (a
    symlink to it, or a relative path from elsewhere, finds the same folder)."""
    return Path(f"{os.path.realpath(db)}.journal")


def journals(db: Path | str) -> list[Path]:
    """Every journal beside `db`, in a stable order (folding and reading agree on it)."""
    folder = folder_of(db)
    try:
        return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return []


def status_path(journal: Path) -> Path:
    return journal.with_name(journal.name[: -len(SUFFIX)] + STATUS_SUFFIX)


def read_from(journal: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The whole records after byte `offset`, and the offset just past the last whole line.

    A line without its newline is being written, or was cut short by a kill: it is left for
    later (a live writer finishes it) or for never (a dead one's garbage).
    """
    try:
        with journal.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # half a line from a writer killed while a truncate also failed: never a record
        if isinstance(record, dict) and "type" in record:
            records.append(record)
    return records, offset + end


def writer_alive(journal: Path) -> bool:
    """Whether the process that writes `journal` still runs (it holds an exclusive flock)."""
    try:
        fd = os.open(journal, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also lets our shared lock go
    return False


def read_status(journal: Path) -> dict[str, Any]:
    try:
        data = json.loads(status_path(journal).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Journal:
    """This process's journal beside one results file. Not thread-safe: `Store` serialises calls."""

    def __init__(self, db: Path | str) -> None:
        host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40]
        name = f"{host}-{os.getpid()}-{secrets.token_hex(4)}"
        self.path = folder_of(db) / f"{name}{SUFFIX}"
        self._fd: int | None = None
        for attempt in range(5):
            folder_of(db).mkdir(exist_ok=True)
            # Locked under a name folders ignore, then renamed: a journal never shows up unlocked,
            # where a folder would take its writer for dead and delete it.
            creating = self.path.with_name(f"{name}.creating")
            try:
                fd = os.open(creating, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o644)
            except FileNotFoundError:
                if attempt == 4:
                    raise
                continue  # the last writer removed the empty folder just now
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(creating, self.path)
            self._fd = fd
            break
        self.status: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": _iso_now(), "state": "running"}

    def append(self, record: dict[str, Any]) -> None:
        """One record as one line, on disk (fsynced) when this returns; never half a line left behind."""
        assert self._fd is not None, "journal closed"
        data = (json.dumps(record, default=str) + "\n").encode()
        start = os.fstat(self._fd).st_size  # only this process appends to this file
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError:
            # A full disk can take part of the line: cut it off, so that the next record starts
            # on a line of its own and the journal holds whole records only.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise

    def size(self) -> int:
        return os.fstat(self._fd).st_size if self._fd is not None else 0

    def update_status(self, **changes: Any) -> None:
        """Merge `changes` into the status file (best effort: it only informs readers)."""
        self.status.update(changes)
        self.status["updated_at"] = _iso_now()
        target = status_path(self.path)
        tmp = target.with_name(target.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.status, default=str))
            os.replace(tmp, target)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass

    def close(self, *, folded: bool, state: str = "finished") -> None:
        """Stop writing. `folded`: the results file holds every record (and the journal was removed
        once it did); else the journal stays for the next writer to fold, its status saying
        `state` (`finished`, or `stopped` when the writer failed: the dashboard says rerun)."""
        if self._fd is None:
            return
        if folded:
            remove(self.path)
        else:
            self.update_status(state=state)
        os.close(self._fd)  # lets the flock go
        self._fd = None


def remove(journal: Path) -> None:
    """Delete a journal and its status file, and the folder once empty (the last writer leaves none)."""
    for path in (journal, status_path(journal)):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    try:
        journal.parent.rmdir()
    except OSError:
        pass  # other journals (or a writer creating one) are still there


@dataclass
class Pending:
    """Records of the journals beside a results file that the file does not hold yet."""

    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # journal name -> records
    ends: dict[str, int] = field(default_factory=dict)  # journal name -> offset just past them

    def __bool__(self) -> bool:
        return any(self.records.values())

    def all(self) -> Iterator[dict[str, Any]]:
        for name in sorted(self.records):
            yield from self.records[name]


def pending(db: Path | str, folded: dict[str, int]) -> Pending:
    """What each journal beside `db` holds after the offset the file says it folded (`journal_folds`)."""
    found = Pending()
    for journal in journals(db):
        records, end = read_from(journal, folded.get(journal.name, 0))
        found.records[journal.name] = records
        found.ends[journal.name] = end
    return found


def disk_error(exc: OSError) -> str:
    """The cause of an OSError while writing beside a results file, in words ('' if none we name)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "full"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "read-only"
    return ""


def _iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
