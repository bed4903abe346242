"""candidates.py without the network: index pages, file names, find-links, resolution and period dates.

Every PackageIndex here has no_index=True and a pre-filled `_memory`, so nothing is fetched.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from harness.errors import MatrixError
from harness.inputs.candidates import (
    PackageIndex,
    Release,
    _parse_simple_html,
    _version_from_filename,
    expand_find_links,
    period_date,
    resolve_matrix,
)
from harness.inputs.matrix import Candidate, Cell, parse_matrix

SHA = "0123456789abcdef0123456789abcdef01234567"


def when(day: int) -> datetime:
    return datetime(2026, 3, day, 12, 0, tzinfo=UTC)


def rel(version: str, day: int | None = None, yanked: bool = False) -> Release:
    return Release(Version(version), when(day) if day else None, yanked)


def offline_index(memory: dict[str, dict[str, Release]], find_links: list[str] | None = None) -> PackageIndex:
    return PackageIndex(find_links=find_links or [], no_index=True, _memory=memory)


SIMPLE_HTML = """<!DOCTYPE html><html><body><h1>Links for torch</h1>
<a href="../../packages/ab/cd/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl#sha256=00ff"
   data-upload-time="2026-03-01T10:00:00.123456Z">torch</a>
<a href="https://files.example/torch-2.12.0.tar.gz" data-yanked="">torch</a>
<a href="torch-2.11.0-py3-none-any.whl" data-yanked="broken metadata" data-requires-python="&gt;=3.10">torch</a>
</body></html>"""


def test_parse_simple_html() -> None:
    assert _parse_simple_html(SIMPLE_HTML) == [
        {"filename": "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "upload-time": "2026-03-01T10:00:00.123456Z", "yanked": False},
        {"filename": "torch-2.12.0.tar.gz", "upload-time": None, "yanked": True},
        {"filename": "torch-2.11.0-py3-none-any.whl", "upload-time": None, "yanked": True},
    ]


FILENAMES = [
    ("torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "torch", "2.13.0+cpu"),
    ("transformers-5.6.2-py3-none-any.whl", "transformers", "5.6.2"),
    ("transformers-5.6.2.tar.gz", "transformers", "5.6.2"),
    ("peft-0.19.1.zip", "peft", "0.19.1"),
    ("Bitsandbytes-0.49.2-py3-none-manylinux_2_24_x86_64.whl", "bitsandbytes", "0.49.2"),
    ("flash_attn-2.7.0.tar.gz", "flash-attn", "2.7.0"),
    # another distribution whose name starts with ours
    ("torchaudio-2.13.0-cp311-cp311-linux_x86_64.whl", "torch", None),
    # not a distribution file
    ("README.txt", "torch", None),
    ("torch-2.13.0.tar.bz2", "torch", None),
    # a wheel name without version and tags
    ("torch.whl", "torch", None),
    # "latest" is not a version
    ("torch-latest.tar.gz", "torch", None),
]


@pytest.mark.parametrize(("filename", "name", "expected"), FILENAMES)
def test_version_from_filename(filename: str, name: str, expected: str | None) -> None:
    version = _version_from_filename(filename, name)
    assert (str(version) if version is not None else None) == expected


def test_expand_find_links(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", "/wheels/cpu  /wheels/extra")
    monkeypatch.delenv("HARNESS_UNSET_FOLDER", raising=False)
    assert expand_find_links(["$PIP_FIND_LINKS", "$HARNESS_UNSET_FOLDER", "./local", "${HARNESS_UNSET_FOLDER}/sub"]) == [
        "/wheels/cpu",
        "/wheels/extra",
        "./local",
    ]
    assert expand_find_links([]) == []


def test_find_links_folder_adds_public_versions(tmp_path: Path) -> None:
    for name in (
        "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl",
        "torch-2.12.0.tar.gz",
        "torchvision-0.28.0-py3-none-any.whl",
        "notes.txt",
    ):
        (tmp_path / name).write_text("")
    index = offline_index({}, [str(tmp_path), str(tmp_path / "missing")])
    assert sorted(index.releases("Torch")) == ["2.12.0", "2.13.0"]
    assert index.releases("torch") is index.releases("TORCH")  # cached under the canonical name


class ScriptedIndex(PackageIndex):
    """An index whose JSON answer is given, not fetched: exercises the release bookkeeping."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__()
        self.payload = payload

    def _cached_fetch(self, name: str) -> dict[str, Any]:
        return self.payload


