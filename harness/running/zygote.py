"""Import torch once per torch build, not once per cell: the harness side of the zygote.

A zygote is an `incell/__main__.py zygote` process (`incell/zygote.py`) started with one cell's
interpreter. It imports torch's entries of the cell's preload (torch, its compile stack), checks
that no module of a library under test came with them, and then forks one fork server per cell.
The forked child checks that every file it has loaded is byte-identical in its cell's env (the
distribution's RECORD, which hashes every file, not its version), rebases sys.path, sys.prefix
and every loaded module's paths onto the cell's env, and imports the cell's own libraries. A
cell whose files differ is refused; the pool then starts a zygote from that cell (a few per
torch build at most), and past that the cell gets a plain fork server, as without zygotes.

The torch modules a forked server goes on to import (transformers pulls in torch.distributed,
torch._dynamo, ...; a learned `torch.*` group) are the same for every cell of the build, so the
zygote imports them too, checked as its preload, before it forks the next server.

Zygotes are keyed by what a fresh interpreter would make different before any import: the
interpreter binary, the torch distribution it would import (RECORD hash), the environment
variables (OMP_NUM_THREADS and the like are read by torch at import) and the preload. Design
and limits: docs/zygote.md.

    pool = ZygotePool(forbid=["transformers", "peft"])
    with CellRunner(python, preload=[...], zygotes=pool) as runner: ...
    pool.close()
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from harness.running.incell.zygote import ZYGOTE_SOCKET_ENV, record_digest
from harness.running.processes import CELL_DIR_ENV, CHILD, child_env, kill_group, lifeline

#: The top-level modules of the torch distribution: what a zygote may preload.
TORCH_TOPS = frozenset({"torch", "functorch", "torchgen"})
START_TIMEOUT = 600.0
#: Zygotes per key: cells with the same torch but other dependencies of it (numpy, sympy) are
#: refused by the first; one more zygote each for a few such groups beats a plain server each.
MAX_PER_KEY = 3
#: How long a fork waits, at most, for the first scenario of its torch build that is running to
#: say what it imported (`ZygotePool.learn`), so that the zygote imports it for this server too:
#: on a first sweep the next cell's server is started while the first cell's first scenario runs.
FIRST_REPORT_WAIT = 10.0
#: Environment variables that differ per cell by design (activation) and do not enter the key.
PER_CELL_VARIABLES = ("PATH", "VIRTUAL_ENV", CELL_DIR_ENV)
#: "0" keeps the torch modules the servers import out of the zygote (each server imports them
#: itself, as before): the baseline of the measurements in docs/benchmarks.md.
SHARE_TORCH_ENV = "HARNESS_ZYGOTE_SHARE_TORCH"
#: "0" keeps what the scenarios imported of torch out of the zygote (only what the servers
#: loaded is shared, as before #38): the baseline of the first-sweep measurements.
LEARN_SCENARIOS_ENV = "HARNESS_ZYGOTE_LEARN_SCENARIOS"


class Client(Protocol):
    """What the pool needs of a cell that asks it for a fork server (`server.CellServer`):
    the cell's interpreter and environment, its folder, its preload (which the pool may narrow)
    and the modules it must not preload."""

    python: str
    env: dict[str, str]
    tmp: Path
    entries: list[dict[str, Any]]
    avoid: set[str]


class ForkedServer:
    """A fork server forked from a zygote. Not our child (the zygote's, which lets the kernel
    reap it), so it is watched through a pidfd; otherwise it looks like the Popen it replaces."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = os.fdopen(stdin_fd, "wb")
        self.stdout: IO[bytes] | None = os.fdopen(stdout_fd, "rb")
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # before Linux 5.3, or already gone
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self._pidfd is not None:
                gone = bool(select.select([self._pidfd], [], [], 0)[0])
            else:
                try:
                    os.kill(self.pid, 0)
                    gone = False
                except ProcessLookupError:
                    gone = True
            if gone:
                self.returncode = 0  # its status went to the zygote; the protocol said what mattered
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"fork server {self.pid}", timeout or 0.0)
            if self._pidfd is not None:
                select.select([self._pidfd], [], [], 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic())))
            else:
                time.sleep(0.02)
        return 0


