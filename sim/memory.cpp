#include "sim/memory.hpp"

#include <algorithm>

#include "sim/nccl_tuner.hpp"

namespace smol::sim {

std::int64_t allocator_size(std::int64_t bytes) {
    constexpr std::int64_t kMinBlock = 512, kMinLargeAlloc = 10ll << 20, kRoundLarge = 2ll << 20;
    if (bytes <= 0) return 0;
    if (bytes >= kMinLargeAlloc) return (bytes + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::vector<MemoryBreakdown> runtime_reserve(const OpGraph& graph, const topo::Cluster& cluster, const CollectiveContext& ctx) {
    std::vector<MemoryBreakdown> out(static_cast<std::size_t>(graph.ranks()));
    for (int r = 0; r < graph.ranks(); ++r)
        if (!cluster.device_kind(r).is_cpu) out[static_cast<std::size_t>(r)].cuda_context = Bytes(kCudaContextBytes);
    // Communicators with collectives, once each (every collective on one shares NCCL's buffers);
    // each member on a GPU keeps its channels' buffers.
    std::vector<bool> used(graph.communicators().size(), false);
    for (const Collective& c : graph.collectives()) used[static_cast<std::size_t>(c.communicator)] = true;
    for (std::size_t i = 0; i < graph.communicators().size(); ++i) {
        const auto& members = graph.communicators()[i];
        if (!used[i] || members.size() < 2) continue;
        bool any_gpu = false;
        for (int r : members) any_gpu = any_gpu || !cluster.device_kind(r).is_cpu;
        if (!any_gpu) continue;
        const nccl::Communicator comm = nccl_communicator(members, ctx);
        const Bytes buffers(static_cast<std::int64_t>(std::min(64, 2 * comm.channels)) * kNcclBytesPerChannel);
        for (int r : members)
            if (!cluster.device_kind(r).is_cpu) out[static_cast<std::size_t>(r)].nccl += buffers;
    }
    return out;
}

MemoryModel::MemoryModel(const OpGraph& graph, const topo::Cluster& cluster, const CollectiveContext& ctx,
                         Timeline& timeline, bool record)
    : graph_(graph), cluster_(cluster), tl_(timeline), record_(record) {
    const int ranks = graph.ranks();
    use_.assign(static_cast<std::size_t>(ranks), {});
    tl_.peak_breakdown.assign(static_cast<std::size_t>(ranks), {});
    const std::vector<MemoryBreakdown> reserve = runtime_reserve(graph, cluster, ctx);
    for (int r = 0; r < ranks; ++r) {
        const topo::NodeGroup& grp = cluster.group_of(r);
        gpu_.push_back(!grp.device.is_cpu);
        unified_.push_back(grp.device.unified_memory);
        tl_.capacity[r][static_cast<int>(Tier::device)] = grp.device.memory;
        // The host's DRAM and NVMe are shared by the node's devices: each gets an equal share.
        // Unified memory: the host's DRAM is the device's memory, counted there once.
        tl_.capacity[r][static_cast<int>(Tier::host)] = grp.device.unified_memory ? Bytes(0) : grp.host_memory / grp.devices_per_node;
        if (grp.nvme_capacity) tl_.capacity[r][static_cast<int>(Tier::nvme)] = *grp.nvme_capacity / grp.devices_per_node;
        if (!graph.materialized(r) || !gpu_.back()) continue;
        Use& dev = use_[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)];
        dev.parts = reserve[static_cast<std::size_t>(r)];
        dev.total = dev.parts.runtime();
        tl_.peak[r][static_cast<int>(Tier::device)] = dev.total;
        tl_.peak_breakdown[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)] = dev.parts;
        if (dev.total > tl_.capacity[r][static_cast<int>(Tier::device)] && !tl_.oom)
            tl_.oom = OutOfMemory{r, cluster.device_name(r), Tier::device, OpGraph::kNoOp, dev.total, tl_.capacity[r][static_cast<int>(Tier::device)]};
    }
}

void MemoryModel::apply(OpId id, const Op& op, Time now) {
    const Buffer& b = graph_.buffers()[static_cast<std::size_t>(op.ref)];
    const auto rank = static_cast<std::size_t>(b.rank);
    Tier tier = b.tier;
    if (tier == Tier::host && unified_[rank]) tier = Tier::device;
    const int t = static_cast<int>(tier);
    Use& u = use_[rank][t];
    // A GPU's device allocations come from the caching allocator, rounded.
    const Bytes asked(b.bytes);
    const Bytes held = tier == Tier::device && gpu_[rank] ? Bytes(allocator_size(b.bytes)) : asked;
    Bytes& label = u.parts.labels[static_cast<std::size_t>(b.label)];
    const Bytes cap = tl_.capacity[rank][t];
    if (op.kind == OpKind::alloc) {
        if (u.total + held > cap && !tl_.oom)
            tl_.oom = OutOfMemory{b.rank, cluster_.device_name(b.rank), tier, id, held, cap > u.total ? cap - u.total : Bytes(0)};
        u.total += held;
        label += asked;
        u.parts.allocator += held - asked;
        if (u.total > tl_.peak[rank][t]) {
            tl_.peak[rank][t] = u.total;
            tl_.peak_breakdown[rank][t] = u.parts;
        }
    } else {
        u.total -= held;
        label -= asked;
        u.parts.allocator -= held - asked;
    }
    if (record_) tl_.memory.push_back({b.rank, tier, now, u.total});
}

void MemoryModel::copy_mirrors() {
    for (int r = 0; r < graph_.ranks(); ++r)
        if (!graph_.materialized(r)) {
            const auto rep = static_cast<std::size_t>(graph_.representative(r));
            tl_.peak[static_cast<std::size_t>(r)] = tl_.peak[rep];
            tl_.peak_breakdown[static_cast<std::size_t>(r)] = tl_.peak_breakdown[rep];
        }
}

}  // namespace smol::sim
