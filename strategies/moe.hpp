// Mixture of experts with expert parallelism (GShard, Lepikhin et al. 2020; Megatron-LM's MoE,
// megatron/core/transformer/moe/), for the model-parallel builder (strategies/model_parallel.cpp).
//
// Layout, as Megatron forms its groups (Megatron-LM d98e8a6, megatron/core/parallel_state.py:617
// order "tp-cp-ep-dp-pp", :872 expert_tensor_parallel_size = tp, :1357 the EP groups, :1457 the
// expert-data-parallel groups): the dp data-parallel ranks of
// one (tensor rank t, stage s) are cut into expert-parallel groups of ep consecutive replicas,
// d = e + ep·d', e < ep; each group holds all E experts, E/ep per rank. The expert-data-parallel
// group of a rank is the ranks with the same e (dp/ep of them): expert gradients are reduced
// there, everything else over the whole data-parallel group; Megatron's distributed optimizer
// (zero1) shards expert states over the expert-data-parallel group.
//
//   dp = 8, ep = 4:   EP groups {d0 d1 d2 d3} {d4 d5 d6 d7}    EDP groups {d0 d4} {d1 d5} {d2 d6} {d3 d7}
//
// With context parallelism the experts' groups fold the cp ranks in (Megatron's "MoE parallel
// folding": parallel_state.py builds the expert groups with a RankGenerator of its own, cp = 1
// and expert_data_parallel_size = world / (etp · ep · pp)): the dp · cp slots of (t, s), cp
// fastest (Layout::rank), are cut into EP groups of ep consecutive slots and EDP groups of the
// slots with the same slot mod ep. A context-parallel rank routes its own share of the sequence.
// An MoE layer's pass is then the context-parallel attention (strategies/context_parallel.hpp)
// up to the end of its core, and this class's segments and all-to-alls after it.
//
// One MoE layer's forward on a rank, as MoEAlltoAllTokenDispatcher runs it
// (megatron/core/transformer/moe/token_dispatcher.py:375-387: "permute → A2A(EP) → AG(TP) →
// experts → RS(TP) → A2A(EP) → unpermute"), all on the compute stream, blocking:
//   attention, router, top-k, permutation, shared experts  (compute)
//   dispatch all-to-all over the EP group                    (the rank's K token copies)
//   all-gather of the routed tokens over the tensor group    (tp > 1; Megatron requires --sp then)
//   the local experts' grouped GEMMs, the received tokens     (compute)
//   sorted by local expert before and back after
//   reduce-scatter over the tensor group                     (tp > 1)
//   combine all-to-all over the EP group
//   un-permutation, weighted sum, residual                   (compute)
// Backward runs the same in reverse: two all-to-alls (the gradients of combine and dispatch).
// Full recompute redoes the forward with its all-to-alls; selective recompute of moe the MoE
// layer's part, its all-to-alls included (no attention collective). The all-to-alls are ordinary
// all_to_all collectives with their real communicators: each rank's buffer is its K token
// copies, of which an all-to-all over ep ranks sends (ep − 1)/ep (the routing probabilities'
// all-to-all, K fp32 per token, is not modelled).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/finetune.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// Megatron's expert-parallel and expert-data-parallel process groups (and torchtitan's FSDP
/// mesh of the experts) are NCCL communicators of their own, even where their ranks are those of
/// the data-parallel group (ep = dp, or ep = 1): OpGraph::declare_collective's group.
constexpr int kExpertDataParallelGroup = 2;

/// The expert-parallel group of replica d (ranks of one (t, s)), in replica order.
std::vector<int> expert_parallel_group(const Layout& l, int t, int d, int s);
/// The expert-data-parallel group of replica d: the replicas holding the same experts.
std::vector<int> expert_data_parallel_group(const Layout& l, int t, int d, int s);
/// A ZeRO-1 shard of `total` units (parameters or bytes), of which `expert` are experts'
/// (sharded over dp/ep) and the rest dense (sharded over dp).
std::int64_t zero1_shard(std::int64_t total, std::int64_t expert, const Layout& l);
/// The checks resolve() runs for --ep, --expert-imbalance and --capacity-factor: ep dividing dp
/// and the experts, MoE with tensor parallelism only with --sp (Megatron's rule,
/// megatron/core/transformer/moe/moe_layer.py:636), data parallelism ddp or zero1.
void check_expert_parallel(const Model& model, const Plan& plan, const Layout& l);

