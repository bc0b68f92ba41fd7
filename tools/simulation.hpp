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

/// `topology` may be null: it is then built from the cluster (pass one to reuse its routes).
Simulation simulate_plan(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                         const sim::SimOptions& options = {}, const topo::Topology* topology = nullptr);

}  // namespace smol::tools
