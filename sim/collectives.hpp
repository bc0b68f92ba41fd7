// Collective algorithms, decomposed into point-to-point flows, and the choice among them.
//
// GPUs run NCCL: its own tuner (sim/nccl_tuner, a transcription of src/graph/tuning.cc) picks
// the algorithm and protocol and predicts latency + bytes / bandwidth; the chosen algorithm's
// flows are laid out as NCCL lays out its channels — rings through every GPU of a node that
// leave it on every rail (one flow per NIC, PXN-style), trees that chain a node's GPUs and join
// nodes by a double binary tree, NVLS through the NVSwitch, PAT for one GPU per node — and
// capped at NCCL's bandwidth, so an uncontended collective takes what NCCL predicts and a
// contended one what the links allow. `hierarchical`, `halving-doubling` and `direct` are not
// NCCL algorithms: they are run only when asked for (MiCS / ZeRO++-style hierarchical
// collectives; MPI's), with the Simple protocol's step latencies.
//
// CPU clusters run MPI: ring, tree, halving-doubling, hierarchical and direct exchanges priced
// with the topology's own latencies (the `host` protocol), the cheapest one chosen.
//
// A schedule is a list of phases run one after the other; a phase is a set of flows that run
// concurrently (a pipelined algorithm's steps merged into one flow per pair: the 2(p−1) ring
// steps of an all-reduce each move S/p from rank i to i+1, so the ring is one phase of p flows
// of 2(p−1)/p·S) plus `steps` latency-bearing steps.
//
// Sizes follow nccl-tests: `bytes` is the whole buffer S (for reduce-scatter the input, for
// all-gather the output).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/op_graph.hpp"
#include "core/units.hpp"
#include "sim/nccl_tuner.hpp"
#include "topologies/cluster.hpp"

namespace smol::sim {

enum class CollectiveAlgo { automatic, ring, tree, halving_doubling, hierarchical, direct, nvls, pat };
const char* to_string(CollectiveAlgo a);
/// "auto" | "ring" | "tree" | "halving-doubling" | "hierarchical" | "direct" | "nvls" | "pat";
/// bad_input otherwise.
CollectiveAlgo parse_collective_algo(const std::string& text);

enum class Protocol { ll, ll128, simple, host };
const char* to_string(Protocol p);

/// Latency and bandwidth efficiency of a protocol. NCCL figures from NVIDIA/nccl src/graph/tuning.cc
/// (NVIDIA/nccl src/graph/tuning.cc, v2.30); `host` is MPI over the host network stack, whose
/// latency is the route's own (switch and link latencies of the topology).
struct ProtocolCosts {
    Time base_ring, base_tree;   // once per collective
    Time hop_intra, hop_net;     // per step, inside a node / across the network
    double efficiency;           // fraction of link bandwidth carrying payload
};
const ProtocolCosts& protocol_costs(Protocol p);

struct FlowSpec {
    std::int32_t src, dst;   // ranks
    Bytes bytes;
};

struct CollectivePhase {
    std::vector<FlowSpec> flows;
    int steps = 1;           // latency-bearing steps
    bool crosses_network = false;
};

struct CollectiveSchedule {
    CollectiveAlgo algo = CollectiveAlgo::ring;
    Protocol protocol = Protocol::simple;
    std::vector<CollectivePhase> phases;
    /// NCCL's own algorithms: its predicted latency (the whole latency term, before the flows)
    /// and bandwidth time (bytes / algorithm bandwidth, which caps the flows; one phase).
    bool nccl = false;
    Time latency;
    Time bandwidth_time;
    /// NCCL's thread blocks on each member while the call runs, one SM each (nccl::thread_blocks);
    /// 0 for the rest (MPI, and the grouped sends and receives of all-to-all, which are not counted).
    int thread_blocks = 0;
};

struct RouteInfo;

/// What the routes of a phase's flows give whatever the bytes: the longest route latency and,
/// per link, how many of the flows cross it. A collective over every rank of a cluster is priced
/// once per distinct size (each gradient bucket) and, on CPUs, for every MPI algorithm the tuner
/// tries: the endpoints repeat, only the bytes change, so the routes are looked up once per set of
/// endpoints instead of once per flow of every prediction.
class PhaseRouteCache {
public:
    struct Routes {
        Time wire;                                                   // the longest route latency
        std::vector<std::pair<std::int32_t, std::uint32_t>> links;   // (link, flows crossing it)
    };
    /// The routes of `phase`'s flows (found, the first time these endpoints are seen, by `routes`).
    const Routes& of(const CollectivePhase& phase, const RouteInfo& routes);

private:
    struct Stored {
        std::vector<std::int32_t> ends;   // src, dst of every flow, in order
        Routes routes;
    };
    std::unordered_map<std::uint64_t, std::vector<Stored>> by_hash_;
    std::vector<std::uint32_t> count_;    // scratch, per link
};

/// `route` gives the links between two ranks, `latency` the route latency between two ranks.
/// `cache`, where given, keeps what the routes of each phase give (its owner outlives the calls).
struct RouteInfo {
    std::function<std::span<const std::int32_t>(int, int)> route;
    std::function<Time(int, int)> latency;
    std::vector<Bandwidth> link_bandwidth;
    PhaseRouteCache* cache = nullptr;
};

/// Where ranks sit, which the algorithms need: nodes, NICs (rails), the cluster's devices and
/// links (NCCL's communicator), and the routes.
struct CollectiveContext {
    std::function<int(int)> node_of;   // rank → node
    std::function<int(int)> nic_of;    // rank → global NIC id (the rail it reaches the network by)
    RouteInfo routes;
    bool gpu = false;                  // NCCL (any GPU in the cluster) or MPI
    const topo::Cluster* cluster = nullptr;
};

/// Whether `algo` can run `kind` over `members` (halving-doubling needs a power of two;
/// hierarchical needs ≥ 2 nodes with the same number ≥ 2 of members each; nvls one node of
/// Hopper+ GPUs on an NVSwitch; pat one GPU per node).
bool applicable(CollectiveAlgo algo, CollectiveKind kind, const std::vector<int>& members, const CollectiveContext& ctx);

/// The flows of one algorithm. `root` is used by broadcast and reduce. Bytes are payload; the
/// protocol's efficiency is applied by the caller.
CollectiveSchedule decompose(CollectiveKind kind, const std::vector<int>& members, Bytes bytes, int root,
                             CollectiveAlgo algo, const CollectiveContext& ctx);

/// Predicts a schedule's duration without contention from other transfers: NCCL's latency plus
/// the longer of its bandwidth time and the most loaded link's time; otherwise base latency +
/// Σ phases (steps × step latency + the most loaded link's bytes / its bandwidth).
Time step_latency(const CollectivePhase& phase, Protocol p, const RouteInfo& routes);
Time base_latency(CollectiveAlgo algo, Protocol p);
Time predict(const CollectiveSchedule& s, const RouteInfo& routes);

/// NCCL's communicator for `members` (sim/nccl_tuner), from the cluster.
nccl::Communicator nccl_communicator(const std::vector<int>& members, const CollectiveContext& ctx);

/// The collective as it will run: on GPUs NCCL's choice (or the forced algorithm with its
/// cheapest protocol); on CPUs the cheapest MPI algorithm over the `host` protocol.
CollectiveSchedule choose(CollectiveKind kind, const std::vector<int>& members, Bytes bytes, int root,
                          CollectiveAlgo forced, const CollectiveContext& ctx);

}  // namespace smol::sim
