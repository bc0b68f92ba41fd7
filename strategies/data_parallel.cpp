#include "strategies/data_parallel.hpp"

#include <algorithm>

#include "strategies/compression.hpp"
#include "strategies/fsdp.hpp"
#include "strategies/horovod.hpp"
#include "strategies/hybrid_cnn.hpp"
#include "strategies/optimizer.hpp"
#include "strategies/parameter_server.hpp"
#include "strategies/zero.hpp"

namespace smol::strategies {

StateBytes state_bytes(DType dtype) {
    const int b = dtype_bytes(dtype);
    return b == 4 ? StateBytes{4, 4, 8} : StateBytes{b, b, 12};
}

int param_gather_dispatch_block(const std::vector<Bucket>& buckets, std::size_t k) {
    return buckets[k + 1 < buckets.size() ? k + 1 : k].ready_after_block;
}

std::vector<Bucket> make_buckets(const std::vector<Block>& blocks, int grad_bytes_per_param, Bytes cap, Bytes first_cap) {
    // A bucket of zero bytes would never fill (plan flags keep buckets at 1 KiB or more).
    if (cap < Bytes(1) || first_cap < Bytes(1))
        throw Error(ErrorKind::internal, "gradient buckets of " + to_string(cap) + " (first " + to_string(first_cap) + ")");
    // A bucket holds whole gradients: a cap rounds down to whole parameters (at least one), so
    // that buckets count in parameters as they do in bytes (an odd --bucket-mb in 16-bit left
    // half an element a bucket, which PowerSGD's matrices then overran).
    const std::int64_t g = grad_bytes_per_param;
    const auto whole = [g](Bytes b) { return Bytes(std::max(g, b.count() / g * g)); };
    cap = whole(cap);
    first_cap = whole(first_cap);
    std::vector<Bucket> out;
    Bytes open;  // bytes in the bucket being filled
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
        Bytes grads = Bytes(it->params) * std::int64_t{grad_bytes_per_param};
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

std::vector<Bucket> make_fp8_param_buckets(const std::vector<Block>& blocks, int grad_bytes_per_param, Bytes cap) {
    std::vector<Block> fp8 = blocks;
    std::int64_t rest = 0;
    int first_rest = -1;   // the first block, in forward order, with a parameter not in FP8
    for (Block& b : fp8) {
        const std::int64_t other = b.params - b.fp8_params;
        if (other > 0 && first_rest < 0) first_rest = b.index;
        rest += other;
        b.params = b.fp8_params;
    }
    std::vector<Bucket> out = make_buckets(fp8, grad_bytes_per_param, cap, cap);
    if (out.empty()) return make_buckets(blocks, grad_bytes_per_param, cap, cap);
    for (Bucket& b : out) b.fp8 = b.bytes.count() / grad_bytes_per_param;
    Bucket& start = out.back();
    start.bytes += Bytes(checked_mul(rest, grad_bytes_per_param, "bytes of a gradient bucket"));
    if (first_rest >= 0) start.ready_after_block = std::min(start.ready_after_block, first_rest);
    return out;
}

Bytes gathered_bytes(const Bucket& b, int grad_bytes_per_param, int param_bytes) {
    const std::int64_t params = b.bytes.count() / grad_bytes_per_param;
    return Bytes((params - b.fp8) * param_bytes + b.fp8);
}

namespace detail {

std::vector<Block> replica_blocks(const Model& model, const Layout& layout, const Plan& plan) {
    Workload w;
    w.micro_batch = layout.micro_batch;
    w.seq = layout.seq;
    w.tp = layout.tp;
    w.cp = layout.cp;
    w.cp_comm = plan.cp_comm;
    w.sequence_parallel = plan.sequence_parallel;
    w.recompute = plan.recompute;
    w.recompute_modules = plan.recompute_modules;
    w.dtype = layout.dtype;
    w.attention = layout.attention;
    w.attention_backend = layout.attention_backend;
    w.qk_layer_scaling = layout.framework.qk_layer_scaling;
    w.loss = layout.framework.loss;
    w.vocab_multiple = layout.framework.vocab_multiple;
    w.fp8 = layout.fp8;
    w.fp8_bf16_first = layout.fp8_bf16_first;
    w.fp8_bf16_last = layout.fp8_bf16_last;
    w.recomputed_layers = layout.recomputed_layers;
    w.ep = layout.ep;
    w.expert_imbalance = plan.expert_imbalance;
    w.capacity_factor = plan.capacity_factor;
    std::vector<Block> blocks = model.blocks(w);
    // Without pipeline stages the embedding and the tied output layer share the table on every
    // rank: each micro-batch's two gradients of it are summed (3 × gradient bytes per parameter).
    if (layout.pp == 1 && model.is_transformer() && model.shape().tied_embeddings && !blocks.empty() &&
        blocks.front().kind == Block::Kind::embedding)
        blocks.front().tied_grad_sum = accumulation_kernel(model.tied_table_params(layout.tp, layout.framework.vocab_multiple), layout.dtype, false);
    return blocks;
}

std::vector<int> replica_ranks(const Layout& layout) {
    std::vector<int> out;
    for (int d = 0; d < layout.dp; ++d) out.push_back(layout.rank(0, d, 0));
    return out;
}

int emitted_replicas(const Layout& layout) { return layout.folded ? layout.fold_width : layout.dp; }

std::vector<OpId> add_replica_collective(OpGraph& g, const Layout& layout, CollectiveKind kind,
                                         const std::vector<int>& members, Bytes bytes, Stream stream, Phase phase,
                                         int layer, int microbatch, int index) {
    if (!layout.folded) return g.add_collective(kind, members, bytes, stream, phase, layer, microbatch, index);
    const std::int32_t c = g.declare_collective(kind, members, bytes);
    std::vector<OpId> ops(members.size(), OpGraph::kNoOp);
    // The data-parallel builders' collectives: no pipeline, replica d is ranks d·tp … d·tp + tp − 1
    // (tp > 1: FSDP + TP); the kept replicas' ranks join.
    for (std::size_t i = 0; i < members.size(); ++i)
        if (members[i] / layout.tp < layout.fold_width)
            ops[i] = g.add_collective_op(c, members[i], stream, phase, layer, microbatch, index);
    return ops;
}

void fold_replicas(OpGraph& g, const Layout& layout) {
    if (!layout.folded || layout.pp > 1) return;
    // Replica d (ranks d·tp … d·tp + tp − 1) mirrors replica d mod fold_width, rank for rank.
    const int kept = layout.fold_width * layout.tp;
    std::vector<int> rep(static_cast<std::size_t>(layout.devices));
    for (int r = 0; r < layout.devices; ++r) rep[static_cast<std::size_t>(r)] = r % kept;
    g.set_representatives(std::move(rep));
}

std::int64_t total_params(const std::vector<Block>& blocks) {
    std::int64_t n = 0;
    for (const Block& b : blocks) n = checked_add(n, b.params, "parameters of a replica");
    return n;
}

std::int64_t shard(std::int64_t n, int parts) { return (n + parts - 1) / parts; }

std::vector<std::int64_t> layer_params(const std::vector<Block>& blocks, int parts) {
    std::vector<std::int64_t> out;
    for (const Block& b : blocks) out.push_back(shard(b.params, parts));
    return out;
}

std::int32_t alloc_state(OpGraph& g, int rank, Bytes bytes, BufferLabel label, Tier tier) {
    const std::int32_t buf = g.add_buffer(rank, tier, bytes, label);
    g.add_alloc(buf, Stream::compute);
    return buf;
}

void alloc_model_states(OpGraph& g, int rank, Bytes params, Bytes grads, Bytes optimizer, Tier tier) {
    alloc_state(g, rank, params, BufferLabel::parameters, tier);
    alloc_state(g, rank, grads, BufferLabel::gradients, tier);
    alloc_state(g, rank, optimizer, BufferLabel::optimizer_state, tier);
}

std::vector<BlockRecipes> intern_block_recipes(OpGraph& g, const std::vector<Block>& blocks,
                                               const std::vector<BlockKernels>* trained) {
    std::vector<BlockRecipes> out(blocks.size());
    for (const Block& b : blocks) {
        BlockRecipes& r = out[static_cast<std::size_t>(b.index)];
        if (trained && !trained->empty()) {
            const BlockKernels& k = (*trained)[static_cast<std::size_t>(b.index)];
            r.fwd = g.intern_recipe(k.fwd);
            r.bwd = g.intern_recipe(k.bwd);
            r.bwd_input = g.intern_recipe(k.bwd_input);
            r.bwd_weight = g.intern_recipe(k.bwd_weight);
            r.recompute = k.recompute.empty() ? -1 : g.intern_recipe(k.recompute);
            continue;
        }
        r.fwd = g.intern_recipe(b.fwd_kernels);
        r.bwd = g.intern_recipe(block_backward(b));
        r.bwd_input = g.intern_recipe(block_backward(b, BackwardPart::input));
        r.bwd_weight = g.intern_recipe(block_backward(b, BackwardPart::weight));
        r.recompute = b.recompute_kernels.empty() ? -1 : g.intern_recipe(b.recompute_kernels);
    }
    return out;
}

std::vector<std::int32_t> intern_fp8_weight_recipes(OpGraph& g, const std::vector<Block>& blocks, DType dtype,
                                                    bool fp8_params) {
    std::vector<std::int32_t> out(blocks.size(), -1);
    for (const Block& b : blocks) {
        // The block's recipe is its FP8 GEMMs' (fp8_params counts their weights).
        const auto fp8 = std::find_if(b.fwd_kernels.begin(), b.fwd_kernels.end(), [](const Kernel& k) { return k.fp8 != Fp8Recipe::none; });
        if (b.fp8_params == 0 || fp8 == b.fwd_kernels.end()) continue;
        if (fp8_params) {
            const Kernel t = stream_kernel(KernelName::quantize, KernelClass::elementwise,
                                           checked_mul(b.fp8_params, 2, "bytes of FP8 weight transposes"));
            out[static_cast<std::size_t>(b.index)] = g.intern_recipe({&t, 1});
        } else {
            out[static_cast<std::size_t>(b.index)] = g.intern_recipe(quantize_kernels(b.fp8_params, dtype_bytes(dtype), true, fp8->fp8));
        }
    }
    return out;
}

std::int64_t fp8_weight_tensors(const std::vector<Block>& blocks, int first, int last) {
    std::int64_t n = 0;
    for (int i = first; i < last; ++i)
        for (const Kernel& k : blocks[static_cast<std::size_t>(i)].fwd_kernels) n += k.fp8 != Fp8Recipe::none && k.weight ? k.batch : 0;
    return n;
}

std::vector<Kernel> fp8_master_cast_kernels(std::int64_t fp8, DType dtype, Fp8Recipe recipe) {
    const int b = dtype_bytes(dtype);
    std::vector<Kernel> out{stream_kernel(KernelName::cast, KernelClass::elementwise,
                                          checked_mul(fp8, 4 + b, "bytes of the FP8 master weights' cast"))};
    for (const Kernel& k : quantize_kernels(fp8, b, false, recipe)) out.push_back(k);
    return out;
}

std::int64_t fp8_weight_params(const std::vector<Block>& blocks, int first, int last) {
    std::int64_t n = 0;
    for (int i = first; i < last; ++i) n = checked_add(n, blocks[static_cast<std::size_t>(i)].fp8_params, "FP8 weights");
    return n;
}

Bytes fp8_weight_bytes(const std::vector<Block>& blocks, int first, int last) {
    return Bytes(checked_mul(fp8_weight_params(blocks, first, last), 2, "bytes of FP8 weight copies"));
}

Kernel accumulation_kernel(std::int64_t params, DType dtype, bool dispatched) {
    Kernel k = stream_kernel(KernelName::grad_accumulate, KernelClass::elementwise,
                             checked_mul(params, 3 * dtype_bytes(dtype), "bytes a gradient accumulation moves"),
                             static_cast<double>(params));
    k.dispatched = dispatched;
    return k;
}

std::vector<std::int32_t> intern_accumulation_recipes(OpGraph& g, const std::vector<Block>& blocks, DType dtype,
                                                      GradAccumulation how, std::int64_t tied_copy) {
    std::vector<std::int32_t> out(blocks.size(), -1);
    if (how == GradAccumulation::fused) return out;
    for (const Block& b : blocks)
        if (const std::int64_t params = b.params + (b.kind == Block::Kind::head ? tied_copy : 0); params > 0) {
            const Kernel k = accumulation_kernel(params, dtype, how == GradAccumulation::main_grad_hook);
            out[static_cast<std::size_t>(b.index)] = g.intern_recipe({&k, 1});
        }
    return out;
}

bool accumulates(GradAccumulation how, int mb) {
    switch (how) {
        case GradAccumulation::autograd: return mb > 0;
        case GradAccumulation::main_grad_hook: return true;
        case GradAccumulation::fused: return false;
    }
    return false;
}

int optimizer_bytes_per_param(const Layout& layout) {
    return layout.dtype == DType::fp32 ? kAdamBytesPerParam : layout.framework.optimizer_bytes_per_param;
}

ReduceTiming reduce_timing(const Layout& layout, int zero_stage) {
    const Framework& f = layout.framework;
    if (deepspeed_engine(f.name)) {
        const bool overlap = f.overlap_comm ? *f.overlap_comm : zero_stage == 3;   // runtime/zero/config.py:383
        return overlap ? ReduceTiming::overlapped : ReduceTiming::blocking;
    }
    return f.grad_reduce == GradReduce::overlapped ? ReduceTiming::overlapped : ReduceTiming::after_backward;
}

Passes add_passes(OpGraph& g, int rank, const std::vector<Block>& blocks, int microbatches, DType dtype,
                  const std::function<void(int, const Block&)>& before_bwd,
                  const std::function<void(int, const Block&, OpId)>& after_bwd,
                  const std::vector<BlockKernels>* trained, bool activations_to_host,
                  std::optional<GradAccumulation> accumulation,
                  const std::function<void(int, const Block&, Phase)>& after_pass, Fp8Weights fp8_weights) {
    Passes p;
    p.fwd.assign(static_cast<std::size_t>(microbatches), std::vector<OpId>(blocks.size()));
    p.bwd = p.fwd;
    p.bwd_first = p.fwd;
    p.fwd_first = p.fwd;
    const std::vector<BlockRecipes> recipes = intern_block_recipes(g, blocks, trained);
    const std::vector<std::int32_t> accumulate =
        accumulation && !(trained && !trained->empty()) ? intern_accumulation_recipes(g, blocks, dtype, *accumulation)
                                                        : std::vector<std::int32_t>(blocks.size(), -1);
    const bool copies = fp8_weights == Fp8Weights::copies, per_pass = fp8_weights == Fp8Weights::gathered_per_pass;
    const std::vector<std::int32_t> fp8_cast = intern_fp8_weight_recipes(g, blocks, dtype, !copies);
    if (const Bytes w = fp8_weight_bytes(blocks, 0, static_cast<int>(blocks.size())); w > Bytes(0) && copies)
        alloc_state(g, rank, w, BufferLabel::parameters);
    for (int mb = 0; mb < microbatches; ++mb) {
        std::vector<std::int32_t> act(blocks.size()), host(blocks.size(), -1);
        OpId out = OpGraph::kNoOp;   // the last copy to the host, which the next forward waits for
        for (const Block& b : blocks) {
            act[b.index] = g.add_buffer(rank, Tier::device, b.activations, BufferLabel::activations);
            g.add_alloc(act[b.index], Stream::compute, b.index, mb);
            const OpId cast = mb == 0 && fp8_cast[b.index] >= 0 && !per_pass
                                  ? g.add_kernels(rank, Phase::fwd, b.index, mb, fp8_cast[b.index], dtype)
                                  : OpGraph::kNoOp;
            p.fwd[mb][b.index] = g.add_kernels(rank, Phase::fwd, b.index, mb, recipes[b.index].fwd, dtype);
            p.fwd_first[mb][b.index] = cast != OpGraph::kNoOp ? cast : p.fwd[mb][b.index];
            if (after_pass) after_pass(mb, b, Phase::fwd);
            if (out != OpGraph::kNoOp) g.depend(out, p.fwd[mb][b.index]);
            out = OpGraph::kNoOp;
            if (activations_to_host && b.activations > Bytes(0)) {
                host[b.index] = g.add_buffer(rank, Tier::host, b.activations, BufferLabel::activations);
                g.depend(p.fwd[mb][b.index], g.add_alloc(host[b.index], Stream::copy, b.index, mb));
                out = g.add_copy(rank, Tier::device, Tier::host, b.activations, Phase::fwd, b.index, mb);
                g.add_free(act[b.index], Stream::copy, b.index, mb);
            }
        }
        for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
            const Block& b = *it;
            if (before_bwd) before_bwd(mb, b);
            OpId back = OpGraph::kNoOp;
            if (host[b.index] >= 0) {
                // Back to the device once the backward before it is done (into a new buffer: the
                // forward's was freed).
                act[b.index] = g.add_buffer(rank, Tier::device, b.activations, BufferLabel::activations);
                const OpId a = g.add_alloc(act[b.index], Stream::compute, b.index, mb);
                back = g.add_copy(rank, Tier::host, Tier::device, b.activations, Phase::bwd, b.index, mb);
                g.depend(a, back);
                g.add_free(host[b.index], Stream::copy_in, b.index, mb);
            }
            OpId first = OpGraph::kNoOp;
            if (per_pass && fp8_cast[b.index] >= 0) first = g.add_kernels(rank, Phase::bwd, b.index, mb, fp8_cast[b.index], dtype);
            if (recipes[b.index].recompute >= 0) {
                const OpId re = g.add_kernels(rank, Phase::recompute, b.index, mb, recipes[b.index].recompute, dtype);
                if (first == OpGraph::kNoOp) first = re;
                if (after_pass) after_pass(mb, b, Phase::recompute);
            }
            p.bwd[mb][b.index] = g.add_kernels(rank, Phase::bwd, b.index, mb, recipes[b.index].bwd, dtype);
            if (after_pass) after_pass(mb, b, Phase::bwd);
            if (accumulate[b.index] >= 0 && accumulates(*accumulation, mb))
                p.bwd[mb][b.index] = g.add_kernels(rank, Phase::bwd, b.index, mb, accumulate[b.index], dtype);
            if (back != OpGraph::kNoOp) g.depend(back, first != OpGraph::kNoOp ? first : p.bwd[mb][b.index]);
            p.bwd_first[mb][b.index] = first != OpGraph::kNoOp ? first : p.bwd[mb][b.index];
            if (after_bwd) after_bwd(mb, b, p.bwd[mb][b.index]);
            g.add_free(act[b.index], Stream::compute, b.index, mb);
        }
    }
    return p;
}

}  // namespace detail

namespace detail {

OpGraph build_replicated(const Model& model, const Layout& layout, const Plan& plan, Bytes cap, Bytes first_cap,
                         Time cycle) {
    std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const Training training = apply_finetune(model, layout, blocks);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);   // trainable
    // After backward (Megatron, DeepSpeed's engine): the framework's buckets (Layout::bucket), all
    // ready once the whole backward is done; overlapped (PyTorch DDP, Horovod): buckets as
    // backward fills them.
    const bool after = layout.framework.grad_reduce == GradReduce::after_backward && cycle == Time::zero();
    const std::vector<int> replicas = replica_ranks(layout);
    // One replica synchronises nothing: no buckets (a 1 KiB bucket of GPT-3's gradients would be
    // 3 × 10^8 of them).
    const std::vector<Bucket> buckets = replicas.size() < 2 ? std::vector<Bucket>{} : make_buckets(blocks, sb.grads, cap, first_cap);

