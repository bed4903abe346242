#!/usr/bin/env bash
# Before and after, side by side on one runner (issue #22's benchmark): the same matrix and
# scenarios swept by an older harness (a `git archive` of it in BEFORE_DIR) and by this one, on
# every GPU of the machine, each with its own env root and uv cache. The older one sweeps once;
# this one twice on one env root (a runner that keeps its envs). Offline: needs .wheelhouse/
# from `harness wheelhouse` (it carries uv).
#
#   scripts/runner_before_after.sh MATRIX BEFORE_DIR OUTDIR SCENARIO...
#
# Prints each sweep's wall and `time:` line and writes OUTDIR/{before-1,after-1,after-2}.{jsonl,log}
# and OUTDIR/walls.tsv; `python benchmarks/outside_share.py OUTDIR` prints the share of each
# wall outside the scenario files' own code.
set -euo pipefail
# Sweeps compared with each other start their own fork servers, as when this was first measured:
# none takes a server an earlier sweep kept (--keep-servers auto keeps them on a GPU machine).
export HARNESS_KEEP_SERVERS=0
matrix=$1 before=$2 out=$3
shift 3
scenarios=()
for s in "$@"; do scenarios+=(--scenario "$s"); done
deps=${TMPDIR:-/tmp}/harness-deps
mkdir -p "$deps" "$out"
: > "$out/walls.tsv"
"${PYTHON:-python3}" -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" HF_HUB_OFFLINE=1
ngpu=$(nvidia-smi -L | wc -l)
nvidia-smi -L
gpus=$(seq -s, 0 $((ngpu - 1)))
# The older tree finds the wheels and the matrix where this one has them.
ln -sfn "$PWD/.wheelhouse" "$before/.wheelhouse"
cp "$matrix" "$before/$matrix"
# Untimed warm-up, so the first timed sweep does not pay a cold page cache that the others don't.
"${PYTHON:-python3}" -c 'import torch, transformers.modeling_utils; [torch.ones(1, device=f"cuda:{i}").sum().item() for i in range(torch.cuda.device_count())]'

sweep() {  # name tree env-root
  local name=$1 tree=$2 root=$3 t0=$EPOCHREALTIME wall
  (cd "$tree" && UV_CACHE_DIR=/tmp/uv-cache-${name%-*} PYTHONPATH="$deps:$PWD" "${PYTHON:-python3}" -m harness sweep \
    --matrix "$matrix" --device cuda --gpus "$gpus" --jobs "$ngpu" --db "$out/$name.jsonl" --env-root "$root" \
    --run-id "ba-$name" --no-progress --no-refine "${scenarios[@]}" > "$out/$name.log" 2>&1) || echo "$name: harness exited $?"
  wall=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")
  printf '%s\t%s\n' "$name" "$wall" >> "$out/walls.tsv"
  echo "$name: $wall s wall; $(grep '^time:' "$out/$name.log" || tail -n 3 "$out/$name.log")"
}
sweep before-1 "$before" /tmp/envs-before
sweep after-1 "$PWD" /tmp/envs-after
sweep after-2 "$PWD" /tmp/envs-after
