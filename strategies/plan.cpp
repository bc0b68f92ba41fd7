#include "strategies/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/finetune.hpp"
#include "strategies/hybrid_cnn.hpp"
#include "strategies/model_parallel.hpp"
#include "strategies/moe.hpp"

namespace smol::strategies {

namespace {
/// "1.2e+09": op counts in messages.
std::string ops_text(std::int64_t n) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2g", static_cast<double>(n));
    return buf;
}

template <class E, std::size_t N>
E parse_name(const std::string& text, const E (&values)[N], const char* flag) {
    std::vector<std::string> names;
    for (E v : values) {
        if (text == to_string(v)) return v;
        names.emplace_back(to_string(v));
    }
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    fail_input("one of " + list, "'" + text + "'" + did_you_mean(text, names), {"", "", flag});
}
}  // namespace

const char* to_string(DataParallel s) {
    switch (s) {
        case DataParallel::ps: return "ps";
        case DataParallel::ps_async: return "ps-async";
        case DataParallel::ring: return "ring";
        case DataParallel::ddp: return "ddp";
        case DataParallel::zero1: return "zero1";
        case DataParallel::zero2: return "zero2";
        case DataParallel::zero3: return "zero3";
        case DataParallel::fsdp: return "fsdp";
        case DataParallel::hybrid_cnn: return "hybrid-cnn";
    }
    return "?";
}

DataParallel parse_data_parallel(const std::string& text) {
    // Only the strategies that are built are accepted.
    static const DataParallel implemented[] = {DataParallel::ps,    DataParallel::ps_async, DataParallel::ring,
                                               DataParallel::ddp,   DataParallel::zero1,    DataParallel::zero2,
                                               DataParallel::zero3, DataParallel::fsdp,     DataParallel::hybrid_cnn};
    return parse_name(text, implemented, "--strategy");
}

const char* to_string(PsPlacement p) { return p == PsPlacement::dedicated ? "dedicated" : "colocated"; }

PsPlacement parse_ps_placement(const std::string& text) {
    static const PsPlacement all[] = {PsPlacement::dedicated, PsPlacement::colocated};
    return parse_name(text, all, "--ps-placement");
}

const char* to_string(FsdpSharding f) {
    switch (f) {
        case FsdpSharding::full: return "full";
        case FsdpSharding::grad_op: return "grad-op";
        case FsdpSharding::hybrid: return "hybrid";
        case FsdpSharding::none: return "none";
    }
    return "?";
}

FsdpSharding parse_fsdp_sharding(const std::string& text) {
    static const FsdpSharding all[] = {FsdpSharding::full, FsdpSharding::grad_op, FsdpSharding::hybrid,
                                       FsdpSharding::none};
    return parse_name(text, all, "--fsdp-sharding");
}

const char* to_string(FsdpBackwardPrefetch p) {
    switch (p) {
        case FsdpBackwardPrefetch::pre: return "pre";
        case FsdpBackwardPrefetch::post: return "post";
        case FsdpBackwardPrefetch::none: return "none";
    }
    return "?";
}

const char* to_string(RecomputeMethod m) { return m == RecomputeMethod::block ? "block" : "uniform"; }

RecomputeMethod parse_recompute_method(const std::string& text) {
    static const RecomputeMethod all[] = {RecomputeMethod::uniform, RecomputeMethod::block};
    return parse_name(text, all, "--recompute-method");
}

FsdpBackwardPrefetch parse_fsdp_backward_prefetch(const std::string& text) {
    static const FsdpBackwardPrefetch all[] = {FsdpBackwardPrefetch::pre, FsdpBackwardPrefetch::post, FsdpBackwardPrefetch::none};
    return parse_name(text, all, "--fsdp-backward-prefetch");
}

const char* to_string(Schedule s) {
    switch (s) {
        case Schedule::gpipe: return "gpipe";
        case Schedule::one_f_one_b: return "1f1b";
        case Schedule::interleaved: return "interleaved";
        case Schedule::zb_h1: return "zb-h1";
    }
    return "?";
}

Schedule parse_schedule(const std::string& text) {
    static const Schedule all[] = {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1};
    return parse_name(text, all, "--schedule");
}

const char* to_string(Partition p) {
    switch (p) {
        case Partition::equal: return "equal";
        case Partition::balanced: return "balanced";
        case Partition::speed: return "speed";
    }
    return "?";
}

Partition parse_partition(const std::string& text) {
    static const Partition all[] = {Partition::equal, Partition::balanced, Partition::speed};
    return parse_name(text, all, "--partition");
}

const char* to_string(Offload o) {
    switch (o) {
        case Offload::none: return "none";
        case Offload::cpu: return "cpu";
        case Offload::nvme: return "nvme";
    }
    return "?";
}

Offload parse_offload(const std::string& text, const char* flag) {
    static const Offload all[] = {Offload::none, Offload::cpu, Offload::nvme};
    return parse_name(text, all, flag);
}

const char* to_string(Optimizer o) {
    switch (o) {
        case Optimizer::adam: return "adam";
        case Optimizer::adamw_8bit: return "adamw-8bit";
        case Optimizer::sgd: return "sgd";
        case Optimizer::lamb: return "lamb";
    }
    return "?";
}

Optimizer parse_optimizer(const std::string& text) {
    static const Optimizer all[] = {Optimizer::adam, Optimizer::adamw_8bit, Optimizer::sgd, Optimizer::lamb};
    return parse_name(text, all, "--optimizer");
}

namespace {
/// The weight GEMMs of a transformer block that can carry adapters, by their KernelName. The
/// first kDefaultTargets, every linear layer of the block, are the default; a mixture of
/// experts' routers only on request (Megatron-Bridge's LoRATopKRouter; PEFT's "all-linear"
/// wraps the router's nn.Linear too, ms-swift's leaves it out).
constexpr KernelName kAdapterTargets[] = {KernelName::qkv, KernelName::attn_proj, KernelName::mlp_up, KernelName::mlp_down,
                                          KernelName::router};
constexpr std::ptrdiff_t kDefaultTargets = 4;
}  // namespace

