#include "strategies/zero.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"

namespace smol::strategies {

using namespace detail;

namespace {

/// The block at whose backward a bucket starts filling (buckets fill in reverse block order).
int bucket_first_block(const std::vector<Bucket>& buckets, std::size_t k, int last_block) {
    return k == 0 ? last_block : buckets[k - 1].ready_after_block;
}

}  // namespace

OpGraph build_zero(const Model& model, const Layout& layout, const Plan& plan, int stage) {
    if (stage == 3) return build_sharded(model, layout, plan, ShardedOptions{});
    if (stage != 1 && stage != 2) throw Error(ErrorKind::internal, "ZeRO stage " + std::to_string(stage));
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const int n = layout.dp;
    const Bytes cap = Bytes::mib(plan.bucket_mb);
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, cap, cap);
    const int last_block = static_cast<int>(blocks.size()) - 1;

    OpGraph g(layout.devices);
    const std::vector<int> replicas = replica_ranks(layout);
    std::vector<Passes> passes;
    // Stage 2: the transient bucket buffer of (micro-batch, bucket) on each replica.
    std::vector<std::map<std::pair<int, int>, std::int32_t>> bucket_buf(replicas.size());
    for (std::size_t d = 0; d < replicas.size(); ++d) {
        const int r = replicas[d];
        alloc_model_states(g, r, Bytes(params * sb.params), Bytes((stage == 1 ? params : shard(params, n)) * sb.grads),
                           Bytes(shard(params, n) * sb.optimizer));
        std::function<void(int, const Block&)> before_bwd;
        if (stage == 2 && n > 1)
            before_bwd = [&, d, r](int mb, const Block& b) {
                for (std::size_t k = 0; k < buckets.size(); ++k)
                    if (bucket_first_block(buckets, k, last_block) == b.index) {
                        const std::int32_t buf = g.add_buffer(r, Tier::device, buckets[k].bytes, BufferLabel::bucket);
                        g.add_alloc(buf, Stream::compute, b.index, mb);
                        bucket_buf[d][{mb, static_cast<int>(k)}] = buf;
                    }
            };
        passes.push_back(add_passes(g, r, blocks, layout.microbatches, layout.dtype, before_bwd));
    }

    std::vector<OpId> last_rs(replicas.size(), static_cast<OpId>(-1));
    if (n > 1)
        for (int mb = stage == 1 ? layout.microbatches - 1 : 0; mb < layout.microbatches; ++mb)
            for (std::size_t k = 0; k < buckets.size(); ++k) {
                const auto ops = g.add_collective(CollectiveKind::reduce_scatter, replicas, buckets[k].bytes,
                                                  Stream::comm, Phase::comm, -1, mb, static_cast<int>(k));
                for (std::size_t d = 0; d < replicas.size(); ++d) {
                    g.depend(passes[d].bwd[mb][static_cast<std::size_t>(buckets[k].ready_after_block)], ops[d]);
                    last_rs[d] = ops[d];
                    if (stage == 2) g.add_free(bucket_buf[d].at({mb, static_cast<int>(k)}), Stream::comm, -1, mb);
                }
            }
    std::vector<OpId> opt(replicas.size());
    for (std::size_t d = 0; d < replicas.size(); ++d) {
        opt[d] = add_adam(g, replicas[d], shard(params, n), layout.dtype, optimizer_bytes_per_param(layout));
        if (last_rs[d] != static_cast<OpId>(-1)) g.depend(last_rs[d], opt[d]);
    }
    // The updated parameter shards are all-gathered, bucket by bucket.
    if (n > 1)
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            const Bytes bytes = Bytes(buckets[k].bytes.count() / sb.grads * sb.params);
            const auto ops = g.add_collective(CollectiveKind::all_gather, replicas, bytes, Stream::comm, Phase::opt, -1,
                                              -1, static_cast<int>(k));
            for (std::size_t d = 0; d < replicas.size(); ++d) g.depend(opt[d], ops[d]);
        }
    return g;
}

