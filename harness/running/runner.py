"""Run scenarios inside a cell's interpreter, one isolated process each.

Two isolation modes share one child (`child.py`):
- `fork`: a server per cell imports torch and transformers once, then forks per scenario
  before anything touches CUDA; each scenario still gets its own process and process group.
  With a zygote pool (`harness/running/zygote.py`) the server itself is forked from a process that
  has imported torch already, and imports only the cell's own libraries.
- `process`: a fresh interpreter per scenario.
Either way a segfault, `os._exit`, a hang, MemoryError or a 50 MB flood of output ends as one
outcome, and a timeout kills the scenario's whole process group. Every process started here
watches the harness's lifeline (`processes.lifeline`) and dies with the harness, however it ends.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from harness.analysis.interpret import RawRun
from harness.inputs import bundled
from harness.running import kept
from harness.running.envs import uv_binary
from harness.running.processes import CELL_DIR_ENV, CHILD, child_env, kill_group, lifeline
from harness.running.zygote import TORCH_TOPS, ForkedServer

if TYPE_CHECKING:
    from harness.running.zygote import Zygote, ZygotePool

KIT_DIR = bundled.kit_dir()  # `_kit` and the other helpers: importable from every scenario, wherever it lives
OUTPUT_TAIL_BYTES = 16 * 1024
SERVER_START_TIMEOUT = 600.0
SUITE_WAIT_SECONDS = 7 * 24 * 3600.0  # a pytest worker runs until its tests end or the controller kills it


class Server(Protocol):
    """What the runner needs of a fork server: a `subprocess.Popen`, or one forked from a zygote."""

    pid: int
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def _tail(path: Path, limit: int = OUTPUT_TAIL_BYTES) -> str:
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


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


PIP_SHIM = """#!/bin/sh
# The cell's env was made by uv and carries no pip: this is uv's pip, bound to it (VIRTUAL_ENV).
exec '{uv}' pip "$@"
"""


def activation(python: str, tools: Path, path: str) -> dict[str, str]:
    """PATH and VIRTUAL_ENV of a scenario process: the cell's env comes first, as if activated.

    A scenario (or a library) that runs `python`, `pip` or a console script gets the cell's,
    not the host's. It saves time too: bitsandbytes runs `pip list` at import, in every
    scenario where it cannot be preloaded (it initialises CUDA), and the host's pip lists the
    host's packages (0.18-0.31 s on the H200 runner; 0.5 s here for 105 packages). uv envs have
    no pip, so `tools` gets a `pip` that is uv's, listing the cell's packages (0.07 s here).
    """
    bin_dir = Path(python).parent
    if not (bin_dir.parent / "pyvenv.cfg").exists():
        return {}  # not a virtualenv: leave the user's PATH alone
    entries = [str(bin_dir)]
    if not (bin_dir / "pip").exists():
        try:
            uv = uv_binary()
        except FileNotFoundError:
            uv = ""
        if uv:
            tools.mkdir(parents=True, exist_ok=True)
            shim = tools / "pip"
            shim.write_text(PIP_SHIM.format(uv=uv))
            shim.chmod(0o755)
            entries.insert(0, str(tools))
    return {"PATH": os.pathsep.join([*entries, path]), "VIRTUAL_ENV": str(bin_dir.parent)}


class CellRunner:
    """Runs scenarios for one cell. Use as a context manager.

    `preload` is the matrix's list of modules; `learned`, when the sweep knows it, the modules
    this cell's scenarios imported last time, which replace `preload`'s libraries (torch's
    entries stay: the zygote holds them). `zygotes` forks the server from a process that has
    imported torch already, when the cell's files allow it.
    """

    def __init__(
        self,
        python: str,
        *,
        isolation: str = "fork",
        preload: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        avoid: set[str] | None = None,
        learned: list[str] | None = None,
        zygotes: ZygotePool | None = None,
        keep: float = 0.0,
    ) -> None:
        self.python = python
        #: seconds a server waits, parked, for the next sweep of this cell (`kept.py`); 0: it exits
        self.keep = keep
        self.isolation = isolation
        # Modules known (from earlier cells) to initialise CUDA at import are not even tried.
        self.avoid = set(avoid or ())
        self.entries = without_culprits(preload_entries(preload or [], learned), self.avoid)
        self.zygotes = zygotes
        self._tmp = tempfile.TemporaryDirectory(prefix="harness-", dir=workdir)
        self.tmp = Path(self._tmp.name)
        # HARNESS_CELL_DIR: one folder for the cell's scenarios to share what each would make alike
        # (the kit's saved tiny model and adapter: `_gemma4._saved`); it goes with the runner
        base = {
            **os.environ,
            **(env or {}),
            "PYTHONUNBUFFERED": "1",
            "HARNESS_KIT_DIR": str(KIT_DIR),
            CELL_DIR_ENV: str(self.tmp / "cell"),
        }
        self.env = {**base, **activation(python, self.tmp / "bin", base.get("PATH", os.defpath))}
        self._server: Server | None = None
        self._selector: selectors.BaseSelector | None = None
        self._buffer = b""
        self.server_start_seconds = 0.0
        self.server_starts = 0  # each start of the fork server, restarts included
        self.servers_kept = 0  # servers an earlier sweep kept, taken instead of a start
        self.kept_seconds = 0.0  # attaching to them, their imports of what they lacked included
        self.cuda_restarts = 0  # of those, starts again without modules that initialised CUDA
        self.preloaded: list[str] = []
        self.cuda_initialized_by = ""
        self.cuda_culprits: list[str] = []
        self.cuda_via: dict[str, str] = {}  # culprit -> the library whose import reached the driver
        self.cuda_chains: list[list[str]] = []  # the import chains that did, outermost module first
        # modules the scenarios loaded that import a culprit at module level (the child reads
        # them off after each run): not preloaded next time, so never a restart
        self.culprit_importers: dict[str, str] = {}
        self.preload_seconds: dict[str, float] = {}  # per module, in the server's last start
        self.zygote: Zygote | None = None  # the zygote the server was forked from, if it was
        self.refusals: list[str] = []  # why zygotes could not serve this cell
        self.imports: dict[str, list[str]] = {}  # scenario path -> installed modules it imported (leaves)
        self._running: int | None = None  # the scenario process (group) running now, if any

    @property
    def preload(self) -> list[str]:
        """The names of the preload entries (a module, or `lib.*` for a library's learned modules)."""
        return [e["name"] for e in self.entries]

    def __enter__(self) -> CellRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.kill_running()  # a sweep stopped mid-scenario (SIGTERM, Ctrl-C, an error)
        if not (self.keep and self._park_server()):
            self._stop_server()
        self._tmp.cleanup()

    def kill_running(self) -> None:
        """Kill the scenario running now, with its process group: it lives in its own session,
        so a signal to the sweep's group does not reach it."""
        pid, self._running = self._running, None
        if pid is not None:
            kill_group(pid)

    def start(self) -> None:
        """Start the fork server now (preloading), rather than at the first scenario."""
        if self.isolation == "fork" and (self._server is None or self._server.poll() is not None):
            self._start_server()

    # -- fork server -------------------------------------------------------------------
    def _start_server(self) -> None:
        started = time.monotonic()
        self._server_log = (self.tmp / "server.log").open("w")
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
                    stderr=self._server_log,
                    env=child_env(self.env),
                    pass_fds=(lifeline(),),
                    start_new_session=True,
                    cwd=self.tmp,
                )
            )
            ready = self._read_line(SERVER_START_TIMEOUT)
        if ready is None or "ready" not in ready:
            self._stop_server()
            raise RuntimeError(f"the fork server did not start: {_tail(self.tmp / 'server.log', 2000)}")
        self.preloaded = list(ready["ready"])
        self.preload_seconds = dict(ready.get("seconds", {}))
        if ready.get("kept"):
            self.kept_seconds += time.monotonic() - started
            self.servers_kept += 1
        else:
            self.server_start_seconds += time.monotonic() - started
            self.server_starts += 1
        found = [str(m) for m in ready.get("cuda_culprits") or [ready.get("cuda_initialized_by")] if m]
        if found:
            # These modules made CUDA unusable in a fork, which a forked scenario could not
            # use: start again without them, once for all of them (the server kept importing to
            # find every one). What follows them may be clean; only what imports one goes.
            self.cuda_initialized_by = found[0]
            self.cuda_culprits += [m for m in found if m not in self.cuda_culprits]
            self.cuda_via.update({str(k): str(v) for k, v in dict(ready.get("cuda_via") or {}).items()})
            self.cuda_chains += [list(map(str, c)) for c in ready.get("cuda_chains") or []]
            self._stop_server()
            self.entries = without_culprits(self.entries, self.avoid | set(self.cuda_culprits))
            self.cuda_restarts += 1
            self._start_server()

    def _from_kept(self) -> dict[str, Any] | None:
        """The ready line of a server an earlier sweep of this cell kept, attached to this runner
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
            pid = kept.attach(path, [stdin_r, stdout_w, self._server_log.fileno(), lifeline()], message)
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
            self._stop_server()
            self._server_log = (self.tmp / "server.log").open("w")
            return None
        return ready

    def _park_server(self) -> bool:
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
        self._server_log.close()
        return True

    def _fork_from_zygote(self, argv: list[str]) -> dict[str, Any] | None:
        """The server's ready line, forked from a zygote; None where no zygote can serve this cell."""
        assert self.zygotes is not None
        while True:
            forked = self.zygotes.fork(self, argv)
            if forked is None:
                return None
            server, zygote, zygote_seconds = forked
            self.server_start_seconds -= zygote_seconds  # counted as the zygote's start, not this server's
            self.cuda_culprits += [c for c in zygote.cuda_culprits if c not in self.cuda_culprits]
            self._attach(server)
            ready = self._read_line(SERVER_START_TIMEOUT)
            if ready is not None and "refused" in ready:
                # This cell's files differ from the zygote's: the pool will try another (or
                # start one from this cell), and after that the plain server takes over.
                self.refusals.append(str(ready["refused"]))
                self.zygotes.refused(zygote, self, str(ready["refused"]))
                self._stop_server()
                self._server_log = (self.tmp / "server.log").open("w")
                continue
            self.zygote = zygote
            return ready

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

    def _stop_server(self) -> None:
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
        self._server_log.close()

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

    def _run_forked(self, request: dict[str, Any], timeout: float) -> tuple[int | None, int | None, bool]:
        if self._server is None or self._server.poll() is not None:
            self._start_server()
        assert self._server is not None and self._server.stdin is not None
        self._server.stdin.write((json.dumps(request) + "\n").encode())
        self._server.stdin.flush()
        hello = self._read_line(60)
        if hello is None or "pid" not in hello:
            self._stop_server()
            return None, signal.SIGKILL, False
        self._running = hello["pid"]
        answer = self._read_line(timeout)
        self._running = None
        if answer is None:
            kill_group(hello["pid"])
            answer = self._read_line(30)
            if answer is None:
                self._stop_server()
            return None, None, True
        return answer.get("exit"), answer.get("signal"), False

    # -- fresh process -------------------------------------------------------------------
    def _run_process(self, request: dict[str, Any], timeout: float) -> tuple[int | None, int | None, bool]:
        env = child_env({**self.env, **request["env"]})
        if request.get("kind") == "suite":
            (self.tmp / "suite-request.json").write_text(json.dumps(request))
            argv = [self.python, str(CHILD), "suite", str(self.tmp / "suite-request.json")]
        else:
            argv = [self.python, str(CHILD), "run", request["scenario"], request["result"]]
        with open(request["output"], "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                pass_fds=(lifeline(),),
                start_new_session=True,
                cwd=self.tmp,
            )
            self._running = proc.pid
            try:
                code = proc.wait(timeout=timeout)
                self._running = None
                try:  # what the scenario left running in its group must not outlive it
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            except subprocess.TimeoutExpired:
                self._running = None
                kill_group(proc.pid, alive=lambda: proc.poll() is None)
                proc.wait()
                return None, None, True
        if code < 0:
            return None, -code, False
        return code, None, False

    def run(self, scenario: Path, timeout: float, env: Mapping[str, str] | None = None) -> RawRun:
        slot = tempfile.mkdtemp(dir=self.tmp)
        result, output, metrics = Path(slot, "result.json"), Path(slot, "output.log"), Path(slot, "metrics.json")
        request = {
            "scenario": str(scenario.resolve()),
            "result": str(result),
            "output": str(output),
            "env": {**(env or {}), "HARNESS_METRICS": str(metrics), **_culprits_env(self.avoid | set(self.cuda_culprits))},
        }
        self.start()  # before the clock starts: a scenario's seconds are its own
        started = time.monotonic()
        runner = self._run_forked if self.isolation == "fork" else self._run_process
        exit_code, sig, timed_out = runner(request, timeout)
        seconds = time.monotonic() - started
        record = _read_json(result)
        imported = record.pop("imported", None) if record is not None else None
        ran = record.pop("run_seconds", None) if record is not None else None
        importers = record.pop("imports_culprit", None) if record is not None else None
        importers = {str(k): str(v) for k, v in importers.items()} if isinstance(importers, dict) else {}
        self.culprit_importers.update(importers)
        modules = [m for m in imported if isinstance(m, str)] if isinstance(imported, list) else []
        if isinstance(imported, list):
            self.imports[str(request["scenario"])] = modules
        return RawRun(
            record=record,
            exit_code=exit_code,
            signal=sig,
            timed_out=timed_out,
            seconds=seconds,
            output_tail=_tail(output),
            metrics=_read_json(metrics) or {},
            imported=modules,
            run_seconds=float(ran) if isinstance(ran, int | float) else None,
            imports_culprit=importers,
        )

    def run_suite_worker(
        self, root: Path, args: list[str], events: Path, skip: list[str], output: Path, env: Mapping[str, str], keep: Path | None = None
    ) -> tuple[int | None, int | None]:
        """One pytest worker (`testsuite_child.py`) in this cell, forked from the server like a
        scenario: its own process group, killed by `kill_running()`. Blocks until it ends.
        `keep`: a shard's cut cell, where the controller writes the node ids this shard runs."""
        request: dict[str, Any] = {"kind": "suite", "root": str(root), "args": args, "events": str(events), "skip": skip}
        request["keep"] = str(keep) if keep is not None else ""
        request.update(output=str(output), env=dict(env))
        self.start()
        runner = self._run_forked if self.isolation == "fork" else self._run_process
        exit_code, sig, _ = runner(request, SUITE_WAIT_SECONDS)  # the controller times each test itself
        return exit_code, sig


def _culprits_env(known: set[str]) -> dict[str, str]:
    """Tell a scenario's process which modules initialise CUDA here, so that it names the
    modules it loaded that import one (`child._importers_of`). Nothing where none do."""
    return {"HARNESS_CUDA_CULPRITS": ",".join(sorted(known))} if known else {}


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
    kept: list[dict[str, Any]] = []
    for entry in entries:
        name = entry["name"]
        if name in culprits and name.endswith(".*"):
            split = [{"name": m, "modules": [m], "group": name} for m in entry["modules"]]
            kept += [e for e in split if not _under_culprit(e["name"], culprits)]
            continue
        modules = [m for m in entry["modules"] if not _under_culprit(m, culprits)]
        if modules and name not in culprits:
            kept.append({**entry, "modules": modules})
    return kept


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
