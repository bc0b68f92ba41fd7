#include "strategies/moe.hpp"

#include <array>
#include <span>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"

namespace smol::strategies {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

constexpr int kExpertParallelGroup = 1;

}  // namespace

std::vector<int> expert_parallel_group(const Layout& l, int t, int d, int s) {
    std::vector<int> out;
    const int first = d - d % l.ep;
    for (int e = 0; e < l.ep; ++e) out.push_back(l.rank(t, first + e, s));
    return out;
}

std::vector<int> expert_data_parallel_group(const Layout& l, int t, int d, int s) {
    std::vector<int> out;
    for (int r = d % l.ep; r < l.dp_cp(); r += l.ep) out.push_back(l.rank(t, r, s));
    return out;
}

std::int64_t zero1_shard(std::int64_t total, std::int64_t expert, const Layout& l) {
    const std::int64_t dense = ceil_div(total - expert, l.dp_cp());
    return expert > 0 ? dense + ceil_div(expert, l.dp_cp() / l.ep) : dense;
}

void check_expert_parallel(const Model& model, const Plan& plan, const Layout& l) {
    const ErrorContext ep_flag{"", "", "--ep"};
    const bool moe = model.is_transformer() && model.shape().is_moe();
    if (plan.ep < 1) fail_input("--ep must be at least 1, found " + std::to_string(plan.ep), ep_flag);
    if (plan.ep > 1 && !moe)
        fail_input("--ep " + std::to_string(plan.ep) + " needs a mixture-of-experts model; " + model.name() + " has no experts",
                   ep_flag);
    if (l.dp_cp() % plan.ep != 0)
        fail_input("--ep " + std::to_string(plan.ep) + " does not divide " +
                       (l.cp > 1 ? "dp · cp = " + std::to_string(l.dp_cp()) : "dp = " + std::to_string(l.dp)) +
                       ": Megatron forms expert-parallel groups from the data-" + (l.cp > 1 ? "and context-" : "") +
                       "parallel ranks (megatron/core/parallel_state.py), so ep must divide " + (l.cp > 1 ? "dp · cp" : "dp"),
                   ep_flag);
    if (moe && model.shape().moe.experts % plan.ep != 0)
        fail_input("--ep " + std::to_string(plan.ep) + " does not divide the " + std::to_string(model.shape().moe.experts) +
                       " experts of " + model.name(),
                   ep_flag);
    if (plan.ep > 1 && plan.strategy == DataParallel::fsdp) {
        // torchtitan's FSDP with expert parallelism (torchtitan/models/llama4/infra/parallelize.py
        // apply_fsdp): each block's experts are an FSDP unit of their own over the
        // expert-data-parallel mesh (dp_mod_ep), the rest of the block over every data-parallel
        // rank; with tensor parallelism (each tensor rank's slices, the experts split over the
        // tensor group as Megatron's expert tensor parallelism does), pipeline stages (torchtitan's
        // PP + FSDP + EP, as it trains DeepSeek-V3), and full, grad-op or hybrid sharding (HSDP:
        // the experts' shards too replicated across shard groups), and context parallelism
        // (torchtitan's FSDP + CP + EP: the shards and the expert groups over dp · cp slots).
        if (plan.fsdp_sharding == FsdpSharding::none)
            fail_input("--fsdp-sharding none with --ep is not modelled: FSDP with expert parallelism shards (full, grad-op "
                           "or hybrid)",
                       {"", "", "--fsdp-sharding"});
        // torchtitan's HSDP borrows the expert-parallel ranks from dp_shard: the expert-parallel
        // groups lie within a shard group (of dp_shard · cp slots with context parallelism).
        if (plan.fsdp_sharding == FsdpSharding::hybrid && (l.shard_group * l.cp) % plan.ep != 0)
            fail_input("--ep " + std::to_string(plan.ep) + " does not divide the hybrid shard group of " +
                           std::to_string(l.shard_group) + " replicas" +
                           (l.cp > 1 ? " · cp " + std::to_string(l.cp) + " = " + std::to_string(l.shard_group * l.cp) + " slots" : "") +
                           ": the expert-parallel groups lie within a shard group "
                           "(torchtitan takes them from dp_shard" + (l.cp > 1 ? " · cp" : "") + "); choose --ep dividing it, or --fsdp-group",
                       ep_flag);
    } else if (plan.ep > 1 && (plan.strategy == DataParallel::ddp || plan.strategy == DataParallel::zero1) &&
               l.framework.name != FrameworkName::megatron) {
        // The token dispatcher, groups and distributed optimizer are Megatron core's; DeepSpeed's
        // MoE (deepspeed/moe/sharded_moe.py) drops tokens past a capacity by default.
        fail_input("--ep with --strategy " + std::string(to_string(plan.strategy)) + " is modelled as Megatron runs it "
                       "(its all-to-all token dispatcher and expert-data-parallel groups); " +
                       describe(l.framework) + " is not: use --framework megatron",
                   {"", "", "--framework"});
    } else if (plan.ep > 1 && plan.strategy != DataParallel::ddp && plan.strategy != DataParallel::zero1) {
        fail_input(std::string("--strategy ") + to_string(plan.strategy) +
                       " is not modelled with expert parallelism; use ddp or zero1 (Megatron's distributed optimizer, "
                       "which shards expert states over the expert-data-parallel group), or fsdp (torchtitan's FSDP, "
                       "experts sharded over the expert-data-parallel group)",
                   {"", "", "--strategy"});
    }
    if (moe && l.tp > 1 && !plan.sequence_parallel)
        fail_input("a mixture of experts with tensor parallelism needs --sp: Megatron refuses MoE with tp > 1 without "
                   "sequence parallelism in training (megatron/core/transformer/moe/moe_layer.py)",
                   {"", "", "--sp"});
    if (!(plan.expert_imbalance >= 1))
        fail_input("--expert-imbalance is the busiest expert's tokens over the mean, at least 1; found " +
                       std::to_string(plan.expert_imbalance),
                   {"", "", "--expert-imbalance"});
    if (plan.expert_imbalance > 1 && !moe)
        fail_input("--expert-imbalance needs a mixture-of-experts model; " + model.name() + " has no experts",
                   {"", "", "--expert-imbalance"});
    if (!(plan.capacity_factor >= 0))
        fail_input("--capacity-factor must be positive (or 0 for dropless routing), found " + std::to_string(plan.capacity_factor),
                   {"", "", "--capacity-factor"});
    if (plan.capacity_factor > 0 && !moe)
        fail_input("--capacity-factor needs a mixture-of-experts model; " + model.name() + " has no experts",
                   {"", "", "--capacity-factor"});
    if (moe) {
        // The busiest expert can receive at most every token once: E / K times the mean share.
        const TransformerShape& m = model.shape();
        const double most = static_cast<double>(m.moe.experts) / m.moe.top_k;
        if (plan.expert_imbalance > most)
            fail_input("--expert-imbalance of at most " + std::to_string(most) + " (every token on one of the " +
                           std::to_string(m.moe.experts) + " experts, " + std::to_string(m.moe.top_k) + " per token), found " +
                           std::to_string(plan.expert_imbalance),
                       {"", "", "--expert-imbalance"});
        if (plan.capacity_factor > most)
            fail_input("--capacity-factor of at most " + std::to_string(most) + " (an expert then takes every token), found " +
                           std::to_string(plan.capacity_factor),
                       {"", "", "--capacity-factor"});
    }
}

