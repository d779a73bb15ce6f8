#!/usr/bin/env bash
# README command (2): install, build, and run every test (unit, golden, cross-checks,
# the fidelity suite on the smallest real model, a bounded fuzz run). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setup and test models == ($(date -u +%T))"
bash scripts/setup.sh
bash scripts/fetch-models.sh
echo "== formatting (.clang-format) == ($(date -u +%T))"
bash scripts/check-format.sh
echo "== build == ($(date -u +%T))"
bash scripts/build.sh
echo "== unit and integration tests == ($(date -u +%T))"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
echo "== fidelity against the exact model (smallest real model, every SIMD level) == ($(date -u +%T))"
# The gate fails only a level further from the exact model than scalar by more than the
# bounds plus three standard errors (docs/FIDELITY.md): a broken kernel, not chance.
FIDELITY_CHUNKS=${HYPURA_FIDELITY_CHUNKS:-8} FIDELITY_CHECK="--sigmas 3 --worse-only" \
  bash scripts/fidelity.sh smollm2
echo "== fuzzing (bounded) == ($(date -u +%T))"
bash scripts/fuzz.sh "${HYPURA_FUZZ_SECONDS:-60}"
echo "all tests passed ($(date -u +%T))"
