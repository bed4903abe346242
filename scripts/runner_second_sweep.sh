#!/usr/bin/env bash
# The same cells swept N times in a row on one env root, offline, as a runner that keeps its
# envs does (issue #22: the second sweep's fork-server starts were 14x the first's).
# Needs .wheelhouse/ from `harness wheelhouse` (it carries uv).
#
#   scripts/runner_second_sweep.sh MATRIX OUTDIR [N] [extra harness sweep args...]
#
# Each sweep writes OUTDIR/sweep-K.jsonl and .log and prints its wall and `time:` line. The
# scenarios are the matrix's own (every one in scenarios/ if it names none) that need one GPU
# at most. Then tests/gpu_checks/bnb_preloaded.py runs once as a scenario (forked from the
# server that preloaded bitsandbytes) and once as a plain script in the same env: both lines go
# to OUTDIR/bnb-preloaded.txt, and must agree on the native library and the checksum.
set -euo pipefail
# The runner goes when the script ends: the fork servers a sweep kept (--keep-servers auto, on
# with GPUs) are ended first, so nothing outlives it.
trap '"${PYTHON:-python3}" -m harness servers --stop > /dev/null 2>&1 || true' EXIT
matrix=$1 out=$2 n=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
deps=${TMPDIR:-/tmp}/harness-deps
root=${ENV_ROOT:-${TMPDIR:-/tmp}/harness-envs-again}
mkdir -p "$deps" "$out"
"${PYTHON:-python3}" -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
nvidia-smi -L
read -r -a scenarios <<< "$("${PYTHON:-python3}" -c 'import sys; from pathlib import Path
from harness.inputs.matrix import load_matrix; from harness.inputs.scenarios import select
names = select(load_matrix(Path(sys.argv[1])).settings.scenarios)
print(" ".join(f"--scenario {s.path}" for s in names if s.requires.gpus <= 1))' "$matrix")"
echo "$((${#scenarios[@]} / 2)) scenarios; env root $root"
for ((k = 1; k <= n; k++)); do
  t0=$EPOCHREALTIME
  "${PYTHON:-python3}" -m harness sweep --matrix "$matrix" --device cuda --db "$out/sweep-$k.jsonl" --env-root "$root" \
    --run-id "again-$k-${RUN_TAG:-$(date -u +%Y%m%d%H%M)}" --no-progress --no-refine "${scenarios[@]}" "$@" > "$out/sweep-$k.log" 2>&1 \
    || echo "sweep $k: harness exited $?"
  echo "sweep $k: $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }") s wall; $(grep '^time:' "$out/sweep-$k.log" || tail -n 3 "$out/sweep-$k.log")"
done
"${PYTHON:-python3}" -m harness sweep --matrix "$matrix" --device cuda --db "$out/bnb-check.jsonl" --env-root "$root" \
  --run-id "bnb-check" --no-progress --no-refine --scenario tests/gpu_checks/bnb_preloaded.py > "$out/bnb-check.log" 2>&1 || true
{
  echo "as a scenario (forked from the cell's server):"
  "${PYTHON:-python3}" -c 'import json, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    if row.get("type") == "outcome":
        print(row["status"], row.get("output_tail", "").strip().splitlines()[-1:])' "$out/bnb-check.jsonl"
  for env in "$root"/*/; do
    [ -x "$env/bin/python" ] || continue
    echo "plain script in $(basename "$env"):"
    "$env/bin/python" tests/gpu_checks/bnb_preloaded.py 2>&1 | tail -n 1
  done
} > "$out/bnb-preloaded.txt"
cat "$out/bnb-preloaded.txt"