namespace {

/// `all` from index `from` on, cut at `first` and `second` (indices into `all`).
std::array<std::span<const Kernel>, 3> three(std::span<const Kernel> all, int from, int first, int second) {
    const auto f = static_cast<std::size_t>(from), a = static_cast<std::size_t>(first), b = static_cast<std::size_t>(second);
    return {all.subspan(f, a - f), all.subspan(a, b - a), all.subspan(b)};
}

/// Up to which kernel a layer's kernels are the ring attention's (ContextParallel): the end of its
/// attention core starting at `core_at` under context parallelism; 0 otherwise, or without a core.
int ring_end(const Block& b, const Layout& l, int core_at) {
    return b.cp && l.cp > 1 && core_at >= 0 ? b.cp->core_end(core_at) : 0;
}

}  // namespace

ExpertParallel::ExpertParallel(OpGraph& g, const Layout& l, const std::vector<Block>& blocks, Recompute recompute,
                               const std::vector<BlockKernels>& trained)
    : g_(&g), l_(&l), blocks_(&blocks), recompute_(recompute), recipes_(blocks.size()) {
    for (const Block& b : blocks) {
        if (!b.moe || (l.ep == 1 && l.tp == 1)) continue;
        // Under context parallelism the attention up to its core's end is the ring's (ContextParallel),
        // in forward and, where selective recompute redoes the core, in the recompute.
        const int from = ring_end(b, l, b.cp ? b.cp->core_at : -1);
        const auto parts = three(b.fwd_kernels, from, b.moe->dispatch_at, b.moe->combine_at);
        Recipes& r = recipes_[static_cast<std::size_t>(b.index)];
        for (int k = 0; k < 3; ++k) r.fwd[k] = g.intern_recipe(parts[static_cast<std::size_t>(k)]);
        if (b.moe->recompute_dispatch_at >= 0) {
            const auto re = three(b.recompute_kernels, ring_end(b, l, b.cp ? b.cp->recompute_core_at : -1),
                                  b.moe->recompute_dispatch_at, b.moe->recompute_combine_at);
            for (int k = 0; k < 3; ++k) r.re[k] = g.intern_recipe(re[static_cast<std::size_t>(k)]);
        }
        if (!trained.empty()) {
            // LoRA: the backward fine-tuning runs, cut where its parts meet (finetune.hpp); never
            // with context parallelism (check_context_parallel).
            if (from > 0) throw Error(ErrorKind::internal, "LoRA's MoE passes under context parallelism");
            const BlockKernels& t = trained[static_cast<std::size_t>(b.index)];
            const auto bwd = three(t.bwd, 0, t.bwd_at[0], t.bwd_at[1]), input = three(t.bwd_input, 0, t.bwd_input_at[0], t.bwd_input_at[1]);
            for (int k = 0; k < 3; ++k) {
                r.bwd[k] = g.intern_recipe(bwd[static_cast<std::size_t>(k)]);
                r.bwd_input[k] = g.intern_recipe(input[static_cast<std::size_t>(k)]);
            }
            continue;
        }
        for (int k = 0; k < 3; ++k) {
            // Backward visits the parts in reverse: after combine, experts, before dispatch.
            r.bwd[k] = g.intern_recipe(backward_kernels(parts[static_cast<std::size_t>(2 - k)]));
            r.bwd_input[k] = g.intern_recipe(backward_kernels(parts[static_cast<std::size_t>(2 - k)], BackwardPart::input));
        }
    }
}

