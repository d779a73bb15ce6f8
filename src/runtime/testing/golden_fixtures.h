// The tiered tests' starting point over the golden models (model/testing/golden.h): the
// fixture TieredWeights options and a golden model with the RAM its resident plan needs.
// For the tests of runtime/ and above only (needs HYPURA_GOLDEN_DIR).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/testing/golden.h"
#include "runtime/tiered_weights.h"
#include "synth/synth.h"

namespace hypura::runtime::golden {

using model::golden::argmax;
using model::golden::compare;
using model::golden::Diff;
using model::golden::forward_logits;
using model::golden::kDir;
using model::golden::margin;
using model::golden::Model;
using model::golden::open_model;
using model::golden::read_f32_file;
using model::golden::sequence;
using model::golden::top1;
using model::golden::Top1;

// A folder of this test process's own, removed when the process exits: models a test
// binary writes once per process live here (ctest runs a file's tests in parallel
// processes, and a 27 MB model left behind per run fills /tmp).
inline const std::string& process_temp_dir() {
  struct Dir {
    std::string path = ::testing::TempDir() + "/hypura-test-" + std::to_string(::getpid());
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// `hypura synth`'s preset in `mix` with the golden models' 384-token vocabulary, at path.
inline Status write_synth(const std::string& preset_name, synth::QuantMix mix,
                          const std::string& path) {
  HYPURA_ASSIGN_OR_RETURN(const synth::Preset preset, synth::find_preset(preset_name));
  synth::SynthSpec spec;
  spec.arch = preset.default_arch;
  HYPURA_ASSIGN_OR_RETURN(spec.shape, synth::preset_shape(preset, spec.arch));
  spec.mix = mix;
  spec.vocab_from = kDir + "/llama-f32.gguf";
  HYPURA_ASSIGN_OR_RETURN(const auto vocab, synth::load_vocab(spec.vocab_from, 0));
  spec.shape.n_vocab = vocab.n_vocab;
  HYPURA_ASSIGN_OR_RETURN(const auto valid, synth::validate(spec));
  return synth::write_model(valid, vocab, path);
}

// TieredWeights options of the tiered tests: the fixture profile (the same plan on every
// machine, no storage benchmark), a small context and batch, no mlock.
inline TierOptions fixture_tier_options() {
  TierOptions opts;
  // The checkout's copy where the built-in path is absent (a device machine's checkout).
  const std::string profile = "src/scheduler/testdata/cpu_24g.json";
  const std::string built_in = std::string(HYPURA_SOURCE_DIR) + "/" + profile;
  opts.plan.profile_file = std::ifstream(built_in).good() ? built_in : profile;
  opts.plan.budgets.n_ctx = 64;
  opts.plan.budgets.n_batch = 16;
  opts.lock_resident = false;
  return opts;
}

// Where the tiered tests start: a golden model, the first ten tokens of sequence "B", the
// fixture options, and the RAM that the resident plan under those options needs (the
// model is loaded once to check that plan is full-resident and streams nothing, then
// released). A failure fails the test and leaves `resident_ram` 0.
struct TieredStart {
  Model m;
  std::vector<int32_t> tokens;
  TierOptions opts;
  uint64_t resident_ram = 0;
};

inline TieredStart tiered_start(const std::string& name) {
  TieredStart s;
  s.m = open_model(name);
  if (s.m.model == nullptr) return s;
  s.tokens = sequence("B");
  s.tokens.resize(10);
  s.opts = fixture_tier_options();
  auto roomy = TieredWeights::load(s.m.file, s.opts);
  if (!roomy.is_ok()) {
    ADD_FAILURE() << roomy.status().message();
    return s;
  }
  const TieredWeights& w = *roomy.value();
  if (w.mode() != "full-resident" || w.streamed_bytes_per_pass() != 0) {
    ADD_FAILURE() << "the roomy plan is " << w.mode() << " streaming "
                  << w.streamed_bytes_per_pass() << " B per pass, not full-resident";
    return s;
  }
  s.resident_ram = w.plan().memory.ram_total();
  return s;
}

}  // namespace hypura::runtime::golden
