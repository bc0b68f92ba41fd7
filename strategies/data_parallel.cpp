#include "strategies/data_parallel.hpp"

#include <algorithm>

namespace smol::strategies {

StateBytes state_bytes(DType dtype) {
    const int b = dtype_bytes(dtype);
    return b == 4 ? StateBytes{4, 4, 8} : StateBytes{b, b, 12};
}

std::vector<Bucket> make_buckets(const std::vector<Block>& blocks, int grad_bytes_per_param, Bytes cap, Bytes first_cap) {
    std::vector<Bucket> out;
    Bytes open;  // bytes in the bucket being filled
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
        Bytes grads = Bytes(it->params * grad_bytes_per_param);
        // A block bigger than the space left closes buckets until its gradients are packed.
        while (grads > Bytes(0)) {
            const Bytes limit = out.empty() ? first_cap : cap;
            const Bytes take = std::min(grads, limit - open);
            open += take;
            grads -= take;
            if (open >= limit) {
                out.push_back({open, it->index});
                open = Bytes(0);
            }
        }
        if (open > Bytes(0) && it + 1 == blocks.rend()) out.push_back({open, it->index});
    }
    return out;
}

namespace {

/// Optimizer traffic per parameter: Adam reads gradient, master weight, momentum and variance and
/// writes master weight, momentum, variance and the working copy (2 + 4·3 + 4·3 + 2 = 28 bytes in
/// mixed precision; 4·4 + 4·3 = 28 in fp32). ~12 FLOPs per parameter.
constexpr int kAdamBytesPerParam = 28;
constexpr double kAdamFlopsPerParam = 12;

}  // namespace

OpGraph build_data_parallel(const Model& model, const Layout& layout, const Plan& plan) {
    Workload w;
    w.micro_batch = layout.micro_batch;
    w.seq = layout.seq;
    w.tp = layout.tp;
    w.sequence_parallel = plan.sequence_parallel;
    w.recompute = plan.recompute;
    w.dtype = layout.dtype;
    const std::vector<Block> blocks = model.blocks(w);
    const StateBytes sb = state_bytes(layout.dtype);
    std::int64_t params = 0;
    for (const Block& b : blocks) params += b.params;

    // PyTorch: bucket_cap_mb = 25 (MiB) and a 1 MiB first bucket (_DEFAULT_FIRST_BUCKET_BYTES).
    const Bytes cap = Bytes::mib(plan.bucket_mb);
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, cap, std::min(cap, Bytes::mib(plan.first_bucket_mb)));

    OpGraph g(layout.devices);
    std::vector<int> replicas;
    for (int d = 0; d < layout.dp; ++d) replicas.push_back(layout.rank(0, d, 0));
    // The backward op of each block in the last micro-batch, per replica: where buckets fill.
    std::vector<std::vector<OpId>> last_bwd(replicas.size(), std::vector<OpId>(blocks.size()));

    for (std::size_t d = 0; d < replicas.size(); ++d) {
        const int r = replicas[d];
        // Model states live for the whole step.
        for (auto [bytes, label] : {std::pair{params * sb.params, BufferLabel::parameters},
                                    std::pair{params * sb.grads, BufferLabel::gradients},
                                    std::pair{params * sb.optimizer, BufferLabel::optimizer_state}})
            g.add_alloc(g.add_buffer(r, Tier::device, Bytes(bytes), label), Stream::compute);

        for (int mb = 0; mb < layout.microbatches; ++mb) {
            std::vector<std::int32_t> act(blocks.size());
            for (const Block& b : blocks) {
                act[b.index] = g.add_buffer(r, Tier::device, b.activations, BufferLabel::activations);
                g.add_alloc(act[b.index], Stream::compute, b.index, mb);
                g.add_compute(r, Phase::fwd, b.index, mb, b.fwd, b.mem_traffic, KernelClass::gemm, layout.dtype, b.gemm);
            }
            for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
                const Block& b = *it;
                if (b.recompute > Flops(0))
                    g.add_compute(r, Phase::recompute, b.index, mb, b.recompute, b.mem_traffic, KernelClass::gemm,
                                  layout.dtype, b.gemm);
                // Backward reads and writes about twice the forward's memory-bound traffic.
                last_bwd[d][b.index] = g.add_compute(r, Phase::bwd, b.index, mb, b.bwd, b.mem_traffic * std::int64_t{2},
                                                     KernelClass::gemm, layout.dtype, b.gemm);
                g.add_free(act[b.index], Stream::compute, b.index, mb);
            }
        }
    }

    // Gradient synchronisation in the last micro-batch only (the earlier ones run under no_sync):
    // each bucket's all-reduce waits for the backward that completes it; the comm stream keeps
    // the buckets in order, so the optimizer step waits for the last one.
    std::vector<OpId> last_sync(replicas.size(), static_cast<OpId>(-1));
    if (replicas.size() > 1)
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            const auto ops = g.add_collective(CollectiveKind::all_reduce, replicas, buckets[k].bytes, Stream::comm,
                                              Phase::comm, -1, -1, static_cast<int>(k));
            for (std::size_t d = 0; d < replicas.size(); ++d) {
                g.depend(last_bwd[d][static_cast<std::size_t>(buckets[k].ready_after_block)], ops[d]);
                last_sync[d] = ops[d];
            }
        }
    for (std::size_t d = 0; d < replicas.size(); ++d) {
        const OpId opt = g.add_compute(replicas[d], Phase::opt, -1, -1, Flops(kAdamFlopsPerParam * static_cast<double>(params)),
                                       Bytes(params * kAdamBytesPerParam), KernelClass::optimizer, layout.dtype);
        if (last_sync[d] != static_cast<OpId>(-1)) g.depend(last_sync[d], opt);
    }
    return g;
}

}  // namespace smol::strategies
