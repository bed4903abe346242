"""One-file repros: a PEP 723 script that fails on a clean machine with the signature a report names. Pure.

`uv run repro.py` builds a fresh environment from the script's `# /// script` block (the failing
set pinned, every other package held at the version the failing env had), writes the files it
carries into a temporary folder, runs them, and prints the failure's signature as the harness
computes it (`harness/analysis/signature.py`, carried verbatim). A scenario carries its own code
and the helpers it imports, the kit included; a test carries its file, the conftest.py files
above it, the local modules they import and the suite's pytest configuration, and pytest runs
its node id. Its exit status is `git bisect run`'s: 0 passes, 1 the reported failure, 125
anything else (another failure, a skip), so the same file bisects a library's commits.

Nothing local goes in. A torch build of the PyTorch index (`2.11.0+cu130`) is taken from that
public index: an explicit `[[tool.uv.index]]` that only torch uses (`[tool.uv.sources]`), its
release pinned (`torch==2.11.0`, which only that build satisfies there); the default build
(PyPI's `2.11.0`) needs no index. The docstring names the build, says how to run the script on
a machine without that GPU, and says when the scenario itself needs one. This module writes
text; `harness report --repro` gathers the files and writes the scripts.

A report's "Reproduce" section is here too (`reproduce_lines`): the one-file repro the report
shows (`Repro`), the pins that reproduce a cell (`repro_pins`: its axes exactly, and what a run
added for its suite), the pip line, the scenario or pytest command and the `harness sweep` line.

>>> spec = ReproSpec(title="TypeError: x", signature="TypeError: x", kind="scenario", run="s.py",
...                  pins=("torch==2.11.0+cu130", "peft==0.19.1"), python="3.12", files=(("s.py", "raise TypeError('x')\\n"),))
>>> script = pep723_script(spec, "def make_signature(*a):\\n    pass\\n")
>>> print(script[: script.index("# ///\\n", 10) + 5])
# /// script
# requires-python = "==3.12.*"
# dependencies = [
#     "torch==2.11.0",
#     "peft==0.19.1",
# ]
#
# [[tool.uv.index]]
# # torch 2.11.0+cu130, the build that ran it: the PyTorch index's build for CUDA 13.0, for torch only
# name = "pytorch-cu130"
# url = "https://download.pytorch.org/whl/cu130"
# explicit = true
#
# [tool.uv.sources]
# torch = { index = "pytorch-cu130" }
# ///
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.analysis.export import Sources
from harness.analysis.rows import Machine, axis_sort, installed, is_test, machine_of, suite_of_run
from harness.analysis.versions import requirement

#: The PyTorch index's build labels (`2.13.0+cpu`, `+cu130`, `+rocm6.4`, `+xpu`): the index that has each build.
_BUILD = re.compile(r"^(?P<release>[^+]+)\+(?P<label>cpu|cu\d+|rocm\d+(?:\.\d+)*|xpu)$")
PYTORCH_INDEX = "https://download.pytorch.org/whl/{label}"
CPU_INDEX = PYTORCH_INDEX.format(label="cpu")
#: A scenario's exit status, and a test's, as `git bisect run` reads it.
EXIT_PASSES, EXIT_FAILS, EXIT_SAYS_NOTHING = 0, 1, 125
_PYTHON = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True)
class ReproSpec:
    """What one script reproduces and carries."""

    title: str  # the exception as raised, one line
    signature: str  # the harness's signature of it: what the script checks
    kind: Literal["scenario", "test"]
    run: str  # the scenario's file (a key of `files`) or the test's node id
    pins: tuple[str, ...]  # the set under test: `torch==2.13.0+cpu`, `peft==0.18.1`, the suite's `pytest==9.2.0`
    python: str  # the Python the cells ran, major.minor (`3.12`); "" when unknown (no requires-python then)
    files: tuple[tuple[str, str], ...]  # (path relative to the folder it runs in, text)
    constraints: tuple[str, ...] = ()  # every other package of the env's freeze, pinned
    libraries: tuple[str, ...] = ()  # the axes: the libraries whose frames a signature may blame
    expect: Literal["fails", "passes"] = "fails"
    about: str = ""  # one paragraph: which set this is and what the other script changes
    setup: bool = False  # the scenario declares SETUP: a pass that never confirmed it says nothing
    machine: str = ""  # where it ran: `NVIDIA H100 80GB HBM3 · linux-x86_64 · Python 3.12 · CUDA 13.0`
    cuda: str = ""  # the CUDA runtime torch was built for (`13.0`); "" for a CPU build
    gpus: int = 0  # the GPUs the scenario needs (its REQUIRES): without them it says nothing


@dataclass(frozen=True)
class Build:
    """A package's build of the PyTorch index, as a pin names it: `torch==2.11.0+cu130`."""

    name: str  # `torch`
    version: str  # `2.11.0+cu130`
    release: str  # `2.11.0`
    label: str  # `cu130`

    @property
    def index(self) -> str:
        return PYTORCH_INDEX.format(label=self.label)

    @property
    def index_name(self) -> str:
        return f"pytorch-{self.label}"

    def kind(self) -> str:
        """`the PyTorch index's build for CUDA 13.0`, `… CPU build`, `… for ROCm 6.4`, `… for Intel GPUs (XPU)`."""
        if self.label == "cpu":
            return "the PyTorch index's CPU build"
        if self.label == "xpu":
            return "the PyTorch index's build for Intel GPUs (XPU)"
        if self.label.startswith("rocm"):
            return f"the PyTorch index's build for ROCm {self.label[4:]}"
        digits = self.label[2:]
        return f"the PyTorch index's build for CUDA {int(digits[:-1])}.{digits[-1]}"


