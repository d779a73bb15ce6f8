#!/usr/bin/env bash
# On the device machine, one call (docs/BENCHMARKS.md "GPU and CPU together"): the 8b split
# between the GPU and the CPU (issue 17) measured with care for the CPU stage, and A/B runs.
#   bash scripts/gpu_split_ab.sh DIR [steps]   DIR: scripts/gpu_pack.sh's folder (with
#                                               llama-src.tar.xz for the llama step)
# Steps (default "info sweep"):
#   info    the host CPU (lscpu, NUMA, governor), memory, the GPU
#   tests   kernel tests and the GPU goldens (scripts/gpu_engine.sh)
#   llama   builds llama.cpp in the background (joined before the split step)
#   sweep   hypura tg at SWEEP_LAYERS (default 16) GPU layers under each line of $SWEEP
#           ("label|ENV=... ENV=...|bench args"; default: the thread and SIMD choices below)
#   f16     8b F16 tg128, twice
#   split   hypura and llama.cpp alternated at SPLIT_LAYERS (default "24 16 0"): tg128
#           (-p 0 -n 128 -r 3) ROUNDS times each (default 2), then pp512 (-p 512 -n 0 -r 2)
#   plan    `inspect --plan` and bench with its same-run references (predicted vs measured)
#   moe     the moe with its routed experts in RAM (issue 17): llama.cpp -ngl 99 -ncmoe 24,
#           its peak VRAM sampled by nvidia-smi; hypura under --vram-budget of that peak
#           (the expert split), tg128 alternated ROUNDS times, pp512 (llama.cpp with and
#           without mmap), inspect --plan and bench --json at that budget
#   b70     a 70b-shaped file under --vram-budget 24G --ram-budget 32G: bench --json (the
#           traffic bound and tg's share of it), inspect --plan, llama.cpp at B70_NGL layers
# Hygiene: every synthetic file is synced to disk and the page cache left to settle
# (sync; sleep) before any timing, and each engine runs a warm-up pass of its own.
set -uo pipefail
DIR=$(realpath "$1")
shift
STEPS=" ${*:-info sweep} "
LOG=${OUT:-/tmp/split_ab}
mkdir -p "$LOG"
M=/tmp/hypura-models
mkdir -p "$M"
LLAMA=${LLAMA:-/tmp/llama}
has() { case "$STEPS" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
T0=$SECONDS
stamp() { echo "[$((SECONDS - T0)) s] $*"; }
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64"
H="$DIR/bin/hypura"

# synth NAME PRESET [ARGS...]: the model file, written once, then synced and settled.
synth() {
  [ -f "$M/$1.gguf" ] && return 0
  timeout "${SYNTH_TIMEOUT:-200}" "$H" synth -o "$M/$1.gguf" --preset "$2" "${@:3}" \
    --vocab-from "$DIR/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
  sync
  sleep 5
}
# hy NAME LAYERS [ARGS...]: "mean ± sd" of hypura's lines (env from the caller); LAYERS
# "-": as the planner places them (a --vram-budget among ARGS).
hy() {
  local name=$1 n=$2 layers=()
  shift 2
  [ "$n" = "-" ] || layers=(--gpu-layers "$n")
  timeout 200 "$H" bench "$M/$name.gguf" --device cuda "${layers[@]}" --no-reference "$@" \
    > "$LOG/last.txt" 2> "$LOG/last.err" || { tail -3 "$LOG/last.err"; return 1; }
  grep -E "^\| .*(tg|pp)[0-9]+" "$LOG/last.txt" | awk -F'|' '{printf "%s %s; ", $(NF-4), $(NF-3)}'
}
ll() {
  local name=$1 n=$2
  shift 2
  timeout 300 "$LLAMA/build/bin/llama-bench" -m "$M/$name.gguf" -ngl "$n" -fa 1 "$@" -o md \
    > "$LOG/llast.md" 2> "$LOG/llast.err" || { tail -3 "$LOG/llast.err"; return 1; }
  grep -E "^\| .*(tg|pp)[0-9]+" "$LOG/llast.md" | awk -F'|' '{printf "%s %s; ", $(NF-2), $(NF-1)}'
}

if has info; then
  lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA|L3|Flags" | sed 's/Flags:.*/& /' |
    awk '/Flags/ { n = split($0, f, " "); s = "Flags (simd):"; for (i = 1; i <= n; i++) if (f[i] ~ /avx|amx|fma|f16c/) s = s " " f[i]; print s; next } { print }'
  cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null | sed 's/^/cpu0 siblings: /'
  cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null | sed 's/^/governor: /'
  grep -E "MemTotal|MemAvailable" /proc/meminfo | tr '\n' ' '
  echo
  for f in enabled defrag; do
    echo "THP $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>/dev/null)"
  done
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  uptime
fi
if has llama; then
  (bash "$DIR/scripts/gpu_vs_llama.sh" build "$DIR/llama-src.tar.xz" > "$LOG/llama_build_out.txt" 2>&1
    echo "rc $?" >> "$LOG/llama_build_out.txt") &
  LPID=$!
fi
if has tests; then
  STEPS=kernels bash "$DIR/scripts/gpu_engine.sh" "$DIR" 2>&1 | grep -E "FAILED|PASSED|Failure|Expected|Which|rel_l2" | head -20
  STEPS=golden bash "$DIR/scripts/gpu_engine.sh" "$DIR" 2>&1 | grep -E "FAILED|PASSED|tests ran" | head -20
  stamp "tests done"
fi
if has sweep; then
  synth 8b 8b
  L=${SWEEP_LAYERS:-16}
  hy 8b "$L" -p 0 -n 32 -r 1 > /dev/null  # warm-up of the page cache and the GPU
  stamp "sweep at $L layers (tg: -p 0 ${SWEEP_ARGS:--n 64 -r 3})"
  DEFAULT_SWEEP="default||
t 15||-t 15
t 12||-t 12
simd avx512||--simd avx512
simd avx2||--simd avx2
default||"
  while IFS='|' read -r label envs args; do
    [ -n "$label" ] || continue
    # shellcheck disable=SC2086
    echo "  $label: $(
      [ -z "$envs" ] || export $envs
      hy 8b "$L" -p 0 ${SWEEP_ARGS:--n 64 -r 3} $args
    )"
  done <<< "${SWEEP:-$DEFAULT_SWEEP}"
  stamp "sweep done"
