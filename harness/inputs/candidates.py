"""Turn a parsed matrix into per-axis candidate lists, consulting the package index and git.

This is the I/O half of matrix expansion: versions are checked against the index (and the
find-links folders), specifiers are expanded to real releases, git refs are resolved to the
exact commit. Every problem is collected and reported together.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.errors import MatrixError
from harness.inputs.matrix import (
    AxisEntry,
    Candidate,
    Cell,
    MatrixSpec,
    Settings,
    expand,
    git_ref,
    git_url_without_ref,
    parse_axis_entry,
    pick_versions,
)

DEFAULT_INDEX = "https://pypi.org/simple"
#: What an offline runner reads instead of an index, in its wheelhouse (`harness wheelhouse`
#: writes it): every release of each version axis, with its upload time, so that an offline
#: sweep knows which releases lie between two tested ones.
RELEASES_FILE = "harness-releases.json"
CACHE_TTL_SECONDS = 3600
_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class Release:
    version: Version
    upload_time: datetime | None = None
    yanked: bool = False
    files: list[str] = field(default_factory=list)  # wheel and sdist file names, to tell which Python and platform can install it

    def installable(self, tags: frozenset[Tag] | None) -> bool:
        """Has a file this interpreter can install: an sdist (it may build) or a wheel with a supported tag.

        `tags` None: any file will do (nothing is known of the target). A release listed with no
        file names (an older cache) counts as installable.
        """
        if tags is None or not self.files:
            return True
        for name in self.files:
            if not name.endswith(".whl"):
                return True
            try:
                if parse_wheel_filename(name)[3] & tags:
                    return True
            except InvalidWheelFilename:
                continue
        return False


@dataclass
class PackageIndex:
    """Releases of a package from one index plus local find-links folders, cached on disk."""

    index_url: str = DEFAULT_INDEX
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    cache_dir: Path | None = None
    _memory: dict[str, dict[str, Release]] = field(default_factory=dict)

    def releases(self, package: str) -> dict[str, Release]:
        name = str(canonicalize_name(package))
        if name not in self._memory:
            found = {} if self.no_index else self._from_index(name)
            for version, release in self._from_find_links(name).items():
                found.setdefault(version, release)
            self._memory[name] = found
        return self._memory[name]

    def _from_find_links(self, name: str) -> dict[str, Release]:
        found: dict[str, Release] = {}
        for folder in self.find_links:
            path = Path(os.path.expandvars(folder))
            if not path.is_dir():
                continue
            for file in path.iterdir():
                version = _version_from_filename(file.name, name)
                if version is not None:
                    found.setdefault(version.public, Release(Version(version.public))).files.append(file.name)
        return found

    def _from_index(self, name: str) -> dict[str, Release]:
        payload = self._cached_fetch(name)
        by_version: dict[str, Release] = {}
        for file in payload.get("files", []):
            version = _version_from_filename(file.get("filename", ""), name)
            if version is None:
                continue
            # a local build (2.13.0+cpu) answers for its public version, as uv's resolver does
            key = version.public
            uploaded = _parse_time(file.get("upload-time"))
            release = by_version.setdefault(key, Release(version, uploaded, bool(file.get("yanked"))))
            if uploaded and (release.upload_time is None or uploaded < release.upload_time):
                release.upload_time = uploaded
            release.yanked = release.yanked and bool(file.get("yanked"))
            release.files.append(str(file.get("filename", "")))
        return by_version

    def _cached_fetch(self, name: str) -> dict[str, Any]:
        cache = self._cache_path(name)
        if cache and cache.exists() and time.time() - cache.stat().st_mtime < CACHE_TTL_SECONDS:
            return json.loads(cache.read_text())
        url = f"{self.index_url.rstrip('/')}/{name}/"
        request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = response.read()
                is_json = "json" in response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return {"files": []}
            raise IndexUnreachable(f"{url} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise IndexUnreachable(f"{url} is unreachable ({exc})") from exc
        # PEP 691 JSON where the index speaks it; PEP 503 HTML (with PEP 714 data- attributes) otherwise.
        payload = json.loads(body) if is_json else {"files": _parse_simple_html(body.decode("utf-8", "replace"))}
        if cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            # one temporary name per process: two sweeps that fetch one package at once both land
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload))
            tmp.replace(cache)
        return payload

    def _cache_path(self, name: str) -> Path | None:
        if self.cache_dir is None:
            return None
        key = hashlib.sha1(self.index_url.encode()).hexdigest()[:8]
        return self.cache_dir / key / f"{name}.json"


class IndexUnreachable(OSError):
    """The package index could not be asked; the caller turns it into a message with the fix."""


class _SimpleHTML(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "a":
            return
        a = dict(attrs)
        href = a.get("href") or ""
        filename = urllib.parse.unquote(href.split("#", 1)[0].rsplit("/", 1)[-1])
        self.files.append({"filename": filename, "upload-time": a.get("data-upload-time"), "yanked": "data-yanked" in a})


def _parse_simple_html(text: str) -> list[dict[str, Any]]:
    parser = _SimpleHTML()
    parser.feed(text)
    return parser.files


def _version_from_filename(filename: str, name: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            dist, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            dist, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return version if dist == name else None


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def index_for(settings: Settings) -> PackageIndex:
    index_url = settings.index_url or os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or DEFAULT_INDEX
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "compat-harness" / "index"
    return PackageIndex(index_url, expand_find_links(settings.find_links), settings.no_index, cache)


def expand_find_links(folders: list[str]) -> list[str]:
    """`$PIP_FIND_LINKS` style entries; an unset variable drops out rather than becoming a literal."""
    out: list[str] = []
    for entry in folders:
        value = os.path.expandvars(entry)
        if "$" in value:
            continue
        out.extend(v for v in value.split() if v)
    return out


def resolve_git(url: str) -> tuple[str, str]:
    """(commit, error). A 40-hex ref is taken as is; otherwise `git ls-remote` names it."""
    ref = git_ref(url)
    if _SHA.match(ref):
        return ref, ""
    remote = git_url_without_ref(url).removeprefix("git+")
    try:
        proc = subprocess.run(
            ["git", "ls-remote", remote, ref, f"refs/tags/{ref}^{{}}"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"git ls-remote failed: {exc}"
    if proc.returncode != 0:
        return "", (proc.stderr.strip().splitlines() or ["git ls-remote failed"])[-1]
    lines = [line.split("\t") for line in proc.stdout.splitlines() if "\t" in line]
    if not lines:
        return "", f"no ref {ref!r} in {remote}"
    peeled = [sha for sha, name in lines if name.endswith("^{}")]
    return (peeled[0] if peeled else lines[0][0]), ""


def inherited_version(python: str, package: str) -> str | None:
    code = f"import importlib.metadata as m\ntry: print(m.version({package!r}))\nexcept m.PackageNotFoundError: pass"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return proc.stdout.strip() or None


def _candidates_for(
    package: str, entry: AxisEntry, index: PackageIndex, base_python: str, problems: list[str], base_freeze: Mapping[str, str] | None = None
) -> list[Candidate]:
    if entry.kind == "inherit":
        has = (package in base_freeze) if base_freeze is not None else inherited_version(base_python, package) is not None
        if not has:
            problems.append(f"axis {package!r}: inherit, but {base_python} has no {package}; install it there or pin a version")
        return [Candidate(package, "inherit")]
    if entry.kind == "git":
        commit, error = resolve_git(entry.value)
        if error:
            problems.append(f"axis {package!r}: cannot resolve git source {entry.value!r} ({error}); check the URL and ref")
            return []
        return [Candidate(package, "git", entry.value, commit)]
    if entry.kind == "path":
        path = Path(entry.value).expanduser()
        if not path.exists():
            problems.append(f"axis {package!r}: path {entry.value!r} does not exist; give a checkout of {package}")
            return []
        return [Candidate(package, "path", str(path.resolve()))]
    try:
        releases = index.releases(package)
    except IndexUnreachable as exc:
        problems.append(
            f"axis {package!r}: cannot list releases: {exc}; check index_url, or set no_index = true with find_links for an offline runner"
        )
        return []
    if entry.kind == "version":
        public = {Version(v).public for v in releases}
        if Version(entry.value).public not in public and _base_has(package, entry.value, base_python, base_freeze):
            return [Candidate(package, "version", entry.value)]  # an offline runner's base provides it
        if Version(entry.value).public not in public:
            near = _nearby(entry.value, releases)
            problems.append(f"axis {package!r}: version {entry.value!r} is not on the index; available near it: {near}")
            return []
        return [Candidate(package, "version", entry.value)]
    spec = SpecifierSet(entry.value)
    matching = [r.version for r in releases.values() if not r.yanked and r.version in spec]
    if not matching:
        problems.append(f"axis {package!r}: no release matches {entry.value!r}; widen the range")
        return []
    return [Candidate(package, "version", str(v)) for v in pick_versions(matching, entry.pick, entry.limit)]


def _base_has(package: str, version: str, base_python: str, base_freeze: Mapping[str, str] | None) -> bool:
    """Whether the base interpreter has exactly this release (resolution then takes it from there)."""
    have = base_freeze.get(package) if base_freeze is not None else inherited_version(base_python, package)
    return have is not None and Version(have).public == Version(version).public


def _nearby(value: str, releases: Mapping[str, Release], count: int = 3) -> str:
    if not releases:
        return "none (is the package name right?)"
    ordered = sorted(r.version for r in releases.values())
    target = Version(value)
    after = [v for v in ordered if v > target][:count]
    before = [v for v in ordered if v < target][-count:]
    return ", ".join(str(v) for v in before + after)


@dataclass
class ResolvedMatrix:
    spec: MatrixSpec
    axes: dict[str, list[Candidate]]
    cells: list[Cell]


def resolve_matrix(spec: MatrixSpec, index: PackageIndex | None = None, base_freeze: Mapping[str, str] | None = None) -> ResolvedMatrix:
    """Check every axis entry and expand the cells. `base_freeze` stands in for a base
    interpreter that lives elsewhere (a runner seen from the machine preparing its wheels)."""
    index = index or index_for(spec.settings)
    problems: list[str] = list(spec.problems)
    axes: dict[str, list[Candidate]] = {}
    resolved: dict[tuple[str, AxisEntry], list[Candidate]] = {}
    for package, entries in spec.axes.items():
        cands: list[Candidate] = []
        for entry in entries:
            key = (package, entry)
            if key not in resolved:
                resolved[key] = _candidates_for(package, entry, index, spec.settings.python, problems, base_freeze)
            cands.extend(c for c in resolved[key] if c not in cands)
        axes[package] = cands
    includes = []
    for selector in spec.include:
        chosen: dict[str, Candidate] = {}
        for package, value in selector.items():
            parsed = parse_axis_entry(package, value, problems)
            if parsed is None:
                continue
            key = (package, parsed)
            if key not in resolved:
                resolved[key] = _candidates_for(package, parsed, index, spec.settings.python, problems, base_freeze)
            if resolved[key]:
                chosen[package] = resolved[key][0]
        includes.append(chosen)
    if problems:
        raise MatrixError(spec.source, problems)
    cells = expand(axes, spec.settings.python, includes, spec.exclude)
    return ResolvedMatrix(spec, axes, cells)


def period_date(cell: Cell, index: PackageIndex) -> datetime | None:
    """The newest upload time among the cell's pinned releases: resolve as of that moment."""
    times = []
    for cand in cell.candidates:
        if cand.kind != "version":
            continue
        release = index.releases(cand.package).get(cand.value)
        if release and release.upload_time:
            times.append(release.upload_time)
    return max(times) if times else None


