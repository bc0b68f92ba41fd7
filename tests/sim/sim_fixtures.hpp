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

/// One node of `gpus` GPUs on a PCIe root (80 GiB each, 25 GB/s slots), host DRAM of
/// `host_gbps` GB/s read at `host_efficiency` by streaming passes, and — when `host_gflops` > 0
/// — host cores of that fp32 peak.
inline topo::Cluster gpu_node_cluster(int gpus, double host_gbps, double host_gflops = 0, double host_efficiency = 0.5) {
    const std::string cpu = host_gflops > 0 ? R"("host_cpu": {"peak": ")" + std::to_string(host_gflops) +
                                                  R"( GFLOP/s", "memory_efficiency": )" + std::to_string(host_efficiency) + "},"
                                            : R"("host_cpu": {"memory_efficiency": )" + std::to_string(host_efficiency) + "},";
    const std::string text = R"({
      "name": "gpu-node", "description": "test", "sources": ["test"],
      "device_kinds": {"gpu": {"peak": {"bf16": "100 TFLOP/s", "fp32": "10 TFLOP/s"}, "memory": "80 GiB",
                               "memory_bandwidth": "1000 GB/s", "launch_overhead": "0 us", "compute_capability": 8.0}},
      "node_groups": [{"name": "n", "count": 1, "device": "gpu", "devices_per_node": )" + std::to_string(gpus) + R"(, )" + cpu + R"(
                       "host_memory": "1 TiB", "host_memory_bandwidth": ")" + std::to_string(host_gbps) + R"( GB/s",
                       "intra": {"kind": "pcie", "bandwidth": "25 GB/s", "latency": "0 us"},
                       "host_link": {"bandwidth": "25 GB/s", "latency": "0 us"},
                       "nics": {"count": 1, "bandwidth": "10 GB/s", "latency": "0 us"}}],
      "network": {"fabric": "switch", "switch_latency": "0 us"}})";
    return topo::cluster_from_json(JsonView(parse_json_text(text, "gpu-node.json"), "gpu-node.json"));
}

}  // namespace smol::test
