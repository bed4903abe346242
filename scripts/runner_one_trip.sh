#!/usr/bin/env bash
# One trip to the offline GPU runner (issue #22): unpack the wheelhouse that
# `harness wheelhouse --refine-budget` prepared where the index is reachable (carried packed,
# see scripts/wheelhouse_pack.py), sweep the matrix once, and let the sweep refine by itself.
#
#   scripts/runner_one_trip.sh MATRIX PACKED_WHEELHOUSE OUTDIR [extra harness sweep args...]
#
# Writes OUTDIR/one-trip.jsonl (merge it back with `harness merge`) and OUTDIR/one-trip.log. The
# sweep gets SWEEP_LIMIT seconds (default 540), then SIGTERM: it stops as on Ctrl-C, and a rerun
# with the same file resumes. It ends with the trip's own account (also in OUTDIR/account.txt):
# per line of the matrix, how each answer was reached (exact; a range because the wheelhouse did
# not hold the releases between; because its budget ran out; ...) and whether a second trip helps.
set -euo pipefail
# The runner goes when the script ends: the fork servers a sweep kept (--keep-servers auto, on
# with GPUs) are ended first, so nothing outlives it.
trap '"${PYTHON:-python3}" -m harness servers --stop > /dev/null 2>&1 || true' EXIT
matrix=$1 packed=$2 out=$3
shift 3
deps=${TMPDIR:-/tmp}/harness-deps
mkdir -p "$deps" "$out"
t0=$EPOCHREALTIME
"${PYTHON:-python3}" scripts/wheelhouse_pack.py unpack "$packed" .wheelhouse
echo "unpacked $(ls .wheelhouse/*.whl | wc -l) wheels ($(du -sm .wheelhouse | cut -f1) MiB) in $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }") s"
"${PYTHON:-python3}" -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
nvidia-smi -L
t0=$EPOCHREALTIME
timeout --signal=TERM "${SWEEP_LIMIT:-540}" "${PYTHON:-python3}" -m harness sweep --matrix "$matrix" --device cuda --db "$out/one-trip.jsonl" \
  --env-root "${TMPDIR:-/tmp}/harness-envs-one-trip" --no-progress "$@" > "$out/one-trip.log" 2>&1 || echo "harness exited $?"
echo "sweep: $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }") s wall"
grep -E "^(run |refinement|time:)" "$out/one-trip.log" || tail -n 20 "$out/one-trip.log"
"${PYTHON:-python3}" -m harness refine --account --db "$out/one-trip.jsonl" --matrix "$matrix" --wheelhouse .wheelhouse \
  | tee "$out/account.txt" || echo "account: harness exited $?"
