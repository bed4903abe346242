#!/usr/bin/env bash
# A team's pytest suite on the offline GPU runner (issue #21 there): the matrix's cells sweep the
# suite twice on one env root (the second sweep preloads what the first one's session imported),
# then plain `python -m pytest -v` runs the same suite with each cell's interpreter, so every
# node id's status can be compared (scripts/suite_vs_pytest.py).
# Needs .wheelhouse/ from `harness wheelhouse --matrix MATRIX --tests-root ROOT ...` (it carries uv).
#
#   scripts/runner_suite.sh MATRIX ROOT OUTDIR [extra harness sweep args...]
#
# Writes OUTDIR/sweep-{1,2}.{jsonl,log} and OUTDIR/plain-<cell>.txt.
set -euo pipefail
# The runner goes when the script ends: the fork servers a sweep kept (--keep-servers auto, on
# with GPUs) are ended first, so nothing outlives it.
trap '"${PYTHON:-python3}" -m harness servers --stop > /dev/null 2>&1 || true' EXIT
matrix=$1 root=$2 out=$3
shift 3
deps=${TMPDIR:-/tmp}/harness-deps
envs=${ENV_ROOT:-${TMPDIR:-/tmp}/harness-envs-suite}
mkdir -p "$deps" "$out"
"${PYTHON:-python3}" -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
nvidia-smi -L
for k in 1 2; do
  t0=$EPOCHREALTIME
  "${PYTHON:-python3}" -m harness sweep --matrix "$matrix" --tests-root "$root" --device cuda --db "$out/sweep-$k.jsonl" \
    --env-root "$envs" --run-id "suite-$k" --no-progress --no-refine "$@" > "$out/sweep-$k.log" 2>&1 || echo "sweep $k: harness exited $?"
  echo "sweep $k: $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }") s wall; $(grep '^time:' "$out/sweep-$k.log" || tail -n 3 "$out/sweep-$k.log")"
done
for env in "$envs"/*/; do
  [ -x "$env/bin/python" ] || continue
  cell=$(basename "$env")
  (
    "$env/bin/python" -c 'import importlib.metadata as m; print("versions:", *(f"{p}=={m.version(p)}" for p in ("torch", "transformers", "accelerate", "peft", "bitsandbytes")))'
    cd "$root" && "$env/bin/python" -m pytest -v -p no:cacheprovider
  ) > "$out/plain-$cell.txt" 2>&1 || true
  echo "plain pytest in $cell: $(tail -n 1 "$out/plain-$cell.txt")"
done
