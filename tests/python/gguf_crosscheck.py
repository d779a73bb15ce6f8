#!/usr/bin/env python3
"""Cross-checks Hypura's GGUF reader and writer against the gguf PyPI package (gguf-py).

Used by src/gguf/crosscheck_test.cc through HYPURA_PYTHON (the project's .venv):

  gguf_crosscheck.py dump [--data] FILE.. a JSON list: each FILE as canonical JSON, read by
                                          gguf.GGUFReader
  gguf_crosscheck.py write PATH [--split] write a model with gguf.GGUFWriter (as split files
                                          PATH-0000i-of-0000N.gguf with --split) and print
                                          what it was asked to write, as canonical JSON

Canonical JSON, the one both sides produce and compare:
  {"metadata": [[key, type, value], ...]   file order; type "u8".."f64", "bool", "string"
                                           or "array[<element type>]"; value a JSON scalar
                                           or list
   "tensors": [{"name", "type", "ne", "n_bytes", "offset", "checksum"}]}
  ne is ggml order (ne[0] = row length); offset is absolute in its file (dump only);
  checksum = sum(byte[i] * (i % 65521 + 1)) mod 2**64 over the tensor's bytes (with --data
  or write; null otherwise).
gguf-py cannot read arrays nested in arrays, so the files here have none (Hypura's own
round-trip tests cover them).
"""
import json
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as VT, GGMLQuantizationType as QT

TYPE_NAMES = {
    VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
    VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string",
    VT.ARRAY: "array", VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64",
}


def checksum(data):
    b = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.uint64)
    w = (np.arange(b.size, dtype=np.uint64) % np.uint64(65521)) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(b * w, dtype=np.uint64))


def field_json(field):
    main = field.types[0]
    if main == VT.ARRAY:
        sub = field.types[-1] if len(field.types) > 1 else VT.UINT8
        return f"array[{TYPE_NAMES[sub]}]", field.contents()
    return TYPE_NAMES[main], field.contents()


def dump(path, with_data):
    reader = gguf.GGUFReader(path)
    metadata = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # gguf-py's pseudo fields for the header
            continue
        type_name, value = field_json(field)
        metadata.append([key, type_name, value])
    tensors = []
    for t in reader.tensors:
        data = reader.data[t.data_offset:t.data_offset + t.n_bytes] if with_data else None
        tensors.append({"name": t.name, "type": QT(t.tensor_type).name,
                        "ne": [int(d) for d in t.shape], "n_bytes": int(t.n_bytes),
                        "offset": int(t.data_offset),
                        "checksum": checksum(data) if with_data else None})
    return {"metadata": metadata, "tensors": tensors}


def rng_bytes(seed, n):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def write(path, split):
    writer = gguf.GGUFWriter(path, "llama", split_max_tensors=2 if split else 0)
    metadata = [["general.architecture", "string", "llama"]]
    scalars = [
        ("t.u8", VT.UINT8, 200), ("t.i8", VT.INT8, -100), ("t.u16", VT.UINT16, 60000),
        ("t.i16", VT.INT16, -30000), ("t.u32", VT.UINT32, 4000000000),
        ("t.i32", VT.INT32, -2000000000), ("t.f32", VT.FLOAT32, 0.1),
        ("t.u64", VT.UINT64, 2**63 + 5), ("t.i64", VT.INT64, -(2**62)),
        ("t.f64", VT.FLOAT64, 1.0 / 3.0), ("t.bool", VT.BOOL, True),
        ("t.string", VT.STRING, "héllo wörld"), ("t.empty_string", VT.STRING, ""),
    ]
    for key, vtype, value in scalars:
        writer.add_key_value(key, value, vtype)
        if vtype == VT.FLOAT32:
            value = float(np.float32(value))
        metadata.append([key, TYPE_NAMES[vtype], value])
    arrays = [
        ("t.tokens", VT.STRING, ["<s>", "</s>", "▁the", "", "x" * 300]),
        ("t.scores", VT.FLOAT32, [0.0, -1.5, 2.25]),
        ("t.ids", VT.INT32, [1, -2, 3]),
        ("t.flags", VT.BOOL, [True, False]),
        ("t.u64s", VT.UINT64, [0, 2**64 - 1]),
    ]
    for key, sub, value in arrays:
        writer.add_key_value(key, value, VT.ARRAY, sub_type=sub)
        metadata.append([key, f"array[{TYPE_NAMES[sub]}]", value])

    tensors = []
    # (name, ggml type, ne, bytes): ne in ggml order; numpy shapes are reversed.
    specs = [
        ("token_embd.weight", QT.F32, [64, 5]),
        ("blk.0.attn_q.weight", QT.F16, [64, 64]),
        ("blk.0.ffn_up.weight", QT.Q8_0, [64, 3]),
        ("blk.0.ffn_down.weight", QT.Q4_K, [256, 2]),
        ("blk.0.ffn_gate_exps.weight", QT.Q6_K, [256, 2, 4]),
        ("output.weight", QT.BF16, [32, 3]),
    ]
    for i, (name, qtype, ne) in enumerate(specs):
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        rows = int(np.prod(ne[1:]))
        row_bytes = ne[0] // block * type_size
        data = rng_bytes(i, rows * row_bytes).reshape(list(reversed(ne[1:])) + [row_bytes])
        writer.add_tensor(name, data, raw_dtype=qtype)
        tensors.append({"name": name, "type": qtype.name, "ne": ne, "n_bytes": data.size,
                        "offset": None, "checksum": checksum(data.tobytes())})
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if split:
        # gguf-py adds split.* keys to every shard; the first shard's are part of the model.
        metadata += [["split.no", "u16", 0], ["split.count", "u16", 3],
                     ["split.tensors.count", "i32", len(specs)]]
    return {"metadata": metadata, "tensors": tensors}


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("dump", "write"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "dump":
        files = [a for a in sys.argv[2:] if a != "--data"]
        out = [dump(f, "--data" in sys.argv[2:]) for f in files]
    else:
        out = write(sys.argv[2], "--split" in sys.argv[3:])
    json.dump(out, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