bool ExpertParallel::runs(const Block& b, Phase phase) const {
    if (!b.moe || l_ == nullptr || (l_->ep == 1 && l_->tp == 1)) return false;
    switch (phase) {
        case Phase::fwd:
        case Phase::bwd:
        case Phase::bwd_input: return true;
        case Phase::recompute: return recompute_ == Recompute::full || b.moe->recompute_dispatch_at >= 0;
        default: return false;
    }
}

void ExpertParallel::segment(std::int32_t recipe, int d, int s, Phase phase, int layer, int mb, std::vector<OpId>& last) {
    for (int t = 0; t < l_->tp; ++t) {
        const OpId op = g_->add_kernels(l_->rank(t, d, s), phase, layer, mb, recipe, l_->dtype);
        if (latest_[static_cast<std::size_t>(t)].second == OpGraph::kNoOp) latest_[static_cast<std::size_t>(t)].second = op;
        last[static_cast<std::size_t>(t)] = op;
    }
}

void ExpertParallel::tensor_collective(CollectiveKind kind, Bytes bytes, int d, int s, Phase phase, int layer, int mb,
                                       int index, std::vector<OpId>& last) {
    if (l_->tp == 1) return;
    std::vector<int> group;
    for (int t = 0; t < l_->tp; ++t) group.push_back(l_->rank(t, d, s));
    const std::vector<OpId> ops = g_->add_collective(kind, group, bytes, Stream::compute, phase, layer, mb, index);
    for (int t = 0; t < l_->tp; ++t) last[static_cast<std::size_t>(t)] = ops[static_cast<std::size_t>(t)];
}