def build_of(pin: str) -> Build | None:
    """The PyTorch-index build a pin names (`torch==2.11.0+cu130`), else None (a release of PyPI, a source).

    >>> build_of("torch==2.11.0+cu130").kind(), build_of("torch==2.13.0"), build_of("mylib==1.0+local")
    ("the PyTorch index's build for CUDA 13.0", None, None)
    """
    name, sep, version = pin.partition("==")
    found = _BUILD.match(version.strip()) if sep else None
    if found is None:
        return None
    return Build(name.strip(), version.strip(), found["release"], found["label"])


def build_index(pin: str) -> tuple[str, str]:
    """(`torch==2.13.0`, the public index of its build) for a pin of a PyTorch-index build, else (pin, "").

    >>> build_index("torch==2.13.0+cu130")
    ('torch==2.13.0', 'https://download.pytorch.org/whl/cu130')
    >>> build_index("peft==0.19.1")
    ('peft==0.19.1', '')
    """
    found = build_of(pin)
    return (pin, "") if found is None else (f"{found.name}=={found.release}", found.index)


def indexes(pins: Sequence[str]) -> list[tuple[str, str]]:
    """(`torch 2.13.0+cpu`, its index) for every pin that is a build of the PyTorch index."""
    return [(f"{b.name} {b.version}", b.index) for b in map(build_of, pins) if b is not None]


def build_notes(pins: Sequence[str], cuda: str, name: str) -> list[tuple[str, str]]:
    """(sentence, command or "") pairs: which torch build ran it, where the script gets it, and how to run
    the script on a machine without that GPU. The docstring and the report say the same.

    >>> print(build_notes(["torch==2.11.0+cu130"], "13.0", "repro.py")[1][1])
    sed 's#whl/cu130"#whl/cpu"#' repro.py > repro-cpu.py && uv run repro-cpu.py
    >>> build_notes(["torch==2.11.0"], "13.0", "repro.py")[0][0][:51]
    "It ran with torch 2.11.0, PyPI's build (for CUDA 13"
    """
    notes: list[tuple[str, str]] = []
    for build in filter(None, map(build_of, pins)):
        took = f"the script takes {build.name} from {build.index} (an explicit index, for {build.name} only)."
        notes.append((f"It ran with {build.name} {build.version}, {build.kind()}: {took}", ""))
        if build.label != "cpu":
            cpu = name.removesuffix(".py") + "-cpu.py"
            point = f"On a machine without that GPU, the CPU build of {build.name} {build.release} (the index's url set to {CPU_INDEX}):"
            notes.append((point, f"sed 's#whl/{build.label}\"#whl/cpu\"#' {name} > {cpu} && uv run {cpu}"))
        notes.append(("With the wheels in a folder instead:", f"UV_FIND_LINKS=/path/to/wheels uv run --no-sources {name}"))
    for pin in pins:
        package, sep, version = pin.partition("==")
        if sep and package.strip() == "torch" and build_of(pin) is None and cuda:
            default = f"It ran with torch {version}, PyPI's build (for CUDA {cuda} on Linux): the script takes it from PyPI"
            notes.append((f"{default}, and it runs as it is on a machine without a GPU too (on the CPU).", ""))
    return notes


