// Helpers for the data-parallel strategy tests: build + simulate, per-rank communication volume
// counted from the graph, and model-state memory peaks from the timeline.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "topologies/topology.hpp"
#include "traces/summary.hpp"
#include "tools/simulation.hpp"

namespace smol::test {

using DpRun = tools::Simulation;

inline DpRun dp_run(const Model& m, const topo::Cluster& cluster, const strategies::Plan& plan,
                    sim::SimOptions opt = {}) {
    return tools::simulate_plan(m, cluster, plan, opt);
}

/// The bytes of every collective of `kind` the graph declares (each once, for all its members).
inline std::int64_t declared_collective_bytes(const OpGraph& g, CollectiveKind kind) {
    std::int64_t n = 0;
    for (const Collective& col : g.collectives()) n += col.kind == kind ? col.bytes : 0;
    return n;
}

/// Bytes a rank sends in its collectives, by the ring algorithms' per-rank volumes (nccl-tests
/// bus-bandwidth factors): all-reduce 2(n−1)/n·S, reduce-scatter and all-gather (n−1)/n·S.
inline double collective_bytes_sent(const OpGraph& g, int rank) {
    double sent = 0;
    for (const Op& op : g.ops()) {
        if (op.kind != OpKind::collective || op.rank != rank) continue;
        const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
        const double n = static_cast<double>(g.communicators()[static_cast<std::size_t>(c.communicator)].size());
        double factor = 0;
        switch (c.kind) {
            case CollectiveKind::all_reduce: factor = 2 * (n - 1) / n; break;
            case CollectiveKind::reduce_scatter:
            case CollectiveKind::all_gather: factor = (n - 1) / n; break;
            default: FAIL("unexpected collective " << to_string(c.kind));
        }
        sent += factor * static_cast<double>(c.bytes);
    }
    return sent;
}

/// Peak, over the simulated step, of the bytes a rank holds in buffers with the given labels
/// (allocs and frees replayed in timeline order; at equal times frees first).
inline Bytes peak_of_labels(const OpGraph& g, const Timeline& tl, int rank, const std::vector<BufferLabel>& labels) {
    std::vector<std::pair<Time, std::int64_t>> events;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if ((op.kind != OpKind::alloc && op.kind != OpKind::free) || op.rank != rank) continue;
        const Buffer& b = g.buffers()[static_cast<std::size_t>(op.ref)];
        if (std::find(labels.begin(), labels.end(), static_cast<BufferLabel>(b.label)) == labels.end()) continue;
        events.emplace_back(tl.start[id], op.kind == OpKind::alloc ? b.bytes : -b.bytes);
    }
    std::sort(events.begin(), events.end());
    std::int64_t used = 0, peak = 0;
    for (const auto& [t, d] : events) {
        used += d;
        peak = std::max(peak, used);
    }
    return Bytes(peak);
}

inline const std::vector<BufferLabel> kModelStates{BufferLabel::parameters, BufferLabel::gradients,
                                                   BufferLabel::optimizer_state};

/// Bytes that left every node through its NICs, integrated from the simulator's link
/// utilisation samples (utilisation × bandwidth × time) on the NIC → switch links.
inline double inter_node_bytes(const topo::Topology& topo, const Timeline& tl) {
    const auto& links = topo.links();
    std::vector<bool> outbound(links.size());
    for (std::size_t l = 0; l < links.size(); ++l)
        outbound[l] = topo.vertices()[static_cast<std::size_t>(links[l].from)].kind == topo::VertexKind::nic &&
                      topo.vertices()[static_cast<std::size_t>(links[l].to)].kind == topo::VertexKind::network_switch;
    std::vector<std::pair<Time, float>> last(links.size(), {Time::zero(), 0.0f});
    double bytes = 0;
    auto close = [&](std::size_t l, Time until) {
        bytes += static_cast<double>(last[l].second) * links[l].bandwidth.bytes_per_second() *
                 (until - last[l].first).to_seconds();
    };
    for (const LinkSample& s : tl.links) {
        const auto l = static_cast<std::size_t>(s.link);
        if (!outbound[l]) continue;
        close(l, s.time);
        last[l] = {s.time, s.utilisation};
    }
    for (std::size_t l = 0; l < links.size(); ++l)
        if (outbound[l]) close(l, tl.makespan);
    return bytes;
}

/// `g` simulated on `cluster` with its links sampled: the bytes that left every node (above).
inline double simulated_inter_node_bytes(const OpGraph& g, const topo::Cluster& cluster) {
    const topo::Topology topo(cluster);
    sim::SimOptions opt;
    opt.record_links = true;
    opt.record_memory = false;
    return inter_node_bytes(topo, sim::simulate(g, cluster, topo, opt));
}

/// A rank's collectives split by communicator: its tensor-parallel group (the replica's tp ranks)
/// and the rest (the sharding's groups of its tensor rank: FSDP's, ZeRO-3's), counted by kind, with
/// the bytes it sends.
struct RankCollectives {
    std::map<CollectiveKind, int> tp, dp;
    double dp_bytes_sent = 0;
    bool dp_groups_one_tensor_rank = true;   // every member of those holds the same tensor slice
};

inline RankCollectives rank_collectives(const OpGraph& g, const strategies::Layout& l, int t, int d) {
    const int rank = l.rank(t, d, 0);
    std::vector<int> tp_group;
    for (int k = 0; k < l.tp; ++k) tp_group.push_back(l.rank(k, d, 0));
    RankCollectives out;
    for (const Op& op : g.ops()) {
        if (op.kind != OpKind::collective || op.rank != rank) continue;
        const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = g.communicators()[static_cast<std::size_t>(c.communicator)];
        if (members == tp_group) {
            ++out.tp[c.kind];
            continue;
        }
        ++out.dp[c.kind];
        const double n = static_cast<double>(members.size());
        out.dp_bytes_sent += (n - 1) / n * static_cast<double>(c.bytes);
        for (int m : members) out.dp_groups_one_tensor_rank &= m % l.tp == t;
    }
    return out;
}

}  // namespace smol::test
