#!/usr/bin/env bash
# On the device machine: the folder scripts/gpu_pack.sh made, unpacked when it was packed
# with PACK_XZ=1 (into a fresh /tmp/hypura-gpu); prints the folder the device scripts take.
#   D=$(bash scripts/gpu_unpack.sh .devgpu) && bash scripts/gpu_engine.sh "$D"
set -euo pipefail
DIR=$(realpath "${1:-.devgpu}")
if [ -f "$DIR/pack.tar.xz" ]; then
  out=/tmp/hypura-gpu
  rm -rf "$out" && mkdir -p "$out"
  tar -C "$out" -xJf "$DIR/pack.tar.xz"
  DIR=$out
fi
echo "$DIR"
