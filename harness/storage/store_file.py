"""A DuckDB results file on disk: opening it, creating it whole, writers' turns, and what a failure means.

`DbFile` knows where a file is (the real path: a swap replaces the file, and its journals sit
beside it), checks a path before anything is written, creates a new file whole, and connects while
waiting out another process's lock. `Turn` is a writer's turn on the file (see `store_writing`).
Every failure to open or write becomes one `StoreError` line that names its fix (`store_error`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from harness.errors import MemoryLimit, StoreError, StoreLocked
from harness.storage.journal import disk_error
from harness.storage.store_schema import migrate


# -- what DuckDB and the OS said, as one line that names the fix ------------------------------
def is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


def store_error(path: str, exc: BaseException, waited: float = 0.0) -> StoreError:
    """The cause of a failure to open or write a results file, and its fix (exit 2)."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    low = text.lower()
    cause = disk_error(exc) if isinstance(exc, OSError) else ""
    if isinstance(exc, duckdb.OutOfMemoryException):
        return memory_error(path, exc, "writing")
    if is_lock_error(exc):
        holder = re.search(r"lock is held in (.+?) \(PID (\d+)\)", text)
        who = f"{holder[1]} (PID {holder[2]})" if holder else "another process"
        return StoreLocked(
            f"{path!r} stayed locked by {who} for {waited:g} s: a process opened it for writing outside the harness "
            "(harness writers hold it for moments only), and DuckDB then lets no one else open it; close that connection "
            "or open it with duckdb.connect(..., read_only=True), then rerun"
        )
    if "database file with version number" in low or "version of duckdb" in low:
        return StoreError(
            f"{path!r} was written by a DuckDB whose storage format duckdb {duckdb.__version__} cannot read ({first}); "
            "install the duckdb that wrote it, or pass --db with a new path"
        )
    if "not a valid duckdb database" in low or "corrupt database file" in low:
        return StoreError(f"{path!r} is not a DuckDB database ({first}); pass --db with a .duckdb file the harness created, or a new path")
    if cause == "full" or "no space left on device" in low or "disk quota exceeded" in low:
        return StoreError(
            f"the disk holding {path!r} is full; free some space and rerun the same command "
            "(every outcome stored so far is kept, and the rerun resumes)"
        )
    if cause == "read-only" or "read-only file system" in low or "permission denied" in low:
        return StoreError(read_only_folder(path))
    return StoreError(
        f"cannot open {path!r} as a DuckDB database ({first}); pass --db with a .duckdb file the harness created, or a new path"
    )


def read_only_folder(path: str) -> str:
    folder = os.path.dirname(path) or "."
    return f"cannot write {path!r}: its folder {folder!r} is read-only; pass --db with a path in a writable folder (or copy the file there)"


