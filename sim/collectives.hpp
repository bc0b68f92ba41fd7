// Collective algorithms, decomposed into point-to-point flows, and a tuner that picks the
// cheapest one the way NCCL's does (src/graph/tuning.cc): predicted time = base latency +
// steps × per-step latency + bytes / bandwidth, over algorithms and protocols; the cheapest wins.
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
#include <vector>

#include "core/op_graph.hpp"
#include "core/units.hpp"

namespace smol::sim {

enum class CollectiveAlgo { automatic, ring, tree, halving_doubling, hierarchical, direct };
const char* to_string(CollectiveAlgo a);
/// "auto" | "ring" | "tree" | "halving-doubling" | "hierarchical" | "direct"; bad_input otherwise.
CollectiveAlgo parse_collective_algo(const std::string& text);

enum class Protocol { ll, ll128, simple, host };
const char* to_string(Protocol p);

/// Latency and bandwidth efficiency of a protocol. NCCL figures from HARDWARE.md
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
};

/// Whether `algo` can run `kind` over `members` (halving-doubling needs a power of two;
/// hierarchical needs ≥ 2 nodes with the same number ≥ 2 of members each).
bool applicable(CollectiveAlgo algo, CollectiveKind kind, const std::vector<int>& members,
                const std::function<int(int)>& node_of);

/// The flows of one algorithm. `root` is used by broadcast and reduce. Bytes are payload; the
/// protocol's efficiency is applied by the caller.
CollectiveSchedule decompose(CollectiveKind kind, const std::vector<int>& members, Bytes bytes, int root,
                             CollectiveAlgo algo, const std::function<int(int)>& node_of);

/// Predicts a schedule's duration without contention from other transfers: base latency +
/// Σ phases (steps × step latency + the most loaded link's bytes / its bandwidth).
/// `route` gives the links between two ranks, `latency` the route latency between two ranks.
struct RouteInfo {
    std::function<std::span<const std::int32_t>(int, int)> route;
    std::function<Time(int, int)> latency;
    std::vector<Bandwidth> link_bandwidth;
};
Time step_latency(const CollectivePhase& phase, Protocol p, const RouteInfo& routes);
Time base_latency(CollectiveAlgo algo, Protocol p);
Time predict(const CollectiveSchedule& s, const RouteInfo& routes);

/// The cheapest (algorithm, protocol) for the collective, or the forced algorithm with its
/// cheapest protocol. GPU clusters choose as NCCL does: ring, tree (or hierarchical, its
/// multi-node form) over the LL / LL128 / Simple protocols; CPU clusters (MPI) also consider
/// halving-doubling and direct exchanges, over the `host` protocol.
CollectiveSchedule choose(CollectiveKind kind, const std::vector<int>& members, Bytes bytes, int root,
                          CollectiveAlgo forced, bool gpu, const std::function<int(int)>& node_of,
                          const RouteInfo& routes);

}  // namespace smol::sim
