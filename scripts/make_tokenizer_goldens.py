#!/usr/bin/env python3
"""llama.cpp's token ids for the tokenizer test strings on a vocab-only GGUF, written as
the expected ids of TokenizerGolden (src/tokenizer/golden_test.cc, docs/TOKENIZER.md).

  make_tokenizer_goldens.py VOCAB.gguf NAME [--llama-cpp DIR] [--testdata DIR]

Reads testdata/strings.inp and strings-special.inp (llama.cpp's .inp format: each string
followed by "\\n__ggml_vocab_test__\\n") and writes NAME.out (no BOS/EOS, special-token
texts as plain text: llama.cpp's test-tokenizer-0 setting) and NAME.special.out (BOS/EOS
as the vocabulary says, special tokens parsed), one line of ids per string, and
NAME.specials: each token that ends generation or prints as text although not a normal
token ("id eog piece-in-hex").

The ids come from DIR/build/bin/llama-tokenize (plain: --no-bos --no-parse-special); the
specials list from a small driver compiled here against DIR/build/bin/libllama.so.
"""
import argparse
import ast
import os
import pathlib
import subprocess
import tempfile

SEP = "\n__ggml_vocab_test__\n"

DRIVER = r"""
#include <llama.h>
#include <cstdio>
// argv: vocab.gguf. Prints every token that ends generation or that prints as text
// although not a normal token: "id eog piece-in-hex" per line.
int main(int argc, char** argv) {
  if (argc != 2) return 2;
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int mask = LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED |
                   LLAMA_TOKEN_ATTR_UNKNOWN | LLAMA_TOKEN_ATTR_UNUSED;
  for (llama_token id = 0; id < llama_vocab_n_tokens(vocab); ++id) {
    char piece[256];
    const int n = (llama_vocab_get_attr(vocab, id) & mask)
                      ? llama_token_to_piece(vocab, id, piece, sizeof(piece), 0, false)
                      : 0;
    const bool eog = llama_vocab_is_eog(vocab, id);
    if (!eog && n <= 0) continue;
    std::printf("%d %d ", id, eog ? 1 : 0);
    for (int i = 0; i < n; ++i) std::printf("%02x", static_cast<unsigned char>(piece[i]));
    std::printf("\n");
  }
  llama_model_free(model);
  return 0;
}
"""


def build_driver(llama, tmp):
    src, exe = tmp / "driver.cpp", tmp / "driver"
    src.write_text(DRIVER)
    lib = llama / "build" / "bin"
    subprocess.run([os.environ.get("CXX", "g++"), "-O1", "-std=c++17", str(src),
                    f"-I{llama}/include", f"-I{llama}/ggml/include", f"-L{lib}", "-lllama",
                    f"-Wl,-rpath,{lib}", "-o", str(exe)], check=True)
    return exe


def llama_tokenize_ids(exe, vocab, text, special, tmp):
    path = tmp / "text.txt"
    path.write_bytes(text.encode("utf-8"))
    cmd = [str(exe), "-m", vocab, "-f", str(path), "--ids", "--no-escape", "--log-disable"]
    cmd += [] if special else ["--no-bos", "--no-parse-special"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return ast.literal_eval([line for line in out.splitlines() if line.startswith("[")][0])


def main():
    here = pathlib.Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("vocab")
    p.add_argument("name")
    p.add_argument("--llama-cpp", type=pathlib.Path, default=pathlib.Path("/work/ext/llama.cpp"))
    p.add_argument("--testdata", type=pathlib.Path,
                   default=here.parent / "src" / "tokenizer" / "testdata" / "vocab")
    a = p.parse_args()
    cli = a.llama_cpp / "build" / "bin" / "llama-tokenize"
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        for special, inp, out in ((False, "strings.inp", f"{a.name}.out"),
                                  (True, "strings-special.inp", f"{a.name}.special.out")):
            strings = (a.testdata / inp).read_bytes().decode("utf-8").split(SEP)[:-1]
            ids = [llama_tokenize_ids(cli, a.vocab, s, special, tmp) for s in strings]
            (a.testdata / out).write_text("".join("".join(f" {i}" for i in x) + "\n" for x in ids))
            print(f"{a.testdata / out}: {len(strings)} strings")
        exe = build_driver(a.llama_cpp, tmp)
        specials = subprocess.run([str(exe), a.vocab], check=True, capture_output=True,
                                  text=True).stdout
        (a.testdata / f"{a.name}.specials").write_text(specials)
        print(f"{a.testdata / (a.name + '.specials')}: {len(specials.splitlines())} tokens")


if __name__ == "__main__":
    main()
