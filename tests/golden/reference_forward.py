#!/usr/bin/env python3
"""Independent float64 reference of the forward pass (numpy + gguf-py), for checking the
engine where llama.cpp's golden data does not reach (real models, their quant mixes).

Weights are dequantized by the gguf package; every activation stays float64, so the
result is the "exact" forward pass the quantized weights define. Dense llama, qwen2,
qwen3 and gemma3 models. Writes the logits of every position as float32
(n_tokens, n_vocab) row-major.

usage: reference_forward.py MODEL.gguf --tokens 1,2,3 --out logits.f32
"""
import argparse
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0] if hasattr(v, "tolist") else v


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = field(r, "general.architecture")
        a = self.arch
        self.n_embd = field(r, f"{a}.embedding_length")
        self.n_layer = field(r, f"{a}.block_count")
        self.n_head = field(r, f"{a}.attention.head_count")
        self.n_head_kv = field(r, f"{a}.attention.head_count_kv", self.n_head)
        self.head_dim = field(r, f"{a}.attention.key_length", self.n_embd // self.n_head)
        self.eps = field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
        self.base = field(r, f"{a}.rope.freq_base", 10000.0)
        self.n_swa = field(r, f"{a}.attention.sliding_window", 0) if a == "gemma3" else 0
        self.swa_pattern = field(r, f"{a}.attention.sliding_window_pattern", 6)
        self.base_swa = field(r, f"{a}.rope.freq_base_swa", 10000.0)
        self.tensors = {t.name: t for t in r.tensors}

    def w(self, name):
        t = self.tensors.get(name)
        if t is None:
            return None
        shape = [int(x) for x in reversed(t.shape.tolist())]  # numpy order (rows, cols)
        return dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base, neox):
    # x: (n_tokens, n_heads, head_dim)
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]                       # (n_tokens, d/2)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(m, tokens):
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    gemma = m.arch == "gemma3"
    neox = m.arch != "llama"
    x = m.w("token_embd.weight")[tokens]
    if gemma:
        x = x * np.sqrt(m.n_embd)
    hd, nh, nkv = m.head_dim, m.n_head, m.n_head_kv
    for il in range(m.n_layer):
        p = f"blk.{il}."
        local = gemma and m.n_swa > 0 and (il % m.swa_pattern) < m.swa_pattern - 1
        base = m.base_swa if local else m.base
        h = rms(x, m.w(p + "attn_norm.weight"), m.eps)
        q = h @ m.w(p + "attn_q.weight").T
        k = h @ m.w(p + "attn_k.weight").T
        v = h @ m.w(p + "attn_v.weight").T
        for name, t in (("attn_q.bias", "q"), ("attn_k.bias", "k"), ("attn_v.bias", "v")):
            b = m.w(p + name)
            if b is not None:
                if t == "q": q = q + b
                if t == "k": k = k + b
                if t == "v": v = v + b
        q = q.reshape(n, nh, hd)
        k = k.reshape(n, nkv, hd)
        v = v.reshape(n, nkv, -1)
        qn, kn = m.w(p + "attn_q_norm.weight"), m.w(p + "attn_k_norm.weight")
        if qn is not None:
            q, k = rms(q, qn, m.eps), rms(k, kn, m.eps)
        q, k = rope(q, pos, base, neox), rope(k, pos, base, neox)
        scale = 1 / np.sqrt(hd)
        out = np.zeros((n, nh, v.shape[-1]))
        for hh in range(nh):
            g = hh // (nh // nkv)
            s = (q[:, hh, :] @ k[:, g, :].T) * scale             # (n, n)
            i, j = np.indices((n, n))
            mask = j > i
            if local:
                mask |= (i - j) >= m.n_swa
            s[mask] = -np.inf
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s @ v[:, g, :]
        a = out.reshape(n, -1) @ m.w(p + "attn_output.weight").T
        if gemma:
            a = rms(a, m.w(p + "post_attention_norm.weight"), m.eps)
        x = x + a
        h = rms(x, m.w(p + "ffn_norm.weight"), m.eps)
        gate = h @ m.w(p + "ffn_gate.weight").T
        up = h @ m.w(p + "ffn_up.weight").T
        act = gelu_tanh(gate) if gemma else gate / (1 + np.exp(-gate))
        f = (act * up) @ m.w(p + "ffn_down.weight").T
        if gemma:
            f = rms(f, m.w(p + "post_ffw_norm.weight"), m.eps)
        x = x + f
    x = rms(x, m.w("output_norm.weight"), m.eps)
    out_w = m.w("output.weight")
    if out_w is None:
        out_w = m.w("token_embd.weight")
    return x @ out_w.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    m = Model(args.model)
    if m.arch not in ("llama", "qwen2", "qwen3", "gemma3"):
        sys.exit(f"reference_forward.py: architecture {m.arch} not supported")
    tokens = [int(t) for t in args.tokens.split(",")]
    logits = forward(m, tokens).astype(np.float32)
    logits.tofile(args.out)


if __name__ == "__main__":
    main()
