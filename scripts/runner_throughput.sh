#!/usr/bin/env bash
# Throughput of one matrix on every GPU of this machine vs on one GPU, same host, offline.
# Needs .wheelhouse/ from `harness wheelhouse` (it carries uv). Each mode gets its own env
# root and uv cache, so neither reuses what the other built.
#
#   scripts/runner_throughput.sh MATRIX OUTDIR BUDGET_S [SHARDS]
#
# Both modes run the same deterministic shards k/SHARDS (default 3) of the matrix's cells:
# 1. "all": every GPU, --jobs = GPU count   -> OUTDIR/all-k.jsonl
# 2. "one": --gpus 0 --jobs 1               -> OUTDIR/one-k.jsonl
# so shard k covers the same cells in both, and each mode pays the same number of sweep starts.
# A shard starts only if the time left (of BUDGET_S) exceeds the slowest shard of its mode so
# far (for "one" at first: the slowest "all" shard x GPUs), so the command ends inside its
# limit with whole shards. Call again with the same OUTDIR to finish; on a fresh machine, name
# what is left: MODES=one PARTS="2 3".
# Before any shard, untimed (WARMUP=0 skips it): the base interpreter's native libraries are
# read once (page cache) and CUDA is initialised on every GPU, so the first timed shard does not
# pay a cold machine that later shards and the other mode do not (it cost 15-20 s before).
# Both modes run the same scenarios: those that need one GPU at most (a two-GPU scenario is not
# applicable on one, so "all" would do more work than "one" and the ratio would understate it).
# SAME_WORK=0 runs every scenario in "all" too.
# Each finished shard appends "mode k wall_s" to OUTDIR/walls.tsv; then
#   python benchmarks/gpu_throughput.py OUTDIR
# prints the two modes side by side, shard by shard.
set -euo pipefail
# Sweeps compared with each other start their own fork servers, as when this was first measured:
# none takes a server an earlier sweep kept (--keep-servers auto keeps them on a GPU machine).
export HARNESS_KEEP_SERVERS=0
matrix=$1 out=$2 budget=$3 nshards=${4:-3}
start=$SECONDS
tag=${RUN_TAG:-$(date -u +%Y%m%d)}  # a rerun on another day is another run, not a resume of the old one
deps=${TMPDIR:-/tmp}/harness-deps
mkdir -p "$deps" "$out"
touch "$out/walls.tsv"
"${PYTHON:-python3}" -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
ngpu=$(nvidia-smi -L | wc -l)
echo "gpus: $ngpu; cpus: $(nproc); NUMA: $(lscpu | awk -F: '/^NUMA node\(s\)/ { gsub(/ /, "", $2); print $2 }')"
nvidia-smi topo -m 2>/dev/null | head -n "$((ngpu + 1))" || true  # which CPUs sit near which GPU
scenarios=()
if [[ ${SAME_WORK:-1} == 1 ]]; then
  # the matrix's own scenarios (every one in scenarios/ if it names none), less multi-GPU ones
  read -r -a scenarios <<< "$("${PYTHON:-python3}" -c 'import sys; from pathlib import Path
from harness.inputs.matrix import load_matrix; from harness.inputs.scenarios import select
names = select(load_matrix(Path(sys.argv[1])).settings.scenarios)
print(" ".join(f"--scenario {s.path}" for s in names if s.requires.gpus <= 1))' "$matrix")"
  echo "same work in both modes: $((${#scenarios[@]} / 2)) scenarios that need one GPU at most"
fi
# What bitsandbytes' import runs (`pip list | grep habana...`) if scenarios saw the host's pip
echo "pip on PATH: $(command -v pip || echo none); 'pip list' lists $(pip list 2>/dev/null | wc -l) lines in $( { TIMEFORMAT=%R; time pip list >/dev/null 2>&1; } 2>&1 ) s"

if [[ ${WARMUP:-1} == 1 ]]; then
  w0=$EPOCHREALTIME
  site=$("${PYTHON:-python3}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  find "$site" -type f \( -name '*.so' -o -name '*.so.*' \) -print0 | xargs -0 cat > /dev/null
  "${PYTHON:-python3}" -c 'import torch, transformers.modeling_utils; [torch.ones(1, device=f"cuda:{i}").sum().item() for i in range(torch.cuda.device_count())]'
  echo "warm-up (untimed): $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $w0 }") s"
fi

sweep() {  # mode part extra-args...
  local mode=$1 part=$2 t0=$EPOCHREALTIME wall
  shift 2
  if UV_CACHE_DIR=/tmp/uv-cache-$mode "${PYTHON:-python3}" -m harness sweep --matrix "$matrix" --device cuda \
    --db "$out/$mode-$part.jsonl" --env-root "/tmp/envs-$mode" --run-id "tp-$(basename "$matrix" .toml)-$mode-$tag" \
    --no-progress --shard "$part/$nshards" "${scenarios[@]}" "$@" > "$out/$mode-$part.log" 2>&1; then
    wall=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")
    printf '%s\t%s\t%s\n' "$mode" "$part" "$wall" >> "$out/walls.tsv"
    echo "$mode $part/$nshards: $wall s; $(grep '^time:' "$out/$mode-$part.log" || true)"
  else
    echo "harness exited $? ($mode $part); not timed:"; tail -n 5 "$out/$mode-$part.log"
  fi
}

slowest_of() { awk -v m="$1" '$1 == m && $3 > s { s = $3 } END { printf "%d", s }' "$out/walls.tsv"; }

for mode in ${MODES:-all one}; do
  if [[ $mode == all ]]; then args=(--gpus "$(seq -s, 0 $((ngpu - 1)))" --jobs "$ngpu"); else args=(--gpus 0 --jobs 1); fi
  for k in ${PARTS:-$(seq 1 "$nshards")}; do
    grep -q "^$mode	$k	" "$out/walls.tsv" && continue
    guess=$(slowest_of "$mode")
    [[ $mode == one && $guess == 0 ]] && guess=$(( $(slowest_of all) * ngpu ))
    left=$((budget - (SECONDS - start)))
    if ((left <= guess + 15)); then
      echo "stopping before $mode $k/$nshards: ${left}s left, a shard may take ${guess}s"
      break 2
    fi
    sweep "$mode" "$k" "${args[@]}"
  done
done
cat "$out/walls.tsv"
