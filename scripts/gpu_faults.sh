#!/usr/bin/env bash
# GPU faults as data, on the GPU runner: a CUDA out-of-memory, a kernel that never returns, a GPU
# that disappears, then a healthy scenario, in one cell (torch inherited from the runner's
# python), once per isolation mode, and once with CUDA_VISIBLE_DEVICES pointing at nothing.
#   bash scripts/gpu_faults.sh OUTDIR          (PYTHON=... for another base interpreter)
# Writes into OUTDIR: faults-{fork,process,hidden}.jsonl (shards: `harness merge` them into a
# .duckdb), sweep-*.log (the command and all it printed), nvidia-smi before and after,
# leftovers.txt (processes the wedged scenario left, if any), and check.txt: each fault's status
# against what the harness should say (tests/gpu_faults/check.py). Exits with check.py's status.
set -uo pipefail
# The runner goes when the script ends: the fork servers a sweep kept (--keep-servers auto, on
# with GPUs) are ended first, so nothing outlives it.
trap '"${PYTHON:-python3}" -m harness servers --stop > /dev/null 2>&1 || true' EXIT
out=${1:?usage: bash scripts/gpu_faults.sh OUTDIR}
base=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
deps=${TMPDIR:-/tmp}/harness-deps
if ls .wheelhouse/uv-*.whl > /dev/null 2>&1; then  # the runner has no uv and no network (as scripts/runner_sweep.sh)
  mkdir -p "$deps"
  python3 -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
  export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1
scenarios=()
for name in gpu_oom gpu_wedge gpu_vanish gpu_healthy; do scenarios+=(--scenario "tests/gpu_faults/$name.py"); done

nvidia-smi > "$out/nvidia-smi-before.txt" 2>&1
for run in fork process hidden; do
  isolation=$([ "$run" = process ] && echo process || echo fork)
  cat > "$out/matrix-$run.toml" <<TOML
[matrix]
python = "$base"
no_index = true
timeout = 120
isolation = "$isolation"
preload = ["torch"]

[axes]
torch = "inherit"
TOML
  cmd=(python3 -m harness sweep --matrix "$out/matrix-$run.toml" --db "$out/faults-$run.jsonl" --run-id "gpu-faults-$run"
    --env-root "${TMPDIR:-/tmp}/harness-fault-envs" --no-progress --no-refine "${scenarios[@]}")
  [ "$run" = hidden ] && cmd=(env CUDA_VISIBLE_DEVICES=4242 "${cmd[@]}")
  rm -f "$out/faults-$run.jsonl"
  {
    echo "\$ ${cmd[*]}"
    start=$(date +%s)
    "${cmd[@]}"
    echo "exit $? after $(( $(date +%s) - start )) s"
  } > "$out/sweep-$run.log" 2>&1
  tail -n 3 "$out/sweep-$run.log"
done
nvidia-smi > "$out/nvidia-smi-after.txt" 2>&1
sleep 2
pgrep -af gpu-fault-wedge-grandchild > "$out/leftovers.txt" || echo "none" > "$out/leftovers.txt"
echo "leftover processes: $(cat "$out/leftovers.txt")"
python3 tests/gpu_faults/check.py "$out" | tee "$out/check.txt"
exit "${PIPESTATUS[0]}"
