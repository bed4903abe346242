#!/usr/bin/env bash
# Throughput of one matrix on every GPU of this machine vs on one GPU, same host, offline.
# Needs .wheelhouse/ from `harness wheelhouse` (it carries uv). Each mode gets its own env
# root and uv cache, so neither reuses what the other built.
#
#   scripts/runner_throughput.sh MATRIX OUTDIR BUDGET_S [ONE_SHARDS]
#
# 1. "all": every GPU, --jobs = GPU count, every scenario        -> OUTDIR/all.jsonl
# 2. "one": --gpus 0 --jobs 1, as shards k/ONE_SHARDS (default 6) -> OUTDIR/one-k.jsonl
#    A shard starts only if the time left (of BUDGET_S) exceeds the slowest shard so far, so the
#    command ends inside its limit with whole shards; call again with the same OUTDIR contents
#    (or pass the shards still to run as SHARDS="3 4") to finish.
# Each finished part appends "mode part wall_s" to OUTDIR/walls.tsv; then
#   python benchmarks/gpu_throughput.py OUTDIR
# prints the two modes side by side.
set -euo pipefail
matrix=$1 out=$2 budget=$3 nshards=${4:-6}
start=$SECONDS
deps=${TMPDIR:-/tmp}/harness-deps
mkdir -p "$deps" "$out"
"${PYTHON:-python3}" -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
ngpu=$(nvidia-smi -L | wc -l)
echo "gpus: $ngpu; cpus: $(nproc)"

sweep() {  # mode part db extra-args...
  local mode=$1 part=$2 db=$3 t0=$EPOCHREALTIME wall
  shift 3
  if UV_CACHE_DIR=/tmp/uv-cache-$mode "${PYTHON:-python3}" -m harness sweep --matrix "$matrix" --device cuda --db "$db" \
    --env-root "/tmp/envs-$mode" --run-id "tp-$(basename "$matrix" .toml)-$mode" --no-progress "$@" > "$out/$mode-$part.log" 2>&1; then
    wall=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")
    printf '%s\t%s\t%s\n' "$mode" "$part" "$wall" >> "$out/walls.tsv"
    echo "$mode $part: $wall s"
  else
    echo "harness exited $? ($mode $part); not timed:"; tail -n 5 "$out/$mode-$part.log"
  fi
}

if ! grep -q "^all" "$out/walls.tsv" 2>/dev/null; then
  gpus=$(seq -s, 0 $((ngpu - 1)))
  sweep all all "$out/all.jsonl" --gpus "$gpus" --jobs "$ngpu"
fi
slowest=0
for k in ${SHARDS:-$(seq 1 "$nshards")}; do
  grep -q "^one	$k	" "$out/walls.tsv" 2>/dev/null && continue
  left=$((budget - (SECONDS - start)))
  if ((left <= slowest + 15)); then
    echo "stopping before one $k/$nshards: ${left}s left, the slowest shard took ${slowest}s"
    break
  fi
  t0=$SECONDS
  sweep one "$k" "$out/one-$k.jsonl" --gpus 0 --jobs 1 --shard "$k/$nshards"
  ((SECONDS - t0 > slowest)) && slowest=$((SECONDS - t0))
done
cat "$out/walls.tsv"
