#include "strategies/context_parallel.hpp"

#include <span>

#include "core/error.hpp"

namespace smol::strategies {

std::vector<int> context_parallel_group(const Layout& l, int t, int d, int s) {
    std::vector<int> out;
    const int first = d - d % l.cp;
    for (int c = 0; c < l.cp; ++c) out.push_back(l.rank(t, first + c, s));
    return out;
}

void check_context_parallel(const Model& model, const Plan& plan, const Layout& l) {
    const ErrorContext cp_flag{"", "", "--cp"};
    if (plan.cp < 1) fail_input("--cp must be at least 1, found " + std::to_string(plan.cp), cp_flag);
    if (l.cp == 1) return;
    if (!model.is_transformer())
        fail_input("--cp splits a transformer's sequences; " + model.name() + " is a layer list (CNN / MLP)", cp_flag);
    if (plan.strategy != DataParallel::ddp && plan.strategy != DataParallel::zero1 && plan.strategy != DataParallel::fsdp)
        fail_input(std::string("--strategy ") + to_string(plan.strategy) +
                       " is not modelled with context parallelism; use ddp, zero1 (Megatron's distributed optimizer, "
                       "which shards over the data- and context-parallel ranks) or fsdp with --pp",
                   {"", "", "--strategy"});
    if (plan.cp_comm == CpComm::all_to_all) {
        // Each rank attends with 1/cp of its heads over the whole sequence: TE asserts
        // num_heads % cp_size == 0 for Q, K and V (context_parallel.py:4246).
        const TransformerShape& m = model.shape();
        const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
        if (m.heads / l.tp % l.cp != 0 || kv / l.tp % l.cp != 0)
            fail_input("a2a splits each rank's attention heads over the " + std::to_string(l.cp) +
                           " context-parallel ranks: " + model.name() + " has " + std::to_string(m.heads / l.tp) +
                           " query and " + std::to_string(kv / l.tp) + " key-value heads a rank" +
                           (l.tp > 1 ? " at tp " + std::to_string(l.tp) : "") + ", which --cp " + std::to_string(l.cp) +
                           " must divide; use p2p or all-gather, or a smaller --cp",
                       {"", "", "--cp-comm"});
    }
    // zero1's optimizer offload is Megatron core's --optimizer-cpu-offload, which works with context
    // parallelism (plan.cpp resolve_training checks it against the framework).
    const bool megatron_offload = plan.strategy == DataParallel::zero1 && plan.offload_params == Offload::none;
    const bool offload = ((plan.offload != Offload::none || plan.offload_optimizer != Offload::none) && !megatron_offload) ||
                         plan.offload_params != Offload::none || plan.offload_activations != Offload::none;
    const char* data_parallel_only = offload                                         ? "--offload"
                                     : plan.finetune.kind != FineTuneKind::full      ? "--finetune"
                                     : plan.compress.method != CompressionMethod::none ? "--compress"
                                     : plan.optimizer == Optimizer::lamb             ? "--optimizer lamb"
                                                                                     : nullptr;
    if (data_parallel_only && offload && plan.offload_activations == Offload::none)
        fail_input(std::string(data_parallel_only) + " with context parallelism is Megatron's --optimizer-cpu-offload: "
                       "--strategy zero1 with --offload cpu or --offload-optimizer cpu; leave out --cp otherwise",
                   {"", "", data_parallel_only});
    if (data_parallel_only)
        fail_input(std::string(data_parallel_only) + " is modelled for data parallelism only; leave out --cp",
                   {"", "", data_parallel_only == std::string("--optimizer lamb") ? "--optimizer" : data_parallel_only});
}

namespace {

// Megatron's context-parallel group is its own NCCL communicator, even where its ranks are those
// of another group (strategies/moe.cpp numbers the expert groups 1 and 2).
constexpr int kContextParallelGroup = 3;

std::int32_t intern_or_none(OpGraph& g, std::span<const Kernel> kernels) {
    return kernels.empty() ? -1 : g.intern_recipe(kernels);
}

}  // namespace

ContextParallel::ContextParallel(OpGraph& g, const Layout& l, const std::vector<Block>& blocks, Recompute recompute,
                                 int emitted_tp)
    : g_(&g), l_(&l), emit_tp_(emitted_tp), recipes_(blocks.size()) {
    if (l.cp == 1) return;
    for (const Block& b : blocks) {
        if (!b.cp) continue;
        const ContextPass& c = *b.cp;
        const std::span<const Kernel> all(b.fwd_kernels);
        const auto core_end = static_cast<std::size_t>(c.core_end(c.core_at));
        const std::span<const Kernel> pre = all.subspan(0, static_cast<std::size_t>(c.core_at));
        const std::span<const Kernel> step = all.subspan(static_cast<std::size_t>(c.core_at), static_cast<std::size_t>(c.per_step));
        const std::span<const Kernel> post = all.subspan(core_end);
        Recipes& r = recipes_[static_cast<std::size_t>(b.index)];
        r.pre = intern_or_none(g, pre);
        r.step = g.intern_recipe(step);
        r.post = intern_or_none(g, post);
        r.bwd_pre = intern_or_none(g, backward_kernels(pre));
        r.bwd_step = g.intern_recipe(backward_kernels(step));
        r.bwd_post = intern_or_none(g, backward_kernels(post));
        r.in_pre = intern_or_none(g, backward_kernels(pre, BackwardPart::input));
        r.in_step = g.intern_recipe(backward_kernels(step, BackwardPart::input));
        r.in_post = intern_or_none(g, backward_kernels(post, BackwardPart::input));
        if (recompute == Recompute::full) {
            r.re_pre = r.pre, r.re_step = r.step, r.re_post = r.post;
        } else if (recompute == Recompute::selective && c.recompute_core_at >= 0) {
            // The core is redone (its steps, with their ring), between the other modules redone
            // before and after it (--recompute-modules).
            const std::span<const Kernel> redo(b.recompute_kernels);
            const auto at = static_cast<std::size_t>(c.recompute_core_at);
            r.re_pre = intern_or_none(g, redo.subspan(0, at));
            r.re_step = r.step;
            r.re_post = intern_or_none(g, redo.subspan(static_cast<std::size_t>(c.core_end(c.recompute_core_at))));
        }
    }
}

bool ContextParallel::runs(const Block& b, Phase phase) const {
    if (!b.cp || l_ == nullptr || l_->cp == 1) return false;
    const Recipes& r = recipes_[static_cast<std::size_t>(b.index)];
    switch (phase) {
        case Phase::fwd:
        case Phase::bwd:
        case Phase::bwd_input: return true;
        case Phase::recompute: return r.re_step >= 0;
        default: return false;
    }
}

void ContextParallel::pass(const Block& b, int first, int s, Phase phase, int mb, std::vector<std::vector<OpId>>& last,
                           const Hooks& hooks) {
    const Recipes& r = recipes_[static_cast<std::size_t>(b.index)];
    const int cp = l_->cp;
    const Bytes kv = b.cp->kv_bytes;
    const std::size_t n = static_cast<std::size_t>(cp) * static_cast<std::size_t>(emit_tp_);
    auto at = [&](int c, int t) { return static_cast<std::size_t>(c) * static_cast<std::size_t>(emit_tp_) + static_cast<std::size_t>(t); };
    auto rank = [&](int c, int t) { return l_->rank(t, first + c, s); };
    auto tail = [&](int c, int t) -> OpId& { return last[static_cast<std::size_t>(first + c)][static_cast<std::size_t>(t)]; };
    latest_.assign(n, {OpGraph::kNoOp, OpGraph::kNoOp});
    auto segment = [&](std::int32_t recipe) {
        if (recipe < 0) return;
        for (int c = 0; c < cp; ++c)
            for (int t = 0; t < emit_tp_; ++t) {
                const OpId op = g_->add_kernels(rank(c, t), phase, b.index, mb, recipe, l_->dtype);
                if (latest_[at(c, t)].second == OpGraph::kNoOp) latest_[at(c, t)].second = op;
                tail(c, t) = op;
            }
    };
    // One hop of the ring on every rank: c sends to c + step (forward +1, backward −1, as TE's
    // send_dst at context_parallel.py:1418 and :2229) after `ready` (per rank), receives from
    // c − step; returns the receives.
    auto hop = [&](Bytes bytes, const std::vector<std::vector<OpId>>& ready, int step) {
        std::vector<OpId> recv(n, OpGraph::kNoOp);
        for (int c = 0; c < cp; ++c)
            for (int t = 0; t < emit_tp_; ++t) {
                const int next = (c + step + cp) % cp;
                const auto [snd, rcv] = g_->add_send_recv(rank(c, t), rank(next, t), bytes, phase, b.index, mb,
                                                          Stream::cp_send, Stream::cp_recv);
                for (OpId before : ready[at(c, t)])
                    if (before != OpGraph::kNoOp) g_->depend(before, snd);
                if (latest_[at(c, t)].second == OpGraph::kNoOp) latest_[at(c, t)].second = snd;
                recv[at(next, t)] = rcv;
            }
        // Each rank posts its receive with its send (batch_isend_irecv).
        for (std::size_t k = 0; k < n; ++k)
            for (OpId before : ready[k])
                if (before != OpGraph::kNoOp) g_->depend(before, recv[k]);
        return recv;
    };
    auto steps = [&](std::int32_t recipe, const std::vector<OpId>& wait) {
        for (int c = 0; c < cp; ++c)
            for (int t = 0; t < emit_tp_; ++t) {
                const OpId op = g_->add_kernels(rank(c, t), phase, b.index, mb, recipe, l_->dtype);
                if (!wait.empty() && wait[at(c, t)] != OpGraph::kNoOp) g_->depend(wait[at(c, t)], op);
                if (latest_[at(c, t)].second == OpGraph::kNoOp) latest_[at(c, t)].second = op;
                if (hooks.on_compute) hooks.on_compute(first + c, t, op);
                tail(c, t) = op;
            }
    };
    // The collective variants: before and after the core, blocking collectives of the CP group on
    // the compute stream (TE waits for each all-to-all on a side stream and reorders it there
    // while the next is in flight; here they run in turn).
    //  * all-gather (AttnFuncWithCPAndKVAllGather at TransformerEngine d0067d0): K and V each
    //    gathered before the core, in forward (:3215-3216) and again in backward (:3788-3789),
    //    whose dK and dV are then reduce-scattered home (:4122-4123).
    //  * a2a (AttnFuncWithCPAndQKVOA2A): Q, K and V each all-to-all'ed before the core (:4339, one
    //    all_to_all_single per tensor, :426), its output after it (:4485); in backward dO before
    //    (:4677), dQ, dK and dV after (:4837). Each rank sends 1/cp of its tensor to every other.
    auto group_collective = [&](CollectiveKind kind, Bytes bytes) {
        for (int t = 0; t < emit_tp_; ++t) {
            std::vector<int> group;
            for (int c = 0; c < cp; ++c) group.push_back(l_->rank(t, first + c, s));
            const std::int32_t id = g_->declare_collective(kind, group, bytes, -1, kContextParallelGroup);
            for (int c = 0; c < cp; ++c) {
                const OpId op = g_->add_collective_op(id, rank(c, t), Stream::compute, phase, b.index, mb);
                if (latest_[at(c, t)].second == OpGraph::kNoOp) latest_[at(c, t)].second = op;
                if (hooks.on_compute) hooks.on_compute(first + c, t, op);
                tail(c, t) = op;
            }
        }
    };
    // A part of the layer's kernels: `recipe`, or `hook`'s ops; returns the first compute op
    // per (slot, tensor rank) where the hook emitted it.
    auto part = [&](const Part& hook, std::int32_t recipe) {
        std::vector<OpId> out;
        if (!hook || recipe < 0) {
            segment(recipe);
            return out;
        }
        out.assign(n, OpGraph::kNoOp);
        for (int c = 0; c < cp; ++c) {
            const std::vector<OpId> firsts = hook(first + c, last[static_cast<std::size_t>(first + c)]);
            for (int t = 0; t < emit_tp_; ++t) {
                out[at(c, t)] = firsts[static_cast<std::size_t>(t)];
                if (latest_[at(c, t)].second == OpGraph::kNoOp) latest_[at(c, t)].second = firsts[static_cast<std::size_t>(t)];
            }
        }
        return out;
    };
    // The layer's part after the core (its backward, in backward), and before it.
    auto rest = [&](std::int32_t recipe) { part(hooks.after_core, recipe); };
    auto head = [&](std::int32_t recipe) { part(hooks.before_core, recipe); };
    auto tails = [&] {
        std::vector<std::vector<OpId>> out(n);
        for (int c = 0; c < cp; ++c)
            for (int t = 0; t < emit_tp_; ++t) out[at(c, t)] = {tail(c, t)};
        return out;
    };
    using Collectives = std::vector<std::pair<CollectiveKind, Bytes>>;
    const bool forward = phase == Phase::fwd || phase == Phase::recompute;
    const bool re = phase == Phase::recompute, input = phase == Phase::bwd_input;
    // The layer's kernels before the core, the core's (one step's), and after it, in this pass's
    // order (backward runs the forward's last part first).
    const std::int32_t before_core = forward ? (re ? r.re_pre : r.pre) : (input ? r.in_post : r.bwd_post);
    const std::int32_t core_step = forward ? (re ? r.re_step : r.step) : (input ? r.in_step : r.bwd_step);
    const std::int32_t after_core = forward ? (re ? r.re_post : r.post) : (input ? r.in_pre : r.bwd_pre);
    if (b.cp->comm != CpComm::p2p) {
        const Bytes k = b.cp->k_bytes, v = kv - b.cp->k_bytes;
        Collectives before, after;
        if (b.cp->comm == CpComm::all_gather) {
            const Bytes k_all = Bytes(k.count() * cp), v_all = Bytes(v.count() * cp);
            before = {{CollectiveKind::all_gather, k_all}, {CollectiveKind::all_gather, v_all}};
            if (!forward) after = {{CollectiveKind::reduce_scatter, k_all}, {CollectiveKind::reduce_scatter, v_all}};
        } else {
            const Collectives qkv = {{CollectiveKind::all_to_all, b.cp->q_bytes},
                                     {CollectiveKind::all_to_all, k},
                                     {CollectiveKind::all_to_all, v}};
            const Collectives out = {{CollectiveKind::all_to_all, b.cp->out_bytes}};
            before = forward ? qkv : out;   // backward: dO before the core, dQ, dK, dV after
            after = forward ? out : qkv;
        }
        forward ? head(before_core) : rest(before_core);
        for (const auto& [kind, bytes] : before) group_collective(kind, bytes);
        for (int i = 0; i < b.cp->steps; ++i) steps(core_step, {});
        for (const auto& [kind, bytes] : after) group_collective(kind, bytes);
        forward ? rest(after_core) : head(after_core);
    } else if (forward) {
        head(before_core);                            // norm, QKV projection: K and V ready
        std::vector<OpId> held;                       // the receive of the block each rank holds (none: its own)
        for (int i = 0; i < cp; ++i) {
            std::vector<OpId> next;
            if (i + 1 < cp) {
                // Forward the held block (its receive done) while computing on it.
                std::vector<std::vector<OpId>> ready = tails();
                if (i > 0)
                    for (std::size_t k = 0; k < n; ++k) ready[k] = {held[k]};
                next = hop(kv, ready, 1);
            }
            steps(core_step, held);
            held = std::move(next);
        }
        rest(after_core);                             // output projection, residual, MLP
    } else {
        rest(before_core);
        // TE's backward (context_parallel.py:2459-2500) runs the ring the other way round, from
        // the block the forward ended on (saved: :2087), so each key-value block's gradient is
        // summed on the ranks it visits and ends on its owner.
        std::vector<OpId> held;
        for (int i = 0; i < cp; ++i) {
            // Posted before step i: the held key-value block goes on (but at the last step), with
            // the key-value gradient accumulated at step i − 1 (after the first).
            std::vector<std::vector<OpId>> ready = tails();
            if (i > 0)
                for (std::size_t k = 0; k < n; ++k) ready[k].push_back(held[k]);
            const std::int64_t blocks = (i + 1 < cp ? 1 : 0) + (i > 0 ? 1 : 0);
            std::vector<OpId> next = hop(Bytes(kv.count() * blocks), ready, -1);
            steps(core_step, held);
            held = std::move(next);
        }
        // The last receive, under the last step, brings each rank its finished dK and dV, which
        // the QKV projection's backward needs (:2718-2727).
        if (hooks.before_core && after_core >= 0) {
            const std::vector<OpId> firsts = part(hooks.before_core, after_core);
            for (std::size_t k = 0; k < n; ++k) g_->depend(held[k], firsts[k]);
        } else {
            for (int c = 0; c < cp; ++c)
                for (int t = 0; t < emit_tp_; ++t) {
                    if (after_core < 0) {
                        tail(c, t) = held[at(c, t)];   // a pass whose QKV backward is empty still ends with it
                        continue;
                    }
                    const OpId op = g_->add_kernels(rank(c, t), phase, b.index, mb, after_core, l_->dtype);
                    g_->depend(held[at(c, t)], op);
                    tail(c, t) = op;
                }
        }
    }
    for (int c = 0; c < cp; ++c)
        for (int t = 0; t < emit_tp_; ++t) latest_[at(c, t)].first = tail(c, t);
}

OpId ContextParallel::first_of(OpId op) const {
    for (const auto& [last, first] : latest_)
        if (last == op) return first;
    return op;
}

}  // namespace smol::strategies