fi
if has f16; then
  synth f16 8b --quant f16
  stamp "f16 tg128 (-p 0 -n 128 -r 3), all layers on the GPU"
  for i in 1 2; do
    echo "  tg128: $(hy f16 99 -p 0 -n 128 -r 3)"
  done
  rm -f "$M/f16.gguf"
  stamp "f16 done"
fi
if has llama; then
  wait "$LPID"
  tail -2 "$LOG/llama_build_out.txt"
  stamp "llama joined"
fi
if has split; then
  synth 8b 8b
  TG=${SPLIT_TG:--p 0 -n 128 -r 3}
  stamp "split: tg ($TG) alternated, then pp512 (-p 512 -n 0 -r 2)"
  for n in ${SPLIT_LAYERS:-24 16 0}; do
    hy 8b "$n" -p 0 -n 32 -r 1 > /dev/null
    ll 8b "$n" -p 0 -n 32 -r 1 > /dev/null
    # VARIANTS ("label|ENV=..." lines): extra hypura runs at VARIANT_LAYERS (A/B).
    rounds_n="ROUNDS_$n"  # ROUNDS_<n>: the rounds at n layers (default ROUNDS, 2)
    for i in $(seq "${!rounds_n:-${ROUNDS:-2}}"); do
      line="  $n layers tg, round $i: hypura $(hy 8b "$n" $TG)"
      if [[ " ${VARIANT_LAYERS:-16} " == *" $n "* ]]; then
        while IFS='|' read -r label envs; do
          [ -n "$label" ] || continue
          # shellcheck disable=SC2086
          line+=" | $label $(
            [ -z "$envs" ] || export $envs
            hy 8b "$n" $TG
          )"
        done <<< "${VARIANTS:-}"
      fi
      echo "$line | llama.cpp $(ll 8b "$n" $TG)"
    done
    echo "  $n layers pp: hypura $(hy 8b "$n" -p 512 -n 0 -r 2) | llama.cpp $(ll 8b "$n" -p 512 -n 0 -r 2)"
    stamp "split $n done"
  done
