"""Build one virtualenv per cell: nox's uv backend creates it, uv resolves and installs the pins.

One path serves sweep, bisect and the nox sessions. A build has three steps, each with its
own failure status, as nox keeps "interpreter not found" apart from "command failed":

1. resolve  (`uv pip compile`): pins that do not resolve  -> `unresolvable`, resolver's words kept
2. install  (`uv pip sync` of the resolved set): a failure -> `install_failed`
3. freeze   (`uv pip freeze`): the exact set, stored with every outcome

Environments are content-addressed (python + requirements + index settings), so a rebuilt
cell with a warm cache reuses its env, and uv's cache makes a cold rebuild a matter of links.
`inherit` candidates come from the base interpreter: a `.pth` file names its site-packages
(a `--system-site-packages` venv cannot see through a base that is itself a virtualenv), and
a metadata-only stub wheel tells the resolver the inherited version is already there.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from harness.analysis.status import Status
from harness.inputs.matrix import Cell, Settings

MARKER = "harness-env.json"
ENV_FORMAT = 1
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class EnvRequest:
    """Everything that decides an environment's contents; its hash names the env."""

    python: str
    requirements: list[str]
    inherit: list[str] = field(default_factory=list)
    index_url: str = ""
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    exclude_newer: str = ""  # RFC 3339 moment, or ""

    def key(self) -> str:
        payload = json.dumps({**asdict(self), "format": ENV_FORMAT}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


@dataclass
class EnvResult:
    status: str  # ready | unresolvable | install_failed
    location: Path
    python: str = ""
    freeze: dict[str, str] = field(default_factory=dict)
    inherited: dict[str, str] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0
    reused: bool = False
    cuda_runtime: str = ""  # the CUDA version the cell's torch was built for ("" for a CPU build)
    python_version: str = ""  # the env interpreter's own version, e.g. 3.11.7
    from_cache: bool = False  # resolved and installed from what this sweep had fetched already (`IndexSeen`)

    @property
    def ready(self) -> bool:
        return self.status == "ready"


class IndexSeen:
    """The distributions whose index pages uv has fetched afresh during this sweep (thread-safe).

    uv asks the index again about every page it has cached (PyPI's simple pages are stale at
    once): about 3 s of round trips per env here, against 0.03 s for the same resolution from
    its cache. So only an env that needs something new asks the index; the others resolve and
    install from what this sweep already fetched (`--offline`), which is the index as the
    sweep saw it. A lock resolved offline that names a distribution this sweep has not fetched
    (a page cached by an older sweep) is resolved again online, as is any offline failure
    (a release not yet in the cache).
    """

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._names)

    def add(self, names: set[str]) -> None:
        with self._lock:
            self._names |= names

    def covers(self, names: set[str]) -> bool:
        with self._lock:
            return names <= self._names


def lock_names(lock: Path) -> set[str]:
    """The distributions a lock file pins (normalised names)."""
    names = set()
    for line in lock.read_text().splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(==| @ )", line)
        if match:
            names.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    return names


def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise FileNotFoundError("uv is not installed; pip install uv") from None
        return found


