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

/// Memory one op costs to build and simulate, all in: the op, its edges, the CSR graph, the
/// timeline and the simulator's state. Measured: bench_model_parallel's 1,024-GPU GPT-3 plan
/// (8.4 M ops, 9.3 M edges) peaks at 818 MB RSS, 97 B per op; 128 leaves room for estimate error.
inline constexpr double kBytesPerOp = 128;

/// Refuses (out_of_range, naming --global-batch, with the figure and what to change) a plan whose
/// estimated ops (Layout::estimated_ops) need more memory than this machine has available.
void check_simulable(const strategies::Layout& layout, const strategies::Plan& plan);

/// What a cluster's --profile replaced, for a summary's notes: "profile F: measured compute and
/// memory rates; measured all_reduce over 2-8 ranks on 1 host, p2p within a host".
std::string profile_note(const topo::Cluster& cluster);

/// Checks the plan fits this machine (check_simulable), builds, simulates and summarises it;
/// on stages of different device kinds (or with --partition speed) the pipeline split is the
/// speed-balanced one (tools/pipeline_split.hpp).
/// `topology` may be null: it is then built from the cluster (pass one to reuse its routes).
Simulation simulate_plan(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                         const sim::SimOptions& options = {}, const topo::Topology* topology = nullptr);

}  // namespace smol::tools
