"""Carry a wheelhouse through a small pipe: many releases of one package in one solid archive.

    python scripts/wheelhouse_pack.py pack WHEELHOUSE OUT.tar.xz
    python scripts/wheelhouse_pack.py unpack IN.tar.xz WHEELHOUSE

A refinement wheelhouse holds 28 transformers releases (10 MB each, 316 MiB together), while
the GPU runner takes 64 MiB per trip. Consecutive releases share almost every file, but each
wheel is compressed on its own, so nothing is shared between them. Packing stores every wheel's
members uncompressed, sorted by member path across wheels, so that the same file of every
release sits side by side, and compresses the whole stream once with xz. Unpacking writes each
wheel back as a zip of the same members, in its original order: every member's bytes (and so
RECORD's hashes) are unchanged, which is what pip and uv check when installing.
"""

from __future__ import annotations

import io
import json
import lzma
import sys
import tarfile
import zipfile
from pathlib import Path


def pack(wheelhouse: Path, out: Path) -> None:
    members: list[tuple[str, str, bytes]] = []  # (member path, wheel name, bytes)
    order: dict[str, list[str]] = {}
    others: list[Path] = []
    for wheel in sorted(wheelhouse.iterdir()):
        if wheel.suffix != ".whl":
            others.append(wheel)
            continue
        with zipfile.ZipFile(wheel) as z:
            # names with their modes and times: an executable inside (uv's binary) must stay one
            order[wheel.name] = [[i.filename, i.external_attr, list(i.date_time)] for i in z.infolist()]
            members += [(name, wheel.name, z.read(name)) for name in z.namelist()]
    members.sort()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        _add(tar, "order.json", json.dumps(order).encode())
        for path in others:
            _add(tar, f"files/{path.name}", path.read_bytes())
        for k, (name, wheel, data) in enumerate(members):
            _add(tar, f"m/{k:07d}/{wheel}/{name}", data)
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 192 * 2**20}]
    out.write_bytes(lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, filters=filters))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def unpack(archive: Path, wheelhouse: Path) -> None:
    wheelhouse.mkdir(parents=True, exist_ok=True)
    contents: dict[str, dict[str, bytes]] = {}
    with tarfile.open(archive, mode="r:xz") as tar:
        order = json.loads(tar.extractfile("order.json").read())  # type: ignore[union-attr]
        for info in tar:
            if info.name.startswith("files/"):
                (wheelhouse / info.name.removeprefix("files/")).write_bytes(tar.extractfile(info).read())  # type: ignore[union-attr]
            elif info.name.startswith("m/"):
                _, _, wheel, name = info.name.split("/", 3)
                contents.setdefault(wheel, {})[name] = tar.extractfile(info).read()  # type: ignore[union-attr]
    for wheel, names in order.items():
        with zipfile.ZipFile(wheelhouse / wheel, "w", zipfile.ZIP_STORED) as z:  # stored: quick, and installs the same
            for name, attr, when in names:
                info = zipfile.ZipInfo(name, tuple(when))
                info.external_attr = attr
                z.writestr(info, contents[wheel][name])


if __name__ == "__main__":
    command, source, target = sys.argv[1:4]
    (pack if command == "pack" else unpack)(Path(source), Path(target))