class Unusable(OSError):
    """A zygote that can fork no more cells: gone, or made unusable by the torch modules it
    imported for the servers (`culprits`: those the CUDA watch named)."""

    def __init__(self, why: str, culprits: list[str] | None = None) -> None:
        super().__init__(why)
        self.culprits = culprits or []


@dataclass
class Zygote:
    """One zygote process and what it reported when it was ready."""

    python: str
    preload: list[dict[str, Any]]
    key: str = ""  # its pool's key (zygote_key)
    seconds: float = 0.0
    preloaded: list[str] = field(default_factory=list)
    preload_seconds: dict[str, float] = field(default_factory=dict)
    dists: list[str] = field(default_factory=list)  # the distributions a cell must have byte for byte
    cuda_culprits: list[str] = field(default_factory=list)  # entries dropped: they made fork unusable
    refused: set[str] = field(default_factory=set)  # interpreters (cells) it refused
    shared: set[str] = field(default_factory=set)  # torch modules sent to it to import before a fork
    proc: subprocess.Popen[bytes] | None = None
    sock: socket.socket | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fork(self, request: Path, log: Path, extra: Path | None = None) -> tuple[ForkedServer, float]:
        """Fork a server for the cell described in `request`; its stderr goes to `log`. `extra`:
        a file of torch modules to import first. Returns the server and the seconds they took."""
        assert self.sock is not None
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        message = {"request": str(request), **({"extra": str(extra)} if extra else {})}
        try:
            with self.lock:  # one request at a time: the reply names the pid of this fork
                socket.send_fds(self.sock, [json.dumps(message).encode()], [stdin_r, stdout_w, log_fd])
                reply = self.sock.recv(4096)
        except OSError:
            os.close(stdin_w)
            os.close(stdout_r)
            raise
        finally:
            for fd in (stdin_r, stdout_w, log_fd):
                os.close(fd)
        answer = json.loads(reply) if reply else {"unusable": "the zygote is gone"}
        if "pid" not in answer:
            os.close(stdin_w)
            os.close(stdout_r)
            raise Unusable(str(answer.get("unusable")), [str(c) for c in answer.get("culprits", [])])
        return ForkedServer(int(answer["pid"]), stdin_w, stdout_r), float(answer.get("extra_seconds", 0.0))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()  # the zygote reads EOF and exits; its servers live on until closed
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                kill_group(self.proc.pid, alive=lambda: self.proc is not None and self.proc.poll() is None)
                self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()


@dataclass
class ZygoteStats:
    starts: int = 0
    seconds: float = 0.0
    preload_seconds: dict[str, float] = field(default_factory=dict)
    forks: int = 0
    waited: float = 0.0  # forks waiting for a running scenario's imports (FIRST_REPORT_WAIT)
    fallbacks: Counter[str] = field(default_factory=Counter)  # why cells got a plain server
    refusals: Counter[str] = field(default_factory=Counter)  # why a zygote would not fork a cell


