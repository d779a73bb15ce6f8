// Decode attention on the GPU: the queries of one token against an F16 KV cache in device
// memory, split over keys. A thread block takes one segment of keys (up to kAttnSegment;
// shorter when that gives too few blocks to fill the GPU) of one kv head and up to 8 of the
// q heads that read it (GQA), so long contexts read K and V about once; short ones, with too
// few blocks even at 32-key segments, split a group's q heads over blocks of 2 and then
// shorten segments to 8 keys (their keys are few: a block's serial work is what costs).
// Per q head: scores, their max m, the sum l of exp(s - m) and the exp-weighted sum of V rows. A
// second kernel merges the segments of a head (the log-sum-exp merge), so long contexts use the
// whole GPU even with one kv head. Loads are 16 bytes (8 halves) per thread, several keys in
// flight.
//
// The math is the CPU's (model/blocks.cc): s = (q . k) * kq_scale, softmax over the
// visible keys, out = sum p v; GQA: q head h reads kv head h / (n_head / n_head_kv).
// Results match it to float rounding (the order of the sums differs).
//
// Multi-head latent attention (deepseek2) runs as MQA over the latent cache: keys of
// kv_lora_rank + n_rot dims (576), and values that are the first head_dim_v (512) dims of
// the same rows, given as v == k with v_stride == k_stride (the "latent" form).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

constexpr int64_t kAttnSegment = 256;        // keys per segment
constexpr int64_t kAttnMaxHeadDim = 256;     // keys and values in rows of their own
constexpr int64_t kAttnMaxLatentDim = 576;   // the latent form's keys
constexpr int64_t kAttnMaxLatentDimV = 512;  // and values (their prefix)

struct AttnDecodeArgs {
  const float* q = nullptr;     // (n_head, head_dim)
  const uint16_t* k = nullptr;  // F16 cache rows: position p at k + p * k_stride
  const uint16_t* v = nullptr;  // F16 cache rows: position p at v + p * v_stride
  float* out = nullptr;         // (n_head, head_dim_v)
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  int64_t k_stride = 0, v_stride = 0;  // halves between positions (n_head_kv * head_dim)
  int64_t kv_first = 0, kv_end = 0;    // visible positions [kv_first, kv_end)
  float kq_scale = 1.0f;
  // The replayable form (a captured decode step): with pos set, the token's position is
  // read on the device, kv_end = *pos + 1 and kv_first = max(0, *pos - n_swa + 1) with a
  // window (n_swa > 0) or 0, and the launch is sized for max_kv visible keys (segments past
  // the end contribute nothing); kv_first / kv_end above are then ignored.
  const int32_t* pos = nullptr;
  int64_t n_swa = 0;
  int64_t max_kv = 0;
  // (n_head) sink logits (gpt-oss): head h's softmax denominator also sums exp(sinks[h]),
  // a logit with no value vector; null: none.
  const float* sinks = nullptr;
  // A draft tree's row (model/seq_rows.h): the keys at positions p >= branch_base sit in
  // slots branch[p - branch_base] (device int32, its ancestors' slots by depth), the ones
  // before in slot p. Null: every key in the slot of its position. One sequence only.
  const int32_t* branch = nullptr;
  int64_t branch_base = 0;
};

// Several sequences' decode steps in one launch (attention_decode_seqs): sequence i's own
// caches, its query row at q + i * q_stride, its output at out + i * out_stride and its
// position at pos[i] (the replayable form only).
constexpr int kAttnMaxSeqs = 16;
struct AttnSeqs {
  uint16_t* k[kAttnMaxSeqs] = {};
  uint16_t* v[kAttnMaxSeqs] = {};
  int n = 1;
  int64_t q_stride = 0, out_stride = 0;  // floats
};

// Bytes of device scratch attention_decode needs for up to n_kv visible keys.
size_t attention_scratch_bytes(int64_t n_head, int64_t n_head_kv, int64_t head_dim_v, int64_t n_kv);

