#!/usr/bin/env bash
# Issue #30, item 2: where a GPU sweep's fork-server seconds go, each lever measured on its own.
# Four cells like the issue's one trip (transformers 5.6.2, 5.17.0 and 5.23.0 with bitsandbytes
# 0.49.2, and 5.17.0 with 0.50.2; accelerate 1.13.0, peft 0.19.1, the image's torch) × two of
# its scenarios, offline, from a packed wheelhouse (scripts/wheelhouse_pack.py) that holds them.
#
#   scripts/runner_levers.sh PACKED_WHEELHOUSE OUTDIR MODE[:SWEEPS] ... [peer]
#
# Each MODE sweeps SWEEPS times (default 2: a first sweep, then a re-sweep) on its own fresh env
# root and uv cache:
#   base      the zygote imports only torch; each fork server imports the torch modules its
#             cell's libraries pull in (HARNESS_ZYGOTE_SHARE_TORCH=0: the harness before #30)
#   share     lever (a): the zygote imports those torch modules once, for every later server
#   bytecode  lever (b): base, with envs built by `uv pip sync --compile-bytecode` (UV_COMPILE_BYTECODE=1)
#   both      share and bytecode
#   nolearn   lever (c), after share: re-sweeps of share's env root whose servers preload the
#             matrix's `preload` instead of the learned modules (HARNESS_LEARNED_PRELOAD=0)
#   pyc       share, with the modules' bytecode shared by every env (running/bytecode.py, the
#             default since #30 item 3; the modes above keep it off: HARNESS_BYTECODE=0)
#   keep      pyc, each sweep keeping its cells' fork servers for the next (--keep-servers 900,
#             running/kept.py): a re-sweep attaches to them instead of starting servers
#   pre       pyc, each preload compiling ahead what it will import, on the job's idle cores
#             (incell/bytecode.py's precompile, since #38 item 2; pyc and keep keep it off:
#             HARNESS_PRECOMPILE=0); the zygote shares only what servers loaded of torch, and
#             waits for a fresh runner's whole site compiled
#   imports   pre, the zygote also importing what earlier cells' scenarios imported of torch
#             (ZygotePool.learn), and waiting only for the preloaded packages compiled, the rest
#             of the site compiled behind (the defaults since #38's last pass; the modes above
#             keep them off: HARNESS_ZYGOTE_LEARN_SCENARIOS=0 HARNESS_PRECOMPILE_BEHIND=0)
# LEVERS_MATRIX=FILE sweeps that matrix instead of the four cells below (its own find_links).
# `peer` then runs each scenario as a fresh `python scenario.py` in base's envs (the naive peer).
# Everything lands in OUTDIR/levers.tar.gz (logs, outcomes, per-preload seconds as JSON lines
# from HARNESS_PRELOAD_LOG, each env's learned harness-imports.json) and OUTDIR/summary.txt.
set -uo pipefail
packed=$1 out=$2
shift 2
tmp=${TMPDIR:-/tmp}
deps=$tmp/harness-deps work=$tmp/levers
# a warm runner keeps the last call's folder: its results files would make every sweep a resume
rm -rf "$work"
mkdir -p "$deps" "$out" "$work"
trap 'python3 -m harness servers --stop > /dev/null 2>&1; tar -czf "$out/levers.tar.gz" -C "$work" . ; cp "$work/summary.txt" "$out/" 2>/dev/null' EXIT
say() { echo "$*" | tee -a "$work/summary.txt"; }

t0=$EPOCHREALTIME
python3 scripts/wheelhouse_pack.py unpack "$packed" .wheelhouse > /dev/null
python3 -m pip install --quiet --no-index --target "$deps" .wheelhouse/uv-*.whl
export PATH="$deps/bin:$PATH" PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
say "$(nvidia-smi -L | head -n 1); setup $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }") s; $(nproc) CPUs"
say "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
# The image's torch and transformers read once, so the first mode does not pay for a cold page cache.
python3 -c 'import torch, transformers, transformers.modeling_utils, accelerate' 2> /dev/null

scenarios=(gemma4_bnb4bit_towers_forward gpu_attn_sdpa_load)
matrix=$work/levers.toml
if [[ -n ${LEVERS_MATRIX:-} ]]; then
  cp "$LEVERS_MATRIX" "$matrix"
  mapfile -t scenarios < <(python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["matrix"]["scenarios"]))' "$matrix")
else
cat > "$matrix" << EOF
[matrix]
python = "/opt/torch/.venv/bin/python3"
no_index = true
find_links = ["$PWD/.wheelhouse"]
timeout = 150
preload = ["torch", "transformers", "transformers.modeling_utils", "accelerate", "peft"]
scenarios = [$(printf '"%s", ' "${scenarios[@]}")]

[axes]
torch = "inherit"
transformers = ["5.6.2", "5.17.0", "5.23.0"]
accelerate = ["1.13.0"]
peft = ["0.19.1"]
bitsandbytes = ["0.49.2"]

[[include]]
transformers = "5.17.0"
accelerate = "1.13.0"
peft = "0.19.1"
bitsandbytes = "0.50.2"
EOF
fi