void ExpertParallel::all_to_all(const Block& b, int d, int s, Phase phase, int mb, int which, std::vector<OpId>& last) {
    if (l_->ep == 1) return;
    for (int t = 0; t < l_->tp; ++t) {
        const int first = d - d % l_->ep;
        const auto key = std::make_tuple(t, first, s, b.index, mb, static_cast<int>(phase), which);
        auto it = pending_.find(key);
        if (it == pending_.end()) {
            const std::int32_t cid = g_->declare_collective(CollectiveKind::all_to_all, expert_parallel_group(*l_, t, d, s),
                                                            b.moe->dispatch_bytes, -1, kExpertParallelGroup);
            it = pending_.emplace(key, std::make_pair(cid, l_->ep)).first;
        }
        last[static_cast<std::size_t>(t)] =
            g_->add_collective_op(it->second.first, l_->rank(t, d, s), Stream::compute, phase, b.index, mb, which);
        if (--it->second.second == 0) pending_.erase(it);
    }
}

void ExpertParallel::pass(const Block& b, int d, int s, Phase phase, int mb, std::vector<OpId>& last) {
    const Recipes& r = recipes_[static_cast<std::size_t>(b.index)];
    const MoePass& p = *b.moe;
    latest_.assign(static_cast<std::size_t>(l_->tp), {OpGraph::kNoOp, OpGraph::kNoOp});
    const bool sp = l_->tp > 1;  // MoE with tp > 1 runs with sequence parallelism (check_expert_parallel)
    auto attention_collectives = [&] {
        for (int k = 0; k < p.attention_tp_collectives; ++k) {
            tensor_collective(sp ? CollectiveKind::all_gather : CollectiveKind::all_reduce, b.tp_bytes_per_collective, d, s,
                              phase, b.index, mb, k, last);
            if (sp) tensor_collective(CollectiveKind::reduce_scatter, b.tp_bytes_per_collective, d, s, phase, b.index, mb, k, last);
        }
    };
    const int gather = p.attention_tp_collectives;  // index labels of the tensor group's token gather and scatter
    if (phase == Phase::fwd || phase == Phase::recompute) {
        // Selective recompute of moe runs its own kernels, without the attention's collectives.
        const bool moe_only = phase == Phase::recompute && recompute_ != Recompute::full;
        const std::int32_t* parts = moe_only ? r.re : r.fwd;
        segment(parts[0], d, s, phase, b.index, mb, last);
        if (!moe_only) attention_collectives();
        all_to_all(b, d, s, phase, mb, 0, last);   // dispatch
        tensor_collective(CollectiveKind::all_gather, p.tp_gather_bytes, d, s, phase, b.index, mb, gather, last);
        segment(parts[1], d, s, phase, b.index, mb, last);
        tensor_collective(CollectiveKind::reduce_scatter, p.tp_gather_bytes, d, s, phase, b.index, mb, gather, last);
        all_to_all(b, d, s, phase, mb, 1, last);   // combine
        segment(parts[2], d, s, phase, b.index, mb, last);
    } else {
        const std::int32_t* parts = phase == Phase::bwd_input ? r.bwd_input : r.bwd;
        segment(parts[0], d, s, phase, b.index, mb, last);
        all_to_all(b, d, s, phase, mb, 1, last);   // the combine's gradient, back to the experts
        tensor_collective(CollectiveKind::all_gather, p.tp_gather_bytes, d, s, phase, b.index, mb, gather, last);
        segment(parts[1], d, s, phase, b.index, mb, last);
        tensor_collective(CollectiveKind::reduce_scatter, p.tp_gather_bytes, d, s, phase, b.index, mb, gather, last);
        all_to_all(b, d, s, phase, mb, 0, last);   // the dispatch's gradient, back to the tokens' ranks
        segment(parts[2], d, s, phase, b.index, mb, last);
        attention_collectives();
    }
    for (int t = 0; t < l_->tp; ++t) latest_[static_cast<std::size_t>(t)].first = last[static_cast<std::size_t>(t)];
}

