// Small clusters and graphs for the simulator tests, built from their figures so each test can
// compute its expectation by hand.
#pragma once

#include <string>

#include "core/json.hpp"
#include "topologies/cluster.hpp"

namespace smol::test {

/// `nodes` CPU boards on one switch: NIC `nic_gbps` GB/s per direction with `nic_us` latency per
/// NIC hop, `switch_us` per switch; the board's own link to its NIC is fast and free.
inline topo::Cluster uniform_switch_cluster(int nodes, double nic_gbps, double nic_us, double switch_us,
                                           double comm_slowdown = 1.0) {
    const std::string text = R"({
      "name": "uniform", "description": "test", "sources": ["test"],
      "device_kinds": {"board": {"cpu": true, "peak": {"fp32": "100 GFLOP/s"}, "memory": "8 GB",
                                 "memory_bandwidth": "20 GB/s", "unified_memory": true, "launch_overhead": "0 us",
                                 "gemm_efficiency": 1.0, "gemm_half_dim": 0.000001, "memory_efficiency": 1.0,
                                 "comm_slowdown": )" + std::to_string(comm_slowdown) + R"(}},
      "node_groups": [{"name": "b", "count": )" + std::to_string(nodes) + R"(, "device": "board", "devices_per_node": 1,
                       "host_memory": "8 GB", "host_memory_bandwidth": "20 GB/s", "intra": {"kind": "none"},
                       "host_link": {"bandwidth": "1000 GB/s", "latency": "0 us"},
                       "nics": {"count": 1, "bandwidth": ")" + std::to_string(nic_gbps) + R"( GB/s", "latency": ")" +
                             std::to_string(nic_us) + R"( us"}}],
      "network": {"fabric": "switch", "switch_latency": ")" + std::to_string(switch_us) + R"( us"}})";
    return topo::cluster_from_json(JsonView(parse_json_text(text, "uniform.json"), "uniform.json"));
}

}  // namespace smol::test
