#!/usr/bin/env bash
# On the device machine, one call (docs/BATCHING.md "On the GPU"): the batched decode of the
# 8b and moe synth presets (`hypura bench --batch`), then ncu's per-kernel times over decode
# steps of one batch size, grouped by kernel.
#   bash scripts/gpu_batch_profile.sh DIR [B]   DIR: scripts/gpu_pack.sh's folder; B: the
#                                               batch ncu profiles (default 16)
# BATCHES (default 1,4,8,16), MODELS_TO_RUN (default "8b moe"), NCU_SKIP / NCU_COUNT.
set -uo pipefail
DIR=$(realpath "$1"); B=${2:-16}
LOG=${OUT:-/tmp/batch_profile}; M=/tmp/hypura-models; mkdir -p "$LOG" "$M"
T0=$SECONDS
export LD_LIBRARY_PATH="$DIR/lib:/usr/local/cuda/lib64"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
synth() {
  [ -f "$M/$1.gguf" ] || timeout 200 "$DIR/bin/hypura" synth -o "$M/$1.gguf" --preset "$1" \
    --vocab-from "$DIR/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
}
for m in ${MODELS_TO_RUN:-8b moe}; do
  synth "$m"
  echo "== $m --batch ${BATCHES:-1,4,8,16} -p 32 -n 64"
  timeout 200 "$DIR/bin/hypura" bench "$M/$m.gguf" --device cuda --batch "${BATCHES:-1,4,8,16}" \
    -p 32 -n 64 2>&1 | grep -vE "^$|^wrote" | tail -12
done
echo "bench done at $((SECONDS - T0)) s"
for m in ${MODELS_TO_RUN:-8b moe}; do
  timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-skip "${NCU_SKIP:-4000}" --launch-count "${NCU_COUNT:-2600}" "$DIR/bin/hypura" bench \
    "$M/$m.gguf" --device cuda --batch "$B" -p 32 -n 12 --no-cuda-graphs \
    > "$LOG/ncu_$m.csv" 2> "$LOG/ncu_$m.err"
  python3 "$DIR/scripts/ncu_summary.py" "$LOG/ncu_$m.csv" "$m B=$B" 22
done
echo "total $((SECONDS - T0)) s"
