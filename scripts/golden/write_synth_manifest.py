"""Writes tests/golden/synth/NAME/manifest.json for make_synth_goldens.sh (see there)."""

import argparse
import hashlib
import json
import os
import shlex

import numpy as np

try:
    import gguf
except ImportError:  # tensor types are informative only
    gguf = None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tensor_types(path):
    if gguf is None:
        return {}
    types = {}
    for t in gguf.GGUFReader(path).tensors:
        types.setdefault(t.tensor_type.name, []).append(t.name)
    return {k: {"count": len(v), "tensors": v} for k, v in sorted(types.items())}


def run_entry(out, dump_json, sequences):
    with open(dump_json) as f:
        d = json.load(f)
    n_vocab = d["n_vocab"]
    logits = {k: os.path.basename(v) for k, v in d["files"].items()}
    c = np.fromfile(os.path.join(out, logits["C"]), dtype="<f4").reshape(len(sequences["C"]), n_vocab)
    top2 = np.sort(c, axis=1)[:, -2:]
    margins = top2[:, 1] - top2[:, 0]
    return {
        "logits": logits,
        "greedy_B": d["greedy"],
        "greedy_B_top1_margins": d["greedy_top1_margins"],
        "llama_cpp_log": d["log"],
        "logit_stats_C": {
            "max_abs": float(np.abs(c).max()),
            "std": float(c.std()),
            "top1_margin_median": float(np.median(margins)),
            "rows_margin_over_0.5": int((margins > 0.5).sum()),
        },
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tmp", required=True)
    p.add_argument("--golden", required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--quants", nargs="+", required=True)
    p.add_argument("synth_args", nargs="*")
    a = p.parse_args()
    with open(os.path.join(a.golden, "manifest.json")) as f:
        sequences = json.load(f)["sequences"]
    f32 = os.path.join(a.tmp, "f32.gguf")
    models = {
        "f32": {
            "file": None,
            "regenerate": "hypura synth -o FILE " + shlex.join(a.synth_args),
            "sha256": sha256(f32),
            "size_bytes": os.path.getsize(f32),
            "runs": {
                "default": run_entry(a.out, os.path.join(a.tmp, "f32.default.json"), sequences),
                "exact": run_entry(a.out, os.path.join(a.tmp, "f32.exact.json"), sequences),
            },
        }
    }
    for q in a.quants:
        lq = q.lower()
        path = os.path.join(a.out, lq + ".gguf")
        models[lq] = {
            "file": lq + ".gguf",
            "made_by": f"llama-quantize f32.gguf {lq}.gguf {q}",
            "sha256": sha256(path),
            "size_bytes": os.path.getsize(path),
            "tensor_types": tensor_types(path),
            "runs": {"default": run_entry(a.out, os.path.join(a.tmp, lq + ".default.json"), sequences)},
        }
    manifest = {
        "name": a.name,
        "made_by": "scripts/golden/make_synth_goldens.sh " + a.name
        + "".join(f" --also {q}" for q in a.quants[1:]) + " -- " + shlex.join(a.synth_args),
        "llama_cpp_commit": a.commit,
        "llama_cpp_settings": "CPU, n_ctx 512, n_batch = n_ubatch 512, 2 threads; default run: F16 KV, "
        "flash attention auto, weight repacking on; exact run (F32 model): F32 KV, flash attention off; "
        "each sequence one llama_decode from an empty cache; greedy: B, then 15 single-token decodes",
        "synth_args": a.synth_args,
        "synth_args_note": "{golden} stands for the llama.cpp golden folder (HYPURA_GOLDEN_DIR)",
        "sequences": sequences,
        "models": models,
    }
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
