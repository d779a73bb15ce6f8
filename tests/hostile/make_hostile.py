#!/usr/bin/env python3
"""Writes the hand-made hostile GGUF corpus into this folder (tests/hostile/*.gguf).

Each file breaks exactly one validation rule of the reader (docs/GGUF.md); the message
the reader must give for it is in expected.tsv beside this script. Files are built byte
by byte with struct, not with a GGUF library, so they can be wrong in any way we like.
Run it again after adding a case; the files are committed, so tests do not need it.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
GGML_F32, GGML_Q4_K = 0, 12


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def kv_str(key, v):
    return kv(key, STRING, s(v))


def tensor_info(name, ne, ggml_type=GGML_F32, offset=0):
    return (s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
            + struct.pack("<IQ", ggml_type, offset))


def pad(b, alignment=32):
    return b + b"\0" * (-len(b) % alignment)


ARCH = kv_str("general.architecture", "llama")


def model(tensors, data_bytes, kvs=(ARCH,), alignment=32):
    """A complete file: header, metadata, tensor infos, padding, data_bytes of data."""
    body = header(len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    return pad(body, alignment) + bytes((i * 7) & 0xFF for i in range(data_bytes))


def arr(sub, fmt, values):
    return struct.pack("<IQ", sub, len(values)) + b"".join(struct.pack(fmt, v) for v in values)


# Every value type, nested arrays, alignment 64 and quantized tensors: a valid file that
# reaches the parser's less common paths (a seed for the fuzzer).
ALL_TYPES_KVS = (
    ARCH, kv_u32("general.alignment", 64),
    kv("u8", U8, b"\xff"), kv("i8", I8, b"\x80"), kv("u16", U16, struct.pack("<H", 65535)),
    kv("i16", I16, struct.pack("<h", -2)), kv("i32", I32, struct.pack("<i", -3)),
    kv("f32", F32, struct.pack("<f", 0.5)), kv("bool", BOOL, b"\x01"),
    kv("u64", U64, struct.pack("<Q", 2**64 - 1)), kv("i64", I64, struct.pack("<q", -2**63)),
    kv("f64", F64, struct.pack("<d", 1e-300)),
    kv("u64s", ARRAY, arr(U64, "<Q", [1, 2])), kv("i64s", ARRAY, arr(I64, "<q", [-1])),
    kv("f64s", ARRAY, arr(F64, "<d", [0.25])), kv("bools", ARRAY, arr(BOOL, "<B", [0, 1])),
    kv("i16s", ARRAY, arr(I16, "<h", [-7, 7])), kv("u8s", ARRAY, arr(U8, "<B", [])),
    kv("nested", ARRAY, struct.pack("<IQ", ARRAY, 2) + arr(U32, "<I", [1, 2])
       + struct.pack("<IQ", STRING, 1) + s("x")),
)

CASES = {
    # A valid two-tensor model: must open. Also a small seed for the fuzzer.
    "valid_tiny.gguf": model(
        [tensor_info("token_embd.weight", [8, 4], offset=0),
         tensor_info("blk.0.attn_q.weight", [8, 8], offset=128)],
        128 + 256,
        kvs=(ARCH, kv_u32("llama.block_count", 1), kv_u32("llama.context_length", 64),
             kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 2) + s("a") + s("b")))),
    "valid_all_types.gguf": model(
        [tensor_info("blk.0.ffn_up.weight", [256, 2], GGML_Q4_K, offset=0),
         tensor_info("blk.0.ffn_down.weight", [32, 3], 8, offset=320),
         tensor_info("output_norm.weight", [4], 1, offset=448)],
        512, kvs=ALL_TYPES_KVS, alignment=64),
    "empty.gguf": b"",
    "bad_magic.gguf": header(0, 0, magic=b"GGML"),
    "version1.gguf": header(0, 0, version=1),
    "big_endian.gguf": header(0, 0, version=3 << 24),
    "truncated_header.gguf": header(0, 0)[:20],
    "absurd_tensor_count.gguf": header(1 << 62, 0) + b"\0" * 64,
    "absurd_kv_count.gguf": header(0, 1 << 40) + b"\0" * 64,
    "key_past_end.gguf": header(0, 1) + struct.pack("<Q", 1 << 40) + b"general",
    "key_too_long.gguf": header(0, 1) + s("k" * 70000) + struct.pack("<I", U8) + b"\0",
    "string_past_end.gguf": header(0, 1) + s("general.name") + struct.pack("<IQ", STRING, 1000)
    + b"short",
    "array_past_end.gguf": header(0, 1) + s("tokenizer.ggml.scores")
    + struct.pack("<IIQ", ARRAY, F32, 1 << 40) + b"\0" * 32,
    "nested_too_deep.gguf": header(0, 1) + s("deep") + struct.pack("<I", ARRAY)
    + struct.pack("<IQ", ARRAY, 1) * 5 + struct.pack("<IQ", U8, 0),
    "unknown_value_type.gguf": header(0, 1) + s("general.name") + struct.pack("<I", 13) + b"\0" * 8,
    "unknown_array_type.gguf": header(0, 1) + s("list") + struct.pack("<IIQ", ARRAY, 99, 1)
    + b"\0" * 8,
    "bad_bool.gguf": header(0, 1) + kv("tokenizer.ggml.add_bos_token", BOOL, b"\x02"),
    "duplicate_key.gguf": header(0, 2) + ARCH + ARCH,
    "alignment_zero.gguf": header(0, 1) + kv_u32("general.alignment", 0),
    "alignment_not_power_of_two.gguf": header(0, 1) + kv_u32("general.alignment", 48),
    "alignment_wrong_type.gguf": header(0, 1) + kv_str("general.alignment", "32"),
    "tensor_zero_dims.gguf": model([tensor_info("token_embd.weight", [])], 64),
    "tensor_five_dims.gguf": model([tensor_info("token_embd.weight", [1, 1, 1, 1, 1])], 64),
    "tensor_negative_dim.gguf": model([tensor_info("token_embd.weight", [8, -1])], 64),
    "tensor_elements_overflow.gguf": model([tensor_info("token_embd.weight", [1 << 32, 1 << 32])],
                                           64),
    "tensor_bytes_overflow.gguf": model([tensor_info("token_embd.weight", [1 << 62])], 64),
    "tensor_not_whole_blocks.gguf": model([tensor_info("blk.0.ffn_up.weight", [100, 2],
                                                       GGML_Q4_K)], 512),
    "tensor_unknown_type.gguf": model([tensor_info("blk.0.ffn_up.weight", [32], 31)], 64),
    "tensor_misaligned.gguf": model([tensor_info("a.weight", [4]),
                                     tensor_info("b.weight", [4], offset=16)], 64),
    "tensor_past_end.gguf": model([tensor_info("blk.0.attn_q.weight", [256, 256])], 4000),
    "tensor_offset_overflow.gguf": model([tensor_info("blk.0.attn_q.weight", [8],
                                                      offset=(1 << 64) - 32)], 64),
    "tensors_overlap.gguf": model([tensor_info("blk.0.attn_q.weight", [16], offset=0),
                                   tensor_info("blk.0.attn_k.weight", [16], offset=32)], 128),
    "duplicate_tensor.gguf": model([tensor_info("output.weight", [4], offset=0),
                                    tensor_info("output.weight", [4], offset=32)], 64),
    "empty_tensor_name.gguf": model([tensor_info("", [4])], 64),
    "tensor_name_too_long.gguf": model([tensor_info("blk.0." + "x" * 58 + ".weight", [4])], 64),
    "data_section_past_end.gguf": header(1, 0) + tensor_info("output.weight", [0]),
}


def main():
    for name, data in CASES.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(CASES)} files")


if __name__ == "__main__":
    main()
