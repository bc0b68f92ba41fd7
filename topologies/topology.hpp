// The cluster as a graph: vertices are devices, host memories, NVMe drives, NICs and switches;
// edges are directed links, each with a bandwidth and a latency (a full-duplex cable is two
// links). Routes are shortest paths in hops; where a fabric has equal-cost paths (spines of a
// fat tree) a deterministic hash of (source, destination) picks one, like ECMP, or with
// Network::routing destination, the destination's port on its leaf modulo the spines (d-mod-k).
//
// Devices, host memories and NVMe drives are endpoints: routes never pass through them.
//
// Fabrics (built by build_topology from the Cluster):
//
//   single switch (Ethernet boards)     NVSwitch inside a node          PCIe tree (workstation)
//
//      [switch]                          gpu0 gpu1 … gpu7                 gpu0  gpu1  gpu2  gpu3
//     /  |  |  \                           \   |     /                      \    |     |    /
//   nic nic nic nic                        [ nvswitch ]                      [ pcie root ]── host
//    |   |   |   |                                                              |
//   pi0 pi1 pi2 pi3   (host = device)      gpuK ──pcie── [root] ── nicK        nic
//
//   fat tree / rail-optimized (DGX): NIC k of every node plugs into leaf k ("rail k"); leaves
//   plug into spines with uplink bandwidth = downlink bandwidth / oversubscription.
//
//        [spine0] [spine1] …
//         |  \  /  |
//       [leaf0] [leaf1] … [leaf7]
//        |  |     |  |
//       n0 n1    n0 n1      (NIC k of each node)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/units.hpp"
#include "topologies/cluster.hpp"

namespace smol::topo {

using VertexId = std::int32_t;
using LinkId = std::int32_t;

/// `shm`: the shared-memory segment through which CPU ranks of one host exchange (IntraKind::shm).
enum class VertexKind : std::uint8_t { device, host_memory, nvme, nic, nvswitch, pcie_switch, network_switch, shm };

struct Vertex {
    VertexKind kind;
    std::string name;   // "node1/gpu3", "node1/host", "node1/nic2", "leaf3", "spine0"
};

struct Link {
    VertexId from, to;
    Bandwidth bandwidth;
    Time latency;
};

class Topology {
public:
    explicit Topology(const Cluster& cluster);

    const std::vector<Vertex>& vertices() const { return vertices_; }
    const std::vector<Link>& links() const { return links_; }
    std::string link_name(LinkId l) const;   // "node0/gpu1->node0/nvswitch"

    VertexId device_vertex(int rank) const { return device_vertex_[rank]; }
    VertexId host_vertex(int rank) const;    // the host memory of rank's node
    VertexId nvme_vertex(int rank) const;    // -1 when the node has no NVMe

    /// The links from `a` to `b` in order; empty when a == b. Cached; stable across calls.
    /// Throws internal Error when there is no path.
    std::span<const LinkId> route(VertexId a, VertexId b) const;
    /// Sum of link latencies plus switch latencies along the route.
    Time route_latency(VertexId a, VertexId b) const;
    /// The smallest link bandwidth along the route (infinite rate when a == b).
    Bandwidth route_bandwidth(VertexId a, VertexId b) const;

private:
    VertexId add_vertex(VertexKind kind, std::string name);
    void add_duplex(VertexId a, VertexId b, const LinkSpec& spec);
    void compute_route(VertexId a, VertexId b) const;

    std::vector<Vertex> vertices_;
    std::vector<Link> links_;
    std::vector<std::vector<LinkId>> out_links_;       // per vertex
    std::vector<VertexId> device_vertex_;              // per rank
    std::vector<VertexId> host_vertex_of_node_;
    std::vector<VertexId> nvme_vertex_of_node_;
    std::vector<int> node_of_rank_;
    std::vector<std::int32_t> node_of_vertex_;        // per vertex: its node, -1 for a network switch
    int building_node_ = -1;                           // the node whose vertices add_vertex is adding
    Routing routing_ = Routing::ecmp;
    int nodes_per_leaf_ = 1;                           // of the fat tree (every node where it has one leaf per rail)
    Time switch_latency_;
    mutable std::unordered_map<std::uint64_t, std::vector<LinkId>> routes_;
};

}  // namespace smol::topo