def gpu_note(gpus: int) -> str:
    """What a scenario that needs GPUs does without them (its REQUIRES)."""
    return (
        f"The failure needs the GPU: the scenario needs {gpus} GPU(s) (its REQUIRES), and on a machine without "
        "them it says so and exits 125 (not applicable)."
    )


def literal(text: str) -> str:
    """`text` as a Python literal a reader can read: a raw triple-quoted string where one says it exactly.

    A raw string ends at its first triple quote, and cannot end with a backslash or its own quote
    character; anything else it holds as written. Else `repr`.

    >>> print(literal("a\\\\b\\n"))
    r'''a\\b
    '''
    >>> literal("x = '''y'''\\n")[:4], literal("ends with a quote'")[:1]
    ('r\"\"\"', 'r')
    """
    for quote in ("'''", '"""'):
        if quote not in text and not text.endswith((quote[0], "\\")):
            return f"r{quote}{text}{quote}"
    return repr(text)


def pep723_script(spec: ReproSpec, signature_source: str, name: str = "repro.py") -> str:
    """The script. signature_source: `harness/analysis/signature.py`'s text, carried so the script
    prints the signature exactly as the harness computes it. name: the script's file name, for its help."""
    return "\n".join([*_block(spec), _docstring(spec, name), _BODY_HEAD, _constants(spec), _signature_code(signature_source), _main(spec)])


def _block(spec: ReproSpec) -> list[str]:
    """The `# /// script` block: the Python the cells ran, the set pinned, the rest held, a PyTorch-index
    build's index (explicit: for its package only)."""
    pins = [build_index(p)[0] for p in spec.pins]
    held = sorted({build_index(c)[0] for c in spec.constraints} - set(pins), key=str.lower)
    python = [f'# requires-python = "=={spec.python}.*"'] if _PYTHON.match(spec.python) else []
    block = ["# /// script", *python, "# dependencies = ["]
    block += [f"#     {json.dumps(p)}," for p in pins] + ["# ]"]
    if held:
        block += ["#", "# [tool.uv]", "# # every other package at the version the environment had (its `uv pip freeze`)"]
        block += ["# constraint-dependencies = ["] + [f"#     {json.dumps(c)}," for c in held] + ["# ]"]
    built = [b for b in map(build_of, spec.pins) if b is not None]
    for builds in {b.label: [c for c in built if c.label == b.label] for b in built}.values():  # one index per build label
        what = ", ".join(f"{b.name} {b.version}" for b in builds)
        block += ["#", "# [[tool.uv.index]]", f"# # {what}, the build that ran it: {builds[0].kind()}, for {builds[0].name} only"]
        block += [f'# name = "{builds[0].index_name}"', f'# url = "{builds[0].index}"', "# explicit = true"]
    if built:
        block += ["#", "# [tool.uv.sources]"] + [f'# {b.name} = {{ index = "{b.index_name}" }}' for b in built]
    return [*block, "# ///"]


def _docstring(spec: ReproSpec, name: str) -> str:
    verdict = "fails with the signature below (exit 1)" if spec.expect == "fails" else "passes (exit 0)"
    lines = [f"Reproduces: {spec.title}", "", f"    uv run {name}", "", f"With this set it {verdict}."]
    lines += [spec.about] if spec.about else []
    if spec.machine:
        lines += ["", f"It {'failed' if spec.expect == 'fails' else 'passed'} on {spec.machine}."]
    if spec.gpus:
        lines.append(gpu_note(spec.gpus))
    for sentence, command in build_notes(spec.pins, spec.cuda, name):
        lines += ["", sentence] + ([f"    {command}"] if command else [])
    what = (
        f"Runs the scenario {spec.run} (its code and the helpers it imports are below) in a temporary folder."
        if spec.kind == "scenario"
        else f"Runs pytest on {spec.run} in a temporary folder holding the test's file, the conftest.py\n"
        "files above it and the suite's pytest configuration (below)."
    )
    lines += ["", what, "Exit status, as `git bisect run` reads it: 0 passes, 1 fails with the signature below, 125 anything else."]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"""')
    return f'"""{text}\n"""'


_BODY_HEAD = """
from __future__ import annotations

