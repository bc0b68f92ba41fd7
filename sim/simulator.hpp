// simulate(): runs an op graph on a described cluster and returns its Timeline.
//
// An op starts when every op it depends on has finished (stream order is an edge of the graph).
// Compute ops take their roofline time; a collective starts when all members have reached it and
// runs as its algorithm's phases of flows; a send and its receive start together when both are
// ready (rendezvous); copies are flows between a device and a memory tier; allocs and frees are
// instant and drive the memory model. The first allocation that does not fit is reported as the
// out-of-memory result, and the run goes on so the summary can still be printed.
//
// Two network modes: `flow` (default) shares link bandwidth max-min fairly among concurrent
// flows; `analytic` prices each transfer alone with the alpha-beta model, for fast sweeps.
// When no event is pending and ops remain, simulate() throws a deadlock Error listing the stuck
// ops per rank and what each waits for.
//
// Devices slowed by the cluster (a node group's "speed", --slow) compute their ops in time / speed,
// and --jitter multiplies each compute op's time by a factor drawn from (seed, op id)
// (sim/compute.hpp jitter_factor); slowed NICs are slower links of the topology. A stream the
// graph serves in arrival order (OpGraph::serve_in_arrival_order: a parameter server's queue)
// runs its ops one at a time as they become ready, not in the order they were added.
//
// With a calibration profile on the cluster, a collective or send whose kind, group size and host
// span were measured takes the measured time (sim/measured.hpp) instead of the flow model's.
#pragma once

#include <vector>

#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "sim/collectives.hpp"
#include "topologies/cluster.hpp"
#include "topologies/topology.hpp"

namespace smol::sim {

enum class NetworkMode { flow, analytic };
const char* to_string(NetworkMode m);
NetworkMode parse_network_mode(const std::string& text);   // "flow" | "analytic"

struct SimOptions {
    NetworkMode network = NetworkMode::flow;
    CollectiveAlgo algo = CollectiveAlgo::automatic;
    bool record_links = false;    // link utilisation samples, for traces
    /// With record_links: sample only the links that these ranks' traffic crosses (the routes of
    /// their sends, receives and collective flows, their copies and their nodes' host memory), as
    /// a trace of a few ranks of a big cluster shows them; empty: every link.
    std::vector<int> link_ranks;
    bool record_memory = true;    // every memory change, for traces
    bool record_kernel_classes = false;   // Timeline::kernel_class_time, for validation
};

/// The graph must be finalized and have as many ranks as the cluster has devices.
Timeline simulate(const OpGraph& graph, const topo::Cluster& cluster, const topo::Topology& topology,
                  const SimOptions& options = {});
/// Builds the topology from the cluster first.
Timeline simulate(const OpGraph& graph, const topo::Cluster& cluster, const SimOptions& options = {});

}  // namespace smol::sim
