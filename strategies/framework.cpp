#include "strategies/framework.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace smol::strategies {

namespace {

/// A release number as integers ("0.5.10" → {0, 5, 10}); empty when the text is not one.
std::vector<int> parse_version(const std::string& text) {
    std::vector<int> out;
    std::stringstream s(text);
    std::string part;
    while (std::getline(s, part, '.')) {
        if (part.empty() || part.size() > 6 || !std::all_of(part.begin(), part.end(), ::isdigit)) return {};
        out.push_back(std::stoi(part));
    }
    return out;
}

bool at_or_before(const std::vector<int>& release, const std::vector<int>& asked) {
    return !std::lexicographical_compare(asked.begin(), asked.end(), release.begin(), release.end());
}

// Mixed-precision optimizer traffic per parameter, counted from the frameworks' step:
//   Megatron (megatron/core/optimizer/optimizer.py MixedPrecisionOptimizer.step): unscale and
//   check the fp32 main gradients (read + write, 8 B; fp16 loss scaling), the gradient norm for
//   clipping (read 4) and the clip (read + write 8), Adam over fp32 master weights, moments and
//   main gradient (read 16, write 12), the copy of the master weights into the 16-bit model
//   parameters (read 4, write 2), and zeroing the main-gradient buffer for the next step (4):
//   8 + 12 + 28 + 6 + 4 = 58 bytes.
//   DeepSpeed's FP16 optimizer and ZeRO (runtime/fp16/fused_optimizer.py, zero/stage_1_and_2.py)
//   do the same passes over their (sharded) fp32 copies: 58 bytes.
//   PyTorch AMP with fp32 parameters (torch.optim.AdamW, foreach): Adam's 28 bytes.
constexpr int kMixedPrecisionStepBytes = 58;

// Megatron-DeepSpeed's host time per kernel, calibrated on vTrain's measurements (VIA-Research/vTrain
// data/ground_truth_single.csv, copied to validation/vtrain-single-node.csv). Its 48 rows with
// tp = pp = 1, micro-batch 1 and hidden 1024 are host-bound: a GPT layer's forward, recomputed
// forward and backward for one micro-batch take the GPU about 0.6 ms of kernels (121 GFLOP),
// yet each layer and micro-batch adds 3.034 ms to the iteration (least squares of
// t = a + micro-batches · (b + layers · c) over the 48 rows; every row within 3.0 %; the same
// slope is 3.0–3.45 ms for tp 1–4 and hidden 2048, where the GPU's share differs fourfold).
// smolcluster runs 51 kernels per layer and micro-batch there (15 forward, 15 recomputed, 21
// backward: core/transformer.cpp layer_kernels, core/kernel.cpp backward_kernels), plus the
// gradient accumulation of every micro-batch after the first (the layer's 12.6 M fp16 gradients
// read twice and written: 75.6 MB, 43.6 µs at the preset's 0.85 × 2,039 GB/s, launched by
// autograd's engine without the framework's dispatch; strategies/data_parallel.hpp). So the host
// spends (3.034 − 0.044) ms / 51 = 58.6 µs per kernel, 53.6 µs beyond the driver launch of the
// A100 preset (5 µs). tests/strategies/test_framework.cpp recomputes the figure from the CSV. It
// is a property of this framework on that host (Python-level ops per kernel, the CPU), not of
// the GPU.
constexpr Time kMegatronDeepSpeedDispatch = Time::us(53.6);

struct Row {
    FrameworkName name;
    std::vector<int> release;
    Framework behaviour;
};

/// --make-vocab-size-divisible-by's default: 128 since Megatron-LM's model parallelism (abe36e2e5f
/// of 2019-07-29; megatron/arguments.py:120 at v1.0) to core 0.19 (NVIDIA/Megatron-LM d98e8a6
/// megatron/training/arguments.py:2441), and in Megatron-DeepSpeed.
constexpr int kMegatronVocabMultiple = 128;

Framework base(FrameworkName n, const char* version) {
    Framework f;
    f.name = n;
    f.version = version;
    if (n == FrameworkName::megatron || n == FrameworkName::megatron_deepspeed) f.vocab_multiple = kMegatronVocabMultiple;
    return f;
}

const std::vector<Row>& rows() {
    static const std::vector<Row> table = [] {
        std::vector<Row> t;
        {
            // torch/nn/parallel/distributed.py: gradients bucketed (bucket_cap_mb = 25) and
            // all-reduced by autograd hooks as each bucket fills, overlapping backward.
            Framework f = base(FrameworkName::pytorch, "1.0");
            f.grad_reduce = GradReduce::overlapped;
            f.zero3_gather = GatherGranularity::flat_unit;   // FSDP: one flat parameter per unit
            // Its models (HuggingFace's, torchtitan's) call F.cross_entropy on the fp32 logits.
            f.loss = LossKernels::torch;
            t.push_back({FrameworkName::pytorch, {1, 0}, f});
        }
        {
            // Megatron-LM v2.5: megatron/training.py:369 all-reduces gradients after backward (the
            // whole flattened buffer at once: after_backward_bucket 0);
            // megatron/p2p_communication.py:126 posts a step's sends and receives with
            // torch.distributed.batch_isend_irecv.
            // Query-key layer scaling is on by default (`--no-query-key-layer-scaling`, NVIDIA/
            // Megatron-LM 9acc895 of 2021-01-06, until 94a3749 of 2023-11-02 made it opt-in).
            Framework f = base(FrameworkName::megatron, "2.5");
            f.grad_reduce = GradReduce::after_backward;
            f.grad_accumulation = GradAccumulation::main_grad_hook;
            f.p2p_batched = true;
            f.optimizer_bytes_per_param = kMixedPrecisionStepBytes;
            f.qk_layer_scaling = true;
            t.push_back({FrameworkName::megatron, {1, 0}, f});
        }
        {
            // Megatron core 0.19 (megatron/core/distributed/distributed_data_parallel_config.py:18):
            // overlap_grad_reduce defaults to False, so gradients are still reduced after
            // backward unless --overlap-grad-reduce; p2p stays batched.
            Framework f = base(FrameworkName::megatron, "0.19");
            f.grad_reduce = GradReduce::after_backward;
            f.grad_accumulation = GradAccumulation::fused;   // --gradient-accumulation-fusion
            f.can_overlap_grad_reduce = true;
            f.p2p_batched = true;
            f.optimizer_bytes_per_param = kMixedPrecisionStepBytes;
            // Transformer Engine's FP8 linear layers: --fp8-format hybrid|e4m3 with --fp8-recipe
            // delayed (the default) or tensorwise (megatron/training/arguments.py, the
            // Transformer-Engine argument group).
            f.fp8 = true;
            f.version = "0.3";
            t.push_back({FrameworkName::megatron, {0, 1}, f});
            // Core 0.4 adds --overlap-param-gather (NVIDIA/Megatron-LM f048bf8c08 of 2023-11-17,
            // "Overlap all-gather in distributed optimizer", between package_info.py's MINOR = 4
            // of 304b3f7f8a and MINOR = 5 of 918d415624).
            f.can_overlap_param_gather = true;
            // and --tp-comm-overlap, Transformer Engine's userbuffers (ModelParallelConfig's
            // tp_comm_overlap: in megatron/core/model_parallel_config.py at core_v0.4.0, not at
            // core_v0.3.0).
            f.can_tp_comm_overlap = true;
            f.version = "0.7";
            t.push_back({FrameworkName::megatron, {0, 4}, f});
            // Core 0.8 adds --cross-entropy-loss-fusion (7b4a6d76c9, core/fusions/fused_cross_entropy.py).
            f.cross_entropy_fusion_native = true;
            f.version = "0.8";
            t.push_back({FrameworkName::megatron, {0, 8}, f});
            // Core 0.9 adds --overlap-param-gather-with-optimizer-step (NVIDIA/Megatron-LM
            // 4e3840535b of 2024-08-23, "Overlap param all-gather with optimizer step"; in
            // megatron/training/arguments.py at core_v0.9.0, not at core_v0.8.0).
            f.can_overlap_param_gather_with_optimizer_step = true;
            // and --fp8-param-gather (DistributedDataParallelConfig.fp8_param_gather; in
            // megatron/training/arguments.py at core_v0.9.0, not at core_v0.8.0).
            f.fp8_param_gather = true;
            f.version = "0.11";
            t.push_back({FrameworkName::megatron, {0, 9}, f});
            // Core 0.12 adds --optimizer-cpu-offload (NVIDIA/Megatron-LM 60007c93d3 of 2025-02-14,
            // "Optimizer CPU offload support": megatron/core/optimizer/cpu_offloading/
            // hybrid_optimizer.py; first in core_v0.12.0), --recompute-modules (3b141a2471 of
            // 2025-04-05: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe;
            // transformer_config.py:238 at core_r0.12.0) and --cross-entropy-fusion-impl te
            // (0f60adbd30 of 2025-03-08, first in core_v0.12.0).
            f.optimizer_cpu_offload = true;
            f.cross_entropy_fusion_te = true;
            f.megatron_fsdp = true;
            f.fp8_first_last_bf16 = true;
            f.recompute_modules.bits = static_cast<std::uint8_t>(
                static_cast<unsigned>(RecomputeModule::core_attn) | static_cast<unsigned>(RecomputeModule::mlp) |
                static_cast<unsigned>(RecomputeModule::moe_act) | static_cast<unsigned>(RecomputeModule::layernorm) |
                static_cast<unsigned>(RecomputeModule::mla_up_proj) | static_cast<unsigned>(RecomputeModule::moe));
            f.version = "0.12";
            t.push_back({FrameworkName::megatron, {0, 12}, f});
            // Core 0.14 adds shared_experts to them (transformer_config.py at core_r0.14.0).
            f.recompute_modules.bits |= static_cast<std::uint8_t>(RecomputeModule::shared_experts);
            f.version = "0.18";
            t.push_back({FrameworkName::megatron, {0, 14}, f});
            // Core 0.19 refuses --cross-entropy-fusion-impl te (168cb15d70 of 2026-06-03).
            f.cross_entropy_fusion_te = false;
            f.cross_entropy_fusion_te_refused = true;
            f.version = "0.19";
            t.push_back({FrameworkName::megatron, {0, 19}, f});
        }
        {
            // DeepSpeed v0.5: ZeRO-3 fetches a module's parameters one all-gather per tensor with a
            // torch.cuda.synchronize() each (runtime/zero/partition_parameters.py:860-882,
            // _allgather_param) and blocks (stage3.py:397 fetch_sub_module "This call is
            // blocking"); stages 0-2 reduce after backward unless overlap_comm.
            Framework f = base(FrameworkName::deepspeed, "0.5");
            f.grad_reduce = GradReduce::after_backward;
            f.can_overlap_grad_reduce = true;   // overlap_comm
            f.after_backward_bucket = 500'000'000;   // runtime/engine.py allreduce_bucket_size
            f.zero3_gather = GatherGranularity::per_tensor;
            f.zero3_blocking_fetch = true;
            f.optimizer_bytes_per_param = kMixedPrecisionStepBytes;
            t.push_back({FrameworkName::deepspeed, {0, 0}, f});
        }
        {
            // DeepSpeed v0.6 onwards: coalesced all-gathers per module, asynchronous prefetch within
            // stage3_prefetch_bucket_size; defaults in runtime/zero/config.py (v0.19.6: prefetch
            // 5e7, max_live_parameters 1e9, max_reuse_distance 1e9, param_persistence_threshold 1e5,
            // reduce_bucket_size 5e8; overlap_comm defaults to True for stage 3 only, :383).
            Framework f = base(FrameworkName::deepspeed, "0.6");
            f.grad_reduce = GradReduce::after_backward;
            f.can_overlap_grad_reduce = true;   // overlap_comm
            f.after_backward_bucket = 500'000'000;
            f.zero3_gather = GatherGranularity::per_module;
            f.zero3_blocking_fetch = false;
            f.zero3_flat_grad_buffer = true;   // stage3.py grad_partitions_flat_buffer
            f.optimizer_bytes_per_param = kMixedPrecisionStepBytes;
            t.push_back({FrameworkName::deepspeed, {0, 6}, f});
            // DeepSpeed v0.9.2 onwards: MiCS (runtime/zero/mics.py; strategies/zero.cpp build_zero3).
            f.version = "0.9.2";
            f.mics = true;
            t.push_back({FrameworkName::deepspeed, {0, 9, 2}, f});
            // DeepSpeed v0.10 onwards: ZeRO++ (runtime/zero/config.py zero_quantized_weights,
            // zero_hpz_partition_size; strategies/zero.cpp build_zero3).
            f.version = "0.10";
            f.zeropp = true;
            t.push_back({FrameworkName::deepspeed, {0, 10}, f});
            // DeepSpeed v0.12.3 onwards: Twin-Flow (runtime/zero/offload_config.py ratio;
            // stage3.py subgroup_to_device, _optimizer_step's backup FusedAdam).
            f.version = "0.12.3";
            f.twin_flow = true;
            t.push_back({FrameworkName::deepspeed, {0, 12, 3}, f});
            // DeepSpeed v0.16.2 onwards: LoCo's error feedback for qgZ (zeropp_loco_param).
            f.version = "0.16.2";
            f.loco = true;
            t.push_back({FrameworkName::deepspeed, {0, 16, 2}, f});
        }
        {
            // microsoft/Megatron-DeepSpeed: Megatron's model on DeepSpeed's engine, whose stage-0
            // gradient all-reduce runs after backward (engine.allreduce_gradients); its pipeline
            // engine sends and receives one buffer at a time (runtime/pipe/engine.py).
            Framework f = base(FrameworkName::megatron_deepspeed, "2023");
            f.grad_reduce = GradReduce::after_backward;
            f.can_overlap_grad_reduce = true;   // overlap_comm
            f.after_backward_bucket = 500'000'000;
            f.p2p_batched = false;
            f.zero3_gather = GatherGranularity::per_module;
            f.zero3_flat_grad_buffer = true;
            f.optimizer_bytes_per_param = kMixedPrecisionStepBytes;
            f.dispatch_per_kernel = kMegatronDeepSpeedDispatch;
            // `--no-query-key-layer-scaling` (megatron/arguments.py:1129-1131 at f4157be): on by default.
            f.qk_layer_scaling = true;
            f.zeropp = true;   // on the DeepSpeed of its time (0.10 and later)
            f.mics = true;
            // Its examples_deepspeed/offload_pp runs Twin-Flow (ratio 0.3, DeepSpeed 0.12.3 and later).
            f.twin_flow = true;
            t.push_back({FrameworkName::megatron_deepspeed, {0}, f});
        }
        return t;
    }();
    return table;
}

const std::vector<std::pair<std::string, FrameworkName>>& names() {
    static const std::vector<std::pair<std::string, FrameworkName>> n{{"pytorch", FrameworkName::pytorch},
                                                                       {"megatron", FrameworkName::megatron},
                                                                       {"deepspeed", FrameworkName::deepspeed},
                                                                       {"megatron-deepspeed", FrameworkName::megatron_deepspeed}};
    return n;
}

/// Megatron's releases come in two lines: Megatron-LM v1.0–v2.6 (2019–2021), then megatron-core
/// 0.x (2023–): a number of 1 or more is the first line, below 1 the second, which is later.
std::vector<int> order_key(FrameworkName n, std::vector<int> v) {
    if (n == FrameworkName::megatron && !v.empty()) v.insert(v.begin(), v[0] >= 1 ? 0 : 1);
    return v;
}

}  // namespace

