#!/usr/bin/env bash
# Run a matrix on an offline GPU runner whose python already has torch (see matrices/gpu-runner.toml).
# Needs .wheelhouse/ from `harness wheelhouse` (it carries uv). Shards the cells over N parallel
# harness processes (one GPU is plenty for tiny models; the CPU work is what takes time), each
# writing its own .jsonl shard; merge them afterwards with `harness merge`.
#   scripts/runner_sweep.sh MATRIX OUTDIR [N] [extra harness sweep args...]
set -euo pipefail
# The runner goes when the script ends: the fork servers a sweep kept (--keep-servers auto, on
# with GPUs) are ended first, so nothing outlives it.
trap '"${PYTHON:-python3}" -m harness servers --stop > /dev/null 2>&1 || true' EXIT
matrix=$1 out=$2 n=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
deps=${TMPDIR:-/tmp}/harness-deps
mkdir -p "$deps" "$out"
python3 -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
mapfile -t cells < <(python3 -m harness list --matrix "$matrix")
echo "${#cells[@]} cells over $n shards"
for ((s = 0; s < n; s++)); do
  args=()
  for ((i = s; i < ${#cells[@]}; i += n)); do args+=(--cell "${cells[i]}"); done
  [ ${#args[@]} -gt 0 ] || continue
  python3 -m harness sweep --matrix "$matrix" --device cuda --db "$out/shard-$s.jsonl" --env-root "${TMPDIR:-/tmp}/harness-envs" \
    --no-progress "${args[@]}" "$@" > "$out/shard-$s.log" 2>&1 &
done
wait
tail -n 40 "$out"/shard-*.log
