#include "strategies/horovod.hpp"

#include <algorithm>

#include "strategies/data_parallel.hpp"

namespace smol::strategies {

OpGraph build_horovod(const Model& model, const Layout& layout, const Plan& plan) {
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
        alloc_model_states(g, r, Bytes(params * sb.params), Bytes(params * sb.grads), Bytes(params * sb.optimizer));
        passes.push_back(add_passes(g, r, blocks, layout.microbatches, layout.dtype));
    }
    const int last_mb = layout.microbatches - 1;
    std::vector<OpId> last_sync(replicas.size(), static_cast<OpId>(-1));
    // Horovod's background thread wakes every cycle, gathers the tensors that became ready and
    // launches their fused all-reduces: each fused buffer waits for the first tick after its last
    // gradient is ready (a timer on the host thread), so buffers that fill within one cycle share
    // its tick and go out back to back.
    if (replicas.size() > 1)
        for (std::size_t k = 0; k < fused.size(); ++k) {
            const auto ops = g.declare_collective(CollectiveKind::all_reduce, replicas, fused[k].bytes);
            for (std::size_t d = 0; d < replicas.size(); ++d) {
                const OpId ready = passes[d].bwd[last_mb][static_cast<std::size_t>(fused[k].ready_after_block)];
                last_sync[d] = g.add_collective_op(ops, replicas[d], Stream::comm, Phase::comm, -1, -1, static_cast<int>(k));
                if (cycle > Time::zero()) {
                    const OpId tick = g.add_timer(replicas[d], cycle, Stream::host, Phase::comm, static_cast<int>(k));
                    g.depend(ready, tick);
                    g.depend(tick, last_sync[d]);
                } else {
                    g.depend(ready, last_sync[d]);
                }
            }
        }
    for (std::size_t d = 0; d < replicas.size(); ++d) {
        const OpId opt = add_adam(g, replicas[d], params, layout.dtype);
        if (last_sync[d] != static_cast<OpId>(-1)) g.depend(last_sync[d], opt);
    }
    return g;
}

}  // namespace smol::strategies
