"""Check a GPU-fault run (scripts/gpu_faults.sh OUTDIR): each fault classified as the harness
should, the scenario after it run, and every run's outcome count complete. Standard library only.

    python3 tests/gpu_faults/check.py OUTDIR        prints one line per outcome; exit 1 on any miss
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ["gpu_oom", "gpu_wedge", "gpu_vanish", "gpu_healthy"]
#: run -> scenario -> (status, a fragment its message must hold)
EXPECTED = {
    "fork": {
        "gpu_oom": ("oom", "OutOfMemoryError"),
        "gpu_wedge": ("timeout", "process group was killed"),
        "gpu_vanish": ("not_applicable", "saw none"),
        "gpu_healthy": ("pass", ""),
    },
    "process": {
        "gpu_oom": ("oom", "OutOfMemoryError"),
        "gpu_wedge": ("timeout", "process group was killed"),
        "gpu_vanish": ("not_applicable", "saw none"),
        "gpu_healthy": ("pass", ""),
    },
    # CUDA_VISIBLE_DEVICES points at nothing for the whole sweep: the harness counts no GPU
    "hidden": {name: ("not_applicable", "this runner has 0") for name in ORDER},
}


def outcomes(shard: Path) -> list[dict[str, object]]:
    rows = []
    for line in shard.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("type") == "outcome":
            rows.append(record)
    return rows


def main(out: Path) -> int:
    misses = 0
    for run, expected in EXPECTED.items():
        shard = out / f"faults-{run}.jsonl"
        if not shard.exists():
            print(f"{run}: MISSING {shard}")
            misses += 1
            continue
        rows = outcomes(shard)
        by_name = {str(r["scenario"]): r for r in rows}
        complete = sorted(by_name) == sorted(ORDER) and len(rows) == len(ORDER)
        misses += not complete
        print(f"{run}: {len(rows)} outcome(s) of {len(ORDER)}" + ("" if complete else "  MISS: incomplete"))
        for name in ORDER:
            row = by_name.get(name)
            want, fragment = expected[name]
            if row is None:
                print(f"  {name}: MISS: no outcome (expected {want})")
                misses += 1
                continue
            message = str(row.get("message") or "")
            ok = row["status"] == want and fragment in message
            misses += not ok
            seconds = float(row.get("seconds") or 0)
            print(
                f"  {name}: {row['status']} in {seconds:.1f} s{'' if ok else f'  MISS: expected {want} with {fragment!r}'}: {message[:240]}"
            )
            metrics = row.get("metrics") or {}
            if metrics:
                print(f"    metrics: {json.dumps(metrics)}")
    print("all faults classified as expected" if not misses else f"{misses} miss(es)")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
