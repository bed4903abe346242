"""A chosen set written out for people to install it: requirements.txt, constraints.txt, the input
of a pylock.toml, and the pip and uv lines to paste. Pure.

`analysis.pin` chooses the set and says why (its versions, the freeze of the cell that passed,
the evidence and the header that names it); this module only writes it, with the index settings
of the runs it came from (`Sources`), so that what people paste installs what passed.

>>> from harness.analysis.pin import choose
>>> rows = [{"cell_id": "c", "scenario": "load", "status": "pass", "repeat": 0, "run_id": "r1", "gpu": "cpu",
...          "versions": {"torch": "2.13.0"}, "installed": {"torch": "2.13.0+cpu"}, "signature": ""}]
>>> install_command(choose(rows, ["load"]), "uv")
'uv pip install torch==2.13.0+cpu'
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.analysis.pin import PYTHON_VERSION, PinResult
from harness.analysis.versions import release, requirement

#: `platform` as hostinfo records it -> uv's `--python-platform`, for resolving the lock where it passed.
UV_PLATFORMS = {
    "linux-x86_64": "x86_64-unknown-linux-gnu",
    "linux-aarch64": "aarch64-unknown-linux-gnu",
    "linux-arm64": "aarch64-unknown-linux-gnu",
    "darwin-arm64": "aarch64-apple-darwin",
    "darwin-x86_64": "x86_64-apple-darwin",
    "windows-amd64": "x86_64-pc-windows-msvc",
}


@dataclass(frozen=True)
class Sources:
    """Where the packages came from: the run's index settings, for commands people paste."""

    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], find_links: Sequence[str] | None = None) -> Sources:
        """From a run's stored settings; `find_links` already expanded (`$PIP_FIND_LINKS`) when given."""
        links = find_links if find_links is not None else [str(f) for f in settings.get("find_links") or [] if "$" not in str(f)]
        return cls(
            str(settings.get("index_url") or ""),
            tuple(str(u) for u in settings.get("extra_index_urls") or []),
            tuple(links),
            bool(settings.get("no_index")),
        )

    def pip_args(self) -> list[str]:
        args = ["--no-index"] if self.no_index else []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for folder in self.find_links:
            args += ["--find-links", folder]
        return args

    def uv_args(self) -> list[str]:
        """As `harness.running.envs` hands them to uv when it builds a cell."""
        args = ["--no-index"] if self.no_index else []
        if self.index_url:
            args += ["--default-index", self.index_url]
        for url in self.extra_index_urls:
            args += ["--index", url]
        for folder in self.find_links:
            args += ["--find-links", folder]
        return args


def requirements_txt(result: PinResult, sources: Sources | None = None) -> str:
    """The axes, pinned exactly: `pip install -r requirements.txt -c constraints.txt`."""
    _require_found(result)
    lines = [" ".join(shlex.quote(a) for a in pair) for pair in _pairs((sources or Sources()).pip_args())]
    lines += [requirement(axis, value) for axis, value in result.versions]
    return result.header() + "".join(f"{line}\n" for line in lines)


def constraints_txt(result: PinResult) -> str:
    """Every package the passing env had, at its exact version (pip constraints take no URLs:
    a source is named in a comment and pinned in requirements.txt)."""
    _require_found(result)
    inherited = dict(result.inherited)
    lines = []
    for package, value in sorted({**inherited, **dict(result.freeze)}.items()):
        line = requirement(package, value)
        note = "  # from the base interpreter" if package in inherited and package not in dict(result.freeze) else ""
        lines.append(f"# {line}  (a source: see requirements.txt)" if release(value) is None else line + note)
    return result.header() + "".join(f"{line}\n" for line in lines)


def lock_input(result: PinResult) -> str:
    """The whole passing freeze as requirements, for `uv pip compile --format pylock.toml`."""
    _require_found(result)
    merged = {**dict(result.inherited), **dict(result.freeze)}
    return "".join(f"{requirement(p, v)}\n" for p, v in sorted(merged.items()))


def install_command(result: PinResult, tool: Literal["pip", "uv"] = "pip", sources: Sources | None = None) -> str:
    """One line to paste: `pip install torch==2.13.0+cpu transformers==5.23.0 …`."""
    _require_found(result)
    words = ["uv", "pip", "install"] if tool == "uv" else ["pip", "install"]
    words += (sources or Sources()).pip_args()
    words += [requirement(axis, value) for axis, value in result.versions]
    return " ".join(shlex.quote(w) for w in words)


def lock_command(result: PinResult, uv: str, requirements: str, out: str, sources: Sources | None = None) -> list[str]:
    """`uv pip compile` of the passing freeze into a PEP 751 lock, for the Python and platform it passed on."""
    command = [uv, "pip", "compile", requirements, "--format", "pylock.toml", "-o", out, "--no-header", "--quiet"]
    if PYTHON_VERSION.match(result.python):
        command += ["--python-version", result.python]
    if result.platform in UV_PLATFORMS:
        command += ["--python-platform", UV_PLATFORMS[result.platform]]
    return command + (sources or Sources()).uv_args()


def _require_found(result: PinResult) -> None:
    if not result.found:
        raise ValueError("no version set passes every chosen scenario: nothing to export")


def _pairs(args: list[str]) -> list[list[str]]:
    """`["--index-url", "u", "--no-index"]` -> `[["--index-url", "u"], ["--no-index"]]` (one option per line)."""
    out: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not out:
            out.append([arg])
        else:
            out[-1].append(arg)
    return out
