// One plan end to end — build the op graph, simulate it, summarise it — as the command line,
// the tests, the benchmarks and (later) sweeps all need it.
#pragma once

#include "core/model.hpp"
#include "core/timeline.hpp"
#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "topologies/topology.hpp"
#include "traces/summary.hpp"

namespace smol::tools {

struct Simulation {
    strategies::Built built;
    Timeline timeline;
    traces::Summary summary;
};

/// What the summary needs to know about a built plan; `network` names how it was priced
/// ("flow", "analytic") or "measured" for a run.
traces::StepInfo step_info(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                           const strategies::Built& built, const std::string& network);
/// The summary of a timeline of `built` (with ps-async's mean staleness).
traces::Summary summarize_plan(const strategies::Built& built, const Timeline& timeline, const traces::StepInfo& info,
                               const strategies::Plan& plan);

/// `topology` may be null: it is then built from the cluster (pass one to reuse its routes).
Simulation simulate_plan(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                         const sim::SimOptions& options = {}, const topo::Topology* topology = nullptr);

}  // namespace smol::tools