OpGraph build_sharded(const Model& model, const Layout& layout, const Plan& plan, const ShardedOptions& options) {
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const std::vector<int> replicas = replica_ranks(layout);
    const int dp = layout.dp;
    const int group = options.shard_params ? (options.shard_group > 0 ? options.shard_group : dp) : 1;
    if (dp % group != 0) throw Error(ErrorKind::internal, "shard group does not divide dp");
    const int nb = static_cast<int>(blocks.size());
    const int mbs = layout.microbatches;

    // Shard groups: consecutive replicas; replica groups: the same position in every shard group.
    std::vector<std::vector<int>> shard_groups(static_cast<std::size_t>(dp / group)), replica_groups(static_cast<std::size_t>(group));
    for (int d = 0; d < dp; ++d) {
        shard_groups[static_cast<std::size_t>(d / group)].push_back(replicas[static_cast<std::size_t>(d)]);
        replica_groups[static_cast<std::size_t>(d % group)].push_back(replicas[static_cast<std::size_t>(d)]);
    }

    OpGraph g(layout.devices);
    std::vector<Passes> passes;
    // Per replica, per (micro-batch, block): the transient full-gradient buffer of the unit.
    std::vector<std::vector<std::vector<std::int32_t>>> grad_buf(
        static_cast<std::size_t>(dp), std::vector<std::vector<std::int32_t>>(static_cast<std::size_t>(mbs), std::vector<std::int32_t>(blocks.size(), -1)));
    for (int d = 0; d < dp; ++d) {
        const int r = replicas[static_cast<std::size_t>(d)];
        const std::int64_t mine = shard(params, group);
        alloc_model_states(g, r, Bytes(mine * sb.params), Bytes(mine * sb.grads), Bytes(mine * sb.optimizer));
        std::function<void(int, const Block&)> before_bwd;
        if (group > 1)
            before_bwd = [&, d, r](int mb, const Block& b) {
                const std::int32_t buf = g.add_buffer(r, Tier::device, Bytes(b.params * sb.grads), BufferLabel::bucket);
                g.add_alloc(buf, Stream::compute, b.index, mb);
                grad_buf[static_cast<std::size_t>(d)][static_cast<std::size_t>(mb)][static_cast<std::size_t>(b.index)] = buf;
            };
        passes.push_back(add_passes(g, r, blocks, mbs, layout.dtype, before_bwd));
    }

    // Comm-stream programs, step by step for every rank at once (all ranks run the same program,
    // so every communicator sees its collectives in one order).
    auto collective = [&](CollectiveKind kind, const std::vector<std::vector<int>>& groups, Bytes bytes, Phase phase,
                          int layer, int mb) {
        std::vector<OpId> by_replica(static_cast<std::size_t>(dp));
        for (const auto& members : groups) {
            const auto ops = g.add_collective(kind, members, bytes, Stream::comm, phase, layer, mb);
            for (std::size_t i = 0; i < members.size(); ++i)
                by_replica[static_cast<std::size_t>(std::find(replicas.begin(), replicas.end(), members[i]) - replicas.begin())] = ops[i];
        }
        return by_replica;
    };
    std::vector<std::vector<std::int32_t>> gathered(static_cast<std::size_t>(dp), std::vector<std::int32_t>(blocks.size(), -1));
    auto gather = [&](const Block& b, int mb, Phase phase, const std::vector<std::vector<OpId>>& consumers) {
        for (int d = 0; d < dp; ++d) {
            const int r = replicas[static_cast<std::size_t>(d)];
            const std::int32_t buf = g.add_buffer(r, Tier::device, Bytes(b.params * sb.params), BufferLabel::staging);
            g.add_alloc(buf, Stream::comm, b.index, mb);
            gathered[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)] = buf;
        }
        const auto ops = collective(CollectiveKind::all_gather, shard_groups, Bytes(b.params * sb.params), phase, b.index, mb);
        for (int d = 0; d < dp; ++d)
            g.depend(ops[static_cast<std::size_t>(d)], consumers[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)]);
    };
    auto release = [&](const Block& b, int mb, const std::vector<std::vector<OpId>>& after) {
        for (int d = 0; d < dp; ++d) {
            const OpId f = g.add_free(gathered[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], Stream::comm, b.index, mb);
            g.depend(after[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], f);
        }
    };
    std::vector<OpId> last_comm(static_cast<std::size_t>(dp), static_cast<OpId>(-1));
    // Gradients of a unit after its backward: reduce-scatter in the shard group, then (hybrid)
    // all-reduce of the shard across groups; NO_SHARD all-reduces the whole unit (last micro-batch).
    auto reduce = [&](const Block& b, int mb, const std::vector<std::vector<OpId>>& bwd) {
        std::vector<OpId> ops;
        if (group > 1) {
            ops = collective(CollectiveKind::reduce_scatter, shard_groups, Bytes(b.params * sb.grads), Phase::comm, b.index, mb);
            for (int d = 0; d < dp; ++d)
                g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], ops[static_cast<std::size_t>(d)]);
            if (dp / group > 1)
                ops = collective(CollectiveKind::all_reduce, replica_groups, Bytes(shard(b.params, group) * sb.grads),
                                 Phase::comm, b.index, mb);
            for (int d = 0; d < dp; ++d)
                g.add_free(grad_buf[static_cast<std::size_t>(d)][static_cast<std::size_t>(mb)][static_cast<std::size_t>(b.index)],
                           Stream::comm, b.index, mb);
        } else if (dp > 1 && mb == mbs - 1) {
            ops = collective(CollectiveKind::all_reduce, replica_groups, Bytes(b.params * sb.grads), Phase::comm, b.index, mb);
            for (int d = 0; d < dp; ++d)
                g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], ops[static_cast<std::size_t>(d)]);
        }
        for (std::size_t d = 0; d < ops.size(); ++d) last_comm[d] = ops[d];
    };

    std::vector<std::vector<OpId>> fwd(static_cast<std::size_t>(dp)), bwd(static_cast<std::size_t>(dp));
    for (int mb = 0; mb < mbs; ++mb) {
        for (int d = 0; d < dp; ++d) {
            fwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].fwd[static_cast<std::size_t>(mb)];
            bwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd[static_cast<std::size_t>(mb)];
        }
        if (group > 1) {
            // Forward: gather unit i while unit i−1 computes (forward prefetch); release unit i−1
            // after its forward (reshard after forward). The release sits after gather i on the
            // comm stream, so gather i+1 waits for forward i−1: at most two units are gathered —
            // the all-gather rate limiter.
            for (int i = 0; i < nb; ++i) {
                gather(blocks[static_cast<std::size_t>(i)], mb, Phase::fwd, fwd);
                if (options.reshard_after_forward && i > 0) release(blocks[static_cast<std::size_t>(i - 1)], mb, fwd);
            }
            if (options.reshard_after_forward) release(blocks.back(), mb, fwd);
            // Backward: gather unit j before the previous unit's reduce-scatter (backward prefetch).
            for (int j = nb - 1; j >= -1; --j) {
                if (j >= 0 && options.reshard_after_forward) gather(blocks[static_cast<std::size_t>(j)], mb, Phase::bwd, bwd);
                if (j + 1 < nb) {
                    const Block& prev = blocks[static_cast<std::size_t>(j + 1)];
                    release(prev, mb, bwd);
                    reduce(prev, mb, bwd);
                }
            }
        } else {
            for (int j = nb - 1; j >= 0; --j) reduce(blocks[static_cast<std::size_t>(j)], mb, bwd);
        }
    }
    for (int d = 0; d < dp; ++d) {
        const OpId opt = add_adam(g, replicas[static_cast<std::size_t>(d)], shard(params, group), layout.dtype,
                                  optimizer_bytes_per_param(layout));
        if (last_comm[static_cast<std::size_t>(d)] != static_cast<OpId>(-1)) g.depend(last_comm[static_cast<std::size_t>(d)], opt);
    }
    return g;
}

}  // namespace smol::strategies