FineTune parse_finetune(const std::string& text) {
    const ErrorContext where{"", "", "--finetune"};
    const char* expected = "full, lora:RANK[:TARGETS] or qlora:RANK[:TARGETS], TARGETS a comma list of qkv, attn_proj, "
                           "mlp_up, mlp_down, router (e.g. lora:16 or qlora:64:qkv,mlp_down)";
    FineTune f;
    if (text == "full") return f;
    const auto colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    if (kind == "lora") f.kind = FineTuneKind::lora;
    else if (kind == "qlora") f.kind = FineTuneKind::qlora;
    else fail_input(expected, "'" + text + "'" + did_you_mean(kind, {"full", "lora", "qlora"}), where);
    if (colon == std::string::npos) fail_input(std::string(expected) + "; the rank is required", "'" + text + "'", where);
    const std::string rest = text.substr(colon + 1);
    const auto colon2 = rest.find(':');
    const std::string rank = rest.substr(0, colon2);
    std::size_t used = 0;
    long r = 0;
    try {
        r = std::stol(rank, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (rank.empty() || used != rank.size() || r < 1 || r > 65536)
        fail_input("an adapter rank from 1 to 65536 after '" + kind + ":'", "'" + rank + "'", where);
    f.rank = static_cast<int>(r);
    if (colon2 == std::string::npos) {
        f.targets.assign(std::begin(kAdapterTargets), std::begin(kAdapterTargets) + kDefaultTargets);
        return f;
    }
    std::stringstream s(rest.substr(colon2 + 1));
    std::string item;
    std::vector<std::string> names;
    std::string listed;
    for (KernelName k : kAdapterTargets) {
        names.emplace_back(to_string(k));
        listed += (listed.empty() ? "" : ", ") + names.back();
    }
    while (std::getline(s, item, ',')) {
        const auto it = std::find(names.begin(), names.end(), item);
        if (it == names.end()) fail_input("adapter targets among " + listed, "'" + item + "'" + did_you_mean(item, names), where);
        const KernelName k = kAdapterTargets[it - names.begin()];
        if (std::find(f.targets.begin(), f.targets.end(), k) == f.targets.end()) f.targets.push_back(k);
    }
    if (f.targets.empty()) fail_input("at least one adapter target after the rank", "'" + text + "'", where);
    return f;
}

std::string to_string(const FineTune& f) {
    if (f.kind == FineTuneKind::full) return "full";
    std::string out = std::string(f.kind == FineTuneKind::lora ? "lora:" : "qlora:") + std::to_string(f.rank);
    if (f.targets.size() != static_cast<std::size_t>(kDefaultTargets) ||
        !std::equal(f.targets.begin(), f.targets.end(), std::begin(kAdapterTargets))) {
        out += ":";
        for (std::size_t i = 0; i < f.targets.size(); ++i) out += (i ? "," : "") + std::string(smol::to_string(f.targets[i]));
    }
    return out;
}

namespace {

/// Groups of `n` consecutive global ranks (`what`: hpZ's secondary groups, MiCS's shard groups),
/// asked for with `flag`: refused with --tp, whose tensor ranks of one replica they would mix,
/// and where n does not divide the data-parallel ranks (`whole`: what DeepSpeed does about it).
void check_consecutive_groups(const Layout& l, int n, const std::string& what, const char* flag, const std::string& whole) {
    const ErrorContext at{"", "", flag};
    if (l.tp > 1)
        fail_input(what + " are consecutive global ranks; with --tp they would mix tensor ranks of one replica (not "
                       "modelled): leave out " + flag + " or --tp",
                   at);
    if (l.dp % n != 0)
        fail_input("a group size dividing the " + std::to_string(l.dp) + " data-parallel ranks (" + whole + ")",
                   std::to_string(n), at);
}

/// ZeRO++ (--zero-quantized-weights, --zero-hpz-partition-size, --zero-quantized-gradients, or the
/// same keys of a DeepSpeed config) where DeepSpeed runs it: ZeRO-3's parameter gathers
/// (partition_parameters.py, partitioned_param_coordinator.py) and gradient reduction (stage3.py)
/// on DeepSpeed 0.10 or later; hpZ's
/// groups are consecutive ranks (groups._create_zero_param_parallel_group), whole groups of the
/// data-parallel world (utils/groups.py asserts world_size % group_size == 0).
void resolve_zeropp(const topo::Cluster& cluster, const Plan& plan, Layout& l) {
    const bool qwz = plan.zero_quantized_weights, hpz = plan.zero_hpz_partition_size > 1, qgz = plan.zero_quantized_gradients;
    if (plan.zero_loco) {
        const ErrorContext at{"", "", "--zeropp-loco"};
        if (!qgz)
            fail_input("--zeropp-loco is LoCo's error feedback for qgZ's quantized gradients: give --zero-quantized-gradients "
                       "too",
                       at);
        if (!l.framework.loco)
            fail_input("--zeropp-loco: LoCo is DeepSpeed 0.16.2 and later; " + describe(l.framework) + " does not have it",
                       {"", "", "--framework"});
    }
    if (!qwz && !hpz && !qgz) return;
    const char* flag = qwz ? "--zero-quantized-weights" : hpz ? "--zero-hpz-partition-size" : "--zero-quantized-gradients";
    if (plan.strategy != DataParallel::zero3)
        fail_input(std::string(flag) + " is ZeRO++'s, which reworks ZeRO-3's parameter gathers and gradient reduction: "
                       "--strategy zero3 (not " + to_string(plan.strategy) + ")",
                   {"", "", flag});
    if (!l.framework.zeropp)
        fail_input(std::string(flag) + ": ZeRO++ is DeepSpeed 0.10 and later; " + describe(l.framework) + " does not have it",
                   {"", "", "--framework"});
    if (qwz || qgz)
        for (const topo::NodeGroup& g : cluster.groups)
            if (g.device.is_cpu)
                fail_input("ZeRO++'s quantizers are CUDA kernels (DeepSpeed's QuantizerBuilder op); the " + g.device.name +
                               " devices of group '" + g.name + "' are CPUs",
                           {"", "", qwz ? "--zero-quantized-weights" : "--zero-quantized-gradients"});
    if (qgz) {
        // stage3.py __avg_scatter_grads takes all_to_all_quant_reduce when the world spans more
        // than one node of device_count() ranks (world // device_count > 1), else
        // reduce_scatter_coalesced; groups.py _get_local_all_to_all_group's groups are global
        // ranks, by node (every node the same size; a zero3 world is every device).
        const ErrorContext at{"", "", "--zero-quantized-gradients"};
        if (l.tp > 1)
            fail_input("qgZ's all-to-all groups are global ranks (a node's, and one rank of each node); with --tp they "
                       "would mix tensor ranks (not modelled): leave out --zero-quantized-gradients or --tp",
                       at);
        const int per_node = cluster.groups.front().devices_per_node;
        for (const topo::NodeGroup& g : cluster.groups)
            if (g.devices_per_node != per_node)
                fail_input("qgZ groups ranks by node (DeepSpeed's device_count()): every node the same size, not " +
                               std::to_string(per_node) + " and " + std::to_string(g.devices_per_node) + " devices",
                           at);
        if (l.dp / per_node > 1) l.qgz_node_ranks = per_node;
    }
    if (!hpz) return;
    const ErrorContext at{"", "", "--zero-hpz-partition-size"};
    check_consecutive_groups(l, plan.zero_hpz_partition_size, "hpZ's secondary groups", "--zero-hpz-partition-size",
                             "DeepSpeed groups them into whole groups of consecutive ranks");
    if (l.param_offload != Offload::none)
        fail_input("hpZ with offloaded parameters keeps its secondary copy where they live (not modelled): leave out "
                   "--zero-hpz-partition-size or the parameter offload",
                   at);
}

/// MiCS (--mics-shard-size, or a DeepSpeed config's mics_shard_size) where DeepSpeed runs it:
/// ZeRO-3 (MiCS_Init, MiCS_Optimizer in runtime/zero/mics.py) from 0.9.2, its shard groups
/// consecutive ranks of the whole world (mics_utils.py _generate_mics_config:
/// np.arange(world_size).reshape(-1, shard_size), pp_size 1) and its replicate groups the same
/// position in every shard group.
void resolve_mics(const topo::Cluster& cluster, const Plan& plan, Layout& l) {
    const int n = plan.zero_mics_shard_size;
    if (n <= 0) {
        if (plan.zero_mics_hierarchical)
            fail_input("--mics-hierarchical-gather is MiCS's two-level gather: give --mics-shard-size too (the engine "
                       "takes MiCS only with mics_shard_size above 0)",
                       {"", "", "--mics-hierarchical-gather"});
        return;
    }
    const ErrorContext at{"", "", "--mics-shard-size"};
    if (plan.strategy != DataParallel::zero3)
        fail_input("--mics-shard-size is MiCS's, DeepSpeed's ZeRO-3 sharded over groups of ranks: --strategy zero3 (not " +
                       std::string(to_string(plan.strategy)) + ")",
                   at);
    if (!l.framework.mics)
        fail_input("--mics-shard-size: MiCS is DeepSpeed 0.9.2 and later; " + describe(l.framework) + " does not have it",
                   {"", "", "--framework"});
    check_consecutive_groups(l, n, "MiCS's shard groups (mics_utils.py: the whole world cut in order, pipeline size 1)",
                             "--mics-shard-size", "MiCS asserts world_size % shard_size == 0");
    if (l.param_offload != Offload::none || l.optimizer_offload != Offload::none)
        fail_input("MiCS keeps the gradient partitions on the device: with them on the host its all-reduce across "
                   "shard groups raises \"Local sharding has no support for CPU offloading\" (mics.py "
                   "allreduce_mics_shard_grads); leave out --mics-shard-size or the offload",
                   at);
    if (plan.zero_quantized_weights || plan.zero_hpz_partition_size > 1 || plan.zero_quantized_gradients)
        fail_input("MiCS with ZeRO++ (qwZ, hpZ, qgZ) is not modelled: MiCS_Init replaces ZeRO-3's gathers with its own; "
                   "leave out --mics-shard-size or the ZeRO++ flags",
                   at);
    if (plan.optimizer == Optimizer::lamb)
        fail_input("--optimizer lamb with MiCS is not modelled (its per-layer norms would combine over a shard group, "
                   "not every rank): use adam or sgd, or leave out --mics-shard-size",
                   at);
    if (plan.zero_mics_hierarchical) {
        // mics_utils.py: span_nodes = shard_size // device_count(), asserted above 1 ("sharding
        // spans on single node, no need for hierarchy allgather") and dividing the group.
        const int per_node = cluster.groups.front().devices_per_node, span = n / per_node;
        if (span <= 1 || n % span != 0)
            fail_input("MiCS's hierarchical gather needs a shard group over several nodes (DeepSpeed asserts \"sharding "
                           "spans on single node, no need for hierarchy allgather\"): --mics-shard-size a multiple of the " +
                           std::to_string(per_node) + " devices of a node, above it",
                       std::to_string(n), {"", "", "--mics-hierarchical-gather"});
        l.mics_node_ranks = n / span;
    }
}

/// FP8 linear layers (--fp8) where they run: Transformer Engine under Megatron core, a
/// transformer's linears in a 16-bit run, on devices with FP8 tensor cores, trained in full.
void resolve_fp8(const Model& model, const topo::Cluster& cluster, const Plan& plan, Layout& l) {
    if (plan.fp8 == Fp8Recipe::none) return;
    const ErrorContext at{"", "", "--fp8"};
    if (!model.is_transformer())
        fail_input("--fp8 runs a transformer's linear layers in FP8 (Transformer Engine); " + model.name() +
                       " is a layer list (CNN / MLP)",
                   at);
    if (!l.framework.fp8)
        fail_input("--fp8 is modelled as Megatron core runs it, with Transformer Engine's FP8 linear layers (--framework "
                   "megatron); " + describe(l.framework) + " has no FP8 path here",
                   at);
    if (l.dtype == DType::fp32)
        fail_input("--fp8 casts the linear layers of a 16-bit run to FP8 (Transformer Engine keeps 16-bit weights and "
                   "activations beside them); give --dtype bf16 or fp16, not fp32",
                   at);
    for (const auto& g : cluster.groups)
        if (!g.device.fp8_peak)
            fail_input("the " + g.device.name + " devices of group '" + g.name + "' have no FP8 peak: FP8 tensor cores "
                       "came with Ada and Hopper (compute capability 8.9 and 9.0), and a cluster file gives their rate "
                       "as \"peak\": {\"fp8\": …}",
                       at);
    if (plan.finetune.kind != FineTuneKind::full)
        fail_input("--fp8 is modelled for full training; --finetune " + to_string(plan.finetune) +
                       " trains 16-bit adapters on frozen weights",
                   at);
    l.fp8 = plan.fp8;
}

/// --first-last-layers-bf16 and its counts, as Megatron core checks them (NVIDIA/Megatron-LM
/// d98e8a6 megatron/core/transformer/transformer_config.py:1527-1555): under FP8, not with delayed
/// scaling, each count between 0 and the layers of a pipeline stage.
void resolve_fp8_bf16_layers(const Model& model, const Plan& plan, Layout& l) {
    if (!plan.first_last_layers_bf16) {
        if (plan.num_layers_at_start_in_bf16 || plan.num_layers_at_end_in_bf16)
            fail_input("has no effect without --first-last-layers-bf16, which it counts the layers of",
                       {"", "", plan.num_layers_at_start_in_bf16 ? "--num-layers-at-start-in-bf16" : "--num-layers-at-end-in-bf16"});
        return;
    }
    const ErrorContext at{"", "", "--first-last-layers-bf16"};
    if (l.fp8 == Fp8Recipe::none)
        fail_input("has no effect without --fp8: it keeps the first and last layers of an FP8 run in 16 bits", at);
    if (!l.framework.fp8_first_last_bf16)
        fail_input(describe(l.framework) + " has no --first-last-layers-bf16 (Megatron core 0.12 and later)", at);
    if (l.fp8 == Fp8Recipe::delayed)
        fail_input("Megatron refuses it with delayed scaling (transformer_config.py: \"Delayed scaling does not support "
                   "first / last layer in BF16.\"); give --fp8 tensorwise",
                   at);
    const int per_stage = model.shape().layers / l.pp;
    const auto count = [&](const std::optional<int>& n, const char* flag) {
        const int v = n.value_or(1);
        if (v < 0 || v > per_stage)
            fail_input("must be between 0 and the layers of a pipeline stage (" + std::to_string(per_stage) + "), found " +
                           std::to_string(v),
                       {"", "", flag});
        return v;
    };
    l.fp8_bf16_first = count(plan.num_layers_at_start_in_bf16, "--num-layers-at-start-in-bf16");
    l.fp8_bf16_last = count(plan.num_layers_at_end_in_bf16, "--num-layers-at-end-in-bf16");
}

/// --fp8-param-gather as Megatron core allows it (NVIDIA/Megatron-LM d98e8a6
/// megatron/training/arguments.py:1095-1097: the distributed optimizer, torch FSDP2 or Megatron-FSDP;
/// :1889-1892: with --optimizer-cpu-offload only under delayed scaling), of what is modelled here:
/// zero1 or Megatron-FSDP (--fp8 runs on Megatron core alone, so fsdp here is Megatron's; its
/// pipeline stages and experts are refused by check_megatron_fsdp) without --cp, the optimizer on
/// the device.
void resolve_fp8_param_gather(const Plan& plan, Layout& l) {
    if (!plan.fp8_param_gather) return;
    const ErrorContext at{"", "", "--fp8-param-gather"};
    if (l.fp8 == Fp8Recipe::none)
        fail_input("has no effect without --fp8: it keeps the FP8 layers' weights in FP8 and gathers them so", at);
    if (!l.framework.fp8_param_gather)
        fail_input(describe(l.framework) + " has no --fp8-param-gather (Megatron core 0.9 and later)", at);
    if (plan.strategy == DataParallel::fsdp && l.cp > 1)
        fail_input("with Megatron-FSDP under context parallelism (--cp) is not modelled yet; use --strategy zero1 (the "
                   "distributed optimizer) there",
                   at);
    if (plan.strategy != DataParallel::zero1 && plan.strategy != DataParallel::fsdp)
        fail_input(std::string("Megatron asserts \"--fp8-param-gather only supported with distributed optimizer, torch "
                               "fsdp2, megatron fsdp, or inference mode\" (megatron/training/arguments.py); give --strategy "
                               "zero1 or fsdp (Megatron-FSDP), not ") +
                       to_string(plan.strategy),
                   at);
    if (l.optimizer_offload != Offload::none)
        fail_input("with the optimizer on the host is not modelled (Megatron allows it under --fp8 delayed only, "
                   "arguments.py: \"When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in "
                   "conjunction with `--fp8-recipe delayed`\"); leave out one of them",
                   at);
    l.fp8_param_gather = true;
}

/// Megatron core's fused cross-entropy (--cross-entropy-fusion) where the framework has it: the
/// head's loss kernels become the fused function's (Layout::framework.loss).
void resolve_cross_entropy_fusion(const Model& model, const Plan& plan, Layout& l) {
    const CrossEntropyFusion f = plan.cross_entropy_fusion;
    if (f == CrossEntropyFusion::none) return;
    const ErrorContext at{"", "", "--cross-entropy-fusion"};
    if (!model.is_transformer())
        fail_input(std::string("--cross-entropy-fusion ") + to_string(f) + " fuses a language model's vocabulary-parallel "
                       "cross-entropy; " + model.name() + " is a layer list (CNN / MLP)",
                   at);
    if (const std::string why = cross_entropy_fusion_refusal(l.framework, f); !why.empty()) fail_input(why, at);
    l.framework.loss = f == CrossEntropyFusion::te ? LossKernels::te : LossKernels::megatron_fused;
}

/// Megatron's --make-vocab-size-divisible-by where the framework pads the vocabulary.
void resolve_vocab_multiple(const Model& model, const Plan& plan, Layout& l) {
    if (!plan.vocab_multiple) return;
    check_vocab_multiple(model, *plan.vocab_multiple);
    if (!pads_vocabulary(l.framework))
        fail_input("--make-vocab-size-divisible-by is Megatron's (--framework megatron or megatron-deepspeed); " +
                       describe(l.framework) + " trains the model's vocabulary of " +
                       std::to_string(model.shape().vocab) + " as it is (edit the model's vocab to pad it)",
                   {"", "", "--make-vocab-size-divisible-by"});
    l.framework.vocab_multiple = *plan.vocab_multiple;
}

}  // namespace

void check_vocab_multiple(const Model& model, int multiple) {
    const ErrorContext at{"", "", "--make-vocab-size-divisible-by"};
    if (multiple < 1 || multiple > kMaxVocabMultiple)
        fail_input("a whole number from 1 to " + std::to_string(kMaxVocabMultiple), std::to_string(multiple), at);
    if (!model.is_transformer())
        fail_input("it pads a language model's vocabulary; " + model.name() +
                       " is a layer list (CNN / MLP)",
                   at);
}

bool pads_vocabulary(const Framework& framework) {
    return framework.name == FrameworkName::megatron || framework.name == FrameworkName::megatron_deepspeed;
}

std::string cross_entropy_fusion_refusal(const Framework& framework, CrossEntropyFusion f) {
    if (f == CrossEntropyFusion::none) return {};
    if (framework.name != FrameworkName::megatron || !framework.cross_entropy_fusion_native)
        return "--cross-entropy-fusion is Megatron core's --cross-entropy-loss-fusion (core 0.8 and later: --framework "
               "megatron); " + describe(framework) + " has no fused cross-entropy";
    if (f == CrossEntropyFusion::te && framework.cross_entropy_fusion_te_refused)
        return "Megatron core 0.19 and later refuse --cross-entropy-fusion-impl te (\"Transformer Engine cross entropy loss "
               "fusion is disabled due to stability issues\"); " + describe(framework) +
               " runs native, or give --framework megatron@0.18 for Transformer Engine's";
    if (f == CrossEntropyFusion::te && !framework.cross_entropy_fusion_te)
        return "--cross-entropy-fusion te is Megatron core's --cross-entropy-fusion-impl te (core 0.12 to 0.18); " +
               describe(framework) + " has the native fusion alone";
    return {};
}

std::string recompute_module_idle(const Model& model, RecomputeModule module) {
    if (!model.is_transformer()) return "a layer list (CNN / MLP) has no transformer layers";
    const TransformerShape& m = model.shape();
    bool dense = false, moe = false;
    for (int i = 0; i < m.layers; ++i) (m.moe_layer(i) ? moe : dense) = true;
    const bool mla = m.mla.kv_lora_rank > 0;
    switch (module) {
        case RecomputeModule::core_attn: return {};
        case RecomputeModule::mlp:
            return dense ? "" : "every layer is an MoE layer (mlp redoes a dense layer's MLP; moe_act and shared_experts "
                                "are an MoE layer's)";
        case RecomputeModule::moe_act:
        case RecomputeModule::moe: return moe ? "" : "it has no MoE layers";
        case RecomputeModule::shared_experts: return moe && m.moe.shared_experts > 0 ? "" : "it has no shared experts";
        // transformer_config.py:1969.
        case RecomputeModule::mla_up_proj:
            return mla ? "" : "it has no multi-latent attention (Megatron: \"mla_up_proj in recompute_modules is only "
                              "supported with multi_latent_attention\")";
        case RecomputeModule::layernorm:
            return moe || mla ? "" : "Transformer Engine's layer spec fuses each of its norms into the linear layer after it "
                                     "(TELayerNormColumnParallelLinear); an MoE layer's pre-MLP norm and MLA's input norm "
                                     "are the ones that are modules of their own";
    }
    return {};
}

std::vector<RecomputeModules> recompute_module_tiers(const Model& model, const Framework& framework) {
    RecomputeModules all{0};
    for (const RecomputeModule module : modules_in(framework.recompute_modules))
        if (recompute_module_idle(model, module).empty()) all.bits |= static_cast<std::uint8_t>(module);
    const auto without = [&](std::initializer_list<RecomputeModule> drop) {
        RecomputeModules m = all;
        for (RecomputeModule d : drop) m.bits &= static_cast<std::uint8_t>(~static_cast<unsigned>(d));
        return m;
    };
    std::vector<RecomputeModules> out;
    for (const RecomputeModules m : {without({RecomputeModule::moe}), without({RecomputeModule::moe_act, RecomputeModule::shared_experts})})
        // Nothing, or the attention core alone (plain selective recompute), is no tier.
        if (m.bits != 0 && !(m == RecomputeModules{}) && std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
    return out;
}

namespace {

/// --recompute-method and --recompute-num-layers as Megatron reads them (megatron/training/
/// arguments.py: both with --recompute-granularity full; NVIDIA/Megatron-LM d98e8a6
/// megatron/core/recompute.py checkpointed_forward): uniform recomputes
/// every layer (in groups of N, each from the group's input), block the first N layers of each
/// pipeline chunk and no other (megatron/core/recompute.py:167-181, per TransformerBlock, a
/// virtual stage's layers). Modelled: uniform in groups of one (what --recompute full is) and
/// block where the chunks are known before the layers are priced: Megatron's equal partition or
/// --stage-layers.
void resolve_recompute_method(const Model& model, const Plan& plan, Layout& l) {
    if (!plan.recompute_method && !plan.recompute_num_layers) return;
    const char* flag = plan.recompute_method ? "--recompute-method" : "--recompute-num-layers";
    if (plan.recompute != Recompute::full)
        fail_input(std::string("is Megatron's, with --recompute-granularity full: give --recompute full, not ") +
                       to_string(plan.recompute),
                   {"", "", flag});
    if (l.framework.name != FrameworkName::megatron && l.framework.name != FrameworkName::megatron_deepspeed)
        fail_input("is Megatron's (--framework megatron or megatron-deepspeed); " + describe(l.framework) +
                       " recomputes every layer under --recompute full",
                   {"", "", flag});
    if (!plan.recompute_method)
        fail_input("needs --recompute-method (uniform or block), as Megatron does", {"", "", "--recompute-num-layers"});
    const int n = plan.recompute_num_layers.value_or(1);
    const ErrorContext at{"", "", "--recompute-num-layers"};
    if (*plan.recompute_method == RecomputeMethod::uniform) {
        if (n != 1)
            fail_input("with --recompute-method uniform is modelled for groups of one layer, each recomputed from its own "
                           "input (the FLOPs of any group size; a group of " + std::to_string(n) +
                           " keeps fewer checkpoints and holds its layers' activations while it recomputes, not modelled)",
                       at);
        return;
    }
    if (!model.is_transformer())
        fail_input("--recompute-method block picks transformer layers to recompute; " + model.name() +
                       " is a layer list (CNN / MLP)",
                   {"", "", "--recompute-method"});
    const int layers = model.shape().layers;
    // The chunks in layer order (Megatron's virtual stage v of stage s is chunk v·pp + s).
    std::vector<int> chunks = plan.stage_layers;
    if (chunks.empty()) {
        if (plan.partition && *plan.partition != Partition::equal)
            fail_input("--recompute-method block recomputes the first layers of each pipeline chunk, which --partition " +
                           std::string(to_string(*plan.partition)) + " cuts by the layers' costs, recompute included; give "
                           "the chunks with --stage-layers, or Megatron's equal partition",
                       {"", "", "--recompute-method"});
        const int n_chunks = l.pp * (plan.schedule == Schedule::interleaved ? std::max(1, plan.virtual_stages) : 1);
        if (n_chunks < 1 || layers % n_chunks != 0) return;   // the partition refuses the plan, saying why
        chunks.assign(static_cast<std::size_t>(n_chunks), layers / n_chunks);
    }
    if (std::accumulate(chunks.begin(), chunks.end(), 0LL) != layers ||
        std::any_of(chunks.begin(), chunks.end(), [](int c) { return c < 0; }))
        return;   // --stage-layers refuses it, saying why
    const int widest = *std::max_element(chunks.begin(), chunks.end());
    if (n < 0 || n > widest)
        fail_input("must be between 0 and the layers of a pipeline chunk (" + std::to_string(widest) + "), found " +
                       std::to_string(n),
                   at);
    l.recomputed_layers.assign(static_cast<std::size_t>(layers), false);
    int first = 0;
    for (const int size : chunks) {
        for (int i = 0; i < std::min(n, size); ++i) l.recomputed_layers[static_cast<std::size_t>(first + i)] = true;
        first += size;
    }
}

/// --recompute-modules against the recompute level, the framework, the model and the plan. Its
/// default (core_attn) is what --recompute selective means everywhere; the other modules are
/// Megatron core's (framework.hpp), and each must have something to redo in this model.
void resolve_recompute_modules(const Model& model, const Plan& plan, const Layout& l) {
    const RecomputeModules modules = plan.recompute_modules;
    if (modules == RecomputeModules{}) return;
    const ErrorContext at{"", "", "--recompute-modules"};
    if (plan.recompute != Recompute::selective)
        fail_input("--recompute-modules picks what selective recompute redoes: it needs --recompute selective, not " +
                       std::string(to_string(plan.recompute)),
                   at);
    const RecomputeModules missing{static_cast<std::uint8_t>(modules.bits & ~l.framework.recompute_modules.bits)};
    if (missing.bits != 0)
        fail_input(to_string(missing) + " is a module of Megatron core's --recompute-modules (core 0.12 and later; "
                       "shared_experts 0.14 and later); " + describe(l.framework) + " recomputes " +
                       to_string(l.framework.recompute_modules) + " alone",
                   at);
    // Layer lists were refused selective recompute already.
    for (const RecomputeModule module : modules_in(modules))
        if (const std::string why = recompute_module_idle(model, module); !why.empty())
            fail_input(to_string(RecomputeModules{static_cast<std::uint8_t>(module)}) + " has nothing to recompute in " +
                           model.name() + ": " + why,
                       at);
    // transformer_config.py:2000-2005.
    if (l.fp8 == Fp8Recipe::delayed && (modules.has(RecomputeModule::moe_act) || modules.has(RecomputeModule::layernorm)))
        fail_input("Megatron core refuses moe_act and layernorm recompute with FP8's delayed scaling (\"Delayed scaling "
                   "does not support moe_act and layernorm recompute for fp8\"); use --fp8 tensorwise",
                   at);
    if (modules.bits == static_cast<std::uint8_t>(RecomputeModule::core_attn)) return;
    if (modules.has(RecomputeModule::moe) && plan.finetune.kind != FineTuneKind::full)
        fail_input("moe with --finetune " + to_string(plan.finetune) + " is not modelled (the adapters' kernels in the "
                   "recomputed MoE layer); use moe_act and layernorm, or --recompute full",
                   at);
    // Megatron core runs ddp and zero1 (its DDP and distributed optimizer) alone: the recomputed
    // modules' weights are on every rank, nothing to gather again.
}

/// Where the strategy keeps its model states (--offload, --offload-params, --offload-optimizer),
/// what is trained (--finetune) and with which optimizer (--optimizer), checked against the
/// strategy, the model and the cluster.
void resolve_training(const Model& model, const topo::Cluster& cluster, const Plan& plan, Layout& l) {
    const ErrorContext offload_flag{"", "", "--offload"};
    const bool given = plan.offload != Offload::none || plan.offload_params != Offload::none ||
                       plan.offload_optimizer != Offload::none;
    const char* flag = plan.offload != Offload::none          ? "--offload"
                       : plan.offload_optimizer != Offload::none ? "--offload-optimizer"
                                                                 : "--offload-params";
    // With tensor, pipeline, context or expert parallelism the model-parallel builder runs
    // Megatron's layers: offload is Megatron core's --optimizer-cpu-offload there
    // (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py, with --optimizer-offload-fraction
    // 1 and --use-precision-aware-optimizer, which megatron/training/arguments.py requires with it).
    const bool layered = (l.tp > 1 || l.pp > 1 || l.cp > 1 || l.ep > 1) && !sharded_with_tp(plan, l);
    if (given && layered && plan.strategy == DataParallel::fsdp) {
        // torchtitan's --training.enable_cpu_offload: FSDP2's CPUOffloadPolicy, with pipeline
        // stages too (pytorch/torchtitan#624, "Enable FSDP2 cpu offloading", run with and without
        // pp); modelled under pipeline stages of a dense model in full training.
        if (l.pp < 2 || l.ep > 1 || plan.finetune.kind != FineTuneKind::full)
            fail_input(std::string(flag) + " with fsdp is modelled for data parallelism, with --tp, and under pipeline "
                           "stages (--pp 2 or more) of a dense model in full training (torchtitan's CPU offload); not with " +
                           (l.pp < 2 ? "--cp or --ep alone" : l.ep > 1 ? "--ep" : "--finetune"),
                       {"", "", flag});
        if (plan.offload_params != Offload::none || plan.offload_optimizer != Offload::none || plan.offload == Offload::nvme)
            fail_input("fsdp offloads with --offload cpu (PyTorch's CPUOffloadPolicy moves parameters, gradients and the "
                       "optimizer step to the host together); --offload-params, --offload-optimizer and NVMe are DeepSpeed's",
                       {"", "", flag});
        l.param_offload = l.optimizer_offload = Offload::cpu;
    } else if (given && layered) {
        if (plan.strategy != DataParallel::zero1 || !l.framework.optimizer_cpu_offload)
            fail_input(std::string(flag) + " with tensor, pipeline, context or expert parallelism is Megatron core's "
                           "--optimizer-cpu-offload (core 0.12 and later): --strategy zero1 (its distributed optimizer) "
                           "under --framework megatron, not " + to_string(plan.strategy) + " under " + describe(l.framework) +
                           "; other offload is modelled for data parallelism (ZeRO-Offload and ZeRO-Infinity as DeepSpeed "
                           "runs them, FSDP's CPU offload)",
                       {"", "", flag});
        if (plan.offload_params != Offload::none)
            fail_input("Megatron's --optimizer-cpu-offload moves the optimizer to the CPU; the parameters stay on the "
                       "device (--offload-params is DeepSpeed's ZeRO-3 and FSDP's)",
                       {"", "", "--offload-params"});
        l.optimizer_offload = plan.offload_optimizer != Offload::none ? plan.offload_optimizer : plan.offload;
        if (l.optimizer_offload == Offload::nvme)
            fail_input("Megatron's --optimizer-cpu-offload keeps the optimizer in CPU memory; NVMe offload is "
                       "ZeRO-Infinity's (--strategy zero3, data parallelism)",
                       {"", "", flag});
    } else if (given) {
        switch (plan.strategy) {
            case DataParallel::zero1:
            case DataParallel::zero2:
                // runtime/zero/offload_config.py: "offload_param … Valid only with stage 3".
                if (plan.offload_params != Offload::none)
                    fail_input("--offload-params needs --strategy zero3: DeepSpeed offloads parameters in ZeRO stage 3 "
                               "only (offload_param is valid only with stage 3); zero1 and zero2 offload the optimizer "
                               "(--offload-optimizer, or --offload)",
                               {"", "", "--offload-params"});
                l.optimizer_offload = plan.offload_optimizer != Offload::none ? plan.offload_optimizer : plan.offload;
                // stage_1_and_2.py:186 treats every offload device as CPU memory.
                if (l.optimizer_offload == Offload::nvme)
                    fail_input("ZeRO stages 1 and 2 keep an offloaded optimizer in CPU memory whatever the device "
                               "(DeepSpeed's stage_1_and_2.py offloads to the CPU for any offload_optimizer device); "
                               "NVMe offload is ZeRO-Infinity's: --strategy zero3",
                               {"", "", flag});
                break;
            case DataParallel::zero3:
                l.param_offload = plan.offload_params != Offload::none ? plan.offload_params : plan.offload;
                l.optimizer_offload = plan.offload_optimizer != Offload::none ? plan.offload_optimizer : plan.offload;
                if (l.param_offload != Offload::none && l.optimizer_offload == Offload::none)
                    fail_input("--offload-params " + std::string(to_string(l.param_offload)) +
                                   " needs the optimizer offloaded too (--offload-optimizer cpu or nvme): smolcluster "
                                   "models parameter offload as ZeRO-Infinity runs it, the step on the host writing the "
                                   "updated 16-bit parameters where they live",
                               {"", "", "--offload-params"});
                break;
            case DataParallel::fsdp:
                if (plan.offload_params != Offload::none || plan.offload_optimizer != Offload::none)
                    fail_input("fsdp offloads with --offload cpu (PyTorch's CPUOffload(offload_params=True) moves "
                                   "parameters, gradients and the optimizer step to the host together); "
                                   "--offload-params and --offload-optimizer are DeepSpeed's",
                               {"", "", flag});
                if (plan.offload == Offload::nvme)
                    fail_input("FSDP's CPUOffload keeps parameters in CPU memory only; NVMe offload is ZeRO-Infinity's "
                               "(--strategy zero3 --offload nvme)",
                               offload_flag);
                l.param_offload = l.optimizer_offload = Offload::cpu;
                break;
            default:
                fail_input(std::string(flag) + " needs a strategy that shards model states: --strategy zero1, zero2, "
                               "zero3 or fsdp (" + to_string(plan.strategy) + " keeps every model state on the device)",
                           {"", "", flag});
        }
    }
    if (plan.overlap_cpu_optimizer_d2h_h2d && !(given && layered))
        fail_input("--overlap-cpu-optimizer-d2h-h2d is Megatron's, with its --optimizer-cpu-offload: it needs --offload cpu "
                   "with --strategy zero1 and --tp, --pp, --cp or --ep",
                   {"", "", "--overlap-cpu-optimizer-d2h-h2d"});
    if (const auto f = plan.optimizer_offload_fraction) {
        const ErrorContext at{"", "", "--optimizer-offload-fraction"};
        if (given && layered) {
            if (!(*f > 0 && *f <= 1))
                fail_input("a share of the optimizer above 0 and at most 1 (Megatron's --optimizer-offload-fraction)", number_text(*f), at);
        } else {
            // DeepSpeed's Twin-Flow (ZeRO-Offload++): runtime/zero/config.py offload_ratio_check
            // asserts stage 3 ("Partial offloading only supported for ZeRO Stage 3"); stage3.py
            // splits the optimizer's sub-groups between CPU-Adam and a FusedAdam on the device.
            if (plan.strategy != DataParallel::zero3 || l.optimizer_offload == Offload::none)
                fail_input("--optimizer-offload-fraction is Megatron's (--offload cpu with --strategy zero1 and --tp, --pp, "
                           "--cp or --ep) or DeepSpeed's Twin-Flow (offload_optimizer.ratio: --strategy zero3 with "
                           "--offload-optimizer cpu); this plan has neither",
                           at);
            if (!(*f >= 0 && *f <= 1))
                fail_input("a share of the optimizer from 0 to 1 (DeepSpeed's offload_optimizer.ratio)", number_text(*f), at);
            if (!l.framework.twin_flow)
                fail_input("--optimizer-offload-fraction with zero3 is DeepSpeed's Twin-Flow (offload_optimizer.ratio), in "
                           "DeepSpeed 0.12.3 and later; " + describe(l.framework) + " does not have it",
                           {"", "", "--framework"});
            if (l.optimizer_offload == Offload::nvme)
                fail_input("Twin-Flow splits an optimizer offloaded to the CPU; with offload_optimizer nvme DeepSpeed's "
                           "swapper steps every sub-group on the CPU (stage3.py _swappable_optimizer_subgroup): use "
                           "--offload-optimizer cpu, or leave out --optimizer-offload-fraction",
                           at);
        }
    }
    if (given) {
        if (l.param_offload == Offload::nvme || l.optimizer_offload == Offload::nvme)
            for (const auto& g : cluster.groups)
                if (!g.nvme_capacity)
                    fail_input("NVMe offload needs an NVMe drive on every node, and node group '" + g.name + "' of " +
                                   cluster.name + " has none (give its node group an \"nvme\" object in a cluster "
                                   "file, or offload to cpu)",
                               {"", "", flag});
        // Unified memory (Jetson, CPU boards): the device's memory is the host's, so moving a
        // state to the host moves no bytes and frees nothing. NVMe is another pool.
        bool unified = true;
        for (const auto& g : cluster.groups) unified = unified && (g.device.unified_memory || g.device.is_cpu);
        l.unified_memory = unified;
        if (unified) {
            if (l.param_offload == Offload::cpu) l.param_offload = Offload::none, l.offload_ignored = true;
            if (l.optimizer_offload == Offload::cpu) l.optimizer_offload = Offload::none, l.offload_ignored = true;
        }
    }
    if (plan.offload_activations != Offload::none) {
        // deepspeed/runtime/activation_checkpointing/checkpointing.py (CPU_CHECKPOINT): the
        // checkpointed inputs of each layer go to CPU memory in forward and come back in backward.
        const ErrorContext act{"", "", "--offload-activations"};
        if (plan.offload_activations != Offload::cpu)
            fail_input("DeepSpeed's activation checkpointing offloads checkpoints to CPU memory only (cpu_checkpointing); "
                       "use --offload-activations cpu",
                       act);
        if (plan.recompute != Recompute::full)
            fail_input("--offload-activations moves each layer's activation checkpoint: it needs --recompute full", act);
        const bool zero = plan.strategy == DataParallel::zero1 || plan.strategy == DataParallel::zero2 ||
                          plan.strategy == DataParallel::zero3;
        if (!zero || l.tp > 1 || l.pp > 1 || l.ep > 1)
            fail_input("--offload-activations is DeepSpeed's activation checkpointing: it needs --strategy zero1, zero2 or "
                       "zero3 (tp = pp = ep = 1)",
                       act);
        bool unified = true;
        for (const auto& g : cluster.groups) unified = unified && (g.device.unified_memory || g.device.is_cpu);
        if (unified) l.offload_ignored = true;
        else l.activation_offload = true;
        // The checkpoints' copies back and the parameter partitions' fetches would share the
        // host-to-device copy queue in an order the graph cannot keep (a forward fetch behind a
        // backward copy): refused rather than built wrong.
        if (l.activation_offload && l.param_offload != Offload::none)
            fail_input("--offload-activations with the parameters offloaded (" + std::string(to_string(l.param_offload)) +
                           ", ZeRO-Infinity) is not modelled yet; offload the optimizer only (--offload-optimizer) or leave "
                           "the activations on the device",
                       act);
    }
    if (plan.delayed_update) {
        // Ren et al. 2021 §5.2: the one-step delayed parameter update overlaps the CPU's optimizer
        // step with the GPU's next forward and backward, in ZeRO-Offload (stage 2 with the
        // optimizer in host memory).
        const bool zero12 = plan.strategy == DataParallel::zero1 || plan.strategy == DataParallel::zero2;
        if (!zero12 || l.optimizer_offload != Offload::cpu)
            fail_input("--delayed-update is ZeRO-Offload's one-step delayed parameter update: it needs --strategy zero2 "
                       "(or zero1) with the optimizer offloaded to the CPU (--offload cpu)" +
                           std::string(l.offload_ignored ? "; on unified memory there is nothing to overlap" : ""),
                       {"", "", "--delayed-update"});
        l.delayed_update = true;
    }
    l.finetune = plan.finetune;
    if (plan.finetune.kind != FineTuneKind::full) {
        const ErrorContext ft{"", "", "--finetune"};
        if (!model.is_transformer())
            fail_input("--finetune " + to_string(plan.finetune) + " puts adapters on the weight GEMMs of transformer "
                           "blocks, and " + model.name() + " is a layer list; fine-tune it in full",
                       ft);
        const auto& targets = plan.finetune.targets;
        if (std::find(targets.begin(), targets.end(), KernelName::router) != targets.end() && !model.shape().is_moe())
            fail_input("--finetune " + to_string(plan.finetune) + ": the router target adapts a mixture of experts' routers, "
                           "and " + model.name() + " has none",
                       ft);
        if (l.ep > 1 && plan.strategy == DataParallel::fsdp)
            fail_input("--finetune " + to_string(plan.finetune) + " with FSDP and expert parallelism is not modelled; use "
                           "ddp or zero1 with --ep (Megatron's layers with adapters on every expert), or fsdp without --ep",
                       ft);
        if (l.tp > 1 || l.pp > 1 || l.ep > 1) {
            // Megatron's layers with PEFT's tensor-parallel adapters (strategies/finetune.hpp),
            // built by the model-parallel builder.
            if (plan.strategy != DataParallel::ddp && plan.strategy != DataParallel::zero1)
                fail_input("--finetune " + to_string(plan.finetune) + " with tensor, pipeline or expert parallelism is modelled "
                               "with ddp and zero1 (Megatron's distributed optimizer); not with " + to_string(plan.strategy),
                           ft);
            if (plan.finetune.kind == FineTuneKind::qlora)
                fail_input("--finetune " + to_string(plan.finetune) + " is modelled for data parallelism (tp = pp = ep = 1): "
                               "QLoRA's NF4 weights are bitsandbytes' Linear4bit, which Megatron's tensor-, pipeline- and "
                               "expert-parallel layers are not; use lora with --tp, --pp or --ep, or qlora with fsdp",
                           ft);
            // Megatron runs a mixture of experts with tp > 1 only under --sp, which PEFT's layer lacks.
            if (model.shape().is_moe() && l.tp > 1)
                fail_input("--finetune " + to_string(plan.finetune) + " of a mixture of experts with tensor parallelism is "
                               "not modelled: Megatron needs --sp for its experts with tp > 1, and PEFT's parallel layer has "
                               "no sequence-parallel path; use --ep or --pp",
                           ft);
            if (plan.sequence_parallel && l.tp > 1)
                fail_input("--finetune " + to_string(plan.finetune) + " with tensor parallelism is modelled without sequence "
                               "parallelism (PEFT's LoraParallelLinear, peft/tuners/lora/tp_layer.py, has no sequence-"
                               "parallel path); leave out --sp",
                           ft);
        }
        switch (plan.strategy) {
            case DataParallel::ddp:
            case DataParallel::ring:
            case DataParallel::zero1:
            case DataParallel::zero2: break;
            case DataParallel::fsdp:
                // FSDP shards the frozen weights with the adapters (strategies/zero.cpp
                // build_sharded); its CPU offload keeps their shards on the host too.
                break;
            default:
                fail_input("--finetune " + to_string(plan.finetune) + " is modelled with ddp, ring, zero1 and zero2 "
                               "(frozen weights replicated, adapter states sharded) and fsdp (frozen weights sharded too); "
                               "not with " + to_string(plan.strategy),
                           ft);
        }
    }
    l.optimizer = plan.optimizer;
    if (plan.optimizer != Optimizer::adam && l.optimizer_offload != Offload::none) {
        // The offloaded step runs the framework's CPU optimizer: DeepSpeed's CPU-Adam
        // (ZeRO-Offload checks the optimizer is DeepSpeedCPUAdam, stage_1_and_2.py
        // _enforce_cpu_offload), or PyTorch's own optimizers on CPU tensors (FSDP; Megatron's
        // HybridDeviceOptimizer, whose CPU side is CPUAdam or CPUSGD, megatron/core/optimizer/
        // __init__.py).
        const bool torch_sgd = (plan.strategy == DataParallel::fsdp || layered) && plan.optimizer == Optimizer::sgd;
        if (!torch_sgd)
            fail_input("--optimizer " + std::string(to_string(plan.optimizer)) + " has no CPU implementation to run "
                           "an offloaded step: DeepSpeed offloads Adam (its CPU-Adam), FSDP's CPU offload and Megatron's "
                           "--optimizer-cpu-offload run PyTorch's Adam or SGD on the host",
                       {"", "", "--optimizer"});
    }
    if (plan.compress.method != CompressionMethod::none) {
        // Compression replaces the all-reduce of whole gradient buckets; the sharded flavours
        // reduce-scatter shards and parameter servers push to servers, which it does not model.
        const ErrorContext cf{"", "", "--compress"};
        const std::string what = "--compress " + to_string(plan.compress);
        if (l.tp > 1 || l.pp > 1 || l.ep > 1)
            fail_input(what + " is modelled for data parallelism (tp = pp = ep = 1): it compresses the gradients replicas "
                           "all-reduce; leave out --tp, --pp and --ep",
                       cf);
        if (plan.strategy != DataParallel::ddp && plan.strategy != DataParallel::ring)
            fail_input(what + " compresses the full-gradient all-reduce of --strategy ddp and ring (Horovod); --strategy " +
                           to_string(plan.strategy) + " exchanges gradients another way; use --strategy ddp or ring",
                       cf);
    }
    if (plan.optimizer != Optimizer::adam) {
        const ErrorContext opt{"", "", "--optimizer"};
        if (plan.strategy == DataParallel::ps || plan.strategy == DataParallel::ps_async)
            fail_input("parameter servers step Adam; --optimizer " + std::string(to_string(plan.optimizer)) +
                           " is modelled for the other strategies",
                       opt);
        // LAMB's trust ratio needs each layer's norms; with tensor, pipeline or expert parallelism
        // those span ranks of other groups (an MoE layer's experts over its expert-parallel
        // group), which is not modelled.
        if (plan.optimizer == Optimizer::lamb && (l.tp > 1 || l.pp > 1 || l.ep > 1))
            fail_input("--optimizer lamb is modelled for data parallelism (tp = pp = ep = 1): its per-layer norms would "
                       "span tensor, pipeline and expert-parallel ranks",
                       opt);
    }
}

}  // namespace

namespace {

/// The op estimate and its gradient-bucket part, in doubles: the figure only has to be right
/// within a factor, and a plan beyond int64 is refused the same way as one beyond kMaxOps.
struct Estimate {
    double ops, buckets, bucket_ops;
};

Estimate estimate(const Layout& l, const Plan& plan, const std::vector<Block>& blocks) {
    const double pp = l.pp, v = plan.schedule == Schedule::interleaved ? std::max(1, plan.virtual_stages) : 1;
    const double ranks = l.folded ? static_cast<double>(l.folded_tp ? 1 : l.tp) * l.pp * l.fold_width * l.cp : static_cast<double>(l.devices);
    const double stage_blocks = std::ceil(static_cast<double>(blocks.size()) / pp) + 2;
    // Per block and micro-batch: activation alloc, forward, backward, free; recompute; the
    // zero-bubble schedule's split backward; tensor-parallel collectives (2 per pass, 4 with sp,
    // and sp's 2 re-gathers in backward) with the backward's 4 extra segments around them;
    // ZeRO-3 / FSDP's per-block gathers and reduce-scatters with their buffers.
    double per_block = 4;
    if (plan.recompute != Recompute::none) per_block += 1;
    if (plan.schedule == Schedule::zb_h1) per_block += 1;
    if (l.tp > 1) per_block += plan.sequence_parallel ? 14 : 8;
    // Context parallelism: each pass's cp ring steps (a kernel, a send and a receive each), the
    // recompute's too, and the segments around them (strategies/context_parallel.hpp).
    if (l.cp > 1) per_block += 9.0 * l.cp + 6;
    const bool sharded = plan.strategy == DataParallel::zero3 || plan.strategy == DataParallel::fsdp;
    const bool ps = plan.strategy == DataParallel::ps || plan.strategy == DataParallel::ps_async;
    if (sharded) per_block += 10;
    // ZeRO++ (strategies/zero.cpp): qwZ's quantize, scales gather and dequantize on each of a
    // block's two gathers; qgZ's three kernels and four all-to-alls for each of a block's matrices
    // (up to six: fused or separate projections) in place of its share of a reduce-scatter.
    if (plan.zero_quantized_weights) per_block += 6;
    // MiCS's hierarchical gathers: an across-node gather and a copy before each of a block's two.
    if (l.mics_node_ranks > 0) per_block += 4;
    if (l.qgz_node_ranks > 0) per_block += (plan.zero_loco ? 13 : 7) * 6;
    // The gradient accumulation pass after each later micro-batch's backward (strategies/
    // data_parallel.hpp accumulates).
    if (!sharded && !ps && l.framework.grad_accumulation != GradAccumulation::fused) per_block += 1;
    // Gradient buckets of the rank's share of the parameters (each a collective or a push and a
    // pull, with a timer or a staging buffer): per step, or per update for parameter servers.
    // Their cap: Horovod's fusion buffer for ring, else the layout's (Layout::bucket); at most 4
    // bytes per gradient. A single replica of
    // ddp, ring or a tensor / pipeline plan synchronises nothing and makes no buckets.
    double params = 0;
    for (const Block& b : blocks) params += static_cast<double>(b.params);
    double cap = plan.strategy == DataParallel::ring ? plan.fusion_mb * 1048576.0 : static_cast<double>(l.bucket.count());
    // DeepSpeed's ZeRO-1/2 buckets are reduce_bucket_size elements (strategies/zero.cpp build_zero).
    if ((plan.strategy == DataParallel::zero1 || plan.strategy == DataParallel::zero2) && l.pp == 1 && l.cp == 1 &&
        deepspeed_engine(l.framework.name))
        cap = 4.0 * static_cast<double>(l.framework.reduce_bucket);
    // Context-parallel ranks reduce their gradients like replicas (over dp · cp), one replica or many.
    const bool bucketed = !sharded && (l.dp_cp() > 1 || ps || plan.strategy == DataParallel::zero1 || plan.strategy == DataParallel::zero2);
    const double buckets = bucketed ? std::ceil(params / pp * 4 / std::max(1.0, cap)) + 2 : 2;
    const double per_microbatch = stage_blocks * per_block + (l.pp > 1 ? 4 * v : 0);
    // Parameter servers push and pull every bucket of every update, and the servers update per push.
    // A compressed bucket is up to 7 ops per rank (strategies/compression.hpp), not 1.
    // The model-parallel builder's buckets are one collective op per rank (grad_sync).
    const bool layered = (l.tp > 1 || l.pp > 1 || l.cp > 1 || l.ep > 1) && !sharded_with_tp(plan, l);
    const double per_bucket = plan.compress.method != CompressionMethod::none ? 10 : layered ? 1 : 4;
    const double bucket_ops =
        ranks * per_bucket * buckets + (ps ? (ranks * 6 + (l.servers + 1.0) * l.dp) * l.microbatches * buckets : 0);
    // FP8: each block's weight cast at the first micro-batch, and the copies' buffer.
    const double fp8_ops = l.fp8 != Fp8Recipe::none ? stage_blocks * v + 1 : 0;
    // hpZ: each block's secondary slice allocated, copied and freed once a step.
    const double hpz_ops = plan.zero_hpz_partition_size > 1 ? 3 * stage_blocks : 0;
    // ZeRO-3 offloaded: every reduce bucket's partition goes through the host each micro-batch
    // (strategies/offload.hpp: up to 8 ops), one bucket split in two by Twin-Flow.
    const double offload_ops = plan.strategy == DataParallel::zero3 && l.optimizer_offload != Offload::none
                                   ? 8.0 * l.microbatches * (std::ceil(params / std::max<double>(1, l.framework.reduce_bucket)) + 2)
                                   : 0;
    // MiCS: each reduce bucket's partition all-reduced across the shard groups at the boundary.
    const double mics_ops = plan.zero_mics_shard_size > 0 && l.dp > plan.zero_mics_shard_size
                                ? std::ceil(params / std::max<double>(1, l.framework.reduce_bucket)) + 2
                                : 0;
    const double ops =
        ranks * (static_cast<double>(l.microbatches) * per_microbatch + 16 + fp8_ops + hpz_ops + offload_ops + mics_ops) +
        bucket_ops;
    return {ops, buckets, bucket_ops};
}

}  // namespace

std::int64_t estimated_ops(const Layout& l, const Plan& plan, const std::vector<Block>& blocks) {
    const double ops = estimate(l, plan, blocks).ops;
    return ops >= 9.2e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(ops);
}

namespace {

/// The data-parallel gradient buckets (Layout::bucket) as the framework makes them:
///  * reduced after backward: DeepSpeed's engine in allreduce_bucket_size elements
///    (after_backward_bucket); Megatron its whole gradient buffer at once — Megatron-LM v2's
///    flattened buffer (megatron/training.py:369), megatron-core's bucket_size set to None
///    without overlap_grad_reduce (megatron/core/distributed/distributed_data_parallel.py:135-137),
///    one bucket per model chunk;
///  * Megatron overlapping them: bucket_size max(4e7, 1e6 · dp) parameters
///    (distributed_data_parallel.py:133-134, dp over its data- and context-parallel group), none
///    smaller first;
///  * PyTorch DDP: bucket_cap_mb 25 MiB and a 1 MiB first bucket (_DEFAULT_FIRST_BUCKET_BYTES).
/// --bucket-mb replaces the size where the framework has one to replace.
void resolve_buckets(const Plan& plan, Layout& l) {
    const std::int64_t grads = state_bytes(l.dtype).grads;
    const Framework& f = l.framework;
    const Bytes whole(std::numeric_limits<std::int64_t>::max() / 4);   // one bucket, whatever the model
    const bool megatron = f.name == FrameworkName::megatron;
    if (megatron && plan.first_bucket_mb)
        fail_input("has no effect here: Megatron's gradient buckets have no smaller first one (PyTorch DDP's has)",
                   {"", "", "--first-bucket-mb"});
    if (f.grad_reduce == GradReduce::after_backward && (megatron || f.after_backward_bucket > 0)) {
        if (megatron && plan.bucket_mb)
            fail_input("has no effect here: without --overlap-grad-reduce Megatron reduces its whole gradient buffer at once "
                       "after backward (megatron-core sets bucket_size to None, distributed_data_parallel.py:135-137)",
                       {"", "", "--bucket-mb"});
        l.bucket = l.first_bucket = f.after_backward_bucket > 0 ? Bytes(f.after_backward_bucket * grads) : whole;
        return;
    }
    if (megatron && !plan.bucket_mb) {
        l.bucket = l.first_bucket = Bytes(std::max<std::int64_t>(40'000'000, std::int64_t{1'000'000} * l.dp_cp()) * grads);
        return;
    }
    l.bucket = Bytes::mib(plan.bucket_mb.value_or(25));
    l.first_bucket = megatron ? l.bucket : std::min(l.bucket, Bytes::mib(plan.first_bucket_mb.value_or(1)));
}

/// --tp-comm-overlap: Transformer Engine's userbuffers, as Megatron core runs them
/// (strategies/model_parallel.cpp make_segments), where the graph models them.
/// --strategy fsdp under --framework megatron: Megatron-FSDP (core 0.12's custom FSDP, renamed in
/// 0.14; NVIDIA/Megatron-LM d98e8a6 megatron/core/distributed/fsdp/src/megatron_fsdp/) with
/// --data-parallel-sharding-strategy optim_grads_params, its ZeRO-3. Each TransformerLayer is a
/// unit whose parameters are all-gathered before its forward with the next unit prefetched, released
/// after it (megatron_fsdp.py:977-1001 _post_forward), gathered again before its backward with the
/// previous unit prefetched ahead of this one's reduce-scatter (docs/runtime_schedule.md: "AG_{i-1}
/// needs to be prefetched before DO_i and RS_i"), and its gradients reduce-scattered after every
/// backward (megatron_fsdp.py:757-776: grad_reduce_every_bprop); the embedding, final norm and head
/// are no unit and keep their parameters after forward. That is PyTorch FSDP's FULL_SHARD with
/// forward prefetch, BACKWARD_PRE and no no_sync (strategies/fsdp.hpp), which the FSDP engine runs;
/// what is PyTorch's alone is refused here.
void check_megatron_fsdp(const Plan& plan, const Layout& l) {
    if (plan.strategy != DataParallel::fsdp || l.framework.name != FrameworkName::megatron) return;
    const std::string what = "Megatron-FSDP (--strategy fsdp under " + describe(l.framework) + ")";
    if (plan.fsdp_sharding != FsdpSharding::full)
        fail_input(what + " is modelled with --data-parallel-sharding-strategy optim_grads_params, --fsdp-sharding full; "
                       "its no_shard, optim and optim_grads are Megatron's DDP, zero1 (the distributed optimizer) and a "
                       "ZeRO-2 not modelled here, and its hybrid sharding reduces across the outer group only in the last "
                       "micro-batch, unlike FSDP's HYBRID_SHARD",
                   {"", "", "--fsdp-sharding"});
    if (plan.fsdp_backward_prefetch != FsdpBackwardPrefetch::pre)
        fail_input(what + " always gathers the previous unit before this unit's gradient reduce-scatter (BACKWARD_PRE; "
                       "megatron/core/distributed/fsdp/src/docs/runtime_schedule.md); --fsdp-backward-prefetch is "
                       "PyTorch FSDP's",
                   {"", "", "--fsdp-backward-prefetch"});
    if (plan.fsdp_no_sync)
        fail_input(what + " reduce-scatters gradients after every backward when it shards them (megatron_fsdp.py "
                       "_process_post_backward_gradients: grad_reduce_every_bprop; its no_sync has no effect there)",
                   {"", "", "--fsdp-no-sync"});
    if (plan.overlap_grad_reduce || plan.overlap_param_gather)
        fail_input("has no effect here: " + what + " overlaps both whenever it shards parameters "
                       "(megatron_fsdp.py:328-333 sets overlap_param_gather and overlap_grad_reduce)",
                   {"", "", plan.overlap_grad_reduce ? "--overlap-grad-reduce" : "--overlap-param-gather"});
    if (l.pp > 1 || plan.ep > 1)
        fail_input(what + " is modelled with data, tensor and context parallelism; with " +
                       (l.pp > 1 ? "pipeline stages (--pp)" : "expert parallelism (--ep)") +
                       " it is not (fsdp there is PyTorch FSDP2's, as torchtitan runs it)",
                   {"", "", l.pp > 1 ? "--pp" : "--ep"});
    if (plan.offload != Offload::none || plan.offload_params != Offload::none || plan.offload_optimizer != Offload::none)
        fail_input(what + " keeps model states on the device here (FSDP's CPU offload is PyTorch's; Megatron offloads "
                       "the distributed optimizer with --strategy zero1 --offload cpu)",
                   {"", "", "--offload"});
    if (plan.finetune.kind != FineTuneKind::full)
        fail_input(what + " is modelled for full training; --finetune " + to_string(plan.finetune) +
                       " with fsdp is PyTorch's (--framework pytorch)",
                   {"", "", "--finetune"});
}

void check_tp_comm_overlap(const Model& model, const topo::Cluster& cluster, const Plan& plan, const Layout& l) {
    const ErrorContext where{"", "", "--tp-comm-overlap"};
    if (l.tp == 1) fail_input("overlaps the tensor group's collectives with its GEMMs, and with --tp 1 there are none", where);
    if (!plan.sequence_parallel)
        fail_input("needs --sp: Megatron asserts 'Tensor parallel communication/GEMM overlap can happen only when sequence "
                   "parallelism is enabled' (megatron/training/arguments.py)",
                   where);
    if (!l.framework.can_tp_comm_overlap)
        fail_input(describe(l.framework) + " has no tensor-parallel communication overlap (Megatron core 0.4 and later, "
                   "--framework megatron, runs Transformer Engine's userbuffers)",
                   where);
    if (cluster.group_of(0).device.is_cpu)
        fail_input("is Transformer Engine's, on GPUs; " + cluster.name + " computes on CPUs", where);
    const int last = std::min(l.tp, cluster.num_devices()) - 1;
    if (cluster.device(0).node != cluster.device(last).node)
        fail_input("Transformer Engine's userbuffers exchange through CUDA IPC among one node's GPUs, and a tensor group of " +
                       std::to_string(l.tp) + " spans nodes of " + cluster.name,
                   where);
    if (model.is_transformer() && model.shape().is_moe())
        fail_input("is not modelled with a mixture of experts yet: its layers' tensor-parallel collectives sit in the token "
                   "dispatcher; leave --tp-comm-overlap out",
                   where);
    if (plan.strategy != DataParallel::ddp && plan.strategy != DataParallel::zero1)
        fail_input("is Megatron's, with its data parallelism (--strategy ddp or zero1), not --strategy " +
                       std::string(to_string(plan.strategy)) +
                       (plan.strategy == DataParallel::fsdp ? " (Megatron-FSDP's layers are modelled without userbuffers)" : ""),
                   where);
    if (plan.schedule == Schedule::zb_h1 || plan.finetune.kind != FineTuneKind::full)
        fail_input(std::string("is not modelled with ") + (plan.finetune.kind != FineTuneKind::full ? "LoRA" : "--schedule zb-h1") +
                       "; leave --tp-comm-overlap out",
                   where);
}

/// Hogwild! (Niu et al. 2011) is a shared-memory method: every worker writes the one parameter
/// store without locks, so the workers must be processes of one node, and the simulator must
/// model that node's DRAM as one resource the updates share (a node with a PCIe root: the host
/// ops of its ranks are flows over its DRAM links, sim/simulator.cpp HostCpu). A CPU board or a
/// node of CPU ranks (intra none or shm) prices each rank's DRAM alone, so the contention
/// Hogwild! is about would not show: it gets one worker or none.
void check_hogwild(const topo::Cluster& cluster, const Plan& plan) {
    const ErrorContext at{"", "", "--hogwild"};
    if (plan.strategy != DataParallel::ps_async)
        fail_input(std::string("--hogwild is an asynchronous update rule: it needs --strategy ps-async, not ") +
                       to_string(plan.strategy),
                   at);
    const int devices = cluster.num_devices();
    const topo::DeviceRef first = cluster.device(0), last = cluster.device(devices - 1);
    if (first.node != last.node)
        fail_input("--hogwild updates a parameter store in the shared memory of one node without locks, but the " +
                       std::to_string(devices) + " workers span " + std::to_string(last.node - first.node + 1) +
                       " nodes of " + cluster.name +
                       ", which share no memory; take one node's devices (--devices, --nodes 1) or use ps-async without "
                       "--hogwild (parameter servers over the network)",
                   at);
    const topo::NodeGroup& g = cluster.group_of(0);
    const bool soc = (g.intra == topo::IntraKind::none || g.intra == topo::IntraKind::shm) &&
                     (g.device.is_cpu || g.device.unified_memory);
    if (soc && devices > 1)
        fail_input("--hogwild on " + std::to_string(devices) + " " + g.device.name +
                       " ranks of one board: the simulator prices each CPU rank's DRAM traffic alone there, so the "
                       "contention of lock-free updates on the board's memory would not show; Hogwild! is modelled on "
                       "nodes whose host DRAM the devices share through a PCIe root (GPU nodes such as workstation-4gpu)",
                   at);
    if (plan.tp > 1 || plan.pp > 1)
        fail_input("--hogwild runs whole replicas (data parallelism only); leave out --tp and --pp", at);
}

}  // namespace

Layout resolve(const Model& model, const topo::Cluster& cluster, const Plan& plan) {
    Layout l;
    l.devices = cluster.num_devices();
    if (plan.tp < 1) fail_input("--tp must be at least 1, found " + std::to_string(plan.tp), {"", "", "--tp"});
    if (plan.pp < 1) fail_input("--pp must be at least 1, found " + std::to_string(plan.pp), {"", "", "--pp"});
    if (plan.dp < 0) fail_input("--dp must be at least 1, found " + std::to_string(plan.dp), {"", "", "--dp"});
    if (plan.cp < 1) fail_input("--cp must be at least 1, found " + std::to_string(plan.cp), {"", "", "--cp"});
    // Each degree is at most the devices (so their products stay far inside int64).
    for (const auto& [name, n] : {std::pair{"--tp", plan.tp}, {"--pp", plan.pp}, {"--cp", plan.cp}, {"--dp", plan.dp}})
        if (n > l.devices)
            fail_input(std::string(name) + " " + std::to_string(n) + " is larger than the " + std::to_string(l.devices) +
                           " devices of " + cluster.name,
                       {"", "", name});
    if (plan.micro_batch < 1)
        fail_input("--micro-batch must be at least 1, found " + std::to_string(plan.micro_batch), {"", "", "--micro-batch"});
    if (plan.bucket_mb && !(*plan.bucket_mb > 0))
        fail_input("--bucket-mb must be positive, found " + std::to_string(*plan.bucket_mb), {"", "", "--bucket-mb"});
    if (plan.first_bucket_mb && !(*plan.first_bucket_mb > 0))
        fail_input("--first-bucket-mb must be positive, found " + std::to_string(*plan.first_bucket_mb),
                   {"", "", "--first-bucket-mb"});
    l.tp = plan.tp;
    l.pp = plan.pp;
    l.cp = plan.cp;
    if (plan.partition && l.pp == 1)
        fail_input("--partition has no effect here: it splits the layers over pipeline stages (--pp 2 or more)",
                   {"", "", "--partition"});
    check_context_parallel(model, plan, l);
    // Parameter servers (ps, ps-async): with --ps-placement dedicated the S servers are the last S
    // devices of the cluster and the workers the first devices − S (pi5-1gbe × 5 with one server:
    // dp = 4); colocated servers live on the first S workers, so S ≤ dp.
    const bool ps = plan.strategy == DataParallel::ps || plan.strategy == DataParallel::ps_async;
    if (plan.hogwild) check_hogwild(cluster, plan);
    if (ps && !plan.hogwild) {
        if (plan.ps_servers < 1)
            fail_input("--ps-servers must be at least 1, found " + std::to_string(plan.ps_servers),
                       {"", "", "--ps-servers"});
        if (plan.ps_placement == PsPlacement::dedicated) {
            if (plan.ps_servers >= l.devices)
                fail_input(std::to_string(plan.ps_servers) + " dedicated parameter servers leave no worker among the " +
                               std::to_string(l.devices) + " devices of " + cluster.name +
                               " (dp = devices − servers); use fewer --ps-servers or --ps-placement colocated",
                           {"", "", "--ps-servers"});
            l.servers = plan.ps_servers;
        }
        if (plan.staleness < 0)
            fail_input("--staleness must be at least 0, found " + std::to_string(plan.staleness), {"", "", "--staleness"});
    }
    if (plan.strategy == DataParallel::ring) {
        if (!(plan.fusion_mb > 0))
            fail_input("--fusion-mb must be positive, found " + std::to_string(plan.fusion_mb), {"", "", "--fusion-mb"});
        if (!(plan.cycle_ms >= 0))
            fail_input("--cycle-ms must be at least 0, found " + std::to_string(plan.cycle_ms), {"", "", "--cycle-ms"});
    }
    const int workers = l.devices - l.servers;
    const std::int64_t tp_pp = std::int64_t{l.tp} * l.pp * l.cp;
    const std::string cp_term = l.cp > 1 ? " × cp" : "", cp_value = l.cp > 1 ? " × " + std::to_string(l.cp) : "";
    // The flag to change: --tp when tp alone does not divide the workers, else --cp, else --pp.
    if (workers % tp_pp != 0)
        fail_input("tp × pp" + cp_term + " = " + std::to_string(tp_pp) + " does not divide the " + std::to_string(workers) + " " +
                       (l.servers > 0 ? "worker " : "") + "devices of " + cluster.name,
                   {"", "", workers % l.tp != 0 ? "--tp" : workers % (std::int64_t{l.tp} * l.cp) != 0 ? "--cp" : "--pp"});
    l.dp = plan.dp > 0 ? plan.dp : static_cast<int>(workers / tp_pp);
    if (tp_pp * l.dp != workers)
        fail_input("tp × pp" + cp_term + " × dp = " + std::to_string(l.tp) + " × " + std::to_string(l.pp) + cp_value + " × " +
                       std::to_string(l.dp) + " = " + std::to_string(tp_pp * l.dp) + ", but the cluster has " +
                       std::to_string(workers) + " devices" +
                       (l.servers > 0 ? " for workers (" + std::to_string(l.devices) + " less " +
                                            std::to_string(l.servers) + " parameter servers)"
                                      : std::string()) +
                       " (use --devices to take fewer)",
                   {"", "", "--dp"});
    if (ps && !plan.hogwild && plan.ps_placement == PsPlacement::colocated && plan.ps_servers > l.dp)
        fail_input(std::to_string(plan.ps_servers) + " colocated parameter servers need as many workers, but dp = " +
                       std::to_string(l.dp),
                   {"", "", "--ps-servers"});
    if (plan.strategy == DataParallel::fsdp && l.pp > 1 && plan.fsdp_sharding == FsdpSharding::none)
        fail_input("--fsdp-sharding none with pipeline parallelism is not modelled: with --pp, fsdp shards every stage over "
                   "its data-parallel ranks (full or grad-op, which torchtitan runs alike under pipeline stages, or hybrid); "
                   "NO_SHARD replicates like DDP: --strategy ddp",
                   {"", "", "--fsdp-sharding"});
    if (plan.strategy == DataParallel::fsdp && plan.fsdp_no_sync &&
        (plan.offload != Offload::none || plan.offload_params != Offload::none))
        fail_input("--fsdp-no-sync with FSDP's CPU offload is not modelled (the offload moves each reduced gradient "
                   "shard to the host); leave out one of them",
                   {"", "", "--fsdp-no-sync"});
    if (plan.strategy == DataParallel::fsdp && l.cp > 1 && plan.fsdp_sharding == FsdpSharding::none)
        fail_input("--fsdp-sharding none with context parallelism is not modelled: with --cp, fsdp shards over the data- and "
                   "context-parallel ranks (full, grad-op or hybrid); NO_SHARD replicates like DDP: --strategy ddp",
                   {"", "", "--fsdp-sharding"});
    if (plan.strategy == DataParallel::fsdp && plan.fsdp_sharding == FsdpSharding::hybrid) {
        // Hybrid sharding: shard within a group of consecutive ranks (a node by default), replicate
        // across groups.
        if (plan.fsdp_group < 0)
            fail_input("--fsdp-group must be at least 1, found " + std::to_string(plan.fsdp_group), {"", "", "--fsdp-group"});
        // A node's data-parallel ranks: with tensor (and, under pipeline stages, context)
        // parallelism each replica is tp · cp of its devices.
        const int per_node = cluster.groups.front().devices_per_node;
        const int width = l.tp * l.cp;
        if (plan.fsdp_group == 0 && per_node % width != 0)
            fail_input("the hybrid shard group defaults to a node's replicas, but tp " + std::to_string(l.tp) +
                           (l.cp > 1 ? " × cp " + std::to_string(l.cp) : std::string()) + " does not divide the " +
                           std::to_string(per_node) + " devices of a node; give --fsdp-group",
                       {"", "", "--fsdp-group"});
        l.shard_group = plan.fsdp_group > 0 ? plan.fsdp_group : per_node / width;
        const std::string unit = width > 1 ? "replicas" : "devices";   // a replica is tp · cp devices
        if (l.dp % l.shard_group != 0)
            fail_input("the hybrid shard group of " + std::to_string(l.shard_group) + " " + unit + " does not divide the " +
                           std::to_string(l.dp) + " data-parallel " + unit + "; choose --fsdp-group dividing " +
                           std::to_string(l.dp),
                       {"", "", "--fsdp-group"});
    }
    l.micro_batch = plan.micro_batch;
    // ps-async runs each worker's loop of updates: by default 4 iterations per worker (each
    // micro-batch is one update), so the staleness bound and the server's queue show.
    const std::int64_t default_iterations = plan.strategy == DataParallel::ps_async ? 4 : 1;
    if (plan.gradient_accumulation < 0)
        fail_input("gradient_accumulation_steps must be at least 1, found " + std::to_string(plan.gradient_accumulation),
                   {"", "", "--deepspeed-config"});
    const std::int64_t accumulated = static_cast<std::int64_t>(l.dp) * plan.micro_batch * plan.gradient_accumulation;
    if (plan.gradient_accumulation > 0 && plan.global_batch > 0 && plan.global_batch != accumulated)
        fail_input("the global batch " + std::to_string(plan.global_batch) + " is not dp " + std::to_string(l.dp) +
                       " × micro-batch " + std::to_string(plan.micro_batch) + " × gradient_accumulation_steps " +
                       std::to_string(plan.gradient_accumulation) + " = " + std::to_string(accumulated),
                   {"", "", "--deepspeed-config"});
    l.global_batch = plan.global_batch > 0        ? plan.global_batch
                     : plan.gradient_accumulation ? accumulated
                                                  : static_cast<std::int64_t>(l.dp) * plan.micro_batch * default_iterations;
    if (l.global_batch % l.dp != 0)
        fail_input("the global batch " + std::to_string(l.global_batch) + " does not split over dp = " +
                       std::to_string(l.dp) + " replicas",
                   {"", "", "--global-batch"});
    const std::int64_t per_replica = l.global_batch / l.dp;
    if (per_replica / l.micro_batch > std::numeric_limits<int>::max())
        fail_input("the global batch " + std::to_string(l.global_batch) + " makes " +
                       std::to_string(per_replica / l.micro_batch) + " micro-batches per replica, more than the " +
                       std::to_string(std::numeric_limits<int>::max()) + " a step can hold; a smaller --global-batch or "
                       "a larger --micro-batch",
                   {"", "", "--global-batch"});
    if (per_replica % l.micro_batch != 0)
        fail_input("the micro-batch " + std::to_string(l.micro_batch) + " does not divide the per-replica batch " +
                       std::to_string(per_replica) + " (global batch " + std::to_string(l.global_batch) + " / dp " +
                       std::to_string(l.dp) + ")",
                   {"", "", "--micro-batch"});
    l.microbatches = static_cast<int>(per_replica / l.micro_batch);
    if (plan.strategy == DataParallel::hybrid_cnn) check_hybrid_cnn(model, plan, l);
    if (!model.is_transformer()) {
        // A layer list's sizes are per sample: it has no sequence and no attention to recompute.
        if (plan.seq > 0)
            fail_input("--seq has no effect: " + model.name() + " is a layer list (CNN / MLP), whose samples have no "
                       "sequence length",
                       {"", "", "--seq"});
        if (plan.recompute == Recompute::selective)
            fail_input("--recompute selective recomputes the attention core, which layer-list model " + model.name() +
                           " does not have; use none or full",
                       {"", "", "--recompute"});
        if (plan.attention || plan.attention_backend) {
            const char* flag = plan.attention ? "--attention" : "--attention-backend";
            fail_input(std::string(flag) + " has no effect: " + model.name() + " is a layer list (CNN / MLP), which has no "
                           "attention",
                       {"", "", flag});
        }
    }
    l.seq = plan.seq > 0 ? plan.seq : model.default_seq();
    if (model.is_transformer() && l.seq > model.shape().max_seq)
        fail_input("--seq " + std::to_string(l.seq) + " exceeds the " + std::to_string(model.shape().max_seq) +
                       " positions of " + model.name(),
                   {"", "", "--seq"});
    // One dtype for the plan: the user's, or the first device's default (bf16 on GPUs, fp32 on CPUs).
    l.dtype = plan.dtype ? *plan.dtype : cluster.device_kind(0).default_dtype();
    for (const auto& g : cluster.groups)
        if (!g.device.supports(l.dtype))
            fail_input(std::string("the ") + g.device.name + " devices of group '" + g.name + "' have no " +
                           to_string(l.dtype) + " peak; choose another --dtype",
                       {"", "", "--dtype"});
    // FSDP's reduce dtype: fp32 or the parameters' own (a 16-bit reduction of fp32 parameters,
    // or of another 16-bit type, is not modelled).
    l.fsdp_reduce_bytes = dtype_bytes(l.dtype);
    if (plan.fsdp_reduce_dtype) {
        const DType r = *plan.fsdp_reduce_dtype;
        if (r != DType::fp32 && r != l.dtype)
            fail_input("--fsdp-reduce-dtype " + std::string(to_string(r)) + " with " + to_string(l.dtype) +
                           " parameters is not modelled: FSDP reduces in fp32 or in the parameters' dtype",
                       {"", "", "--fsdp-reduce-dtype"});
        l.fsdp_reduce_bytes = dtype_bytes(r);
    }
    // The framework: the user's, or the plan's usual one; then the flags that change it.
    const bool zero = plan.strategy == DataParallel::zero1 || plan.strategy == DataParallel::zero2 ||
                      plan.strategy == DataParallel::zero3;
    const bool pytorch_only = plan.strategy == DataParallel::ring || plan.strategy == DataParallel::ps ||
                              plan.strategy == DataParallel::ps_async || plan.strategy == DataParallel::fsdp ||
                              plan.strategy == DataParallel::hybrid_cnn;
    // ZeRO-2 and ZeRO-3 are DeepSpeed's own: with tensor parallelism, Megatron's layers on
    // DeepSpeed's engine (Megatron-DeepSpeed).
    const bool deepspeed_only = plan.strategy == DataParallel::zero2 || plan.strategy == DataParallel::zero3;
    // Expert parallelism is Megatron's too (the model-parallel builder's MoE passes and groups).
    const bool layered = l.tp > 1 || l.pp > 1 || l.cp > 1 || plan.ep > 1;
    l.framework = !plan.framework.empty()            ? parse_framework(plan.framework)
                  : pytorch_only                     ? parse_framework("pytorch")
                  : deepspeed_only && layered        ? parse_framework("megatron-deepspeed")
                                                     : default_framework(layered, zero);
    {
        // Which frameworks run which strategy: Horovod's ring and the parameter servers are their
        // own frameworks (modelled as such); FSDP is PyTorch's; ZeRO is DeepSpeed's (zero1 also
        // Megatron's distributed optimizer).
        const FrameworkName f = l.framework.name;
        bool ok = true;
        switch (plan.strategy) {
            case DataParallel::ring:
            case DataParallel::ps:
            case DataParallel::ps_async:
            case DataParallel::hybrid_cnn: ok = f == FrameworkName::pytorch; break;
            case DataParallel::fsdp: ok = f == FrameworkName::pytorch || l.framework.megatron_fsdp; break;
            case DataParallel::zero1: ok = f != FrameworkName::pytorch; break;
            case DataParallel::zero2:
            case DataParallel::zero3: ok = deepspeed_engine(f); break;
            case DataParallel::ddp: break;
        }
        if (!ok)
            fail_input(std::string("--strategy ") + to_string(plan.strategy) + " does not run on " + describe(l.framework) +
                           (plan.strategy == DataParallel::zero1 ? "; zero1 runs on deepspeed, megatron (its distributed "
                                                                   "optimizer) or megatron-deepspeed"
                            : zero ? "; ZeRO stages 2 and 3 are DeepSpeed's (deepspeed, megatron-deepspeed)"
                            : plan.strategy == DataParallel::fsdp
                                ? "; fsdp is PyTorch's (leave --framework out), or Megatron-FSDP from Megatron core 0.12 on "
                                  "(--framework megatron; NVIDIA/Megatron-LM d165a8548b, 'MCore Customized FSDP')"
                                : "; leave --framework out (it is pytorch)"),
                       {"", "", "--framework"});
    }
    check_megatron_fsdp(plan, l);
    {
        const auto& o = plan.framework_overrides;
        if (o.overlap_comm) l.framework.overlap_comm = *o.overlap_comm;
        if (o.reduce_bucket) l.framework.reduce_bucket = *o.reduce_bucket, l.framework.after_backward_bucket = *o.reduce_bucket;
        if (o.prefetch_bucket) l.framework.prefetch_bucket = *o.prefetch_bucket;
        if (o.max_live_parameters) l.framework.max_live_parameters = *o.max_live_parameters;
        if (o.max_reuse_distance) l.framework.max_reuse_distance = *o.max_reuse_distance;
        if (o.param_persistence_threshold) l.framework.param_persistence_threshold = *o.param_persistence_threshold;
        if (o.sub_group_size) l.framework.sub_group_size = std::max<std::int64_t>(1, *o.sub_group_size);
        if (o.optimizer_swap_buffers) l.framework.optimizer_swap_buffers = *o.optimizer_swap_buffers;
        if (o.param_swap_buffers) l.framework.param_swap_buffers = *o.param_swap_buffers;
        if (o.param_swap_buffer_size) l.framework.param_swap_buffer_size = *o.param_swap_buffer_size;
        if (o.dispatch_per_kernel) l.framework.dispatch_per_kernel = *o.dispatch_per_kernel;
        if (l.framework.overlap_comm && *l.framework.overlap_comm) l.framework.grad_reduce = GradReduce::overlapped;
    }
    if (plan.overlap_grad_reduce) {
        if (l.framework.name == FrameworkName::pytorch)
            fail_input("--overlap-grad-reduce has no effect with PyTorch, whose DDP always overlaps bucketed gradient "
                       "all-reduces with backward",
                       {"", "", "--overlap-grad-reduce"});
        if (!l.framework.can_overlap_grad_reduce)
            fail_input(describe(l.framework) + " has no switch to overlap gradient reduction with backward "
                       "(megatron-core, megatron@0.1 or later, has --overlap-grad-reduce)",
                       {"", "", "--overlap-grad-reduce"});
        if (plan.strategy == DataParallel::zero3)
            fail_input("--overlap-grad-reduce has no effect here: ZeRO-3 reduce-scatters its gradient buckets as backward "
                       "fills them already (overlap_comm defaults to true for stage 3, DeepSpeed runtime/zero/config.py)",
                       {"", "", "--overlap-grad-reduce"});
        l.framework.grad_reduce = GradReduce::overlapped;
        if (deepspeed_engine(l.framework.name))
            l.framework.overlap_comm = true;
    }
    if (plan.overlap_p2p_comm) {
        if (l.pp < 2) fail_input("--overlap-p2p-comm needs pipeline parallelism (--pp 2 or more)", {"", "", "--overlap-p2p-comm"});
        if (l.framework.name != FrameworkName::megatron)
            fail_input("--overlap-p2p-comm is Megatron's (--framework megatron); " + describe(l.framework) +
                           " does not have it",
                       {"", "", "--overlap-p2p-comm"});
        l.framework.overlap_p2p = true;
    }
    l.ep = plan.ep;
    check_expert_parallel(model, plan, l);
    if (plan.overlap_param_gather) {
        const ErrorContext where{"", "", "--overlap-param-gather"};
        if (plan.strategy != DataParallel::zero1)
            fail_input("it overlaps the parameter all-gather of Megatron's distributed optimizer "
                       "(--strategy zero1) with the next forward; --strategy " + std::string(to_string(plan.strategy)) +
                           " has no such gather",
                       where);
        if (!l.framework.can_overlap_param_gather)
            fail_input(describe(l.framework) + " has no switch to overlap the parameter all-gather with forward "
                       "(Megatron core 0.4 and later, --framework megatron, has --overlap-param-gather)",
                       where);
        if (l.dp_cp() == 1)
            fail_input("has no effect here: one data-parallel rank holds every parameter and gathers none", where);
        l.framework.overlap_param_gather = true;
    }
    if (plan.overlap_param_gather_with_optimizer_step) {
        // Megatron's asserts (megatron/training/arguments.py:1066-1073 at d98e8a6).
        const ErrorContext where{"", "", "--overlap-param-gather-with-optimizer-step"};
        if (!plan.overlap_param_gather)
            fail_input("needs --overlap-param-gather: Megatron asserts 'Must use --overlap-param-gather-with-optimizer-step "
                       "with --overlap-param-gather'",
                       where);
        if (!l.framework.can_overlap_param_gather_with_optimizer_step)
            fail_input(describe(l.framework) + " does not have it (Megatron core 0.9 and later, --framework megatron)", where);
        if (plan.schedule != Schedule::interleaved || l.pp < 2 || plan.virtual_stages < 2)
            fail_input("needs the interleaved schedule (--pp 2 or more, --schedule interleaved): Megatron asserts "
                       "'--overlap-param-gather-with-optimizer-step only supported with interleaved pipeline parallelism'",
                       where);
        if (plan.offload != Offload::none || plan.offload_optimizer != Offload::none)
            fail_input("is not modelled with the optimizer on the CPU (--optimizer-cpu-offload); leave one of them out", where);
        l.framework.overlap_param_gather_with_optimizer_step = true;
    }
    if (plan.tp_comm_overlap) check_tp_comm_overlap(model, cluster, plan, l);
    resolve_buckets(plan, l);
    // Attention. GPUs run FlashAttention-2 from Ampere on (flash-attn's README, "FlashAttention-2
    // currently supports Ampere, Ada, or Hopper GPUs"); CPUs run PyTorch's own flash kernel
    // (F.scaled_dot_product_attention → _scaled_dot_product_flash_attention_for_cpu, pytorch
    // 008ec6b aten/src/ATen/native/cpu/FlashAttentionKernel.cpp cpu_flash_attention), tiled as
    // FlashAttention-2 and skipping the key blocks past a query block under the causal mask
    // (`num_keys = is_causal ? std::min(m + qBlockSize, kvSize) : kvSize`) — what the CPU
    // executor's flash kernels do. Flash is the default on GPU clusters that all run it; a cluster
    // with CPUs defaults to eager attention (the scores materialised), which --attention flash
    // replaces.
    {
        const topo::NodeGroup* old_gpu = nullptr;  // a GPU group FlashAttention-2 does not run on
        const topo::NodeGroup* cpu = nullptr;
        for (const auto& g : cluster.groups) {
            if (g.device.is_cpu) {
                if (!cpu) cpu = &g;
            } else if (g.device.compute_capability < 8.0 &&
                       (!old_gpu || g.device.compute_capability < old_gpu->device.compute_capability)) {
                old_gpu = &g;
            }
        }
        const auto capability = [](const topo::NodeGroup& g) { return std::to_string(g.device.compute_capability).substr(0, 3); };
        l.attention = plan.attention ? *plan.attention : !old_gpu && !cpu ? Attention::flash : Attention::eager;
        if (plan.attention_backend && l.attention != Attention::flash)
            // Eager without --attention: the default, for an old GPU or a CPU group.
            fail_input("--attention-backend picks the kernel of flash attention; eager attention runs none " +
                           (plan.attention ? std::string("(leave it out, or --attention flash)")
                            : old_gpu      ? "(the " + old_gpu->device.name + " devices of group '" + old_gpu->name +
                                            "' run eager attention: FlashAttention needs GPUs of compute capability 8.0 or later)"
                                           : "(the " + cpu->device.name + " devices of group '" + cpu->name +
                                            "' are CPUs, which default to eager attention: add --attention flash)"),
                       {"", "", "--attention-backend"});
        if (l.attention == Attention::flash && old_gpu)
            fail_input("--attention flash needs GPUs of compute capability 8.0 or later (FlashAttention-2 runs on Ampere, "
                       "Ada and Hopper); the " + old_gpu->device.name + " devices of group '" + old_gpu->name +
                           "' have compute capability " + capability(*old_gpu),
                       {"", "", "--attention"});
        // Transformer Engine, which Megatron core runs attention through, prefers cuDNN's fused
        // attention to FlashAttention on compute capability 9.0 and later ("Disabling
        // FlashAttention to give FusedAttention preference on Hopper+ for performance reasons",
        // transformer_engine/pytorch/attention/dot_product_attention/utils.py:1647-1653 at
        // NVIDIA/TransformerEngine d0067d0); PyTorch's SDPA and the flash-attn package run
        // FlashAttention-2.
        bool hopper = !cluster.groups.empty();
        for (const auto& g : cluster.groups) hopper = hopper && !g.device.is_cpu && g.device.compute_capability >= 9.0;
        l.attention_backend = plan.attention_backend ? *plan.attention_backend
                              : l.framework.name == FrameworkName::megatron && hopper ? AttentionBackend::fused
                                                                                      : AttentionBackend::flash;
        if (l.attention == Attention::flash && cpu && l.attention_backend != AttentionBackend::flash)
            fail_input("--attention-backend " + std::string(to_string(l.attention_backend)) +
                           " runs on NVIDIA GPUs; the " + cpu->device.name + " devices of group '" + cpu->name +
                           "' are CPUs, whose flash attention is PyTorch's CPU kernel (--attention-backend flash)",
                       {"", "", "--attention-backend"});
        // FlashAttention-3 is built for sm90 alone (flash-attn's hopper/ README: "Requirements:
        // H100 / H800 GPU"), and Transformer Engine disables it on any other compute capability
        // ("Disabling FlashAttention 3 for compute capability != sm90",
        // attention/dot_product_attention/utils.py at NVIDIA/TransformerEngine d0067d0).
        if (l.attention == Attention::flash && l.attention_backend == AttentionBackend::flash3)
            for (const topo::NodeGroup& g : cluster.groups)
                if (g.device.compute_capability < 9.0 || g.device.compute_capability >= 10.0)
                    fail_input("--attention-backend flash3 (FlashAttention-3) runs on Hopper GPUs alone (compute capability 9.0); the " +
                                   g.device.name + " devices of group '" + g.name + "' have compute capability " + capability(g) +
                                   " (flash: FlashAttention-2)",
                               {"", "", "--attention-backend"});
    }
    resolve_fp8(model, cluster, plan, l);
    resolve_fp8_bf16_layers(model, plan, l);
    resolve_recompute_modules(model, plan, l);
    resolve_recompute_method(model, plan, l);
    resolve_cross_entropy_fusion(model, plan, l);
    resolve_vocab_multiple(model, plan, l);
    resolve_training(model, cluster, plan, l);
    resolve_fp8_param_gather(plan, l);   // after the offload is known
    resolve_zeropp(cluster, plan, l);
    resolve_mics(cluster, plan, l);
    // The blocks of one replica, once here: the model checks that tp splits its heads and widths
    // (bad_input, --tp) and that the micro-batch's sizes stay in range (out_of_range: the
    // micro-batch and sequence make them); their count sizes the graph.
    std::vector<Block> blocks;
    try {
        blocks = detail::replica_blocks(model, l, plan);
    } catch (const Error& e) {
        throw e.with_context({"", "", e.kind() == ErrorKind::out_of_range ? "--micro-batch" : "--tp"});
    }
    // Model states (at most 16 bytes per parameter, 28 moved by an optimizer step) stay inside
    // int64 wherever a strategy multiplies a parameter count by bytes.
    checked_mul(detail::total_params(blocks), 32, "bytes of model state of a replica");
    // Pipeline chunks are at most the layers, so pp × virtual stages and the stage sums stay small.
    if (plan.schedule == Schedule::interleaved && (plan.virtual_stages < 1 || plan.virtual_stages > static_cast<int>(blocks.size())))
        fail_input("--virtual-stages must be from 1 to the " + std::to_string(blocks.size()) + " blocks of " + model.name() +
                       ", found " + std::to_string(plan.virtual_stages),
                   {"", "", "--virtual-stages"});
    if (l.tp > 1 || l.pp > 1 || l.cp > 1 || l.ep > 1) check_model_parallel(model, plan, l, blocks);
    // Folding is exact where every node holds ranks of one data-parallel replica: then a mirror
    // replica's intra-node links carry only its own traffic, the same as its representative's.
    const int per_node = cluster.groups.front().devices_per_node;
    // Expert parallelism exchanges tokens between replicas: they are no longer mirrors.
    // Without shared links (Plan::fold_unshared) they fold wherever they sit, and so do the tensor
    // ranks of a stage, which run one program on their slices (Megatron's layers are symmetric
    // in the tensor rank); mixtures of experts route tokens per rank, so they never fold.
    const bool moe = model.is_transformer() && model.shape().is_moe();
    // With context parallelism a replica is its tp · cp consecutive ranks (Layout::rank). Where
    // a node holds k = devices per node / (tp · cp) whole replicas of one stage (dp a multiple of
    // k, so every stage starts a node), they share its links and NICs: the first k replicas of
    // each stage, the first node of the stage, are kept whole (fold_width), and every other
    // node of the stage mirrors them, as an offloaded data-parallel node does.
    const int width = l.tp * l.cp;
    const int shared = per_node % width == 0 && cluster.num_devices() % per_node == 0 && l.dp % (per_node / width) == 0
                           ? per_node / width
                           : 0;
    // FSDP and ZeRO-3 with tensor parallelism fold as data parallelism does (below), not as the
    // model-parallel builder.
    // FSDP's hybrid sharding under pipeline stages leaves the kept replicas out of the other
    // shard groups' communicators: not folded (as below).
    const bool hybrid = plan.strategy == DataParallel::fsdp && plan.fsdp_sharding == FsdpSharding::hybrid;
    const bool model_parallel = (l.tp > 1 || l.pp > 1 || l.cp > 1) && (width % per_node == 0 || shared > 0 || plan.fold_unshared) &&
                                l.ep == 1 && !moe && !sharded_with_tp(plan, l) && !hybrid;
    // Pure data parallelism (DDP, Horovod, ZeRO, FSDP sharding over every replica): replicas
    // only meet in collectives, which run over every member, so folding is exact wherever they
    // sit — unless a hybrid FSDP shard group leaves replica 0 out of a communicator. Offloaded,
    // copies to host memory or NVMe and host optimizer steps share a node's PCIe, DRAM, cores and
    // drives with its neighbours: then the first node's replicas are kept whole (fold_width), and
    // each other node mirrors them.
    const bool offloaded = l.param_offload != Offload::none || l.optimizer_offload != Offload::none || l.activation_offload;
    const bool whole_nodes = !offloaded || (l.devices == l.dp && l.dp % per_node == 0 && l.dp > per_node);
    // hpZ's secondary gathers run over groups of consecutive ranks, not every member: groups of
    // whole nodes share no links, smaller ones may (a PCIe switch), so they are not folded.
    // qgZ's across-node groups (one rank of each node) may share a node's NICs: not folded either.
    // MiCS's boundary all-reduces run over one rank of every shard group, and its hierarchical
    // gathers over one rank of every node, most of them without a kept replica's rank, so their
    // traffic would go unsimulated: not folded beyond one group, nor with the hierarchical gather.
    const bool zeropp_groups_fold = (plan.zero_hpz_partition_size <= 1 || plan.zero_hpz_partition_size % per_node == 0) &&
                                    (plan.zero_mics_shard_size <= 0 || (plan.zero_mics_shard_size >= l.dp && !plan.zero_mics_hierarchical)) &&
                                    l.qgz_node_ranks == 0;
    const bool data_parallel = l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && whole_nodes && zeropp_groups_fold &&
                               plan.strategy != DataParallel::ps && plan.strategy != DataParallel::ps_async &&
                               plan.strategy != DataParallel::hybrid_cnn &&   // workers exchange activations
                               !hybrid;
    // FSDP or ZeRO-3 with tensor parallelism: a replica is tp consecutive ranks, and replicas meet
    // only in the sharding's collectives, over every replica of a tensor rank. Where nodes hold
    // whole replicas, the first node's are kept whole (their tensor-parallel collectives share its
    // links) and every other node mirrors them — not with FSDP's hybrid sharding, as above.
    const bool sharded_tp = sharded_with_tp(plan, l) && !hybrid && per_node % l.tp == 0 && cluster.num_devices() % per_node == 0 &&
                            l.dp % (per_node / l.tp) == 0;
    // A slow device or jitter (--slow, --jitter) makes replicas differ: not mirrors either.
    const bool alike = cluster.groups.size() == 1 && cluster.uniform_speed();
    l.folded_tp = plan.fold && plan.fold_unshared && l.tp > 1 && alike && model_parallel;
    l.folded = (plan.fold && l.dp > 1 && alike && l.servers == 0 && (model_parallel || data_parallel || sharded_tp)) || l.folded_tp;
    l.fold_width = !l.folded                                                    ? 1
                   : offloaded && data_parallel                                 ? per_node
                   : model_parallel && !l.folded_tp && !plan.fold_unshared && shared > 1 ? shared
                   : sharded_tp                                                 ? per_node / l.tp
                                                                                : 1;
    if (l.folded && !l.folded_tp && l.fold_width >= l.dp) {   // one node's replicas: nothing mirrors them
        l.folded = false;
        l.fold_width = 1;
    }
    l.estimated_ops = estimated_ops(l, plan, blocks);
    if (plan.strategy == DataParallel::hybrid_cnn)
        l.estimated_ops += std::min(hybrid_extra_ops(model, l, plan), std::numeric_limits<std::int64_t>::max() - l.estimated_ops);
    if (l.estimated_ops > kMaxOps) {
        // Say what makes the ops: the gradient buckets (a tiny bucket size) or the passes.
        const Estimate e = estimate(l, plan, blocks);
        const bool buckets = e.bucket_ops > e.ops / 2;
        const char* bucket_flag = plan.strategy == DataParallel::ring ? "--fusion-mb" : "--bucket-mb";
        throw Error(ErrorKind::out_of_range,
                    "the plan needs about " + ops_text(l.estimated_ops) + " ops, more than the " + ops_text(kMaxOps) +
                        " an op graph holds: " +
                        (buckets ? "its " + ops_text(static_cast<std::int64_t>(e.buckets)) + " gradient buckets need a larger " +
                                       bucket_flag
                                 : std::string("fewer micro-batches (a smaller --global-batch or a larger --micro-batch), "
                                               "fewer devices (--nodes, --devices)") +
                                       (l.dp > 1 && !l.folded && !plan.fold ? ", or folded replicas (leave out --no-fold)"
                                                                                        : "")),
                    {"", "", buckets ? bucket_flag : "--global-batch"});
    }
    return l;
}

namespace {

/// The step's model FLOPs (Narayanan et al. eq. 3: forward, backward, recompute; Model::
/// flops_per_iteration, whose blocks count every key of the attention). With LoRA or QLoRA,
/// those of the passes fine-tuning runs on the same blocks (strategies/finetune.hpp): a frozen
/// weight's backward computes its input gradient only, so a layer costs about 2 × forward, not
/// 3 ×, plus the adapters' own.
Flops model_flops(const Model& model, const Layout& layout, const Plan& plan) {
    if (layout.finetune.kind == FineTuneKind::full)
        return model.flops_per_iteration(layout.global_batch, layout.seq, plan.recompute, plan.recompute_modules);
    Workload w;   // one sample, as flops_per_iteration takes it
    w.micro_batch = 1;
    w.seq = layout.seq;
    w.recompute = plan.recompute;
    w.recompute_modules = plan.recompute_modules;
    std::vector<Block> blocks = model.blocks(w);
    Layout whole = layout;   // the model's blocks are whole, not one tensor rank's
    whole.tp = 1;
    const Training trained = apply_finetune(model, whole, blocks);
    double per_sample = 0;
    for (const BlockKernels& k : trained.kernels)
        for (const std::vector<Kernel>* pass : {&k.fwd, &k.bwd, &k.recompute})
            for (const Kernel& kernel : *pass) per_sample += kernel.flops;
    return Flops(per_sample * static_cast<double>(layout.global_batch));
}

}  // namespace

Built build(const Model& model, const topo::Cluster& cluster, const Plan& plan) {
    const Layout layout = resolve(model, cluster, plan);
    // Expert parallelism needs the model-parallel builder's per-layer passes (strategies/moe.hpp).
    const bool model_parallel = (layout.tp > 1 || layout.pp > 1 || layout.cp > 1 || layout.ep > 1) && !sharded_with_tp(plan, layout);
    Built out{model_parallel ? build_model_parallel(model, layout, plan) : build_data_parallel(model, cluster, layout, plan),
              layout, model_flops(model, layout, plan)};
    out.graph.set_dispatch_overhead(layout.framework.dispatch_per_kernel);
    out.graph.finalize();
    return out;
}

}  // namespace smol::strategies
