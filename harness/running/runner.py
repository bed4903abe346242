"""Run scenarios inside a cell's interpreter, one isolated process each, and read what each left behind.

Two isolation modes share one child (`incell/`, started as `incell/__main__.py`):
- `fork`: a server per cell imports torch and transformers once, then forks per scenario
  before anything touches CUDA; each scenario still gets its own process and process group.
  The server is `server.CellServer`'s to start, feed and park; with a zygote pool
  (`harness/running/zygote.py`) it is forked from a process that has imported torch already,
  and imports only the cell's own libraries.
- `process`: a fresh interpreter per scenario.
The runner sets the cell's processes up (its folder, its environment as if activated), hands each
request to the server or to a fresh interpreter, and reads its result, metrics and output back.
Either way a segfault, `os._exit`, a hang, MemoryError or a 50 MB flood of output ends as one
outcome, and a timeout kills the scenario's whole process group. Every process started here
watches the harness's lifeline (`processes.lifeline`) and dies with the harness, however it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.interpret import RawRun
from harness.inputs import bundled
from harness.running.envs import uv_binary
from harness.running.processes import CELL_DIR_ENV, CHILD, child_env, kill_group, lifeline
from harness.running.server import CellServer, preload_entries, tail, without_culprits

if TYPE_CHECKING:
    from harness.running.zygote import ZygotePool

KIT_DIR = bundled.kit_dir()  # `_kit` and the other helpers: importable from every scenario, wherever it lives
SUITE_WAIT_SECONDS = 7 * 24 * 3600.0  # a pytest worker runs until its tests end or the controller kills it


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
    imported torch already, when the cell's files allow it. `keep`: seconds the server waits,
    parked, for the next sweep of this cell (`kept.py`); 0: it exits.
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
        self.isolation = isolation
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
        # Modules known (from earlier cells) to initialise CUDA at import are not even tried.
        known = set(avoid or ())
        entries = without_culprits(preload_entries(preload or [], learned), known)
        self.server = CellServer(python, self.env, self.tmp, entries, avoid=known, zygotes=zygotes, keep=keep)
        # modules the scenarios loaded that import a culprit at module level (the child reads
        # them off after each run): not preloaded next time, so never a restart
        self.culprit_importers: dict[str, str] = {}
        self.imports: dict[str, list[str]] = {}  # scenario path -> installed modules it imported (leaves)
        self._running: int | None = None  # the fresh interpreter running now (isolation "process"), if any

    @property
    def preload(self) -> list[str]:
        """The names of the preload entries (a module, or `lib.*` for a library's learned modules)."""
        return [e["name"] for e in self.server.entries]

    def __enter__(self) -> CellRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.kill_running()  # a sweep stopped mid-scenario (SIGTERM, Ctrl-C, an error)
        self.server.close()
        self._tmp.cleanup()

    def kill_running(self) -> None:
        """Kill the scenario running now, with its process group: it lives in its own session,
        so a signal to the sweep's group does not reach it."""
        pid, self._running = self._running, None
        if pid is not None:
            kill_group(pid)
        self.server.kill_running()

    def start(self) -> None:
        """Start the fork server now (preloading), rather than at the first scenario."""
        if self.isolation == "fork":
            self.server.start()

    def _execute(self, request: dict[str, Any], timeout: float) -> tuple[int | None, int | None, bool]:
        """One request, in a process the server forks or in a fresh interpreter: (exit code, signal, timed out)."""
        return self.server.feed(request, timeout) if self.isolation == "fork" else self._run_process(request, timeout)

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

    # -- a scenario, and what it left behind ---------------------------------------------------
    def run(self, scenario: Path, timeout: float, env: Mapping[str, str] | None = None) -> RawRun:
        slot = tempfile.mkdtemp(dir=self.tmp)
        result, output, metrics = Path(slot, "result.json"), Path(slot, "output.log"), Path(slot, "metrics.json")
        culprits = self.server.avoid | set(self.server.cuda_culprits)
        request = {
            "scenario": str(scenario.resolve()),
            "result": str(result),
            "output": str(output),
            "env": {**(env or {}), "HARNESS_METRICS": str(metrics), **_culprits_env(culprits)},
        }
        self.start()  # before the clock starts: a scenario's seconds are its own
        started = time.monotonic()
        server = self.server  # the one that forks it (a crash may restart self.server)
        server.scenario_started()
        try:
            exit_code, sig, timed_out = self._execute(request, timeout)
        finally:
            seconds = time.monotonic() - started
            record = _read_json(result)
            imported = record.pop("imported", None) if record is not None else None
            modules = [m for m in imported if isinstance(m, str)] if isinstance(imported, list) else []
            server.scenario_ended(modules)  # its zygote's pool learns them, and later forks stop waiting
        ran = record.pop("run_seconds", None) if record is not None else None
        imports = record.pop("import_seconds", None) if record is not None else None
        importers = record.pop("imports_culprit", None) if record is not None else None
        importers = {str(k): str(v) for k, v in importers.items()} if isinstance(importers, dict) else {}
        self.culprit_importers.update(importers)
        if isinstance(imported, list):
            self.imports[str(request["scenario"])] = modules
        return RawRun(
            record=record,
            exit_code=exit_code,
            signal=sig,
            timed_out=timed_out,
            seconds=seconds,
            output_tail=tail(output),
            metrics=_read_json(metrics) or {},
            imported=modules,
            run_seconds=float(ran) if isinstance(ran, int | float) else None,
            import_seconds=float(imports) if isinstance(imports, int | float) else None,
            imports_culprit=importers,
        )

    def run_suite_worker(
        self, root: Path, args: list[str], events: Path, skip: list[str], output: Path, env: Mapping[str, str], keep: Path | None = None
    ) -> tuple[int | None, int | None]:
        """One pytest worker (`incell/suite.py`) in this cell, forked from the server like a
        scenario: its own process group, killed by `kill_running()`. Blocks until it ends.
        `keep`: a shard's cut cell, where the controller writes the node ids this shard runs."""
        request: dict[str, Any] = {"kind": "suite", "root": str(root), "args": args, "events": str(events), "skip": skip}
        request["keep"] = str(keep) if keep is not None else ""
        request.update(output=str(output), env=dict(env))
        self.start()
        exit_code, sig, _ = self._execute(request, SUITE_WAIT_SECONDS)  # the controller times each test itself
        return exit_code, sig


def _culprits_env(known: set[str]) -> dict[str, str]:
    """Tell a scenario's process which modules initialise CUDA here, so that it names the
    modules it loaded that import one (`incell/preload.py`'s `importers_of`). Nothing where none do."""
    return {"HARNESS_CUDA_CULPRITS": ",".join(sorted(known))} if known else {}
