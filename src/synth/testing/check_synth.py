#!/usr/bin/env python3
"""Cross-checks a synthetic GGUF (hypura synth) with the `gguf` PyPI package.

Usage: check_synth.py FILE ARCH [FILE ARCH ...]   (ARCH as given to --arch: llama ... gpt-oss)

An independent reader of our files: checks that the architecture's metadata keys are
present, that the tensor set (names and shapes) is exactly the one llama.cpp expects
for that metadata, that the vocabulary arrays have n_vocab entries, and that the
dequantized weights have the intended statistics (mean ~0, std ~1/sqrt(fan_in); norms
~1). Prints one line per failure and exits 1 if any; exits 0 otherwise.
"""
import sys

import gguf
import numpy as np

MAX_SAMPLE_ROWS = 64  # rows dequantized per tensor: enough for stable statistics
STD_TOLERANCE = 0.15  # relative, for weights
MEAN_TOLERANCE = 0.1  # in units of the expected std

failures = []


def fail(msg):
    failures.append(msg)


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def expected_tensors(arch, md):
    """Tensor name -> ne (ggml order) that llama.cpp's loader asks for."""
    a = "llama" if arch == "mixtral" else arch
    n_embd = md[f"{a}.embedding_length"]
    n_layer = md[f"{a}.block_count"]
    n_head = md[f"{a}.attention.head_count"]
    n_kv = md[f"{a}.attention.head_count_kv"]
    head_dim = md.get(f"{a}.attention.key_length") or n_embd // n_head
    n_ff = md[f"{a}.feed_forward_length"]
    n_vocab = md["n_vocab"]
    n_expert = md.get(f"{a}.expert_count", 0)
    n_ff_exp = md.get(f"{a}.expert_feed_forward_length") or n_ff
    want = {"token_embd.weight": [n_embd, n_vocab], "output_norm.weight": [n_embd]}
    if arch != "gemma3":
        want["output.weight"] = [n_embd, n_vocab]
    for i in range(n_layer):
        b = f"blk.{i}."
        want.update({
            b + "attn_norm.weight": [n_embd],
            b + "attn_q.weight": [n_embd, n_head * head_dim],
            b + "attn_k.weight": [n_embd, n_kv * head_dim],
            b + "attn_v.weight": [n_embd, n_kv * head_dim],
            b + "attn_output.weight": [n_head * head_dim, n_embd],
        })
        if arch == "gpt-oss":  # its FFN input norm is post_attention_norm
            want.update({b + "post_attention_norm.weight": [n_embd], b + "attn_sinks.weight": [n_head],
                         b + "attn_output.bias": [n_embd], b + "ffn_gate_inp.bias": [n_expert],
                         b + "ffn_gate_exps.bias": [n_ff_exp, n_expert],
                         b + "ffn_up_exps.bias": [n_ff_exp, n_expert],
                         b + "ffn_down_exps.bias": [n_embd, n_expert]})
        else:
            want[b + "ffn_norm.weight"] = [n_embd]
        if arch in ("qwen2", "gpt-oss"):
            want.update({b + "attn_q.bias": [n_head * head_dim], b + "attn_k.bias": [n_kv * head_dim],
                         b + "attn_v.bias": [n_kv * head_dim]})
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            want.update({b + "attn_q_norm.weight": [head_dim], b + "attn_k_norm.weight": [head_dim]})
        if arch == "gemma3":
            want.update({b + "post_attention_norm.weight": [n_embd], b + "post_ffw_norm.weight": [n_embd]})
        if n_expert:
            want.update({
                b + "ffn_gate_inp.weight": [n_embd, n_expert],
                b + "ffn_gate_exps.weight": [n_embd, n_ff_exp, n_expert],
                b + "ffn_up_exps.weight": [n_embd, n_ff_exp, n_expert],
                b + "ffn_down_exps.weight": [n_ff_exp, n_embd, n_expert],
            })
        else:
            want.update({b + "ffn_gate.weight": [n_embd, n_ff], b + "ffn_up.weight": [n_embd, n_ff],
                         b + "ffn_down.weight": [n_ff, n_embd]})
    return want


