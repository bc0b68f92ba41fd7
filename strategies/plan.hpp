// The plan: how a model is laid out on a cluster, as the user asked for it on the command line,
// and the Layout it resolves to once checked against the model and the cluster.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/compression.hpp"
#include "strategies/framework.hpp"
#include "topologies/cluster.hpp"

namespace smol::strategies {

/// The data-parallel flavour (--strategy). hybrid_cnn is Krizhevsky's "one weird trick"
/// (strategies/hybrid_cnn.hpp): data parallelism for the convolutional layers, model parallelism
/// for the fully connected ones.
enum class DataParallel { ps, ps_async, ring, ddp, zero1, zero2, zero3, fsdp, hybrid_cnn };
const char* to_string(DataParallel s);
DataParallel parse_data_parallel(const std::string& text);   // bad_input lists the valid names

enum class Schedule { gpipe, one_f_one_b, interleaved, zb_h1 };
const char* to_string(Schedule s);
Schedule parse_schedule(const std::string& text);

/// How hybrid-cnn exchanges the last convolutional activations (--hybrid-variant): Krizhevsky
/// 2014's schemes (a), (b) and (c) (strategies/hybrid_cnn.hpp).
enum class HybridVariant { all_gather, broadcast, chunked };
const char* to_string(HybridVariant v);
HybridVariant parse_hybrid_variant(const std::string& text);

/// Where parameter-server shards run (--ps-placement): on extra devices after the workers, or
/// on the first S workers.
enum class PsPlacement { dedicated, colocated };
const char* to_string(PsPlacement p);
PsPlacement parse_ps_placement(const std::string& text);

/// PyTorch FSDP's ShardingStrategy (--fsdp-sharding): FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD.
enum class FsdpSharding { full, grad_op, hybrid, none };
const char* to_string(FsdpSharding f);
FsdpSharding parse_fsdp_sharding(const std::string& text);
/// When FSDP gathers the next unit in backward (FSDP's BackwardPrefetch, PyTorch
/// torch/distributed/fsdp/api.py): `pre` (BACKWARD_PRE, the default, and FSDP2's one-module
/// prefetch) before the current unit's gradient computation, `post` (BACKWARD_POST) after it, in
/// its post-backward hook, `none` at the next unit's own pre-backward hook, after the current
/// unit's reduce-scatter.
enum class FsdpBackwardPrefetch { pre, post, none };
const char* to_string(FsdpBackwardPrefetch p);
FsdpBackwardPrefetch parse_fsdp_backward_prefetch(const std::string& text);
/// Megatron's --recompute-method under --recompute full: uniform (every layer recomputed, each
/// from its own input: what --recompute full is alone) or block (only the first
/// --recompute-num-layers layers; the others keep their activations).
enum class RecomputeMethod { uniform, block };
const char* to_string(RecomputeMethod m);
RecomputeMethod parse_recompute_method(const std::string& text);

/// How layers are cut into pipeline stages (--partition): `equal` layers per stage, as Megatron
/// does (it requires the layers to divide); `balanced` by FLOPs, embedding and head included;
/// `speed` by each stage's time on its own devices, within their memory (tools/pipeline_split.*
/// computes it with the simulator's compute model and passes it on as stage_layers; here,
/// without the devices, FLOPs stand in, which is the same split on one device kind).
enum class Partition { equal, balanced, speed };
const char* to_string(Partition p);
Partition parse_partition(const std::string& text);

/// Where a model state lives between uses (--offload, --offload-params, --offload-optimizer):
/// on the device, in host memory, or on the node's NVMe drive.
enum class Offload { none, cpu, nvme };
const char* to_string(Offload o);
/// `flag` names the option in the error ("--offload", "--offload-params", …).
Offload parse_offload(const std::string& text, const char* flag = "--offload");

/// The optimizer (--optimizer), strategies/optimizer.hpp: Adam (AdamW: the same state and
/// traffic), bitsandbytes' block-wise 8-bit AdamW, SGD with momentum, LAMB.
enum class Optimizer { adam, adamw_8bit, sgd, lamb };
const char* to_string(Optimizer o);
Optimizer parse_optimizer(const std::string& text);

/// What is trained (--finetune, strategies/finetune.hpp): every weight; LoRA adapters on frozen
/// 16-bit weights (Hu et al. 2021); QLoRA adapters on frozen 4-bit NF4 weights (Dettmers et al. 2023).
enum class FineTuneKind { full, lora, qlora };
struct FineTune {
    FineTuneKind kind = FineTuneKind::full;
    int rank = 0;                        // adapter rank r
    std::vector<KernelName> targets;     // the weight GEMMs that get adapters (KernelName)
    bool operator==(const FineTune&) const = default;
};
/// "full", "lora:RANK[:TARGETS]" or "qlora:RANK[:TARGETS]"; TARGETS is a comma list of qkv,
/// attn_proj, mlp_up, mlp_down, router (default: the first four, every linear layer of a block;
/// router: a mixture of experts' routers).
FineTune parse_finetune(const std::string& text);
std::string to_string(const FineTune& f);

/// What the user asked for. Zero means "derive it".
struct Plan {
    DataParallel strategy = DataParallel::ddp;
    int tp = 1;
    int pp = 1;
    int cp = 1;                       // context parallelism (--cp, strategies/context_parallel.hpp)
    CpComm cp_comm = CpComm::p2p;     // how its attention exchanges keys and values (--cp-comm)
    int dp = 0;                       // 0: devices / (tp · cp · pp)
    Schedule schedule = Schedule::one_f_one_b;
    int virtual_stages = 1;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    /// What selective recompute redoes (--recompute-modules, Megatron core's; default core_attn).
    RecomputeModules recompute_modules;
    /// Megatron's --recompute-method and --recompute-num-layers with --recompute full (unset:
    /// uniform, 1: every layer).
    std::optional<RecomputeMethod> recompute_method;
    std::optional<int> recompute_num_layers;
    Offload offload = Offload::none;            // --offload: every state the strategy can move (see resolve)
    Offload offload_params = Offload::none;     // --offload-params (zero3)
    Offload offload_optimizer = Offload::none;  // --offload-optimizer (zero1-3)
    bool delayed_update = false;                // --delayed-update: ZeRO-Offload's one-step delayed update
    Offload offload_activations = Offload::none; // --offload-activations cpu: DeepSpeed's cpu_checkpointing
    FineTune finetune;                          // --finetune
    Optimizer optimizer = Optimizer::adam;      // --optimizer
    Compression compress;                       // --compress: gradient compression (ddp, ring)
    std::int64_t global_batch = 0;    // 0: dp · micro_batch (one micro-batch per replica)
    int micro_batch = 1;
    int seq = 0;                      // 0: the model's default
    std::optional<DType> dtype;       // unset: the device's default (bf16, or fp32 on CPUs)
    /// Gradient bucket in MiB (--bucket-mb); unset: the framework's (Layout::bucket).
    std::optional<double> bucket_mb;
    /// DDP's smaller first bucket in MiB (--first-bucket-mb); unset: PyTorch's 1 MiB (Layout::first_bucket).
    std::optional<double> first_bucket_mb;
    std::vector<int> stage_layers;
    /// Unset: equal for transformers (Megatron's), balanced for layer lists; speed where the
    /// stages sit on different device kinds (tools/pipeline_split.hpp).
    std::optional<Partition> partition;
    bool fold = true;                 // fold identical data-parallel replicas where it is exact (--no-fold)
    /// The graph is for a network model that shares no links (sim's analytic network: every
    /// transfer's time is its own route's latency and bandwidth). Folding is then exact wherever
    /// ranks run the same program, so replicas fold whichever nodes they share, and so do the
    /// tensor ranks of a stage. The tools set it with --network analytic.
    bool fold_unshared = false;
    // Data-parallel family (strategies/parameter_server, horovod, zero, fsdp).
    int ps_servers = 1;               // parameter-server shards (--ps-servers)
    PsPlacement ps_placement = PsPlacement::dedicated;
    int staleness = 4;                // ps-async: a worker runs at most K updates ahead of the slowest
    bool hogwild = false;             // ps-async --hogwild: lock-free updates in one node's shared memory (parameter_server.hpp)
    double fusion_mb = 64;            // Horovod tensor fusion buffer in MiB (HOROVOD_FUSION_THRESHOLD)
    double cycle_ms = 5;              // Horovod background cycle time (HOROVOD_CYCLE_TIME)
    FsdpSharding fsdp_sharding = FsdpSharding::full;
    int fsdp_group = 0;               // hybrid: devices per shard group; 0: the devices of a node
    /// fsdp: the dtype its gradients are reduced in (MixedPrecision's reduce_dtype); unset: the
    /// parameters' (--dtype), which PyTorch's MixedPrecision and MixedPrecisionPolicy take when
    /// only param_dtype is given. torchtitan reduces in fp32 (training.mixed_precision_reduce).
    std::optional<DType> fsdp_reduce_dtype;
    FsdpBackwardPrefetch fsdp_backward_prefetch = FsdpBackwardPrefetch::pre;
    /// fsdp: gradient accumulation under FSDP's no_sync() (FSDP2: set_requires_gradient_sync(False)),
    /// what Hugging Face Accelerate does by default: each unit's gradient accumulates unsharded
    /// through the micro-batches and is reduce-scattered after the last one only.
    bool fsdp_no_sync = false;
    HybridVariant hybrid_variant = HybridVariant::all_gather;   // hybrid-cnn (--hybrid-variant)
    // The framework whose behaviour the graph follows (strategies/framework.hpp).
    std::string framework;            // "megatron@2.5"; empty: the plan's default
    bool overlap_grad_reduce = false; // Megatron's --overlap-grad-reduce, DeepSpeed's overlap_comm
    bool overlap_p2p_comm = false;    // Megatron's --overlap-p2p-comm
    bool overlap_param_gather = false; // Megatron's --overlap-param-gather (zero1: its distributed optimizer)
    bool overlap_param_gather_with_optimizer_step = false;   // Megatron's, under the interleaved schedule
    bool tp_comm_overlap = false;      // Megatron's --tp-comm-overlap (Transformer Engine's userbuffers)
    /// Megatron's --overlap-cpu-optimizer-d2h-h2d, with its --optimizer-cpu-offload: the step's
    /// copies out, CPU steps and copies back pipelined parameter by parameter.
    bool overlap_cpu_optimizer_d2h_h2d = false;
    /// Megatron's --optimizer-offload-fraction with its CPU offload: the share of each rank's
    /// optimizer shard stepped on the host, the rest on the device (unset: all of it).
    std::optional<double> optimizer_offload_fraction;
    /// ZeRO++ (DeepSpeed 0.10+, zero3 only; strategies/zero.cpp build_zero3): qwZ, every
    /// parameter gather quantized to int8 blocks with fp32 scales (zero_quantized_weights); hpZ, a
    /// secondary partition over groups of this many consecutive ranks, which every gather after
    /// the step's first forward uses (zero_hpz_partition_size; 1: none).
    bool zero_quantized_weights = false;
    int zero_hpz_partition_size = 1;
    /// ZeRO++'s qgZ (zero_quantized_gradients): each gradient tensor reduced by int4 all-to-alls,
    /// inside each node then across nodes (Layout::qgz_node_ranks).
    bool zero_quantized_gradients = false;
    /// qgZ with LoCo's error feedback (zeropp_loco_param, DeepSpeed 0.16.2+): each quantized
    /// gradient's errors kept in int8 between steps and added back before the next quantization.
    bool zero_loco = false;
    /// MiCS (DeepSpeed 0.9.2+, zero3 only; mics_shard_size): parameters, gradients and optimizer
    /// state sharded over groups of this many consecutive ranks and replicated across the groups,
    /// whose gradient partitions are all-reduced at the accumulation boundary (0: off).
    int zero_mics_shard_size = 0;
    /// MiCS's two-level gather (mics_hierarchical_params_gather; a shard group over several
    /// nodes): across nodes among the ranks of one local index, then inside each node.
    bool zero_mics_hierarchical = false;
    /// From a DeepSpeed config (strategies/deepspeed_config.hpp): the framework's knobs, and its
    /// gradient_accumulation_steps (0: unset; the global batch is then dp × micro-batch × steps).
    struct FrameworkOverrides {
        std::optional<bool> overlap_comm;
        std::optional<std::int64_t> reduce_bucket, prefetch_bucket, max_live_parameters, max_reuse_distance,
            param_persistence_threshold, sub_group_size, optimizer_swap_buffers, param_swap_buffers, param_swap_buffer_size;
        std::optional<Time> dispatch_per_kernel;   // --dispatch-overhead
    } framework_overrides;
    int gradient_accumulation = 0;
    // Mixture of experts (strategies/moe.hpp).
    int ep = 1;                       // expert parallelism: experts sharded over ep data-parallel ranks (--ep)
    double expert_imbalance = 1;      // the busiest expert's tokens over the mean (--expert-imbalance)
    double capacity_factor = 0;       // GShard's fixed expert capacity; 0: dropless (--capacity-factor)
    /// How attention runs (--attention); unset: flash on GPUs of compute capability 8.0 or later
    /// (FlashAttention-2 runs on Ampere and later), eager elsewhere.
    std::optional<Attention> attention;
    /// Whose fused attention kernel runs flash attention (--attention-backend, Megatron core's
    /// flag); unset: the framework's choice (Layout::attention_backend).
    std::optional<AttentionBackend> attention_backend;
    /// FP8 linear layers as Transformer Engine runs them under Megatron core (--fp8 RECIPE):
    /// their GEMMs at the devices' FP8 rate, the casts before them, FP8 copies of their weights
    /// and inputs. none: every GEMM in the training dtype.
    Fp8Recipe fp8 = Fp8Recipe::none;
    /// Megatron core's --first-last-layers-bf16 (core 0.12 on): with fp8, the first
    /// num_layers_at_start_in_bf16 and the last num_layers_at_end_in_bf16 transformer layers (1 each
    /// unless given) stay in the 16-bit dtype.
    bool first_last_layers_bf16 = false;
    /// Megatron core's --fp8-param-gather (core 0.9 on), with the distributed optimizer (zero1) or
    /// Megatron-FSDP:
    /// the FP8 linear layers' weights are kept in FP8 (no 16-bit copy), the optimizer step casts its
    /// fp32 shard to FP8, and the all-gather moves one byte per FP8 weight.
    bool fp8_param_gather = false;
    std::optional<int> num_layers_at_start_in_bf16, num_layers_at_end_in_bf16;
    /// Megatron core's fused cross-entropy (--cross-entropy-fusion): the loss's kernels as
    /// Megatron's fused function or Transformer Engine's run them (core/transformer.cpp
    /// loss_forward_kernels); none: the unfused vocab-parallel loss.
    CrossEntropyFusion cross_entropy_fusion = CrossEntropyFusion::none;
    /// Megatron's --make-vocab-size-divisible-by: the vocabulary padded to a multiple of this ×
    /// tp; unset: the framework's default (Framework::vocab_multiple).
    std::optional<int> vocab_multiple;
};

/// The plan resolved against a model and a cluster: every number known and consistent.
struct Layout {
    int devices = 0;
    int tp = 1, pp = 1, dp = 1;
    /// Context-parallel ranks: each holds 1/cp of every sequence (strategies/context_parallel.hpp).
    /// The cp ranks of a group train the same samples, so the replicas are the dp groups, and the
    /// gradients are reduced over the dp · cp ranks of a stage (Megatron's data-parallel group with
    /// context parallelism).
    int cp = 1;
    int microbatches = 1;             // per replica per step (gradient accumulation steps)
    int micro_batch = 1;
    std::int64_t global_batch = 1;
    int seq = 1;
    DType dtype = DType::bf16;
    int servers = 0;                  // dedicated parameter servers: ranks dp·tp·pp … devices − 1
    int shard_group = 0;              // FSDP hybrid: ranks per shard group (consecutive ranks)
    /// ZeRO++'s qgZ where it runs (more than one node): the ranks of a node, DeepSpeed's
    /// device_count(); 0: gradients reduce-scattered.
    int qgz_node_ranks = 0;
    /// MiCS's hierarchical gather: the shard group's ranks on one node, as DeepSpeed counts them
    /// (shard size / (shard size // device_count())); 0: one-level gathers.
    int mics_node_ranks = 0;
    /// FSDP: bytes per gradient element of its reduce-scatters (and all-reduces) and of the
    /// unsharded gradients they reduce (Plan::fsdp_reduce_dtype).
    int fsdp_reduce_bytes = 2;
    /// Data-parallel replicas folded (see OpGraph::set_representatives), unless Plan::fold is
    /// off, on a homogeneous cluster: a tensor / pipeline plan whose nodes each hold ranks of one
    /// replica only (tp · cp a multiple of the devices per node) or whole replicas of one stage
    /// (the devices per node a multiple of tp · cp, and dp of the replicas a node holds), or pure
    /// data parallelism (ddp, ring, zero1-3, fsdp but hybrid). With Plan::fold_unshared, any
    /// tensor / pipeline plan without experts, whatever the nodes hold.
    bool folded = false;
    /// Replicas a folded layout keeps: 1, or the first node's where a node holds several — with
    /// offload every replica of a data-parallel node (its devices per node), which share that
    /// node's PCIe, DRAM, cores and drives as every node's do; of a tensor / pipeline plan the
    /// devices per node / (tp · cp) replicas of each stage's first node, which share its links
    /// and NICs. Replica d then mirrors replica d mod fold_width.
    int fold_width = 1;
    /// Of a folded tensor / pipeline plan (Plan::fold_unshared only), the tensor ranks of each stage
    /// too: every rank of stage s mirrors rank (t 0, replica 0, s).
    bool folded_tp = false;

