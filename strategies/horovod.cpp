#include "strategies/horovod.hpp"

#include <algorithm>

#include "strategies/data_parallel.hpp"

namespace smol::strategies {

OpId add_wait(OpGraph& g, const topo::Cluster& cluster, int rank, Time wait, Stream stream, DType dtype, int index) {
    const topo::NodeGroup& grp = cluster.group_of(rank);
    const Time busy = std::max(Time::zero(), wait - grp.device.launch_overhead);
    const Bytes traffic = grp.host_memory_bandwidth * grp.device.memory_efficiency * busy;
    Op op;
    op.kind = OpKind::compute;
    op.rank = rank;
    op.stream = stream;
    op.phase = Phase::comm;
    op.index = index;
    op.flops = 0;
    op.bytes = traffic.count();
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::elementwise) | static_cast<int>(dtype) << 3 | 64);
    return g.add(op);
}

OpGraph build_horovod(const Model& model, const topo::Cluster& cluster, const Layout& layout, const Plan& plan) {
    using namespace detail;
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const Bytes fusion = Bytes::mib(plan.fusion_mb);
    const std::vector<Bucket> fused = make_buckets(blocks, sb.grads, fusion, fusion);
    const Time cycle = Time::ms(plan.cycle_ms);

    OpGraph g(layout.devices);
    const std::vector<int> replicas = replica_ranks(layout);
    std::vector<Passes> passes;
    for (int r : replicas) {
        alloc_state(g, r, Bytes(params * sb.params), BufferLabel::parameters);
        alloc_state(g, r, Bytes(params * sb.grads), BufferLabel::gradients);
        alloc_state(g, r, Bytes(params * sb.optimizer), BufferLabel::optimizer_state);
        passes.push_back(add_passes(g, r, blocks, layout.microbatches, layout.dtype));
    }
    const int last_mb = layout.microbatches - 1;
    std::vector<OpId> last_sync(replicas.size(), static_cast<OpId>(-1));
    if (replicas.size() > 1)
        for (std::size_t k = 0; k < fused.size(); ++k) {
            std::vector<OpId> waits;
            for (int r : replicas)
                waits.push_back(add_wait(g, cluster, r, cycle, Stream::comm, layout.dtype, static_cast<int>(k)));
            const auto ops = g.add_collective(CollectiveKind::all_reduce, replicas, fused[k].bytes, Stream::comm,
                                              Phase::comm, -1, -1, static_cast<int>(k));
            for (std::size_t d = 0; d < replicas.size(); ++d) {
                g.depend(passes[d].bwd[last_mb][static_cast<std::size_t>(fused[k].ready_after_block)], ops[d]);
                last_sync[d] = ops[d];
            }
        }
    for (std::size_t d = 0; d < replicas.size(); ++d) {
        const OpId opt = add_adam(g, replicas[d], params, layout.dtype);
        if (last_sync[d] != static_cast<OpId>(-1)) g.depend(last_sync[d], opt);
    }
    return g;
}

}  // namespace smol::strategies
