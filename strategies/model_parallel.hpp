// Model parallelism composed with data parallelism (Narayanan et al. 2021, "3D"): Megatron
// tensor parallelism (+ sequence parallelism), a pipeline schedule, and data-parallel gradient
// synchronisation, for any tp·pp·dp layout with tp > 1 or pp > 1.
//
// Ranks follow Layout::rank(t, d, s) = t + tp·(d + dp·s): a tensor-parallel group is tp
// consecutive ranks (inside a node), a pipeline is the ranks of one (t, d) over the stages.
//
//  * tensor parallelism: each block's compute op is followed, on the compute stream (blocking,
//    as Megatron runs them), by Block::tp_collectives_fwd all-reduces of tp_bytes_per_collective
//    over the tensor group in forward and as many in backward; with sequence parallelism each
//    becomes an all-gather plus a reduce-scatter of the same buffer (same volume). Full
//    recompute repeats the forward's collectives.
//  * pipeline: layers are cut into p·v contiguous virtual stages, equal (Megatron's) or balanced
//    by FLOPs (embedding with the first, head with the last) or as --stage-layers says; the
//    schedule table (schedule.hpp) is the order of each device's steps. Activations go forward
//    and their gradients backward as send/recv between the stage ranks of one (t, d), on one
//    queue per neighbour and direction when the framework batches them (Megatron). With
//    tp > 1 and no sp, each tensor rank sends 1/t of the activation (Megatron's scatter/gather
//    optimisation, Narayanan et al. 2021 §4.1; the all-gather after it, over NVLink, is not
//    modelled). Activations of a (chunk, micro-batch) are allocated at its forward and freed
//    after its backward (after bwd_weight in zb-h1).
//  * data parallelism, after the last backward of each chunk: ddp all-reduces gradient buckets
//    over the dp group on the comm stream, overlapping the rest of that backward; zero1 is
//    Megatron's distributed optimizer: reduce-scatter of the buckets, the optimizer on a 1/dp
//    shard of the states, then an all-gather of the updated parameters.
//  * tied embeddings with pp > 1: the last stage holds a copy of the embedding table for the
//    head, and the two copies' gradients are all-reduced between first and last stage.
#pragma once

#include <functional>
#include <vector>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// Layers (transformer layers, or a layer list's layers) per virtual stage, `stages` entries.
/// `by_hand` (from --stage-layers) is checked and returned when not empty. Otherwise `equal`
/// gives each stage the same number of layers, as Megatron-LM does (a bad_input error when they
/// do not divide: megatron/core/transformer/transformer_block.py asserts it), and `balanced`
/// cuts contiguous stages minimising the costliest stage's FLOPs (forward + backward +
/// recompute), the embedding counted with the first stage and the head with the last, at least
/// one layer each. `speed` splits as `balanced` here (the caller gives its split as `by_hand`).
std::vector<int> partition_layers(const std::vector<Block>& blocks, int stages, const std::vector<int>& by_hand,
                                  Partition rule = Partition::balanced);
/// The contiguous split of `layers` layers into `stages` stages (at least one layer each) whose
/// costliest stage is least, `stage_cost(stage, first, end)` pricing layers [first, end) on that
/// stage (infinity: not allowed there); ties go to the later cut. Empty when every split has a
/// stage of infinite cost.
std::vector<int> min_max_split(int layers, int stages, const std::function<double(int, int, int)>& stage_cost);
/// The rule a plan uses: its --partition, else equal for transformers and balanced for layer lists.
Partition partition_rule(const Model& model, const Plan& plan);

/// The checks resolve() runs when tp > 1 or pp > 1; throws bad_input saying why a plan is
/// impossible: a data-parallel flavour that does not compose, pp above the layers, interleaved
/// with layers not divisible by pp·v or micro-batches not a multiple of pp, --stage-layers not
/// matching. `blocks`: the replica's (detail::replica_blocks), which resolve has built first —
/// that is where tp not dividing the heads or key-value heads fails (the model's own message).
void check_model_parallel(const Model& model, const Plan& plan, const Layout& layout, const std::vector<Block>& blocks);

OpGraph build_model_parallel(const Model& model, const Layout& layout, const Plan& plan);

}  // namespace smol::strategies
