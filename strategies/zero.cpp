#include "strategies/zero.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/fsdp.hpp"
#include "strategies/offload.hpp"
#include "strategies/optimizer.hpp"

namespace smol::strategies {

using namespace detail;

namespace {

/// DeepSpeed's gradient bucket: reduce_bucket_size elements, at most the model's, in bytes.
Bytes reduce_bucket_cap(const Framework& fw, std::int64_t params, std::int64_t grad_bytes) {
    return Bytes(std::max<std::int64_t>(1, std::min(fw.reduce_bucket, params))) * grad_bytes;
}

/// The block at whose backward a bucket starts filling (buckets fill in reverse block order).
int bucket_first_block(const std::vector<Bucket>& buckets, std::size_t k, int last_block) {
    return k == 0 ? last_block : buckets[k - 1].ready_after_block;
}

/// A data-parallel replica of tp ranks (FSDP + TP, ZeRO-3 + TP): slot d·tp + t is replica d's
/// tensor rank t, slots[] its rank. The slots of each tensor rank are the groups that shard and
/// reduce that rank's slice.
struct TensorSlots {
    int tp = 1, dp = 1;
    std::vector<int> slots, slot_of;   // slot → rank, rank → slot (−1: none)

    explicit TensorSlots(const Layout& l) : tp(l.tp), dp(l.dp), slot_of(static_cast<std::size_t>(l.devices), -1) {
        for (int d = 0; d < dp; ++d)
            for (int t = 0; t < tp; ++t) slots.push_back(l.rank(t, d, 0));
        for (std::size_t i = 0; i < slots.size(); ++i) slot_of[static_cast<std::size_t>(slots[i])] = static_cast<int>(i);
    }
    /// The ranks of tensor rank t, replica by replica.
    std::vector<int> tensor_rank(int t) const {
        std::vector<int> out;
        for (int d = 0; d < dp; ++d) out.push_back(slots[static_cast<std::size_t>(d * tp + t)]);
        return out;
    }
};

/// One collective of `kind` over each tensor rank's replicas (all of them with tp = 1), its ops
/// by slot (kNoOp for a folded mirror's).
std::vector<OpId> over_tensor_ranks(OpGraph& g, const Layout& layout, const TensorSlots& ts, CollectiveKind kind, Bytes bytes,
                                    Stream stream, Phase phase, int layer, int mb, int index) {
    std::vector<OpId> by_slot(ts.slots.size(), OpGraph::kNoOp);
    for (int t = 0; t < ts.tp; ++t) {
        const std::vector<int> members = ts.tensor_rank(t);
        const auto ops = add_replica_collective(g, layout, kind, members, bytes, stream, phase, layer, mb, index);
        for (std::size_t i = 0; i < members.size(); ++i)
            by_slot[static_cast<std::size_t>(ts.slot_of[static_cast<std::size_t>(members[i])])] = ops[i];
    }
    return by_slot;
}

/// Tensor parallelism inside a sharded replica: each block's collectives after its passes
/// (strategies/model_parallel.hpp, Megatron's f and g, as torchtitan's parallelize plan and
/// Megatron-DeepSpeed's layers place them), on the compute stream of the replica's tp ranks. Tensor
/// rank 0 declares them in its program order; the others, which run the same program, join them
/// in that order. hook(slot) is add_passes' after_pass (none without tensor parallelism).
class ReplicaTensorCollectives {
public:
    ReplicaTensorCollectives(OpGraph& g, const Plan& plan, const TensorSlots& s)
        : g_(g), plan_(plan), s_(s), cids_(static_cast<std::size_t>(s.dp)), next_(s.slots.size(), 0) {}

    std::function<void(int, const Block&, Phase)> hook(int slot) {
        if (s_.tp == 1) return {};
        return [this, slot](int mb, const Block& b, Phase phase) {
            // Full recompute redoes them all, selective recompute of the MLP its own (Block).
            const int count = phase == Phase::recompute ? b.tp_collectives_recompute : b.tp_collectives_fwd;
            const int tp = s_.tp, d = slot / tp, t = slot % tp;
            std::vector<std::int32_t>& cids = cids_[static_cast<std::size_t>(d)];
            for (int k = 0; k < count; ++k)
                for (int j = 0; j < (plan_.sequence_parallel ? 2 : 1); ++j) {
                    std::int32_t cid;
                    if (t == 0) {
                        const CollectiveKind kind = !plan_.sequence_parallel ? CollectiveKind::all_reduce
                                                    : j == 0                 ? CollectiveKind::all_gather
                                                                             : CollectiveKind::reduce_scatter;
                        std::vector<int> members(s_.slots.begin() + d * tp, s_.slots.begin() + (d + 1) * tp);
                        cid = g_.declare_collective(kind, members, b.tp_bytes_per_collective);
                        cids.push_back(cid);
                    } else {
                        cid = cids[next_[static_cast<std::size_t>(slot)]++];
                    }
                    g_.add_collective_op(cid, s_.slots[static_cast<std::size_t>(slot)], Stream::compute, phase, b.index, mb, k);
                }
        };
    }

private:
    OpGraph& g_;
    const Plan& plan_;
    const TensorSlots& s_;
    std::vector<std::vector<std::int32_t>> cids_;   // per replica, in tensor rank 0's order
    std::vector<std::size_t> next_;                 // per slot: its next collective in that order
};

}  // namespace

OpGraph build_zero(const Model& model, const Layout& layout, const Plan& plan, int stage) {
    if (stage == 3) return build_zero3(model, layout, plan);
    if (stage != 1 && stage != 2) throw Error(ErrorKind::internal, "ZeRO stage " + std::to_string(stage));
    std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const Training training = apply_finetune(model, layout, blocks);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);   // trainable
    const int n = layout.dp, mbs = layout.microbatches;
    // DeepSpeed's engine (stage_1_and_2.py:939-961, reduce_independent_p_g_buckets_and_remove_grads)
    // fills an IPG bucket with gradients as backward produces them and reduces it when the next
    // would take it past reduce_bucket_size elements (5e8 by default, runtime/zero/config.py:109).
    // Megatron's distributed optimizer buckets by --bucket-mb.
    const Framework& fw = layout.framework;
    const bool ipg = deepspeed_engine(fw.name);
    const Bytes cap = ipg ? reduce_bucket_cap(fw, params, sb.grads) : layout.bucket;
    const std::vector<Bucket> buckets =
        layout.fp8_param_gather ? make_fp8_param_buckets(blocks, sb.grads, cap) : make_buckets(blocks, sb.grads, cap, cap);
    const int last_block = static_cast<int>(blocks.size()) - 1;
    // ZeRO-Offload (stage_1_and_2.py with offload_optimizer): the optimizer state, the fp32
    // gradient partition and the step on the host (strategies/offload.hpp).
    const bool offload = layout.optimizer_offload != Offload::none;
    const std::int64_t mine = shard(params, n);