    OpGraph g(layout.devices);
    const std::size_t emit = static_cast<std::size_t>(emitted_replicas(layout));
    const int last_mb = layout.microbatches - 1;
    std::vector<OpId> last_sync(replicas.size(), static_cast<OpId>(-1));
    // Compressed buckets (strategies/compression.hpp) are emitted as backward fills them: the
    // worker's compression on the compute stream right after the backward that completes the
    // bucket (where a DDP comm hook runs), the exchange and the work chained on it on the comm
    // stream. The residuals live for the whole run.
    const bool compressed = plan.compress.method != CompressionMethod::none && replicas.size() > 1;
    std::vector<CompressedExchange> exchanges;
    std::vector<std::vector<std::int32_t>> step_ids;   // [bucket][step]: collective id, or recipe id
    Bytes error_feedback;
    if (compressed) {
        std::vector<std::int64_t> elements;
        for (const Bucket& b : buckets) elements.push_back(b.bytes.count() / sb.grads);
        exchanges = compressed_exchanges(plan.compress, blocks, elements, sb.grads, static_cast<int>(dtype_bytes(layout.dtype)),
                                         static_cast<int>(replicas.size()));
    }
    for (const CompressedExchange& x : exchanges) {
        error_feedback += x.error_feedback;
        std::vector<std::int32_t> ids;
        for (const ExchangeStep& st : x.steps)
            ids.push_back(st.collective() ? g.declare_collective(st.kind, replicas, st.bytes) : g.intern_recipe(st.kernels));
        step_ids.push_back(std::move(ids));
    }
    std::vector<Passes> passes;
    for (std::size_t d = 0; d < emit; ++d) {
        const int r = replicas[d];
        // Model states live for the whole step.
        alloc_model_states(g, r, Bytes(params) * std::int64_t{sb.params} + training.frozen, Bytes(params) * std::int64_t{sb.grads},
                           optimizer_state_bytes(layout, params));
        if (compressed) alloc_state(g, r, error_feedback, BufferLabel::error_feedback);
        const auto exchange = [&, d, r](int mb, const Block& block, OpId bwd) {
            if (mb != last_mb) return;
            for (std::size_t k = 0; k < exchanges.size(); ++k) {
                if ((after ? 0 : buckets[k].ready_after_block) != block.index) continue;
                OpId prev = bwd;
                for (std::size_t i = 0; i < exchanges[k].steps.size(); ++i) {
                    const ExchangeStep& st = exchanges[k].steps[i];
                    OpId op;
                    if (st.collective()) {
                        op = g.add_collective_op(step_ids[k][i], r, Stream::comm, Phase::comm, -1, -1, static_cast<int>(k));
                    } else {
                        op = g.add_kernels(r, Phase::comm, -1, -1, step_ids[k][i], layout.dtype, false,
                                           st.after_comm ? Stream::comm : Stream::compute);
                        g.set_index(op, static_cast<int>(k));
                    }
                    if (i == 1 && cycle > Time::zero()) {
                        // Horovod: the compressed buffer goes out on the next cycle tick.
                        const OpId tick = g.add_timer(r, cycle, Stream::host, Phase::comm, static_cast<int>(k));
                        g.depend(prev, tick);
                        prev = tick;
                    }
                    g.depend(prev, op);
                    prev = op;
                }
                last_sync[d] = prev;
            }
        };
        passes.push_back(add_passes(g, r, blocks, layout.microbatches, layout.dtype, {},
                                    compressed ? std::function<void(int, const Block&, OpId)>(exchange) : nullptr,
                                    &training.kernels, false, layout.framework.grad_accumulation));
    }

