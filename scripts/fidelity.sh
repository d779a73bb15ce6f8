#!/usr/bin/env bash
# Fidelity suite: how far each real model in test-models/ answers from its exact model,
# on every SIMD level this CPU has, and whether every level agrees with the scalar path.
#
# The exact model is the quantized file with every tensor dequantized to F32 by the
# `gguf` package (scripts/dequantize_gguf.py --type f32), made once and cached in
# test-models/f32/ (git-ignored) with its log-probabilities on the suite's text. Then
# `hypura perplexity MODEL --kl-divergence` scores the quantized model teacher-forced on
# the same tokens: mean / p99 KL divergence and top-1 agreement, per SIMD level.
#
# A level fails when its top-1 agreement is more than 0.5 points from scalar's or its mean
# KL more than 2% from scalar's (docs/FIDELITY.md says why these bounds).
#
#   bash scripts/fidelity.sh [MODEL_NAME ...]     # default: smollm2 gemma3 qwen2
# env: FIDELITY_CHUNKS   chunks of FIDELITY_CONTEXT tokens to score (default 8)
#      FIDELITY_CONTEXT  tokens per chunk (default 512; the second half is scored)
#      FIDELITY_OUT      where JSON results and the summary go (default fidelity-out/)
#      HYPURA_BIN        the binary (default build/hypura)
#      FIDELITY_CHECK    options of scripts/fidelity_summary.py (default: --sigmas 2)
set -euo pipefail
cd "$(dirname "$0")/.."

CHUNKS=${FIDELITY_CHUNKS:-8}
CONTEXT=${FIDELITY_CONTEXT:-512}
OUT=${FIDELITY_OUT:-fidelity-out}
BIN=${HYPURA_BIN:-build/hypura}
MODELS_DIR=${HYPURA_MODELS_DIR:-test-models}
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
declare -A FILES=(
  [smollm2]=smollm2-135m-instruct-q4_1.gguf
  [gemma3]=gemma-3-270m-q4_k_m.gguf
  [qwen2]=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
)
names=("$@")
((${#names[@]})) || names=(smollm2 gemma3 qwen2)

log() { echo "fidelity: $*" >&2; }
mkdir -p "$OUT" "$MODELS_DIR/f32"

# The text: Python's own documentation topics (in every CPython install, so nothing is
# downloaded or vendored), concatenated in a fixed order. Its hash is recorded.
text="$OUT/text.txt"
"$PY" - "$text" <<'EOF'
import sys, pydoc_data.topics as t
with open(sys.argv[1], "w") as f:
    f.write("\n\n".join(t.topics[k] for k in sorted(t.topics)))
EOF
text_sha=$(sha256sum "$text" | cut -c1-16)

# The SIMD levels this CPU runs (--simd falls back below an unsupported one).
levels=(scalar avx2 avx512 avx512vnni amx)

for name in "${names[@]}"; do
  file=${FILES[$name]:-}
  [ -n "$file" ] || { log "unknown model $name (known: ${!FILES[*]})"; exit 2; }
  model="$MODELS_DIR/$file"
  [ -f "$model" ] || { log "$model missing (run scripts/fetch-models.sh)"; exit 2; }
  stem=${file%.gguf}
  exact="$MODELS_DIR/f32/$stem.f32.gguf"
  if [ ! -f "$exact" ] || [ "$exact" -ot "$model" ]; then
    log "$name: writing the exact (F32) model"
    "$PY" scripts/dequantize_gguf.py --type f32 --force "$model" "$exact"
  fi
  # Reference log-probs, cached per text, context and chunk count.
  logp="$MODELS_DIR/f32/$stem.$text_sha.c$CONTEXT.n$CHUNKS.logp"
  if [ ! -f "$logp" ] || [ "$logp" -ot "$exact" ]; then
    log "$name: scoring the exact model ($CHUNKS x $CONTEXT tokens)"
    "$BIN" perplexity "$exact" -f "$text" -c "$CONTEXT" --chunks "$CHUNKS" \
      --save-logits "$logp.tmp" --json >"$OUT/$name.exact.json"
    mv -f "$logp.tmp" "$logp"
  fi
  for level in "${levels[@]}"; do
    log "$name: $level"
    "$BIN" perplexity "$model" --simd "$level" --kl-divergence "$logp" --json --per-token \
      >"$OUT/$name.$level.json"
  done
done

# Summary table and the agreement check: scripts/fidelity_summary.py.
# shellcheck disable=SC2086  # FIDELITY_CHECK is a list of options
"$PY" scripts/fidelity_summary.py ${FIDELITY_CHECK:---sigmas 2} "$OUT" "${names[@]}"