    /// The framework's behaviour, with the plan's overrides applied (grad_reduce, overlap_p2p).
    Framework framework;
    /// Data-parallel gradient buckets, bytes of gradients, in reverse block order (make_buckets):
    /// --bucket-mb, else the framework's (resolve_buckets in plan.cpp); the first may be smaller
    /// (PyTorch DDP's). Horovod's fusion buffer and DeepSpeed's ZeRO-1/2 buckets are their own.
    Bytes bucket{0}, first_bucket{0};

    int ep = 1;                       // expert-parallel ranks, within the data-parallel group (strategies/moe.hpp)
    Attention attention = Attention::eager;
    /// Whose kernel runs flash attention: cuDNN's fused attention under Megatron core on Hopper
    /// and later (Transformer Engine's choice), FlashAttention-2 elsewhere, unless
    /// --attention-backend says.
    AttentionBackend attention_backend = AttentionBackend::flash;
    Fp8Recipe fp8 = Fp8Recipe::none;  // Plan::fp8, checked against the framework, dtype and devices
    int fp8_bf16_first = 0, fp8_bf16_last = 0;   // Plan::first_last_layers_bf16's layers, checked
    bool fp8_param_gather = false;   // Plan::fp8_param_gather, checked (zero1 under Megatron core with --fp8)
    /// Full recompute's layers under Megatron's block method (Workload::recomputed_layers); empty: all.
    std::vector<bool> recomputed_layers;
    /// An upper estimate of the ops build() emits (estimated_ops): what building and simulating
    /// the plan costs in memory, known before either starts.
    std::int64_t estimated_ops = 0;
    /// Where the model states live (resolved from --offload, --offload-params and
    /// --offload-optimizer for the strategy; see resolve).
    Offload param_offload = Offload::none;      // parameter shards (zero3, fsdp)
    Offload optimizer_offload = Offload::none;  // optimizer state, fp32 gradients and the step (zero1-3, fsdp)
    bool delayed_update = false;
    /// DeepSpeed's cpu_checkpointing: each layer's activation checkpoint copied to host memory after
    /// its forward and back before its recompute.
    bool activation_offload = false;
    /// Unified memory on every device (Jetson, CPU boards): offload moves no bytes and adds no
    /// capacity, so the strategies keep every state where it is.
    bool unified_memory = false;
    /// The plan asked for CPU offload on unified memory, where it changes nothing (resolve keeps
    /// the states where they are); the command line says so.
    bool offload_ignored = false;
    FineTune finetune;
    Optimizer optimizer = Optimizer::adam;

