"""A cell's fork server: what it preloads, how it starts, one request at a time, parked or stopped at the end.

The server (`incell/__main__.py serve`: `incell/server.py`) imports torch and the cell's libraries once, then forks a process
per scenario (or per pytest worker) before anything touches CUDA. It comes from the first of:
a server an earlier sweep of this cell kept (`kept.py`), a fork of a zygote that has imported
torch already (`zygote.py`), or a fresh interpreter. When its imports turn out to initialise
CUDA it starts again without the modules that did (the CUDA culprits), once for all of them.
The runner (`runner.py`) hands it requests and reads what the scenarios leave behind; this
module owns the server's process, its pipes, and what its starts cost and found.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from harness.running import kept
from harness.running.incell.preload import PRELOAD_LOG_ENV  # a file of JSON lines, for measurements (unset: nothing is written)
from harness.running.processes import CHILD, child_env, kill_group, lifeline
from harness.running.zygote import TORCH_TOPS, ForkedServer

if TYPE_CHECKING:
    from harness.running.zygote import Zygote, ZygotePool

OUTPUT_TAIL_BYTES = 16 * 1024
SERVER_START_TIMEOUT = 600.0


class Server(Protocol):
    """What a cell's server is to this module: a `subprocess.Popen`, or one forked from a zygote."""

    pid: int
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def tail(path: Path, limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log, as text (what is dropped before them said)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return (f"[... {size - limit} earlier bytes dropped ...]\n" + text) if size > limit else text


class CellServer:
    """The fork server of one cell, in the cell's folder `tmp` and environment `env`.

    `entries` is what it preloads (`preload_entries`, narrowed as culprits are found);
    `avoid`, the modules known to initialise CUDA here, never tried; `zygotes`, the pool to fork
    it from; `keep`, the seconds it waits parked for the next sweep of this cell (0: it exits).
    """

    def __init__(
        self,
        python: str,
        env: dict[str, str],
        tmp: Path,
        entries: list[dict[str, Any]],
        *,
        avoid: set[str],
        zygotes: ZygotePool | None = None,
        keep: float = 0.0,
    ) -> None:
        self.python, self.env, self.tmp = python, env, tmp
        self.entries, self.avoid, self.zygotes, self.keep = entries, avoid, zygotes, keep
        self._server: Server | None = None
        self._selector: selectors.BaseSelector | None = None
        self._buffer = b""
        self.start_seconds = 0.0
        self.starts = 0  # each start of the fork server, restarts included
        self.kept_taken = 0  # servers an earlier sweep kept, taken instead of a start
        self.kept_seconds = 0.0  # attaching to them, their imports of what they lacked included
        self.cuda_restarts = 0  # of those, starts again without modules that initialised CUDA
        self.preloaded: list[str] = []
        self.cuda_initialized_by = ""
        self.cuda_culprits: list[str] = []
        self.cuda_via: dict[str, str] = {}  # culprit -> the library whose import reached the driver
        self.cuda_chains: list[list[str]] = []  # the import chains that did, outermost module first
        self.preload_seconds: dict[str, float] = {}  # per module, in the server's last start
        self.zygote: Zygote | None = None  # the zygote the server was forked from, if it was
        self._scenario_zygote: Zygote | None = None  # the zygote told of the running scenario
        self.refusals: list[str] = []  # why zygotes could not serve this cell
        self.running: int | None = None  # the process (group) it forked for the request running now

    @property
    def up(self) -> bool:
        return self._server is not None and self._server.poll() is None

    def start(self) -> None:
        """Start the server (preloading) unless it is running."""
        if not self.up:
            self._start()

    def close(self) -> None:
        """Park the server for the next sweep of this cell where it may be kept, else stop it."""
        if not (self.keep and self._park()):
            self.stop()

    def kill_running(self) -> None:
        """Kill the request's process running now, with its process group."""
        pid, self.running = self.running, None
        if pid is not None:
            kill_group(pid)

    def feed(self, request: dict[str, Any], timeout: float) -> tuple[int | None, int | None, bool]:
        """Run one request in a process forked by the server: (exit code, signal, timed out)."""
        self.start()
        assert self._server is not None and self._server.stdin is not None
        self._server.stdin.write((json.dumps(request) + "\n").encode())
        self._server.stdin.flush()
        hello = self._read_line(60)
        if hello is None or "pid" not in hello:
            self.stop()
            return None, signal.SIGKILL, False
        self.running = hello["pid"]
        answer = self._read_line(timeout)
        self.running = None
        if answer is None:
            kill_group(hello["pid"])
            answer = self._read_line(30)
            if answer is None:
                self.stop()
            return None, None, True
        return answer.get("exit"), answer.get("signal"), False

    # -- starting ------------------------------------------------------------------------------
    def _start(self) -> None:
        started = time.monotonic()
        self._log = (self.tmp / "server.log").open("w")
        preload_file = self.tmp / "preload.json"
        preload_file.write_text(json.dumps(self.entries))
        argv = [str(CHILD), "serve", "--preload-file", str(preload_file)]
        ready = self._from_kept() if self.keep and not self.cuda_restarts else None
        if ready is None and self.zygotes is not None:
            ready = self._fork_from_zygote(argv)
        if ready is None:
            self.zygote = None
            self._attach(
                subprocess.Popen(
                    [self.python, *argv],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=self._log,
                    env=child_env(self.env),
                    pass_fds=(lifeline(),),
                    start_new_session=True,
                    cwd=self.tmp,
                )
            )
            ready = self._read_line(SERVER_START_TIMEOUT)
        if ready is None or "ready" not in ready:
            self.stop()
            raise RuntimeError(f"the fork server did not start: {tail(self.tmp / 'server.log', 2000)}")
        self.preloaded = list(ready["ready"])
        self.preload_seconds = dict(ready.get("seconds", {}))
        if ready.get("kept"):
            self.kept_seconds += time.monotonic() - started
            self.kept_taken += 1
        else:
            self.start_seconds += time.monotonic() - started
            self.starts += 1
            _log_start(self.python, self.start_seconds)
        found = [str(m) for m in ready.get("cuda_culprits") or [ready.get("cuda_initialized_by")] if m]
        if found:
            # These modules made CUDA unusable in a fork, which a forked scenario could not
            # use: start again without them, once for all of them (the server kept importing to
            # find every one). What follows them may be clean; only what imports one goes.
            self.cuda_initialized_by = found[0]
            self.cuda_culprits += [m for m in found if m not in self.cuda_culprits]
            self.cuda_via.update({str(k): str(v) for k, v in dict(ready.get("cuda_via") or {}).items()})
            self.cuda_chains += [list(map(str, c)) for c in ready.get("cuda_chains") or []]
            self.stop()
            self.entries = without_culprits(self.entries, self.avoid | set(self.cuda_culprits))
            self.cuda_restarts += 1
            self._start()

    def _from_kept(self) -> dict[str, Any] | None:
        """The ready line of a server an earlier sweep of this cell kept, attached to this cell
        (its pipes, log, lifeline, variables and folder); None where none is parked."""
        try:
            path = kept.socket_path(kept.server_key(self.python, self.env))
        except OSError:
            return None
        if not path.exists():
            return None
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        message = {"env": kept.per_cell(self.env), "cwd": str(self.tmp), "preload": self.entries}
        try:
            pid = kept.attach(path, [stdin_r, stdout_w, self._log.fileno(), lifeline()], message)
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        if pid is None:
            os.close(stdin_w)
            os.close(stdout_r)
            return None
        self._attach(ForkedServer(pid, stdin_w, stdout_r))
        ready = self._read_line(SERVER_START_TIMEOUT)
        if ready is None or "ready" not in ready:
            self.stop()
            self._log = (self.tmp / "server.log").open("w")
            return None
        return ready

    def _fork_from_zygote(self, argv: list[str]) -> dict[str, Any] | None:
        """The server's ready line, forked from a zygote; None where no zygote can serve this cell."""
        assert self.zygotes is not None
        while True:
            forked = self.zygotes.fork(self, argv)
            if forked is None:
                return None
            server, zygote, zygote_seconds = forked
            self.start_seconds -= zygote_seconds  # counted as the zygote's start, not this server's
            self.cuda_culprits += [c for c in zygote.cuda_culprits if c not in self.cuda_culprits]
            self._attach(server)
            ready = self._read_line(SERVER_START_TIMEOUT)
            if ready is not None and "refused" in ready:
                # This cell's files differ from the zygote's: the pool will try another (or
                # start one from this cell), and after that the plain server takes over.
                self.refusals.append(str(ready["refused"]))
                self.zygotes.refused(zygote, self, str(ready["refused"]))
                self.stop()
                self._log = (self.tmp / "server.log").open("w")
                continue
            self.zygote = zygote
            return ready

    def scenario_started(self) -> None:
        # the zygote counted now is the one told at the end, though a restart may change self.zygote
        self._scenario_zygote = self.zygote
        if self.zygotes is not None and self.zygote is not None:
            self.zygotes.scenario_started(self.zygote)

    def scenario_ended(self, modules: list[str]) -> None:
        """A scenario this server forked ended, having imported `modules`: its zygote's pool learns them."""
        zygote, self._scenario_zygote = self._scenario_zygote, None
        if self.zygotes is not None and zygote is not None:
            self.zygotes.learn(zygote, modules)

    # -- ending --------------------------------------------------------------------------------
    def _park(self) -> bool:
        """Leave the server parked for the next sweep of this cell (`kept.py`), rather than
        stopping it; False where it cannot be (it died, too many are parked, no private folder)."""
        server = self._server
        if server is None or server.poll() is not None or server.stdin is None:
            return False
        try:
            if not kept.room():
                return False
            path = kept.socket_path(kept.server_key(self.python, self.env))
            server.stdin.write((json.dumps({"park": str(path), "idle": self.keep}) + "\n").encode())
            server.stdin.flush()
            # parked once it says so: the next sweep of this cell, even one right after, finds it
            answer = self._read_line(10)
        except OSError:
            return False
        if answer is None or not answer.get("parked"):
            return False  # another server of this cell is parked: this one exits (stopped below)
        self._let_go()
        for end in (server.stdin, server.stdout):
            if end is not None:
                end.close()
        self._log.close()
        return True

    def stop(self) -> None:
        """Stop the server: its input closed, then killed with its group if it does not exit."""
        if self._server is None:
            return
        server = self._let_go()
        try:
            if server.stdin:
                server.stdin.close()
            server.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            kill_group(server.pid)
            server.wait()
        if server.stdout:
            server.stdout.close()
        self._log.close()

    # -- the pipe ------------------------------------------------------------------------------
    def _attach(self, server: Server) -> None:
        assert server.stdout is not None
        self._server = server
        self._selector = selectors.DefaultSelector()
        self._selector.register(server.stdout, selectors.EVENT_READ)
        self._buffer = b""

    def _let_go(self) -> Server:
        """Forget the server (it is stopped or parked by the caller) and stop watching its output."""
        assert self._server is not None
        server, self._server = self._server, None
        if self._selector:
            self._selector.close()
            self._selector = None
        return server

    def _read_line(self, timeout: float) -> dict[str, Any] | None:
        """Next JSON line from the server, or None on timeout or EOF."""
        assert self._server is not None and self._server.stdout is not None and self._selector
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self._selector.select(remaining):
                continue
            chunk = os.read(self._server.stdout.fileno(), 65536)
            if not chunk:
                return None  # EOF: the server died
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        return data if isinstance(data, dict) else self._read_line(max(0.0, deadline - time.monotonic()))


# -- what a server preloads ------------------------------------------------------------------------
def without_culprits(entries: list[dict[str, Any]], culprits: set[str]) -> list[dict[str, Any]]:
    """The preload entries less the modules that initialise CUDA at import, or live in a package that does.

    A library's learned group (`transformers.*`) keeps its other modules: on the GPU runner it
    held `transformers.integrations.bitsandbytes`, which imports bitsandbytes, and dropping the
    group whole left transformers unpreloaded (every scenario imported it again, 2-3 s each).
    A module under a culprit package is never tried: importing it imports the package first
    (each `peft.*` module would cost a restart). A group named as a culprit by an older memory
    (`lib.*`) is split into its modules, each probed; they keep the group's name under "group",
    so what they preload is still learned for next time.

    >>> group = {"name": "lib.*", "modules": ["lib.a", "lib.greedy", "lib.greedy.sub", "lib.b"]}
    >>> [e["modules"] for e in without_culprits([{"name": "torch", "modules": ["torch"]}, group], {"lib.greedy"})]
    [['torch'], ['lib.a', 'lib.b']]
    >>> [e["name"] for e in without_culprits([group], {"lib.*"})]
    ['lib.a', 'lib.greedy', 'lib.greedy.sub', 'lib.b']
    >>> without_culprits([{"name": "peft.*", "modules": ["peft", "peft.tuners.lora"]}], {"peft"})
    []
    """
    left: list[dict[str, Any]] = []
    for entry in entries:
        name = entry["name"]
        if name in culprits and name.endswith(".*"):
            split = [{"name": m, "modules": [m], "group": name} for m in entry["modules"]]
            left += [e for e in split if not _under_culprit(e["name"], culprits)]
            continue
        modules = [m for m in entry["modules"] if not _under_culprit(m, culprits)]
        if modules and name not in culprits:
            left.append({**entry, "modules": modules})
    return left


def _under_culprit(module: str, culprits: set[str]) -> bool:
    """`module`, or a package it lives in, initialises CUDA at import."""
    parts = module.split(".")
    return any(".".join(parts[:i]) in culprits for i in range(1, len(parts) + 1))


def preload_entries(preload: list[str], learned: list[str] | None) -> list[dict[str, Any]]:
    """What a fork server imports, in order: {"name", "modules"} entries.

    Without `learned`, one entry per module of the matrix's `preload`. With it, the learned
    modules replace `preload`'s libraries, one entry per library (`transformers.*`), so a cell
    whose scenarios never import transformers does not preload it; `preload`'s torch entries
    stay first when the learned modules use torch (the zygote holds them).
    """
    if learned is None:
        return [{"name": m, "modules": [m]} for m in preload]
    groups: dict[str, list[str]] = {}
    for module in learned:
        groups.setdefault(module.partition(".")[0], []).append(module)
    torch_entries = [{"name": m, "modules": [m]} for m in preload if m.partition(".")[0] in TORCH_TOPS]
    uses_torch = any(top in TORCH_TOPS for top in groups)
    return (torch_entries if uses_torch else []) + [{"name": f"{top}.*", "modules": mods} for top, mods in groups.items()]


def _log_start(python: str, seconds: float) -> None:
    """For measurements (scripts/plain_vs_server.py): the server's start so far, one JSON line in
    the file HARNESS_PRELOAD_LOG names, beside what the server says of its preload."""
    path = os.environ.get(PRELOAD_LOG_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"who": "start", "python": python, "start_seconds": round(seconds, 3)}) + "\n")
