// `hypura bench MODEL --prompt-file FILE [--lookup | --draft DRAFT]`: generation after a
// real text, without and with speculative decoding, in one invocation.
//
// The file's text is the user's turn of the model's chat template (a request such as "here
// is a file, give it back with this change"); the model answers greedily (no repetition
// penalty) up to n_gen tokens. Runs without and with speculation alternate, reps of each
// after one untimed warm-up of each, in one session (the text's KV cache is reused, so only
// the generation is timed). The figures per mode: generated tokens per second, and for the
// speculative runs the guesses fed and kept, the forward passes and the tokens per pass.
// Greedy output must be the same text in both modes; the table says whether it was.
//
// Thread-safety: drives one session of the engine; no other may use the engine meanwhile.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"

namespace hypura::cli {

struct SpecBenchOptions {
  std::string text;                         // the user's turn
  int n_gen = 128;                          // tokens to generate at most
  int reps = 3;                             // timed runs of each mode
  runtime::SpeculationOptions speculation;  // off: only the plain runs
};

struct SpecBenchRow {
  std::string mode;  // "plain", "lookup" or "draft"
  double tps_mean = 0, tps_stddev = 0;
  int generated = 0;        // tokens of the last run
  runtime::SpecStats spec;  // of the last run
  std::string text;         // of the last run
};

Result<std::vector<SpecBenchRow>> run_spec_bench(runtime::Engine& engine,
                                                 const SpecBenchOptions& o);

// One line per mode, then the speed-up and whether the outputs matched.
std::string spec_table(const std::vector<SpecBenchRow>& rows);
nlohmann::json spec_json(const std::vector<SpecBenchRow>& rows);

}  // namespace hypura::cli