def request_for(cell: Cell, settings: Settings, find_links: list[str], exclude_newer: datetime | None = None) -> EnvRequest:
    requirements = [c.requirement() for c in cell.candidates if c.kind != "inherit"]
    requirements += settings.extra_requirements
    moment = ""
    if exclude_newer is not None:
        # Period-correct: the world as it was the day after the newest pinned release.
        moment = (exclude_newer + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    elif settings.exclude_newer not in ("", "period"):
        moment = settings.exclude_newer
    return EnvRequest(
        python=cell.python,
        requirements=requirements,
        inherit=[c.package for c in cell.candidates if c.kind == "inherit"],
        index_url=settings.index_url,
        extra_index_urls=list(settings.extra_index_urls),
        find_links=list(find_links),
        no_index=settings.no_index,
        exclude_newer=moment,
    )


def env_location(env_root: Path, cell: Cell, request: EnvRequest) -> Path:
    slug = re.sub(r"[^\w.-]+", "-", cell.id)[:48].strip("-")
    return env_root / f"{slug}-{request.key()}"


def _index_args(request: EnvRequest, extra_find_links: list[str]) -> list[str]:
    args: list[str] = []
    if request.no_index:
        args.append("--no-index")
    if request.index_url:
        args += ["--default-index", request.index_url]
    for url in request.extra_index_urls:
        args += ["--index", url]
    for folder in [*request.find_links, *extra_find_links]:
        args += ["--find-links", folder]
    if request.exclude_newer:
        args += ["--exclude-newer", request.exclude_newer]
    return args


def _run(cmd: list[str], stdin: str | None = None, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def _clean(text: str) -> str:
    return _ANSI.sub("", text).strip()


def _python_in(location: Path) -> Path:
    return location / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _read_marker(location: Path, key: str) -> dict | None:
    try:
        data = json.loads((location / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != key or not _python_in(location).exists():
        return None
    return data


def _create_venv(location: Path, python: str) -> None:
    """nox's uv backend creates the env (the same code path a nox session takes).

    On a runner that was given only uv (nox and its dependencies are 7 MB of a 64 MB
    transfer), the env is made with `uv venv` directly, which is what that backend runs.
    """
    try:
        from nox.virtualenv import VirtualEnv
    except ImportError:
        proc = _run(
            [uv_binary(), "venv", "--clear", "--quiet", "--python", base_python_path(python), "--no-python-downloads", str(location)]
        )
        if proc.returncode != 0:
            raise RuntimeError(_clean(proc.stderr)) from None
        return
    venv = VirtualEnv(str(location), interpreter=python, reuse_existing=False, venv_backend="uv", download_python="never")
    venv.create()


def _site_packages(python: str) -> list[str]:
    code = "import json, sysconfig; print(json.dumps(sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')})))"
    proc = _run([python, "-c", code])
    return json.loads(proc.stdout) if proc.returncode == 0 else []


def _stub_wheel(folder: Path, package: str, version: str) -> None:
    """A metadata-only wheel: the resolver sees `package==version` as installable and installed."""
    dist = re.sub(r"[-_.]+", "_", package)
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
            "Summary: inherited from the base interpreter by the compatibility harness\n"
        ),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: compat-harness\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"{info}/RECORD", record)


@dataclass
class Base:
    """The interpreter cells inherit from: every distribution it has, and where they live."""

    python: str
    freeze: dict[str, str]  # canonical name -> version
    site: list[str] = field(default_factory=list)


def base_python_path(python: str) -> str:
    if os.path.sep in python:
        return python
    return shutil.which(f"python{python}") or shutil.which(python) or python


def describe_base(python: str) -> Base:
    code = (
        "import json, sysconfig, importlib.metadata as m\n"
        "dists = {d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}\n"
        "site = sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')})\n"
        "print(json.dumps({'freeze': dists, 'site': site}))"
    )
    proc = _run([python, "-c", code])
    data = json.loads(proc.stdout) if proc.returncode == 0 else {"freeze": {}, "site": []}
    freeze = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in data["freeze"].items()}
    return Base(python, freeze, data["site"])


def base_from_freeze(text: str, python: str = "") -> Base:
    """A base described by `pip freeze` output (a runner seen from a machine that prepares wheels)."""
    return Base(python, {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in parse_freeze(text).items() if "://" not in v})


def base_inputs(request: EnvRequest, base: Base, stub_dir: Path) -> tuple[dict[str, str], list[str], str, str]:
    """(inherited versions, pins, preferences, error) for resolving against a base.

    Inherited axes are pinned to the base's version. Every other distribution of the base is a
    metadata-only stub the resolver may pick and is told to prefer, so a cell installs only what
    differs from the base; the rest is imported from the base through the `.pth` file.
    """
    names = [re.sub(r"[-_.]+", "-", p).lower() for p in request.inherit]
    versions = {p: base.freeze[n] for p, n in zip(request.inherit, names) if n in base.freeze}
    missing = [p for p, n in zip(request.inherit, names) if n not in base.freeze]
    if missing:
        return versions, [], "", f"inherit: the base interpreter {base.python} has no {', '.join(missing)}"
    for package, version in base.freeze.items():
        _stub_wheel(stub_dir, package, version)
    preferences = "".join(f"{p}=={v}\n" for p, v in sorted(base.freeze.items()))
    return versions, [f"{p}=={v}" for p, v in versions.items()], preferences, ""


def link_base(location: Path, base: Base) -> None:
    env_site = _site_packages(str(_python_in(location)))
    base_site = [p for p in base.site if p not in env_site]
    if env_site:
        # .pth lines are appended after the env's own site-packages: the env's packages win.
        Path(env_site[0], "_harness_inherit.pth").write_text("\n".join(base_site) + "\n")


def compile_lock(
    uv: str,
    request: EnvRequest,
    target: list[str],
    lock: Path,
    stub_dir: Path | None,
    pins: list[str],
    preferences: str,
    offline: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Resolve the cell's requirements into `lock`. `target` is `--python X` or a platform/version pair;
    `offline`: from uv's cache alone."""
    # uv treats what an existing output file pins as preferences: the base's versions.
    lock.write_text(preferences)
    extra_links = [str(stub_dir)] if stub_dir else []
    return _run(
        [
            uv,
            "pip",
            "compile",
            "-",
            "-o",
            str(lock),
            *target,
            "--no-header",
            "--no-annotate",
            "--quiet",
            *_index_args(request, extra_links),
            *(["--offline"] if offline else []),
        ],
        stdin="\n".join(request.requirements + pins) + "\n",
    )


def resolve_failure_status(message: str) -> str:
    """The resolver also builds metadata and downloads: only a true conflict is `unresolvable`."""
    conflict = (
        "No solution found",
        "not found in the package registry",
        "was not found in the provided package locations",
        "unsatisfiable",
    )
    if any(marker in message for marker in conflict) and "Failed to build" not in message:
        return Status.UNRESOLVABLE
    return Status.INSTALL_FAILED


def parse_freeze(text: str) -> dict[str, str]:
    """`name==1.0` / `name @ git+https://…@sha` lines -> {name: version-or-url}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if " @ " in line:
            name, url = line.split(" @ ", 1)
            out[name.strip().lower()] = url.strip()
        elif "==" in line:
            name, version = line.split("==", 1)
            out[name.strip().lower()] = version.strip()
    return out


def _resolve(
    uv: str,
    request: EnvRequest,
    python: str,
    lock: Path,
    stub_dir: Path | None,
    pins: list[str],
    preferences: str,
    seen: IndexSeen | None,
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Resolve into `lock`, from uv's cache where this sweep has fetched all it needs (`IndexSeen`),
    else from the index. Returns uv's answer and whether it came from the cache alone."""
    target = ["--python", python]
    if seen and not request.no_index:
        cached = compile_lock(uv, request, target, lock, stub_dir, pins, preferences, offline=True)
        if cached.returncode == 0 and seen.covers(lock_names(lock)):
            return cached, True
    compiled = compile_lock(uv, request, target, lock, stub_dir, pins, preferences)
    if compiled.returncode == 0 and seen is not None:
        seen.add(lock_names(lock))
    return compiled, False


def build_env(
    cell: Cell,
    settings: Settings,
    env_root: Path,
    find_links: list[str],
    exclude_newer: datetime | None = None,
    seen: IndexSeen | None = None,
) -> EnvResult:
    """Build (or reuse) the env for one cell. Never raises for a cell's own problems.

    With `seen`, the envs of one sweep share what it fetched from the index (`IndexSeen`)."""
    started = time.monotonic()
    request = request_for(cell, settings, find_links, exclude_newer)
    location = env_location(env_root, cell, request)
    reused = _reuse(location, request.key(), started)
    if reused is not None:
        return reused
    env_root.mkdir(parents=True, exist_ok=True)
    # Two sweeps (or two test workers) that share an env folder take turns on one env: the
    # second waits and then reuses what the first built, where both would clear it otherwise.
    with _build_lock(location):
        reused = _reuse(location, request.key(), started)
        if reused is not None:
            return reused
        return _build(request, location, seen, started)


def _reuse(location: Path, key: str, started: float) -> EnvResult | None:
    marker = _read_marker(location, key)
    if marker is None:
        return None
    return EnvResult(
        "ready",
        location,
        str(_python_in(location)),
        marker["freeze"],
        marker.get("inherited", {}),
        seconds=time.monotonic() - started,
        reused=True,
        cuda_runtime=marker.get("cuda_runtime", ""),
        python_version=marker.get("python_version") or python_version(str(_python_in(location))),
    )


@contextlib.contextmanager
def _build_lock(location: Path) -> Iterator[None]:
    """An exclusive flock on `<env>.lock` beside the env, held while it is built."""
    fd = os.open(location.with_name(location.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets the flock go


def _build(request: EnvRequest, location: Path, seen: IndexSeen | None, started: float) -> EnvResult:
    uv = uv_binary()
    try:
        _create_venv(location, request.python)
    except Exception as exc:
        return EnvResult(
            Status.INSTALL_FAILED,
            location,
            message=f"cannot create the virtualenv with python {request.python!r}: {exc}",
            seconds=time.monotonic() - started,
        )
    python = str(_python_in(location))
    inherited: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="harness-stubs-") as stubs:
        stub_dir: Path | None = None
        pins: list[str] = []
        preferences = ""
        if request.inherit:
            base = describe_base(base_python_path(request.python))
            inherited, pins, preferences, error = base_inputs(request, base, Path(stubs))
            if error:
                return EnvResult(
                    Status.INSTALL_FAILED, location, python, inherited=inherited, message=error, seconds=time.monotonic() - started
                )
            link_base(location, base)
            stub_dir = Path(stubs)
        lock = location / "harness-requirements.txt"
        compiled, offline = _resolve(uv, request, python, lock, stub_dir, pins, preferences, seen)
        if compiled.returncode != 0:
            message = _clean(compiled.stderr)
            return EnvResult(
                resolve_failure_status(message), location, python, inherited=inherited, message=message, seconds=time.monotonic() - started
            )
        extra_links = [stubs] if stub_dir else []
        sync = [uv, "pip", "sync", str(lock), "--python", python, "--quiet", *_index_args(request, extra_links)]
        # offline, the wheels must all be in uv's cache already; where one is not, the index gives it
        synced = _run([*sync, "--offline"]) if offline else None
        from_cache = synced is not None and synced.returncode == 0
        if synced is None or synced.returncode != 0:
            synced = _run(sync)
        if synced.returncode != 0:
            return EnvResult(
                Status.INSTALL_FAILED,
                location,
                python,
                inherited=inherited,
                message=_clean(synced.stderr),
                seconds=time.monotonic() - started,
            )
    frozen = _run([uv, "pip", "freeze", "--python", python])
    freeze = parse_freeze(frozen.stdout)
    runtime = cuda_runtime(python)
    version = python_version(python)
    marker_data = {
        "key": request.key(),
        "freeze": freeze,
        "inherited": inherited,
        "cuda_runtime": runtime,
        "python_version": version,
        "request": asdict(request),
    }
    (location / MARKER).write_text(json.dumps(marker_data))
    return EnvResult(
        "ready",
        location,
        python,
        freeze,
        inherited,
        seconds=time.monotonic() - started,
        cuda_runtime=runtime,
        python_version=version,
        from_cache=from_cache,
    )


# Reads torch/version.py without importing torch (seconds, and it must not touch the GPU).
_CUDA_PROBE = (
    "import importlib.util, os, re\n"
    "spec = importlib.util.find_spec('torch')\n"
    "path = os.path.join(os.path.dirname(spec.origin), 'version.py') if spec and spec.origin else ''\n"
    "text = open(path).read() if path and os.path.exists(path) else ''\n"
    'm = re.search(r"^cuda\\b[^=\\n]*=\\s*[\'\\"]([^\'\\"]+)[\'\\"]", text, re.M)\n'
    "print(m.group(1) if m else '')"
)


def cuda_runtime(python: str) -> str:
    """The CUDA runtime the env's torch was built for (torch.version.cuda), "" if none."""
    proc = _run([python, "-c", _CUDA_PROBE])
    return proc.stdout.strip() if proc.returncode == 0 else ""


def python_version(python: str) -> str:
    """The interpreter's version (`3.11.7`): part of the machine class its outcomes are compared within."""
    proc = _run([python, "-c", "import platform; print(platform.python_version())"])
    return proc.stdout.strip() if proc.returncode == 0 else ""