    OpGraph g(layout.devices);
    // With tensor parallelism (Megatron-DeepSpeed's layers on DeepSpeed's engine, which
    // partitions over the data-parallel group) each replica is tp ranks holding a slice of every
    // block (the blocks above are one rank's); each tensor rank's gradients and optimizer states
    // are partitioned over the replicas' ranks of that tensor rank. Index d below runs over the
    // emitted slots (TensorSlots).
    const TensorSlots ts(layout);
    const std::vector<int>& replicas = ts.slots;
    const int tp = layout.tp;
    const std::size_t emit = static_cast<std::size_t>(emitted_replicas(layout) * tp);
    ReplicaTensorCollectives tp_collectives(g, plan, ts);
    const ReduceTiming timing = n > 1 ? reduce_timing(layout, stage) : ReduceTiming::overlapped;
    const Stream comm = timing == ReduceTiming::blocking ? Stream::compute : Stream::comm;
    const int first_mb = stage == 1 ? mbs - 1 : 0;   // stage 1 reduces at the accumulation boundary
    // Stage 2 keeps each bucket's gradients in a transient buffer until they are reduced (and,
    // offloaded, copied out); so does stage 1 offloaded on one rank.
    const bool bucketed = stage == 2 && (n > 1 || offload);
    // DeepSpeed's buckets live in IPG buffers of reduce_bucket_size elements, whatever the model:
    // backward() takes one with torch.empty, a second with overlap_comm, for the whole backward
    // (stage_1_and_2.py:2049-2060), and they are released after it. Elsewhere each bucket has a
    // transient buffer of its own gradients.
    const bool ipg_buffers = ipg && bucketed;
    // Where no bucket passes through them, backward() takes them all the same (contiguous_gradients,
    // on by default): at stage 1 gradients accumulate in .grad and reduce_gradients() copies them
    // into the buffer at the accumulation boundary (:706-722, engine.py:2056-2059); the buffer
    // backward() took for the first micro-batch is replaced by the next one's, and
    // independent_gradient_partition_epilogue releases it after the last reduction (:802,
    // _release_ipg_buffers :676-678). Stage 2 on one rank without offload releases it in the
    // epilogue after every backward (engine.py:2052-2053).
    const bool ipg_held = ipg && !ipg_buffers;
    std::vector<std::vector<std::pair<int, std::int32_t>>> held(replicas.size());   // (micro-batch, buffer)
    std::vector<std::vector<OpId>> held_until(replicas.size());                      // stage 1: its reductions
    const int ipg_count = fw.overlap_comm.value_or(false) ? 2 : 1;   // stage 1-2's default: off (config.py:383)
    const Bytes ipg_bytes = Bytes(std::max<std::int64_t>(1, fw.reduce_bucket)) * std::int64_t{sb.grads};
    std::vector<std::map<int, std::vector<std::int32_t>>> ipg_buf(replicas.size());   // per micro-batch
    std::vector<std::map<int, std::vector<OpId>>> ipg_done(replicas.size());           // its buckets off the device
    const detail::GradientOffload how{sb.grads, sb.grads, Tier::host, layout.dtype};
    std::vector<Passes> passes;
    std::vector<std::map<std::pair<int, int>, std::int32_t>> bucket_buf(replicas.size());
    std::map<std::tuple<int, int, int>, std::int32_t> blocking_cid;   // (micro-batch, bucket, tensor rank)
    std::vector<OpId> last_rs(replicas.size(), static_cast<OpId>(-1));
    std::vector<OpId> host_step(replicas.size(), OpGraph::kNoOp), last_out(replicas.size(), OpGraph::kNoOp),
        out_prev(replicas.size(), OpGraph::kNoOp);
    // Offloaded, each bucket's free (after its partition's copy) per (micro-batch, block its
    // gradients complete after): what the throttle below waits for.
    std::vector<std::map<std::pair<int, int>, std::vector<OpId>>> freed_after(replicas.size());
    // A bucket has left its IPG buffer (reduced, and offloaded, copied out); after the last one of
    // the micro-batch its buffers are released.
    auto ipg_finished = [&](std::size_t d, int mb, std::size_t k, OpId device_done, Stream stream) {
        std::vector<OpId>& done = ipg_done[d][mb];
        done.push_back(device_done);
        if (k + 1 < buckets.size()) return;
        for (const std::int32_t buf : ipg_buf[d][mb]) {
            const OpId f = g.add_free(buf, stream, -1, mb);
            for (const OpId o : done) g.depend(o, f);
        }
    };
    std::int64_t largest = 1;
    for (const Block& b : blocks)
        for (std::int64_t e : partitioned_tensors(b, 0)) largest = std::max(largest, e);
    // Megatron's --overlap-param-gather: the updated parameters are gathered under the next
    // forward instead of after the step (megatron/core/distributed/distributed_data_parallel.py
    // _make_forward_pre_hook): in forward order (the reverse of the gradient buckets') on the
    // communication stream, each dispatched at a block's pre-hook once the compute before that
    // block is done (param_gather_dispatch_block), each waited for by the first block using its
    // parameters. The graph's one step stands for the steady state, where this is the step's own
    // forward.
    const bool gather_in_forward = fw.overlap_param_gather && n > 1;
    std::vector<std::vector<OpId>> forward_gathers(gather_in_forward ? buckets.size() : 0);   // [bucket][slot]
    for (std::size_t k = forward_gathers.size(); k-- > 0;)
        forward_gathers[k] = over_tensor_ranks(g, layout, ts, CollectiveKind::all_gather, gathered_bytes(buckets[k], sb.grads, sb.params),
                                               Stream::comm, Phase::fwd, buckets[k].ready_after_block, 0, static_cast<int>(k));
    for (std::size_t d = 0; d < emit; ++d) {
        const int r = replicas[d];
        if (!offload) {
            alloc_model_states(g, r, Bytes(params * sb.params) + training.frozen,
                               Bytes((stage == 1 ? params : mine) * sb.grads), optimizer_state_bytes(layout, mine));
        } else {
            alloc_state(g, r, Bytes(params * sb.params) + training.frozen, BufferLabel::parameters);
            if (stage == 1) alloc_state(g, r, Bytes(params * sb.grads), BufferLabel::gradients);
            // Pinned host memory: the fp32 master weights and moments, the fp32 gradient
            // partition, the 16-bit copy of the updated partition (param_buffer_of_bit16_for_cpu_
            // offload_groups) and, with gradient accumulation, the 16-bit partition accumulated
            // through the host (accumulated_grads_in_cpu).
            alloc_state(g, r, optimizer_state_bytes(layout, mine), BufferLabel::optimizer_state, Tier::host);
            alloc_state(g, r, Bytes(mine * 4), BufferLabel::gradients, Tier::host);
            alloc_state(g, r, Bytes(mine * sb.params), BufferLabel::staging, Tier::host);
            if (stage == 2 && mbs > 1) alloc_state(g, r, Bytes(mine * sb.grads), BufferLabel::gradients, Tier::host);
            // temp_grad_buffer_for_gpu_offload: the largest parameter tensor, in the 16-bit dtype.
            alloc_state(g, r, Bytes(largest * sb.params), BufferLabel::workspace);
            // The delayed update (Ren et al. 2021 §5.2) steps the previous step's gradients while
            // this step's forward and backward run; this step's gradients wait for it to have read
            // the fp32 partition they overwrite.
            if (layout.delayed_update)
                host_step[d] = add_optimizer_steps(g, layout, StepRunner::deepspeed_cpu, {r}, mine,
                                                   layer_params(blocks, n), false, {}).front();
        }
        std::function<void(int, const Block&)> before_bwd;
        if (bucketed || ipg_held)
            before_bwd = [&, d, r](int mb, const Block& b) {
                if (ipg_held) {
                    if (b.index != last_block || (stage == 1 && mb != 0)) return;
                    for (int i = 0; i < ipg_count; ++i) {
                        const std::int32_t buf = g.add_buffer(r, Tier::device, ipg_bytes, BufferLabel::bucket);
                        g.add_alloc(buf, Stream::compute, b.index, mb);
                        held[d].emplace_back(mb, buf);
                    }
                    return;
                }
                if (ipg_buffers) {
                    if (b.index != last_block) return;
                    for (int i = 0; i < ipg_count; ++i) {
                        const std::int32_t buf = g.add_buffer(r, Tier::device, ipg_bytes, BufferLabel::bucket);
                        g.add_alloc(buf, Stream::compute, b.index, mb);
                        ipg_buf[d][mb].push_back(buf);
                    }
                    return;
                }
                for (std::size_t k = 0; k < buckets.size(); ++k)
                    if (bucket_first_block(buckets, k, last_block) == b.index) {
                        const std::int32_t buf = g.add_buffer(r, Tier::device, buckets[k].bytes, BufferLabel::bucket);
                        g.add_alloc(buf, Stream::compute, b.index, mb);
                        bucket_buf[d][{mb, static_cast<int>(k)}] = buf;
                    }
            };
        // After a bucket's reduction (or, on one rank, its backward): offloaded, the rank's
        // partition leaves the device; the bucket buffer is freed once it is reduced or copied.
        auto finish_bucket = [&, d, r](int mb, int k, OpId reduced, Stream stream) {
            OpId device_done = reduced;
            if (offload) {
                const std::int64_t part = buckets[static_cast<std::size_t>(k)].bytes.count() / sb.grads / n;
                const detail::OffloadedPartition o =
                    stage == 1 ? detail::offload_gradient(g, r, part, how, 0, 1, stream, reduced, host_step[d], out_prev[d], -1, k)
                               : detail::offload_gradient(g, r, part, how, mb, mbs, stream, reduced,
                                                          mb == mbs - 1 ? host_step[d] : OpGraph::kNoOp, out_prev[d], -1, k);
                device_done = o.device_done;
                if (mb == mbs - 1) last_out[d] = o.done;
                stream = Stream::copy;
            }
            if (ipg_buffers) {
                ipg_finished(d, mb, static_cast<std::size_t>(k), device_done, stream);
            } else if (ipg_held) {
                held_until[d].push_back(device_done);
            } else if (bucketed) {
                const OpId f = g.add_free(bucket_buf[d].at({mb, k}), stream, -1, mb);
                g.depend(device_done, f);
                freed_after[d][{mb, buckets[static_cast<std::size_t>(k)].ready_after_block}].push_back(f);
            }
        };
        std::function<void(int, const Block&, OpId)> after_bwd;
        if (timing == ReduceTiming::blocking || (n == 1 && offload))
            after_bwd = [&, d, r, finish_bucket](int mb, const Block& b, OpId bwd) {
                if (mb < first_mb) return;
                for (std::size_t k = 0; k < buckets.size(); ++k) {
                    if (buckets[k].ready_after_block != b.index) continue;
                    OpId reduced = bwd;
                    if (n > 1) {
                        const int t = static_cast<int>(d) % tp;
                        auto [it, fresh] = blocking_cid.try_emplace({mb, static_cast<int>(k), t}, -1);
                        if (fresh) it->second = g.declare_collective(CollectiveKind::reduce_scatter, ts.tensor_rank(t), buckets[k].bytes);
                        reduced = last_rs[d] =
                            g.add_collective_op(it->second, r, Stream::compute, Phase::comm, -1, mb, static_cast<int>(k));
                    }
                    finish_bucket(mb, static_cast<int>(k), reduced, Stream::compute);
                }
            };
        else if (ipg_held && stage == 2)
            after_bwd = [&, d](int mb, const Block& b, OpId) {
                if (b.index != 0) return;
                for (const auto& [m, buf] : held[d])
                    if (m == mb) g.add_free(buf, Stream::compute, -1, mb);
            };
        // Stage 1 keeps each parameter's .grad through the accumulation (see above), so autograd
        // accumulates into it; stage 2's hooks take every micro-batch's gradient into the buckets.
        passes.push_back(add_passes(g, r, blocks, mbs, layout.dtype, before_bwd, after_bwd, &training.kernels,
                                    layout.activation_offload,
                                    stage == 1 ? std::optional(layout.framework.grad_accumulation) : std::nullopt,
                                    tp_collectives.hook(static_cast<int>(d)),
                                    layout.fp8_param_gather ? Fp8Weights::gathered_per_step : Fp8Weights::copies));
    }

