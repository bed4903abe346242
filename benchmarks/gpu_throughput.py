"""Two GPUs vs one, side by side, from what scripts/runner_throughput.sh left in a folder.

    python benchmarks/gpu_throughput.py DIR [--json]

DIR holds walls.tsv ("mode part wall_s" per finished part) and MODE-PART.jsonl per part:
"all" (every GPU, one cell per GPU at a time) and "one" (GPU 0 alone, one cell at a time);
part k is the same shard k/N of the cells in both modes. Prints, per mode, the cells,
outcomes and the summed wall time of its parts; the parts both modes finished side by side
and the ratio of their walls; and whether both modes gave every shared (cell, scenario) the
same status and signature. The script runs the same scenarios in both modes (those that need
one GPU at most); with SAME_WORK=0, or in folders from before it did, a two-GPU scenario ran in
"all" only (it is not applicable on one): "all" did more work and the ratio understates it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def read_jsonl(paths: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    runs: dict[str, Any] = {}
    outcomes = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row["type"] == "run":
                runs[row["run_id"]] = row
            elif row["type"] == "outcome":
                outcomes.append(row)
    return runs, outcomes


def walls(folder: Path) -> dict[str, dict[str, float]]:
    by_mode: dict[str, dict[str, float]] = {}
    for line in (folder / "walls.tsv").read_text().splitlines():
        mode, part, seconds = line.split("\t")
        by_mode.setdefault(mode, {})[part] = float(seconds)
    return by_mode


def summarise(folder: Path) -> dict[str, Any]:
    timed = walls(folder)
    modes: dict[str, Any] = {}
    for mode in ("all", "one"):
        files = [folder / f"{mode}-{part}.jsonl" if part != "all" else folder / "all.jsonl" for part in timed.get(mode, {})]
        runs, outcomes = read_jsonl([f for f in files if f.exists()])
        host = next(iter(runs.values()), {}).get("host", {})
        modes[mode] = {
            "wall_s": round(sum(timed.get(mode, {}).values()), 1),
            "parts": len(timed.get(mode, {})),
            "cells": len({o["cell_id"] for o in outcomes}),
            "outcomes": len(outcomes),
            "statuses": dict(Counter(o["status"] for o in outcomes)),
            "gpu": host.get("gpu", ""),
            "cpus": host.get("cpus", 0),
            "_by_key": {(o["cell_id"], o["scenario"]): (o["status"], o["signature"]) for o in outcomes},
        }
    a, o = modes["all"]["_by_key"], modes["one"]["_by_key"]
    common = sorted(k for k in a.keys() & o.keys() if o[k][0] != "not_applicable" or a[k][0] == "not_applicable")
    differ = [{"cell": k[0], "scenario": k[1], "all": a[k], "one": o[k]} for k in common if a[k] != o[k]]
    same_cells = {c for c, _ in a} == {c for c, _ in o}
    ratio = modes["one"]["wall_s"] / modes["all"]["wall_s"] if same_cells and modes["all"]["wall_s"] else None
    # shard k holds the same cells in both modes: compare the shards both finished
    both = sorted(set(timed.get("all", {})) & set(timed.get("one", {})))
    parts = [{"part": k, "all_s": timed["all"][k], "one_s": timed["one"][k], "ratio": timed["one"][k] / timed["all"][k]} for k in both]
    part_ratio = sum(p["one_s"] for p in parts) / sum(p["all_s"] for p in parts) if parts else None
    for m in modes.values():
        del m["_by_key"]
    return {
        "modes": modes,
        "same_cells": same_cells,
        "ratio_one_over_all": ratio,
        "parts": parts,
        "parts_ratio": part_ratio,
        "compared": len(common),
        "differ": differ,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = summarise(args.folder)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'mode':<8} {'gpu':<12} {'cpus':>4} {'parts':>5} {'cells':>5} {'outcomes':>8} {'wall s':>7}  statuses")
    for mode, m in result["modes"].items():
        label = {"all": "all GPUs", "one": "GPU 0"}[mode]
        cols = f"{m['cpus']:>4} {m['parts']:>5} {m['cells']:>5} {m['outcomes']:>8} {m['wall_s']:>7}"
        print(f"{label:<8} {m['gpu'][:12]:<12} {cols}  {m['statuses']}")
    for p in result["parts"]:
        print(f"  shard {p['part']}: all GPUs {p['all_s']:.1f} s, GPU 0 {p['one_s']:.1f} s, {p['ratio']:.2f}x")
    if result["parts_ratio"] is not None:
        print(f"throughput over the {len(result['parts'])} shards both modes finished: {result['parts_ratio']:.2f}x")
    if result["ratio_one_over_all"] is None:
        print("ratio: not comparable yet (the modes finished different cells)")
    else:
        print(f"throughput, all GPUs vs one: {result['ratio_one_over_all']:.2f}x (wall on one / wall on all, same cells)")
    print(f"same status and signature in {result['compared'] - len(result['differ'])} of {result['compared']} shared outcomes")
    for d in result["differ"]:
        print(f"  differs: {d['cell']} {d['scenario']}: all={d['all']} one={d['one']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
