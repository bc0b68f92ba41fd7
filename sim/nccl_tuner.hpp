// NCCL's cost model, as NCCL itself computes it (NVIDIA/nccl v2.30.7, src/graph/tuning.cc, and
// the channel search of src/graph/search.cc it reads): for every (collective, algorithm,
// protocol) a latency and an algorithm bandwidth; the predicted time of a call is
//
//     time = latency + bytes / algorithm bandwidth                    (ncclTopoGetAlgoTime)
//
// and NCCL runs the cheapest enabled pair. The simulator takes NCCL's choice and its latency,
// and caps the flows of the chosen algorithm at its bandwidth, so an uncontended collective
// takes what NCCL predicts and a contended one what the shared links allow.
//
// What NCCL's topology search finds (channels and the bandwidth per channel, `graphs[a]`) is
// derived from the cluster by the same rules, simplified (see Channels in nccl_tuner.cpp): the
// fastest speed of NCCL's speed table that the GPU's links carry, as many channels as the
// GPU's NVLink or PCIe bandwidth (single node) or the node's NICs (several nodes) hold, and
// NCCL's channel duplication. Algorithms modelled: Tree, Ring, NVLS, NVLS Tree, PAT. CollNet
// needs a SHARP network plugin and is off by default in NCCL, so it is not offered.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "core/units.hpp"

namespace smol::sim::nccl {

// The orders of NCCL's own tables (src/include/device.h, nccl.h).
enum class Algo : std::uint8_t { tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat };
inline constexpr int kAlgos = 7;
enum class Proto : std::uint8_t { ll, ll128, simple };
inline constexpr int kProtos = 3;
enum class Func : std::uint8_t { broadcast, reduce, all_gather, reduce_scatter, all_reduce };
/// NCCL's compute-capability index: Volta (7.x), Ampere (8.x, Ada included), Hopper (9.x), Blackwell (10+).
enum class Arch : std::uint8_t { volta, ampere, hopper, blackwell };
enum class CpuVendor : std::uint8_t { intel, amd, other };

const char* to_string(Algo a);
const char* to_string(Proto p);

Arch arch_of(double compute_capability);

/// A communicator as NCCL's tuner sees it.
struct Communicator {
    int ranks = 1;
    int nodes = 1;
    Arch arch = Arch::ampere;
    double compute_capability = 8.0;
    bool nvlink = true;             // GPUs of a node joined by NVLink (else PCIe): NCCL_HW_NVLINK vs NCCL_HW_PCI
    bool nvswitch = false;          // an NVSwitch (NVLS needs one)
    CpuVendor cpu = CpuVendor::intel;
    // The channel search's result (graphs[RING]; Tree searches the same channels).
    int channels = 1;
    double bw_intra = 0, bw_inter = 0;   // GB/s per channel
    // NVLS (single-node Hopper+ with NVSwitch): its own search.
    int nvls_channels = 0;
    double nvls_bw = 0;
};

/// The channel search, simplified from src/graph/search.cc (ncclTopoCompute and
/// ncclTopoDupChannels): `gpu_link_gbs` is the GPU's NVLink (or PCIe) bandwidth as NCCL's topology
/// counts it, `nic_gbs` one NIC's bandwidth, `nics_per_node` the NICs serving the communicator's
/// GPUs in a node.
Communicator make_communicator(int ranks, int nodes, double compute_capability, bool nvlink, bool nvswitch,
                               CpuVendor cpu, double gpu_link_gbs, double nic_gbs, int nics_per_node);

/// NCCL's per-link NVLink bandwidth for a compute capability (src/graph/topo.h SM*_NVLINK_BW), GB/s.
double nvlink_bw_per_link(double compute_capability);

struct Cost {
    double latency_us = -1;         // < 0: the pair is not available
    double bandwidth_gbs = 0;       // algorithm bandwidth, GB/s (10^9 B/s)
    bool enabled() const { return latency_us >= 0 && bandwidth_gbs > 0; }
};

/// Latency and bandwidth of one (function, algorithm, protocol) on a communicator
/// (ncclTopoTuneModel), before the size-dependent corrections.
Cost model(Func f, Algo a, Proto p, const Communicator& c);
/// The predicted time of a call of `bytes` (ncclTopoGetAlgoTime: tree correction factors and
/// the ring plateau included); negative when the pair is not available.
double predict_us(Func f, Algo a, Proto p, const Communicator& c, std::int64_t bytes);

struct Choice {
    Algo algo = Algo::ring;
    Proto proto = Proto::simple;
    double time_us = 0;
    double latency_us = 0;          // the latency term of time_us, corrections included
    double bandwidth_gbs = 0;       // bytes / (time − latency)
};
/// The thread blocks (CTAs) NCCL launches on each rank for a call of `bytes` run by algorithm `a`
/// and protocol `p`: one per channel (src/enqueue.cc:1756-1758, grid = nChannels), the
/// communicator's channels cut for small calls (src/enqueue.cc:2070-2099). Each block stays
/// resident on one SM for the whole call, so compute kernels beside it get the other SMs.
int thread_blocks(Algo a, Proto p, const Communicator& c, std::int64_t bytes);

/// The cheapest enabled pair, as NCCL's default tuner picks it; with `only`, the cheapest
/// protocol of that algorithm (NCCL_ALGO). time_us < 0 when nothing is enabled.
Choice choose(Func f, const Communicator& c, std::int64_t bytes, std::optional<Algo> only = std::nullopt);

}  // namespace smol::sim::nccl
