// What would fit: when a plan runs out of memory, the cheapest changes that do fit, each checked by
// simulating it — the answer DeepSpeed's memory estimators give as a table of options
// (runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs_all_live, stage3.py
// estimate_zero3_model_states_mem_needs_all_live: every offload choice with the memory it needs),
// here with the whole step simulated, activations, buffers and the runtime included.
#pragma once

#include <string>
#include <vector>

#include "core/model.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"
#include "traces/summary.hpp"

namespace smol::tools {

/// The largest plan (in ops) simulate searches changes for when it runs out of memory: a few
/// dozen analytic simulations of a million ops take a minute here.
constexpr std::size_t kFitSearchOps = 1'000'000;

/// One change of a plan: the flags that differ and the plan they give.
struct PlanChange {
    std::string flags;
    strategies::Plan plan;
    int changes = 0;   // how many of the plan's choices it changes
};

/// Changes that save device memory, fewest changes first: a strategy that shards more, offload
/// of the optimizer and parameters (to NVMe where the cluster has it), recompute, a smaller
/// micro-batch (the global batch kept). Only changes the plan's checks accept.
std::vector<PlanChange> memory_saving_changes(const Model& model, const topo::Cluster& cluster,
                                              const strategies::Plan& plan);

/// Simulates the changes (analytic network; the plan itself too, for the slowdown) and returns
/// those that fit, fewest changes first and then fastest, at most `limit`. Stops after the
/// change count at which `limit` were found.
std::vector<traces::FitOption> fitting_changes(const Model& model, const topo::Cluster& cluster,
                                               const strategies::Plan& plan, std::size_t limit = 5);

}  // namespace smol::tools
