// A calibration profile: what `smolcluster calibrate` measured on a machine, written as JSON and
// read back (strictly: an unknown key is an error) to replace a cluster's datasheet leads.
//
//   {
//     "smolcluster_profile": 3,
//     "measured_on": {"hosts": ["pi0", "pi1"], "cpu_model": "…", "cores": 4, "nodes": 2,
//                     "ranks_per_node": 4, "blas": "OpenBLAS 0.3.21 …", "blas_threads": 1,
//                     "mpi": "Open MPI v4.1.4", "date": "2025-01-31T12:00:00Z", "quick": false,
//                     "gpu": "…the GPU, for a GPU's profile (calibrate --backend cuda)",
//                     "source": "…where the figures come from, when not from calibrate"},
//     "compute": {
//       "dispatch_s": 2.1e-7, "comm_slowdown": 1.6, "arithmetic_flops_per_s": 4.1e10,
//       "gemm": {"m": [16, 64, …], "n": […], "k": […], "flops_per_s": [… m·n·k values, k fastest]},
//       "gemm_bf16": {…}, "gemm_fp16": {…},                           (a GPU's 16-bit GEMMs)
//       "flash_forward": {…same shape, m = queries, n = keys, k = head dim},
//       "flash_backward": {…},
//       "flash_forward_causal": {…}, "flash_backward_causal": {…},   (the same, under the causal mask)
//       "stream": {"bytes": […], "bytes_per_s": […]},
//       "softmax": {"elements": […], "elements_per_s": […]},
//       "adam": {"parameters": […], "parameters_per_s": […]}
//     },
//     "memory": {"memcpy_bytes_per_s": 9.8e9, "file_read_bytes_per_s": 1.9e9,
//                "file_write_bytes_per_s": 1.1e9, "direct_io": true},
//     "network": [{"kind": "all_reduce" | … | "p2p", "ranks": 2, "nodes": 1,
//                  "bytes": […], "seconds": […]}, …],
//     "host_link": {"h2d": {"bytes": […], "seconds": […]}, "d2h": {…}}   (a GPU's pinned copies)
//   }
//
// A GPU's profile (format 3, `measured_on.gpu` set) holds the GPU's own figures: its GEMM tables
// per dtype ("gemm" is fp32 without TF32), flash attention and softmax as the CUDA backend runs
// them on bf16 elements, its streaming pass (HBM) and fused Adam, the launch interval as
// dispatch_s, no arithmetic rate or comm_slowdown (not measured there: the cluster keeps its
// leads), no "memory" section, and "host_link" instead. Its rates are each GPU's own, so it
// applies to a node of any number of GPUs.
//
// `calibrate` writes every section. A profile of published measurements may carry only some:
// "compute" and "memory" may be left out (the cluster keeps its datasheet leads for them), and of
// "measured_on" only hosts, nodes, ranks_per_node and date are required — a GPU node's NCCL curves
// have no BLAS or MPI to name (validation/vtrain-a100-nccl.json is such a profile).
//
// Applying a profile to a cluster (every node group: a profile describes one kind of host):
//   device kind  ← the measured tables (MeasuredCompute), dispatch as the launch overhead,
//                  comm_slowdown, memory bandwidth = the largest streaming pass's rate (efficiency 1);
//   host link    ← a GPU's pinned copies: an alpha-beta fit of each direction (as for links below),
//                  the slower direction's bandwidth and latency;
//   host memory  ← memcpy rate (device ↔ host copies on a CPU board are copies within DRAM);
//   NVMe         ← file read and write rates;
//   links        ← an alpha-beta fit of the point-to-point curves: latency = the smallest
//                  message's time, bandwidth = the largest message's bytes over its time less that
//                  latency; within a host on the intra link (two hops), between hosts on the NIC link;
//   network      ← the collective and point-to-point curves (sim/measured.cpp uses them for a
//                  transfer whose kind, group size and host span were measured).
// A profile measured with a different number of ranks per node than the cluster has devices per
// node is an error: the ranks share the host's cores and memory, so the rates depend on it.
#pragma once

#include <string>
#include <vector>

#include "core/json.hpp"
#include "topologies/cluster.hpp"
#include "topologies/measured.hpp"

namespace smol::topo {

struct Profile {
    // Where and how it was measured.
    std::vector<std::string> hosts;
    std::string cpu_model;
    int cores = 1;               // per host
    int nodes = 1;
    int ranks_per_node = 1;
    std::string blas;
    int blas_threads = 1;
    std::string mpi;
    std::string date;            // ISO 8601, UTC
    bool quick = false;
    std::string source;          // where published figures come from (empty: measured by calibrate)

    bool has_compute = true;     // false: no "compute" section, the device keeps its leads
    bool has_memory = true;      // false: no "memory" section, host memory and NVMe keep theirs

    MeasuredCompute compute;
    Bandwidth memcpy;            // bytes copied per second
    Bandwidth file_read, file_write;
    bool direct_io = false;      // file I/O bypassed the page cache (O_DIRECT)
    MeasuredNetwork network;
    Curve h2d, d2h;              // a GPU's pinned host ↔ device copies: bytes → seconds (empty: not measured)
};

Json to_json(const Profile& p);
Profile profile_from_json(const JsonView& json);
/// Reads a profile file; every mistake is a bad_input error naming the file and JSON path.
Profile load_profile(const std::string& path);

/// The cluster with the profile's figures in place of its leads (see the header comment).
/// `file` names the profile in errors.
Cluster apply_profile(const Cluster& cluster, const Profile& profile, const std::string& file);

}  // namespace smol::topo