OpId ExpertParallel::first_of(OpId op) const {
    for (const auto& [last, first] : latest_)
        if (last == op) return first;
    return op;
}

std::vector<Block> ExpertParallel::dense_part(const std::vector<Block>& blocks, int first, int last) const {
    std::vector<Block> out(blocks.begin() + first, blocks.begin() + last);
    if (l_ != nullptr && l_->ep > 1)
        for (Block& b : out)
            if (b.moe) {
                b.params -= b.moe->expert_params;
                b.fp8_params -= b.moe->expert_fp8_params;
            }
    return out;
}

std::int64_t ExpertParallel::expert_params(int first, int last, bool fp8) const {
    if (l_ == nullptr || l_->ep == 1) return 0;
    std::int64_t n = 0;
    for (int i = first; i < last; ++i) {
        const Block& b = (*blocks_)[static_cast<std::size_t>(i)];
        if (b.moe) n += fp8 ? b.moe->expert_fp8_params : b.moe->expert_params;
    }
    return n;
}

std::vector<Bucket> ExpertParallel::expert_buckets(int first, int last, Bytes cap, int grad_bytes) const {
    if (l_ == nullptr || l_->ep == 1 || l_->dp_cp() / l_->ep == 1) return {};   // one rank per expert: nothing to reduce
    std::vector<Block> experts(blocks_->begin() + first, blocks_->begin() + last);
    for (Block& b : experts) {
        b.params = b.moe ? b.moe->expert_params : 0;
        b.fp8_params = b.moe ? b.moe->expert_fp8_params : 0;
    }
    // Megatron's expert-parallel buffers are bucketed as the dense ones, FP8 weights apart.
    return l_->fp8_param_gather ? make_fp8_param_buckets(experts, grad_bytes, cap) : make_buckets(experts, grad_bytes, cap, cap);
}

void ExpertParallel::grad_sync(int s, int first, int last, Bytes cap, int grad_bytes, bool zero1,
                               const std::vector<std::vector<OpId>>& grad_ready, std::vector<OpId>& last_comm) {
    const Layout& l = *l_;
    const std::vector<Bucket> buckets = expert_buckets(first, last, cap, grad_bytes);
    if (buckets.empty()) return;
    for (int t = 0; t < l.tp; ++t)
        for (int e = 0; e < l.ep; ++e) {
            const std::vector<int> group = expert_data_parallel_group(l, t, e, s);
            for (std::size_t k = 0; k < buckets.size(); ++k) {
                const auto cid = g_->declare_collective(zero1 ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce,
                                                        group, buckets[k].bytes, -1, kExpertDataParallelGroup);
                for (int d = e; d < l.dp_cp(); d += l.ep) {
                    const int r = l.rank(t, d, s);
                    const OpId op = g_->add_collective_op(cid, r, Stream::comm, Phase::comm, -1, -1, static_cast<int>(k));
                    g_->depend(grad_ready[static_cast<std::size_t>(t + l.tp * d)][static_cast<std::size_t>(buckets[k].ready_after_block)], op);
                    last_comm[static_cast<std::size_t>(r)] = op;
                }
            }
        }
    if (zero1)
        for (const Bucket& b : buckets) gathers_[s].push_back(b);
}

void ExpertParallel::gather_experts(int s, int param_bytes, int grad_bytes, const std::vector<OpId>& opt) {
    const auto it = gathers_.find(s);
    if (it == gathers_.end()) return;
    const Layout& l = *l_;
    for (int t = 0; t < l.tp; ++t)
        for (int e = 0; e < l.ep; ++e) {
            const std::vector<int> group = expert_data_parallel_group(l, t, e, s);
            for (const Bucket& b : it->second) {
                const auto cid = g_->declare_collective(CollectiveKind::all_gather, group, gathered_bytes(b, grad_bytes, param_bytes),
                                                        -1, kExpertDataParallelGroup);
                for (int d = e; d < l.dp_cp(); d += l.ep) {
                    const OpId op = g_->add_collective_op(cid, l.rank(t, d, s), Stream::comm, Phase::opt);
                    g_->depend(opt[static_cast<std::size_t>(t + l.tp * d)], op);
                }
            }
        }
}

}  // namespace smol::strategies
