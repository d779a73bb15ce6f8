#!/usr/bin/env bash
# Makes llama.cpp goldens for a small synth model into tests/golden/synth/NAME/
# (docs/FIDELITY.md, "Synth goldens"; checked by tests/golden/synth_golden_test.cc).
#
#   scripts/golden/make_synth_goldens.sh NAME [--also TYPE] [--llama DIR] [--hypura BIN]
#       [--golden DIR] -- SYNTH_ARGS...
#
# 1. `hypura synth SYNTH_ARGS --quant f32` writes the F32 model (seed 42, logit scale 3 and
#    the 384-token vocabulary of GOLDEN/llama-f32.gguf unless SYNTH_ARGS give --seed,
#    --logit-scale or --vocab-from);
# 2. llama-quantize makes Q4_K_M of it, and TYPE too with --also (e.g. MXFP4_MOE);
# 3. scripts/golden/llama_logits.cpp (built on demand) evaluates sequences A, B and C of
#    GOLDEN/manifest.json: the default run on every model, the exact run (F32 KV, flash
#    attention off) on the F32 one, and the greedy continuation of B;
# 4. NAME/ receives the logits, the quantized GGUFs and manifest.json (the synth arguments,
#    sha256 of every model, llama.cpp's commit, greedy ids and margins).
# The F32 model is not kept: the test writes it again and checks its sha256.
# Defaults: --llama /work/ext/llama.cpp (built with targets llama and llama-quantize),
# --hypura build/hypura, --golden ../shared/golden.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
usage() { sed -n 2,19p "$0" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
name=$1
shift
also=""
llama=/work/ext/llama.cpp
hypura="$root/build/hypura"
golden="$root/../shared/golden"
while [[ $# -gt 0 && $1 != "--" ]]; do
  case $1 in
    --also) also=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --hypura) hypura=$2; shift 2 ;;
    --golden) golden=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $# -gt 0 ]] && shift
golden="$(cd "$golden" && pwd)"
[[ "$name" =~ ^[a-z0-9][a-z0-9._-]*$ ]] || { echo "NAME: lower case letters, digits, . _ -" >&2; exit 2; }

synth_args=("$@" --quant f32)
[[ " $* " == *" --seed "* ]] || synth_args+=(--seed 42)
[[ " $* " == *" --logit-scale "* ]] || synth_args+=(--logit-scale 3)
[[ " $* " == *" --vocab-from "* ]] || synth_args+=(--vocab-from "{golden}/llama-f32.gguf")

out="$root/tests/golden/synth/$name"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
dumper="$llama/build/bin/hypura-llama-logits"
if [[ ! -x "$dumper" || "$dumper" -ot "$root/scripts/golden/llama_logits.cpp" ]]; then
  bash "$root/scripts/golden/build_llama_logits.sh" "$llama" "$dumper" >/dev/null
fi
quantize="$llama/build/bin/llama-quantize"
[[ -x "$quantize" ]] || { echo "no $quantize (cmake --build $llama/build --target llama-quantize)" >&2; exit 1; }

resolved=()
for a in "${synth_args[@]}"; do resolved+=("${a//\{golden\}/$golden}"); done
"$hypura" synth -q --no-sync -o "$tmp/f32.gguf" "${resolved[@]}" >/dev/null

rm -rf "$out"
mkdir -p "$out"
quants=(Q4_K_M)
[[ -n "$also" ]] && quants+=("$also")
for q in "${quants[@]}"; do
  lq=$(echo "$q" | tr 'A-Z' 'a-z')
  "$quantize" "$tmp/f32.gguf" "$out/$lq.gguf" "$q" >"$tmp/quantize-$lq.log" 2>&1 ||
    { cat "$tmp/quantize-$lq.log" >&2; exit 1; }
done

py="$root/.venv/bin/python"
[[ -x "$py" ]] || py=python3
seqs=$("$py" -c 'import json,sys; m=json.load(open(sys.argv[1]))["sequences"]
print(" ".join("--seq %s=%s" % (k, ",".join(map(str, v))) for k, v in m.items()))' "$golden/manifest.json")
# shellcheck disable=SC2086
"$dumper" --model "$tmp/f32.gguf" --prefix "$out/f32" --greedy B $seqs >"$tmp/f32.default.json" 2>/dev/null
# shellcheck disable=SC2086
"$dumper" --model "$tmp/f32.gguf" --prefix "$out/f32" --greedy B --exact $seqs >"$tmp/f32.exact.json" 2>/dev/null
for q in "${quants[@]}"; do
  lq=$(echo "$q" | tr 'A-Z' 'a-z')
  # shellcheck disable=SC2086
  "$dumper" --model "$out/$lq.gguf" --prefix "$out/$lq" --greedy B $seqs >"$tmp/$lq.default.json" 2>/dev/null
done

commit=$(git --git-dir="$llama/.git" rev-parse HEAD 2>/dev/null || cat "$llama/COMMIT" 2>/dev/null || echo unknown)
"$py" "$root/scripts/golden/write_synth_manifest.py" --name "$name" --out "$out" --tmp "$tmp" \
  --golden "$golden" --commit "$commit" --quants "${quants[@]}" -- "${synth_args[@]}"
du -sh "$out"