    // Gradient synchronisation in the last micro-batch only (the earlier ones run under no_sync):
    // each bucket's all-reduce waits for the backward that completes it — and, with a cycle, for
    // the next tick of the framework's background thread after that (a timer on the host
    // stream), so buckets that fill within one cycle share its tick and go out back to back. The
    // comm stream keeps the buckets in order, so the optimizer step waits for the last one.
    if (replicas.size() > 1 && !compressed)
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            const auto cid = g.declare_collective(CollectiveKind::all_reduce, replicas, buckets[k].bytes);
            for (std::size_t d = 0; d < emit; ++d) {
                const OpId ready = passes[d].bwd[last_mb][after ? 0 : static_cast<std::size_t>(buckets[k].ready_after_block)];
                last_sync[d] = g.add_collective_op(cid, replicas[d], Stream::comm, Phase::comm, -1, -1, static_cast<int>(k));
                if (cycle > Time::zero()) {
                    const OpId tick = g.add_timer(replicas[d], cycle, Stream::host, Phase::comm, static_cast<int>(k));
                    g.depend(ready, tick);
                    g.depend(tick, last_sync[d]);
                } else {
                    g.depend(ready, last_sync[d]);
                }
            }
        }
    std::vector<OpId> synced(replicas.size(), OpGraph::kNoOp);
    for (std::size_t d = 0; d < replicas.size(); ++d)
        if (last_sync[d] != static_cast<OpId>(-1)) synced[d] = last_sync[d];
    add_optimizer_steps(g, layout, StepRunner::device, replicas, params, layer_params(blocks, 1), false, synced);
    fold_replicas(g, layout);
    return g;
}

}  // namespace detail