REQUIRED = {
    "llama": ["rope.dimension_count", "vocab_size"],
    "mixtral": ["rope.dimension_count", "vocab_size", "expert_count", "expert_used_count"],
    "qwen2": [],
    "qwen3": ["attention.key_length", "attention.value_length"],
    "qwen3moe": ["attention.key_length", "attention.value_length", "expert_count",
                 "expert_used_count", "expert_feed_forward_length"],
    "gemma3": ["attention.key_length", "attention.value_length", "attention.sliding_window"],
    "gpt-oss": ["attention.key_length", "attention.value_length", "expert_count", "expert_used_count",
                "expert_feed_forward_length", "attention.sliding_window", "rope.scaling.type",
                "rope.scaling.factor", "rope.scaling.original_context_length"],
}
COMMON = ["context_length", "embedding_length", "block_count", "feed_forward_length",
          "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
          "rope.freq_base"]


def check_metadata(reader, arch):
    a = "llama" if arch == "mixtral" else arch
    md = {}
    if field(reader, "general.architecture") != a:
        fail(f"general.architecture is {field(reader, 'general.architecture')!r}, want {a!r}")
    for key in COMMON + REQUIRED[arch]:
        v = field(reader, f"{a}.{key}")
        if v is None:
            fail(f"missing {a}.{key}")
        md[f"{a}.{key}"] = v
    for key in ("expert_feed_forward_length", "expert_count"):
        v = field(reader, f"{a}.{key}")
        if v is not None:
            md[f"{a}.{key}"] = v
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        fail("no tokenizer.ggml.tokens")
        return None
    md["n_vocab"] = len(tokens.data)
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        f = reader.fields.get(key)
        if f is not None and len(f.data) != md["n_vocab"]:
            fail(f"{key} has {len(f.data)} entries, tokens {md['n_vocab']}")
    if arch in ("llama", "mixtral") and md.get("llama.vocab_size") != md["n_vocab"]:
        fail(f"llama.vocab_size {md.get('llama.vocab_size')} != {md['n_vocab']} tokens")
    return md


def check_values(t):
    """Statistics of the first rows of a tensor, dequantized by gguf-py."""
    ne0 = int(t.shape[0])
    raw = t.data.reshape(-1, t.data.shape[-1])[:MAX_SAMPLE_ROWS]  # rows of raw bytes/values
    rows = gguf.dequantize(raw, t.tensor_type).reshape(-1, ne0)
    x = rows.astype(np.float64).ravel()
    if not np.all(np.isfinite(x)):
        fail(f"{t.name}: non-finite values")
        return
    name = t.name
    if "norm" in name:
        if abs(x.mean() - 1.0) > 0.05:
            fail(f"{name}: norm mean {x.mean():.4f}, want ~1")
        return
    if name.endswith("attn_sinks.weight"):  # logits, std 1 whatever the head count
        if abs(x.std() - 1.0) > 0.5:
            fail(f"{name}: sink std {x.std():.4f}, want ~1")
        return
    if name.endswith(".bias"):
        if abs(x.mean()) > 0.02 or x.std() > 0.05:
            fail(f"{name}: bias mean {x.mean():.4f} std {x.std():.4f}")
        return
    want = 1.0 / np.sqrt(ne0)
    if abs(x.std() / want - 1.0) > STD_TOLERANCE:
        fail(f"{name} ({t.tensor_type.name}): std {x.std():.5f}, want {want:.5f} +- {STD_TOLERANCE:.0%}")
    if abs(x.mean()) > MEAN_TOLERANCE * want:
        fail(f"{name} ({t.tensor_type.name}): mean {x.mean():.5f}, want |mean| < {MEAN_TOLERANCE * want:.5f}")


def check_file(path, arch):
    reader = gguf.GGUFReader(path)
    md = check_metadata(reader, arch)
    if md is not None and not failures:
        want = expected_tensors(arch, md)
        got = {t.name: [int(d) for d in t.shape] for t in reader.tensors}
        for name in sorted(set(want) - set(got)):
            fail(f"missing tensor {name}")
        for name in sorted(set(got) - set(want)):
            fail(f"unexpected tensor {name}")
        for name in sorted(set(want) & set(got)):
            if want[name] != got[name]:
                fail(f"{name}: ne {got[name]}, want {want[name]}")
    for t in reader.tensors:
        check_values(t)


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        print(__doc__)
        return 2
    total = 0
    for path, arch in zip(args[0::2], args[1::2]):
        before = len(failures)
        check_file(path, arch)
        for f in failures[before:]:
            print(f"{path}: {f}")
        total += 1
    print(f"check_synth: {total} files, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