# -- the releases between tested versions -----------------------------------------------------
def python_version_of(python: str) -> tuple[int, int] | None:
    """(3, 11) for a matrix's `python` setting: a version, or a path to an interpreter (asked)."""
    match = re.match(r"^(\d+)\.(\d+)", python)
    if match and os.path.sep not in python:
        return int(match.group(1)), int(match.group(2))
    try:
        proc = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    parts = proc.stdout.split()
    return (int(parts[0]), int(parts[1])) if proc.returncode == 0 and len(parts) == 2 else None


def install_tags(python: tuple[int, int] | None) -> frozenset[Tag] | None:
    """The wheel tags a CPython of that version on this machine's platform accepts (None: unknown)."""
    if python is None:
        return None
    platforms = list(platform_tags())
    return frozenset([*cpython_tags(python, platforms=platforms), *compatible_tags(python, platforms=platforms)])


def listed_releases(index: PackageIndex, package: str, tags: frozenset[Tag] | None, exclude_newer: datetime | None = None) -> list[Release]:
    """Final, non-yanked releases of `package` that the index (and find-links) offer and that can be
    installed with `tags`, uploaded before `exclude_newer` when given; oldest first.

    These are the candidates a range between two tested versions is made of, and what
    refinement builds: a release that exists but cannot be installed here is not one.
    """
    found = []
    for release in index.releases(package).values():
        version = release.version
        if release.yanked or version.is_prerelease or version.is_devrelease:
            continue
        if exclude_newer is not None and release.upload_time is not None and release.upload_time > exclude_newer:
            continue
        if release.installable(tags):
            found.append(release)
    return sorted(found, key=lambda r: r.version)
