#!/usr/bin/env bash
# On the CI machine: packs what scripts/gpu_engine.sh runs on the device machine into DIR
# (default: .devgpu in this checkout, which must be git-ignored there): the hypura binary,
# runtime_test, compute_cuda_test, model_test and synth_golden_test from BUILD_DIR (stripped), the Debian libraries the
# device lacks, the golden models, and the scripts. Prints the folder's size (the device
# tool carries at most 64 MiB with the checkout).
#   GOLDEN_ARCHS="llama gemma3 qwen3moe"  the golden architectures packed (default: all six;
#                their F32 files are 24 MB together and barely compress)
#   PACK_XZ=1    everything in one DIR/pack.tar.xz (binaries compress about 5x): the
#                device took 29 MB of carry beside the checkout and refused 36 MB.
#                There, scripts/gpu_unpack.sh DIR unpacks it and prints the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DIR=${1:-.devgpu}
GOLDEN=${HYPURA_GOLDEN_DIR:-../shared/golden}
GOLDEN_ARCHS=${GOLDEN_ARCHS:-llama qwen2 qwen3 gemma3 mixtral qwen3moe}
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib" "$DIR/golden" "$DIR/scripts"
for b in hypura src/runtime/runtime_test src/compute/cuda/compute_cuda_test src/model/model_test \
  tests/golden/synth_golden_test; do
  strip -o "$DIR/bin/$(basename "$b")" "$BUILD_DIR/$b"
done
# Shared libraries outside the C runtime and the CUDA toolkit.
ldd "$DIR/bin/hypura" "$DIR/bin/runtime_test" | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[^/]*|libcublas|libcublasLt|libssl|libcrypto|libz)\.so' |
  while read -r lib; do cp -L "$lib" "$DIR/lib/"; done
cp "$GOLDEN"/manifest.json "$DIR/golden/"
for arch in $GOLDEN_ARCHS; do cp "$GOLDEN/$arch"-*.gguf "$GOLDEN/$arch"-*.f32 "$DIR/golden/"; done
cp scripts/gpu_engine.sh scripts/gpu.sh scripts/gpu_vs_llama.sh scripts/gpu_decode_ab.sh \
  scripts/gpu_batch_profile.sh scripts/ncu_summary.py \
  scripts/gpu_split_ab.sh "$DIR/scripts/"
if [ "${PACK_XZ:-0}" = 1 ]; then
  tar -C "$DIR" -cf - bin lib golden scripts | xz -T0 -6 > "$DIR.pack.tar.xz"
  rm -rf "$DIR" && mkdir -p "$DIR" && mv "$DIR.pack.tar.xz" "$DIR/pack.tar.xz"
fi
du -sh "$DIR"
