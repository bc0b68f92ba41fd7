// Transfers priced from a calibration profile's measured curves (topologies/measured.hpp): a
// collective whose kind, group size and host span were measured, and a point-to-point transfer
// within a host or between two, take the measured time for their size (log-log interpolated)
// instead of the flow model's. The measured time already holds what the flow model builds up
// (algorithm, protocol, latencies, link rates, the MPI library's own overheads); what it does not
// hold is contention with other transfers running at the same time, so these transfers do not
// share links with concurrent flows. Everything else keeps the flow model.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/op_graph.hpp"
#include "core/units.hpp"
#include "topologies/cluster.hpp"

namespace smol::sim {

/// The measured duration of a collective over `members`, if the cluster's profile measured one
/// of its kind over as many ranks on as many hosts; `node_of` maps a rank to its host.
std::optional<Time> measured_collective_time(const topo::Cluster& cluster, CollectiveKind kind,
                                             const std::vector<int>& members, Bytes bytes,
                                             const std::function<int(int)>& node_of);
/// The measured duration of a send of `bytes` from `src` to `dst`, if profiled.
std::optional<Time> measured_p2p_time(const topo::Cluster& cluster, int src, int dst, Bytes bytes);

}  // namespace smol::sim