    for (std::size_t k = 0; k < forward_gathers.size(); ++k) {
        const int dispatched_at = param_gather_dispatch_block(buckets, k);
        for (std::size_t d = 0; d < emit; ++d) {
            const OpId gather = forward_gathers[k][d];
            if (gather == OpGraph::kNoOp) continue;
            const auto& fwd = passes[d].fwd[0];
            if (dispatched_at > 0) g.depend(fwd[static_cast<std::size_t>(dispatched_at - 1)], gather);
            g.depend(gather, passes[d].fwd_first[0][static_cast<std::size_t>(buckets[k].ready_after_block)]);
        }
    }
    if (n > 1 && timing != ReduceTiming::blocking)
        for (int mb = first_mb; mb < mbs; ++mb)
            for (std::size_t k = 0; k < buckets.size(); ++k) {
                const auto ops = over_tensor_ranks(g, layout, ts, CollectiveKind::reduce_scatter, buckets[k].bytes, Stream::comm,
                                                   Phase::comm, -1, mb, static_cast<int>(k));
                // Overlapped: when backward fills the bucket; after backward: when it is all done.
                const std::size_t ready = timing == ReduceTiming::after_backward ? 0 : static_cast<std::size_t>(buckets[k].ready_after_block);
                for (std::size_t d = 0; d < emit; ++d) {
                    g.depend(passes[d].bwd[mb][ready], ops[d]);
                    last_rs[d] = ops[d];
                    OpId device_done = ops[d];
                    Stream stream = Stream::comm;
                    if (offload) {
                        const std::int64_t part = buckets[k].bytes.count() / sb.grads / n;
                        const detail::OffloadedPartition o =
                            stage == 1 ? detail::offload_gradient(g, replicas[d], part, how, 0, 1, Stream::comm, ops[d],
                                                                  host_step[d], out_prev[d], -1, static_cast<int>(k))
                                       : detail::offload_gradient(g, replicas[d], part, how, mb, mbs, Stream::comm, ops[d],
                                                                  mb == mbs - 1 ? host_step[d] : OpGraph::kNoOp, out_prev[d], -1,
                                                                  static_cast<int>(k));
                        device_done = o.device_done;
                        if (mb == mbs - 1) last_out[d] = o.done;
                        stream = Stream::copy;
                    }
                    if (ipg_buffers) {
                        ipg_finished(d, mb, k, device_done, stream);
                    } else if (ipg_held) {
                        held_until[d].push_back(device_done);
                    } else if (bucketed) {
                        const OpId f = g.add_free(bucket_buf[d].at({mb, static_cast<int>(k)}), stream, -1, mb);
                        g.depend(device_done, f);
                        freed_after[d][{mb, buckets[k].ready_after_block}].push_back(f);
                    }
                }
            }
    // Stage 1's held buffers go after the boundary's last reduction (stage 2's went after_bwd).
    if (ipg_held && stage == 1)
        for (std::size_t d = 0; d < emit; ++d)
            for (const auto& [mb, buf] : held[d]) {
                const OpId f = g.add_free(buf, Stream::compute, -1, mbs - 1);
                for (const OpId o : held_until[d]) g.depend(o, f);
            }
    // DeepSpeed's own rule, per bucket: the next gradient is copied into the IPG buffer the last
    // reduction released (stage_1_and_2.py:939-961; ipg_index alternates with overlap_comm), and
    // offloaded without overlap_comm the copy to the host runs on the current stream (:1382-1388),
    // so the first block of bucket j + count waits until bucket j has left the device.
    if (ipg_buffers)
        for (std::size_t d = 0; d < replicas.size(); ++d)
            for (const auto& [mb, done] : ipg_done[d])
                for (std::size_t j = 0; j + static_cast<std::size_t>(ipg_count) < buckets.size() && j < done.size(); ++j) {
                    const int first = buckets[j + static_cast<std::size_t>(ipg_count) - 1].ready_after_block - 1;
                    if (first >= 0)
                        g.depend(done[j], passes[d].bwd_first[static_cast<std::size_t>(mb)][static_cast<std::size_t>(first)]);
                }
    // Other engines' offloaded buckets: a block's backward waits until the gradients of the block
    // two before it have left the device.
    else if (offload && bucketed)
        for (std::size_t d = 0; d < replicas.size(); ++d)
            for (int mb = 0; mb < mbs; ++mb)
                for (int i = 0; i + 2 <= last_block; ++i) {
                    const auto it = freed_after[d].find({mb, i + 2});
                    if (it == freed_after[d].end()) continue;
                    for (OpId f : it->second) g.depend(f, passes[d].bwd_first[static_cast<std::size_t>(mb)][static_cast<std::size_t>(i)]);
                }
    // The step: on the device after the last reduction, or on the host after the last partition
    // arrived (the delayed update's already ran), then the updated 16-bit partition back to the
    // device (after this step's backward, which still reads the parameters).
    std::vector<OpId> opt(replicas.size());
    if (!offload) {
        std::vector<OpId> after(replicas.size(), OpGraph::kNoOp);
        for (std::size_t d = 0; d < replicas.size(); ++d)
            if (last_rs[d] != static_cast<OpId>(-1)) after[d] = last_rs[d];
        // Every tensor rank steps its own partition (LAMB, whose norms would span the slices, is
        // refused with tensor parallelism).
        opt = add_optimizer_steps(g, layout, StepRunner::device, replicas, mine, layer_params(blocks, n), n > 1 && tp == 1, after,
                                  comm);
        // --fp8-param-gather: the shard's FP8 weights cast from the fp32 ones, then their amaxes
        // reduced over the group (one fp32 per weight tensor), before the gathers.
        if (layout.fp8_param_gather) {
            const int last = static_cast<int>(blocks.size());
            const std::int64_t fp8 = shard(fp8_weight_params(blocks, 0, last), n);
            const std::int32_t recipe = g.intern_recipe(fp8_master_cast_kernels(fp8, layout.dtype, layout.fp8));
            for (std::size_t d = 0; d < emit; ++d) {
                const OpId cast = g.add_kernels(replicas[d], Phase::opt, -1, -1, recipe, layout.dtype);
                g.depend(opt[d], cast);
                opt[d] = cast;
            }
            if (n > 1) {
                const auto amax = over_tensor_ranks(g, layout, ts, CollectiveKind::all_reduce,
                                                    Bytes(fp8_weight_tensors(blocks, 0, last) * 4), comm, Phase::opt, -1, -1, -1);
                for (std::size_t d = 0; d < emit; ++d) g.depend(opt[d], amax[d]), opt[d] = amax[d];
            }
        }
    } else {
        if (!layout.delayed_update)
            host_step = add_optimizer_steps(g, layout, StepRunner::deepspeed_cpu, replicas, mine, layer_params(blocks, n),
                                            n > 1 && tp == 1, last_out);
        for (std::size_t d = 0; d < emit; ++d) {
            opt[d] = g.add_copy(replicas[d], Tier::host, Tier::device, Bytes(mine * sb.params), Phase::opt);
            g.depend(host_step[d], opt[d]);
            g.depend(passes[d].bwd[static_cast<std::size_t>(mbs - 1)][0], opt[d]);
        }
    }
    // The updated parameter shards are all-gathered, bucket by bucket (under the next forward
    // with Megatron's --overlap-param-gather: forward_gathers).
    if (n > 1 && !gather_in_forward)
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            const auto ops = over_tensor_ranks(g, layout, ts, CollectiveKind::all_gather, gathered_bytes(buckets[k], sb.grads, sb.params),
                                               comm, Phase::opt, -1, -1, static_cast<int>(k));
            for (std::size_t d = 0; d < emit; ++d) g.depend(opt[d], ops[d]);
        }
    fold_replicas(g, layout);
    return g;
}