import os
import re
import runpy
import shutil
import sys
import tempfile
import traceback
"""


def _constants(spec: ReproSpec) -> str:
    files = "\n".join(f"    {json.dumps(path)}: {literal(text)}," for path, text in spec.files)
    return "\n".join(
        [
            f"SIGNATURE = {json.dumps(spec.signature)}",
            f"LIBRARIES = {tuple(spec.libraries)!r}",
            f"RUN = {json.dumps(spec.run)}",
            f"EXPECT = {json.dumps(spec.expect)}",
            f"SETUP = {spec.setup!r}",
            "FILES = {",
            files,
            "}",
            "",
        ]
    )


def _signature_code(source: str) -> str:
    """The harness's signature module, verbatim less its docstring and `__future__` import (the script has its own)."""
    body = source.lstrip()
    if body.startswith('"""'):
        body = body[body.index('"""', 3) + 3 :]
    kept = [line for line in body.strip("\n").splitlines() if line.strip() != "from __future__ import annotations"]
    head = "\n# -- the harness's failure signature (harness/analysis/signature.py, verbatim) " + "-" * 18
    return "\n".join([head, *kept, "# -- end of harness/analysis/signature.py " + "-" * 52, ""])


def _main(spec: ReproSpec) -> str:
    return _VERDICT + (_SCENARIO_MAIN if spec.kind == "scenario" else _TEST_MAIN)


_VERDICT = '''

def verdict(failure: tuple[str, str, list[Frame]] | None, says_nothing: str = "") -> int:
    """Print what happened and return the exit status."""
    if says_nothing:
        print(f"repro: {says_nothing}: neither passes nor fails")
        return 125
    if failure is None:
        print("repro: passes")
        return 0
    kind, message, frames = failure
    found = make_signature(kind, message, frames, LIBRARIES).text
    print(f"signature: {found}")
    if found == SIGNATURE:
        print("repro: fails with the reported signature")
        return 1
    print(f"repro: fails with another signature than the reported one:\\n  {SIGNATURE}")
    return 125


def write_files(folder: str) -> None:
    for path, text in FILES.items():
        target = os.path.join(folder, *path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)

'''

_SCENARIO_MAIN = """
#: The scenario kit's exceptions that are not a failure of the code under test.
SAYS_NOTHING = {"NotApplicable": "not applicable", "Inconclusive": "inconclusive"}


def main() -> int:
    folder = tempfile.mkdtemp(prefix="repro-")
    try:
        write_files(folder)
        script = os.path.join(folder, RUN)
        sys.path[0:0] = [folder]
        sys.argv = [script]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                frames = [Frame(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
                return verdict(("SystemExit", str(exc.code), frames))
        except BaseException as exc:
            traceback.print_exc()
            names = {cls.__name__ for cls in type(exc).__mro__}
            quiet = next((word for name, word in SAYS_NOTHING.items() if name in names), "")
            if quiet:
                return verdict(None, f"{quiet} ({exc})")
            frames = [Frame(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
            return verdict((type(exc).__module__ + "." + type(exc).__qualname__, str(exc), frames))
        kit = sys.modules.get("_kit")
        if SETUP and not (kit is not None and kit.metrics().get("setup_reached") is True):
            return verdict(None, "never confirmed its setup (SETUP)")
        return verdict(None)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
"""

