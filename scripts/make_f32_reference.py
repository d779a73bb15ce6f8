#!/usr/bin/env python3
"""Writes the "exact model" of a quantized GGUF: every tensor dequantized to F32.

The fidelity suite (scripts/fidelity.sh) compares a quantized model's logits against the
logits of this F32 twin, so the dequantization must be independent of Hypura's own code:
it uses the `gguf` package (llama.cpp's gguf-py), whose numpy dequantizers cover every
block format. Metadata is copied unchanged except general.file_type (ALL_F32).

    make_f32_reference.py MODEL.gguf OUT.gguf

OUT is written to OUT.tmp first and renamed when complete, so an interrupted run never
leaves a truncated reference behind (the suite caches references by name).
"""
import os
import sys

import numpy as np
import gguf

FILE_TYPE_KEY = "general.file_type"
ALL_F32 = 0


def copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    for field in reader.fields.values():
        # The writer emits the architecture and the GGUF.* header fields itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == FILE_TYPE_KEY:
            writer.add_uint32(FILE_TYPE_KEY, ALL_F32)
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)


def dequantized(tensor) -> np.ndarray:
    """The tensor as float32 in its logical (row-major, ne reversed) shape."""
    data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(d) for d in reversed(tensor.shape))
    return np.ascontiguousarray(data, dtype=np.float32).reshape(shape)


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: make_f32_reference.py MODEL.gguf OUT.gguf", file=sys.stderr)
        return 2
    src, out = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = out + ".tmp"
    writer = gguf.GGUFWriter(tmp, arch)
    copy_metadata(reader, writer)
    total = sum(int(np.prod(t.shape)) for t in reader.tensors)
    for t in reader.tensors:
        n = int(np.prod(t.shape))
        writer.add_tensor_info(t.name, tuple(int(d) for d in reversed(t.shape)), np.dtype(np.float32),
                               n * 4, gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    done, shown = 0, -1
    for t in reader.tensors:
        writer.write_tensor_data(dequantized(t))
        done += int(np.prod(t.shape))
        pct = 100 * done // total
        if pct // 10 != shown:  # a line per tenth: readable in CI logs as on a terminal
            shown = pct // 10
            print(f"make_f32_reference: {pct:3d}%", file=sys.stderr, flush=True)
    writer.close()
    os.replace(tmp, out)
    print(f"\nmake_f32_reference: wrote {out} ({os.path.getsize(out) >> 20} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
