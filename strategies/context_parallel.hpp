// Context parallelism (Megatron-LM's --context-parallel-size with Transformer Engine's
// context-parallel attention), for the model-parallel builder (strategies/model_parallel.cpp).
// Line numbers below are of transformer_engine/pytorch/attention/dot_product_attention/
// context_parallel.py at TransformerEngine d0067d0.
//
// Layout, as Megatron forms its groups (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"):
// the cp ranks of a context-parallel group are consecutive data-parallel slots of one (tensor
// rank, stage), d = c + cp · replica (Layout::rank). They train the same samples, each on 1/cp
// of every sequence, cut into 2·cp chunks so that rank c holds chunks c and 2·cp − 1 − c and the
// causal mask leaves every rank the same work (core/transformer.cpp context_parallel_core). The
// weights are whole on every rank: gradients are reduced over the dp · cp ranks of a stage (the
// data-parallel group "with context parallel"), and the distributed optimizer (zero1) shards
// over them.
//
// Everything but the attention core runs on the rank's tokens alone. With --cp-comm p2p (TE's
// default, AttnFuncWithCPAndKVP2P :1356) the core runs in cp steps: at step i rank c computes its
// queries against the keys and values that started on rank c − i, while it sends the block it
// holds to rank c + 1 and receives the next one from rank c − 1 (flash_attn_p2p_communicate :96,
// batch_isend_irecv on the CP group, posted before the step's kernel at :1707, so the transfer
// runs under it). One layer's ring is, on every rank of the group:
//
//   forward:   send KV(i) → c + 1, receive KV(i + 1) ← c − 1      (steps 0 … cp − 2)
//              attention kernel i, waiting for KV(i)                (steps 0 … cp − 1)
//   backward:  the ring the other way (send to c − 1, :2229), from the block the forward ended
//              on (:2087): K and V at steps 0 … cp − 2, and from step 1 the gradient dKV
//              accumulated at the step before, so each block's gradient is summed on the ranks
//              it visits and the last receive (posted before the last kernel) brings each rank
//              its own, which the QKV projection's backward waits for (:2459-2500, :2718-2727).
//
// With --cp-comm all-gather (AttnFuncWithCPAndKVAllGather :3014) K and V are all-gathered over
// the group before the core (:3215-3216) and again in backward (:3788-3789), whose dK and dV are
// reduce-scattered after it (:4122-4123); the core is one kernel per local chunk. With --cp-comm
// a2a (AttnFuncWithCPAndQKVOA2A :4170, DeepSpeed-Ulysses) Q, K and V are each all-to-all'ed before
// the core (:4339), which then runs over the whole sequence with 1/cp of the rank's heads, and its
// output after it (:4485); backward all-to-alls dO before (:4677) and dQ, dK, dV after (:4837).
// The heads a rank holds must divide by cp (:4246).
//
// Sends and receives are on their own queues (Stream::cp_send, Stream::cp_recv), as the CP group
// is its own NCCL communicator. Full recompute redoes the forward ring; selective recompute
// redoes the core, ring and all.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// The context-parallel group of slot d (ranks of one (t, s)), in ring order.
std::vector<int> context_parallel_group(const Layout& l, int t, int d, int s);
/// The checks resolve() runs for --cp: a transformer, ddp, zero1 or fsdp, a mixture of experts
/// without fsdp, none of the data-parallel-only features (offload, LoRA, gradient compression,
/// LAMB).
void check_context_parallel(const Model& model, const Plan& plan, const Layout& l);

/// Emits the layers' passes of a context-parallel group: their ring steps and transfers.
class ContextParallel {
public:
    ContextParallel() = default;
    ContextParallel(OpGraph& g, const Layout& l, const std::vector<Block>& blocks, Recompute recompute, int emitted_tp);

    /// A layer's pass this class emits: forward, backward (whole or input gradients), and the
    /// recompute, of a block with a ContextPass.
    bool runs(const Block& b, Phase phase) const;
    /// What runs on slot d in place of a part of a layer's kernels: appends to `last` (per
    /// tensor rank) and returns the first compute op it emitted on each tensor rank.
    using Part = std::function<std::vector<OpId>(int d, std::vector<OpId>& last)>;
    /// What the builder puts in place of the layer's own kernels around the core.
    struct Hooks {
        /// After the attention core (forward), or its backward before the ring (backward): an MoE
        /// layer's experts with their all-to-alls (ExpertParallel), or the kernels in segments
        /// beside their tensor-parallel collectives (model_parallel.cpp make_segments).
        Part after_core;
        /// Before the core (forward), or its backward after the ring (backward, whose first op
        /// waits for the ring's last receive): the kernels in segments.
        Part before_core;
        /// Called with every op the pass puts on rank (d, t)'s compute stream itself (the core's
        /// steps, the collective variants' collectives): the collectives the builder launched
        /// async before it are waited for there.
        std::function<void(int d, int t, OpId op)> on_compute;
    };
    /// Emits one pass on every slot of the group whose first slot is `first` (a multiple of cp) of
    /// stage s; `last[slot][t]` holds each rank's latest op and becomes the pass's last.
    void pass(const Block& b, int first, int s, Phase phase, int mb, std::vector<std::vector<OpId>>& last,
              const Hooks& hooks = {});
    /// The first op of the latest pass on the rank whose last op is `op` (`op` itself when it
    /// ends no pass): what a receive the pass waits for must come before.
    OpId first_of(OpId op) const;

private:
    struct Recipes {
        std::int32_t pre = -1, step = -1, post = -1;               // forward
        std::int32_t bwd_pre = -1, bwd_step = -1, bwd_post = -1;   // backward (bwd_post runs first)
        std::int32_t in_pre = -1, in_step = -1, in_post = -1;      // input gradients only (zb-h1)
        std::int32_t re_pre = -1, re_step = -1, re_post = -1;      // recompute
    };
    OpGraph* g_ = nullptr;
    const Layout* l_ = nullptr;
    int emit_tp_ = 1;
    std::vector<Recipes> recipes_;                  // by block index
    std::vector<std::pair<OpId, OpId>> latest_;     // (last, first) per rank of the latest pass
};

}  // namespace smol::strategies
