// The Engine and Session of session.h in this process: every mode the plan picks (resident,
// dense streaming, expert streaming) on the CPU or the GPU forward pass.
//
// LocalEngine loads a model (GGUF directory, hyperparameters and tensor map, tokenizer
// and chat template; the weights placed by the plan through TieredWeights, and on the GPU
// by DeviceWeights when the device decision says so) and owns the compute context;
// LocalSession owns a KV cache and a Forward (scratch) and remembers which tokens its
// cache holds, so generate() reuses the longest common prefix.
//
// Thread-safety: sessions of one engine share its compute pool and one Forward through
// the engine's StepBatcher (step_batcher.h), which runs one step at a time for every
// session that has tokens waiting, so sessions may be used from different threads.
#pragma once

#include <string>

#include "runtime/session.h"

namespace hypura::runtime {

// Physical cores of this machine (hyper-thread siblings counted once); at least 1.
int physical_cores();

// Prompt tokens per forward call (matrix-matrix products of up to this many rows).
inline constexpr int64_t kMaxBatch = 512;
// A model split between the CPU and the GPU computes batches of at least this many tokens
// (prompts) on the GPU alone, copying the host layers' weights over the bus: a layer's copy
// (a few ms) costs what the CPU needs for a few rows of it.
inline constexpr int64_t kWidePromptRows = 32;

// The keep-back logic of stop strings: text that might begin a stop string is held until
// it is known not to. Exposed for tests.
class StopMatcher {
 public:
  explicit StopMatcher(const std::vector<std::string>& stops) : stops_(stops) {}
  // Appends text; returns what can be printed now. Sets *stopped when a stop string was
  // found (the returned text then ends right before it; the rest is dropped).
  std::string push(std::string_view text, bool* stopped);
  // The held-back text when generation ends for another reason.
  std::string flush();

 private:
  const std::vector<std::string>& stops_;
  std::string pending_;
};

}  // namespace hypura::runtime
