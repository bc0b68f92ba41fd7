// DeepSpeed ZeRO (Rajbhandari et al. 2020), mixed-precision Adam with K = 12 bytes of optimizer
// state per parameter. Model states per device over N data-parallel ranks (Ψ parameters):
//
//   stage 1  optimizer states sharded            2Ψ + 2Ψ + 12Ψ/N  = 4Ψ + 12Ψ/N
//   stage 2  + gradients sharded                 2Ψ + (2 + 12)Ψ/N = 2Ψ + 14Ψ/N
//   stage 3  + parameters sharded                16Ψ/N
//
// Stage 1: gradients accumulate in a full buffer; in the last micro-batch they are
//   reduce-scattered bucket by bucket (reverse block order, --bucket-mb) as backward produces
//   them; each rank steps Adam on its shard; the updated parameters are all-gathered in buckets.
// Stage 2: the same, but every micro-batch's gradients are reduce-scattered from transient bucket
//   buffers (freed after the reduce-scatter) into the persistent gradient shard.
// Stage 3: parameters live as shards; each block's parameters are all-gathered into a transient
//   buffer before its forward (the next block's gather is prefetched while one computes; at most
//   two blocks are gathered at once), freed after the forward, all-gathered again before its
//   backward (prefetched ahead of the previous block's reduce-scatter), freed after it; each
//   block's gradients are reduce-scattered into the shard right after its backward.
//
// Per device per step the collectives move 2Ψ·(N−1)/N elements for stages 1–2 (reduce-scatter +
// all-gather) and 3Ψ·(N−1)/N for stage 3 (two all-gathers + one reduce-scatter).
//
// Buffers: persistent shards are labelled parameters / gradients / optimizer_state (the model
// states above); transient gathered parameters are `staging` and transient full gradients are
// `bucket`, so a peak over the model-state labels reproduces the ZeRO formulas.
#pragma once

#include <optional>
#include <vector>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

OpGraph build_zero(const Model& model, const Layout& layout, const Plan& plan, int stage);

/// DeepSpeed ZeRO-3 as it runs (layout.framework): parameters gathered per tensor, blocking, in
/// v0.5 (partition_parameters.py _allgather_param with a torch.cuda.synchronize each); per
/// module, coalesced and prefetched within stage3_prefetch_bucket_size and
/// stage3_max_live_parameters from v0.6; released after forward unless reused within
/// stage3_max_reuse_distance elements, else gathered again before the recompute or backward;
/// tensors under stage3_param_persistence_threshold elements kept whole on every rank;
/// gradients reduce-scattered every micro-batch in reduce_bucket_size buckets. Also as DeepSpeed
/// runs them: ZeRO++ (qwZ, hpZ, qgZ with LoCo's error feedback), MiCS (the model states sharded
/// over groups of consecutive ranks, its boundary all-reduce and hierarchical gather), and
/// ZeRO-Infinity's offload with Twin-Flow.
OpGraph build_zero3(const Model& model, const Layout& layout, const Plan& plan);

/// The tensors of a block DeepSpeed partitions (elements, in use order): its weight matrices (the
/// B operand of each of its weight GEMMs, tied weights excepted) and what no GEMM reads
/// (embedding tables), each at least `persistence_threshold`; the rest (norms, biases, small
/// matrices) stays whole on every rank, returned in `persistent`.
std::vector<std::int64_t> partitioned_tensors(const Block& b, std::int64_t persistence_threshold,
                                              std::int64_t* persistent = nullptr);

/// DeepSpeed's Twin-Flow (offload_optimizer.ratio; stage3.py _create_fp16_sub_groups,
/// subgroup_to_device): a rank's optimizer partition in sub-groups of whole parameter tensors
/// (model order, each closed once it holds sub_group_size elements), cut in each parameter group
/// (the weights with decay, then the 1-D tensors and biases without); the first int(ratio ×
/// sub-groups) stepped on the CPU, the rest on the device.
struct TwinFlowSplit {
    int subgroups = 0;
    int weight_subgroups = 0;        // the first parameter group's (the weights'); the rest are 1-D
    int on_cpu = 0;
    std::int64_t cpu_params = 0;     // a rank's partition elements stepped on the CPU
    std::int64_t cpu_model = 0;      // the whole model's parameters those partitions come from
    std::int64_t params = 0;         // a rank's whole partition (the per-tensor partitions summed)
};
/// The split for `blocks` (one replica's) partitioned over `dp` ranks; `ratio` in [0, 1].
TwinFlowSplit twin_flow_split(const std::vector<Block>& blocks, int dp, std::int64_t sub_group_size, double ratio);
/// The same for a resolved zero3 plan; nullopt unless it runs Twin-Flow (a ratio below 1 with
/// the optimizer offloaded to the CPU).
std::optional<TwinFlowSplit> twin_flow_split(const Model& model, const Layout& layout, const Plan& plan);

/// FSDP's sharded-parameter engine (strategies/fsdp.hpp): one unit per block.
struct ShardedOptions {
    bool shard_params = true;            // false: NO_SHARD (DDP-like, one all-reduce per unit)
    bool reshard_after_forward = true;   // false: SHARD_GRAD_OP / ZeRO-2-like, no backward gather
    int shard_group = 0;                 // ranks per shard group (consecutive); 0: all of dp
};
OpGraph build_sharded(const Model& model, const Layout& layout, const Plan& plan, const ShardedOptions& options);

}  // namespace smol::strategies