OpGraph build_sharded(const Model& model, const Layout& layout, const Plan& plan, const ShardedOptions& options) {
    std::vector<Block> blocks = replica_blocks(model, layout, plan);
    // LoRA / QLoRA (strategies/finetune.hpp): each unit holds its frozen weights (16-bit, or
    // QLoRA's NF4 blocks stored as bitsandbytes' quant_storage) beside its adapters, sharded and
    // gathered with them; only the adapters have gradients, so only they are reduced and stepped
    // (FSDP2's per-parameter sharding: a frozen parameter has no gradient; FSDP1 as Answer.AI's
    // fsdp_qlora wraps it, the adapters in units of their own). The blocks' params become the
    // trainable ones.
    const Training training = apply_finetune(model, layout, blocks);
    auto frozen = [&](const Block& b) {
        return training.frozen_by_block.empty() ? Bytes(0) : training.frozen_by_block[static_cast<std::size_t>(b.index)];
    };
    const StateBytes sb = state_bytes(layout.dtype);
    const int rb = layout.fsdp_reduce_bytes;   // bytes per gradient reduced (--fsdp-reduce-dtype)
    const std::int64_t params = total_params(blocks);   // trainable
    // With tensor parallelism (FSDP + TP, torchtitan's 2-D mesh) every replica is tp ranks, each
    // holding a tensor slice of every block (the blocks above are one rank's); FSDP shards each
    // slice over the replicas' ranks of the same tensor rank. Slot d·tp + t is replica d's tensor
    // rank t (slots[] its rank); without tensor parallelism a slot is a replica. The loops below
    // run their index d over the emitted slots (a folded layout's kept replicas' ranks).
    const int tp = layout.tp, dp = layout.dp;
    const TensorSlots ts(layout);
    const std::vector<int>& slots = ts.slots;
    const std::vector<int>& slot_of = ts.slot_of;
    const int ns = dp * tp, emit = emitted_replicas(layout) * tp;
    const int group = options.shard_params ? (options.shard_group > 0 ? options.shard_group : dp) : 1;
    if (dp % group != 0) throw Error(ErrorKind::internal, "shard group does not divide dp");
    // CPUOffload(offload_params=True) (torch/distributed/fsdp/_runtime_utils.py, _flat_param.py):
    // the fp32 shard of every flat parameter, its gradient and the optimizer live in host memory;
    // each unshard copies the fp32 shard to the device and casts it to the 16-bit param_dtype
    // before the all-gather; each reduced gradient shard is cast to fp32 and copied to the host;
    // PyTorch's optimizer steps the host shards (strategies/optimizer.hpp).
    // Frozen weights (LoRA, QLoRA) offloaded: their shard lives on the host in its storage dtype
    // (16-bit, or NF4 packed into bf16 as Answer.AI's fsdp_qlora stores it, bnb_4bit_quant_storage)
    // and is copied to the device as it is (no cast: its dtype is the compute one); it has no
    // gradient, so no copy back and no step.
    const bool offload = layout.param_offload == Offload::cpu;
    const int nb = static_cast<int>(blocks.size());
    const int mbs = layout.microbatches;
    // FSDP's no_sync() through the accumulation (--fsdp-no-sync; plan.cpp refuses it offloaded).
    const bool no_sync = plan.fsdp_no_sync && options.shard_params;

    // Shard groups: consecutive replicas; replica groups: the same position in every shard group;
    // each of one tensor rank.
    std::vector<std::vector<int>> shard_groups(static_cast<std::size_t>(tp * (dp / group))),
        replica_groups(static_cast<std::size_t>(tp * group));
    for (int t = 0; t < tp; ++t)
        for (int d = 0; d < dp; ++d) {
            const int r = slots[static_cast<std::size_t>(d * tp + t)];
            shard_groups[static_cast<std::size_t>(t * (dp / group) + d / group)].push_back(r);
            replica_groups[static_cast<std::size_t>(t * group + d % group)].push_back(r);
        }

    OpGraph g(layout.devices);
    std::vector<Passes> passes;
    // Per replica, per (micro-batch, block): the transient full-gradient buffer of the unit.
    std::vector<std::vector<std::vector<std::int32_t>>> grad_buf(
        static_cast<std::size_t>(ns), std::vector<std::vector<std::int32_t>>(static_cast<std::size_t>(mbs), std::vector<std::int32_t>(blocks.size(), -1)));
    ReplicaTensorCollectives tp_collectives(g, plan, ts);
    const std::int64_t mine_fp8 = shard(fp8_weight_params(blocks, 0, nb), group);
    for (int d = 0; d < emit; ++d) {
        const int r = slots[static_cast<std::size_t>(d)];
        const std::int64_t mine = shard(params, group);
        if (offload) {
            // The fp32 shard is the master copy: the optimizer adds only its own state.
            alloc_state(g, r, Bytes(mine * 4), BufferLabel::parameters, Tier::host);
            alloc_state(g, r, Bytes(mine * 4), BufferLabel::gradients, Tier::host);
            alloc_state(g, r, optimizer_state_bytes(layout.optimizer, DType::fp32, mine), BufferLabel::optimizer_state,
                        Tier::host);
            if (training.frozen.count() > 0)
                alloc_state(g, r, Bytes(shard(training.frozen.count(), group)), BufferLabel::parameters, Tier::host);
        } else {
            // --fp8-param-gather (Megatron-FSDP): the FP8 weights' shards are FP8 (uint8 buffers,
            // megatron_fsdp param_and_grad_buffer.py reset_context_args init_param_with_fp8).
            const std::int64_t kept = mine * sb.params - (layout.fp8_param_gather ? mine_fp8 * (sb.params - 1) : 0);
            alloc_model_states(g, r, Bytes(kept) + Bytes(shard(training.frozen.count(), group)), Bytes(mine * sb.grads),
                               optimizer_state_bytes(layout, mine));
        }
        std::function<void(int, const Block&)> before_bwd;
        if (group > 1 || offload)
            before_bwd = [&, d, r](int mb, const Block& b) {
                if (b.params == 0) return;   // frozen: no gradient
                if (no_sync && mb > 0) return;   // the first micro-batch's buffer accumulates them all
                const std::int32_t buf = g.add_buffer(r, Tier::device, Bytes(b.params * rb), BufferLabel::bucket);
                g.add_alloc(buf, Stream::compute, b.index, mb);
                grad_buf[static_cast<std::size_t>(d)][static_cast<std::size_t>(mb)][static_cast<std::size_t>(b.index)] = buf;
            };
        // Under no_sync autograd adds each later micro-batch's gradient to the unsharded one
        // (AccumulateGrad, as DDP's accumulation).
        passes.push_back(add_passes(g, r, blocks, mbs, layout.dtype, before_bwd, {}, &training.kernels, false,
                                    no_sync ? std::optional(layout.framework.grad_accumulation) : std::nullopt,
                                    tp_collectives.hook(d),
                                    layout.fp8_param_gather ? Fp8Weights::gathered_per_pass : Fp8Weights::copies));
    }

    // Comm-stream programs, step by step for every rank at once (all ranks run the same program,
    // so every communicator sees its collectives in one order).
    auto collective = [&](CollectiveKind kind, const std::vector<std::vector<int>>& groups, Bytes bytes, Phase phase,
                          int layer, int mb) {
        std::vector<OpId> by_slot(static_cast<std::size_t>(ns));
        for (const auto& members : groups) {
            const auto ops = add_replica_collective(g, layout, kind, members, bytes, Stream::comm, phase, layer, mb);
            for (std::size_t i = 0; i < members.size(); ++i) by_slot[static_cast<std::size_t>(slot_of[static_cast<std::size_t>(members[i])])] = ops[i];
        }
        return by_slot;
    };
    std::vector<std::vector<std::int32_t>> gathered(static_cast<std::size_t>(ns), std::vector<std::int32_t>(blocks.size(), -1));
    // A unit's gathered parameters: its trainable ones in the parameter dtype and its frozen weights.
    // Under --fp8-param-gather its FP8 weights are gathered at a byte each into a buffer that holds
    // their transposes too (the 16-bit size).
    auto unit_bytes = [&](const Block& b) { return Bytes(b.params * sb.params) + frozen(b); };
    auto gather_bytes = [&](const Block& b) {
        return unit_bytes(b) - (layout.fp8_param_gather ? Bytes(b.fp8_params * (sb.params - 1)) : Bytes(0));
    };
    // `issue_after`, when given, per slot and block: the op whose end the gather waits for (the
    // hook that issues it), beyond the comm stream's order.
    auto gather = [&](const Block& b, int mb, Phase phase, const std::vector<std::vector<OpId>>& consumers,
                      const std::vector<std::vector<OpId>>* issue_after = nullptr, int after_block = -1) {
        std::vector<OpId> ready(static_cast<std::size_t>(ns), OpGraph::kNoOp);
        for (int d = 0; d < emit; ++d) {
            const int r = slots[static_cast<std::size_t>(d)];
            const std::int32_t buf = g.add_buffer(r, Tier::device, unit_bytes(b), BufferLabel::staging);
            const OpId a = g.add_alloc(buf, Stream::comm, b.index, mb);
            if (issue_after) g.depend((*issue_after)[static_cast<std::size_t>(d)][static_cast<std::size_t>(after_block)], a);
            gathered[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)] = buf;
            if (offload) {
                // The fp32 shard to the device (after the unshard's buffer exists: the comm
                // stream's order limits how far ahead it runs), cast to the 16-bit dtype there.
                const std::int64_t s_b = shard(b.params, group);
                // A unit's frozen shard lands in the unsharded buffer as it is; a unit of frozen
                // weights alone has nothing to cast.
                const std::int32_t f32 = s_b > 0 ? g.add_buffer(r, Tier::device, Bytes(s_b * 4), BufferLabel::staging) : -1;
                const OpId fa = s_b > 0 ? g.add_alloc(f32, Stream::comm, b.index, mb) : OpGraph::kNoOp;
                const OpId in = g.add_copy(r, Tier::host, Tier::device, Bytes(s_b * 4 + shard(frozen(b).count(), group)),
                                           phase, b.index, mb);
                g.depend(a, in);
                ready[static_cast<std::size_t>(d)] = in;
                if (s_b > 0) {
                    g.depend(fa, in);
                    const Kernel cast = stream_kernel(KernelName::other, KernelClass::elementwise, s_b * (4 + sb.params));
                    ready[static_cast<std::size_t>(d)] =
                        g.add_kernels(r, phase, b.index, mb, g.intern_recipe({&cast, 1}), layout.dtype, false, Stream::comm);
                    g.depend(in, ready[static_cast<std::size_t>(d)]);
                    g.add_free(f32, Stream::comm, b.index, mb);
                }
            }
        }
        if (group == 1) {   // one rank (offloaded): the copy and cast are the whole unshard
            for (int d = 0; d < emit; ++d)
                g.depend(ready[static_cast<std::size_t>(d)], consumers[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)]);
            return;
        }
        const auto ops = collective(CollectiveKind::all_gather, shard_groups, gather_bytes(b), phase, b.index, mb);
        for (int d = 0; d < emit; ++d) {
            // Offloaded: the gather sends what came from the host (a cast before it is on the
            // comm stream already; a frozen unit's copy is not).
            if (offload) g.depend(ready[static_cast<std::size_t>(d)], ops[static_cast<std::size_t>(d)]);
            g.depend(ops[static_cast<std::size_t>(d)], consumers[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)]);
        }
    };
    auto release = [&](const Block& b, int mb, const std::vector<std::vector<OpId>>& after) {
        for (int d = 0; d < emit; ++d) {
            const OpId f = g.add_free(gathered[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], Stream::comm, b.index, mb);
            g.depend(after[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], f);
        }
    };
    std::vector<OpId> last_comm(static_cast<std::size_t>(ns), OpGraph::kNoOp), last_out(static_cast<std::size_t>(ns), OpGraph::kNoOp),
        out_prev(static_cast<std::size_t>(ns), OpGraph::kNoOp);
    // Gradients of a unit after its backward: reduce-scatter in the shard group, then (hybrid)
    // all-reduce of the shard across groups; NO_SHARD all-reduces the whole unit (last micro-batch).
    auto reduce = [&](const Block& b, int mb, const std::vector<std::vector<OpId>>& bwd) {
        if (b.params == 0) return;   // frozen (fine-tuning): nothing to reduce
        if (no_sync && group > 1 && mb < mbs - 1) return;   // held until the last micro-batch
        const int held_from = no_sync ? 0 : mb;              // the buffer the gradient is in
        std::vector<OpId> ops;
        if (group > 1) {
            ops = collective(CollectiveKind::reduce_scatter, shard_groups, Bytes(b.params * rb), Phase::comm, b.index, mb);
            for (int d = 0; d < emit; ++d)
                g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], ops[static_cast<std::size_t>(d)]);
            if (dp / group > 1)
                ops = collective(CollectiveKind::all_reduce, replica_groups, Bytes(shard(b.params, group) * rb),
                                 Phase::comm, b.index, mb);
            for (int d = 0; d < emit; ++d)
                g.add_free(grad_buf[static_cast<std::size_t>(d)][static_cast<std::size_t>(held_from)][static_cast<std::size_t>(b.index)],
                           Stream::comm, b.index, mb);
        } else if (dp > 1 && mb == mbs - 1) {
            ops = collective(CollectiveKind::all_reduce, replica_groups, Bytes(b.params * rb), Phase::comm, b.index, mb);
            for (int d = 0; d < emit; ++d)
                g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)], ops[static_cast<std::size_t>(d)]);
        }
        for (std::size_t d = 0; d < ops.size(); ++d) last_comm[d] = ops[d];
        if (!offload) return;
        const detail::GradientOffload how{rb, 4, Tier::host, layout.dtype};
        for (int d = 0; d < emit; ++d) {
            const OpId ready = ops.empty() ? bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(b.index)] : ops[static_cast<std::size_t>(d)];
            const detail::OffloadedPartition o = detail::offload_gradient(g, slots[static_cast<std::size_t>(d)],
                                                                          shard(b.params, group), how, mb, mbs, Stream::comm, ready,
                                                                          OpGraph::kNoOp, out_prev[static_cast<std::size_t>(d)], b.index);
            if (group == 1) {
                const OpId f = g.add_free(grad_buf[static_cast<std::size_t>(d)][static_cast<std::size_t>(mb)][static_cast<std::size_t>(b.index)],
                                          Stream::copy, b.index, mb);
                g.depend(o.device_done, f);
            }
            if (mb == mbs - 1) last_out[static_cast<std::size_t>(d)] = o.done;
        }
    };

    // Whether unit i is resharded after its forward (and gathered again for backward).
    auto resharded = [&](int i) {
        return detail::fsdp_reshards_after_forward(blocks[static_cast<std::size_t>(i)], options.reshard_after_forward);
    };
    std::vector<std::vector<OpId>> fwd(static_cast<std::size_t>(ns)), bwd(static_cast<std::size_t>(ns)),
        bwd_first(static_cast<std::size_t>(ns)), fwd_first(static_cast<std::size_t>(ns));
    for (int mb = 0; mb < mbs; ++mb) {
        for (int d = 0; d < emit; ++d) {
            fwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].fwd[static_cast<std::size_t>(mb)];
            fwd_first[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].fwd_first[static_cast<std::size_t>(mb)];
            bwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd[static_cast<std::size_t>(mb)];
            bwd_first[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd_first[static_cast<std::size_t>(mb)];
        }
        if (group > 1 || offload) {
            // FSDP's hooks, unit by unit (detail::FsdpHooks). A backward gather precedes the
            // unit's recompute (when it has one), not only its backward.
            auto block = [&](int i) -> const Block& { return blocks[static_cast<std::size_t>(i)]; };
            const detail::FsdpHooks hooks{
                nb, resharded,
                [&](int i, Phase phase, int after) {
                    if (phase == Phase::fwd) return gather(block(i), mb, phase, fwd_first);
                    gather(block(i), mb, phase, bwd_first, after >= 0 ? &bwd : nullptr, after);
                },
                [&](int i, Phase phase) { release(block(i), mb, phase == Phase::fwd ? fwd : bwd); },
                [&](int i) { reduce(block(i), mb, bwd); }};
            detail::fsdp_forward_order(hooks);
            detail::fsdp_backward_order(hooks, plan.fsdp_backward_prefetch);
        } else {
            for (int j = nb - 1; j >= 0; --j) reduce(blocks[static_cast<std::size_t>(j)], mb, bwd);
        }
    }
    const StepRunner runner = offload ? StepRunner::torch_cpu : StepRunner::device;
    const std::vector<OpId>& after = offload ? last_out : last_comm;
    // Every tensor rank steps its own shard (no LAMB with tensor parallelism: resolve refuses it).
    const std::vector<OpId> stepped =
        add_optimizer_steps(g, layout, runner, slots, shard(params, group), layer_params(blocks, group), group > 1 && tp == 1, after);
    // --fp8-param-gather: the shard's FP8 weights cast from the fp32 ones (megatron_fsdp
    // mixed_precision.py quantize_param_shard, as under the distributed optimizer), then their
    // amaxes all-reduced over the shard group, one fp32 per weight tensor.
    if (layout.fp8_param_gather) {
        const std::int32_t recipe = g.intern_recipe(fp8_master_cast_kernels(mine_fp8, layout.dtype, layout.fp8));
        std::vector<OpId> cast(static_cast<std::size_t>(ns), OpGraph::kNoOp);
        for (int d = 0; d < emit; ++d) {
            cast[static_cast<std::size_t>(d)] = g.add_kernels(slots[static_cast<std::size_t>(d)], Phase::opt, -1, -1, recipe, layout.dtype);
            g.depend(stepped[static_cast<std::size_t>(d)], cast[static_cast<std::size_t>(d)]);
        }
        if (group > 1) {
            const auto amax = collective(CollectiveKind::all_reduce, shard_groups, Bytes(fp8_weight_tensors(blocks, 0, nb) * 4),
                                         Phase::opt, -1, -1);
            for (int d = 0; d < emit; ++d) g.depend(cast[static_cast<std::size_t>(d)], amax[static_cast<std::size_t>(d)]);
        }
    }
    fold_replicas(g, layout);
    return g;
}

