#!/usr/bin/env python3
"""Rebuild results/default.duckdb, the dashboard's shipped data, from the runs it is made of.

    .venv/bin/python scripts/build_default_data.py CPU_RESULTS [MORE ...] [--out results/default.duckdb]

CPU_RESULTS: the default sweep's results (`./run sweep` writes results/compat.duckdb); MORE:
further results files (e.g. a GPU runner's new shards). The GPU runs of docs/findings.md come
from results/gpu/ (listed below). Two corrections are applied, each said in docs/findings.md:

1. **CUDA runtime of the older H200 runs.** Runs before migration 0005 did not store
   `cuda_runtime`; every one of them inherited the runner image's torch 2.11.0, built for CUDA
   13.0 (docs/runner/probe-h200.txt: cuda-toolkit 13.0.2; /work/shared/GPU.md: torch
   2.11.0+cu130), as the later runs on the same image stored. Without it they would form a
   machine class of their own and never be compared with the later runs.
2. **Passes that never confirmed their setup.** A scenario that now declares `SETUP` passes
   only after `_kit.reached()` confirmed it (metric `setup_reached`). Its older passes, run
   before it declared one, never did: they are stored as `inconclusive`, not as passes (e.g.
   gpu_int8_cpu_offload_lora, whose int8 layer never sat on the CPU in those runs).

Then `harness attribute` (with the index's releases) stores the answers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.inputs.scenarios import available, load_scenario  # noqa: E402
from harness.storage.shardfile import read_records  # noqa: E402
from harness.storage.store import Store  # noqa: E402

GPU = REPO / "results" / "gpu"
GPU_RUNS = [
    *sorted(GPU.glob("h200-run2-shard-*.jsonl")),
    *sorted(GPU.glob("h200-run3-dequantize-shard-*.jsonl")),
    GPU / "h200x2-12cells.jsonl",
    GPU / "h200x2-tp4-all.jsonl",
    GPU / "h200x2-tp4-one-1.jsonl",
    GPU / "h200x2-tp4-one-2.jsonl",
    # h200x2-tp12/ (2026-11-21) ran the same cells under the same run ids before scenarios
    # declared their setups; its rerun with SETUP (2026-11-23) replaces it here, kept as evidence.
    *sorted((GPU / "h200x2-tp12-setup").glob("*.jsonl")),
    GPU / "h200-refine-bnb.jsonl",
    # one trip to the runner (issue #22): the 5.6.2 -> 5.17.0 and 5.17.0 -> 5.23.0 ranges refined
    # there from the wheelhouse, and gpu_peft_device_map_generate rerun with its SETUP
    GPU / "h200-one-trip" / "one-trip.jsonl",
]


def merge(store: Store, path: Path) -> int:
    return store.merge_records(read_records(path)) if path.suffix == ".jsonl" else store.merge_database(path)


def correct(store: Store) -> tuple[int, int]:
    """The two corrections above; (cells given a CUDA runtime, passes turned inconclusive)."""
    cuda = store.con.execute(
        "UPDATE cells SET cuda_runtime = '13.0' WHERE COALESCE(cuda_runtime, '') = '' AND inherited->>'torch' = '2.11.0' "
        "AND run_id IN (SELECT run_id FROM runs WHERE host->>'gpu' LIKE 'NVIDIA H200%')"
    ).fetchone()
    declared = {name: load_scenario(path).setup for name, path in available().items()}
    turned = 0
    for name, setup in sorted(declared.items()):
        if not setup:
            continue
        message = f"never confirmed its setup ({setup}): run before the scenario declared it"
        row = store.con.execute(
            "UPDATE outcomes SET status = 'inconclusive', message = ?, signature = '', signature_family = '' "
            "WHERE scenario = ? AND status = 'pass' AND COALESCE(json_extract(metrics, '$.setup_reached')::BOOLEAN, false) = false",
            [message, name],
        ).fetchone()
        turned += int(row[0]) if row else 0
    return int(cuda[0]) if cuda else 0, turned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path, help="the default sweep's results, then any other results files")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "default.duckdb")
    args = parser.parse_args(argv)
    missing = [str(p) for p in [*GPU_RUNS, *args.sources] if not p.is_file()]
    if missing:
        raise SystemExit(f"build_default_data: missing {', '.join(missing)}")
    tmp = args.out.with_suffix(".building.duckdb")
    tmp.unlink(missing_ok=True)
    with Store(tmp) as store:
        for path in [*GPU_RUNS, *args.sources]:
            print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {merge(store, path)} outcome(s)")
        cuda, turned = correct(store)
        print(f"corrections: {cuda} H200 cell record(s) given CUDA 13.0; {turned} pass(es) without a confirmed setup -> inconclusive")
    harness = [sys.executable, "-m", "harness"]
    proc = subprocess.run([*harness, "attribute", "--db", str(tmp)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"build_default_data: harness attribute failed: {proc.stderr}")
    print(proc.stdout.strip().splitlines()[-1])
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
