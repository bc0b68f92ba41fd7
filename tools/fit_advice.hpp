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

/// One way a strategy keeps model states in host memory or on NVMe: the plan fields it sets and
/// the `simulate` flags that say it. `fsdp`: PyTorch FSDP's CPUOffload (parameters and gradients).
struct OffloadChoice {
    strategies::Offload params = strategies::Offload::none, optimizer = strategies::Offload::none,
                        fsdp = strategies::Offload::none;
    std::string flags;
    bool offloads() const {
        return params != strategies::Offload::none || optimizer != strategies::Offload::none || fsdp != strategies::Offload::none;
    }
    /// The deepest tier it uses: nvme where any state goes there, else cpu (none: no offload).
    strategies::Offload tier() const {
        for (strategies::Offload o : {params, optimizer, fsdp})
            if (o == strategies::Offload::nvme) return o;
        return offloads() ? strategies::Offload::cpu : strategies::Offload::none;
    }
};

/// The offload choices of a strategy, no offload first: DeepSpeed's optimizer offload for ZeRO 1
/// and 2 (runtime/zero/stage_1_and_2.py cpu_offload), optimizer and then parameters too for ZeRO-3
/// (to NVMe as well when `nvme`: ZeRO-Infinity, stage 3 only), FSDP's CPUOffload.
std::vector<OffloadChoice> offload_choices(strategies::DataParallel s, bool nvme);
/// Sets `plan`'s offload flags to `choice` (and only to it).
void apply_offload(strategies::Plan& plan, const OffloadChoice& choice);

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
