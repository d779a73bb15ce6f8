// `hypura bench MODEL --batch 1,2,4,8`: aggregate and per-sequence speed of sequences
// decoded at once (continuous batching, runtime/step_batcher.h), like llama-batched-bench.
//
// For each batch size B, B sessions of the engine each take a prompt of n_prompt random
// tokens (all prompts at once, so their chunks share steps), wait for each other, then each
// generates n_gen tokens greedily on its own thread; the steps of the engine serve them
// together. Figures per B: prompt tokens per second over all sequences, generated tokens
// per second over all sequences and per sequence, sequences per step, and the bytes the
// tiers read per generated token (a streamed model reads its weights once per step, so
// this falls as 1/B).
//
// Thread-safety: run_batch_bench drives the engine from B threads and returns when all
// are done; no other session may use the engine meanwhile.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"

namespace hypura::cli {

struct BatchBenchOptions {
  std::vector<int> batches;  // sequence counts, e.g. 1,2,4,8
  int n_prompt = 32;         // prompt tokens per sequence (>= 1)
  int n_gen = 32;            // generated tokens per sequence
  int reps = 1;              // timed runs per batch size (after one untimed warm-up)
};

struct BatchRow {
  int batch = 0;
  double pp_tps = 0;          // prompt tokens of all sequences / prompt wall time
  double tg_tps = 0;          // generated tokens of all sequences / generation wall time
  double tg_tps_per_seq = 0;  // mean over sequences of n_gen / its own generation time
  double tg_tps_stddev = 0;   // of tg_tps over the runs
  double seqs_per_step = 0;   // of the generation steps
  // Share of the generation's wall time inside forward passes; the rest is the host's
  // hand-over between steps (logits out, the members' picks, gathering the next step).
  double pass_share = 0;
  double read_bytes_per_token = 0;  // storage reads per generated token (0: nothing streams)
};

Result<std::vector<BatchRow>> run_batch_bench(runtime::Engine& engine, const BatchBenchOptions& o);

// The table bench prints: one line per batch size, with the speed-up against B = 1 when
// the list has it.
std::string batch_table(const std::vector<BatchRow>& rows, const BatchBenchOptions& o);
nlohmann::json batch_json(const std::vector<BatchRow>& rows, const BatchBenchOptions& o);

}  // namespace hypura::cli