// REQUIRES: head_dim, head_dim_v multiples of 8 and <= kAttnMaxHeadDim (latent form:
// kAttnMaxLatentDim, kAttnMaxLatentDimV); k, v, k_stride, v_stride 16-byte aligned (multiples of 8
// halves); n_head % n_head_kv == 0; 0 < kv_end - kv_first <= 1024 * kAttnSegment (with pos: 0 <
// visible keys <= max_kv, the same bound); scratch >= attention_scratch_bytes(n_head, n_head_kv,
// head_dim_v, n) for n the visible keys (with pos: max_kv).
void attention_decode(const AttnDecodeArgs& a, void* scratch, StreamHandle stream);

// attention_decode of seqs.n sequences in one launch, each exactly as alone (the same
// launch shape: every sequence is sized for max_kv keys). a.k and a.v are ignored, and
// a.branch must be null.
// REQUIRES: as attention_decode, in the replayable form (a.pos set); 1 <= seqs.n <=
// kAttnMaxSeqs; scratch >= seqs.n * attention_scratch_bytes(..., max_kv).
void attention_decode_seqs(const AttnDecodeArgs& a, const AttnSeqs& seqs, void* scratch,
                           StreamHandle stream);

// Prefill attention: the queries of n_tokens consecutive tokens (positions pos0 ..) against
// the F16 cache, which already holds their own keys and values. Token t sees the keys at
// positions [first, pos0 + t], first = max(0, pos0 + t - n_swa + 1) with a window, else 0.
// A thread block takes 16 query rows (tokens x the q heads of one kv head) and walks the
// keys in tiles of 32 in shared memory, with an online softmax per row. Where head_dim is a
// multiple of 16 and head_dim_v of 32, on the tensor cores: each of four warps scores 8 keys
// of a tile for all 16 rows, and multiplies the tile's probabilities by its quarter of the
// value dims; the queries and the probabilities enter as two F16 terms each (hi + lo), so
// the products keep F32 precision. Other dims: SIMT F32 (lane j scores key j of a tile;
// each lane accumulates head_dim_v / 32 output dims). In the latent form the values are
// read from the key tile.
// Results match the CPU's to float rounding.
struct AttnPrefillArgs {
  const float* q = nullptr;     // (n_tokens, n_head * head_dim)
  const uint16_t* k = nullptr;  // F16 cache rows: position p at k + p * k_stride
  const uint16_t* v = nullptr;
  float* out = nullptr;  // (n_tokens, n_head * head_dim_v)
  int64_t n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  int64_t k_stride = 0, v_stride = 0;
  int64_t pos0 = 0;
  int64_t n_swa = 0;  // 0: no window
  float kq_scale = 1.0f;
  const float* sinks = nullptr;  // (n_head) sink logits, as AttnDecodeArgs::sinks
};

// REQUIRES: head_dim, head_dim_v multiples of 8 and <= kAttnMaxHeadDim (latent form:
// kAttnMaxLatentDim, kAttnMaxLatentDimV); k, v, strides 16-byte aligned; n_head %
// n_head_kv == 0.
void attention_prefill(const AttnPrefillArgs& a, StreamHandle stream);

// Writes n_tokens rows of keys and values into F16 caches: row t (k: k_width floats, v:
// v_width) goes to position pos[t] (device int32), rounded to nearest even.
void store_kv_f16(const float* k, const float* v, int64_t n_tokens, int64_t k_width,
                  int64_t v_width, const int32_t* pos, uint16_t* k_cache, uint16_t* v_cache,
                  StreamHandle stream);

// store_kv_f16 of one row for each of seqs.n sequences: row i into seqs.k[i] / seqs.v[i]
// at position pos[i] (v_width 0: keys only).
void store_kv_f16_seqs(const float* k, const float* v, int64_t k_width, int64_t v_width,
                       const int32_t* pos, const AttnSeqs& seqs, StreamHandle stream);

}  // namespace hypura::compute::cuda