OpGraph build_ddp(const Model& model, const Layout& layout, const Plan& plan) {
    // The framework's buckets (Layout::bucket): PyTorch's 25 MiB with a 1 MiB first one.
    return detail::build_replicated(model, layout, plan, layout.bucket, layout.first_bucket, Time::zero());
}

OpGraph build_data_parallel(const Model& model, const topo::Cluster& cluster, const Layout& layout, const Plan& plan) {
    switch (plan.strategy) {
        case DataParallel::ddp: return build_ddp(model, layout, plan);
        case DataParallel::ring: return build_horovod(model, layout, plan);
        case DataParallel::zero1: return build_zero(model, layout, plan, 1);
        case DataParallel::zero2: return build_zero(model, layout, plan, 2);
        case DataParallel::zero3: return build_zero(model, layout, plan, 3);
        case DataParallel::fsdp: return build_fsdp(model, layout, plan);
        case DataParallel::ps: return build_parameter_server(model, layout, plan);
        case DataParallel::ps_async:
            return plan.hogwild ? build_hogwild(model, layout, plan) : build_parameter_server_async(model, layout, plan);
        case DataParallel::hybrid_cnn: return build_hybrid_cnn(model, layout, plan);
    }
    return build_ddp(model, layout, plan);
}

}  // namespace smol::strategies
