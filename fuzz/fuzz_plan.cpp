// Fuzzes the plan resolver (strategies::resolve) and, for plans small enough to run thousands of
// times a minute, what follows it: the strategy's graph (build) and its simulation, flow-level or
// analytic. The bytes choose a model preset, a cluster preset and its node count, and every plan
// field (strategy, tp, pp, dp, cp, schedule, virtual stages, stage layers, sp, recompute, batch,
// micro-batch, seq, dtype, bucket and fusion sizes, parameter-server and FSDP settings, framework,
// overlap switches, folding, FP8, fine-tuning, optimizer, gradient compression, offload, expert
// parallelism — on a small mixture of experts too), each over its
// whole type's range so the resolver meets the overflows and zeros a hand-written command line
// would. A resolved, built, simulated plan or a
// smol::Error are the only answers. Seeds: fuzz/corpus/plan.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/model.hpp"
#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

template <class T, std::size_t N>
T pick(FuzzedDataProvider& in, const T (&values)[N]) {
    return values[in.ConsumeIntegralInRange<std::size_t>(0, N - 1)];
}

/// Mostly small values (where plans resolve), sometimes any int (where they overflow).
int degree(FuzzedDataProvider& in) {
    return in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-1, 17) : in.ConsumeIntegral<int>();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    static const char* const models[] = {"gpt-tiny", "gpt2-small", "llama3-8b", "gpt3-175b", "resnet50", "mlp-small"};
    static const char* const clusters[] = {"pi5-1gbe", "dgx-a100", "dgx2-v100", "jetson-agx-orin", "workstation-4gpu",
                                           "dgx-h100"};
    static const DataParallel strategies[] = {DataParallel::ps,    DataParallel::ps_async, DataParallel::ring,
                                              DataParallel::ddp,   DataParallel::zero1,    DataParallel::zero2,
                                              DataParallel::zero3, DataParallel::fsdp,     DataParallel::hybrid_cnn};
    static const Schedule schedules[] = {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1};
    static const Recompute recomputes[] = {Recompute::none, Recompute::selective, Recompute::full};
    static const DType dtypes[] = {DType::bf16, DType::fp16, DType::fp32};
    static const CpComm cp_comms[] = {CpComm::p2p, CpComm::all_gather, CpComm::all_to_all};
    static const FsdpSharding shardings[] = {FsdpSharding::full, FsdpSharding::grad_op, FsdpSharding::hybrid,
                                             FsdpSharding::none};
    static const char* const frameworks[] = {"", "pytorch", "megatron", "deepspeed", "megatron-deepspeed", "megatron@0.1",
                                             "deepspeed@0.3", "pytorch@1.0", "megatron@99", "nonsense"};
    try {
        Model model = model_preset(pick(in, models));
        topo::Cluster cluster = topo::cluster_preset(pick(in, clusters));
        if (in.ConsumeBool()) cluster = cluster.with_nodes(in.ConsumeIntegralInRange<int>(-1, 64));
        if (in.ConsumeBool()) cluster = cluster.first_devices(in.ConsumeIntegralInRange<int>(0, cluster.num_devices() + 1));
        Plan p;
        p.strategy = pick(in, strategies);
        p.tp = degree(in);
        p.pp = degree(in);
        p.dp = in.ConsumeBool() ? 0 : degree(in);
        p.schedule = pick(in, schedules);
        p.virtual_stages = degree(in);
        if (in.ConsumeBool()) {
            const int stages = in.ConsumeIntegralInRange<int>(0, 8);
            for (int s = 0; s < stages; ++s) p.stage_layers.push_back(degree(in));
        }
        p.sequence_parallel = in.ConsumeBool();
        p.recompute = pick(in, recomputes);
        p.global_batch = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(0, 4096) : in.ConsumeIntegral<std::int64_t>();
        p.micro_batch = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(0, 16) : in.ConsumeIntegral<int>();
        p.seq = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(0, 4096) : in.ConsumeIntegral<int>();
        if (in.ConsumeBool()) p.dtype = pick(in, dtypes);
        // Sizes as the command line checks them (tools/plan_flags.cpp): 1 KiB to 1 TiB in MiB.
        p.bucket_mb = in.ConsumeFloatingPointInRange<double>(1.0 / 1024, 1 << 20);
        p.first_bucket_mb = in.ConsumeFloatingPointInRange<double>(1.0 / 1024, 1 << 20);
        p.fusion_mb = in.ConsumeFloatingPointInRange<double>(1.0 / 1024, 1 << 20);
        p.cycle_ms = in.ConsumeFloatingPointInRange<double>(0, 60'000);
        p.fold = in.ConsumeBool();
        p.ps_servers = degree(in);
        p.ps_placement = in.ConsumeBool() ? PsPlacement::dedicated : PsPlacement::colocated;
        p.staleness = degree(in);
        p.fsdp_sharding = pick(in, shardings);
        p.fsdp_group = degree(in);
        p.framework = pick(in, frameworks);
        p.overlap_grad_reduce = in.ConsumeBool();
        p.overlap_p2p_comm = in.ConsumeBool();
        const bool analytic = in.ConsumeBool();
        // Last, so the corpus's older seeds keep their meaning.
        p.cp = in.ConsumeBool() ? 1 : degree(in);
        p.cp_comm = pick(in, cp_comms);
        static const Fp8Recipe fp8s[] = {Fp8Recipe::none, Fp8Recipe::delayed, Fp8Recipe::tensorwise};
        p.fp8 = pick(in, fp8s);
        if (in.ConsumeBool()) p.attention_backend = static_cast<AttentionBackend>(in.ConsumeIntegralInRange<int>(0, 2));
        if (in.ConsumeBool()) p.fsdp_reduce_dtype = pick(in, dtypes);
        static const FsdpBackwardPrefetch prefetches[] = {FsdpBackwardPrefetch::pre, FsdpBackwardPrefetch::post,
                                                          FsdpBackwardPrefetch::none};
        p.fsdp_backward_prefetch = pick(in, prefetches);
        static const char* const finetunes[] = {"full", "lora:4", "qlora:8", "lora:2:qkv,mlp_down", "lora:65536"};
        p.finetune = parse_finetune(pick(in, finetunes));
        static const Optimizer optimizers[] = {Optimizer::adam, Optimizer::adamw_8bit, Optimizer::sgd, Optimizer::lamb};
        p.optimizer = pick(in, optimizers);
        static const char* const compressions[] = {"none", "1bit", "topk:0.01", "powersgd:2"};
        p.compress = parse_compression(pick(in, compressions));
        p.fsdp_no_sync = in.ConsumeBool();
        static const Offload offloads[] = {Offload::none, Offload::none, Offload::cpu, Offload::nvme};
        p.offload = pick(in, offloads);
        p.ep = in.ConsumeBool() ? degree(in) : 1;   // exhausted input: 1, as the older seeds mean
        if (in.ConsumeBool()) {
            // Four layers, the first dense, eight experts of which two per token.
            static const Json doc = parse_json_text(
                R"({"kind": "transformer", "name": "moe-tiny", "layers": 4, "hidden": 128, "heads": 4, "ffn_hidden": 512,
                    "vocab": 1024, "seq": 128, "gated_mlp": true, "biases": false, "norm": "rmsnorm", "positions": "rope",
                    "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 256, "dense_layers": [0]}})",
                "moe-tiny.json");
            model = model_from_json(JsonView(doc, "moe-tiny.json"), "moe-tiny");
        }
        // Megatron's CPU offload knobs (exhausted input: off and unset).
        p.overlap_cpu_optimizer_d2h_h2d = in.ConsumeBool();
        if (in.ConsumeBool()) p.optimizer_offload_fraction = in.ConsumeFloatingPointInRange<double>(-0.5, 1.5);
        // ZeRO++'s qwZ, qgZ and hpZ (exhausted input: off).
        p.zero_quantized_weights = in.ConsumeBool();
        p.zero_quantized_gradients = in.ConsumeBool();
        p.zero_hpz_partition_size = in.ConsumeIntegralInRange(1, 9);
        // MiCS's shard groups and hierarchical gather (exhausted input: off).
        p.zero_mics_shard_size = in.ConsumeIntegralInRange(0, 17);
        p.zero_mics_hierarchical = in.ConsumeBool();
        p.zero_loco = in.ConsumeBool();
        // Megatron core's --recompute-modules, any subset (exhausted input: core_attn, the default).
        if (in.ConsumeBool()) p.recompute_modules.bits = in.ConsumeIntegralInRange<std::uint8_t>(1, 127);
        // Megatron core's fused cross-entropy (exhausted input: none).
        p.cross_entropy_fusion = static_cast<CrossEntropyFusion>(in.ConsumeIntegralInRange<int>(0, 2));
        // Megatron's --make-vocab-size-divisible-by, in range and out (exhausted input: the framework's).
        if (in.ConsumeBool()) p.vocab_multiple = in.ConsumeIntegralInRange(-1, 70'000);
        // Megatron's --overlap-param-gather (exhausted input: off).
        p.overlap_param_gather = in.ConsumeBool();
        // Megatron's --tp-comm-overlap, Transformer Engine's userbuffers (exhausted input: off).
        p.tp_comm_overlap = in.ConsumeBool();
        // Megatron's --overlap-param-gather-with-optimizer-step (exhausted input: off).
        p.overlap_param_gather_with_optimizer_step = in.ConsumeBool();
        // Megatron's --first-last-layers-bf16 and its counts, in range and out (exhausted input: off).
        p.first_last_layers_bf16 = in.ConsumeBool();
        if (in.ConsumeBool()) p.num_layers_at_start_in_bf16 = in.ConsumeIntegralInRange(-1, 40);
        if (in.ConsumeBool()) p.num_layers_at_end_in_bf16 = in.ConsumeIntegralInRange(-1, 40);
        // Megatron's --fp8-param-gather (exhausted input: off).
        p.fp8_param_gather = in.ConsumeBool();
        // Megatron's --recompute-method and --recompute-num-layers (exhausted input: unset).
        if (in.ConsumeBool()) p.recompute_method = in.ConsumeBool() ? RecomputeMethod::block : RecomputeMethod::uniform;
        if (in.ConsumeBool()) p.recompute_num_layers = in.ConsumeIntegralInRange(-1, 40);

        const Layout l = resolve(model, cluster, p);
        // Thousands of executions a minute: build and simulate only the small plans.
        if (l.estimated_ops > 20'000) return 0;
        const Built b = build(model, cluster, p);
        // The collective planner routes every pair of a communicator: hundreds of ranks take tens
        // of seconds under the sanitizers and coverage (a 768-rank all-reduce: 24-43 s), past
        // fuzz/run.sh's 10 s limit; the graph is still built.
        if (cluster.num_devices() > 256) return 0;
        sim::SimOptions opt;
        opt.network = analytic ? sim::NetworkMode::analytic : sim::NetworkMode::flow;
        opt.record_memory = false;
        (void)sim::simulate(b.graph, cluster, opt);
    } catch (const Error& e) {
        // The plan's own impossibility (bad input, a quantity out of range) is an answer; a
        // deadlock or an internal error of a plan resolve accepted is a bug.
        if (!is_input_error(e.kind())) {
            std::fprintf(stderr, "fuzz_plan: %s\n", e.what());
            std::abort();
        }
    }
    return 0;
}
