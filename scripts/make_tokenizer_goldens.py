#!/usr/bin/env python3
"""llama.cpp's token ids for the tokenizer test strings on a vocab-only GGUF, written as
the expected ids of TokenizerGolden (src/tokenizer/golden_test.cc, docs/TOKENIZER.md).

  make_tokenizer_goldens.py VOCAB.gguf NAME [--llama-cpp DIR] [--testdata DIR]

Reads testdata/strings.inp and strings-special.inp (llama.cpp's .inp format: each string
followed by "\\n__ggml_vocab_test__\\n") and writes NAME.out (no BOS/EOS, special-token
texts as plain text: llama.cpp's test-tokenizer-0 setting) and NAME.special.out (BOS/EOS
as the vocabulary says, special tokens parsed), one line of ids per string.

The ids come from llama_tokenize in DIR/build/bin/libllama.so, through a small driver
compiled here (llama-tokenize cannot parse special tokens); when DIR/build/bin has
llama-tokenize, every plain string is also run through it and must give the same ids.
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
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
// argv: vocab.gguf strings.inp add_special parse_special; prints one id line per string.
int main(int argc, char** argv) {
  if (argc != 5) return 2;
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str(), sep = "\n__ggml_vocab_test__\n";
  const bool add = std::atoi(argv[3]) != 0, parse = std::atoi(argv[4]) != 0;
  for (size_t pos = 0, m; (m = all.find(sep, pos)) != std::string::npos; pos = m + sep.size()) {
    const std::string text = all.substr(pos, m - pos);
    std::vector<llama_token> ids(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), text.size(), ids.data(), ids.size(), add, parse);
    if (n < 0) return 1;
    for (int i = 0; i < n; ++i) std::printf(" %d", ids[i]);
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


def driver_ids(exe, vocab, inp, special):
    flag = "1" if special else "0"
    out = subprocess.run([str(exe), vocab, str(inp), flag, flag], check=True,
                         capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def llama_tokenize_ids(exe, vocab, text, tmp):
    path = tmp / "text.txt"
    path.write_bytes(text.encode("utf-8"))
    out = subprocess.run([str(exe), "-m", vocab, "-f", str(path), "--ids", "--no-escape",
                          "--no-bos", "--log-disable"], check=True, capture_output=True,
                         text=True).stdout
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
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        exe = build_driver(a.llama_cpp, tmp)
        for special, inp, out in ((False, "strings.inp", f"{a.name}.out"),
                                  (True, "strings-special.inp", f"{a.name}.special.out")):
            strings = (a.testdata / inp).read_bytes().decode("utf-8").split(SEP)[:-1]
            ids = driver_ids(exe, a.vocab, a.testdata / inp, special)
            assert len(ids) == len(strings), (len(ids), len(strings))
            cli = a.llama_cpp / "build" / "bin" / "llama-tokenize"
            if not special and cli.exists():
                for s, want in zip(strings, ids):
                    got = llama_tokenize_ids(cli, a.vocab, s, tmp)
                    assert got == want, f"llama-tokenize differs on {s!r}: {got} vs {want}"
                print(f"{a.name}: llama-tokenize gives the same ids on {len(strings)} strings")
            (a.testdata / out).write_text("".join("".join(f" {i}" for i in x) + "\n" for x in ids))
            print(f"{a.testdata / out}: {len(strings)} strings")


if __name__ == "__main__":
    main()