std::vector<std::int64_t> partitioned_tensors(const Block& b, std::int64_t persistence_threshold,
                                              std::int64_t* persistent) {
    std::vector<std::int64_t> out;
    std::int64_t left = b.params, small = 0;
    for (const Kernel& k : b.fwd_kernels) {
        if (k.op != KernelOp::gemm || !k.weight) continue;
        const std::int64_t e = k.k * k.n;   // B of C[m×n] = A[m×k]·B[k×n]
        if (e * k.batch > left) continue;   // a tied weight, held by another block
        // A grouped GEMM is its experts' weights, one tensor each (Mixtral's w1 of every expert
        // is an nn.Linear of its own).
        for (std::int64_t i = 0; i < k.batch; ++i) {
            left -= e;
            (e >= persistence_threshold ? out.push_back(e) : void(small += e));
        }
    }
    // What no GEMM reads: embedding and position tables (one tensor), or norms and biases.
    if (left >= persistence_threshold) out.push_back(left);
    else small += left;
    if (persistent) *persistent = small;
    return out;
}

TwinFlowSplit twin_flow_split(const std::vector<Block>& blocks, int dp, std::int64_t sub_group_size, double ratio) {
    // DeepSpeed cuts each of the optimizer's parameter groups into sub-groups of its own
    // (stage3.py _create_fp16_partitions_with_defragmentation), in the groups' order. The
    // frameworks hand it two: the tensors with weight decay, then the 1-D ones and biases without
    // (Megatron-DeepSpeed's get_param_groups: name.endswith(".bias") or len(param.shape) == 1;
    // Hugging Face Trainer's decay / no-decay groups alike). A tensor's partition is
    // ceil(numel / dp) (partition_parameters.py _partition_param); the persistent tensors (under
    // the threshold) are partitioned for the optimizer too. A block's 1-D tensors count as one
    // tensor here, and a matrix under the threshold is one of the block's weights all the same.
    struct Group {
        std::int64_t part = 0, model = 0;
    };
    std::vector<Group> groups;
    std::vector<std::int64_t> no_decay;
    auto add = [&](std::vector<Group>& to, std::int64_t e) {
        if (e <= 0) return;
        if (to.empty() || to.back().part >= sub_group_size) to.emplace_back();
        to.back().part += shard(e, dp);
        to.back().model += e;
    };
    for (const Block& b : blocks) {
        // With a threshold of 0 every weight is a tensor of its own and the last entry is what no
        // GEMM reads: an embedding's tables (with weight decay), or a layer's norms and biases.
        std::vector<std::int64_t> tensors = partitioned_tensors(b, 0);
        if (b.kind != Block::Kind::embedding && !tensors.empty()) {
            no_decay.push_back(tensors.back());
            tensors.pop_back();
        }
        for (const std::int64_t e : tensors) add(groups, e);
    }
    const int weight_subgroups = static_cast<int>(groups.size());
    std::vector<Group> second;
    for (const std::int64_t e : no_decay) add(second, e);
    groups.insert(groups.end(), second.begin(), second.end());
    TwinFlowSplit out;
    out.subgroups = static_cast<int>(groups.size());
    out.weight_subgroups = weight_subgroups;
    // Python's int() of ratio × len(fp16_partitioned_groups_flat): truncation.
    out.on_cpu = static_cast<int>(ratio * static_cast<double>(out.subgroups));
    for (int i = 0; i < out.subgroups; ++i) {
        const Group& x = groups[static_cast<std::size_t>(i)];
        out.params += x.part;
        if (i < out.on_cpu) out.cpu_params += x.part, out.cpu_model += x.model;
    }
    return out;
}

std::optional<TwinFlowSplit> twin_flow_split(const Model& model, const Layout& layout, const Plan& plan) {
    const double ratio = plan.optimizer_offload_fraction.value_or(1.0);
    if (plan.strategy != DataParallel::zero3 || layout.optimizer_offload != Offload::cpu || !(ratio < 1)) return std::nullopt;
    return twin_flow_split(replica_blocks(model, layout, plan), layout.dp, layout.framework.sub_group_size, ratio);
}

