"""One-file repros: a PEP 723 script that fails on a clean machine with the signature a report names. Pure.

`uv run repro.py` builds a fresh environment from the script's `# /// script` block (the failing
set pinned, every other package held at the version the failing env had), writes the files it
carries into a temporary folder, runs them, and prints the failure's signature as the harness
computes it (`harness/analysis/signature.py`, carried verbatim). A scenario carries its own code
and the helpers it imports, the kit included; a test carries its file, the conftest.py files
above it, the local modules they import and the suite's pytest configuration, and pytest runs
its node id. Its exit status is `git bisect run`'s: 0 passes, 1 the reported failure, 125
anything else (another failure, a skip), so the same file bisects a library's commits.

Nothing local goes in: a torch build of the PyTorch index (`2.13.0+cpu`) is pinned as its
release (`torch==2.13.0`, which the build satisfies), and a comment names the public index
that has the build and how to add it. This module writes text; `harness report --repro`
gathers the files and writes the scripts.

>>> spec = ReproSpec(title="TypeError: x", signature="TypeError: x", kind="scenario", run="s.py",
...                  pins=("torch==2.13.0+cpu", "peft==0.19.1"), python="3.11", files=(("s.py", "raise TypeError('x')\\n"),))
>>> script = pep723_script(spec, "def make_signature(*a):\\n    pass\\n")
>>> print(script[: script.index("# ///\\n", 10) + 5])
# /// script
# requires-python = "==3.11.*"
# dependencies = [
#     "torch==2.13.0",
#     "peft==0.19.1",
# ]
# ///
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: The PyTorch index's build labels (`2.13.0+cpu`, `+cu130`, `+rocm6.4`, `+xpu`): the index that has each build.
_BUILD = re.compile(r"^(?P<release>[^+]+)\+(?P<label>cpu|cu\d+|rocm\d+(?:\.\d+)*|xpu)$")
PYTORCH_INDEX = "https://download.pytorch.org/whl/{label}"
#: A scenario's exit status, and a test's, as `git bisect run` reads it.
EXIT_PASSES, EXIT_FAILS, EXIT_SAYS_NOTHING = 0, 1, 125


@dataclass(frozen=True)
class ReproSpec:
    """What one script reproduces and carries."""

    title: str  # the exception as raised, one line
    signature: str  # the harness's signature of it: what the script checks
    kind: Literal["scenario", "test"]
    run: str  # the scenario's file (a key of `files`) or the test's node id
    pins: tuple[str, ...]  # the set under test: `torch==2.13.0+cpu`, `peft==0.18.1`, the suite's `pytest==9.2.0`
    python: str  # the cells' Python, `3.11`
    files: tuple[tuple[str, str], ...]  # (path relative to the folder it runs in, text)
    constraints: tuple[str, ...] = ()  # every other package of the env's freeze, pinned
    libraries: tuple[str, ...] = ()  # the axes: the libraries whose frames a signature may blame
    expect: Literal["fails", "passes"] = "fails"
    about: str = ""  # one paragraph: which set this is and what the other script changes
    setup: bool = False  # the scenario declares SETUP: a pass that never confirmed it says nothing


def build_index(pin: str) -> tuple[str, str]:
    """(`torch==2.13.0`, the public index of its build) for a pin of a PyTorch-index build, else (pin, "").

    >>> build_index("torch==2.13.0+cu130")
    ('torch==2.13.0', 'https://download.pytorch.org/whl/cu130')
    >>> build_index("peft==0.19.1")
    ('peft==0.19.1', '')
    """
    name, sep, version = pin.partition("==")
    found = _BUILD.match(version.strip()) if sep else None
    if found is None:
        return pin, ""
    return f"{name}=={found['release']}", PYTORCH_INDEX.format(label=found["label"])


def indexes(pins: Sequence[str]) -> list[tuple[str, str]]:
    """(`torch 2.13.0+cpu`, its index) for every pin that is a build of the PyTorch index."""
    out = []
    for pin in pins:
        _, index = build_index(pin)
        if index:
            name, _, version = pin.partition("==")
            out.append((f"{name} {version}", index))
    return out


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
    pins = [build_index(p)[0] for p in spec.pins]
    held = sorted({build_index(c)[0] for c in spec.constraints} - set(pins), key=str.lower)
    block = ["# /// script", f'# requires-python = "=={spec.python}.*"', "# dependencies = ["]
    block += [f"#     {json.dumps(p)}," for p in pins] + ["# ]"]
    if held:
        block += ["#", "# [tool.uv]", "# # every other package at the version the environment had (its `uv pip freeze`)"]
        block += ["# constraint-dependencies = ["] + [f"#     {json.dumps(c)}," for c in held] + ["# ]"]
    block.append("# ///")
    return "\n".join([*block, _docstring(spec, name), _BODY_HEAD, _constants(spec), _signature_code(signature_source), _main(spec)])


def _docstring(spec: ReproSpec, name: str) -> str:
    verdict = "fails with the signature below (exit 1)" if spec.expect == "fails" else "passes (exit 0)"
    lines = [f"Reproduces: {spec.title}", "", f"    uv run {name}", "", f"With this set it {verdict}."]
    lines += [spec.about] if spec.about else []
    for built, index in indexes(spec.pins):
        lines += [
            "",
            f"The environment that ran it had {built}, a build of the PyTorch index. Pinned as its release",
            "here, uv takes PyPI's build; to get the same build:",
            f"    uv run --index {index} {name}",
            f"or, from a folder of wheels: UV_FIND_LINKS=/path/to/wheels uv run {name}",
        ]
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
