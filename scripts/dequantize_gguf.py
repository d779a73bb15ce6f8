#!/usr/bin/env python3
"""Writes an F16 (or F32) GGUF whose weights are exactly a quantized GGUF's dequantized values.

What it is for: speculative-decoding benchmarks want a target model whose outputs stay close to
the draft's. Dequantizing the draft (e.g. a Q4_K_M file) to F16 gives a model about 3x bigger,
as slow to run as a real F16 model, yet nearly the same function, so acceptance is high.

    .venv/bin/python scripts/dequantize_gguf.py IN.gguf OUT.gguf [--type f16|f32] [--force]

Every metadata key/value is copied (arrays included, strings byte for byte) except
general.file_type, which becomes MOSTLY_F16 (1) or ALL_F32 (0). Tensors keep their order, name
and ne dims. 1-D tensors (norms, biases) are written as F32; tensors of 2 or more dims become
the chosen type: quantized ones are dequantized with the `gguf` package (llama.cpp's gguf-py),
F32/F16 ones are converted when their type differs. Integer tensors are copied unchanged.

OUT is written to a temporary file next to it and renamed when complete, so an interrupted run
never leaves a truncated model behind. An existing OUT is refused unless --force.
"""
import argparse
import os
import sys

import numpy as np
import gguf

T = gguf.GGMLQuantizationType
V = gguf.GGUFValueType
FILE_TYPE_KEY = gguf.Keys.General.FILE_TYPE
ALIGNMENT_KEY = gguf.Keys.General.ALIGNMENT
ARCH_KEY = gguf.Keys.General.ARCHITECTURE

# Target of --type: the ggml type of the weights and the general.file_type it makes.
TARGETS = {
    "f16": (T.F16, gguf.LlamaFileType.MOSTLY_F16),
    "f32": (T.F32, gguf.LlamaFileType.ALL_F32),
}
# Types that are not weights to convert (token ids, positions, ...): copied as they are.
RAW_COPY_TYPES = {T.I8, T.I16, T.I32, T.I64, T.F64}


class UsageError(Exception):
    """A problem with the command line or the input file, reported without a traceback."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input", help="quantized GGUF model to read")
    p.add_argument("output", help="GGUF model to write")
    p.add_argument("--type", choices=sorted(TARGETS), default="f16",
                   help="type of the weights of 2 or more dims (default f16)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    return p.parse_args(argv)


def temp_path(out: str) -> str:
    return out + ".tmp"


def check_paths(src: str, out: str, force: bool) -> None:
    if not os.path.isfile(src):
        raise UsageError(f"input {src!r} does not exist or is not a file")
    # Writing over the input would truncate the file the reader has memory-mapped.
    for path in (out, temp_path(out)):
        if os.path.exists(path) and os.path.samefile(src, path):
            raise UsageError(f"output would overwrite the input ({path!r})")
    if os.path.exists(out) and not force:
        raise UsageError(f"output {out!r} exists (pass --force to overwrite it)")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        raise UsageError(f"output directory {out_dir!r} does not exist")


def open_reader(src: str) -> gguf.GGUFReader:
    try:
        reader = gguf.GGUFReader(src)
    except (ValueError, KeyError, IndexError, OSError) as e:
        raise UsageError(f"{src!r} is not a valid GGUF file: {e}") from e
    # Quantized blocks are read as bytes and decoded as little-endian: a big-endian file would
    # dequantize to garbage without any error.
    if reader.endianess != gguf.GGUFEndian.LITTLE:
        raise UsageError(f"{src!r} is big-endian; only little-endian files are supported")
    if ARCH_KEY not in reader.fields:
        raise UsageError(f"{src!r} has no {ARCH_KEY} key")
    return reader


def field_value(field) -> object:
    """The field's value as GGUFWriter packs it; strings stay bytes so they copy exactly."""
    kind = field.types[0]
    if kind == V.STRING:
        return field.parts[field.data[0]].tobytes()
    if kind != V.ARRAY:
        return field.contents()
    if field.types[-1] == V.STRING:
        return [field.parts[i].tobytes() for i in field.data]
    return field.contents()


def copy_field(writer: gguf.GGUFWriter, field) -> None:
    kind = field.types[0]
    if kind == V.ARRAY and len(field.types) != 2:
        # The reader keeps no element type for an empty array, flattens nested ones, and the
        # writer refuses empty arrays: neither could be copied faithfully.
        what = "an empty array" if len(field.types) == 1 else "a nested array"
        raise UsageError(f"key {field.name!r} is {what}, which gguf-py cannot copy")
    sub_type = field.types[1] if kind == V.ARRAY else None
    # add_key_value, not add_string/add_array: those silently drop empty values.
    writer.add_key_value(field.name, field_value(field), kind, sub_type=sub_type)


def copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, file_type: int) -> None:
    for field in reader.fields.values():
        # GGUF.* are the header's counts, and the writer emits the architecture itself.
        if field.name.startswith("GGUF.") or field.name == ARCH_KEY:
            continue
        if field.name == FILE_TYPE_KEY:
            writer.add_uint32(FILE_TYPE_KEY, file_type)
        elif field.name == ALIGNMENT_KEY:
            # Through add_custom_alignment so that the writer pads the data to it, too.
            writer.add_custom_alignment(int(field.contents()))
        else:
            copy_field(writer, field)
    if FILE_TYPE_KEY not in reader.fields:
        writer.add_uint32(FILE_TYPE_KEY, file_type)


def ne_dims(tensor) -> tuple[int, ...]:
    """ggml order: ne[0] (the contiguous row length) first."""
    return tuple(int(d) for d in tensor.shape)


def output_type(tensor, target: T) -> T:
    if tensor.tensor_type in RAW_COPY_TYPES:
        return tensor.tensor_type
    # ggml wants norms and biases in F32, whatever the weights are.
    if len(ne_dims(tensor)) < 2:
        return T.F32
    return target


def out_dtype(tensor, out_type: T) -> np.dtype:
    if out_type == tensor.tensor_type:
        return tensor.data.dtype
    return np.dtype(np.float16 if out_type == T.F16 else np.float32)


def converted(tensor, out_type: T) -> np.ndarray:
    """The tensor's values in out_type, shaped row-major (ne reversed) as GGUFWriter expects."""
    shape = tuple(reversed(ne_dims(tensor)))
    if out_type == tensor.tensor_type:
        return tensor.data.reshape(shape)
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
    return values.astype(out_dtype(tensor, out_type), copy=False)


def check_tensor_types(reader: gguf.GGUFReader) -> None:
    """Fails before writing anything when a tensor's type cannot be dequantized."""
    for t in reader.tensors:
        if t.tensor_type in RAW_COPY_TYPES or t.tensor_type in (T.F32, T.F16):
            continue
        # One block of zeros is enough: dequantize raises for an unknown type before decoding.
        block = np.zeros(gguf.GGML_QUANT_SIZES[t.tensor_type][1], dtype=np.uint8)
        try:
            gguf.quants.dequantize(block, t.tensor_type)
        except NotImplementedError as e:
            raise UsageError(f"tensor {t.name!r}: {e}") from e


def add_tensor_infos(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, target: T) -> list[T]:
    """Declares every tensor up front: the header lists them all before the first byte of data."""
    types = []
    for t in reader.tensors:
        out_type = output_type(t, target)
        dtype = out_dtype(t, out_type)
        shape = tuple(reversed(ne_dims(t)))  # the writer reverses it back to ne order
        writer.add_tensor_info(t.name, shape, dtype, t.n_elements * dtype.itemsize,
                               raw_dtype=out_type)
        types.append(out_type)
    return types


def write_tensors(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, types: list[T]) -> None:
    n = len(reader.tensors)
    for i, (t, out_type) in enumerate(zip(reader.tensors, types), 1):
        data = converted(t, out_type)
        if out_type == T.F16 and not np.isfinite(data).all():
            print(f"warning: {t.name}: values beyond the F16 range became inf", file=sys.stderr)
        print(f"tensor {i}/{n} {t.name} {t.tensor_type.name} -> {out_type.name} "
              f"{list(ne_dims(t))}", file=sys.stderr, flush=True)
        # One tensor at a time: only the current one's dequantized values are in memory.
        writer.write_tensor_data(data)


def convert(src: str, out: str, target_name: str) -> None:
    reader = open_reader(src)
    check_tensor_types(reader)
    target, file_type = TARGETS[target_name]
    arch = reader.fields[ARCH_KEY].contents()
    tmp = temp_path(out)
    writer = gguf.GGUFWriter(tmp, arch)
    try:
        copy_metadata(reader, writer, int(file_type))
        types = add_tensor_infos(reader, writer, target)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        write_tensors(reader, writer, types)
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        # The writer creates the file only at write_header_to_file.
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        check_paths(args.input, args.output, args.force)
        convert(args.input, args.output, args.type)
    except UsageError as e:
        print(f"dequantize_gguf: error: {e}", file=sys.stderr)
        return 1
    size = os.path.getsize(args.output)
    print(f"dequantize_gguf: wrote {args.output} ({size / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
