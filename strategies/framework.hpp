// Framework behaviour as data: what the training framework a user runs actually does, per
// framework and release, read by the strategies instead of version checks scattered through
// them. `--framework NAME[@VERSION]` picks a row: any version number is accepted and means the
// behaviour of the latest release at or before it; no version means the current release.
//
//   pytorch              torch.nn.parallel.DistributedDataParallel / FSDP, eager
//   megatron             Megatron-LM (megatron/core)
//   deepspeed            DeepSpeed's engine (ZeRO) with a PyTorch model
//   megatron-deepspeed   Megatron's model code on DeepSpeed's engine (microsoft/Megatron-DeepSpeed)
//
// Every field names the source line that decides it (see framework.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel.hpp"
#include "core/model.hpp"
#include "core/units.hpp"

namespace smol::strategies {

enum class FrameworkName { pytorch, megatron, deepspeed, megatron_deepspeed };
const char* to_string(FrameworkName f);
/// True for the frameworks that train on DeepSpeed's engine (its ZeRO optimizers, overlap_comm,
/// reduce_bucket_size): deepspeed and megatron-deepspeed.
constexpr bool deepspeed_engine(FrameworkName f) { return f == FrameworkName::deepspeed || f == FrameworkName::megatron_deepspeed; }

/// How gradients of a data-parallel replica are reduced.
enum class GradReduce {
    overlapped,       // buckets all-reduced (or reduce-scattered) as backward fills them
    after_backward,   // one pass over all gradients after the whole backward (no bucketing)
};

/// How ZeRO-3 / FSDP gather parameters before use.
enum class GatherGranularity {
    per_tensor,       // one all-gather per parameter tensor (DeepSpeed before 0.6)
    per_module,       // one coalesced all-gather per module's parameters
    flat_unit,        // one all-gather of the FSDP unit's flat parameter
};

/// How a micro-batch's parameter gradients join those of the micro-batches before it.
///  * autograd: PyTorch's AccumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h): the
///    first micro-batch after zero_grad(set_to_none) hands its gradient over, each later one adds
///    `grad += new` in place, a pass per parameter tensor launched by autograd's C++ engine.
///    PyTorch DDP and DeepSpeed's engine (stages 0-1 keep each parameter's .grad) run it, and so
///    does Megatron's model under DeepSpeed (Megatron-DeepSpeed): main_grad belongs to Megatron's
///    own DDP, which DeepSpeed replaces.
///  * main_grad_hook: Megatron-LM's LocalDDP (megatron/model/distributed.py _make_param_hook):
///    `param.main_grad.add_(param.grad.data)` in a hook after every micro-batch, the first
///    included (the buffer is zeroed at the step's start).
///  * fused: Megatron core's gradient_accumulation_fusion (on by default): the weight-gradient
///    GEMM accumulates into main_grad itself (fused_weight_gradient_mlp_cuda, β = 1); no pass.
enum class GradAccumulation { autograd, main_grad_hook, fused };

/// Megatron core's fused cross-entropy (--cross-entropy-fusion, its --cross-entropy-loss-fusion
/// with --cross-entropy-fusion-impl): none (the unfused vocab-parallel loss), native (Megatron
/// core's own, compiled: core 0.8 and later) or te (Transformer Engine's Triton kernels: core
/// 0.12 to 0.18; 0.19 refuses it). core/kernel.hpp LossKernels.
enum class CrossEntropyFusion : std::uint8_t { none, native, te };
const char* to_string(CrossEntropyFusion f);
/// "none" | "native" | "te"; bad input naming --cross-entropy-fusion otherwise.
CrossEntropyFusion parse_cross_entropy_fusion(const std::string& text);

struct Framework {
    FrameworkName name = FrameworkName::pytorch;
    std::string version;                // the release whose behaviour this row is ("2.5", "0.5.10")
    // Data-parallel gradient reduction, by default (a flag may override it).
    GradReduce grad_reduce = GradReduce::overlapped;
    bool can_overlap_grad_reduce = false;   // has a switch to overlap it (Megatron core, DeepSpeed overlap_comm)
    /// The distributed optimizer's parameter all-gather: after the optimizer step (false), or
    /// overlapped with the next forward, each bucket waited for by the first layer using it
    /// (Megatron core's --overlap-param-gather, 0.4 on).
    bool can_overlap_param_gather = false;
    bool overlap_param_gather = false;
    /// Under the interleaved schedule, the first model chunk's gathers dispatched right after its
    /// own optimizer step, under the other chunks' (Megatron core's
    /// --overlap-param-gather-with-optimizer-step, 0.9 on).
    bool can_overlap_param_gather_with_optimizer_step = false;
    bool overlap_param_gather_with_optimizer_step = false;
    /// Transformer Engine's userbuffers overlap of every tensor-parallel collective with the GEMM
    /// beside it (Megatron core's --tp-comm-overlap, 0.4 on; strategies/model_parallel.cpp).
    bool can_tp_comm_overlap = false;
    // Pipeline point-to-point: sends and receives of one schedule step posted together
    // (torch.distributed.batch_isend_irecv), one NCCL stream per peer pair; overlap_p2p waits for
    // a receive only right before its use (Megatron's --overlap-p2p-comm).
    bool p2p_batched = true;
    bool overlap_p2p = false;
    // ZeRO-3 parameter gathering (DeepSpeed) and its limits, in elements.
    GatherGranularity zero3_gather = GatherGranularity::per_module;
    bool zero3_blocking_fetch = false;  // a device synchronize after every gather, no prefetch
    std::int64_t prefetch_bucket = 50'000'000;       // stage3_prefetch_bucket_size
    std::int64_t max_live_parameters = 1'000'000'000; // stage3_max_live_parameters
    std::int64_t max_reuse_distance = 1'000'000'000;  // stage3_max_reuse_distance
    std::int64_t param_persistence_threshold = 100'000; // stage3_param_persistence_threshold
    std::int64_t reduce_bucket = 500'000'000;         // reduce_bucket_size (elements)
    // ZeRO-Infinity's buffers (runtime/zero/offload_config.py, config.py, v0.19.6 defaults): the
    // optimizer steps sub-group by sub-group through optimizer_swap_buffers pinned buffers of a
    // sub-group each; NVMe parameters come through param_swap_buffers of param_swap_buffer_size
    // elements.
    std::int64_t sub_group_size = 1'000'000'000;      // zero_optimization.sub_group_size
    std::int64_t optimizer_swap_buffers = 4;          // offload_optimizer.buffer_count
    std::int64_t param_swap_buffers = 5;              // offload_param.buffer_count
    std::int64_t param_swap_buffer_size = 100'000'000;   // offload_param.buffer_size (elements)
    /// ZeRO-3 offloaded: gradient partitions accumulate in a flat 16-bit buffer in host memory,
    /// round-tripping through the device (strategies/offload.hpp stage3_partition_grads), from
    /// DeepSpeed 0.6 (4912e0ad7, #1453); before, as stages 1-2 accumulate.
    bool zero3_flat_grad_buffer = false;
    /// Gradients reduced after backward go out in buckets of this many elements (0: one bucket
    /// holding them all).
    std::int64_t after_backward_bucket = 0;
    /// DeepSpeed's zero_optimization.overlap_comm as configured (unset: its default, true for
    /// stage 3 only — runtime/zero/config.py:383).
    std::optional<bool> overlap_comm;
    /// Bytes the optimizer step moves per parameter (mixed precision: Adam plus the framework's
    /// gradient unscale, norm and parameter copies).
    int optimizer_bytes_per_param = 28;
    GradAccumulation grad_accumulation = GradAccumulation::autograd;
    /// Host time per GPU kernel that the framework spends before the driver's launch (the
    /// device's launch_overhead): Python, the dispatcher, autograd's bookkeeping. Zero where it was
    /// not measured (give --dispatch-overhead); where it outlasts the kernels, the host sets the
    /// pace of small models (sim/compute.hpp).
    Time dispatch_per_kernel;
    /// Megatron's apply_query_key_layer_scaling default: Q·Kᵀ scaled by 1 / layer number, which
    /// on eager attention's unfused softmax path is one more pass (core/model.hpp Workload).
    bool qk_layer_scaling = false;
    /// Whose cross-entropy its models run (core/kernel.hpp LossKernels): PyTorch's models call
    /// F.cross_entropy; Megatron's, Megatron-DeepSpeed's and DeepSpeed's (whose examples and
    /// published runs train Megatron's GPT: DeepSpeedExamples Megatron-LM-v1.1.5-ZeRO3,
    /// Megatron-DeepSpeed) run the vocab-parallel one.
    LossKernels loss = LossKernels::megatron;
    /// Pads the vocabulary to a multiple of vocab_multiple × tp (Workload::vocab_multiple):
    /// Megatron's --make-vocab-size-divisible-by, 128 by default, in Megatron-LM and
    /// Megatron-DeepSpeed alike (megatron/arguments.py; the tokenizer's _vocab_size_with_padding
    /// at microsoft/Megatron-DeepSpeed 1d6bce0 megatron/tokenizer/tokenizer.py:61-74). PyTorch's
    /// and DeepSpeed's models keep the model's vocabulary (1: a multiple of tp alone, so its
    /// shards split evenly).
    int vocab_multiple = 1;
    /// Runs linear layers in FP8 through Transformer Engine when asked (--fp8): Megatron core.
    bool fp8 = false;
    /// Keeps the first and last layers in 16 bits under FP8 when asked (--first-last-layers-bf16):
    /// Megatron core 0.12 and later (transformer_config.py first_last_layers_bf16, not at core_v0.11.0).
    bool fp8_first_last_bf16 = false;
    /// Keeps FP8 weights in FP8 and gathers them so when asked (--fp8-param-gather): Megatron core
    /// 0.9 and later (megatron/training/arguments.py at core_v0.9.0, not at core_v0.8.0).
    bool fp8_param_gather = false;
    /// Megatron core's fused cross-entropy (--cross-entropy-fusion): native from core 0.8
    /// (NVIDIA/Megatron-LM 7b4a6d76c9 of 2024-06-14, first in core_r0.8.0), te from core 0.12
    /// (0f60adbd30 of 2025-03-08, first in core_v0.12.0) until core 0.19 refused it
    /// (168cb15d70 of 2026-06-03, model_parallel_config.py: "disabled due to stability issues").
    bool cross_entropy_fusion_native = false;
    bool cross_entropy_fusion_te = false;
    bool cross_entropy_fusion_te_refused = false;
    /// Offloads the distributed optimizer's step to the CPU when asked (--offload cpu with zero1 and
    /// tensor, pipeline, context or expert parallelism): Megatron core's --optimizer-cpu-offload
    /// (HybridDeviceOptimizer, strategies/model_parallel.cpp), from core 0.12.
    bool optimizer_cpu_offload = false;
    /// Has ZeRO++'s quantized weight gathers (zero_quantized_weights, qwZ) and hierarchical
    /// secondary partition (zero_hpz_partition_size, hpZ): DeepSpeed 0.10 and later (PR #3784,
    /// d18aa2c of 2023-06-22, first in the v0.10.0 tag).
    bool zeropp = false;
    /// Has MiCS (mics_shard_size: runtime/zero/mics.py MiCS_Init, MiCS_Optimizer): DeepSpeed 0.9.2
    /// and later (PR #2964, 2e99f6edf of 2023-04-25, first in the v0.9.2 tag).
    bool mics = false;
    /// Has ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio, ZeRO-3 with the optimizer on the
    /// CPU): the first int(ratio × sub-groups) optimizer sub-groups stepped by CPU-Adam, the rest
    /// by FusedAdam on the GPU: DeepSpeed 0.12.3 and later (PR #4636, b1cb0dfc4 of 2023-11-06,
    /// first in the v0.12.3 tag).
    bool twin_flow = false;
    /// Has LoCo's error feedback for qgZ (zeropp_loco_param: coalesced_collectives.py
    /// all_to_all_loco_quant_reduce): DeepSpeed 0.16.2 and later (PR #6730, 1b58ba5ec of
    /// 2024-12-11, first in the v0.16.2 tag).
    bool loco = false;
    /// Has Megatron-FSDP (--strategy fsdp): Megatron core's own fully sharded data parallelism
    /// (--use-custom-fsdp from core 0.12, --use-megatron-fsdp from 0.14; strategies/fsdp.hpp).
    bool megatron_fsdp = false;
    /// The modules its selective recompute can checkpoint (Megatron core's --recompute-modules,
    /// core/model.hpp RecomputeModule): the attention core alone elsewhere and before core 0.12.
    RecomputeModules recompute_modules;
};

/// The row for `spec` ("megatron", "deepspeed@0.5"); bad_input names --framework and lists them.
Framework parse_framework(const std::string& spec);
/// The framework a plan runs by default: Megatron-LM for tensor or pipeline parallelism,
/// DeepSpeed for ZeRO stages, PyTorch otherwise (and always for Horovod's ring, parameter
/// servers and FSDP, which resolve() decides).
Framework default_framework(bool model_parallel, bool zero);
/// "megatron@0.9" — the row's name and the release it describes.
std::string describe(const Framework& f);
/// Every framework and the releases whose behaviour differs, for --help and errors.
std::vector<std::string> framework_names();

}  // namespace smol::strategies
