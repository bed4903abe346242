"""The zygote and learned preloads through the real CLI, on light cells with real torch:
one zygote serves every cell of a torch build, what the scenarios imported is kept beside each
env and preloaded next time, and a cell whose scenarios never import torch starts no zygote."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.skipif(not os.environ.get("PIP_FIND_LINKS"), reason="needs PIP_FIND_LINKS naming a folder with a CPU torch wheel")

MATRIX = """
[matrix]
python = "3.11"
find_links = ["$PIP_FIND_LINKS"]
timeout = 120
preload = ["torch"]

[axes]
torch = ["2.13.0"]
packaging = ["23.2", "24.0"]
"""
USES_TORCH = "import torch\nimport packaging.version\nprint(torch.ones(3).sum().item(), packaging.version.Version('1.0'))\n"
PLAIN = "import sys\nimport packaging.version\nprint('torch' in sys.modules)\n"


def _sweep(tmp: Path, env_root: Path, run_id: str, scenarios: list[Path], *extra: str) -> tuple[str, dict[tuple[str, str], dict]]:
    db = tmp / f"{run_id}.jsonl"
    args = ["sweep", "--matrix", str(tmp / "m.toml"), "--db", str(db), "--env-root", str(env_root), "--no-progress", "--run-id", run_id]
    proc = run_cli(*args, *[a for s in scenarios for a in ("--scenario", str(s))], *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-2000:]
    timing = next(line for line in proc.stdout.splitlines() if line.startswith("time:"))
    rows = [json.loads(line) for line in db.read_text().splitlines() if line.strip()]
    return timing, {(r["cell_id"], r["scenario"]): r for r in rows if r["type"] == "outcome"}


def test_one_zygote_per_torch_build_and_learned_preloads(tmp_path: Path, env_root: Path) -> None:
    (tmp_path / "m.toml").write_text(MATRIX)
    uses_torch, plain = tmp_path / "uses_torch.py", tmp_path / "plain.py"
    uses_torch.write_text(USES_TORCH)
    plain.write_text(PLAIN)

    timing, first = _sweep(tmp_path, env_root, "first", [uses_torch, plain])
    assert re.search(r"zygote starts [\d.]+ s \(1;", timing), timing  # two cells, one zygote
    assert {r["status"] for r in first.values()} == {"pass"}
    # in fork mode the plain script ran in a server that had preloaded torch
    assert {r["output_tail"].strip() for (_, s), r in first.items() if s == "plain"} == {"True"}
    # the session's env root is shared: other tests' cells (packaging 24.1) may be there too
    learned = [
        json.loads(p.read_text()) for v in ("23.2", "24.0") for p in env_root.glob(f"torch2.13.0-packaging{v}-*/harness-imports.json")
    ]
    assert len(learned) == 2
    # what the file imports, then what it loaded: packaging's modules only, no torch
    assert all(record["plain"]["modules"][0] == "packaging.version" for record in learned)
    assert all(m.startswith("packaging.") for record in learned for m in record["plain"]["modules"])
    assert all(record["uses_torch"]["modules"][:2] == ["torch", "packaging.version"] for record in learned)

    # the plain script alone: it preloads what it used, and no zygote is started for it
    timing, second = _sweep(tmp_path, env_root, "second", [plain])
    assert re.search(r"zygote starts 0\.0 s \(0;", timing), timing
    assert "packaging.*" in timing
    assert {r["output_tail"].strip() for r in second.values()} == {"False"}

    # --no-zygote: what the harness did before; same statuses
    timing, third = _sweep(tmp_path, env_root, "third", [uses_torch, plain], "--no-zygote")
    assert "zygotes off" in timing
    assert {k: r["status"] for k, r in third.items()} == {k: r["status"] for k, r in first.items()}