/// Emits what an MoE layer needs beyond one compute op: its passes split around the
/// all-to-alls, and the expert gradients' reduction.
class ExpertParallel {
public:
    ExpertParallel() = default;
    /// `trained`: LoRA's passes by block (strategies/finetune.hpp; empty in full training).
    ExpertParallel(OpGraph& g, const Layout& l, const std::vector<Block>& blocks, Recompute recompute,
                   const std::vector<BlockKernels>& trained);

    /// An MoE layer's pass this class emits: forward, backward (whole or input gradients) and
    /// full recompute of a routed block when ep > 1 or tp > 1. With context parallelism the
    /// passes start (forward) or end (backward) at the attention core's end.
    bool runs(const Block& b, Phase phase) const;
    /// Emits one pass on the tensor ranks of replica d of stage s; `last[t]` becomes the pass's
    /// last op on tensor rank t.
    void pass(const Block& b, int d, int s, Phase phase, int mb, std::vector<OpId>& last);
    /// The first op of the latest pass whose last op is `op` (`op` itself when it ends no pass):
    /// what a receive the pass waits for must come before.
    OpId first_of(OpId op) const;

    /// With ep > 1: copies of blocks [first, last) without their experts' parameters, which
    /// grad_sync reduces apart; otherwise the blocks as they are.
    std::vector<Block> dense_part(const std::vector<Block>& blocks, int first, int last) const;
    /// Expert parameters of blocks [first, last) on one rank (0 unless ep > 1); with `fp8`, those
    /// of them kept in FP8 under --fp8-param-gather (MoePass::expert_fp8_params).
    std::int64_t expert_params(int first, int last, bool fp8 = false) const;
    /// The expert gradients of blocks [first, last) in buckets of `cap` (Megatron's expert-parallel
    /// buffers, bucketed as the dense ones); none unless ep > 1 and dp · cp / ep > 1 (one rank per
    /// expert reduces nothing).
    std::vector<Bucket> expert_buckets(int first, int last, Bytes cap, int grad_bytes) const;
    /// With ep > 1: the expert gradients of blocks [first, last) of stage s, in buckets of `cap`,
    /// all-reduced (zero1: reduce-scattered) over each expert-data-parallel group after the
    /// backward that completes them (`grad_ready[slot][block]`); `last_comm[rank]` follows.
    void grad_sync(int s, int first, int last, Bytes cap, int grad_bytes, bool zero1,
                   const std::vector<std::vector<OpId>>& grad_ready, std::vector<OpId>& last_comm);
    /// zero1 without --overlap-param-gather: all-gathers stage s's updated expert parameters over
    /// the expert-data-parallel groups, after the optimizer op of each rank slot (`opt[slot]`).
    void gather_experts(int s, int param_bytes, int grad_bytes, const std::vector<OpId>& opt);

private:
    struct Recipes {
        std::int32_t fwd[3] = {-1, -1, -1};        // before dispatch, experts, after combine
        std::int32_t bwd[3] = {-1, -1, -1};        // backward of the same three, in backward order
        std::int32_t bwd_input[3] = {-1, -1, -1};
        /// Selective recompute of moe (MoePass::recompute_dispatch_at): the recompute's kernels
        /// before the dispatch, the experts', after the combine.
        std::int32_t re[3] = {-1, -1, -1};
    };
    void all_to_all(const Block& b, int d, int s, Phase phase, int mb, int which, std::vector<OpId>& last);
    void tensor_collective(CollectiveKind kind, Bytes bytes, int d, int s, Phase phase, int layer, int mb, int index,
                           std::vector<OpId>& last);
    void segment(std::int32_t recipe, int d, int s, Phase phase, int layer, int mb, std::vector<OpId>& last);

    OpGraph* g_ = nullptr;
    const Layout* l_ = nullptr;
    const std::vector<Block>* blocks_ = nullptr;
    Recompute recompute_ = Recompute::none;
    std::vector<Recipes> recipes_;                  // by block index
    /// All-to-alls declared by one member and waiting for the others: (t, first replica of the
    /// EP group, stage, layer, micro-batch, phase, which) → (collective, members still to add).
    std::map<std::tuple<int, int, int, int, int, int, int>, std::pair<std::int32_t, int>> pending_;
    std::vector<std::pair<OpId, OpId>> latest_;     // (last, first) per tensor rank of the latest pass
    std::map<int, std::vector<Bucket>> gathers_;    // zero1: per stage, the expert buckets to all-gather
};

}  // namespace smol::strategies
