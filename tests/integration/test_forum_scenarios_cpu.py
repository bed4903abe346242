"""The forum thread's scenarios in real cell environments on CPU: the thread's version set and
the newest releases, built from the index (torch from PIP_FIND_LINKS), run through the CLI.
The expectations are the reproductions documented in docs/findings.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO, run_cli

THREAD = "torch2.13.0-tf5.6.2-acc1.13.0-peft0.19.1-bnb0.49.2"
NEWEST = "torch2.13.0-tf5.23.0-acc1.15.0-peft0.21.2-bnb0.49.2"

#: scenario -> (status in the thread's cell, status in the newest cell, a fragment of the thread's signature)
EXPECTED = {
    "gemma4_lora_broad_targets": ("error", "error", "Gemma4ClippableLinear(...) is not supported"),
    "gemma4_lora_inner_linear": ("pass", "pass", ""),
    "gemma4_peft_split_4bit_load": ("error", "pass", "unexpected keyword argument '_is_hf_initialized' @ accelerate/utils/modeling.py"),
    "gemma4_peft_device_map_shared_kv": ("error", "pass", "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py"),
    "gemma4_lora_merge_parity": ("pass", "pass", ""),
    "gemma4_lora_merge_parity_4bit": ("fail", "fail", "merged model: logits differ"),
    "gpu_4bit_lora_generate": ("not_applicable", "not_applicable", ""),
}

pytestmark = pytest.mark.skipif(not os.environ.get("PIP_FIND_LINKS"), reason="needs PIP_FIND_LINKS naming a folder with a CPU torch wheel")


@pytest.fixture(scope="module")
def forum_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("forum") / "forum.duckdb"
    args = ["sweep", "--db", str(db), "--no-progress", "--cell", THREAD, "--cell", NEWEST]
    for scenario in EXPECTED:
        args += ["--scenario", scenario]
    proc = run_cli(*args, cwd=REPO, timeout=1800)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    return db


def _outcomes(db: Path) -> dict[tuple[str, str], tuple[str, str, str, str]]:
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT cell_id, scenario, status, signature, blamed_library, metrics FROM outcomes").fetchall()
    con.close()
    return {(r[0], r[1]): (r[2], r[3], r[4], r[5]) for r in rows}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_thread_and_newest(forum_db: Path, scenario: str) -> None:
    thread_status, newest_status, fragment = EXPECTED[scenario]
    rows = _outcomes(forum_db)
    status, signature, _, _ = rows[(THREAD, scenario)]
    assert status == thread_status, signature
    assert fragment in signature
    assert rows[(NEWEST, scenario)][0] == newest_status, rows[(NEWEST, scenario)][1]


def test_blame_and_metrics(forum_db: Path) -> None:
    rows = _outcomes(forum_db)
    assert rows[(THREAD, "gemma4_lora_broad_targets")][2] == "peft"
    assert rows[(THREAD, "gemma4_peft_split_4bit_load")][2] == "accelerate"
    parity = json.loads(rows[(THREAD, "gemma4_lora_merge_parity_4bit")][3])
    # the numbers, not only pass/fail: the 4-bit merge moves logits far beyond float noise
    assert parity["max_abs_logit_diff"] > 0.05 and 0 <= parity["token_agreement"] < 1
    inner = json.loads(rows[(NEWEST, "gemma4_lora_inner_linear")][3])
    assert inner["max_abs_logit_diff_vs_base"] > 0


def test_attribution_invents_nothing_when_no_axis_can_be_held_fixed(forum_db: Path) -> None:
    # the two cells differ in transformers, accelerate and peft at once: no single release can
    # be named, so attribution must report no transition rather than guess one
    proc = run_cli("attribute", "--db", str(forum_db), "--json")
    assert proc.returncode == 0, proc.stderr
    found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [t for t in found if t.get("kind") in ("introduced", "fixed")] == []