    /// The ranks of a stage that hold one tensor slice: the data- and context-parallel slots,
    /// d = c + cp · replica.
    int dp_cp() const { return dp * cp; }
    /// Megatron order ("tp-cp-ep-dp-pp", megatron/core/parallel_state.py): tensor-parallel fastest,
    /// then context-parallel, then data-parallel, then pipeline; `d` is the slot c + cp · replica.
    int rank(int t, int d, int p) const { return t + tp * (d + dp * cp * p); }
};

/// FSDP, ZeRO-2 or ZeRO-3 over data-parallel replicas of tensor-parallel shards (torchtitan's
/// 2-D mesh, dp × tp; Megatron-DeepSpeed's layers on DeepSpeed's engine, zero.Init with its mpu
/// for stage 3), and ZeRO-1 on DeepSpeed's engine (elsewhere zero1 is Megatron's distributed
/// optimizer): built by the data-parallel engines (strategies/zero.hpp build_sharded,
/// build_zero, build_zero3), not the model-parallel one.
inline bool sharded_with_tp(const Plan& plan, const Layout& l) {
    const bool deepspeed_zero1 = plan.strategy == DataParallel::zero1 && deepspeed_engine(l.framework.name);
    return (plan.strategy == DataParallel::fsdp || plan.strategy == DataParallel::zero2 || plan.strategy == DataParallel::zero3 ||
            deepspeed_zero1) &&
           l.tp > 1 && l.pp == 1 && l.cp == 1 && l.ep == 1;
}

/// The largest --make-vocab-size-divisible-by taken (Megatron's recipes give 128; the bound keeps
/// the padded vocabulary × tp well inside the 64-bit products of core/transformer.cpp).
inline constexpr int kMaxVocabMultiple = 65536;

/// Refuses (bad_input, naming --make-vocab-size-divisible-by) a multiple outside
/// 1–kMaxVocabMultiple, or any for a layer list, which has no vocabulary.
void check_vocab_multiple(const Model& model, int multiple);

/// Whether `framework` pads the vocabulary to --make-vocab-size-divisible-by × tp: Megatron-LM
/// and Megatron-DeepSpeed (Framework::vocab_multiple).
bool pads_vocabulary(const Framework& framework);

/// Why `framework` cannot run --cross-entropy-fusion `f` (empty: it can): Megatron core's fusion
/// by release (Framework::cross_entropy_fusion_native, _te, _te_refused).
std::string cross_entropy_fusion_refusal(const Framework& framework, CrossEntropyFusion f);

/// Why selective recompute of `module` (Megatron core's --recompute-modules) would have nothing to
/// redo in `model`, or empty when it has: mlp needs a dense layer, moe_act and moe an MoE layer,
/// shared_experts shared experts, mla_up_proj latent attention, layernorm a norm that is a module
/// of its own under Transformer Engine's spec (an MoE layer's pre-MLP norm, MLA's input norm).
std::string recompute_module_idle(const Model& model, RecomputeModule module);
/// The module sets worth trying under selective recompute, lightest first (what the
/// out-of-memory advice and `sweep --recompute-modules` offer): every module of `framework`'s
/// --recompute-modules with something to redo in `model` but moe; then with moe, which holds
/// moe_act and shared_experts. Empty where the framework recomputes the attention core alone.
std::vector<RecomputeModules> recompute_module_tiers(const Model& model, const Framework& framework);

/// Checks the plan against the model and cluster; throws bad_input saying why a plan is
/// impossible (tp·pp·dp ≠ devices, micro-batch not dividing the per-replica batch, …), naming
/// the flag to change, and out_of_range where the plan's sizes overflow (a micro-batch whose
/// activations pass 2^63 bytes) or its graph would pass kMaxOps.
Layout resolve(const Model& model, const topo::Cluster& cluster, const Plan& plan);

/// The most ops a graph may hold: OpGraph numbers ops and edges with 32 bits; a plan estimated
/// beyond this is refused by resolve (long before the machine's memory runs out, see
/// tools::check_simulable for that limit).
inline constexpr std::int64_t kMaxOps = std::int64_t{1} << 31;

/// An upper estimate of the ops build() emits for `layout`: per materialised rank, per
/// micro-batch, per block of its stage, the passes, activation buffers, tensor-parallel
/// collectives and sharded gathers; the pipeline's sends; the gradient buckets; the model
/// states. tests/strategies checks it bounds the real count, within a small factor.
std::int64_t estimated_ops(const Layout& layout, const Plan& plan, const std::vector<Block>& blocks);

/// The strategy's output: the graph plus what the summary needs to know about it.
struct Built {
    OpGraph graph;
    Layout layout;
    Flops model_flops;                 // per iteration (Narayanan et al. 2021, eq. 3)
};

/// The one entry point: (model, cluster, plan) → op graph. Pure: no clock, no I/O.
Built build(const Model& model, const topo::Cluster& cluster, const Plan& plan);

}  // namespace smol::strategies
