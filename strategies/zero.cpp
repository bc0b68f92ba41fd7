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
    if (stage == 3) return build_zero3(model, layout, plan);
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
    const ReduceTiming timing = n > 1 ? reduce_timing(layout, stage) : ReduceTiming::overlapped;
    const Stream comm = timing == ReduceTiming::blocking ? Stream::compute : Stream::comm;
    const int first_mb = stage == 1 ? layout.microbatches - 1 : 0;   // stage 1 reduces at the accumulation boundary
    std::vector<Passes> passes;
    // Stage 2: the transient bucket buffer of (micro-batch, bucket) on each replica.
    std::vector<std::map<std::pair<int, int>, std::int32_t>> bucket_buf(replicas.size());
    // Blocking reductions are emitted inside each replica's backward: one collective per
    // (micro-batch, bucket), declared by the first replica that reaches it.
    std::map<std::pair<int, int>, std::int32_t> blocking_cid;
    std::vector<OpId> last_rs(replicas.size(), static_cast<OpId>(-1));
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
        std::function<void(int, const Block&, OpId)> after_bwd;
        if (timing == ReduceTiming::blocking)
            after_bwd = [&, d, r](int mb, const Block& b, OpId) {
                if (mb < first_mb) return;
                for (std::size_t k = 0; k < buckets.size(); ++k) {
                    if (buckets[k].ready_after_block != b.index) continue;
                    auto [it, fresh] = blocking_cid.try_emplace({mb, static_cast<int>(k)}, -1);
                    if (fresh) it->second = g.declare_collective(CollectiveKind::reduce_scatter, replicas, buckets[k].bytes);
                    last_rs[d] = g.add_collective_op(it->second, r, Stream::compute, Phase::comm, -1, mb, static_cast<int>(k));
                    if (stage == 2) g.add_free(bucket_buf[d].at({mb, static_cast<int>(k)}), Stream::compute, -1, mb);
                }
            };
        passes.push_back(add_passes(g, r, blocks, layout.microbatches, layout.dtype, before_bwd, after_bwd));
    }

    if (n > 1 && timing != ReduceTiming::blocking)
        for (int mb = first_mb; mb < layout.microbatches; ++mb)
            for (std::size_t k = 0; k < buckets.size(); ++k) {
                const auto ops = g.add_collective(CollectiveKind::reduce_scatter, replicas, buckets[k].bytes,
                                                  Stream::comm, Phase::comm, -1, mb, static_cast<int>(k));
                // Overlapped: when backward fills the bucket; after backward: when it is all done.
                const std::size_t ready = timing == ReduceTiming::after_backward ? 0 : static_cast<std::size_t>(buckets[k].ready_after_block);
                for (std::size_t d = 0; d < replicas.size(); ++d) {
                    g.depend(passes[d].bwd[mb][ready], ops[d]);
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
            const auto ops = g.add_collective(CollectiveKind::all_gather, replicas, bytes, comm, Phase::opt, -1,
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

    std::vector<std::vector<OpId>> fwd(static_cast<std::size_t>(dp)), bwd(static_cast<std::size_t>(dp)),
        bwd_first(static_cast<std::size_t>(dp));
    for (int mb = 0; mb < mbs; ++mb) {
        for (int d = 0; d < dp; ++d) {
            fwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].fwd[static_cast<std::size_t>(mb)];
            bwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd[static_cast<std::size_t>(mb)];
            bwd_first[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd_first[static_cast<std::size_t>(mb)];
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
                // The gather precedes the unit's recompute (when it has one), not only its backward.
                if (j >= 0 && options.reshard_after_forward) gather(blocks[static_cast<std::size_t>(j)], mb, Phase::bwd, bwd_first);
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

std::vector<std::int64_t> partitioned_tensors(const Block& b, std::int64_t persistence_threshold,
                                              std::int64_t* persistent) {
    std::vector<std::int64_t> out;
    std::int64_t left = b.params, small = 0;
    for (const Kernel& k : b.fwd_kernels) {
        if (k.op != KernelOp::gemm || !k.weight) continue;
        const std::int64_t e = k.k * k.n;   // B of C[m×n] = A[m×k]·B[k×n]
        if (e > left) continue;             // a tied weight, held by another block
        left -= e;
        (e >= persistence_threshold ? out.push_back(e) : void(small += e));
    }
    // What no GEMM reads: embedding and position tables (one tensor), or norms and biases.
    if (left >= persistence_threshold) out.push_back(left);
    else small += left;
    if (persistent) *persistent = small;
    return out;
}

OpGraph build_zero3(const Model& model, const Layout& layout, const Plan& plan) {
    const Framework& fw = layout.framework;
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const std::vector<int> replicas = replica_ranks(layout);
    const int dp = layout.dp, nb = static_cast<int>(blocks.size()), mbs = layout.microbatches;

    // What each block gathers: its partitioned tensors (at least param_persistence_threshold
    // elements); smaller ones persist whole on every rank.
    std::vector<std::vector<std::int64_t>> tensors(blocks.size());
    std::vector<std::int64_t> elems(blocks.size(), 0);
    std::int64_t persistent = 0;
    for (const Block& b : blocks) {
        std::int64_t keep = 0;
        tensors[static_cast<std::size_t>(b.index)] = partitioned_tensors(b, fw.param_persistence_threshold, &keep);
        for (std::int64_t e : tensors[static_cast<std::size_t>(b.index)]) elems[static_cast<std::size_t>(b.index)] += e;
        persistent += keep;
    }
    // Released after forward unless reused soon: DeepSpeed keeps a parameter gathered when fewer
    // than stage3_max_reuse_distance elements are fetched before its next use — the later
    // blocks' forward and their backward (partitioned_param_coordinator.py __params_to_release).
    std::vector<bool> keep_for_backward(blocks.size(), false);
    {
        std::int64_t after = 0;
        for (int i = nb - 1; i >= 0; --i) {
            keep_for_backward[static_cast<std::size_t>(i)] = 2 * after < fw.max_reuse_distance;
            after += elems[static_cast<std::size_t>(i)];
        }
    }
    // Gradients are reduce-scattered every micro-batch in buckets of reduce_bucket_size elements
    // as backward fills them (stage3.py's IPG bucket, overlap_comm on for stage 3).
    const Bytes bucket_cap(std::max<std::int64_t>(1, std::min(fw.reduce_bucket, params)) * sb.grads);
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, bucket_cap, bucket_cap);

    OpGraph g(layout.devices);
    std::vector<Passes> passes;
    for (int d = 0; d < dp; ++d) {
        const int r = replicas[static_cast<std::size_t>(d)];
        const std::int64_t mine = shard(params - persistent, dp) + persistent;
        alloc_model_states(g, r, Bytes(mine * sb.params), Bytes(shard(params, dp) * sb.grads),
                           Bytes(shard(params, dp) * sb.optimizer));
        if (dp > 1) alloc_state(g, r, bucket_cap, BufferLabel::bucket);   // the contiguous IPG buffer
        passes.push_back(add_passes(g, r, blocks, mbs, layout.dtype));
    }
    if (dp == 1) {
        for (int d = 0; d < dp; ++d) add_adam(g, replicas[static_cast<std::size_t>(d)], params, layout.dtype, optimizer_bytes_per_param(layout));
        return g;
    }

    // One gather (an all-gather of `bytes` of parameters) on every replica, each after `after`
    // (per replica; kNoOp: none) and before `before`.
    std::vector<OpId> last_comm(static_cast<std::size_t>(dp), OpGraph::kNoOp);
    auto all_gather = [&](std::int64_t elements, int block, int mb, Phase phase, const std::vector<OpId>& after) {
        const auto ops = g.add_collective(CollectiveKind::all_gather, replicas, Bytes(elements * sb.params), Stream::comm,
                                          phase, block, mb);
        for (int d = 0; d < dp; ++d)
            if (after[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(after[static_cast<std::size_t>(d)], ops[static_cast<std::size_t>(d)]);
        return ops;
    };
    auto column = [&](const std::vector<std::vector<OpId>>& per_block_per_d, int block) {
        std::vector<OpId> out(static_cast<std::size_t>(dp), OpGraph::kNoOp);
        if (block < 0 || block >= nb) return out;
        for (int d = 0; d < dp; ++d) out[static_cast<std::size_t>(d)] = per_block_per_d[static_cast<std::size_t>(d)][static_cast<std::size_t>(block)];
        return out;
    };
    std::vector<std::vector<std::int32_t>> staging(static_cast<std::size_t>(dp), std::vector<std::int32_t>(blocks.size(), -1));

    for (int mb = 0; mb < mbs; ++mb) {
        std::vector<std::vector<OpId>> fwd(static_cast<std::size_t>(dp)), bwd(static_cast<std::size_t>(dp)), first(static_cast<std::size_t>(dp));
        for (int d = 0; d < dp; ++d) {
            fwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].fwd[static_cast<std::size_t>(mb)];
            bwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd[static_cast<std::size_t>(mb)];
            first[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd_first[static_cast<std::size_t>(mb)];
        }
        // A block's gathers: staging allocated, then one collective per tensor (v0.5) or one
        // coalesced per block (v0.6+), issued after `issue_after` (the compute the issuing hook
        // follows), consumed by `consumer`.
        auto fetch = [&](int i, Phase phase, const std::vector<OpId>& issue_after, const std::vector<OpId>& consumer) {
            if (elems[static_cast<std::size_t>(i)] == 0) return;
            for (int d = 0; d < dp; ++d) {
                const std::int32_t buf = g.add_buffer(replicas[static_cast<std::size_t>(d)], Tier::device,
                                                      Bytes(elems[static_cast<std::size_t>(i)] * sb.params), BufferLabel::staging);
                g.add_alloc(buf, Stream::comm, i, mb);
                staging[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)] = buf;
            }
            std::vector<OpId> ops;
            if (fw.zero3_gather == GatherGranularity::per_tensor)
                for (std::int64_t e : tensors[static_cast<std::size_t>(i)]) ops = all_gather(e, i, mb, phase, issue_after);
            else
                ops = all_gather(elems[static_cast<std::size_t>(i)], i, mb, phase, issue_after);
            for (int d = 0; d < dp; ++d) g.depend(ops[static_cast<std::size_t>(d)], consumer[static_cast<std::size_t>(d)]);
        };
        auto release = [&](int i, const std::vector<OpId>& after) {
            if (elems[static_cast<std::size_t>(i)] == 0) return;
            for (int d = 0; d < dp; ++d) {
                const OpId f = g.add_free(staging[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)], Stream::comm, i, mb);
                g.depend(after[static_cast<std::size_t>(d)], f);
            }
        };
        // Which hook issues each block's fetch: its own pre-hook when blocking (v0.5: fetched
        // synchronously, no prefetch), else the earliest hook from which the blocks up to it fit in
        // stage3_prefetch_bucket_size elements (the prefetch coordinator looks that far ahead),
        // and no earlier than stage3_max_live_parameters gathered elements allow.
        auto issue_point = [&](const std::vector<int>& order, std::size_t pos) {
            if (fw.zero3_blocking_fetch) return pos;
            std::size_t at = pos;
            std::int64_t ahead = elems[static_cast<std::size_t>(order[pos])];
            while (at > 0 && ahead + elems[static_cast<std::size_t>(order[at - 1])] <= fw.prefetch_bucket &&
                   ahead + elems[static_cast<std::size_t>(order[at - 1])] <= fw.max_live_parameters) {
                --at;
                ahead += elems[static_cast<std::size_t>(order[at])];
            }
            return at == pos ? pos : at;
        };
        // Forward.
        std::vector<int> fwd_order(static_cast<std::size_t>(nb));
        for (int i = 0; i < nb; ++i) fwd_order[static_cast<std::size_t>(i)] = i;
        std::vector<std::vector<int>> issued_at(static_cast<std::size_t>(nb));
        for (std::size_t p = 0; p < fwd_order.size(); ++p) issued_at[issue_point(fwd_order, p)].push_back(fwd_order[p]);
        for (int i = 0; i < nb; ++i) {
            // The hook before block i runs once block i − 1 is computed.
            for (int j : issued_at[static_cast<std::size_t>(i)]) fetch(j, Phase::fwd, column(fwd, i - 1), column(fwd, j));
            if (!keep_for_backward[static_cast<std::size_t>(i)]) release(i, column(fwd, i));
        }
        // Backward: blocks released after forward are fetched again before their recompute or
        // backward; the others were kept.
        std::vector<int> bwd_order;
        for (int i = nb - 1; i >= 0; --i)
            if (!keep_for_backward[static_cast<std::size_t>(i)]) bwd_order.push_back(i);
        std::vector<std::vector<int>> bwd_issue(static_cast<std::size_t>(nb));
        for (std::size_t p = 0; p < bwd_order.size(); ++p)
            bwd_issue[static_cast<std::size_t>(bwd_order[issue_point(bwd_order, p)])].push_back(bwd_order[p]);
        std::size_t next_bucket = 0;
        for (int i = nb - 1; i >= 0; --i) {
            for (int j : bwd_issue[static_cast<std::size_t>(i)]) fetch(j, Phase::bwd, column(bwd, i + 1), column(first, j));
            release(i, column(bwd, i));
            while (next_bucket < buckets.size() && buckets[next_bucket].ready_after_block == i) {
                const auto ops = g.add_collective(CollectiveKind::reduce_scatter, replicas, buckets[next_bucket].bytes,
                                                  Stream::comm, Phase::comm, -1, mb, static_cast<int>(next_bucket));
                // (Without overlap_comm DeepSpeed reduces on the compute stream; its all-gathers
                // share the communicator, so both stay on one stream here: the reduction then
                // waits for the backward that fills it and the next fetch waits for it.)
                for (int d = 0; d < dp; ++d) {
                    g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)], ops[static_cast<std::size_t>(d)]);
                    last_comm[static_cast<std::size_t>(d)] = ops[static_cast<std::size_t>(d)];
                }
                ++next_bucket;
            }
        }
    }
    for (int d = 0; d < dp; ++d) {
        const OpId opt = add_adam(g, replicas[static_cast<std::size_t>(d)], shard(params, dp), layout.dtype,
                                  optimizer_bytes_per_param(layout));
        if (last_comm[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(last_comm[static_cast<std::size_t>(d)], opt);
    }
    return g;
}

}  // namespace smol::strategies
