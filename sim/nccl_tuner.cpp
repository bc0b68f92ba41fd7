// Constants and formulas from NVIDIA/nccl v2.30.7 (makefiles/version.mk), file and line given
// per table; the code is ours, the numbers are NCCL's.
#include "sim/nccl_tuner.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <span>

namespace smol::sim::nccl {

namespace {

constexpr int kHwNvlink = 0, kHwPci = 1, kHwNet = 2;
constexpr int kMaxRingChannels = 32;   // src/init.cc:1177: ringGraph->maxChannels = MAXCHANNELS / 2 (MAXCHANNELS 64)

int idx(Algo a) { return static_cast<int>(a); }
int idx(Proto p) { return static_cast<int>(p); }

// src/graph/tuning.cc:151-158, baseLatencies (µs): Tree, Ring, CollNet Direct, CollNet Chain, NVLS,
// NVLS Tree, PAT × (LL, LL128, Simple).
constexpr double kBaseLat[kAlgos][kProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0},
                                               {0, 0, 0},       {0, 0, 0},        {8.0, 8.0, 8.0}};
// src/graph/tuning.cc:160-181, hwLatencies (µs) per step: NVLink, PCI, network.
constexpr double kHwLat[3][kAlgos][kProtos] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},
    {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}}};
// src/graph/tuning.cc:183-189, llMaxBws (GB/s): [Volta|Intel, Ampere|AMD, Hopper, Blackwell][1 node, 2 nodes, more].
constexpr double kLlMaxBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
// src/graph/tuning.cc:190-196, perChMaxRingLL128Bws.
constexpr double kRingLl128PerCh[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
// src/graph/tuning.cc:197-203, perChMaxTreeLL128Bws.
constexpr double kTreeLl128PerCh[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
// src/graph/tuning.cc:204-210, perChMaxTreeBws.
constexpr double kTreePerCh[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// src/graph/tuning.cc:211-217, perChMaxNVLSTreeBws.
constexpr double kNvlsTreePerCh[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
// src/graph/tuning.cc:142-147, nvlsEfficiency per architecture.
constexpr double kNvlsEfficiency[4] = {0.0, 0.0, 0.85, 0.74};
// src/graph/tuning.cc:604-609, treeCorrectionFactor per protocol, for sizes 64 B · 2^i.
constexpr double kTreeCorrection[kProtos][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

// src/graph/search.cc:1051-1064: the per-channel speeds the search tries, fastest first.
constexpr double kSpeedIntra[] = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0};
constexpr double kSpeedInter[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                  7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSm90SpeedIntra[] = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0};
constexpr double kSm90SpeedInter[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                      15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSm100SpeedIntra[] = {90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
constexpr double kSm100SpeedInter[] = {96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0,
                                       20.0, 17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};

std::span<const double> speeds(Arch arch, bool inter) {
    switch (arch) {
        case Arch::hopper: return inter ? std::span<const double>(kSm90SpeedInter) : std::span<const double>(kSm90SpeedIntra);
        case Arch::blackwell: return inter ? std::span<const double>(kSm100SpeedInter) : std::span<const double>(kSm100SpeedIntra);
        default: return inter ? std::span<const double>(kSpeedInter) : std::span<const double>(kSpeedIntra);
    }
}

/// The fastest speed of the table no greater than `limit` (the slowest one when none is).
double fastest_within(std::span<const double> table, double limit) {
    for (double s : table)
        if (s <= limit) return s;
    return table.back();
}

int log2i(long long n) { return n <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned long long>(n)) - 1); }

int steps(Func f, int ranks) {
    switch (f) {
        case Func::all_reduce: return 2 * (ranks - 1);
        case Func::reduce_scatter:
        case Func::all_gather: return ranks - 1;
        default: return ranks;
    }
}

double net_overhead(CpuVendor cpu) {
    // src/graph/tuning.cc:228-233 (getNetOverhead): a network post costs 1 µs on Intel, 2 µs on AMD.
    return cpu == CpuVendor::amd ? 2.0 : 1.0;
}

bool pat_enabled(const Communicator& c) {
    // src/graph/tuning.cc:219-226: PAT needs one GPU per node (and SM60+, a host network device).
    return c.compute_capability >= 6.0 && c.nodes == c.ranks;
}

bool ll128_enabled(const Communicator& c) {
    // src/graph/tuning.cc:549-566: LL128 only where GPUs talk over NVLink (typeIntra ≤ PATH_NVB)
    // and the NIC sits under the GPU's PCIe switch (typeInter ≤ PXB, or PXN on Hopper+), on SM70+.
    return c.nvlink && c.compute_capability >= 7.0;
}

}  // namespace

const char* to_string(Algo a) {
    switch (a) {
        case Algo::tree: return "tree";
        case Algo::ring: return "ring";
        case Algo::collnet_direct: return "collnet-direct";
        case Algo::collnet_chain: return "collnet-chain";
        case Algo::nvls: return "nvls";
        case Algo::nvls_tree: return "nvls-tree";
        case Algo::pat: return "pat";
    }
    return "?";
}

const char* to_string(Proto p) {
    switch (p) {
        case Proto::ll: return "LL";
        case Proto::ll128: return "LL128";
        case Proto::simple: return "Simple";
    }
    return "?";
}

Arch arch_of(double cc) {
    return cc >= 10.0 ? Arch::blackwell : cc >= 9.0 ? Arch::hopper : cc >= 8.0 ? Arch::ampere : Arch::volta;
}

double nvlink_bw_per_link(double cc) {
    // src/graph/topo.h:19-24 (SM60 18, SM70 20, SM80 20, SM86 12, SM90 20.6, SM100 40.1 GB/s).
    if (cc >= 10.0) return 40.1;
    if (cc >= 9.0) return 20.6;
    if (cc >= 8.6 && cc < 8.7) return 12.0;
    if (cc >= 7.0) return 20.0;
    return 18.0;
}

Communicator make_communicator(int ranks, int nodes, double cc, bool nvlink, bool nvswitch, CpuVendor cpu,
                               double gpu_link_gbs, double nic_gbs, int nics_per_node) {
    Communicator c;
    c.ranks = ranks;
    c.nodes = nodes;
    c.compute_capability = cc;
    c.arch = arch_of(cc);
    c.nvlink = nvlink;
    c.nvswitch = nvswitch;
    c.cpu = cpu;
    // Ring search (src/graph/search.cc:1150-1290, simplified): the fastest speed the links carry,
    // then as many channels as they hold. One node: every channel crosses each GPU's NVLink (or
    // PCIe) once. Several nodes: every channel leaves the node through one NIC at that speed,
    // and the intra-node part may run up to twice as fast (the search's last pass raises bwIntra
    // while bwIntra < 2·bwInter, search.cc:1279).
    if (nodes <= 1) {
        const double s = fastest_within(speeds(c.arch, false), gpu_link_gbs);
        c.channels = std::clamp(static_cast<int>(gpu_link_gbs / s), 1, kMaxRingChannels);
        c.bw_intra = c.bw_inter = s;
    } else {
        const double s = fastest_within(speeds(c.arch, true), std::min(nic_gbs, gpu_link_gbs));
        const int per_nic = std::max(1, static_cast<int>(nic_gbs / s));
        c.channels = std::clamp(std::max(1, nics_per_node) * per_nic, 1, kMaxRingChannels);
        c.bw_inter = s;
        c.bw_intra = fastest_within(speeds(c.arch, false), std::min(2 * s, gpu_link_gbs / c.channels));
        c.bw_intra = std::max(c.bw_intra, s);
    }
    // Channel duplication (search.cc:1036-1049, ncclTopoDupChannels): fast channels are doubled at
    // half the bandwidth each, except on Hopper+ when they are under 50 GB/s and more than 4.
    const bool dup = c.bw_intra >= 25.0 && !(cc > 8.0 && c.bw_intra < 50.0 && c.channels > 4);
    if (dup) {
        const int doubled = std::min(2 * c.channels, kMaxRingChannels);
        const int div = (doubled + c.channels - 1) / c.channels;
        c.bw_intra /= div;
        c.bw_inter /= div;
        c.channels = doubled;
    }
    // NVLS (Hopper+ with an NVSwitch, src/graph/search.cc:1120-1137): one channel per GPU of the
    // node (maxChannels = minChannels = GPUs when alone), at the fastest speed that fits the
    // GPU's NVLink bandwidth raised by n/(n−1) (non-ring patterns do not return to the start).
    const int per_node = nodes > 0 ? ranks / nodes : ranks;
    if (c.arch >= Arch::hopper && nvswitch && per_node >= 2) {
        c.nvls_channels = std::min(32, per_node);
        const double total = gpu_link_gbs * per_node / (per_node - 1.0);
        c.nvls_bw = fastest_within(speeds(c.arch, false), std::min(gpu_link_gbs, total / c.nvls_channels));
    }
    return c;
}

Cost model(Func f, Algo a, Proto p, const Communicator& c) {
    Cost out;
    const int n = c.ranks, nodes = c.nodes;
    if (n <= 1) return out;
    // Which (function, algorithm, protocol) exist (tuning.cc:287-297) and are enabled by default
    // (tuning.cc:511-566): CollNet needs a network plugin; NVLS Tree needs several nodes; NVLS
    // runs on one node here (multi-node NVLS needs CollNet); LL128 needs NVLink.
    if ((f == Func::broadcast || f == Func::reduce) && a != Algo::ring) return out;
    if ((f == Func::reduce_scatter || f == Func::all_gather) && a != Algo::pat && a != Algo::ring && a != Algo::nvls)
        return out;
    if (f == Func::all_reduce && a == Algo::pat) return out;
    if (a == Algo::collnet_direct || a == Algo::collnet_chain) return out;
    if ((a == Algo::nvls || a == Algo::nvls_tree) && p != Proto::simple) return out;
    if (a == Algo::pat && (p != Proto::simple || !pat_enabled(c))) return out;
    if (a == Algo::nvls && (nodes > 1 || c.nvls_channels < 2)) return out;
    if (a == Algo::nvls_tree && (nodes == 1 || c.nvls_channels < 2)) return out;
    if (p == Proto::ll128 && !ll128_enabled(c)) return out;

    const int ci = static_cast<int>(c.arch);
    const int i2 = nodes <= 2 ? nodes - 1 : 2;
    const int i1 = nodes == 1 ? ci : (c.cpu == CpuVendor::amd ? 1 : 0);
    const double ppn = static_cast<double>(n) / nodes;
    const int nsteps = steps(f, n);
    const bool nvls_family = a == Algo::nvls || a == Algo::nvls_tree;
    const int channels = nvls_family ? c.nvls_channels : c.channels;

    // Bandwidth (tuning.cc:299-385).
    double bw = nodes <= 2 ? c.bw_intra : c.bw_inter;
    if (nvls_family) {
        double intra = c.nvls_bw * kNvlsEfficiency[ci] * (channels - 1) / channels;
        intra *= f == Func::all_reduce ? 2.0 : (ppn - 1) / ppn;
        const double inter = c.nvls_bw * ((nodes <= 2 && a == Algo::nvls_tree) ? 2 : 1);
        bw = std::min({intra, inter, a == Algo::nvls_tree ? kNvlsTreePerCh[ci][i2] : std::numeric_limits<double>::max()});
    }
    double bus = channels * bw;
    if (a == Algo::ring && p == Proto::ll) bus = std::min(kLlMaxBw[i1][i2], bus * 0.5);
    if (a == Algo::ring && p == Proto::ll128) bus = std::min(bus * 0.92, channels * kRingLl128PerCh[ci][i2]);
    if (a == Algo::tree && f == Func::all_reduce) bus = std::min(bus * 0.92, channels * kTreePerCh[ci][i2]);
    if (a == Algo::tree && p == Proto::ll) bus = std::min(bus / 3.8, kLlMaxBw[i1][i2]);
    if (a == Algo::tree && p == Proto::ll128)
        bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), channels * kTreeLl128PerCh[ci][i2]);
    if (a == Algo::pat) bus *= 0.75;
    // Bus bandwidth to algorithm bandwidth, except for non-ring all-gather / reduce-scatter.
    if (!(a != Algo::ring && (f == Func::all_gather || f == Func::reduce_scatter)))
        bus *= (a == Algo::ring || nvls_family) ? static_cast<double>(n) / nsteps : 0.5;
    out.bandwidth_gbs = bus;

    // Latency (tuning.cc:387-455). A ring's intra-node steps pay at least one network post per
    // step when the ring spans nodes (×3 with Simple).
    double lat = kBaseLat[idx(a)][idx(p)];
    const int intra_hw = c.nvlink ? kHwNvlink : kHwPci;
    double intra_lat = kHwLat[intra_hw][idx(a)][idx(p)];
    const double inter_lat = ppn == 1 ? kHwLat[kHwNet][idx(Algo::tree)][idx(p)] : kHwLat[kHwNet][idx(a)][idx(p)];
    switch (a) {
        case Algo::ring:
            if (f == Func::reduce || f == Func::broadcast) {
                lat += kHwLat[nodes == 1 ? intra_hw : kHwNet][idx(a)][idx(p)];
            } else {
                if (nodes > 1) intra_lat = std::max(intra_lat, net_overhead(c.cpu) * (p == Proto::simple ? 3 : 1));
                const int inter_steps = nodes == 1 ? 0 : f == Func::all_reduce ? 2 * (nodes - 1) : nodes - 1;
                lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
            }
            break;
        case Algo::tree:
            if (f == Func::all_reduce) lat += 2 * ((n / nodes - 1) * intra_lat + log2i(nodes) * inter_lat);
            break;
        case Algo::nvls:
            lat = intra_lat + (nodes > 1 ? inter_lat : 0);
            break;
        case Algo::nvls_tree:
            lat += intra_lat + 2 * log2i(nodes) * inter_lat;
            break;
        case Algo::pat:
            lat += log2i(nodes) * (inter_lat / 3.5) + n * 2.8;
            break;
        default: break;
    }
    out.latency_us = lat;
    return out;
}

namespace {

/// The latency and bandwidth ncclTopoGetAlgoTime uses for a call of `bytes` (tuning.cc:612-636):
/// the tree correction factors and the plateau of multi-node Simple rings applied.
Cost corrected(Func f, Algo a, Proto p, const Communicator& c, std::int64_t bytes) {
    Cost cost = model(f, a, p, c);
    if (!cost.enabled()) return cost;
    const int log_size = log2i(bytes >> 6);
    if (a == Algo::tree && f == Func::all_reduce && (bytes >> 6) > 0 && log_size < 23)
        cost.bandwidth_gbs *= kTreeCorrection[idx(p)][log_size];
    // comm->nChannels is twice the ring graph's channels (src/graph/connect.cc:460).
    const double comm_channels = std::min(64, 2 * c.channels);
    if (a == Algo::ring && p == Proto::simple && c.nodes > 1 && f == Func::all_reduce &&
        static_cast<double>(bytes) / (comm_channels * c.ranks) >= 64)
        cost.latency_us *= c.compute_capability < 8.0 ? 1.9 : 1.4;
    return cost;
}

}  // namespace

double predict_us(Func f, Algo a, Proto p, const Communicator& c, std::int64_t bytes) {
    const Cost cost = corrected(f, a, p, c, bytes);
    if (!cost.enabled()) return -1;
    return cost.latency_us + static_cast<double>(bytes) / (1000.0 * cost.bandwidth_gbs);
}

int thread_blocks(Algo a, Proto p, const Communicator& c, std::int64_t bytes) {
    if (c.ranks <= 1) return 0;
    // comm->nChannels: twice the ring graph's channels (src/graph/connect.cc:460), doubled again on
    // Hopper+ across nodes while under 16 with fast intra-node channels (connect.cc:480-483).
    int channels = std::min(64, 2 * c.channels);
    if (c.compute_capability >= 9.0 && c.nodes > 1 && c.bw_intra > 45.0 && channels < 16) channels *= 2;
    if (a == Algo::nvls || a == Algo::nvls_tree) {
        // comm->nvlsChannels (src/transport/nvls.cc:155-157, 205-214): 16 on Hopper, 24 on one
        // Blackwell node, 32 across nodes; NVLS across nodes uses no more than the ring's
        // (src/enqueue.cc:2085-2090).
        const int nvls = c.arch == Arch::blackwell ? (c.nodes > 1 ? 32 : 24) : 16;
        return a == Algo::nvls && c.nodes > 1 ? std::min(nvls, channels) : nvls;
    }
    // Threads per block (src/graph/tuning.cc:244-257; src/include/device.h:93-114): Simple rings 512
    // (256 where the ring's channels carry no more than PCIe Gen3, PCI_BW 12 GB/s, topo.h:25),
    // Simple trees 512, LL 512, LL128 640; PAT's is not set there, so its channels are never cut.
    int threads = 0;
    if (p == Proto::simple && a == Algo::ring) threads = c.bw_intra * c.channels <= 12.0 ? 256 : 512;
    else if (p == Proto::simple && a == Algo::tree) threads = 512;
    else if (p == Proto::ll && a != Algo::pat) threads = 512;
    else if (p == Proto::ll128 && a != Algo::pat) threads = 640;
    // Bytes per thread before another channel is used (src/graph/tuning.cc:586-593;
    // src/include/comm.h:49-51): LL 8 (times the ranks on a ring), LL128 8, Simple 64.
    std::int64_t threshold = p == Proto::simple ? 64 : 8;
    if (p == Proto::ll && a == Algo::ring) threshold *= c.ranks;
    while (channels >= 2 && bytes < static_cast<std::int64_t>(channels) * threads * threshold) --channels;
    return channels;
}

Choice choose(Func f, const Communicator& c, std::int64_t bytes, std::optional<Algo> only) {
    Choice best;
    best.time_us = -1;
    for (int ai = 0; ai < kAlgos; ++ai)
        for (int pi = 0; pi < kProtos; ++pi) {
            const auto a = static_cast<Algo>(ai);
            if (only && a != *only) continue;
            const auto p = static_cast<Proto>(pi);
            const Cost cost = corrected(f, a, p, c, bytes);
            if (!cost.enabled()) continue;
            const double t = cost.latency_us + static_cast<double>(bytes) / (1000.0 * cost.bandwidth_gbs);
            if (best.time_us >= 0 && t >= best.time_us) continue;  // ties keep NCCL's first (lowest) index
            best = {a, p, t, cost.latency_us, cost.bandwidth_gbs};
        }
    return best;
}

}  // namespace smol::sim::nccl