const char* to_string(FrameworkName f) {
    switch (f) {
        case FrameworkName::pytorch: return "pytorch";
        case FrameworkName::megatron: return "megatron";
        case FrameworkName::deepspeed: return "deepspeed";
        case FrameworkName::megatron_deepspeed: return "megatron-deepspeed";
    }
    return "?";
}

std::vector<std::string> framework_names() {
    std::vector<std::string> out;
    for (const Row& r : rows()) out.push_back(std::string(to_string(r.name)) + "@" + r.behaviour.version);
    return out;
}

Framework parse_framework(const std::string& spec) {
    const ErrorContext where{"", "", "--framework"};
    const auto at = spec.find('@');
    const std::string name = spec.substr(0, at);
    const std::string version = at == std::string::npos ? "" : spec.substr(at + 1);
    std::vector<std::string> known;
    for (const auto& [n, _] : names()) known.push_back(n);
    const auto it = std::find_if(names().begin(), names().end(), [&](const auto& p) { return p.first == name; });
    if (it == names().end())
        fail_input("one of pytorch, megatron, deepspeed, megatron-deepspeed, optionally @VERSION",
                   "'" + spec + "'" + did_you_mean(name, known), where);
    const FrameworkName n = it->second;
    std::vector<int> asked;
    if (!version.empty()) {
        asked = parse_version(version);
        if (asked.empty()) fail_input("a release number such as 0.5 or 2.5 after '@'", "'" + version + "'", where);
    }
    // The latest row of that framework at or before the asked release (the newest without one).
    const Row* best = nullptr;
    for (const Row& r : rows()) {
        if (r.name != n) continue;
        if (!asked.empty() && !at_or_before(order_key(n, r.release), order_key(n, asked))) continue;
        if (!best || at_or_before(order_key(n, best->release), order_key(n, r.release))) best = &r;
    }
    if (!best) fail_input("a release of " + name + " smolcluster models (" + [&] {
                              std::string list;
                              for (const auto& f : framework_names())
                                  if (f.rfind(name + "@", 0) == 0) list += (list.empty() ? "" : ", ") + f;
                              return list;
                          }() + ")",
                          "'" + version + "', older than all of them", where);
    Framework f = best->behaviour;
    if (!version.empty()) f.version = version;
    return f;
}

Framework default_framework(bool model_parallel, bool zero) {
    if (model_parallel) return parse_framework("megatron");
    if (zero) return parse_framework("deepspeed");
    return parse_framework("pytorch");
}

std::string describe(const Framework& f) { return std::string(to_string(f.name)) + "@" + f.version; }

const char* to_string(CrossEntropyFusion f) {
    switch (f) {
        case CrossEntropyFusion::none: return "none";
        case CrossEntropyFusion::native: return "native";
        case CrossEntropyFusion::te: return "te";
    }
    return "?";
}

CrossEntropyFusion parse_cross_entropy_fusion(const std::string& text) {
    for (const CrossEntropyFusion f : {CrossEntropyFusion::none, CrossEntropyFusion::native, CrossEntropyFusion::te})
        if (text == to_string(f)) return f;
    fail_input("none, native (Megatron core's fused cross-entropy) or te (Transformer Engine's)", "'" + text + "'",
               {"", "", "--cross-entropy-fusion"});
}

}  // namespace smol::strategies
