"""A preload imported, with the watch for modules that make CUDA unusable in a fork.

A server (and a zygote) imports its preload before it forks anything (`preload`): each entry
is one module of the matrix's `preload` or one library's modules learned from the last run.
Torch's two ways to the driver are wrapped meanwhile (`_CudaWatch`): a module whose import
reaches them, or after which a forked probe finds fork poisoned, is a culprit; the harness
starts again without every culprit found, and remembers them (harness/running/culprits.py).
After a scenario ran, `importers_of` names the modules it loaded that import a known culprit
at module level, which the next sweep's learned preload leaves out (harness/running/preloads.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .bytecode import precompile

NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
PRELOAD_LOG_ENV = "HARNESS_PRELOAD_LOG"
#: torch's top-level modules (the harness's zygote.TORCH_TOPS; nothing here imports the harness).
TORCH_TOPS = frozenset({"torch", "functorch", "torchgen"})


def _cuda_initialized() -> bool:
    """Whether a forked child could no longer use CUDA: torch initialised it here, or
    something poisoned fork (`torch.cuda.is_available()` does, through cudaGetDeviceCount,
    without initialising torch's CUDA state)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        if torch.cuda.is_initialized():
            return True
    except Exception:  # a torch without CUDA support
        return False
    bad_fork = getattr(getattr(torch, "_C", None), "_cuda_isInBadFork", None)
    if bad_fork is None:  # a CPU build: nothing to poison
        return False
    pid = os.fork()
    if pid == 0:  # the probe: torch marks a child of a poisoned parent "in bad fork"
        os._exit(1 if bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)


def _importing() -> list[str]:
    """The modules whose top-level code is running now, outermost first: each is importing the next."""
    names = []
    frame: Any = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if frame.f_code.co_name == "<module>" and isinstance(name, str) and name != "__main__" and name in sys.modules:
            names.append(name)
        frame = frame.f_back
    return names[::-1]


def _under(module: str, packages: Any) -> bool:
    """`module` is one of `packages` or lives inside one."""
    parts = module.split(".")
    return any(".".join(parts[:i]) in packages for i in range(1, len(parts) + 1))


def _nvml_capabilities() -> list[tuple[int, int]]:
    """Every GPU's CUDA compute capability, asked of NVML: unlike the CUDA runtime, NVML does
    not make a fork unusable. [] where NVML cannot tell."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return []
    if nvml.nvmlInit_v2() != 0:
        return []
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return []
        found = []
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return []
            if nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
                return []
            found.append((major.value, minor.value))
        return found
    finally:
        nvml.nvmlShutdown()


class _CudaWatch:
    """Who makes CUDA unusable in a fork while the server preloads, found in one pass.

    torch reaches the driver through two calls, `torch._C._cuda_init` (initialisation) and
    `torch._C._cuda_getDeviceCount` (poisons fork without initialising): wrapped, they record
    the chain of modules being imported at that moment (`peft` -> ... -> `bitsandbytes.cextension`).
    Every module on a chain initialises CUDA when imported fresh. Once one has, this process is
    of no use to fork from, so the rest of the preload goes on only to find the others: a
    module that imports one already found (`transformers.integrations.bitsandbytes` importing
    `bitsandbytes`) is caught at its import statement. The harness then restarts once, without
    all of them, whatever their number.

    bitsandbytes asks `torch.cuda.get_device_capability` at import, which initialises CUDA. When
    NVML reports one capability for every GPU of the machine, the same answer comes from NVML
    while preloading, so bitsandbytes, and what imports it (peft), can be preloaded; a GPU that
    differs, or no NVML, leaves torch's own call (and so a culprit). Everything is put back before
    the first fork; a function kept by reference calls torch's own from then on.
    """

    def __init__(self) -> None:
        self.chains: list[list[str]] = []
        self.current = ""  # the module the preload is importing now
        self._undo: list[tuple[Any, str, Any]] = []
        self._armed = False
        self._preloading = True
        self._import: Any = None

    @property
    def doomed(self) -> bool:
        return bool(self.chains)

    def culprits(self) -> list[str]:
        """The modules found, fewest names: one inside another found is left out."""
        found = dict.fromkeys(m for chain in self.chains for m in chain)
        return [m for m in found if not _under(m.rpartition(".")[0], found)] if found else []

    def root(self, module: str) -> str:
        """The library whose import reached the driver on the first chain naming `module`
        (`bitsandbytes` for `peft`): `module` is a culprit only while that library is one."""
        chain = next(c for c in self.chains if module in c)
        return chain[-1].partition(".")[0]

    def blame(self, chain: list[str]) -> None:
        self.chains.append(chain or [self.current])
        if self._import is None:
            self._watch_imports()

    def arm(self) -> None:
        """Wrap torch's entry points to the driver, once torch is imported (the first entry)."""
        torch = sys.modules.get("torch")
        if self._armed or torch is None:
            return
        self._armed = True
        c_module = getattr(torch, "_C", None)
        for name in ("_cuda_init", "_cuda_getDeviceCount"):
            real = getattr(c_module, name, None)
            if real is not None:
                self._replace(c_module, name, self._recording(real, torch))
        cuda = getattr(torch, "cuda", None)
        real_capability = getattr(cuda, "get_device_capability", None)
        if real_capability is not None and hasattr(c_module, "_cuda_isInBadFork"):
            caps = set(_nvml_capabilities())
            if len(caps) == 1:
                self._replace(cuda, "get_device_capability", self._capability(real_capability, caps.pop(), torch))

    def _replace(self, owner: Any, name: str, new: Any) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    def _recording(self, real: Any, torch: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            # After initialisation torch counts devices through the driver: no news then.
            if self._preloading and not getattr(torch.cuda, "_initialized", False):
                self.blame(_importing())
            return real(*args, **kwargs)

        return call

    def _capability(self, real: Any, answer: tuple[int, int], torch: Any) -> Any:
        def get_device_capability(device: Any = None) -> tuple[int, int]:
            if self._preloading and not torch.cuda.is_initialized():
                return answer
            return real(device)

        return get_device_capability

    def _watch_imports(self) -> None:
        """From the first culprit on (this process is to be thrown away): every import statement
        that names a module found so far blames the modules running it."""
        import builtins

        real = builtins.__import__

        def watched(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
            target = name
            if level and globals:
                package = globals.get("__package__") or globals.get("__name__", "").rpartition(".")[0]
                base = package.rsplit(".", level - 1)[0] if level > 1 else package
                target = f"{base}.{name}" if name else base
            found = dict.fromkeys(m for chain in self.chains for m in chain)
            importer = globals.get("__name__") if globals else None
            if isinstance(importer, str) and _under(importer, found):
                return real(name, globals, locals, fromlist, level)  # a culprit's own imports: nothing new
            names = [target, *(f"{target}.{item}" for item in (fromlist or ()) if item != "*")]
            if any(_under(n, found) for n in names):
                self.chains.append([*_importing(), target])
            return real(name, globals, locals, fromlist, level)

        self._import = real
        self._replace(builtins, "__import__", watched)

    def disarm(self) -> None:
        self._preloading = False
        for owner, name, real in reversed(self._undo):
            setattr(owner, name, real)
        self._undo.clear()


def preload(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Import each entry's modules in order. An entry is {"name", "modules"}: one module from
    the matrix's `preload`, or one library's modules learned from the last run.

    An entry after which CUDA is unusable in a fork is not ready; the modules that made it so are
    reported ("cuda_culprits", see `_CudaWatch`), and the harness starts again without them."""
    precompiled = precompile(entries)
    imported: list[str] = []
    seconds: dict[str, float] = {}
    watch = _CudaWatch()
    # While preloading, torch.cuda.is_available() asks NVML instead of initialising the driver
    # (which would poison fork); scenarios get the user's setting back.
    nvml_check = os.environ.get(NVML_CHECK)
    os.environ.setdefault(NVML_CHECK, "1")
    try:
        for entry in entries:
            started = time.monotonic()
            done = 0
            for module in entry["modules"]:
                if watch.doomed and _under(module, watch.culprits()):
                    continue  # found already: importing it again teaches nothing
                watch.arm()
                watch.current = module
                try:
                    __import__(module)
                    done += 1
                except Exception:  # a cell without the module simply imports nothing
                    continue
            if not done or watch.doomed:
                continue
            if _cuda_initialized():  # by a way the watch does not see (or torch without the calls it wraps)
                watch.blame([entry["name"]])
                continue
            imported.append(entry["name"])
            seconds[entry["name"]] = round(time.monotonic() - started, 3)
    finally:
        watch.disarm()
        if nvml_check is None:
            os.environ.pop(NVML_CHECK, None)
    culprits = watch.culprits()
    return {
        "ready": imported,
        "cuda_initialized_by": culprits[0] if culprits else "",
        "cuda_culprits": culprits,
        "cuda_via": {m: watch.root(m) for m in culprits},
        "cuda_chains": [next(c for c in watch.chains if m in c) for m in culprits],  # why each is one
        "seconds": seconds,
        "precompiled": precompiled,
    }


def log_preload(who: str, report: dict[str, Any]) -> None:
    """For measurements (docs/benchmarks.md): each preload's seconds per entry, one JSON line
    appended to the file HARNESS_PRELOAD_LOG names (the sweep's timing line sums them)."""
    path = os.environ.get(PRELOAD_LOG_ENV)
    if path:
        line = {"who": who, "prefix": sys.prefix, "seconds": report["seconds"], "cuda_culprits": report["cuda_culprits"]}
        line["precompiled"] = report.get("precompiled", {})
        with open(path, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def importers_of(culprits: list[str], before: set[str]) -> dict[str, str]:
    """Modules loaded since `before` that import a module known to initialise CUDA, at module
    level: their namespace holds it, or something defined in it (`bnb`, `dispatch_bnb_4bit`),
    directly or through another such module. Module -> the culprit's library.

    The harness does not preload them next time: importing one would import the culprit and
    cost the server a restart to find out (`transformers.integrations.bitsandbytes`,
    `peft.tuners.lora.bnb` beside a bitsandbytes that initialises CUDA). Read after the
    scenario ran, so the scenario's own run is untouched."""
    found = set(culprits)
    refs: dict[str, set[str]] = {}
    for name, module in list(sys.modules.items()):
        if name in before or _under(name, found) or name.partition(".")[0] in sys.stdlib_module_names:
            continue
        targets = set()
        for value in list(getattr(module, "__dict__", {}).values()):
            try:  # a proxy's attribute access may raise (transformers' dummy objects do)
                target = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None) if callable(value) else None
            except Exception:
                continue
            if isinstance(target, str) and not _under(target, [name]):
                targets.add(target)
        refs[name] = targets
    flagged: dict[str, str] = {}
    changed = True
    while changed:  # through modules that import a flagged one, until nothing changes
        changed = False
        for name, targets in refs.items():
            via = next((t for t in sorted(targets) if _under(t, found) or t in flagged), None)
            if name not in flagged and via is not None:
                flagged[name] = flagged.get(via) or via.partition(".")[0]
                changed = True
    return flagged