# One DuckDB instance per file and process: a read-only and a read-write connection to the same
# file cannot coexist in one process, so every Store of a path in this process takes turns.
_PATH_LOCKS: dict[str, threading.RLock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


def path_lock(path: str) -> threading.RLock:
    key = os.path.realpath(path)
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(key, threading.RLock())


#: DuckDB's memory limit for the harness's connections (`HARNESS_DUCKDB_MEMORY`, DuckDB's own
#: words: 512MB, 2GB): past it, sorts, joins and aggregates spill to the temporary folder rather
#: than grow, so a reader of 2,000,000 outcomes stays within a CI runner's share.
MEMORY_ENV = "HARNESS_DUCKDB_MEMORY"
DEFAULT_MEMORY = "512MB"


@contextmanager
def within_memory(path: str) -> Iterator[None]:
    """DuckDB's out-of-memory error as the one line that names the limit and the fix."""
    try:
        yield
    except duckdb.OutOfMemoryException as exc:
        raise memory_error(path, exc, "reading") from None


def memory_error(path: str, exc: BaseException, doing: str) -> MemoryLimit:
    limit = os.environ.get(MEMORY_ENV) or DEFAULT_MEMORY
    return MemoryLimit(
        f"{doing} {path!r} needed more than DuckDB's memory limit {MEMORY_ENV}={limit} ({str(exc).splitlines()[0]}); "
        f"set {MEMORY_ENV} higher, e.g. {MEMORY_ENV}=2GB"
    )


def within_limits(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """`con` with DuckDB's memory limit and a folder to spill to past it: set, not passed to
    `connect`, as DuckDB refuses a second connection to a file with another configuration (a
    script of the user's, a test, in the same process). The folder is this process's: two
    processes spilling into one would share DuckDB's file names."""
    spill = Path(tempfile.gettempdir()) / f"compat-harness-duckdb-{os.getpid()}"
    con.execute(f"SET memory_limit = '{_limit()}'")
    con.execute("SET temp_directory = ?", [str(spill)])
    return con


@contextmanager
def limited(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """`con` within DuckDB's memory limit for the block (`within_limits`), then back to the limit
    it had: a writer's copy of the file spills while its migrations read every row (the split of
    an older file: 20 GB for 30 nights of 20,000 tests x 20 cells without a limit)."""
    found = con.execute("SELECT current_setting('memory_limit')").fetchone()
    within_limits(con)
    try:
        yield con
    finally:
        if found is not None:
            con.execute(f"SET memory_limit = '{found[0]}'")


def _limit() -> str:
    limit = os.environ.get(MEMORY_ENV) or DEFAULT_MEMORY
    if not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", limit.strip(), re.IGNORECASE):
        raise StoreError(f"{MEMORY_ENV}={limit!r} is not an amount of memory DuckDB reads; give one like 512MB or 2GB")
    return limit.strip()


class DbFile:
    """One DuckDB results file: its path as given and where it really is, how long to wait for
    another process's lock, and this process's lock on it (`path_lock`)."""

    def __init__(self, path: str, *, read_only: bool, lock_wait: float) -> None:
        self.path = path
        self.read_only = read_only
        #: How long to wait for another process's lock before saying who holds it.
        self.lock_wait = lock_wait
        # Where the file really is: a swap replaces it (not a symlink to it), the journals sit beside
        # it, and another working directory does not matter.
        self.where = os.path.realpath(path)
        self.lock = threading.RLock() if path == ":memory:" else path_lock(path)

    def check(self) -> None:
        target = Path(self.path)
        if target.is_dir():
            raise StoreError(f"database path {self.path!r} is a directory; pass --db path/to/results.duckdb")
        if self.read_only:
            if not target.exists():
                raise StoreError(f"database {self.path!r} does not exist; run a sweep first or pass --db with an existing file")
            return
        parent = target.parent if str(target.parent) else Path(".")
        if not target.exists() and not parent.is_dir():
            raise StoreError(
                f"cannot create database {self.path!r}: folder {str(parent)!r} does not exist; create it or pass --db with another path"
            )
        if not os.access(parent, os.W_OK):
            # DuckDB writes its WAL beside the file and the journals live there too.
            raise StoreError(read_only_folder(self.path))

    def create(self) -> None:
        """Build the migrated file under a private name and link it into place: a reader never
        meets a half-made file, and of two writers creating it at once the first link wins."""
        target = Path(self.path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.creating")
        try:
            con = duckdb.connect(str(tmp))
            try:
                migrate(con)
                con.execute("CHECKPOINT")  # its errors, not swallowed at close
            finally:
                con.close()
            try:
                os.link(tmp, target)
            except FileExistsError:
                pass  # another writer created it first: theirs is as good
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                if not target.exists():  # a file system without hard links: a rename, nearly as safe
                    os.rename(tmp, target)
        except (OSError, duckdb.Error) as exc:
            raise store_error(self.path, exc) from exc
        finally:
            for leftover in (tmp, Path(f"{tmp}.wal")):
                try:
                    leftover.unlink()
                except FileNotFoundError:
                    pass

    def connect(self, *, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
        """A connection, retried for up to `wait` s while another process holds DuckDB's write lock
        (a writer's `con`, or a process outside the harness)."""
        deadline = time.monotonic() + wait
        delay = 0.005
        while True:
            try:
                return within_limits(duckdb.connect(self.path, read_only=read_only))
            except duckdb.Error as exc:
                if not is_lock_error(exc):
                    raise store_error(self.path, exc) from exc
                if time.monotonic() >= deadline:
                    raise store_error(self.path, exc, wait) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def close(self, con: duckdb.DuckDBPyConnection) -> None:
        try:
            con.close()  # the last connection checkpoints: no WAL is left for readers to replay
        except duckdb.Error as exc:
            raise store_error(self.path, exc) from exc


class Busy(Exception):
    """Another writer kept its turn (or an outsider the file) for the whole wait."""


class Turn:
    """Writers of one results file take turns: an exclusive flock on the file itself (DuckDB's own
    locks are fcntl locks, which flock does not touch on Linux). Each turn swaps the file, so a
    lock counts only on the file still in place; a waiter that locked a swapped one tries again.
    """

    def __init__(self, path: str, wait: float) -> None:
        self.path = path
        self.wait = wait
        self.fd: int | None = None

    @classmethod
    def take(cls, path: str, wait: float) -> Turn:
        return cls(path, wait).__enter__()

    def __enter__(self) -> Turn:
        deadline = time.monotonic() + self.wait
        delay = 0.005
        while True:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError as exc:
                raise store_error(self.path, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise Busy(f"another harness process kept its turn writing {self.path!r} for {self.wait:g} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
                continue
            if identity_of(fd) == identity(self.path):
                self.fd = fd
                return self
            os.close(fd)  # swapped while we waited: the file in place now is the one to lock

    def keep_out_outsiders(self) -> None:
        """A shared fcntl lock, DuckDB's own read lock, while the file is copied and swapped: a
        process outside the harness that holds the file open for writing would tear the copy, so
        it makes us wait; one that opens it for writing meanwhile is refused by DuckDB. (Closing
        any descriptor of the file would drop this lock: the copy reads through this one.)"""
        assert self.fd is not None
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise store_error(self.path, exc) from exc
            if time.monotonic() >= deadline:
                try:  # DuckDB names the process that holds it
                    duckdb.connect(self.path, read_only=True).close()
                except duckdb.Error as exc:
                    if is_lock_error(exc):
                        raise Busy(str(store_error(self.path, exc, self.wait))) from exc
                raise Busy(f"{self.path!r} stayed locked for writing by another process for {self.wait:g} s")
            time.sleep(0.05)

    def copy_to(self, target: Path) -> None:
        """The file as it is, into `target` (a new file), read through the locked descriptor."""
        assert self.fd is not None
        stat = os.fstat(self.fd)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.st_mode & 0o777)
        try:
            offset = 0
            while offset < stat.st_size:
                try:
                    copied = os.copy_file_range(self.fd, out, stat.st_size - offset, offset, offset)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    copied = os.pwrite(out, os.pread(self.fd, min(1 << 24, stat.st_size - offset), offset), offset)
                if copied == 0:
                    break
                offset += copied
        finally:
            os.close(out)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # drops the flock and the fcntl lock
            self.fd = None

    def __exit__(self, *exc: object) -> None:
        self.release()


def identity_of(fd: int) -> tuple[int, int, int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def identity(path: str) -> tuple[int, int, int, int] | None:
    """Which file is at `path` now (a swap changes it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