def test_index_release_bookkeeping() -> None:
    index = ScriptedIndex(
        {
            "files": [
                {"filename": "peft-0.19.1.tar.gz", "upload-time": "2026-03-05T00:00:00Z", "yanked": False},
                {"filename": "peft-0.19.1-py3-none-any.whl", "upload-time": "2026-03-04T00:00:00Z", "yanked": True},
                {"filename": "peft-0.19.0-py3-none-any.whl", "upload-time": "2026-02-01T00:00:00Z", "yanked": "broken"},
                {"filename": "peft_extras-1.0.tar.gz", "upload-time": "2026-02-01T00:00:00Z"},
            ]
        }
    )
    releases = index.releases("peft")
    assert sorted(releases) == ["0.19.0", "0.19.1"]
    # the earliest file is the release's moment; a release is yanked only if every file is
    assert releases["0.19.1"].upload_time == datetime(2026, 3, 4, tzinfo=UTC)
    assert releases["0.19.1"].yanked is False
    assert releases["0.19.0"].yanked is True


MEMORY = {
    "torch": {"2.12.0": rel("2.12.0", 1), "2.13.0": rel("2.13.0", 10)},
    "transformers": {v: rel(v, d) for v, d in [("5.5.0", 2), ("5.5.1", 3), ("5.6.0", 4), ("5.6.2", 5), ("5.7.0", 6)]}
    | {"5.7.1": rel("5.7.1", 7, yanked=True), "6.0.0rc1": rel("6.0.0rc1", 8)},
    "peft": {"0.19.1": rel("0.19.1", 9)},
}


def test_resolve_matrix_expands_specifiers_offline() -> None:
    spec = parse_matrix("""
[axes]
torch = ["2.13.0"]
transformers = [{specifier = ">=5.5,<6", pick = "newest-patch", limit = 2}, "5.6.2"]
""")
    resolved = resolve_matrix(spec, offline_index(MEMORY))
    # 5.7.1 is yanked and 6.0.0rc1 is outside; 5.6.2 appears once although asked for twice
    assert [c.value for c in resolved.axes["transformers"]] == ["5.6.2", "5.7.0"]
    assert [c.id for c in resolved.cells] == ["torch2.13.0-tf5.6.2", "torch2.13.0-tf5.7.0"]


def test_resolve_matrix_reports_every_problem_at_once(tmp_path: Path) -> None:
    spec = parse_matrix(f"""
[axes]
torch = ["2.12.5"]
transformers = [">=7"]
peft = ["{tmp_path / "no-such-checkout"}"]
accelerate = ["1.13.0"]
""")
    with pytest.raises(MatrixError) as info:
        resolve_matrix(spec, offline_index(MEMORY))
    problems = info.value.problems
    assert len(problems) == 4, problems
    assert "version '2.12.5' is not on the index; available near it: 2.12.0, 2.13.0" in problems[0]
    assert "no release matches '>=7'" in problems[1]
    assert "does not exist" in problems[2]
    assert "available near it: none (is the package name right?)" in problems[3]


def test_resolve_matrix_git_sha_and_path_need_no_network(tmp_path: Path) -> None:
    (tmp_path / "peft").mkdir()
    spec = parse_matrix(f"""
[axes]
transformers = ["git+https://github.com/huggingface/transformers@{SHA}"]
peft = ["{tmp_path / "peft"}"]

[[include]]
transformers = "5.6.2"
""")
    resolved = resolve_matrix(spec, offline_index(MEMORY))
    assert resolved.axes["transformers"] == [
        Candidate("transformers", "git", f"git+https://github.com/huggingface/transformers@{SHA}", SHA)
    ]
    assert resolved.axes["peft"] == [Candidate("peft", "path", str((tmp_path / "peft").resolve()))]
    assert [c.id for c in resolved.cells] == [f"tf-git-{SHA[:24]}-peft-path-peft", "tf5.6.2-peft-path-peft"]


def test_resolve_matrix_accepts_a_public_version_of_a_local_build() -> None:
    index = offline_index({"torch": {"2.13.0+cpu": rel("2.13.0+cpu", 10)}})
    resolved = resolve_matrix(parse_matrix('[axes]\ntorch = ["2.13.0"]\n'), index)
    assert [c.value for c in resolved.axes["torch"]] == ["2.13.0"]


def test_period_date_is_the_newest_pinned_upload() -> None:
    cell = Cell(
        (Candidate("torch", "version", "2.12.0"), Candidate("transformers", "version", "5.6.2"), Candidate("peft", "version", "0.19.1")),
        "3.11",
    )
    assert period_date(cell, offline_index(MEMORY)) == when(9)


def test_period_date_ignores_non_versions_and_unknown_times() -> None:
    memory = {"torch": {"2.13.0": rel("2.13.0")}, "transformers": MEMORY["transformers"]}
    cell = Cell(
        (
            Candidate("torch", "version", "2.13.0"),
            Candidate("transformers", "git", f"git+https://x/y@{SHA}", SHA),
            Candidate("peft", "inherit"),
        ),
        "3.11",
    )
    assert period_date(cell, offline_index(memory)) is None
    cell = Cell((Candidate("torch", "version", "2.13.0"), Candidate("transformers", "version", "5.5.1")), "3.11")
    assert period_date(cell, offline_index(memory)) == when(3)