OpGraph build_zero3(const Model& model, const Layout& layout, const Plan& plan) {
    const Framework& fw = layout.framework;
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    // With tensor parallelism (Megatron-DeepSpeed's layers under zero.Init(mpu=…), which
    // partitions over the data-parallel group) each replica is tp ranks holding a slice of every
    // block (the blocks above are one rank's), and each tensor rank's slices are partitioned and
    // gathered over the replicas' ranks of that tensor rank. Index d below runs over the emitted
    // slots (TensorSlots: replica d / tp's tensor rank d % tp).
    const TensorSlots ts(layout);
    const std::vector<int>& replicas = ts.slots;
    const int dp = layout.dp, tp = layout.tp, nb = static_cast<int>(blocks.size()), mbs = layout.microbatches;
    const int ns = dp * tp, emit = emitted_replicas(layout) * tp;

    // What each block gathers: its partitioned tensors (at least param_persistence_threshold
    // elements); smaller ones persist whole on every rank.
    std::vector<std::vector<std::int64_t>> tensors(blocks.size());
    std::vector<std::int64_t> elems(blocks.size(), 0), kept_whole(blocks.size(), 0);
    std::int64_t persistent = 0;
    for (const Block& b : blocks) {
        std::int64_t keep = 0;
        tensors[static_cast<std::size_t>(b.index)] = partitioned_tensors(b, fw.param_persistence_threshold, &keep);
        for (std::int64_t e : tensors[static_cast<std::size_t>(b.index)]) elems[static_cast<std::size_t>(b.index)] += e;
        kept_whole[static_cast<std::size_t>(b.index)] = keep;
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
    const Bytes bucket_cap = reduce_bucket_cap(fw, params, sb.grads);
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, bucket_cap, bucket_cap);
    // qgZ (resolve_zeropp; layout.qgz_node_ranks > 0 beyond one node): each bucket's gradients
    // reduced tensor by tensor (stage3.py __avg_scatter_grads → coalesced_collectives.py
    // all_to_all_quant_reduce). Each tensor's gradient goes with the bucket holding its last
    // element; a block's tensors under the persistence threshold (norms, biases: 1-D) go as one.
    struct Grad {
        std::int64_t elements;
        bool matrix;   // 2-D: quantized when it splits into 2·world pieces
    };
    std::vector<std::vector<Grad>> bucket_grads(buckets.size());
    if (layout.qgz_node_ranks > 0) {
        std::vector<std::int64_t> ends;
        std::int64_t end = 0;
        for (const Bucket& k : buckets) ends.push_back(end += k.bytes.count());
        std::int64_t at = 0;
        std::size_t k = 0;
        auto place = [&](std::int64_t e, bool matrix) {
            if (e <= 0) return;
            at += e * sb.grads;
            while (k + 1 < ends.size() && ends[k] < at) ++k;
            bucket_grads[k].push_back({e, matrix});
        };
        for (int i = nb - 1; i >= 0; --i) {
            const std::vector<std::int64_t>& ts_i = tensors[static_cast<std::size_t>(i)];
            for (auto t = ts_i.rbegin(); t != ts_i.rend(); ++t) place(*t, true);
            place(kept_whole[static_cast<std::size_t>(i)], false);
        }
    }
    // LoCo (Plan::zero_loco, with qgZ): each quantized matrix keeps its errors in int8 between
    // steps, the whole gradient's (intra_ef_buf) and the node's sum's (inter_ef_buf), each with
    // one fp32 scale per group (all_to_all_loco_quant_reduce).
    const bool loco = plan.zero_loco && layout.qgz_node_ranks > 0;
    auto qgz_scales = [&](std::int64_t e) {   // max(rows, columns, W), taken as max(√e, W)
        return std::max<std::int64_t>(dp, static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(e)))));
    };
    std::int64_t loco_feedback = 0;
    if (loco)
        for (const std::vector<Grad>& in_bucket : bucket_grads)
            for (const Grad& t : in_bucket)
                if (t.matrix && t.elements % (2 * dp) == 0)
                    loco_feedback += t.elements + qgz_scales(t.elements) * 4 + t.elements / layout.qgz_node_ranks +
                                     qgz_scales(t.elements) / layout.qgz_node_ranks * 4;

    // ZeRO-Infinity (strategies/offload.hpp): parameter partitions in host memory or on NVMe,
    // fetched before each all-gather; optimizer state, fp32 gradients and the step on the host
    // (or swapped from NVMe sub-group by sub-group). Tensors under the persistence threshold stay
    // on the device (DeepSpeed's ds_persist parameters are never offloaded).
    const Offload po = layout.param_offload, oo = layout.optimizer_offload;
    const Tier ptier = detail::offload_tier(po), otier = detail::offload_tier(oo);
    const bool offload = po != Offload::none || oo != Offload::none;
    // MiCS (resolve_mics): the parameters, gradients and optimizer state sharded over groups of
    // `mics` consecutive ranks (MiCS_Init's param_shard_group, which MiCS_Optimizer takes as its
    // dp_process_group), every gather and reduce-scatter inside one; each bucket's gradient
    // partition all-reduced across the groups at the accumulation boundary (param_repli_group,
    // mics.py allreduce_mics_shard_grads). One group of every rank is plain ZeRO-3.
    // With the hierarchical gather (layout.mics_node_ranks) each gather runs across the nodes
    // among the group's ranks of one local index, then inside each node (_hierarchical_all_gather_params).
    const int mics = plan.zero_mics_shard_size > 0 && (plan.zero_mics_shard_size < dp || layout.mics_node_ranks > 0)
                         ? plan.zero_mics_shard_size
                         : 0;
    const int shards = mics > 0 ? mics : dp;   // the ranks a partition is cut over
    const std::int64_t part = shard(params - persistent, shards), gshard = shard(params, shards);
    // Twin-Flow (twin_flow_split): the first sub-groups' optimizer on the host, the rest's state,
    // fp32 gradients and step on the device (FusedAdam). Every sub-group's 16-bit gradient
    // partitions still pass through the host's flat buffer (stage3.py grad_partitions_flat_buffer
    // on self.device, the CPU).
    const bool twin = oo == Offload::cpu && plan.optimizer_offload_fraction && *plan.optimizer_offload_fraction < 1;
    const TwinFlowSplit split = twin ? twin_flow_split(blocks, dp, fw.sub_group_size,
                                                       *plan.optimizer_offload_fraction)
                                     : TwinFlowSplit{};
    const std::int64_t host_part = twin ? std::min(split.cpu_params, gshard) : gshard, device_part = gshard - host_part;
    // ZeRO++'s weight side (resolve_zeropp): qwZ quantizes every gather; hpZ gathers from a
    // secondary partition over groups of `hpz` consecutive ranks once the step's first forward
    // has made it.
    const bool qwz = plan.zero_quantized_weights;
    const int hpz = plan.zero_hpz_partition_size;
    // CUDAQuantizer (partition_parameters.py): int8 values, one fp32 scale per group of at most
    // target_group_size = 8,000 elements.
    constexpr std::int64_t kQuantGroup = 8000;
    OpGraph g(layout.devices);
    std::vector<Passes> passes;
    ReplicaTensorCollectives tp_collectives(g, plan, ts);
    // hpZ: where a parameter is first released in the step (after its forward, or after its
    // backward when kept for it), _partition_param_sec copies the rank's 1/hpz slice of it into
    // the secondary partition on the current stream, then synchronizes that stream (the
    // "temporary fix" in partition_parameters.py) — the host issues nothing more until the copy
    // is done. The slices live until the step drops them (invalidate_secondary_tensor).
    std::vector<std::vector<OpId>> secondary_copy(static_cast<std::size_t>(ns), std::vector<OpId>(blocks.size(), OpGraph::kNoOp));
    std::vector<std::vector<std::int32_t>> secondary_buf(static_cast<std::size_t>(ns), std::vector<std::int32_t>(blocks.size(), -1));
    for (int d = 0; d < emit; ++d) {
        const int r = replicas[static_cast<std::size_t>(d)];
        if (po == Offload::none) {
            alloc_state(g, r, Bytes((part + persistent) * sb.params), BufferLabel::parameters);
        } else {
            alloc_state(g, r, Bytes(persistent * sb.params), BufferLabel::parameters);
            alloc_state(g, r, Bytes(part * sb.params), BufferLabel::parameters, ptier);
            if (po == Offload::nvme)   // the parameter swapper's pinned buffers
                alloc_state(g, r, Bytes(fw.param_swap_buffers * fw.param_swap_buffer_size * sb.params), BufferLabel::staging,
                            Tier::host);
        }
        if (oo == Offload::none) {
            alloc_state(g, r, Bytes(gshard * sb.grads), BufferLabel::gradients);
            alloc_state(g, r, optimizer_state_bytes(layout, gshard), BufferLabel::optimizer_state);
        } else {
            if (fw.zero3_flat_grad_buffer) {
                // The flat 16-bit buffer on the CPU (self.device), every sub-group's; the fp32
                // gradients of the host's sub-groups (initialize_optimizer_states'
                // subgroup_gradient_buffer; swapped out with NVMe).
                alloc_state(g, r, Bytes(gshard * sb.grads), BufferLabel::gradients, layout.unified_memory ? Tier::device : Tier::host);
                alloc_state(g, r, Bytes(host_part * 4), BufferLabel::gradients, otier);
            } else {
                alloc_state(g, r, Bytes(gshard * 4), BufferLabel::gradients, otier);
            }
            if (host_part > 0) alloc_state(g, r, optimizer_state_bytes(layout, host_part), BufferLabel::optimizer_state, otier);
            if (device_part > 0) {   // Twin-Flow's device sub-groups: fp32 gradients and the optimizer state
                alloc_state(g, r, Bytes(device_part * 4), BufferLabel::gradients);
                alloc_state(g, r, optimizer_state_bytes(layout, device_part), BufferLabel::optimizer_state);
            }
            if (oo == Offload::nvme)   // the optimizer swapper's pinned buffers, a sub-group each
                alloc_state(g, r, Bytes(fw.optimizer_swap_buffers * std::min(fw.sub_group_size, gshard) * 4),
                            BufferLabel::staging, Tier::host);
        }
        if (dp > 1 || offload) alloc_state(g, r, bucket_cap, BufferLabel::bucket);   // the contiguous IPG buffer
        if (loco_feedback > 0) alloc_state(g, r, Bytes(loco_feedback), BufferLabel::error_feedback);
        std::function<void(int, const Block&, Phase)> after_pass = tp_collectives.hook(d);
        if (hpz > 1)   // (tp = 1: resolve_zeropp)
            after_pass = [&, d, r](int mb, const Block& b, Phase phase) {
                const std::size_t i = static_cast<std::size_t>(b.index);
                if (mb != 0 || elems[i] == 0 || phase != (keep_for_backward[i] ? Phase::bwd : Phase::fwd)) return;
                const std::int64_t slice = shard(elems[i], hpz);
                const std::int32_t buf = g.add_buffer(r, Tier::device, Bytes(slice * sb.params), BufferLabel::parameters);
                g.add_alloc(buf, Stream::compute, b.index, mb);
                const Kernel k = stream_kernel(KernelName::secondary_partition, KernelClass::elementwise, 2 * slice * sb.params);
                secondary_copy[static_cast<std::size_t>(d)][i] =
                    g.add_kernels(r, phase, b.index, mb, g.intern_recipe({&k, 1}), layout.dtype, false, Stream::compute);
                secondary_buf[static_cast<std::size_t>(d)][i] = buf;
            };
        passes.push_back(add_passes(g, r, blocks, mbs, layout.dtype, {}, {}, nullptr, layout.activation_offload, std::nullopt,
                                    after_pass));
    }
    if (dp == 1 && !offload) {
        add_optimizer_steps(g, layout, StepRunner::device, replicas, params, layer_params(blocks, 1), false, {});
        return g;
    }
    const detail::GradientOffload how{sb.grads, 4, otier, layout.dtype, layout.unified_memory};
    detail::GradientOffload to_device = how;
    to_device.to = Tier::device;
    // Twin-Flow: how many of bucket k's elements (a rank's) belong to device sub-groups. Buckets
    // run in backward order, so bucket k holds the model's elements [total − end_k, total − start_k);
    // the host's sub-groups are the model's first cpu_model.
    std::vector<std::int64_t> bucket_on_device(buckets.size(), 0);
    if (twin) {
        std::int64_t total = 0;
        for (const Bucket& k : buckets) total += k.bytes.count() / sb.grads;
        std::int64_t start = 0;
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            const std::int64_t n = buckets[k].bytes.count() / sb.grads, lo = total - start - n, hi = total - start;
            const std::int64_t host = std::clamp<std::int64_t>(std::min(split.cpu_model, hi) - lo, 0, n);
            const std::int64_t mine = n / dp;
            bucket_on_device[k] = n > 0 ? mine - static_cast<std::int64_t>(static_cast<__int128>(mine) * host / n) : 0;
            start += n;
        }
    }
    // Where pinned host buffers live: on unified memory (a CPU board, a Jetson) the device's own.
    const Tier pinned = layout.unified_memory ? Tier::device : Tier::host;
    std::vector<OpId> last_out(static_cast<std::size_t>(ns), OpGraph::kNoOp), out_prev(static_cast<std::size_t>(ns), OpGraph::kNoOp);
    // Parameters are fetched when they are sharded over ranks or offloaded.
    const bool gathers = dp > 1 || po != Offload::none;

    auto on_comm = [&](int r, KernelName name, std::int64_t bytes, Phase phase, int block, int mb, OpId after) {
        const Kernel k = stream_kernel(name, KernelClass::elementwise, bytes);
        const OpId op = g.add_kernels(r, phase, block, mb, g.intern_recipe({&k, 1}), layout.dtype, false, Stream::comm);
        if (after != OpGraph::kNoOp) g.depend(after, op);
        return op;
    };
    // One collective of `bytes` per rank in every group of `size` consecutive replicas (hpZ's
    // secondary groups, MiCS's shard groups; tp = 1) that has a kept member; ops by slot; `index`:
    // the gradient bucket it reduces, if one.
    auto in_groups = [&](CollectiveKind kind, int size, Bytes bytes, int block, int mb, Phase phase, int index = -1) {
        std::vector<OpId> by_slot(static_cast<std::size_t>(ns), OpGraph::kNoOp);
        for (int first = 0; first < dp && first < emit; first += size) {
            const std::vector<int> members(replicas.begin() + first, replicas.begin() + first + size);
            const auto ops = add_replica_collective(g, layout, kind, members, bytes, Stream::comm, phase, block, mb, index);
            for (int i = 0; i < size; ++i) by_slot[static_cast<std::size_t>(first + i)] = ops[static_cast<std::size_t>(i)];
        }
        return by_slot;
    };
    // One all-gather of `bytes` per rank on every replica, over all of them, (secondary) over
    // each rank's hpZ group, or over its MiCS shard group; ops by slot.
    auto gather_collective = [&](Bytes bytes, int block, int mb, Phase phase, bool secondary) {
        if (secondary) return in_groups(CollectiveKind::all_gather, hpz, bytes, block, mb, phase);
        if (mics > 0) return in_groups(CollectiveKind::all_gather, mics, bytes, block, mb, phase);
        return over_tensor_ranks(g, layout, ts, CollectiveKind::all_gather, bytes, Stream::comm, phase, block, mb, -1);
    };
    // One gather of `elements` parameters on every replica, each after `after` (per replica;
    // kNoOp: none); returns each replica's op after which they are usable. Quantized (qwZ,
    // all_gather_coalesced with quantize=True), on the all-gather stream: the rank's partition
    // to int8, the values and the scales all-gathered (two collectives), the wait's dequantize of
    // everything gathered (AllGatherCoalescedHandle.wait).
    std::vector<OpId> last_comm(static_cast<std::size_t>(ns), OpGraph::kNoOp);
    auto all_gather = [&](std::int64_t elements, int block, int mb, Phase phase, const std::vector<OpId>& after, bool secondary) {
        const int group = secondary ? hpz : shards;
        const std::int64_t part = shard(elements, group), scales = (part + kQuantGroup - 1) / kQuantGroup;
        std::vector<OpId> ready = after;
        if (qwz)
            for (int d = 0; d < emit; ++d)
                ready[static_cast<std::size_t>(d)] = on_comm(replicas[static_cast<std::size_t>(d)], KernelName::quantize,
                                                             part * (sb.params + 1) + scales * 4, phase, block, mb,
                                                             after[static_cast<std::size_t>(d)]);
        if (layout.mics_node_ranks > 0 && !secondary) {
            // MiCS's hierarchical gather: first across nodes among the shard group's ranks of
            // one local index (all_gather_coalesced, each rank's partition), the result cloned
            // and copied into place (two device copies), then inside each node (async).
            const int local = layout.mics_node_ranks, span = mics / local;
            std::vector<OpId> inter(static_cast<std::size_t>(ns), OpGraph::kNoOp);
            for (int first = 0; first < dp && first < emit; first += mics)
                for (int i = 0; i < local; ++i) {
                    std::vector<int> members;
                    for (int k = 0; k < span; ++k) members.push_back(replicas[static_cast<std::size_t>(first + i + k * local)]);
                    const auto ops = add_replica_collective(g, layout, CollectiveKind::all_gather, members,
                                                            Bytes(part * span * sb.params), Stream::comm, phase, block, mb, -1);
                    for (int k = 0; k < span; ++k) inter[static_cast<std::size_t>(first + i + k * local)] = ops[static_cast<std::size_t>(k)];
                }
            std::vector<OpId> placed(static_cast<std::size_t>(ns), OpGraph::kNoOp);
            for (int d = 0; d < emit; ++d) {
                if (ready[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(ready[static_cast<std::size_t>(d)], inter[static_cast<std::size_t>(d)]);
                placed[static_cast<std::size_t>(d)] = on_comm(replicas[static_cast<std::size_t>(d)], KernelName::other,
                                                              2 * 2 * part * span * sb.params, phase, block, mb,
                                                              inter[static_cast<std::size_t>(d)]);
            }
            std::vector<OpId> intra = in_groups(CollectiveKind::all_gather, local, Bytes(elements * sb.params), block, mb, phase);
            for (int d = 0; d < emit; ++d) g.depend(placed[static_cast<std::size_t>(d)], intra[static_cast<std::size_t>(d)]);
            return intra;
        }
        std::vector<OpId> ops = gather_collective(Bytes(qwz ? part * group : elements * sb.params), block, mb, phase, secondary);
        for (int d = 0; d < emit; ++d)
            if (ready[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(ready[static_cast<std::size_t>(d)], ops[static_cast<std::size_t>(d)]);
        if (qwz) {
            const std::vector<OpId> scale_ops = gather_collective(Bytes(scales * 4 * group), block, mb, phase, secondary);
            for (int d = 0; d < emit; ++d) {
                const OpId deq = on_comm(replicas[static_cast<std::size_t>(d)], KernelName::dequantize,
                                         part * group * (1 + sb.params) + scales * group * 4, phase, block, mb,
                                         scale_ops[static_cast<std::size_t>(d)]);
                g.depend(ops[static_cast<std::size_t>(d)], deq);
                ops[static_cast<std::size_t>(d)] = deq;
            }
        }
        return ops;
    };
    auto column = [&](const std::vector<std::vector<OpId>>& per_block_per_d, int block) {
        std::vector<OpId> out(static_cast<std::size_t>(ns), OpGraph::kNoOp);
        if (block < 0 || block >= nb) return out;
        for (int d = 0; d < emit; ++d) out[static_cast<std::size_t>(d)] = per_block_per_d[static_cast<std::size_t>(d)][static_cast<std::size_t>(block)];
        return out;
    };
    // One bucket's reduction as qgZ runs it on every replica after `after`, on the reduction's
    // stream: a 1-D gradient, or one that does not split into 2·world pieces, reduce-scattered
    // alone (reduce_scatter_coalesced([tensor])); a matrix of e elements, with W ranks, L a node's,
    // N = W / L nodes and S = max(its rows, its columns, W) fp32 scales (taken as max(√e, W)):
    // swizzle_quant to int4 (read e 16-bit values, write e/2 bytes and the scales); all-to-alls
    // of the values and of the scales inside the node (local_{node}); quantized_reduction (read
    // them, write the node's sum of e/L elements in int4, S/L scales); all-to-alls across nodes
    // among the ranks of its local index (global_{index}); dequantize to e/L 16-bit values, then
    // the sum of the N nodes' chunks over N (e/W values). Returns each replica's last op.
    auto qgz_reduce = [&](std::size_t k, int mb, std::vector<OpId> last) {
        const int world = dp, local = layout.qgz_node_ranks, nodes = dp / local;
        auto chain = [&](const std::vector<OpId>& ops) {
            for (int d = 0; d < emit; ++d) {
                const std::size_t u = static_cast<std::size_t>(d);
                if (ops[u] == OpGraph::kNoOp) continue;
                if (last[u] != OpGraph::kNoOp) g.depend(last[u], ops[u]);
                last[u] = ops[u];
            }
        };
        auto kernel = [&](KernelName name, std::int64_t bytes) {
            std::vector<OpId> ops(static_cast<std::size_t>(ns), OpGraph::kNoOp);
            for (int d = 0; d < emit; ++d) ops[static_cast<std::size_t>(d)] = on_comm(replicas[static_cast<std::size_t>(d)], name, bytes, Phase::comm, -1, mb, OpGraph::kNoOp);
            chain(ops);
        };
        // One all-to-all of `bytes` per rank in each of `count` groups of `size` ranks `stride`
        // apart, group q starting at slot q · `step`.
        auto all_to_all = [&](std::int64_t bytes, int size, int stride, int count, int step) {
            std::vector<OpId> ops(static_cast<std::size_t>(ns), OpGraph::kNoOp);
            for (int q = 0; q < count; ++q) {
                std::vector<int> members;
                for (int m = 0; m < size; ++m) members.push_back(replicas[static_cast<std::size_t>(q * step + m * stride)]);
                const auto got = add_replica_collective(g, layout, CollectiveKind::all_to_all, members, Bytes(std::max<std::int64_t>(bytes, 1)),
                                                        Stream::comm, Phase::comm, -1, mb, static_cast<int>(k));
                for (int m = 0; m < size; ++m) ops[static_cast<std::size_t>(q * step + m * stride)] = got[static_cast<std::size_t>(m)];
            }
            chain(ops);
        };
        for (const Grad& t : bucket_grads[k]) {
            const std::int64_t e = t.elements;
            if (!t.matrix || e % (2 * world) != 0) {
                chain(over_tensor_ranks(g, layout, ts, CollectiveKind::reduce_scatter, Bytes(e * sb.grads), Stream::comm, Phase::comm,
                                        -1, mb, static_cast<int>(k)));
                continue;
            }
            const std::int64_t scales = qgz_scales(e), node_scales = scales / local;
            // LoCo: the two error buffers dequantized to 16 bits (a transient buffer until they
            // are quantized again), the intra one added to the gradient before its quantization
            // and updated by it, then kept in int8; the inter one likewise in the reduction.
            std::vector<std::int32_t> errors;
            if (loco)
                for (int d = 0; d < emit; ++d) {
                    errors.push_back(g.add_buffer(replicas[static_cast<std::size_t>(d)], Tier::device,
                                                  Bytes((e + e / local) * sb.grads), BufferLabel::workspace));
                    g.add_alloc(errors.back(), Stream::comm, -1, mb);
                }
            if (loco) {
                kernel(KernelName::dequantize, e + scales * 4 + e * sb.grads);
                kernel(KernelName::dequantize, e / local + node_scales * 4 + (e / local) * sb.grads);
            }
            kernel(KernelName::quantize, e * sb.grads + e / 2 + scales * 4 + (loco ? 2 * e * sb.grads : 0));
            if (local > 1) {   // inside each node (a node of one device sends nothing)
                all_to_all(e / 2, local, 1, nodes, local);
                all_to_all(scales * 4, local, 1, nodes, local);
            }
            if (loco) kernel(KernelName::quantize, e * sb.grads + e + scales * 4);
            kernel(KernelName::quantize,
                   e / 2 + scales * 4 + e / (2 * local) + node_scales * 4 + (loco ? 2 * (e / local) * sb.grads : 0));
            all_to_all(e / (2 * local), nodes, local, local, 1);   // across nodes, one rank of each
            all_to_all(node_scales * 4, nodes, local, local, 1);
            if (loco) kernel(KernelName::quantize, (e / local) * sb.grads + e / local + node_scales * 4);
            for (const std::int32_t buf : errors) g.add_free(buf, Stream::comm, -1, mb);
            kernel(KernelName::dequantize,
                   e / (2 * local) + node_scales * 4 + 2 * (e / local) * sb.grads + 2 * (e / world) * sb.grads);
        }
        return last;
    };
    std::vector<std::vector<std::int32_t>> staging(static_cast<std::size_t>(ns), std::vector<std::int32_t>(blocks.size(), -1));

    for (int mb = 0; mb < mbs; ++mb) {
        std::vector<std::vector<OpId>> fwd(static_cast<std::size_t>(ns)), bwd(static_cast<std::size_t>(ns)), first(static_cast<std::size_t>(ns));
        for (int d = 0; d < emit; ++d) {
            fwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].fwd[static_cast<std::size_t>(mb)];
            bwd[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd[static_cast<std::size_t>(mb)];
            first[static_cast<std::size_t>(d)] = passes[static_cast<std::size_t>(d)].bwd_first[static_cast<std::size_t>(mb)];
        }
        // A block's gathers: staging allocated, then one collective per tensor (v0.5) or one
        // coalesced per block (v0.6+), issued after `issue_after` (the compute the issuing hook
        // follows), consumed by `consumer`.
        auto fetch = [&](int i, Phase phase, const std::vector<OpId>& issue_after, const std::vector<OpId>& consumer) {
            if (elems[static_cast<std::size_t>(i)] == 0 || !gathers) return;
            for (int d = 0; d < emit; ++d) {
                // (Quantized, the int8 values arrive beside the parameters they become.)
                const std::int32_t buf = g.add_buffer(replicas[static_cast<std::size_t>(d)], Tier::device,
                                                      Bytes(elems[static_cast<std::size_t>(i)] * (sb.params + (qwz ? 1 : 0))),
                                                      BufferLabel::staging);
                g.add_alloc(buf, Stream::comm, i, mb);
                staging[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)] = buf;
            }
            // An offloaded partition first comes to the device (from NVMe through a pinned host
            // buffer); on one rank that copy is the whole fetch.
            std::vector<OpId> ready = issue_after;
            if (po != Offload::none) {
                const std::int64_t mine_i = shard(elems[static_cast<std::size_t>(i)], dp);
                for (int d = 0; d < emit; ++d) {
                    const int r = replicas[static_cast<std::size_t>(d)];
                    auto step = [&](OpId op) {
                        if (ready[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(ready[static_cast<std::size_t>(d)], op);
                        ready[static_cast<std::size_t>(d)] = op;
                    };
                    if (po == Offload::nvme) step(g.add_copy(r, Tier::nvme, pinned, Bytes(mine_i * sb.params), phase, i, mb));
                    if (pinned != Tier::device) step(g.add_copy(r, Tier::host, Tier::device, Bytes(mine_i * sb.params), phase, i, mb));
                }
            }
            // hpZ: every gather after the step's first forward reads the secondary partition
            // (all_gather_coalesced: use_secondary_tensor once ds_secondary_tensor exists).
            const bool secondary = hpz > 1 && (mb > 0 || phase != Phase::fwd);
            std::vector<OpId> ops = ready;
            if (dp > 1) {
                if (fw.zero3_gather == GatherGranularity::per_tensor)
                    for (std::int64_t e : tensors[static_cast<std::size_t>(i)]) ops = all_gather(e, i, mb, phase, ready, secondary);
                else
                    ops = all_gather(elems[static_cast<std::size_t>(i)], i, mb, phase, ready, secondary);
            }
            for (int d = 0; d < emit; ++d)
                if (ops[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(ops[static_cast<std::size_t>(d)], consumer[static_cast<std::size_t>(d)]);
        };
        // What the host has issued once block i's pass of `phase` is done: the pass, or in the
        // step's first micro-batch the secondary copy after it that it waits for (hpZ).
        auto synced = [&](std::vector<OpId> done, int i, Phase phase) {
            if (mb == 0 && i >= 0 && i < nb && phase == (keep_for_backward[static_cast<std::size_t>(i)] ? Phase::bwd : Phase::fwd))
                for (int d = 0; d < emit; ++d)
                    if (const OpId c = secondary_copy[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)]; c != OpGraph::kNoOp)
                        done[static_cast<std::size_t>(d)] = c;
            return done;
        };
        auto release = [&](int i, const std::vector<OpId>& after, Phase phase) {
            if (elems[static_cast<std::size_t>(i)] == 0 || !gathers) return;
            const std::vector<OpId> done = synced(after, i, phase);
            for (int d = 0; d < emit; ++d) {
                const OpId f = g.add_free(staging[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)], Stream::comm, i, mb);
                g.depend(done[static_cast<std::size_t>(d)], f);
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
            for (int j : issued_at[static_cast<std::size_t>(i)]) fetch(j, Phase::fwd, synced(column(fwd, i - 1), i - 1, Phase::fwd), column(fwd, j));
            if (!keep_for_backward[static_cast<std::size_t>(i)]) release(i, column(fwd, i), Phase::fwd);
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
            for (int j : bwd_issue[static_cast<std::size_t>(i)]) fetch(j, Phase::bwd, synced(column(bwd, i + 1), i + 1, Phase::bwd), column(first, j));
            release(i, column(bwd, i), Phase::bwd);
            while (next_bucket < buckets.size() && buckets[next_bucket].ready_after_block == i) {
                std::vector<OpId> reduced = column(bwd, i);
                if (dp > 1 && layout.qgz_node_ranks > 0) {
                    reduced = qgz_reduce(next_bucket, mb, column(bwd, i));
                    for (int d = 0; d < emit; ++d) last_comm[static_cast<std::size_t>(d)] = reduced[static_cast<std::size_t>(d)];
                } else if (mics > 0) {
                    // MiCS: reduce-scattered in each shard group; at the boundary the rank's
                    // partition of the bucket all-reduced with the same partition of the other
                    // groups (param_repli_group: the same position in every shard group).
                    reduced = in_groups(CollectiveKind::reduce_scatter, mics, buckets[next_bucket].bytes, -1, mb, Phase::comm,
                                        static_cast<int>(next_bucket));
                    for (int d = 0; d < emit; ++d) g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)], reduced[static_cast<std::size_t>(d)]);
                    if (mb == mbs - 1 && mics < dp)
                        for (int j = 0; j < mics && j < emit; ++j) {
                            std::vector<int> members;
                            for (int k = j; k < dp; k += mics) members.push_back(replicas[static_cast<std::size_t>(k)]);
                            const auto ops = add_replica_collective(g, layout, CollectiveKind::all_reduce, members,
                                                                    Bytes(buckets[next_bucket].bytes.count() / mics), Stream::comm,
                                                                    Phase::comm, -1, mb, static_cast<int>(next_bucket));
                            for (std::size_t k = 0; k < members.size(); ++k)
                                if (const std::size_t slot = static_cast<std::size_t>(j) + k * static_cast<std::size_t>(mics);
                                    ops[k] != OpGraph::kNoOp)
                                    reduced[slot] = ops[k];
                        }
                    for (int d = 0; d < emit; ++d) last_comm[static_cast<std::size_t>(d)] = reduced[static_cast<std::size_t>(d)];
                } else if (dp > 1) {
                    reduced = over_tensor_ranks(g, layout, ts, CollectiveKind::reduce_scatter, buckets[next_bucket].bytes, Stream::comm,
                                                Phase::comm, -1, mb, static_cast<int>(next_bucket));
                    // (Without overlap_comm DeepSpeed reduces on the compute stream. Its all-gathers
                    // run on a stream of their own but share the communicator, whose kernels NCCL
                    // orders across streams (enqueue.cc: every launch waits on and is waited on by
                    // the communicator's deviceStream), so both stay on one stream here: the
                    // reduction then waits for the backward that fills it and the next fetch
                    // waits for it.)
                    for (int d = 0; d < emit; ++d) {
                        g.depend(bwd[static_cast<std::size_t>(d)][static_cast<std::size_t>(i)], reduced[static_cast<std::size_t>(d)]);
                        last_comm[static_cast<std::size_t>(d)] = reduced[static_cast<std::size_t>(d)];
                    }
                }
                if (oo != Offload::none) {
                    // The rank's partition of the bucket, accumulated through the host and its fp32
                    // cast offloaded at the boundary (DeepSpeed 0.6 on: stage3_partition_grads; the
                    // 0.5 row accumulates as stages 1-2 do).
                    // (Twin-Flow: the device sub-groups' elements first, the later parameters
                    // backward reaches first.)
                    const std::int64_t elements = buckets[next_bucket].bytes.count() / sb.grads / dp;
                    const std::int64_t on_device = bucket_on_device[next_bucket];
                    for (int d = 0; d < emit; ++d) {
                        auto out = [&](std::int64_t e, const detail::GradientOffload& to) {
                            if (e <= 0) return;
                            const int r = replicas[static_cast<std::size_t>(d)], k = static_cast<int>(next_bucket);
                            const OpId ready = reduced[static_cast<std::size_t>(d)];
                            OpId& previous = out_prev[static_cast<std::size_t>(d)];
                            const detail::OffloadedPartition o =
                                fw.zero3_flat_grad_buffer
                                    ? detail::stage3_partition_grads(g, r, e, to, mb, mbs, Stream::comm, ready, previous, k)
                                    : detail::offload_gradient(g, r, e, to, mb, mbs, Stream::comm, ready, OpGraph::kNoOp, previous, -1, k);
                            if (mb == mbs - 1) last_out[static_cast<std::size_t>(d)] = o.done;
                        };
                        out(on_device, to_device);
                        out(elements - on_device, how);
                    }
                }
                ++next_bucket;
            }
        }
    }
    // The step, then the updated 16-bit partition where the parameters live.
    // Every tensor rank steps its own shard (each tensor rank's partition over its replicas;
    // LAMB, whose norms would span the slices, is refused with tensor parallelism).
    auto steps = [&](StepRunner runner, std::int64_t elements, const std::vector<std::int64_t>& per_layer,
                     const std::vector<OpId>& after) {
        return add_optimizer_steps(g, layout, runner, replicas, elements, per_layer, dp > 1 && tp == 1, after);
    };
    std::vector<OpId> done;
    if (oo == Offload::none) {
        done = steps(StepRunner::device, gshard, layer_params(blocks, shards), last_comm);
    } else if (oo == Offload::cpu && !twin) {
        done = steps(StepRunner::deepspeed_cpu, gshard, layer_params(blocks, shards), last_out);
    } else if (oo == Offload::cpu) {
        // Twin-Flow: step() walks the sub-groups in order, the host's first (CPU-Adam, blocking
        // the Python loop), then FusedAdam's on the device; each sub-group's updated fp32
        // weights are copied into its 16-bit partition where the parameters live
        // (_reassign_or_swap_out_partitioned_parameters).
        auto write_back = [&](Tier from, std::int64_t elements) {
            for (int d = 0; d < emit; ++d)
                if (ptier != from)
                    g.depend(done[static_cast<std::size_t>(d)],
                             g.add_copy(replicas[static_cast<std::size_t>(d)], from, ptier, Bytes(elements * sb.params), Phase::opt));
        };
        done = last_out;
        if (host_part > 0) {
            done = steps(StepRunner::deepspeed_cpu, host_part, {host_part}, last_out);
            write_back(Tier::host, host_part);
        }
        if (device_part > 0) {
            done = steps(StepRunner::device, device_part, {device_part}, done);
            write_back(Tier::device, device_part);
        }
    } else {
        // NVMe: sub-group by sub-group, swap the fp32 weights, moments and gradients in, step,
        // swap the weights and moments out; one sub-group's buffers at a time.
        done = last_out;
        const double state = optimizer_state_per_param(layout.optimizer, layout.dtype);
        for (std::int64_t begin = 0; begin < gshard; begin += fw.sub_group_size) {
            const std::int64_t e = std::min(fw.sub_group_size, gshard - begin);
            std::vector<OpId> in(static_cast<std::size_t>(ns), OpGraph::kNoOp);
            for (int d = 0; d < emit; ++d) {
                const int r = replicas[static_cast<std::size_t>(d)];
                in[static_cast<std::size_t>(d)] =
                    g.add_copy(r, Tier::nvme, pinned, Bytes::from_double((state + 4) * static_cast<double>(e)), Phase::opt);
                if (done[static_cast<std::size_t>(d)] != OpGraph::kNoOp) g.depend(done[static_cast<std::size_t>(d)], in[static_cast<std::size_t>(d)]);
            }
            const std::vector<OpId> step = steps(StepRunner::deepspeed_cpu, e, {e}, in);
            for (int d = 0; d < emit; ++d) {
                const OpId out = g.add_copy(replicas[static_cast<std::size_t>(d)], pinned, Tier::nvme,
                                            Bytes::from_double(state * static_cast<double>(e)), Phase::opt);
                g.depend(step[static_cast<std::size_t>(d)], out);
                done[static_cast<std::size_t>(d)] = out;
            }
        }
    }
    for (int d = 0; d < emit; ++d) {
        const int r = replicas[static_cast<std::size_t>(d)];
        const Tier from = oo == Offload::none ? Tier::device : pinned;   // where the step wrote them
        auto write = [&](Tier to, std::int64_t elements) {
            if (to == from || elements == 0) return;
            const OpId c = g.add_copy(r, from, to, Bytes(elements * sb.params), Phase::opt);
            g.depend(done[static_cast<std::size_t>(d)], c);
        };
        // The partitioned tensors go where they live; the persistent ones are on the device
        // (Twin-Flow's copies are above, sub-group by sub-group).
        if (!twin) {
            write(ptier, part);
            write(Tier::device, persistent);
        }
        // hpZ: the step drops the secondary slices (stage3.py _post_step).
        for (const std::int32_t buf : secondary_buf[static_cast<std::size_t>(d)])
            if (buf >= 0) g.depend(done[static_cast<std::size_t>(d)], g.add_free(buf, Stream::compute, -1, -1));
    }
    fold_replicas(g, layout);
    return g;
}

}  // namespace smol::strategies
