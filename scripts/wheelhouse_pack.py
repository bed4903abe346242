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

A member's name never becomes a path in the tar: tar reads a name ending in "/" as a folder
and drops the slash (duckdb 2.0.1's wheel lists `adbc_driver_duckdb/`), and a zip may hold
names no file system takes. Members are numbered in the tar and named in `index.json`, with
each wheel's members as (name, mode, time) in their zip order, duplicates and folders included.
Stdlib only: it runs on the runner before anything is installed.
"""

from __future__ import annotations

import io
import json
import lzma
import sys
import tarfile
import zipfile
from pathlib import Path

INDEX = "index.json"
FORMAT = 2  # 1 named members by path inside the tar; that lost folder members


def pack(wheelhouse: Path, out: Path, preset: int = 9 | lzma.PRESET_EXTREME) -> None:
    wheels: dict[str, list[list[object]]] = {}
    members: list[tuple[str, str, int, bytes]] = []  # (member name, wheel, position in its zip, bytes)
    others: list[str] = []
    for path in sorted(wheelhouse.iterdir()):
        if path.suffix != ".whl":
            others.append(path.name)
            continue
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
            # names with their modes and times: an executable inside (uv's binary) must stay one
            wheels[path.name] = [[i.filename, i.external_attr, list(i.date_time)] for i in infos]
            members += [(i.filename, path.name, n, z.read(i)) for n, i in enumerate(infos)]
    members.sort(key=lambda m: (m[0], m[1], m[2]))
    index = {"format": FORMAT, "wheels": wheels, "files": others, "members": [[w, n] for _, w, n, _ in members]}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, INDEX, json.dumps(index).encode())
        for k, name in enumerate(others):
            _add(tar, f"f/{k}", (wheelhouse / name).read_bytes())
        for k, (_, _, _, data) in enumerate(members):
            _add(tar, f"m/{k}", data)
    # a dictionary as large as the stream (up to 192 MiB) lets the last release find the first
    dict_size = min(192 * 2**20, max(2**20, raw.tell()))
    filters = [{"id": lzma.FILTER_LZMA2, "preset": preset, "dict_size": dict_size}]
    out.write_bytes(lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, filters=filters))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def unpack(archive: Path, wheelhouse: Path) -> list[str]:
    """Write the archive's wheels and files into `wheelhouse`; returns the names written."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:xz") as tar:
        head = tar.next()
        if head is None or head.name != INDEX:
            raise SystemExit(f"{archive}: not a wheelhouse packed by this script (no {INDEX} first); pack it again with it")
        index = json.loads(_read(tar, head))
        contents: dict[str, dict[int, bytes]] = {wheel: {} for wheel in index["wheels"]}
        for info in tar:
            if info.name == INDEX:  # iterating a tar starts again from its first member
                continue
            kind, k = info.name.split("/", 1)
            if kind == "f":
                (wheelhouse / index["files"][int(k)]).write_bytes(_read(tar, info))
            else:
                wheel, n = index["members"][int(k)]
                contents[wheel][n] = _read(tar, info)
    for wheel, infos in index["wheels"].items():
        with zipfile.ZipFile(wheelhouse / wheel, "w", zipfile.ZIP_STORED) as z:  # stored: quick, and installs the same
            for n, (name, attr, when) in enumerate(infos):
                member = zipfile.ZipInfo(name, tuple(when))
                member.external_attr = attr
                z.writestr(member, contents[wheel][n])
    return [*index["files"], *index["wheels"]]


def _read(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    stream = tar.extractfile(info)
    if stream is None:  # only regular members are written by pack
        raise SystemExit(f"archive member {info.name!r} is not a file: pack the wheelhouse again with this script")
    return stream.read()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("pack", "unpack"):
        raise SystemExit("usage: wheelhouse_pack.py pack WHEELHOUSE OUT.tar.xz | unpack IN.tar.xz WHEELHOUSE")
    command, source, target = sys.argv[1:4]
    if command == "pack":
        pack(Path(source), Path(target))
    else:
        unpack(Path(source), Path(target))
