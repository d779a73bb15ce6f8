#!/usr/bin/env python3
"""Writes a vocab-only GGUF (tokenizer metadata, no tensors) from a model's public
tokenizer definition, for checking our tokenizer against llama.cpp's on real vocabularies
(docs/TOKENIZER.md).

  make_vocab_gguf.py deepseek-v3 tokenizer.json tokenizer_config.json OUT.gguf
      DeepSeek-V3/R1: a Hugging Face tokenizer.json (byte-level BPE) and its config.
  make_vocab_gguf.py gpt-oss o200k_base.tiktoken[.gz] OUT.gguf
      gpt-oss: tiktoken's o200k_base ranks plus the o200k_harmony special tokens.
  --pre NAME  writes another tokenizer.ggml.pre (e.g. glm4: its split on this vocabulary)

Token texts, types and special ids follow what llama.cpp's converter writes for these
models: added tokens that are special (or look special: <|...|>, <｜...｜>) are control
tokens, other added tokens user-defined, ids without a token "[PAD<id>]" unused.
"""
import argparse
import base64
import gzip
import json
import sys

import gguf


def byte_to_unicode():
    """GPT-2's reversible byte -> printable codepoint table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(
        range(0xAE, 0xFF + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def looks_special(text):
    return (text.startswith("<|") and text.endswith("|>")) or (
        text.startswith("<\uff5c") and text.endswith("\uff5c>"))


class Vocab:
    def __init__(self, n_vocab):
        self.tokens = [f"[PAD{i}]" for i in range(n_vocab)]
        self.types = [gguf.TokenType.UNUSED] * n_vocab
        self.merges = []
        self.ids = {}  # special name -> id
        self.add_bos = None

    def set(self, i, text, kind):
        self.tokens[i] = text
        self.types[i] = kind


def from_tokenizer_json(path, config_path, n_vocab):
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    model = tj["model"]
    if model["type"] != "BPE":
        sys.exit(f"{path}: model type {model['type']}, expected BPE")
    v = Vocab(max(n_vocab, 1 + max(model["vocab"].values())))
    for text, i in model["vocab"].items():
        v.set(i, text, gguf.TokenType.NORMAL)
    for t in tj["added_tokens"]:
        text = t["content"]
        if t["special"] or looks_special(text):
            v.set(t["id"], text, gguf.TokenType.CONTROL)
        else:
            v.set(t["id"], text.replace("\u2581", " "), gguf.TokenType.USER_DEFINED)
    v.merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    index = {text: i for i, text in enumerate(v.tokens)}

    def token_id(entry):
        text = entry["content"] if isinstance(entry, dict) else entry
        return index.get(text) if text else None

    for name in ("bos", "eos", "pad", "unk"):
        i = token_id(config.get(name + "_token"))
        if i is not None:
            v.ids[name] = i
    v.add_bos = config.get("add_bos_token")
    return v


def tiktoken_ranks(path):
    opener = gzip.open if path.endswith(".gz") else open
    ranks = {}
    with opener(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def merges_from_ranks(ranks):
    """Every split of a token into two tokens, ordered by the token's rank (then by the
    halves' ranks): byte-level BPE with these merges reproduces tiktoken's encoding."""
    out = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        local = []
        for k in range(1, len(token)):
            left, right = token[:k], token[k:]
            if left in ranks and right in ranks:
                local.append((ranks[left], ranks[right], left, right))
        out.extend(sorted(local))
    return out


def harmony_specials():
    """o200k_harmony's special tokens by id, as tiktoken (0.14) defines that encoding;
    200018 keeps o200k_base's name for it."""
    named = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
             200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>",
             200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>",
             200018: "<|endofprompt|>"}
    return {i: named.get(i, f"<|reserved_{i}|>") for i in list(range(199998, 201088))}


def from_o200k(path):
    ranks = tiktoken_ranks(path)
    b2u = byte_to_unicode()

    def text(b):
        return "".join(b2u[x] for x in b)

    specials = harmony_specials()
    v = Vocab(1 + max(specials))
    for token, rank in ranks.items():
        v.set(rank, text(token), gguf.TokenType.NORMAL)
    for i, t in specials.items():
        v.set(i, t, gguf.TokenType.CONTROL)
    v.merges = [f"{text(left)} {text(right)}" for _, _, left, right in merges_from_ranks(ranks)]
    v.ids = {"bos": 199998, "eos": 200002, "pad": 199999}
    return v


def write(v, pre, name, out):
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(name)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(len(v.tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(v.tokens)
    w.add_token_types(v.types)
    w.add_token_merges(v.merges)
    setters = {"bos": w.add_bos_token_id, "eos": w.add_eos_token_id, "pad": w.add_pad_token_id,
               "unk": w.add_unk_token_id}
    for key, i in v.ids.items():
        setters[key](i)
    if v.add_bos is not None:
        w.add_add_bos_token(v.add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("family", choices=["deepseek-v3", "gpt-oss"])
    p.add_argument("inputs", nargs="+")
    p.add_argument("--pre", help="tokenizer.ggml.pre to write (default: the family's)")
    a = p.parse_args()
    if a.family == "deepseek-v3":
        if len(a.inputs) != 3:
            p.error("deepseek-v3 needs tokenizer.json tokenizer_config.json OUT")
        v = from_tokenizer_json(a.inputs[0], a.inputs[1], n_vocab=129280)
        pre = a.pre or "deepseek-v3"
    else:
        if len(a.inputs) != 2:
            p.error("gpt-oss needs o200k_base.tiktoken OUT")
        v = from_o200k(a.inputs[0])
        pre = a.pre or "gpt-4o"
    write(v, pre, f"{a.family} vocab ({pre})", a.inputs[-1])


if __name__ == "__main__":
    main()
