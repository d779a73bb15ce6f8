// A plan for people and for programs: `hypura inspect MODEL --plan` and
// `hypura run MODEL --dry-run` print it; --json gives the same content as JSON
// (schema in docs/PLANNER.md). Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "profiler/hardware_profile.h"
#include "scheduler/model_tensors.h"
#include "scheduler/plan.h"

namespace hypura::scheduler {

// Mode, per-tier table, memory ledger, pool/prefetch/expert cache, predictions, the
// explanation, and one line per layer saying where each of its tensors lives.
std::string plan_to_text(const Plan& plan, const ModelTensors& model);

// The same, plus every tensor's tier when `tensors` is set.
nlohmann::json plan_to_json(const Plan& plan, const ModelTensors& model, bool tensors = false);

}  // namespace hypura::scheduler