fi
# peak_mib CMD...: runs CMD while nvidia-smi samples the memory used (CMD's stdout
# unchanged); the peak over the idle figure before it goes to $LOG/peak.txt (MiB).
peak_mib() {
  local idle smi
  idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$LOG/smi.txt" &
  smi=$!
  "$@"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  echo $(($(sort -n "$LOG/smi.txt" | tail -1) - idle)) > "$LOG/peak.txt"
}
# json_summary FILE: the bench JSON's figures (tg, predictions, traffic and its bound).
json_summary() {
  python3 - "$1" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t = j.get("tiers", {})
b = j.get("traffic_per_token", {}).get("bound", {})
print("  tests", [(x["test"], round(x["tps_mean"], 2), round(x["tps_stddev"], 2)) for x in j["tests"]],
      "predicted same-run", round(t.get("predicted_tps", 0), 2), "at load", round(t.get("predicted_at_load_tps", 0), 2))
print("  memory", round(j.get("memory_read_bandwidth_bps", 0) / 1e9, 1), "GB/s; decode probe",
      {k: round(v / 1e9, 1) for k, v in j.get("decode_bps", {}).items()})
print("  traffic", {k: v for k, v in j.get("traffic_per_token", {}).items() if k != "bound"})
print("  bound", {k: (round(v, 5) if isinstance(v, float) else v) for k, v in b.items()})
EOF
}
if has moe; then
  synth moe moe
  NCMOE=${NCMOE:-24}
  ll moe 99 -ncmoe "$NCMOE" -p 0 -n 32 -r 1 > /dev/null
  peak_mib ll moe 99 -ncmoe "$NCMOE" -p 0 -n 128 -r 1 > /dev/null
  BUDGET=${MOE_BUDGET:-$(cat "$LOG/peak.txt")M}
  stamp "moe: llama.cpp -ngl 99 -ncmoe $NCMOE (peak $(cat "$LOG/peak.txt") MiB); hypura at its VRAM and with the same placement"
  # hypura's configurations: "label|bench args" (default: llama.cpp's peak as the budget, and
  # llama.cpp's placement, every routed expert in RAM).
  CONFIGS=${MOE_CONFIGS:-"budget $BUDGET|--vram-budget $BUDGET
experts in RAM|--cpu-moe-layers $NCMOE"}
  while IFS='|' read -r label args; do
    # shellcheck disable=SC2086
    echo "  $label: inspect $(timeout 120 "$H" inspect "$M/moe.gguf" --plan --context 512 $args 2>&1 |
      grep -E "^Prediction|GPU computes|GPU .* of " | tr '\n' ' ')"
    # shellcheck disable=SC2086
    hy moe - $args -p 0 -n 32 -r 1 > /dev/null
  done <<< "$CONFIGS"
  for i in $(seq "${ROUNDS:-2}"); do
    line="  tg128 round $i:"
    while IFS='|' read -r label args; do
      # shellcheck disable=SC2086
      line+=" $label $(peak_mib hy moe - $args -p 0 -n 128 -r 3)(peak $(cat "$LOG/peak.txt") MiB) |"
    done <<< "$CONFIGS"
    echo "$line llama.cpp $(ll moe 99 -ncmoe "$NCMOE" -p 0 -n 128 -r 3)"
  done
  line="  pp512:"
  while IFS='|' read -r label args; do
    # shellcheck disable=SC2086
    line+=" $label $(hy moe - $args -p 512 -n 0 -r 2)|"
  done <<< "$CONFIGS"
  echo "$line llama.cpp $(ll moe 99 -ncmoe "$NCMOE" -p 512 -n 0 -r 2) | no mmap $(ll moe 99 -ncmoe "$NCMOE" -mmp 0 -p 512 -n 0 -r 2)"
  while IFS='|' read -r label args; do
    # shellcheck disable=SC2086
    timeout 300 "$H" bench "$M/moe.gguf" --device cuda $args -p 0 -n 128 -r 3 --json \
      > "$LOG/moe_bench.json" 2> "$LOG/moe_bench.err" || tail -3 "$LOG/moe_bench.err"
    echo "  $label, bench with references:"
    grep -E "device:" "$LOG/moe_bench.err" | sed 's/^/  /'
    json_summary "$LOG/moe_bench.json"
  done <<< "$CONFIGS"
  stamp "moe done"
fi
if has b70; then
  rm -f "$M/8b.gguf" "$M/moe.gguf" "$M/f16.gguf"
  SYNTH_TIMEOUT=540 synth 70b 70b
  stamp "70b written: $(du -h "$M/70b.gguf" | cut -f1)"
  echo "  inspect: $(timeout 120 "$H" inspect "$M/70b.gguf" --plan --context 512 --vram-budget 24G --ram-budget 32G 2>&1 |
    grep -E "^Prediction|GPU computes" | tr '\n' ' ')"
  timeout 400 "$H" bench "$M/70b.gguf" --device cuda --vram-budget 24G --ram-budget 32G -p 0 -n 32 -r 2 --json \
    > "$LOG/b70_bench.json" 2> "$LOG/b70_bench.err" || tail -3 "$LOG/b70_bench.err"
  grep -E "device:" "$LOG/b70_bench.err" | sed 's/^/  /'
  json_summary "$LOG/b70_bench.json"
  [ -z "${B70_NGL:-}" ] || echo "  llama.cpp -ngl $B70_NGL: $(ll 70b "$B70_NGL" -p 0 -n 32 -r 2)"
  rm -f "$M/70b.gguf"
  stamp "b70 done"
fi
if has plan; then
  synth 8b 8b
  for n in ${PLAN_LAYERS:-24 16 0}; do
    echo "inspect --plan --gpu-layers $n: $(timeout 120 "$H" inspect "$M/8b.gguf" --plan --context 512 \
      --gpu-layers "$n" 2>&1 | grep -E "^Prediction" | head -1)"
  done
  for n in ${PLAN_BENCH_LAYERS:-16}; do
    timeout 300 "$H" bench "$M/8b.gguf" --device cuda --gpu-layers "$n" -p 0 -n 128 -r 3 --json \
      > "$LOG/plan_bench_$n.json" 2> "$LOG/plan_bench_$n.err" || tail -3 "$LOG/plan_bench_$n.err"
    grep -E "decode with" "$LOG/plan_bench_$n.err" | sed 's/^/  /'
    echo "bench with references at $n layers:"
    json_summary "$LOG/plan_bench_$n.json"
  done
  grep -E "AnonHugePages" /proc/meminfo
  stamp "plan done"
fi
stamp "total"
