"""Pure pieces of the offline-runner path: platform tags, what to download, bitsandbytes slimming."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from harness.running.envs import Base, base_from_freeze
from harness.workflows.wheelhouse import _pins_to_download, pip_platforms, slim_bitsandbytes

PLATFORMS = [
    ("x86_64-manylinux_2_28", ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"]),
    ("aarch64-manylinux_2_17", ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]),
]


@pytest.mark.parametrize(("platform", "must_contain"), PLATFORMS)
def test_pip_platforms_cover_older_manylinux(platform: str, must_contain: list[str]) -> None:
    tags = pip_platforms(platform)
    for tag in must_contain:
        assert tag in tags
    assert tags[0].startswith("manylinux_2_")  # newest first


def test_unknown_platform_is_passed_through() -> None:
    assert pip_platforms("win_amd64") == ["win_amd64"]


def test_only_what_differs_from_the_base_is_downloaded() -> None:
    base = Base("/opt/py", {"torch": "2.11.0", "numpy": "2.5.2", "tokenizers": "0.23.2"})
    lock = "torch==2.11.0\nnumpy==2.5.2\ntokenizers==0.22.2\ntransformers==5.6.2\nacc @ git+https://h/acc@abc\n"
    assert _pins_to_download(lock, base) == ["tokenizers==0.22.2", "transformers==5.6.2", "acc @ git+https://h/acc@abc"]
    assert len(_pins_to_download(lock, None)) == 5


def test_base_from_freeze_normalises_names_and_skips_urls() -> None:
    base = base_from_freeze("Jinja2==3.1.6\ntyping_extensions==4.16.0\nmypkg @ file:///src/mypkg\n# comment\n")
    assert base.freeze == {"jinja2": "3.1.6", "typing-extensions": "4.16.0"}


def _fake_bnb(path: Path) -> Path:
    wheel = path / "bitsandbytes-0.49.2-py3-none-manylinux_2_24_x86_64.whl"
    libs = ["cpu", "cuda118", "cuda130", "rocm63"]
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("bitsandbytes/__init__.py", "")
        for lib in libs:
            zf.writestr(f"bitsandbytes/libbitsandbytes_{lib}.so", b"\0" * 1000)
        record = "".join(f"bitsandbytes/libbitsandbytes_{lib}.so,sha256=x,1000\n" for lib in libs)
        zf.writestr("bitsandbytes-0.49.2.dist-info/RECORD", "bitsandbytes/__init__.py,,\n" + record)
    return wheel


def test_slim_keeps_only_the_wanted_native_libraries_and_rewrites_record(tmp_path: Path) -> None:
    wheel = _fake_bnb(tmp_path)
    assert slim_bitsandbytes(wheel, {"cpu", "cuda130"})
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        record = zf.read("bitsandbytes-0.49.2.dist-info/RECORD").decode()
    assert {n for n in names if n.endswith(".so")} == {"bitsandbytes/libbitsandbytes_cpu.so", "bitsandbytes/libbitsandbytes_cuda130.so"}
    assert "cuda118" not in record and "rocm63" not in record and "cuda130" in record
    # nothing left to drop: the wheel is not rewritten again
    assert not slim_bitsandbytes(wheel, {"cpu", "cuda130"})
