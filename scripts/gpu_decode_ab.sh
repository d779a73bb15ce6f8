#!/usr/bin/env bash
# On the device machine, one call (docs/BENCHMARKS.md "GPU decode and prompts"): llama.cpp builds
# in the background (DIR/llama-src.tar.xz, scripts/gpu_vs_llama.sh pack) while the kernel
# tests, the GPU goldens and an ncu pass over one decode step run; then the side-by-side
# benches (gpu_vs_llama.sh bench) and tg128 A/B runs (PDL off, prefetch off).
#   bash scripts/gpu_decode_ab.sh DIR [steps]   DIR: scripts/gpu_pack.sh's folder;
#                                               steps (default all): tests llama ncu bench ab
# NCU_MODELS (default "f16 moe"), NCU_SKIP / NCU_COUNT pick the profiled kernels.
set -uo pipefail
DIR=$(realpath "$1"); shift
STEPS=" ${*:-tests llama ncu bench ab} "
LOG=${OUT:-/tmp/run9}; mkdir -p "$LOG"
M=/tmp/hypura-models; mkdir -p "$M"
has() { case "$STEPS" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,utilization.gpu --format=csv,noheader
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64"
if has llama; then
  (bash "$DIR/scripts/gpu_vs_llama.sh" build "$DIR/llama-src.tar.xz" > "$LOG/llama_build_out.txt" 2>&1; echo "rc $?" >> "$LOG/llama_build_out.txt") &
  LPID=$!
fi
if has tests; then
  STEPS=kernels bash "$DIR/scripts/gpu_engine.sh" "$DIR" 2>&1 | grep -E "FAILED|PASSED|Failure|Expected|Which|rel_l2" | head -20
  STEPS=golden bash "$DIR/scripts/gpu_engine.sh" "$DIR" 2>&1 | grep -E "FAILED|PASSED|tests ran" | head -20
  echo "tests done at $((SECONDS - T0)) s"
fi
# synth NAME [PRESET [ARGS...]]: the model file, unless there.
synth() {
  [ -f "$M/$1.gguf" ] || timeout 150 "$DIR/bin/hypura" synth -o "$M/$1.gguf" --preset "${2:-$1}" "${@:3}" \
    --vocab-from "$DIR/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
}
tg() { local m=$1; shift; timeout 100 "$DIR/bin/hypura" bench "$M/$m.gguf" --device cuda -p 0 -n 128 -r 3 --no-reference "$@" 2>&1 | grep tg128 | awk -F'|' '{print $(NF-3)}'; }
synth 8b; synth moe; synth f16 8b --quant f16
if has ncu; then
  for m in ${NCU_MODELS:-f16 moe}; do
    timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      --launch-skip "${NCU_SKIP:-3000}" --launch-count "${NCU_COUNT:-460}" "$DIR/bin/hypura" bench "$M/$m.gguf" --device cuda -p 0 -n 16 -r 1 --no-reference --no-cuda-graphs \
      > "/tmp/ncu_$m.csv" 2> "/tmp/ncu_$m.err"
    python3 "$DIR/scripts/ncu_summary.py" "/tmp/ncu_$m.csv" "$m"
  done
  echo "ncu done at $((SECONDS - T0)) s"
fi
if has llama; then wait "$LPID"; tail -2 "$LOG/llama_build_out.txt"; echo "llama at $((SECONDS - T0)) s"; fi
if has bench; then
  KEEP_MODELS=1 MODELS="$M" bash "$DIR/scripts/gpu_vs_llama.sh" bench "$DIR" 2>&1 | grep -vE "^\| *model|^\| *-|^wrote"
  echo "bench done at $((SECONDS - T0)) s"
fi
if has ab; then
  synth 8b; synth moe; synth f16 8b --quant f16
  for m in 8b moe f16; do
    echo "== $m tg128: $(tg $m) | graphs off $(tg $m --no-cuda-graphs) | $(tg $m)"
  done
  echo "ab done at $((SECONDS - T0)) s"
fi
echo "total $((SECONDS - T0)) s"