class ZygotePool:
    """Zygotes for one sweep, started on first use, keyed by torch build. Thread-safe."""

    def __init__(self, forbid: list[str] | None = None, workdir: Path | None = None, child: Path = CHILD) -> None:
        #: the libraries under test other than torch: a zygote that loaded one is not used
        self.forbid = sorted({f for f in forbid or [] if f.lower() != "torch"})
        self.child = child  # the tests' leak checks run a deliberately broken copy
        self._tmp = tempfile.TemporaryDirectory(prefix="harness-zygotes-", dir=workdir)
        self._zygotes: dict[str, list[Zygote]] = {}
        self._broken: dict[str, str] = {}  # key -> why no zygote serves it
        self._starting: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        #: Per key, the files in which servers forked for it list the torch modules they loaded;
        #: and what those listed, read so far, with what their scenarios imported of torch. The
        #: key's zygotes import them before the next fork.
        self.share_torch = os.environ.get(SHARE_TORCH_ENV, "1") != "0"
        self.learn_scenarios = self.share_torch and os.environ.get(LEARN_SCENARIOS_ENV, "1") != "0"
        self._loaded_files: dict[str, list[Path]] = {}
        self._torch_seen: dict[str, dict[str, None]] = {}
        self._unshared: dict[str, str] = {}  # key -> why its zygotes import no more of torch
        self._extra_culprits: dict[str, set[str]] = {}  # key -> shared modules that made a zygote unusable
        self._running: Counter[str] = Counter()  # key -> scenarios running in servers forked for it
        self._reported: set[str] = set()  # keys some scenario has said its imports for
        self._report = threading.Condition(self._lock)
        self.stats = ZygoteStats()
        self._closed = False

    # -- for CellServer -------------------------------------------------------------------
    def fork(self, runner: Client, argv: list[str]) -> tuple[ForkedServer, Zygote, float] | None:
        """A fork server for the runner's cell, forked from a zygote, and the seconds this call
        spent starting that zygote (the sweep counts them apart); None: start a plain server."""
        entries = [e for e in runner.entries if _is_torch_entry(e)]
        if not entries:
            return None  # nothing of torch to share (or the cell's scenarios never import it)
        key = zygote_key(runner.python, runner.env, entries, self.forbid)
        if not key:
            self._fallback("no torch in the cell's env")
            return None
        started = time.monotonic()
        starts = self.stats.starts
        zygote = self._zygote_for(key, runner, entries)
        zygote_seconds = time.monotonic() - started if self.stats.starts != starts else 0.0
        if zygote is None:
            return None
        # What made the zygote's fork unusable would make this server's too: not even tried.
        runner.entries = [e for e in runner.entries if e["name"] not in zygote.cuda_culprits]
        request = runner.tmp / "zygote-request.json"
        # the pool's folder, not the runner's: it is read at a later fork, maybe after the runner closed
        fd, name = tempfile.mkstemp(prefix="torch-loaded-", suffix=".json", dir=self._tmp.name)
        os.close(fd)
        loaded = Path(name)
        loaded.unlink()
        request.write_text(
            json.dumps(
                {
                    "state": describe(runner.python, runner.env, runner.tmp),
                    "env": runner.env,
                    "cwd": str(runner.tmp),
                    "argv": argv,
                    "preload": runner.entries,
                    **({"loaded_file": str(loaded)} if self.share_torch else {}),
                }
            )
        )
        waited = self._await_first_report(key)
        extra = self._extra_for(key, zygote, runner)
        try:
            server, extra_seconds = zygote.fork(request, runner.tmp / "server.log", extra)
        except OSError as exc:
            zygote.close()  # it died, or importing torch's shared modules made it unusable: the next cell starts another
            culprits = exc.culprits if isinstance(exc, Unusable) else []
            with self._lock:
                if culprits and key not in self._extra_culprits:
                    # one more chance: the next zygote imports the others, which cost every scenario its import
                    self._extra_culprits[key] = set(culprits)
                elif str(exc) and str(exc) != "the zygote is gone":
                    self._unshared[key] = str(exc)
            self._fallback(f"the zygote died ({exc})" if str(exc) else "the zygote died")
            return None
        with self._lock:
            self.stats.forks += 1
            self._loaded_files.setdefault(key, []).append(loaded)
            if extra_seconds:
                # imported in the zygote, on this server's way: counted with the zygotes' starts
                self.stats.seconds += extra_seconds
                name = "torch.* (shared)"
                self.stats.preload_seconds[name] = self.stats.preload_seconds.get(name, 0.0) + extra_seconds
            self.stats.waited += waited
        return server, zygote, zygote_seconds + extra_seconds + waited

    def _extra_for(self, key: str, zygote: Zygote, runner: Client) -> Path | None:
        """The file of torch modules for `zygote` to import before it forks this runner's server:
        those earlier servers of its key loaded, what their scenarios imported (`learn`), and this
        cell's learned torch modules (`torch.*`), less what it has imported already and what made
        a zygote of the key unusable. None: nothing new, or sharing is off."""
        if not self.share_torch:
            return None
        with self._lock:
            if key in self._unshared:
                return None
            seen = self._torch_seen.setdefault(key, {})
            for path in self._loaded_files.pop(key, []):
                try:
                    seen.update(dict.fromkeys(json.loads(path.read_text())["modules"]))
                except (OSError, ValueError, KeyError):
                    self._loaded_files.setdefault(key, []).append(path)  # not ready yet: read it next time
            learned = [m for e in runner.entries if e["name"] == "torch.*" for m in e["modules"]]
            wanted = [m for m in [*learned, *seen] if m not in zygote.shared and m.partition(".")[0] in TORCH_TOPS]
            culprits = runner.avoid | set(zygote.cuda_culprits) | self._extra_culprits.get(key, set())
            wanted = [m for m in dict.fromkeys(wanted) if not any(_under(m, c) for c in culprits)]
            if not wanted:
                return None
            zygote.shared.update(wanted)
        path = runner.tmp / "zygote-extra.json"
        path.write_text(json.dumps(wanted))
        return path

    def scenario_started(self, zygote: Zygote) -> None:
        """A scenario starts in a server forked from `zygote`; `learn` follows when it ends."""
        if self.learn_scenarios and zygote.key:
            with self._lock:
                self._running[zygote.key] += 1

    def learn(self, zygote: Zygote, modules: list[str]) -> None:
        """A scenario of a cell forked from `zygote` ended, having imported `modules`: their
        torch modules are imported in the key's zygotes before their next fork, so that later
        cells' scenarios find them loaded. On the GPU runner bitsandbytes' import pulls in
        torch._dynamo (with sympy and networkx): 1-2 s of each scenario's imports, the same in
        every cell of the build."""
        if not self.learn_scenarios or not zygote.key:
            return
        torch_modules = [m for m in modules if m.partition(".")[0] in TORCH_TOPS]
        with self._report:
            self._running[zygote.key] -= 1
            self._reported.add(zygote.key)
            self._torch_seen.setdefault(zygote.key, {}).update(dict.fromkeys(torch_modules))
            self._report.notify_all()

    def _await_first_report(self, key: str) -> float:
        """Before the first fork after a scenario of this key started: wait, FIRST_REPORT_WAIT at
        most, until one has ended and said what it imported. Never while none runs (a sweep's
        first cells, forked at once). Returns the seconds waited."""
        with self._report:
            if key in self._reported or self._running[key] <= 0:
                return 0.0
            started = time.monotonic()
            self._report.wait_for(lambda: key in self._reported or self._running[key] <= 0 or self._closed, FIRST_REPORT_WAIT)
            return time.monotonic() - started

    def refused(self, zygote: Zygote, runner: Client, reason: str) -> None:
        """A zygote's fork found the cell's files differ: route that cell elsewhere (the next
        `fork` tries another zygote, starts one from this cell, or gives up on zygotes for it)."""
        with self._lock:
            zygote.refused.add(runner.python)
            self.stats.forks -= 1
            self.stats.refusals[reason] += 1

    def close(self) -> None:
        with self._report:
            self._closed = True
            self._report.notify_all()  # a fork waiting for a scenario's imports gives up now
            zygotes = [z for group in self._zygotes.values() for z in group]
            self._zygotes.clear()
        for zygote in zygotes:
            zygote.close()
        self._tmp.cleanup()

    def describe_fallbacks(self) -> str:
        return "; ".join(f"{n} cell(s): {why}" for why, n in self.stats.fallbacks.most_common())

    # -- inside ---------------------------------------------------------------------------
    def _fallback(self, why: str) -> None:
        with self._lock:
            self.stats.fallbacks[why] += 1

    def _zygote_for(self, key: str, runner: Client, entries: list[dict[str, Any]]) -> Zygote | None:
        with self._lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:  # two look-ahead threads asking for one torch build start it once
            with self._lock:
                if self._closed:
                    return None
                if key in self._broken:
                    self.stats.fallbacks[self._broken[key]] += 1
                    return None
                group = self._zygotes.setdefault(key, [])
                group[:] = [z for z in group if z.alive()]
                for zygote in group:
                    if runner.python not in zygote.refused:
                        return zygote
                if any(z.python == runner.python for z in group) or len(group) >= MAX_PER_KEY:
                    self.stats.fallbacks["its files differ from every zygote's of its torch build"] += 1
                    return None
            started, problem = self._start(runner, entries)
            with self._lock:
                if started is None:
                    self._broken[key] = problem
                    self.stats.fallbacks[problem] += 1
                    return None
                if self._closed:
                    started.close()
                    return None
                started.key = key
                self._zygotes[key].append(started)
                return started

    def _start(self, runner: Client, entries: list[dict[str, Any]]) -> tuple[Zygote | None, str]:
        """Start a zygote from the runner's interpreter; dropping CUDA culprits, as a server does."""
        zygote = Zygote(runner.python, [e for e in entries if e["name"] not in runner.avoid])
        while True:
            started = time.monotonic()
            report = self._spawn(zygote, runner)
            zygote.seconds += time.monotonic() - started
            with self._lock:
                self.stats.starts += 1
                self.stats.seconds += time.monotonic() - started
                for module, seconds in (report or {}).get("seconds", {}).items():
                    self.stats.preload_seconds[module] = self.stats.preload_seconds.get(module, 0.0) + seconds
            if report is None:
                zygote.close()
                return None, "the zygote did not start (see its log)"
            if report.get("leaked"):
                zygote.close()
                leaked = ", ".join(report["leaked"])
                return None, f"importing torch's preload loaded a library under test ({leaked}); take it out of `preload`"
            culprit = report.get("cuda_initialized_by")
            if culprit:
                zygote.close()
                zygote.cuda_culprits.append(culprit)
                zygote.preload = [e for e in zygote.preload if e["name"] != culprit]
                if not zygote.preload:
                    return None, f"{culprit} initialises CUDA at import"
                continue
            zygote.preloaded = list(report.get("ready", []))
            zygote.preload_seconds = dict(report.get("seconds", {}))
            zygote.dists = list(report.get("dists", []))
            return zygote, ""

    def _spawn(self, zygote: Zygote, runner: Client) -> dict[str, Any] | None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = Path(tempfile.mkstemp(suffix=".json", dir=self._tmp.name)[1])
        config.write_text(json.dumps({"preload": zygote.preload, "forbid": self.forbid}))
        log = config.with_suffix(".log").open("w")
        env = {**child_env(runner.env), ZYGOTE_SOCKET_ENV: str(theirs.fileno())}
        try:
            zygote.proc = subprocess.Popen(
                [runner.python, str(self.child), "zygote", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                pass_fds=(lifeline(), theirs.fileno()),
                start_new_session=True,
                cwd=self._tmp.name,
            )
        finally:
            theirs.close()
            log.close()
        zygote.sock = mine
        assert zygote.proc.stdout is not None
        line = b""
        deadline = time.monotonic() + START_TIMEOUT
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            if select.select([zygote.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                chunk = os.read(zygote.proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                line += chunk
        try:
            report = json.loads(line)
        except ValueError:
            return None
        return report if isinstance(report, dict) else None


def _under(module: str, culprit: str) -> bool:
    """`module` is `culprit` or inside it (culprits may be learned groups such as `torch.*`)."""
    top = culprit.removesuffix(".*")
    return module == top or module.startswith(top + ".")


def _is_torch_entry(entry: dict[str, Any]) -> bool:
    """A preload entry the zygote takes: one of torch's modules named in the matrix's preload
    (learned modules, `torch.*`, are the cell's: they are cheap once torch is in)."""
    return not entry["name"].endswith(".*") and all(m.partition(".")[0] in TORCH_TOPS for m in entry["modules"])


def torch_record(python: str) -> str:
    """The hash of the RECORD of the torch an env's interpreter would import ("" if none).

    The env's own site-packages first, then the folders its .pth files add (an inherited
    base's): `inherit` leaves a metadata-only stub in the env, which owns no torch files.
    """
    env = Path(python).parent.parent
    sites = sorted(env.glob("lib/python*/site-packages"))
    for pth in [p for site in sites for p in sorted(site.glob("*.pth"))]:
        try:
            lines = pth.read_text().splitlines()
        except OSError:
            continue
        sites += [Path(line) for line in lines if line and not line.startswith(("#", "import")) and Path(line).is_dir()]
    for site in sites:
        for info in sorted(site.glob("torch-*.dist-info")):
            try:
                owns_torch = b"torch/__init__.py" in (info / "RECORD").read_bytes()
            except OSError:
                continue
            if owns_torch:
                return record_digest(str(info / "RECORD"))
    return ""


def zygote_key(python: str, env: dict[str, str], entries: list[dict[str, Any]], forbid: list[str]) -> str:
    """Cells with equal keys can share a zygote ("" when the cell has no torch)."""
    record = torch_record(python)
    if not record:
        return ""
    variables = sorted((k, v) for k, v in env.items() if k not in PER_CELL_VARIABLES)
    payload = json.dumps([os.path.realpath(python), record, variables, entries, forbid])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def describe(python: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """sys.path, prefixes and executables of a fresh interpreter in this env (`incell/__main__.py describe`)."""
    proc = subprocess.run([python, str(CHILD), "describe"], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"cannot describe the interpreter {python}: {proc.stderr.strip()[-500:]}")
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    return data
