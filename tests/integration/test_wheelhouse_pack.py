"""scripts/wheelhouse_pack.py round trip: every wheel comes back with the same members and bytes.

Real wheels from the index (duckdb 2.0.1's lists folders such as `adbc_driver_duckdb/`, which
the first format lost on the runner), and a made-up one with every member shape a zip can hold.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL = ["duckdb==2.0.1", "peft==0.20.0"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wheelhouse_pack", ROOT / "scripts" / "wheelhouse_pack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def real_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("real-wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(out), *REAL],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"the index could not be reached for {REAL}: {done.stderr.strip()[-300:]}")
    return out


def _odd_wheel(folder: Path) -> Path:
    """A wheel whose zip holds a folder, a duplicate name, an executable, a long and a non-ASCII name."""
    path = folder / "odd-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("odd/", (2020, 1, 2, 3, 4, 6)), b"")
        z.writestr("odd/__init__.py", b"X = 1\n")
        exe = zipfile.ZipInfo("odd-1.0.data/scripts/odd", (2021, 5, 6, 7, 8, 10))
        exe.external_attr = 0o100755 << 16
        z.writestr(exe, b"#!/bin/sh\necho odd\n")
        z.writestr("odd/" + "deep/" * 30 + "long_name_past_tar_s_100_characters.py", b"LONG = True\n")
        z.writestr("odd/données/ü.txt", "é".encode())
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("odd/__init__.py", b"X = 2\n")
        z.writestr("odd-1.0.dist-info/RECORD", b"")
    return path


def _members(wheel: Path) -> list[tuple[str, int, tuple[int, ...], bytes]]:
    with zipfile.ZipFile(wheel) as z:
        return [(i.filename, i.external_attr, i.date_time, z.read(i)) for i in z.infolist()]


def test_every_member_of_real_and_odd_wheels_comes_back(real_wheels: Path, tmp_path: Path) -> None:
    script = _script()
    house = tmp_path / "house"
    house.mkdir()
    for wheel in real_wheels.glob("*.whl"):
        (house / wheel.name).write_bytes(wheel.read_bytes())
    _odd_wheel(house)
    (house / "harness-releases.json").write_text('{"peft": []}\n')
    script.pack(house, tmp_path / "house.tar.xz", preset=0)
    back = tmp_path / "back"
    written = script.unpack(tmp_path / "house.tar.xz", back)

    assert sorted(written) == sorted(p.name for p in house.iterdir())
    assert (back / "harness-releases.json").read_text() == '{"peft": []}\n'
    for wheel in house.glob("*.whl"):
        assert _members(back / wheel.name) == _members(wheel), wheel.name
    folders = [name for name, *_ in _members(back / next(house.glob("duckdb-*.whl")).name) if name.endswith("/")]
    assert "adbc_driver_duckdb/" in folders


def test_an_unpacked_wheel_installs_and_imports(real_wheels: Path, tmp_path: Path) -> None:
    script = _script()
    house = tmp_path / "house"
    house.mkdir()
    duckdb = next(real_wheels.glob("duckdb-*.whl"))
    (house / duckdb.name).write_bytes(duckdb.read_bytes())
    script.pack(house, tmp_path / "h.tar.xz", preset=0)
    script.unpack(tmp_path / "h.tar.xz", tmp_path / "back")
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, str(tmp_path / "back" / duckdb.name)], check=True)
    code = "import duckdb; print(duckdb.__version__, duckdb.sql('select 40 + 2').fetchall()[0][0])"
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(target)}, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2.0.1", "42"]


def test_an_archive_of_another_shape_is_refused_with_the_fix(tmp_path: Path) -> None:
    import io
    import lzma
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("order.json")
        tar.addfile(info, io.BytesIO(b""))
    (tmp_path / "old.tar.xz").write_bytes(lzma.compress(raw.getvalue()))
    with pytest.raises(SystemExit, match="pack it again"):
        _script().unpack(tmp_path / "old.tar.xz", tmp_path / "back")