last_root=$tmp/levers-root-base  # peer runs in the envs of the mode before it
for spec in "$@"; do
  mode=${spec%%:*} sweeps=2
  [[ $spec == *:* ]] && sweeps=${spec#*:}
  if [[ $mode == peer ]]; then
    for env in "$last_root"/*/; do
      [ -x "$env/bin/python" ] || continue
      for s in "${scenarios[@]}"; do
        t=$EPOCHREALTIME
        (cd scenarios && timeout 300 "$env/bin/python" "$s.py" > "$work/peer-$(basename "$env")-$s.log" 2>&1)
        rc=$?
        say "peer $(basename "$env") $s: exit $rc, $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t }") s"
      done
    done
    continue
  fi
  # The modes before shared bytecode keep it off (HARNESS_BYTECODE=0), as the harness was then.
  export HARNESS_ZYGOTE_LEARN_SCENARIOS=0 HARNESS_PRECOMPILE_BEHIND=0  # every mode but imports: before #38's last pass
  [[ $mode == imports ]] && unset HARNESS_ZYGOTE_LEARN_SCENARIOS HARNESS_PRECOMPILE_BEHIND
  flags=(--keep-servers 0)  # every mode but keep starts its servers, as when first measured
  case $mode in
    base) vars=(HARNESS_ZYGOTE_SHARE_TORCH=0 HARNESS_BYTECODE=0) ;;
    share) vars=(HARNESS_BYTECODE=0) ;;
    bytecode) vars=(HARNESS_ZYGOTE_SHARE_TORCH=0 UV_COMPILE_BYTECODE=1 HARNESS_BYTECODE=0) ;;
    both) vars=(UV_COMPILE_BYTECODE=1 HARNESS_BYTECODE=0) ;;
    # lever (c): share's env root again, its servers preloading the matrix's `preload`, not what
    # the scenarios imported last time
    nolearn) vars=(HARNESS_LEARNED_PRELOAD=0 HARNESS_BYTECODE=0) ;;
    # share, and each process's bytecode kept in one folder for every env (the default since
    # #30 item 3: running/bytecode.py); the folder starts empty, as on a fresh runner
    pyc) vars=(XDG_CACHE_HOME="$tmp/levers-xdg-pyc" HARNESS_PRECOMPILE=0) ; rm -rf "$tmp/levers-xdg-pyc" ;;
    keep) vars=(XDG_CACHE_HOME="$tmp/levers-xdg-keep" HARNESS_KEPT_DIR="$tmp/levers-kept" HARNESS_PRECOMPILE=0) flags=(--keep-servers 900)
      rm -rf "$tmp/levers-xdg-keep" "$tmp/levers-kept" ;;
    pre) vars=(XDG_CACHE_HOME="$tmp/levers-xdg-pre" HARNESS_ZYGOTE_LEARN_SCENARIOS=0 HARNESS_PRECOMPILE_BEHIND=0) ; rm -rf "$tmp/levers-xdg-pre" ;;
    imports) vars=(XDG_CACHE_HOME="$tmp/levers-xdg-imports") ; rm -rf "$tmp/levers-xdg-imports" ;;
    *) say "unknown mode $mode"; continue ;;
  esac
  root=$tmp/levers-root-$mode cache=$tmp/levers-cache-$mode
  last_root=$root
  if [[ $mode == nolearn ]]; then
    root=$tmp/levers-root-share cache=$tmp/levers-cache-share
  else
    rm -rf "$root" "$cache"
  fi
  for ((k = 1; k <= sweeps; k++)); do
    rm -f "$work/$mode-$k.jsonl" "$work/$mode-$k-preload.jsonl"  # a mode named twice sweeps afresh, never resumes
    t=$EPOCHREALTIME
    env "${vars[@]}" HARNESS_PRELOAD_LOG="$work/$mode-$k-preload.jsonl" UV_CACHE_DIR="$cache" \
      timeout --signal=TERM 400 python3 -m harness sweep --matrix "$matrix" --device cuda --db "$work/$mode-$k.jsonl" \
      --env-root "$root" --run-id "levers-$mode-$k" --no-progress --no-refine "${flags[@]}" > "$work/$mode-$k.log" 2>&1 \
      || say "$mode sweep $k: harness exited $?"
    say "$mode sweep $k: $(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t }") s wall; $(grep '^time:' "$work/$mode-$k.log" | head -n 1)"
  done
  if [[ $mode == keep ]]; then
    env "${vars[@]}" python3 -m harness servers --stop >> "$work/$mode-servers.log" 2>&1
  fi
  for env in "$root"/*/; do
    [ -f "$env/harness-imports.json" ] && cp "$env/harness-imports.json" "$work/$mode-imports-$(basename "$env").json"
  done
done
# Same outcomes: each sweep's (cell, scenario) -> status and signature, against base's first sweep.
python3 - "$work" << 'EOF' | tee -a "$work/summary.txt"
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
def outcomes(path):
    rows = [json.loads(line) for line in path.open()]
    cells = {r["cell_id"]: json.dumps(r["versions"], sort_keys=True) for r in rows if r.get("type") == "cell"}
    return {(cells.get(r["cell_id"]), r["scenario"]): (r["status"], r.get("signature")) for r in rows if r.get("type") == "outcome"}
files = sorted(work.glob("*-[0-9].jsonl"))
ref = next((f for f in files if f.name == "base-1.jsonl"), files[0] if files else None)
for f in files:
    got, want = outcomes(f), outcomes(ref)
    same = sum(got.get(k) == v for k, v in want.items())
    statuses = sorted(s for s, _ in got.values())
    print(f"outcomes {f.stem}: {len(got)} ({', '.join(f'{s} {statuses.count(s)}' for s in sorted(set(statuses)))}); same as {ref.stem}: {same} of {len(want)}")
EOF
