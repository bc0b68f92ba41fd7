#include "tools/plan_flags.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tools/gzip_stream.hpp"
#include "topologies/profile.hpp"
#include "tools/output_file.hpp"
#include "strategies/deepspeed_config.hpp"
#include "strategies/framework.hpp"
#include "traces/chrome_trace.hpp"

namespace smol::tools {

std::optional<Time> parse_dispatch_overhead(const std::string& text) {
    if (text.empty()) return std::nullopt;
    Time t;
    try {
        t = parse_time(text);
    } catch (const Error&) {
        fail_input("a duration such as \"20 us\"", "'" + text + "'", flag("--dispatch-overhead"));
    }
    if (t < Time::zero() || t > Time::ms(100)) fail_input("a duration from 0 to 100 ms", "'" + text + "'", flag("--dispatch-overhead"));
    return t;
}

void add_plan_flags(CLI::App& app, PlanFlags& f) {
    f.app = &app;
    app.add_option("--model", f.model, "model preset or JSON file (smolcluster's own or a HuggingFace config.json)")
        ->required();
    app.add_option("--cluster", f.cluster, "cluster preset, JSON file, or presets composed as NAME:NODES,NAME:NODES")
        ->required();
    app.add_option("--cluster-network", f.cluster_network,
                   "network joining a composed cluster's groups: switch or fat-tree (default: one switch)");
    app.add_option("--nodes", f.nodes, "scale the cluster to N nodes");
    app.add_option("--devices", f.devices, "use the first N devices of the cluster (default: all)");
    app.add_option("--strategy", f.strategy, "data-parallel flavour: ps, ps-async, ring, ddp, zero1, zero2, zero3, fsdp, hybrid-cnn")->capture_default_str();
    app.add_option("--tp", f.tp, "tensor-parallel degree")->capture_default_str();
    app.add_option("--pp", f.pp, "pipeline-parallel degree")->capture_default_str();
    app.add_option("--cp", f.cp,
                   "context-parallel degree: each sequence split over N ranks, attention as Transformer Engine's ring "
                   "(Megatron's --context-parallel-size)")
        ->capture_default_str();
    app.add_option("--cp-comm", f.cp_comm,
                   "with --cp: p2p (the keys and values passed round a ring under the attention steps, default), "
                   "all-gather (gathered before attention, their gradients reduce-scattered after; Llama 3's) or a2a "
                   "(all-to-alls trade the sequence split for a head split around attention; DeepSpeed-Ulysses)");
    app.add_option("--dp", f.dp, "data-parallel degree (default: devices / (tp · cp · pp))");
    app.add_option("--schedule", f.schedule, "pipeline schedule: gpipe, 1f1b, interleaved, zb-h1")->capture_default_str();
    app.add_option("--virtual-stages", f.virtual_stages, "model chunks per device (interleaved)")->capture_default_str();
    app.add_option("--stage-layers", f.stage_layers,
                   "layers per pipeline stage, e.g. 5,6,6,5 (pp × virtual stages entries; default: --partition)")
        ->delimiter(',');
    app.add_option("--partition", f.partition,
                   "pipeline stages: equal (Megatron's: layers must divide; default for transformers), balanced (by FLOPs) or "
                   "speed (by each stage's time on its devices, within their memory; default where stages sit on "
                   "different device kinds)");
    app.add_flag("--sp", f.sp, "sequence parallelism (with --tp)");
    app.add_option("--recompute", f.recompute, "activation recompute: none, selective, full")->capture_default_str();
    app.add_option("--recompute-method", f.recompute_method,
                   "with --recompute full, Megatron's: uniform (every layer; the default) or block (only the first "
                   "--recompute-num-layers layers of each pipeline chunk, the others keep their activations)");
    app.add_option("--recompute-num-layers", f.recompute_num_layers,
                   "with --recompute-method: Megatron's layer count (block: how many first layers recompute; uniform: 1)");
    app.add_option("--recompute-modules", f.recompute_modules,
                   "with --recompute selective: what it redoes, Megatron core's --recompute-modules: core_attn (the "
                   "default), mlp, moe_act, layernorm, mla_up_proj, moe, shared_experts, comma-separated");
    app.add_option("--offload", f.offload,
                   "none, cpu or nvme: zero1/zero2 offload the optimizer (ZeRO-Offload), zero3 parameters and optimizer "
                   "(ZeRO-Infinity), fsdp parameters, gradients and optimizer to the CPU")
        ->capture_default_str();
    app.add_option("--offload-params", f.offload_params, "zero3: parameter partitions in cpu memory or on nvme")
        ->capture_default_str();
    app.add_option("--offload-optimizer", f.offload_optimizer, "zero1-3: optimizer state and step on the cpu (zero3: or nvme)")
        ->capture_default_str();
    app.add_option("--offload-activations", f.offload_activations,
                   "zero1-3 with --recompute full: activation checkpoints in cpu memory (DeepSpeed's cpu_checkpointing)")
        ->capture_default_str();
    app.add_flag("--delayed-update", f.delayed_update,
                 "ZeRO-Offload's one-step delayed parameter update: the CPU step overlaps the next step");
    app.add_option("--finetune", f.finetune,
                   "full, lora:RANK[:TARGETS] or qlora:RANK[:TARGETS] (TARGETS from qkv,attn_proj,mlp_up,mlp_down,router; default the first four)")
        ->capture_default_str();
    app.add_option("--optimizer", f.optimizer, "adam, adamw-8bit, sgd or lamb")->capture_default_str();
    app.add_option("--compress", f.compress,
                   "gradient compression for ddp and ring: none, 1bit (1-bit SGD with error feedback), topk:RATIO "
                   "(sparse top-k with error feedback, e.g. topk:0.01) or powersgd:RANK (PowerSGD's rank-RANK factors, "
                   "e.g. powersgd:4)")
        ->capture_default_str();
    app.add_option("--global-batch", f.global_batch, "samples per step (default: dp × micro-batch)");
    app.add_option("--micro-batch", f.micro_batch, "samples per micro-batch")->capture_default_str();
    app.add_option("--seq", f.seq, "sequence length (default: the model's)");
    app.add_option("--dtype", f.dtype, "bf16, fp16 or fp32 (default: bf16 on GPUs, fp32 on CPUs)");
    app.add_option("--bucket-mb", f.bucket_mb,
                   "gradient bucket size in MiB (default: the framework's: PyTorch DDP 25; Megatron max(4e7, 1e6 x dp) "
                   "parameters with --overlap-grad-reduce, else its whole gradient buffer)");
    app.add_option("--first-bucket-mb", f.first_bucket_mb, "PyTorch DDP's first (smaller) bucket in MiB (default 1)");
    app.add_option("--ps-servers", f.ps_servers, "parameter-server shards (ps, ps-async)")->capture_default_str();
    app.add_option("--ps-placement", f.ps_placement,
                   "dedicated (servers are the last devices; dp = devices - servers) or colocated (on workers)")
        ->capture_default_str();
    app.add_option("--staleness", f.staleness, "ps-async: updates a worker may run ahead of the slowest")
        ->capture_default_str();
    app.add_option("--fusion-mb", f.fusion_mb, "ring (Horovod): tensor fusion buffer in MiB")->capture_default_str();
    app.add_option("--cycle-ms", f.cycle_ms, "ring (Horovod): background cycle time in ms")->capture_default_str();
    app.add_option("--fsdp-sharding", f.fsdp_sharding, "fsdp: full, grad-op, hybrid or none")->capture_default_str();
    app.add_option("--fsdp-group", f.fsdp_group, "fsdp hybrid: devices per shard group (default: a node)");
    app.add_option("--fsdp-reduce-dtype", f.fsdp_reduce_dtype,
                   "fsdp: dtype its gradients are reduce-scattered in (MixedPrecision's reduce_dtype): fp32 (torchtitan's "
                   "mixed_precision_reduce) or the training dtype (default, PyTorch's when only param_dtype is set)");
    app.add_option("--fsdp-backward-prefetch", f.fsdp_backward_prefetch,
                   "fsdp (full or hybrid sharding): when backward gathers the next unit, FSDP's BackwardPrefetch: pre "
                   "(BACKWARD_PRE, before the current unit's gradients), post (BACKWARD_POST, after them) or none (after "
                   "the current unit's reduce-scatter)")
        ->capture_default_str();
    app.add_flag("--fsdp-no-sync", f.fsdp_no_sync,
                 "fsdp: accumulate gradients under FSDP's no_sync() (Hugging Face Accelerate's default): each unit's "
                 "gradient held unsharded through the micro-batches, reduce-scattered after the last");
    app.add_option("--hybrid-variant", f.hybrid_variant,
                   "hybrid-cnn: how the last conv activations reach the FC shards (Krizhevsky 2014's a, b, c): "
                   "all-gather, broadcast or chunked")
        ->capture_default_str();
    app.add_option("--network", f.network, "flow (max-min fair sharing) or analytic (alpha-beta)")->capture_default_str();
    app.add_option("--collective-algo", f.collective_algo,
                   "auto, ring, tree, halving-doubling, hierarchical, direct, nvls, pat")
        ->capture_default_str();
    app.add_option("--framework", f.framework,
                   "framework whose behaviour to follow: pytorch, megatron, deepspeed, megatron-deepspeed, optionally "
                   "@VERSION (default: megatron with --tp/--pp, deepspeed for zero1-3, megatron-deepspeed for zero2-3 with --tp, else pytorch)");
    app.add_option("--dispatch-overhead", f.dispatch_overhead,
                   "host time per GPU kernel the framework spends before the driver's launch (Python, dispatcher, "
                   "autograd), such as \"20 us\"; measure it with torch.profiler (CPU time per aten op). Default: the "
                   "framework's (megatron-deepspeed: " +
                       to_string(strategies::parse_framework("megatron-deepspeed").dispatch_per_kernel) +
                       ", from vTrain's host; others 0)");
    app.add_flag("--overlap-grad-reduce", f.overlap_grad_reduce,
                 "reduce gradients in buckets during backward (Megatron's --overlap-grad-reduce, DeepSpeed's overlap_comm)");
    app.add_option("--deepspeed-config", f.deepspeed_config,
                   "a DeepSpeed ds_config.json: ZeRO stage, overlap_comm, buckets, stage-3 prefetch and reuse limits, batch "
                   "sizes, fp16/bf16 (keys not modelled are reported)");
    f.app = &app;
    app.add_flag("--overlap-p2p-comm", f.overlap_p2p_comm, "Megatron's --overlap-p2p-comm (pipeline receives waited for at use)");
    app.add_flag("--overlap-param-gather", f.overlap_param_gather,
                 "Megatron's, with --strategy zero1 (its distributed optimizer): the updated parameters all-gathered "
                 "bucket by bucket under the next forward, each bucket waited for by the first layer using it, instead "
                 "of after the optimizer step");
    app.add_flag("--overlap-param-gather-with-optimizer-step", f.overlap_param_gather_with_optimizer_step,
                 "Megatron's, with --overlap-param-gather under --schedule interleaved: the first model chunk's "
                 "all-gathers dispatched right after its own optimizer step, under the other chunks' steps, instead of "
                 "in the next forward");
    app.add_flag("--tp-comm-overlap", f.tp_comm_overlap,
                 "Megatron's, with --sp: Transformer Engine's userbuffers run every tensor-parallel collective beside "
                 "the GEMM that produces or consumes it (ring exchange, pipelined reduce-scatter, bulk overlap), instead of "
                 "blocking in forward and beside the column-parallel GEMMs only in backward");
    app.add_flag("--overlap-cpu-optimizer-d2h-h2d", f.overlap_cpu_optimizer,
                 "Megatron's, with --offload cpu under tensor, pipeline, context or expert parallelism: the offloaded "
                 "step's copies and CPU steps pipelined (Megatron: parameter by parameter; modelled block by block)");
    app.add_flag("--zero-quantized-weights", f.zero_quantized_weights,
                 "ZeRO++'s qwZ with zero3 (DeepSpeed 0.10+): every parameter gather quantized to int8 blocks with fp32 "
                 "scales, dequantized on arrival");
    app.add_flag("--zero-quantized-gradients", f.zero_quantized_gradients,
                 "ZeRO++'s qgZ with zero3 (DeepSpeed 0.10+) on more than one node: each gradient tensor reduced by int4 "
                 "all-to-alls, inside each node then across nodes, instead of the reduce-scatter");
    app.add_flag("--zeropp-loco", f.zeropp_loco,
                 "LoCo's error feedback for qgZ (DeepSpeed 0.16.2+, zeropp_loco_param): each quantized gradient's error "
                 "kept in int8 between steps and added back before the next quantization; needs --zero-quantized-gradients");
    app.add_option("--zero-hpz-partition-size", f.zero_hpz_partition_size,
                   "ZeRO++'s hpZ with zero3 (DeepSpeed 0.10+): a secondary copy of the parameters partitioned over groups "
                   "of N consecutive ranks (a node's GPUs), which every gather after the step's first forward uses");
    app.add_option("--mics-shard-size", f.mics_shard_size,
                   "MiCS with zero3 (DeepSpeed 0.9.2+, mics_shard_size): parameters, gradients and optimizer state "
                   "sharded over groups of N consecutive ranks (a node's GPUs) and replicated across the groups, whose "
                   "gradient partitions are all-reduced at the accumulation boundary");
    app.add_flag("--mics-hierarchical-gather", f.mics_hierarchical,
                 "MiCS's two-level parameter gather (mics_hierarchical_params_gather), for shard groups over several "
                 "nodes: across nodes among the ranks of one local index, then inside each node");
    app.add_option("--optimizer-offload-fraction", f.optimizer_offload_fraction,
                   "the share of each rank's optimizer stepped on the host, the rest on the device (default 1): "
                   "Megatron's, with --offload cpu under tensor, pipeline, context or expert parallelism (above 0; "
                   "Megatron's own default of 0 offloads nothing); DeepSpeed's Twin-Flow (offload_optimizer.ratio, "
                   "0.12.3+) with zero3 and the optimizer offloaded to the cpu (0 to 1, rounded down to whole "
                   "sub-groups)");
    app.add_option("--ep", f.ep,
                   "expert parallelism: experts sharded over N ranks of the data-parallel group (mixtures of experts)")
        ->capture_default_str();
    app.add_option("--expert-imbalance", f.expert_imbalance,
                   "tokens the busiest expert receives over the mean (1: balanced routing); every rank is priced at it")
        ->capture_default_str();
    app.add_option("--capacity-factor", f.capacity_factor,
                   "GShard expert capacity: each expert takes (padded to) this many times its balanced share; 0: dropless")
        ->capture_default_str();
    app.add_option("--attention", f.attention,
                   "flash (fused attention: FlashAttention-2's, -3's or cuDNN's kernel, --attention-backend) or eager (scores "
                   "materialised); default: flash on GPUs of compute capability 8.0 or later, eager elsewhere");
    app.add_option("--attention-backend", f.attention_backend,
                   "flash (FlashAttention-2), fused (cuDNN's fused attention, Transformer Engine's FusedAttention) or flash3 "
                   "(FlashAttention-3, Hopper only): whose kernel runs flash attention; default: fused under --framework "
                   "megatron on compute capability 9.0 and later (Transformer Engine's choice), flash elsewhere");
    app.add_option("--fp8", f.fp8,
                   "delayed or tensorwise: the linear layers' GEMMs in FP8 as Transformer Engine runs them under Megatron "
                   "core (--fp8-format hybrid with that --fp8-recipe), on GPUs with FP8 tensor cores (H100, H200)");
    app.add_flag("--first-last-layers-bf16", f.first_last_layers_bf16,
                 "Megatron core's (0.12 on): with --fp8 tensorwise, keep the first and the last transformer layers in "
                 "the 16-bit dtype (--num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16: 1 each by default)");
    app.add_flag("--fp8-param-gather", f.fp8_param_gather,
                 "Megatron core's (0.9 on): with --fp8 and --strategy zero1 or fsdp (Megatron-FSDP), keep the FP8 layers' "
                 "weights in FP8 (no 16-bit copy), cast the optimizer's fp32 shard to FP8 after the step and all-gather "
                 "one byte per weight");
    app.add_option("--num-layers-at-start-in-bf16", f.num_layers_at_start_in_bf16,
                   "with --first-last-layers-bf16: how many first layers stay in 16 bits (default 1)");
    app.add_option("--num-layers-at-end-in-bf16", f.num_layers_at_end_in_bf16,
                   "with --first-last-layers-bf16: how many last layers stay in 16 bits (default 1)");
    app.add_option("--cross-entropy-fusion", f.cross_entropy_fusion,
                   "native or te: the loss as Megatron core's --cross-entropy-loss-fusion runs it, its own compiled "
                   "kernels (core 0.8 on) or Transformer Engine's (--cross-entropy-fusion-impl te, core 0.12 to 0.18); "
                   "default none, the unfused vocab-parallel loss");
    app.add_option("--make-vocab-size-divisible-by", f.vocab_multiple,
                   "Megatron's: pad the vocabulary to a multiple of N × tp (default 128 under --framework megatron and "
                   "megatron-deepspeed; 1 keeps the model's vocabulary, padded to a multiple of tp)");
    app.add_option("--profile", f.profile,
                   "a calibration profile (smolcluster calibrate --out FILE) whose measured rates replace the cluster's leads");
    app.add_option("--slow", f.slow,
                   "slow devices, RANK:FACTOR[:nic=FACTOR],… (3:0.5: rank 3 computes at half its rates; nic=0.5: its NIC at "
                   "half its bandwidth)");
    app.add_option("--jitter", f.jitter, "vary every compute op's time within ±PCT % (0 <= PCT < 100), seeded by --seed")
        ->capture_default_str();
    app.add_option("--seed", f.seed, "seed of --jitter (the same seed gives the same times)")->capture_default_str();
    app.add_flag("--hogwild", f.hogwild,
                 "ps-async: Hogwild! (Niu et al. 2011), lock-free updates of a parameter store in the shared memory of one node");
    app.add_flag("--no-fold", f.no_fold, "simulate every data-parallel replica (by default identical replicas are folded into one where that is exact)");
}

Model load_model_warning(const std::string& spec, std::ostream& err) {
    Model model = load_model(spec);
    for (const std::string& w : model.warnings()) err << "smolcluster: warning: " << w << '\n';
    return model;
}

sim::SimOptions resolve_sim_options(const PlanFlags& f) {
    sim::SimOptions opt;
    opt.network = sim::parse_network_mode(f.network);
    opt.algo = sim::parse_collective_algo(f.collective_algo);
    return opt;
}

void add_trace_flags(CLI::App& app, TraceFlags& f) {
    app.add_option("--trace", f.trace, "write a Chrome trace (ui.perfetto.dev, chrome://tracing) to FILE");
    app.add_option("--trace-ranks", f.trace_ranks, "ranks to trace, e.g. 0,1,8 (default: all up to 64, else 0-7)");
    app.add_flag("--force", f.force, "overwrite existing output files");
}

void check_trace_target(const std::string& path, bool force, const char* flag_name) {
    check_output_target(path, force, flag_name);
}

void check_trace_flags(const TraceFlags& f, int devices, const std::string* kernels) {
    if (f.trace.empty() && (!kernels || kernels->empty())) {
        if (!f.trace_ranks.empty())
            fail_input(kernels ? "--trace-ranks needs --trace FILE or --kernels FILE" : "--trace-ranks needs --trace FILE",
                       flag("--trace-ranks"));
        return;
    }
    check_trace_target(f.trace, f.force);
    (void)parse_ranks(f.trace_ranks, devices);
}

std::vector<std::pair<std::string, std::string>> run_metadata(const std::string& command_line, const Model& model,
                                                               const topo::Cluster& cluster,
                                                               const strategies::Layout& l,
                                                               const strategies::Plan& plan) {
    std::string p = std::string(strategies::to_string(plan.strategy)) + ", tp " + std::to_string(l.tp) + " · pp " +
                    std::to_string(l.pp) + (l.cp > 1 ? " · cp " + std::to_string(l.cp) + (plan.cp_comm == CpComm::p2p ? "" : std::string(" (") + to_string(plan.cp_comm) + ")") : std::string()) + " · dp " +
                    std::to_string(l.dp) + ", global batch " +
                    std::to_string(l.global_batch) + " = " + std::to_string(l.dp) + " × " + std::to_string(l.microbatches) +
                    " × " + std::to_string(l.micro_batch) + ", seq " + std::to_string(l.seq) + ", " + to_string(l.dtype);
    if (l.pp > 1) p += std::string(", schedule ") + strategies::to_string(plan.schedule);
    if (plan.schedule == strategies::Schedule::interleaved) p += ", virtual stages " + std::to_string(plan.virtual_stages);
    if (plan.recompute != Recompute::none) p += std::string(", recompute ") + to_string(plan.recompute);
    if (plan.recompute == Recompute::selective && !(plan.recompute_modules == RecomputeModules{}))
        p += " (" + to_string(plan.recompute_modules) + ")";
    if (!l.recomputed_layers.empty())   // the block method's (resolve_recompute_method)
        p += " (the first " + std::to_string(plan.recompute_num_layers.value_or(1)) +
             (l.pp > 1 ? " layers of each chunk)" : " layers)");
    if (plan.sequence_parallel) p += ", sp";
    if (l.fp8 != Fp8Recipe::none) p += std::string(", fp8 ") + to_string(l.fp8);
    if (plan.cross_entropy_fusion != strategies::CrossEntropyFusion::none)
        p += std::string(", cross-entropy fusion ") + strategies::to_string(plan.cross_entropy_fusion);
    if (plan.compress.method != strategies::CompressionMethod::none) p += ", compress " + strategies::to_string(plan.compress);
    std::vector<std::pair<std::string, std::string>> out{{"smolcluster-version", SMOL_VERSION},
                                                         {"command-line", command_line},
                                                         {"model", model.name()},
                                                         {"cluster", cluster.name},
                                                         {"devices", std::to_string(cluster.num_devices())},
                                                         {"plan", p}};
    if (cluster.groups.size() > 1 && !cluster.description.empty()) out.emplace_back("cluster-description", cluster.description);
    return out;
}

namespace {
bool given(const PlanFlags& f, const char* name) { return f.app && f.app->count(name) > 0; }
}  // namespace

void refuse_simulation_only_flags(const PlanFlags& f, const char* command) {
    for (const char* name : {"--slow", "--jitter", "--seed", "--hogwild"})
        if (given(f, name))
            fail_input(std::string("has no effect here: smolcluster ") + command +
                           " runs the plan on the real devices, at their own speed; " + name +
                           " is the simulator's (smolcluster simulate)",
                       flag(name));
    // run measures its host's dispatch; validate keeps the flag for the side it simulates.
    if (std::string(command) == "run" && given(f, "--dispatch-overhead"))
        fail_input("has no effect here: smolcluster run measures the host's own dispatch; --dispatch-overhead is the "
                   "simulator's (smolcluster simulate, validate)",
                   flag("--dispatch-overhead"));
    // The executors run 16- and 32-bit GEMMs (BLAS, cuBLAS); FP8 is the simulator's so far.
    if (given(f, "--fp8"))
        fail_input(std::string("has no effect here: smolcluster ") + command +
                       " runs 16- and 32-bit GEMMs; FP8 linear layers are simulated only (smolcluster simulate --fp8)",
                   flag("--fp8"));
    // The executors run their own fused attention kernel (exec/cuda/kernels.cu, exec/cpu), neither
    // FlashAttention's nor cuDNN's: the library is the simulator's choice.
    if (given(f, "--attention-backend"))
        fail_input(std::string("has no effect here: smolcluster ") + command +
                       " runs the executor's own fused attention kernel, neither FlashAttention's nor cuDNN's; "
                       "--attention-backend is the simulator's (smolcluster simulate, sweep)",
                   flag("--attention-backend"));
}

topo::Cluster resolve_cluster(const PlanFlags& f) {
    topo::Cluster c;
    if (f.cluster_network.empty()) {
        c = topo::load_cluster(f.cluster);
    } else {
        const topo::JoinNetwork join = topo::parse_join_network(f.cluster_network);
        if (!topo::is_composed_spec(f.cluster))
            fail_input("--cluster-network joins the groups of a cluster composed on the command line (NAME:N,NAME:M); '" +
                           f.cluster + "' is not one",
                       flag("--cluster-network"));
        c = topo::compose_clusters(f.cluster, join);
    }
    if (f.nodes) c = c.with_nodes(*f.nodes);
    if (f.devices) c = c.first_devices(*f.devices);
    if (!f.profile.empty()) c = topo::apply_profile(c, topo::load_profile(f.profile), f.profile);
    if (given(f, "--slow") || !f.slow.empty()) c = c.with_slow_devices(f.slow);
    if (given(f, "--seed") && !(f.jitter > 0))
        fail_input("has no effect here: --seed seeds --jitter; give --jitter PCT above 0", flag("--seed"));
    if (given(f, "--jitter") || f.jitter != 0) c = c.with_jitter(f.jitter, f.seed);
    return c;
}

namespace {

/// A --framework value that runs DeepSpeed's engine (empty: the default for ZeRO, deepspeed).
bool deepspeed_engine(const std::string& framework) {
    return framework.empty() || framework.rfind("deepspeed", 0) == 0 || framework.rfind("megatron-deepspeed", 0) == 0;
}

/// Applies a ds_config.json to the plan: what it sets fills the flags left unset, a flag given
/// with another value is an error naming both.
void apply_deepspeed_config(const PlanFlags& f, strategies::Plan& p) {
    const std::string& file = f.deepspeed_config;
    const Json doc = load_json_file(file);
    const strategies::DeepSpeedConfig c = strategies::read_deepspeed_config(JsonView(doc, file));
    auto conflict = [&](const char* flag_name, const std::string& key, const std::string& ours, const std::string& theirs) {
        fail_input(std::string(flag_name) + " " + ours + " contradicts " + file + "'s " + key + " " + theirs +
                       "; give one of them",
                   flag(flag_name));
    };
    if (p.framework.empty()) p.framework = "deepspeed";
    else if (!deepspeed_engine(p.framework))
        fail_input("--deepspeed-config needs --framework deepspeed or megatron-deepspeed, not " + p.framework,
                   flag("--deepspeed-config"));
    if (c.zero_stage) {
        const strategies::DataParallel s = *c.zero_stage == 0   ? strategies::DataParallel::ddp
                                           : *c.zero_stage == 1 ? strategies::DataParallel::zero1
                                           : *c.zero_stage == 2 ? strategies::DataParallel::zero2
                                                                : strategies::DataParallel::zero3;
        if (given(f, "--strategy") && p.strategy != s)
            conflict("--strategy", "zero_optimization.stage", strategies::to_string(p.strategy), std::to_string(*c.zero_stage));
        p.strategy = s;
    }
    if (c.micro_batch) {
        if (given(f, "--micro-batch") && p.micro_batch != *c.micro_batch)
            conflict("--micro-batch", "train_micro_batch_size_per_gpu", std::to_string(p.micro_batch), std::to_string(*c.micro_batch));
        p.micro_batch = *c.micro_batch;
    }
    if (c.train_batch_size) {
        if (given(f, "--global-batch") && p.global_batch != *c.train_batch_size)
            conflict("--global-batch", "train_batch_size", std::to_string(p.global_batch), std::to_string(*c.train_batch_size));
        p.global_batch = *c.train_batch_size;
    }
    if (c.gradient_accumulation_steps) p.gradient_accumulation = *c.gradient_accumulation_steps;
    if (c.dtype) {
        if (p.dtype && *p.dtype != *c.dtype) conflict("--dtype", "fp16/bf16", to_string(*p.dtype), to_string(*c.dtype));
        p.dtype = c.dtype;
    }
    // offload_optimizer / offload_param devices: the --offload-optimizer and --offload-params of
    // the plan. Stages 1 and 2 offload to CPU memory for any device (stage_1_and_2.py:186).
    auto offload = [&](const std::optional<std::string>& dev, const char* flag_name, strategies::Offload& into,
                       const std::string& key) {
        if (!dev) return;
        strategies::Offload o = strategies::parse_offload(*dev, flag_name);
        const bool stage12 = p.strategy == strategies::DataParallel::zero1 || p.strategy == strategies::DataParallel::zero2;
        if (stage12 && o == strategies::Offload::nvme) {
            f.warnings.push_back(file + ": " + key + " nvme: DeepSpeed's stages 1 and 2 offload to CPU memory for any "
                                 "device (stage_1_and_2.py), so it runs as cpu");
            o = strategies::Offload::cpu;
        }
        if (given(f, flag_name) && into != o)
            conflict(flag_name, key, strategies::to_string(into), strategies::to_string(o));
        into = o;
    };
    offload(c.offload_optimizer, "--offload-optimizer", p.offload_optimizer, "zero_optimization.offload_optimizer.device");
    offload(c.offload_param, "--offload-params", p.offload_params, "zero_optimization.offload_param.device");
    if (c.cpu_checkpointing && *c.cpu_checkpointing) {
        if (given(f, "--offload-activations") && p.offload_activations != strategies::Offload::cpu)
            conflict("--offload-activations", "activation_checkpointing.cpu_checkpointing", strategies::to_string(p.offload_activations),
                     "true");
        p.offload_activations = strategies::Offload::cpu;
    }
    if (c.optimizer) {
        if (given(f, "--optimizer") && p.optimizer != *c.optimizer)
            conflict("--optimizer", "optimizer.type", strategies::to_string(p.optimizer), strategies::to_string(*c.optimizer));
        p.optimizer = *c.optimizer;
    }
    if (c.offload_ratio) {
        if (p.optimizer_offload_fraction && *p.optimizer_offload_fraction != *c.offload_ratio)
            conflict("--optimizer-offload-fraction", "zero_optimization.offload_optimizer.ratio",
                     number_text(*p.optimizer_offload_fraction), number_text(*c.offload_ratio));
        p.optimizer_offload_fraction = *c.offload_ratio;
    }
    if (c.zero_quantized_weights) {
        if (given(f, "--zero-quantized-weights") && !*c.zero_quantized_weights)
            conflict("--zero-quantized-weights", "zero_optimization.zero_quantized_weights", "(on)", "false");
        p.zero_quantized_weights = *c.zero_quantized_weights;
    }
    if (c.zeropp_loco) {
        // DeepSpeed reads it only in qgZ's all-to-all reduction; without qgZ it does nothing.
        if (c.zero_quantized_gradients.value_or(false) || given(f, "--zero-quantized-gradients"))
            p.zero_loco = true;
        else
            f.warnings.push_back(file + ": /zero_optimization/zeropp_loco_param has no effect without zero_quantized_gradients "
                                        "(DeepSpeed reads it only in qgZ's all-to-all reduction)");
    }
    if (c.zero_quantized_gradients) {
        if (given(f, "--zero-quantized-gradients") && !*c.zero_quantized_gradients)
            conflict("--zero-quantized-gradients", "zero_optimization.zero_quantized_gradients", "(on)", "false");
        p.zero_quantized_gradients = *c.zero_quantized_gradients;
    }
    if (c.mics_hierarchical) {
        if (given(f, "--mics-hierarchical-gather") && !*c.mics_hierarchical)
            conflict("--mics-hierarchical-gather", "zero_optimization.mics_hierarchical_params_gather", "(on)", "false");
        p.zero_mics_hierarchical = *c.mics_hierarchical;
    }
    if (c.mics_shard_size) {
        if (given(f, "--mics-shard-size") && p.zero_mics_shard_size != *c.mics_shard_size)
            conflict("--mics-shard-size", "zero_optimization.mics_shard_size", std::to_string(p.zero_mics_shard_size),
                     std::to_string(*c.mics_shard_size));
        p.zero_mics_shard_size = *c.mics_shard_size;
    }
    if (c.zero_hpz_partition_size) {
        if (given(f, "--zero-hpz-partition-size") && p.zero_hpz_partition_size != *c.zero_hpz_partition_size)
            conflict("--zero-hpz-partition-size", "zero_optimization.zero_hpz_partition_size",
                     std::to_string(p.zero_hpz_partition_size), std::to_string(*c.zero_hpz_partition_size));
        p.zero_hpz_partition_size = *c.zero_hpz_partition_size;
    }
    auto& o = p.framework_overrides;
    o.overlap_comm = c.overlap_comm;
    o.reduce_bucket = c.reduce_bucket_size;
    o.prefetch_bucket = c.prefetch_bucket_size;
    o.max_live_parameters = c.max_live_parameters;
    o.max_reuse_distance = c.max_reuse_distance;
    o.param_persistence_threshold = c.param_persistence_threshold;
    o.sub_group_size = c.sub_group_size;
    o.optimizer_swap_buffers = c.optimizer_buffer_count;
    o.param_swap_buffers = c.param_buffer_count;
    o.param_swap_buffer_size = c.param_buffer_size;
    if (c.allgather_bucket_size) f.warnings.push_back(file + ": /zero_optimization/allgather_bucket_size is not modelled");
    for (const std::string& key : c.unmodelled) f.warnings.push_back(file + ": " + key + " is not modelled");
}

/// Refuses a floating-point flag outside [lo, hi] (NaN and infinities included); `range` says
/// the range for people ("from 1 KiB (1/1024) to 1 TiB (1048576) in MiB").
void check_range(double v, double lo, double hi, const char* name, const char* range) {
    if (!(v >= lo && v <= hi)) fail_input(std::string("a value ") + range, number_text(v), flag(name));
}

}  // namespace

strategies::Plan resolve_plan(const PlanFlags& f) {
    using strategies::DataParallel;
    strategies::Plan p;
    p.strategy = strategies::parse_data_parallel(f.strategy);
    p.tp = f.tp;
    p.pp = f.pp;
    p.cp = f.cp;
    check_at_least(f.dp, 1, "--dp", "leave it out to use devices / (tp × cp × pp)");
    p.dp = f.dp.value_or(0);
    p.schedule = strategies::parse_schedule(f.schedule);
    p.virtual_stages = f.virtual_stages;
    p.stage_layers = f.stage_layers;
    if (!f.partition.empty()) p.partition = strategies::parse_partition(f.partition);
    p.sequence_parallel = f.sp;
    p.recompute = parse_recompute(f.recompute, flag("--recompute"));
    if (f.recompute_modules) p.recompute_modules = parse_recompute_modules(*f.recompute_modules, flag("--recompute-modules"));
    if (f.recompute_method) p.recompute_method = strategies::parse_recompute_method(*f.recompute_method);
    p.recompute_num_layers = f.recompute_num_layers;
    p.offload = strategies::parse_offload(f.offload);
    p.offload_params = strategies::parse_offload(f.offload_params, "--offload-params");
    p.offload_optimizer = strategies::parse_offload(f.offload_optimizer, "--offload-optimizer");
    p.delayed_update = f.delayed_update;
    p.offload_activations = strategies::parse_offload(f.offload_activations, "--offload-activations");
    p.finetune = strategies::parse_finetune(f.finetune);
    p.optimizer = strategies::parse_optimizer(f.optimizer);
    p.compress = strategies::parse_compression(f.compress);
    check_at_least(f.global_batch, std::int64_t{1}, "--global-batch", "leave it out for dp × micro-batch");
    p.global_batch = f.global_batch.value_or(0);
    p.micro_batch = f.micro_batch;
    check_at_least(f.seq, 1, "--seq", "leave it out for the model's");
    p.seq = f.seq.value_or(0);
    if (!f.dtype.empty()) p.dtype = parse_dtype(f.dtype, flag("--dtype"));
    // Bucket and fusion sizes: at least 1 KiB (smaller buckets make millions of collectives) and at
    // most 1 TiB (beyond any model's gradients).
    const char* mib_range = "in MiB from 0.0009765625 (1 KiB) to 1048576 (1 TiB)";
    if (f.bucket_mb) check_range(*f.bucket_mb, 1.0 / 1024, 1 << 20, "--bucket-mb", mib_range);
    if (f.first_bucket_mb) check_range(*f.first_bucket_mb, 1.0 / 1024, 1 << 20, "--first-bucket-mb", mib_range);
    check_range(f.fusion_mb, 1.0 / 1024, 1 << 20, "--fusion-mb", mib_range);
    check_range(f.cycle_ms, 0, 60'000, "--cycle-ms", "in ms from 0 to 60000 (one minute)");
    p.bucket_mb = f.bucket_mb;
    p.first_bucket_mb = f.first_bucket_mb;
    p.fold = !f.no_fold;
    p.framework = f.framework;
    p.framework_overrides.dispatch_per_kernel = parse_dispatch_overhead(f.dispatch_overhead);
    p.overlap_grad_reduce = f.overlap_grad_reduce;
    p.overlap_p2p_comm = f.overlap_p2p_comm;
    p.overlap_param_gather = f.overlap_param_gather;
    p.overlap_param_gather_with_optimizer_step = f.overlap_param_gather_with_optimizer_step;
    p.tp_comm_overlap = f.tp_comm_overlap;
    p.overlap_cpu_optimizer_d2h_h2d = f.overlap_cpu_optimizer;
    p.optimizer_offload_fraction = f.optimizer_offload_fraction;
    p.zero_quantized_weights = f.zero_quantized_weights;
    p.zero_quantized_gradients = f.zero_quantized_gradients;
    p.zero_loco = f.zeropp_loco;
    check_at_least(f.zero_hpz_partition_size, 1, "--zero-hpz-partition-size", "leave it out for no secondary partition");
    p.zero_hpz_partition_size = f.zero_hpz_partition_size.value_or(1);
    check_at_least(f.mics_shard_size, 1, "--mics-shard-size", "leave it out for ZeRO-3 over every data-parallel rank");
    p.zero_mics_shard_size = f.mics_shard_size.value_or(0);
    p.zero_mics_hierarchical = f.mics_hierarchical;
    p.ps_servers = f.ps_servers;
    p.ps_placement = strategies::parse_ps_placement(f.ps_placement);
    p.staleness = f.staleness;
    p.fusion_mb = f.fusion_mb;
    p.cycle_ms = f.cycle_ms;
    p.fsdp_sharding = strategies::parse_fsdp_sharding(f.fsdp_sharding);
    check_at_least(f.fsdp_group, 1, "--fsdp-group", "leave it out for the devices of a node");
    p.fsdp_group = f.fsdp_group.value_or(0);
    if (!f.fsdp_reduce_dtype.empty()) p.fsdp_reduce_dtype = parse_dtype(f.fsdp_reduce_dtype, flag("--fsdp-reduce-dtype"));
    p.fsdp_backward_prefetch = strategies::parse_fsdp_backward_prefetch(f.fsdp_backward_prefetch);
    p.fsdp_no_sync = f.fsdp_no_sync;
    p.hybrid_variant = strategies::parse_hybrid_variant(f.hybrid_variant);
    p.ep = f.ep;
    p.expert_imbalance = f.expert_imbalance;
    p.capacity_factor = f.capacity_factor;
    if (!f.attention.empty()) p.attention = parse_attention(f.attention, flag("--attention"));
    if (!f.attention_backend.empty())
        p.attention_backend = parse_attention_backend(f.attention_backend, "--attention-backend");
    if (!f.cp_comm.empty()) p.cp_comm = parse_cp_comm(f.cp_comm, flag("--cp-comm"));
    if (!f.fp8.empty()) p.fp8 = parse_fp8_recipe(f.fp8, flag("--fp8"));
    p.first_last_layers_bf16 = f.first_last_layers_bf16;
    p.fp8_param_gather = f.fp8_param_gather;
    p.num_layers_at_start_in_bf16 = f.num_layers_at_start_in_bf16;
    p.num_layers_at_end_in_bf16 = f.num_layers_at_end_in_bf16;
    if (!f.cross_entropy_fusion.empty()) p.cross_entropy_fusion = strategies::parse_cross_entropy_fusion(f.cross_entropy_fusion);
    p.vocab_multiple = f.vocab_multiple;
    if (!f.deepspeed_config.empty()) apply_deepspeed_config(f, p);

    // A flag the plan does not read is refused, so a mistyped plan is not simulated as another.
    const auto given = [&](const char* name) { return tools::given(f, name); };
    const auto no_effect = [&](const char* name, const std::string& why) {
        fail_input("has no effect here: " + why, flag(name));
    };
    const DataParallel s = p.strategy;
    // Built by strategies/model_parallel.cpp, whose default framework is Megatron (zero2, zero3 and
    // fsdp with --tp alone excepted: the sharded engines build them).
    const bool model_parallel = p.tp > 1 || p.pp > 1 || p.cp > 1 || p.ep > 1;
    // DeepSpeed's ZeRO-1/2 engine (strategies/zero.cpp build_zero): zero2 always, zero1 where the
    // framework is DeepSpeed's, which it is by default without model parallelism.
    const bool deepspeed_zero12 =
        s == DataParallel::zero2 || (s == DataParallel::zero1 && (p.framework.empty() ? !model_parallel : deepspeed_engine(p.framework)));
    const bool ps = s == DataParallel::ps || s == DataParallel::ps_async;
    const std::string strategy = std::string("--strategy ") + strategies::to_string(s);
    if (given("--cp-comm") && p.cp == 1)
        no_effect("--cp-comm", "it sets how context-parallel attention exchanges keys and values; it needs --cp 2 or more");
    if (given("--sp") && p.tp == 1)
        no_effect("--sp", "sequence parallelism splits the activations of tensor-parallel regions; it needs --tp 2 or more");
    if (given("--stage-layers") && p.pp == 1) no_effect("--stage-layers", "it sets the layers of pipeline stages; it needs --pp 2 or more");
    if (given("--virtual-stages") && p.schedule != strategies::Schedule::interleaved)
        no_effect("--virtual-stages", "model chunks per device are the interleaved schedule's; add --schedule interleaved");
    if (given("--bucket-mb") && (s == DataParallel::ring || s == DataParallel::zero3 || s == DataParallel::fsdp))
        no_effect("--bucket-mb", strategy + (s == DataParallel::ring ? " fuses gradients by --fusion-mb"
                                                                   : " reduces each block's gradients on their own"));
    if (given("--bucket-mb") && deepspeed_zero12)
        no_effect("--bucket-mb", "DeepSpeed's ZeRO-1/2 reduce gradients in buckets of reduce_bucket_size elements (5e8 by "
                                 "default): set zero_optimization.reduce_bucket_size in a --deepspeed-config file");
    if (given("--first-bucket-mb") && !(s == DataParallel::ddp || s == DataParallel::hybrid_cnn))
        no_effect("--first-bucket-mb", "only PyTorch DDP's bucketing (--strategy ddp or hybrid-cnn) has a smaller first "
                                       "bucket");
    for (const char* name : {"--fusion-mb", "--cycle-ms"})
        if (given(name) && s != DataParallel::ring) no_effect(name, std::string("it is Horovod's (--strategy ring), not ") + strategies::to_string(s) + "'s");
    for (const char* name : {"--ps-servers", "--ps-placement"})
        if (given(name) && !ps) no_effect(name, "parameter servers are --strategy ps and ps-async");
    if (given("--staleness") && s != DataParallel::ps_async) no_effect("--staleness", "only --strategy ps-async runs ahead of its slowest worker");
    if (given("--hybrid-variant") && s != DataParallel::hybrid_cnn)
        no_effect("--hybrid-variant", "it is the activation exchange of --strategy hybrid-cnn");
    p.hogwild = f.hogwild;
    if (f.hogwild && s != DataParallel::ps_async)
        no_effect("--hogwild", "Hogwild! is an asynchronous update rule: it needs --strategy ps-async, not " + strategy.substr(11));
    if (f.hogwild && given("--staleness"))
        no_effect("--staleness", "Hogwild!'s lock-free updates have no staleness bound (Niu et al. 2011): leave out --staleness or --hogwild");
    for (const char* name : {"--ps-servers", "--ps-placement"})
        if (f.hogwild && given(name))
            no_effect(name, "Hogwild! has no server: every worker updates the node's shared parameter store itself");
    if (given("--fsdp-sharding") && s != DataParallel::fsdp) no_effect("--fsdp-sharding", "it is FSDP's sharding strategy (--strategy fsdp)");
    if (given("--fsdp-group") && !(s == DataParallel::fsdp && p.fsdp_sharding == strategies::FsdpSharding::hybrid))
        no_effect("--fsdp-group", "shard groups are FSDP's hybrid sharding (--strategy fsdp --fsdp-sharding hybrid)");
    if (given("--fsdp-reduce-dtype") && s != DataParallel::fsdp)
        no_effect("--fsdp-reduce-dtype", "it is FSDP's gradient reduction dtype (--strategy fsdp)");
    if (given("--fsdp-no-sync") && !(s == DataParallel::fsdp && p.pp == 1 && p.fsdp_sharding != strategies::FsdpSharding::none))
        no_effect("--fsdp-no-sync",
                  "it holds FSDP's sharded gradients back until the last micro-batch (--strategy fsdp with full, grad-op or "
                  "hybrid sharding, without --pp, where each stage reduces after its last backward anyway)");
    if (given("--fsdp-backward-prefetch") &&
        !(s == DataParallel::fsdp && p.pp == 1 &&
          (p.fsdp_sharding == strategies::FsdpSharding::full || p.fsdp_sharding == strategies::FsdpSharding::hybrid)))
        no_effect("--fsdp-backward-prefetch",
                  "only FSDP's full and hybrid sharding gather parameters again in backward (--strategy fsdp, without "
                  "--pp, where each stage keeps its units gathered)");
    // Scripts pass these whatever the plan: a warning, not an error.
    if (given("--schedule") && p.pp == 1 && p.schedule != strategies::Schedule::one_f_one_b)
        no_effect("--schedule", std::string("the ") + strategies::to_string(p.schedule) +
                                    " schedule orders pipeline stages; it needs --pp 2 or more");
    if (given("--schedule") && p.pp == 1)
        f.warnings.push_back("--schedule has no effect without pipeline parallelism (--pp 2 or more)");
    if (given("--no-fold") && ps)
        f.warnings.push_back("--no-fold has no effect: parameter-server plans never fold their replicas");
    return p;
}

void print_warnings(const PlanFlags& f, std::ostream& err) {
    for (const std::string& w : f.warnings) err << "smolcluster: warning: " << w << '\n';
    f.warnings.clear();
}

std::vector<int> link_ranks(const std::string& trace_ranks, int devices) {
    std::vector<int> ranks = parse_ranks(trace_ranks, devices);
    if (static_cast<int>(ranks.size()) == devices) ranks.clear();
    return ranks;
}

std::vector<int> parse_ranks(const std::string& text, int devices) {
    std::vector<int> out;
    if (text.empty()) {
        for (int r = 0; r < std::min(devices, devices <= 64 ? 64 : 8); ++r) out.push_back(r);
        return out;
    }
    auto bad = [&](const std::string& item) {
        fail_input("rank numbers or ranges from 0 to " + std::to_string(devices - 1) + " separated by commas, such as 0-7,64-71",
                   "'" + item + "'", flag("--trace-ranks"));
    };
    auto number = [&](const std::string& digits, const std::string& item) {
        std::size_t used = 0;
        long r = -1;
        try {
            r = std::stol(digits, &used);
        } catch (const std::exception&) {
        }
        if (digits.empty() || used != digits.size() || digits[0] == '-' || digits[0] == '+' || r < 0 || r >= devices) bad(item);
        return static_cast<int>(r);
    };
    std::stringstream s(text);
    std::string item;
    while (std::getline(s, item, ',')) {
        const std::size_t dash = item.find('-', 1);
        const int first = number(item.substr(0, dash), item);
        const int last = dash == std::string::npos ? first : number(item.substr(dash + 1), item);
        if (last < first) bad(item);
        for (int r = first; r <= last; ++r) out.push_back(r);
    }
    if (text.back() == ',') bad(text);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

/// Writes the trace to a temporary file beside its final name (OutputFile), then renames it, so a
/// failure never leaves half a file or a stray temporary one.
void write_trace(const std::string& file, const std::string& trace_ranks, bool force,
                 const OpGraph& g, const Timeline& tl,
                 const std::vector<std::pair<std::string, std::string>>& metadata, const char* flag_name) {
    traces::TraceOptions opt;
    opt.ranks = parse_ranks(trace_ranks, g.ranks());
    opt.metadata = metadata;
    // Each traced rank's device memory, for the memory plot's capacity line: "0:80000000000,1:…".
    std::string capacity;
    for (int r : opt.ranks)
        capacity += (capacity.empty() ? "" : ",") + std::to_string(r) + ":" +
                    std::to_string(tl.capacity[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)].count());
    opt.metadata.emplace_back("device-memory-bytes", capacity);
    OutputFile target(file, force, flag_name);
    if (file.ends_with(".gz")) {
        GzipFileBuf buf(target.temp_path());
        if (!buf.good()) target.fail_write("cannot open " + target.temp_path());
        std::ostream out(&buf);
        traces::write_chrome_trace(out, g, tl, opt);
        out.flush();
        if (!out || !buf.close()) target.fail_write("a write failed (disk full?)");
    } else {
        std::ofstream out(target.temp_path(), std::ios::binary);
        if (!out) target.fail_write("cannot open " + target.temp_path());
        traces::write_chrome_trace(out, g, tl, opt);
        out.close();   // the final flush: its failure is the stream's
        if (!out) target.fail_write("a write failed (disk full?)");
    }
    target.commit();
}

}  // namespace smol::tools
