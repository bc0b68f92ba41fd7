// The data-parallel family. Every replica runs the whole model on its share of the batch; the
// flavours differ in how gradients are synchronised and how model states are stored.
//
//  ddp      — PyTorch DDP (Li et al. 2020): gradients packed into buckets in reverse layer order
//             (25 MB by default, a 1 MB first bucket as PyTorch does), each bucket all-reduced on
//             the comm stream as soon as the backward of its last gradient is done, overlapping the
//             rest of backward; gradient accumulation runs the earlier micro-batches under no_sync;
//             then the optimizer step. dp = 1 has no communication at all.
//  ring     — Horovod (strategies/horovod.hpp).
//  zero1-3  — DeepSpeed ZeRO (strategies/zero.hpp).
//  fsdp     — PyTorch FSDP (strategies/fsdp.hpp).
//  ps, ps-async — parameter servers (strategies/parameter_server.hpp).
//
// build_data_parallel dispatches on plan.strategy; the helpers below are shared by the family.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/finetune.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

namespace smol::strategies {

/// Bytes of model state per parameter for mixed-precision Adam (Rajbhandari et al. 2020, K = 12):
/// 16-bit parameters and gradients plus fp32 master weights, momentum and variance. In fp32
/// training the parameters are the master weights: 4 + 4 + 8, the same 16 bytes.
struct StateBytes {
    int params, grads, optimizer;
};
StateBytes state_bytes(DType dtype);

/// Gradient buckets in the order they become ready (reverse block order): each lists the blocks
/// whose gradients it holds, the bytes it holds, and the block whose backward completes it.
struct Bucket {
    Bytes bytes;
    int ready_after_block;  // backward of this block fills the bucket
    std::int64_t fp8 = 0;   // of its parameters, those kept in FP8 (--fp8-param-gather)
};
std::vector<Bucket> make_buckets(const std::vector<Block>& blocks, int grad_bytes_per_param, Bytes cap, Bytes first_cap);
/// The buckets of Megatron's DDP when the FP8 layers' weights are FP8 tensors (--fp8-param-gather):
/// those weights fill a buffer of their own (its parameter dtype uint8,
/// megatron/core/distributed/distributed_data_parallel.py _allocate_buffers_for_parameters), cut
/// into buckets of `cap` from the model's end, and every other parameter (norms, biases, the
/// embedding and the head) joins the last of them, the model's start (partition_buckets' case 3,
/// param_and_grad_buffer.py:1680-1690 at NVIDIA/Megatron-LM d98e8a6). Without an FP8 weight it is
/// make_buckets.
std::vector<Bucket> make_fp8_param_buckets(const std::vector<Block>& blocks, int grad_bytes_per_param, Bytes cap);
/// What bucket b's parameter all-gather moves: `param_bytes` per parameter, one per FP8 one.
Bytes gathered_bytes(const Bucket& b, int grad_bytes_per_param, int param_bytes);
/// Megatron's --overlap-param-gather over make_buckets' buckets: the block at whose forward
/// pre-hook bucket k's parameter all-gather is dispatched. The first bucket in forward order (the
/// last one made) at its own first block; every other when the bucket after it (k + 1, forward
/// order) is waited for, at that bucket's first block (megatron/core/distributed/
/// param_and_grad_buffer.py finish_param_sync dispatches next_param_gather_bucket_group). c10d
/// makes the collective's stream wait for the compute queued before it, so the gather starts once
/// the compute has reached that block: one bucket ahead of the layers.
int param_gather_dispatch_block(const std::vector<Bucket>& buckets, std::size_t k);

/// The data-parallel family for tp = pp = 1: dispatches on plan.strategy. The cluster is read
/// only by `ring`, to express Horovod's cycle time as a wait (see horovod.hpp).
OpGraph build_data_parallel(const Model& model, const topo::Cluster& cluster, const Layout& layout, const Plan& plan);
/// DDP alone.
OpGraph build_ddp(const Model& model, const Layout& layout, const Plan& plan);

namespace detail {

/// Adam per parameter: reads gradient, master weight, momentum and variance and writes master
/// weight, momentum, variance and the working copy (2 + 4·3 + 4·3 + 2 = 28 bytes in mixed
/// precision; 4·4 + 4·3 = 28 in fp32); 12 FLOPs (core/kernel.hpp adam_kernel).
constexpr int kAdamBytesPerParam = 28;

/// The recipes of one block's passes, interned once per graph (a pass with no kernels, such as
/// the weight gradients of a block without weights, has an empty recipe).
struct BlockRecipes {
    std::int32_t fwd = -1, bwd = -1, bwd_input = -1, bwd_weight = -1;
    std::int32_t recompute = -1;   // -1: nothing is recomputed
};
/// Interns every block's forward, backward (whole, and split into input and weight gradients for
/// zero-bubble schedules) and recompute kernels; indexed by block index. With `trained` (LoRA,
/// QLoRA: strategies/finetune.hpp) the passes are its kernels.
std::vector<BlockRecipes> intern_block_recipes(OpGraph& g, const std::vector<Block>& blocks,
                                               const std::vector<BlockKernels>* trained = nullptr);

/// One micro-batch's gradient accumulation over a block's `params` (Framework::grad_accumulation):
/// a pass that reads the gradient accumulated so far and the new one and writes their sum, three
/// times the gradient's bytes per parameter. PyTorch runs one such pass per parameter tensor (12
/// for a GPT layer with biases); here they are one pass of the same traffic, and its launch alone
/// (not the framework's per-kernel dispatch) when autograd's C++ engine issues it
/// (`dispatched` false) rather than a Python hook.
Kernel accumulation_kernel(std::int64_t params, DType dtype, bool dispatched);
/// Each block's accumulation recipe under `how` (-1: a block without parameters, or `how` fused
/// into the weight-gradient GEMMs); the head also accumulates `tied_copy` parameters, the copy of
/// a tied table the last pipeline stage keeps.
std::vector<std::int32_t> intern_accumulation_recipes(OpGraph& g, const std::vector<Block>& blocks, DType dtype,
                                                      GradAccumulation how, std::int64_t tied_copy = 0);
/// Each block's FP8 weight cast (-1: a block without FP8 linear layers, Block::fp8_params 0):
/// Transformer Engine casts a linear layer's weight to FP8 with its transpose when the step's
/// first micro-batch runs it (is_first_microbatch; the copies are reused until the step's end),
/// one cast of every FP8 weight of the block here (TE's one per weight: the same traffic).
/// With `fp8_params` (--fp8-param-gather) the weights are FP8 already and the recipe is their
/// transposes, which Transformer Engine builds after the all-gather for Hopper's FP8 GEMMs
/// (post_all_gather_processing → Float8Tensor._create_transpose, transformer_engine/pytorch/
/// tensor/utils.py:1404-1428 at NVIDIA/TransformerEngine d0067d0; Megatron calls it when a
/// bucket's gather finishes, param_and_grad_buffer.py:337-343): one byte read, one written.
std::vector<std::int32_t> intern_fp8_weight_recipes(OpGraph& g, const std::vector<Block>& blocks, DType dtype,
                                                    bool fp8_params = false);
/// Where a step's FP8 weights come from (add_passes): cast from the 16-bit weights when the step's
/// first micro-batch reaches them, the copies held for the step (copies); FP8 tensors already
/// (--fp8-param-gather), gathered once a step with their transposes built at the first micro-batch
/// (gathered_per_step: the distributed optimizer), or gathered before every forward and backward
/// with the transposes built before each backward and dropped after it (gathered_per_pass:
/// Megatron-FSDP, megatron_fsdp.py:494-498 creates them for backward alone, :617-633 discards them
/// on release).
enum class Fp8Weights : std::uint8_t { copies, gathered_per_step, gathered_per_pass };
/// The FP8 weight copies of blocks [first, last): 2 bytes per FP8 parameter (row-wise and
/// transposed), held for the whole step. Under --fp8-param-gather there are none: the FP8 weight
/// and its transpose take the 16-bit weight's two bytes.
Bytes fp8_weight_bytes(const std::vector<Block>& blocks, int first, int last);
/// The FP8 weights of blocks [first, last) (Block::fp8_params summed).
std::int64_t fp8_weight_params(const std::vector<Block>& blocks, int first, int last);
/// The FP8 weight tensors of blocks [first, last) (each FP8 GEMM with a weight operand): the
/// amaxes --fp8-param-gather reduces after the optimizer step, one fp32 each.
std::int64_t fp8_weight_tensors(const std::vector<Block>& blocks, int first, int last);
/// --fp8-param-gather after the optimizer step, over a shard of `fp8` FP8 weights: the fp32 main
/// weights cast to the 16-bit dtype first "to keep numerical consistency", then to FP8 into the
/// model's weights (megatron/core/fp8_utils.py quantize_param_shard → Transformer Engine's
/// cast_master_weights_to_fp8; utils.py:286-290, :371-463 delayed, :466-590 current scaling,
/// whose amax is a reduction over the shard before the cast).
std::vector<Kernel> fp8_master_cast_kernels(std::int64_t fp8, DType dtype, Fp8Recipe recipe);
/// Whether micro-batch `mb` (0-based) of a step runs the accumulation pass: every later one under
/// autograd (the first hands its gradient over), every one under Megatron's main_grad hook,
/// none when fused.
bool accumulates(GradAccumulation how, int mb);

/// The blocks one replica runs, for the layout's micro-batch, sequence and dtype.
std::vector<Block> replica_blocks(const Model& model, const Layout& layout, const Plan& plan);
/// The data-parallel ranks, in ring order.
std::vector<int> replica_ranks(const Layout& layout);
std::int64_t total_params(const std::vector<Block>& blocks);
/// Replicas the builders emit ops for: every one, or only the first Layout::fold_width when the
/// layout folds them (Layout::folded; replica d's rank then mirrors replica d mod fold_width's,
/// see OpGraph::set_representatives).
int emitted_replicas(const Layout& layout);
/// OpGraph::add_collective over `members`, with ops for the emitted replicas only (kNoOp in a
/// mirror's slot).
std::vector<OpId> add_replica_collective(OpGraph& g, const Layout& layout, CollectiveKind kind,
                                         const std::vector<int>& members, Bytes bytes, Stream stream, Phase phase,
                                         int layer = -1, int microbatch = -1, int index = -1);
/// Marks every replica of a folded data-parallel layout a mirror of replica d mod fold_width
/// (tensor/pipeline plans fold in strategies/model_parallel.cpp).
void fold_replicas(OpGraph& g, const Layout& layout);
/// ceil(n / parts): a shard of n elements over `parts` ranks.
std::int64_t shard(std::int64_t n, int parts);
/// Each block's parameters over `parts` shards: what one rank's optimizer steps per layer.
std::vector<std::int64_t> layer_params(const std::vector<Block>& blocks, int parts);

/// Allocates a buffer at the start of the step on `rank` (compute stream) and keeps it to the end.
std::int32_t alloc_state(OpGraph& g, int rank, Bytes bytes, BufferLabel label, Tier tier = Tier::device);
/// The three model-state buffers (parameters, gradients, optimizer state) for the whole step.
void alloc_model_states(OpGraph& g, int rank, Bytes params, Bytes grads, Bytes optimizer, Tier tier = Tier::device);
/// Bytes the optimizer step moves per parameter: the framework's mixed-precision step
/// (strategies/framework.cpp), or Adam's 28 in fp32 training.
int optimizer_bytes_per_param(const Layout& layout);

/// The forward and backward compute ops of one replica, per micro-batch and block.
struct Passes {
    std::vector<std::vector<OpId>> fwd, bwd;   // [micro-batch][block index]
    /// The first op of each block's forward: its FP8 weights' cast or transposes where they run
    /// there, else its forward. What a parameter gather before forward must precede.
    std::vector<std::vector<OpId>> fwd_first;
    /// The first op of each block's backward: its recompute when it has one, else its backward.
    /// What a parameter gather before backward must precede.
    std::vector<std::vector<OpId>> bwd_first;
};
/// Emits every micro-batch's forward (blocks in order) and backward (reverse order) on `rank`'s
/// compute stream, with each block's activations allocated before its forward and freed after
/// its backward (with `activations_to_host`, DeepSpeed's cpu_checkpointing: copied to host memory
/// right after the forward, which the next forward waits for, and back right before the recompute,
/// which waits for it — both synchronous in checkpointing.py). `before_bwd(mb, block)` runs just
/// before a block's backward is added (to add
/// compute-stream allocations, such as gradient buckets), `after_bwd(mb, block, bwd op)` right
/// after it (compute-stream work that blocks the rest of backward). With `accumulation`, each
/// block's backward is followed by its gradient accumulation pass where `accumulates` says so
/// (before `after_bwd`: a reduction takes the accumulated gradient); LoRA's `trained` adapters
/// accumulate too little to list. `after_pass(mb, block, phase)` runs right after each forward,
/// recompute and backward op is added (the phase says which), to add what follows it on the
/// compute stream: a tensor-parallel replica's collectives (strategies/zero.cpp build_sharded).
Passes add_passes(OpGraph& g, int rank, const std::vector<Block>& blocks, int microbatches, DType dtype,
                  const std::function<void(int, const Block&)>& before_bwd = {},
                  const std::function<void(int, const Block&, OpId)>& after_bwd = {},
                  const std::vector<BlockKernels>* trained = nullptr, bool activations_to_host = false,
                  std::optional<GradAccumulation> accumulation = std::nullopt,
                  const std::function<void(int, const Block&, Phase)>& after_pass = {},
                  Fp8Weights fp8_weights = Fp8Weights::copies);

/// How a ZeRO stage's gradient reductions are timed (DeepSpeed's overlap_comm; Megatron's
/// distributed optimizer): on the comm stream as backward fills each bucket, on the compute
/// stream inside backward (DeepSpeed without overlap_comm reduces on the current stream,
/// runtime/zero/stage_1_and_2.py), or on the comm stream after the whole backward (Megatron
/// without --overlap-grad-reduce).
enum class ReduceTiming { overlapped, blocking, after_backward };
ReduceTiming reduce_timing(const Layout& layout, int zero_stage);

/// Replicas that all-reduce gradient buckets (≤ `cap`, the first ≤ `first_cap`) as backward
/// fills them, then step Adam: DDP, and Horovod with its background `cycle` (zero: none).
OpGraph build_replicated(const Model& model, const Layout& layout, const Plan& plan, Bytes cap, Bytes first_cap,
                         Time cycle);

}  // namespace detail
}  // namespace smol::strategies