_TEST_MAIN = '''

class Catch:
    """The failing phase's exception, as the harness reads it (type, first line of the message, frames)."""

    def __init__(self) -> None:
        self.raised: dict[str, tuple[str, str, list[Frame]]] = {}
        self.failed: tuple[str, str, list[Frame]] | None = None
        self.quiet = ""
        self.ran = False

    def pytest_runtest_makereport(self, item, call):
        if call.excinfo is not None:
            exc = call.excinfo.value
            frames = [Frame(f.filename, f.lineno, f.name) for f in traceback.extract_tb(call.excinfo.tb)]
            said = str(exc)[:2000].split("\\n", 1)[0]
            self.raised[call.when] = (type(exc).__module__ + "." + type(exc).__qualname__, said, frames)

    def pytest_runtest_logreport(self, report):
        self.ran = True
        if hasattr(report, "wasxfail"):
            self.quiet = self.quiet or ("xfail" if report.skipped else "xpass")
        elif report.failed and self.failed is None:
            self.failed = self.raised.get(report.when, ("Failed", str(report.longrepr).strip().splitlines()[-1], []))
        elif report.skipped:
            self.quiet = self.quiet or "skipped"


def main() -> int:
    import pytest

    folder = tempfile.mkdtemp(prefix="repro-")
    here = os.getcwd()
    try:
        write_files(folder)
        os.chdir(folder)
        catch = Catch()
        pytest.main(["-p", "no:cacheprovider", "--tb=short", "--rootdir", folder, RUN], plugins=[catch])
        if catch.failed is not None:
            return verdict(catch.failed)
        if not catch.ran:
            return verdict(None, f"pytest ran no test {RUN}")
        return verdict(None, catch.quiet)
    finally:
        os.chdir(here)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
'''


# -- the report's Reproduce section -----------------------------------------------------------------
@dataclass(frozen=True)
class Repro:
    """The one-file repro `harness report --repro` wrote beside the report (`pep723_script`), and its passing twin."""

    name: str  # `repro.py`: the report names it by its file name only
    script: str  # its text, shown collapsed in the report
    passing_name: str = ""  # `repro-passing.py`, or "" where no passing set lies one step away
    change: str = ""  # what the passing set changes: `peft 0.19.0 instead of 0.18.1`
    gpus: int = 0  # the GPUs the scenario needs (its REQUIRES)


def _public(url: str) -> bool:
    """An index another machine can reach: http(s), and not this host."""
    return url.startswith(("https://", "http://")) and re.match(r"https?://(?:localhost|127\.|0\.0\.0\.0|\[::1\])", url) is None


def repro_pins(row: Mapping[str, Any], run: Mapping[str, Any], tests: bool) -> list[str]:
    """What reproduces `row`'s cell: its axes exactly and, for a test, what the run added for its suite (pytest, plugins)."""
    versions = installed(row)
    pins = [requirement(a, versions[a]) for a in axis_sort(versions)]
    return pins + (_suite_pins(run.get("settings") or {}, row, versions) if tests else [])


def reproduce_lines(
    cell_id: str,
    row: Mapping[str, Any],
    scenarios: Sequence[str],
    runs: Mapping[str, Mapping[str, Any]],
    scenario_files: Mapping[str, str],
    nodes: Mapping[str, str] | None = None,
    repro: Repro | None = None,
) -> list[str]:
    """How to reproduce `scenarios` in one cell: the one-file script when one was written, then the
    commands; a test by the node id that cell's pytest gave it (`nodes`: identity -> node id, `rows.node_ids`).
    Nothing in it names this machine: a PyTorch-index build gets that public index, a local source a comment."""
    run = runs.get(str(row.get("run_id")), {})
    settings = run.get("settings") or {}
    sources = Sources.from_settings(settings)
    tests = [(nodes or {}).get(s, s) for s in scenarios if is_test(s)]
    pins = repro_pins(row, run, bool(tests))
    public = [u for u in (sources.index_url, *sources.extra_index_urls) if u and _public(u)]
    index = (["--index-url", sources.index_url] if sources.index_url in public else []) + [
        w for u in sources.extra_index_urls if u in public for w in ("--extra-index-url", u)
    ]
    builds = list(dict.fromkeys(url for _, url in indexes(pins) if url not in public))
    index += [w for url in builds for w in ("--extra-index-url", url)]
    lines = ["```bash"]
    install = " ".join(_quote(w) for w in ["pip", "install", *index, *pins])
    lines += ["# the failing versions, exactly (every other package: the freeze above)", install]
    local = [u for u in (sources.index_url, *sources.extra_index_urls) if u and not _public(u)]
    if local or settings.get("find_links"):
        lines.append("# the run also took packages from a source of its machine's own (a folder of wheels or a local index)")
    matrix = str(run.get("matrix_path") or "matrix.toml")
    matrix = matrix if not matrix.startswith(("/", "\\")) and ":" not in matrix[:3] else matrix.replace("\\", "/").rsplit("/", 1)[-1]
    picks = [f"--scenario {_quote(s)}" for s in scenarios if not is_test(s)]
    if len(tests) < len(scenarios):
        lines.append("# the scenario: a standalone script; its helpers (_*.py) sit next to it in the harness's scenarios/")
        lines += [f"python {scenario_files.get(s) or f'scenarios/{s}.py'}" for s in scenarios if not is_test(s)]
    if tests:
        suite = suite_of_run(run)
        package, repo = str(suite.get("of") or ""), str(suite.get("git") or "")
        if package:
            shown = repo if repo and _public(repo) else ""
            version = installed(row).get(package, "")
            lines.append(f"# the tests of {package} {version}: from a checkout of {shown or 'its repository'} at that tag")
            where = f" --tests-of {_quote(package)}" + (f" --tests-git {_quote(shown or f'<a clone of {package}>')}" if repo else "")
        else:
            lines.append("# the test, from the suite's root: where it runs pytest (its conftest.py files and configuration apply)")
            where = " --tests-root ." if suite.get("root") else ""
        lines += [f"python -m pytest {' '.join(_quote(t) for t in tests)}"]
        picks.append(f"--tests {' '.join(_quote(t) for t in tests)}{where}")
    lines += [
        "# or let the harness build the env and run it" + (" (from the same folder)" if tests and not suite_of_run(run).get("of") else ""),
        f"harness sweep --matrix {_quote(matrix)} --cell {cell_id} {' '.join(picks)}",
        "```",
    ]
    return (_one_file(repro, pins, machine_of(row)) if repro else []) + lines


def _one_file(repro: Repro, pins: Sequence[str], machine: Machine | None = None) -> list[str]:
    """The one-file repro first: the two commands, where it failed, which torch build and how to get it (and
    how to run it without that GPU), the script collapsed."""
    width = max(len(repro.name), len(repro.passing_name))
    out = [
        f"One file, nothing to check out: `{repro.name}` (below) is a [PEP 723](https://peps.python.org/pep-0723/) script that pins "
        "the failing set and carries the code that fails; [uv](https://docs.astral.sh/uv/) builds a fresh environment for it.",
        "",
        "```bash",
        f"uv run {repro.name.ljust(width)}   # fails (exit 1) and prints the signature",
    ]
    if repro.passing_name:
        out.append(f"uv run {repro.passing_name.ljust(width)}   # {repro.change}: passes (exit 0)")
    out.append("```")
    if machine:
        out += ["", f"It failed on {machine.label()}." + (f" {gpu_note(repro.gpus)}" if repro.gpus else "")]
    for sentence, command in build_notes(pins, machine.cuda if machine else "", repro.name):
        out += ["", sentence + (f" `{command}`" if command else "")]
    lines = len(repro.script.splitlines())
    out += ["", f"<details><summary><code>{repro.name}</code> ({lines} lines)</summary>", "", SCRIPT_MARK, "", "</details>", ""]
    out += ["Or, in an environment of your own:", ""]
    return out


#: Where the script goes in a report: after the paths of the rest are written from their roots (the script is left as it is).
SCRIPT_MARK = "<!-- harness report: the script -->"


def _suite_pins(settings: Mapping[str, Any], row: Mapping[str, Any], versions: Mapping[str, str]) -> list[str]:
    """The packages a run added to every cell for its suite (`extra_requirements`: pytest, plugins,
    the suite's requirements), at the versions this cell's freeze has; unpinned where it has none."""
    freeze = {str(canonicalize_name(k)): str(v) for k, v in _freeze(row).items()}
    axes = {str(canonicalize_name(a)) for a in versions}
    pins = []
    for wanted in settings.get("extra_requirements") or []:
        try:
            name = str(canonicalize_name(Requirement(str(wanted)).name))
        except InvalidRequirement:
            continue
        if name not in axes:
            pins.append(requirement(name, freeze[name]) if name in freeze else str(wanted))
    return list(dict.fromkeys(pins))


def _freeze(row: Mapping[str, Any]) -> dict[str, Any]:
    found = row.get("installed") or {}
    if isinstance(found, str):
        found = json.loads(found) if found else {}
    return dict(found) if isinstance(found, Mapping) else {}


def _quote(word: str) -> str:
    return shlex.quote(word)
