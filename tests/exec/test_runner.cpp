// Every strategy's graph, run for real under mpirun (-np 2 and -np 4): each op executes exactly
// once (counted by a backend that wraps the CPU one), the measured timeline respects every edge
// of the graph, its Chrome trace passes the checks a simulated trace passes, and the measured
// peak memory is recorded and resident. No test asserts a timing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/json.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/counting_backend.hpp"
#include "exec/runner.hpp"
#include "exec_support.hpp"
#include "strategies/plan.hpp"
#include "topologies/localhost.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/trace_checks.hpp"

using namespace smol;

namespace {

using testing::CountingBackend;

Model tiny() { return model_preset("gpt-tiny"); }

/// Edges of the graph between ops of different ranks.
std::size_t cross_rank_edges(const OpGraph& g) {
    std::size_t n = 0;
    for (OpId v = 0; v < g.size(); ++v)
        for (OpId s : g.successors(v)) n += g.op(v).rank != g.op(s).rank;
    return n;
}

/// Runs `g` on `cluster` (one rank per process of this mpirun) and checks it; with `runs` > 1 the
/// runner runs it that many times and the last run is checked (each op runs once per run).
void run_and_check(const OpGraph& g, const topo::Cluster& cluster, const std::string& scratch = "", int runs = 1) {
    exec::Session& session = test::session();

    exec::cpu::CpuBackend cpu(g, session.mpi(), scratch);
    CountingBackend counting(cpu, g);
    exec::ExecOptions options;
    options.warmup = 0;
    options.timeout = Time::seconds(60);
    exec::Measured m;
    {
        exec::Runner runner(g, cluster, session.mpi(), counting, options);
        for (int i = 0; i < runs; ++i) m = runner.run();
    }

    // Every op of this rank ran exactly once; every buffer it allocates was allocated once.
    int wrong = 0;
    OpId first_wrong = 0;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != session.rank()) continue;
        int times = -1;
        switch (op.kind) {
            case OpKind::compute:
            case OpKind::collective:
            case OpKind::send:
            case OpKind::recv:
            case OpKind::copy: times = counting.ran(id); break;
            case OpKind::alloc: times = counting.allocated(op.ref); break;
            case OpKind::free:
            case OpKind::timer: times = runs; break;   // checked from the timeline below
        }
        if (times != runs && wrong++ == 0) first_wrong = id;
    }
    INFO("rank " << session.rank() << ": first op not run exactly once: " << (wrong ? g.describe(first_wrong) : "none"));
    CHECK(wrong == 0);

    if (!session.root()) return;
    const Timeline& tl = m.timeline;
    REQUIRE(tl.start.size() == g.size());
    CHECK(tl.events == g.size());
    std::size_t never = 0;
    for (OpId id = 0; id < g.size(); ++id) never += tl.start[id] < Time::zero() || tl.end[id] < tl.start[id];
    CHECK(never == 0);

    // The timeline respects every edge: a predecessor ends before its successor starts (one host,
    // one clock: no alignment error to allow for).
    std::size_t violations = 0;
    std::string example;
    for (OpId v = 0; v < g.size(); ++v)
        for (OpId s : g.successors(v))
            if (tl.end[v] > tl.start[s] && violations++ == 0)
                example = g.describe(v) + " ends at " + to_string(tl.end[v]) + ", after " + g.describe(s) + " starts at " +
                          to_string(tl.start[s]);
    INFO(example);
    CHECK(violations == 0);
    CHECK(tl.makespan > Time::zero());

    // The measured trace passes the simulated trace's checks.
    std::ostringstream trace;
    traces::write_chrome_trace(trace, g, tl);
    const nlohmann::json doc = nlohmann::json::parse(trace.str());
    test::check_no_overlap(doc);
    test::check_flows(doc);

    // The measured peak memory is recorded, bounded by the rank's buffers, and resident.
    for (int r = 0; r < g.ranks(); ++r) {
        Bytes total, largest;
        for (const Buffer& b : g.buffers())
            if (b.rank == r && b.tier != Tier::nvme) {
                total += Bytes(b.bytes);
                largest = std::max(largest, Bytes(b.bytes));
            }
        INFO("rank " << r);
        const Bytes peak = tl.peak[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)];
        CHECK(peak >= largest);
        CHECK(peak <= total);
        if (total > Bytes(0)) CHECK(peak > Bytes(0));
        REQUIRE(m.resident_peak.size() == static_cast<std::size_t>(g.ranks()));
        CHECK(m.resident_peak[static_cast<std::size_t>(r)] >= peak);
    }
    CHECK_FALSE(tl.memory.empty());
    CHECK(tl.kernel_class_time.size() == g.size());
}

/// Runs `plan` on the localhost cluster of this mpirun (one rank per process) and checks it.
/// `between_ranks`: the graph has edges between ranks, which the runner signals by message.
void run_and_check(strategies::Plan plan, bool between_ranks = false) {
    const topo::Cluster cluster = topo::localhost_cluster();
    REQUIRE(cluster.num_devices() == test::session().size());
    plan.fold = false;
    plan.seq = 128;
    const strategies::Built built = strategies::build(tiny(), cluster, plan);
    if (between_ranks) CHECK(cross_rank_edges(built.graph) > 0);
    run_and_check(built.graph, cluster);
}

/// A small CNN for hybrid-cnn, per sample in fp32: a 3×3 convolution of 3 → 16 channels at
/// 16×16, a 2×2 pool, then fc 1024 → 64 → 10 (10 neurons split 3, 3, 3, 3 over 4 ranks).
Model tiny_cnn() {
    const LayerSpec conv{"conv1", "conv", 3 * 3 * 3 * 16 + 16, Flops(2.0 * 3 * 3 * 3 * 16 * 16 * 16), Bytes(16 * 16 * 16 * 4),
                         Bytes(16 * 16 * 16 * 4)};
    const LayerSpec pool{"pool1", "pool", 0, Flops(0), Bytes(16 * 16 * 16 * 4), Bytes(16 * 8 * 8 * 4)};
    const LayerSpec fc1{"fc1", "fc", 1024 * 64 + 64, Flops(2.0 * 1024 * 64), Bytes(1024 * 4), Bytes(64 * 4)};
    const LayerSpec fc2{"fc2", "fc", 64 * 10 + 10, Flops(2.0 * 64 * 10), Bytes(64 * 4), Bytes(10 * 4)};
    return Model::layer_list("tiny-cnn", {conv, pool, fc1, fc2}, 3 * 16 * 16 * 4);
}

strategies::Plan data_parallel(strategies::DataParallel s) {
    strategies::Plan p;
    p.strategy = s;
    // DeepSpeed's ZeRO-1/2 IPG buffer is reduce_bucket_size elements (5e8: 2 GB in fp32, every
    // page touched by the executor); a small one gives gpt-tiny several buckets to run through it.
    if (s == strategies::DataParallel::zero1 || s == strategies::DataParallel::zero2) p.framework_overrides.reduce_bucket = 1 << 18;
    return p;
}

/// A small mixture of experts: four layers of 128, the first dense, 8 experts of width 256, 2 per token.
Model moe_tiny() {
    static const Json doc = parse_json_text(
        R"({"kind": "transformer", "name": "moe-tiny", "layers": 4, "hidden": 128, "heads": 4, "ffn_hidden": 512,
            "vocab": 1024, "seq": 128, "gated_mlp": true, "biases": false, "norm": "rmsnorm", "positions": "rope",
            "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 256, "dense_layers": [0]}})",
        "moe-tiny.json");
    return model_from_json(JsonView(doc, "moe-tiny.json"), "moe-tiny");
}

/// Runs `plan` on moe_tiny(), built for `cluster`, and checks it, its all-to-alls included.
void run_moe_and_check(strategies::Plan plan, const topo::Cluster& cluster = topo::localhost_cluster()) {
    plan.fold = false;
    const strategies::Built built = strategies::build(moe_tiny(), cluster, plan);
    std::size_t all_to_all = 0;
    for (const Collective& c : built.graph.collectives()) all_to_all += c.kind == CollectiveKind::all_to_all;
    CHECK(all_to_all > 0);
    run_and_check(built.graph, topo::localhost_cluster());
}

strategies::Plan pipeline(strategies::Schedule s, int virtual_stages = 1) {
    strategies::Plan p;
    p.pp = 2;
    p.schedule = s;
    p.virtual_stages = virtual_stages;
    p.global_batch = 4;
    return p;
}

}  // namespace

using strategies::DataParallel;
using strategies::Schedule;

TEST_CASE("exec runs ddp: every op once, in graph order", "[exec][mpi][plan-ddp]") { run_and_check(data_parallel(DataParallel::ddp)); }
TEST_CASE("exec runs ring (Horovod, cycle timers)", "[exec][mpi][plan-ring]") { run_and_check(data_parallel(DataParallel::ring)); }
TEST_CASE("exec runs ddp with 1-bit compression: its kernels and its all-to-all and all-gathers", "[exec][mpi][plan-ddp-1bit]") {
    strategies::Plan p = data_parallel(DataParallel::ddp);
    p.compress = strategies::parse_compression("1bit");
    run_and_check(p);
}
TEST_CASE("exec runs ddp with PowerSGD: its factor GEMMs, Gram–Schmidt and the factors' all-reduces",
          "[exec][mpi][plan-ddp-powersgd]") {
    for (const char* ft : {"full", "lora:8"}) {   // with LoRA: the adapters' A and B matrices
        CAPTURE(ft);
        strategies::Plan p = data_parallel(DataParallel::ddp);
        p.compress = strategies::parse_compression("powersgd:2");
        p.finetune = strategies::parse_finetune(ft);
        p.fold = false;
        p.seq = 128;
        const topo::Cluster cluster = topo::localhost_cluster();
        const strategies::Built built = strategies::build(tiny(), cluster, p);
        int orthogonalize = 0;
        for (OpId id = 0; id < built.graph.size(); ++id)
            if (built.graph.op(id).kind == OpKind::compute)
                for (const Kernel& k : built.graph.kernels_of(id)) orthogonalize += k.name == KernelName::powersgd_orthogonalize;
        CHECK(orthogonalize > 0);
        run_and_check(built.graph, cluster);
    }
}
TEST_CASE("exec runs ring with top-k compression", "[exec][mpi][plan-ring-topk]") {
    strategies::Plan p = data_parallel(DataParallel::ring);
    p.compress = strategies::parse_compression("topk:0.01");
    run_and_check(p);
}
TEST_CASE("exec runs ps", "[exec][mpi][plan-ps]") { run_and_check(data_parallel(DataParallel::ps)); }
TEST_CASE("exec runs ps-async: edges between ranks (bounded staleness)", "[exec][mpi][plan-ps-async]") {
    strategies::Plan p = data_parallel(DataParallel::ps_async);
    p.staleness = 1;
    run_and_check(p, true);
}
TEST_CASE("exec runs zero1", "[exec][mpi][plan-zero1]") { run_and_check(data_parallel(DataParallel::zero1)); }
TEST_CASE("exec runs Megatron's zero1 with expert parallelism, trained in full and with LoRA on every expert",
          "[exec][mpi][plan-zero1]") {
    for (const char* ft : {"full", "lora:4"}) {
        CAPTURE(ft);
        strategies::Plan p = data_parallel(DataParallel::zero1);
        p.ep = 2;
        p.finetune = strategies::parse_finetune(ft);
        run_moe_and_check(p);
    }
}
TEST_CASE("exec runs Megatron's zero1 with expert parallelism and the MoE layer recomputed: its all-to-alls again in backward",
          "[exec][mpi][plan-zero1]") {
    strategies::Plan p = data_parallel(DataParallel::zero1);
    p.ep = 2;
    p.framework = "megatron";
    p.recompute = Recompute::selective;
    p.recompute_modules = parse_recompute_modules("moe,layernorm", {});
    run_moe_and_check(p);
}
TEST_CASE("exec runs zero2", "[exec][mpi][plan-zero2]") { run_and_check(data_parallel(DataParallel::zero2)); }
TEST_CASE("exec runs zero3", "[exec][mpi][plan-zero3]") { run_and_check(data_parallel(DataParallel::zero3)); }
TEST_CASE("exec runs zero3 with ZeRO++: quantized gathers, hpZ's groups of two and their secondary copies",
          "[exec][mpi][plan-zero3]") {
    // Built for GPUs (DeepSpeed's quantizers are CUDA kernels), run by the CPU executor.
    strategies::Plan p = data_parallel(DataParallel::zero3);
    p.zero_quantized_weights = true;
    p.zero_hpz_partition_size = 2;
    p.fold = false;
    p.seq = 128;
    p.dtype = DType::fp32;   // what the CPU executor computes in
    p.global_batch = 2 * test::session().size();   // two micro-batches: the second gathers in the groups
    const strategies::Built built =
        strategies::build(tiny(), topo::cluster_preset("jetson-agx-orin").with_nodes(test::session().size()), p);
    run_and_check(built.graph, topo::localhost_cluster());
}
TEST_CASE("exec runs zero3 with ZeRO++'s quantized gradients: the all-to-alls across one-GPU nodes",
          "[exec][mpi][plan-zero3]") {
    // Built for GPUs as above.
    strategies::Plan p = data_parallel(DataParallel::zero3);
    p.zero_quantized_gradients = true;
    p.fold = false;
    p.seq = 128;
    p.dtype = DType::fp32;
    const int ranks = test::session().size();
    const topo::Cluster boards = topo::cluster_preset("jetson-agx-orin").with_nodes(ranks);
    const strategies::Built built = strategies::build(tiny(), boards, p);
    REQUIRE(built.layout.qgz_node_ranks == 1);
    std::size_t all_to_all = 0;
    for (const Collective& c : built.graph.collectives()) all_to_all += c.kind == CollectiveKind::all_to_all;
    CHECK(all_to_all > 0);
    run_and_check(built.graph, topo::localhost_cluster());
    // With LoCo's error feedback: its dequantize and quantize passes and buffers.
    p.zero_loco = true;
    run_and_check(strategies::build(tiny(), boards, p).graph, topo::localhost_cluster());
}
TEST_CASE("exec runs zero3 with Twin-Flow: the first sub-groups stepped on the host, the rest on the device",
          "[exec][mpi][plan-zero3]") {
    // Built for discrete GPUs (on unified memory there is no host to offload to), run by the CPU
    // executor; sub-groups of 10,000 elements split tiny's partition.
    strategies::Plan p = data_parallel(DataParallel::zero3);
    p.offload_optimizer = strategies::Offload::cpu;
    p.optimizer_offload_fraction = 0.5;
    p.framework_overrides.sub_group_size = 10'000;
    p.fold = false;
    p.seq = 128;
    p.dtype = DType::fp32;
    const strategies::Built built =
        strategies::build(tiny(), topo::cluster_preset("dgx-a100").first_devices(test::session().size()), p);
    bool host = false, device = false;
    for (const Op& op : built.graph.ops())
        if (op.phase == Phase::opt && op.kind == OpKind::compute) (op.on_host() ? host : device) = true;
    CHECK(host);
    CHECK(device);
    run_and_check(built.graph, topo::localhost_cluster());
}
TEST_CASE("exec runs zero3 with MiCS: gathers and reduce-scatters in shard groups, the boundary all-reduce across them",
          "[exec][mpi][plan-zero3]") {
    // Built for GPUs, run by the CPU executor: shard groups of half the ranks (one rank at
    // -np 2), two micro-batches.
    strategies::Plan p = data_parallel(DataParallel::zero3);
    p.zero_mics_shard_size = std::max(1, test::session().size() / 2);
    p.global_batch = 2 * test::session().size();
    p.fold = false;
    p.seq = 128;
    p.dtype = DType::fp32;
    const strategies::Built built =
        strategies::build(tiny(), topo::cluster_preset("dgx-a100").first_devices(test::session().size()), p);
    bool across = false;
    for (const Collective& c : built.graph.collectives()) across = across || c.kind == CollectiveKind::all_reduce;
    CHECK(across);
    run_and_check(built.graph, topo::localhost_cluster());
    // The hierarchical gather over one-GPU boards: one shard group of every rank, gathered across
    // the nodes, then inside each (one rank), with the copy between.
    p.zero_mics_shard_size = test::session().size();
    p.zero_mics_hierarchical = true;
    const strategies::Built boards =
        strategies::build(tiny(), topo::cluster_preset("jetson-agx-orin").with_nodes(test::session().size()), p);
    REQUIRE(boards.layout.mics_node_ranks == 1);
    run_and_check(boards.graph, topo::localhost_cluster());
}
TEST_CASE("exec runs fsdp", "[exec][mpi][plan-fsdp]") { run_and_check(data_parallel(DataParallel::fsdp)); }
TEST_CASE("exec runs fsdp under no_sync: gradients held through two micro-batches, reduced after the last",
          "[exec][mpi][plan-fsdp]") {
    strategies::Plan p = data_parallel(DataParallel::fsdp);
    p.fsdp_no_sync = true;
    p.global_batch = 2 * test::session().size();
    run_and_check(p);
}
TEST_CASE("exec runs fsdp's CPU offload with LoRA and QLoRA: the frozen shards copied in with the adapters'",
          "[exec][mpi][plan-fsdp]") {
    for (const char* ft : {"lora:4", "qlora:4"}) {
        INFO(ft);
        strategies::Plan p = data_parallel(DataParallel::fsdp);
        p.offload = strategies::Offload::cpu;
        p.finetune = strategies::parse_finetune(ft);
        run_and_check(p);
    }
}
TEST_CASE("exec runs fsdp with expert parallelism: the all-to-alls, and the experts gathered over their own groups",
          "[exec][mpi][plan-fsdp]") {
    strategies::Plan p = data_parallel(DataParallel::fsdp);
    p.ep = 2;
    run_moe_and_check(p);
    if (test::session().size() < 4) return;
    // HSDP + EP: shard groups of 2 replicas, each holding both expert sets, experts replicated
    // across the groups (all-reduced).
    p.fsdp_sharding = strategies::FsdpSharding::hybrid;
    p.fsdp_group = 2;
    run_moe_and_check(p);
    // FSDP + TP + EP: tp 2 · dp 2, the experts split over the tensor group, one expert set a replica.
    p = data_parallel(DataParallel::fsdp);
    p.tp = 2;
    p.sequence_parallel = true;
    p.ep = 2;
    run_moe_and_check(p);
}
TEST_CASE("exec runs fsdp with expert parallelism under pipeline stages", "[exec][mpi][plan-fsdp-pp2]") {
    if (test::session().size() < 4) return;   // pp 2 leaves dp 1 on two ranks: nothing for ep to split
    strategies::Plan p = pipeline(Schedule::one_f_one_b);
    p.strategy = DataParallel::fsdp;
    p.ep = 2;
    run_moe_and_check(p);
}
TEST_CASE("exec runs hybrid-cnn: broadcasts, reduces to a root and a second communicator", "[exec][mpi][plan-hybrid-cnn]") {
    const topo::Cluster cluster = topo::localhost_cluster();
    REQUIRE(cluster.num_devices() == test::session().size());
    for (auto v : {strategies::HybridVariant::all_gather, strategies::HybridVariant::broadcast,
                   strategies::HybridVariant::chunked}) {
        INFO(strategies::to_string(v));
        strategies::Plan p = data_parallel(DataParallel::hybrid_cnn);
        p.hybrid_variant = v;
        p.micro_batch = 4;   // chunked: a multiple of the ranks
        run_and_check(strategies::build(tiny_cnn(), cluster, p).graph, cluster);
    }
}
TEST_CASE("exec runs zero3 with tp 2: Megatron's collectives in each replica, the slices partitioned over its tensor rank's replicas",
          "[exec][mpi][plan-zero3-tp2]") {
    strategies::Plan p = data_parallel(DataParallel::zero3);
    p.tp = 2;
    run_and_check(p);
}
TEST_CASE("exec runs zero2 with tp 2", "[exec][mpi][plan-zero2-tp2]") {
    strategies::Plan p = data_parallel(DataParallel::zero2);
    p.tp = 2;
    run_and_check(p);
}
TEST_CASE("exec runs tp 2", "[exec][mpi][plan-tp2]") {
    strategies::Plan p;
    p.tp = 2;
    run_and_check(p);
}
TEST_CASE("exec runs fsdp's CPU offload with tp 2: each tensor rank's shard copied in and out, stepped on the host",
          "[exec][mpi][plan-tp2]") {
    strategies::Plan p = data_parallel(DataParallel::fsdp);
    p.tp = 2;
    p.offload = strategies::Offload::cpu;
    run_and_check(p);
}
TEST_CASE("exec runs tp 2 with the MLP recomputed: its kernels and its all-reduce again in backward", "[exec][mpi][plan-tp2]") {
    strategies::Plan p;
    p.tp = 2;
    p.framework = "megatron";
    p.recompute = Recompute::selective;
    p.recompute_modules = parse_recompute_modules("core_attn,mlp", {});
    run_and_check(p);
}
TEST_CASE("exec runs LoRA with tp 2: PEFT's split adapters and their rank-r all-reduces", "[exec][mpi][plan-tp2]") {
    strategies::Plan p;
    p.tp = 2;
    p.finetune = strategies::parse_finetune("lora:4");
    run_and_check(p);
}
TEST_CASE("exec runs pp 2 with gpipe", "[exec][mpi][plan-pp2-gpipe]") { run_and_check(pipeline(Schedule::gpipe)); }
TEST_CASE("exec runs pp 2 with 1f1b", "[exec][mpi][plan-pp2-1f1b]") { run_and_check(pipeline(Schedule::one_f_one_b)); }
TEST_CASE("exec runs pp 2 interleaved", "[exec][mpi][plan-pp2-interleaved]") { run_and_check(pipeline(Schedule::interleaved, 2)); }
TEST_CASE("exec runs fsdp under pipeline stages: each stage's units gathered once, reduce-scattered after its backward",
          "[exec][mpi][plan-fsdp-pp2]") {
    strategies::Plan p = pipeline(Schedule::one_f_one_b);
    p.strategy = DataParallel::fsdp;
    run_and_check(p);
}
TEST_CASE("exec runs tp 2 · pp 2", "[exec][mpi][plan-tp2-pp2]") {
    strategies::Plan p = pipeline(Schedule::one_f_one_b);
    p.tp = 2;
    run_and_check(p);
}

TEST_CASE("exec runs cp: the ring attention's sends and receives on their own queues, or its all-gathers and all-to-alls", "[exec][mpi][plan-cp]") {
    // Context parallelism runs Transformer Engine's fused attention, a GPU's: the plan is built
    // for as many H100s as this mpirun has ranks, and run here in fp32 (the CPU executor's flash
    // kernel), cp = ranks; gpt-tiny's 4 heads split over 2 or 4 ranks for a2a.
    const CpComm comm = GENERATE(CpComm::p2p, CpComm::all_gather, CpComm::all_to_all);
    CAPTURE(to_string(comm));
    const int ranks = test::session().size();
    strategies::Plan p;
    p.cp = ranks;
    p.cp_comm = comm;
    p.fold = false;
    p.seq = 128;
    p.dtype = DType::fp32;
    const strategies::Built built = strategies::build(tiny(), topo::cluster_preset("dgx-h100").first_devices(ranks), p);
    std::size_t ring = 0, group = 0;
    for (const Op& op : built.graph.ops()) {
        ring += op.stream == Stream::cp_send || op.stream == Stream::cp_recv;
        if (op.kind != OpKind::collective) continue;
        const CollectiveKind k = built.graph.collectives()[static_cast<std::size_t>(op.ref)].kind;
        group += comm == CpComm::all_gather ? k == CollectiveKind::all_gather : k == CollectiveKind::all_to_all;
    }
    CHECK((comm == CpComm::p2p ? ring : group) > 0);
    run_and_check(built.graph, topo::localhost_cluster());
}
TEST_CASE("exec runs cp on a mixture of experts: the ring, then the all-to-alls over the folded expert groups",
          "[exec][mpi][plan-cp]") {
    // cp 2: with 2 ranks the expert-parallel pair is the context-parallel pair; with 4, dp 2 · cp 2
    // and ep 2 (each cp pair) or 4 (every rank), zero1 sharding the experts' states.
    const int ranks = test::session().size();
    for (const int ep : {2, 4}) {
        if (ep > ranks) continue;
        CAPTURE(ep);
        strategies::Plan p;
        p.cp = 2;
        p.ep = ep;
        p.strategy = DataParallel::zero1;
        p.seq = 128;
        p.global_batch = ranks / 2;
        p.dtype = DType::fp32;
        run_moe_and_check(p, topo::cluster_preset("dgx-h100").first_devices(ranks));
    }
    {
        // Megatron core's recompute of the attention core and the MoE layer (--recompute-modules
        // core_attn,moe): the ring and the all-to-alls again in backward; the loss as Transformer
        // Engine's fused cross-entropy (--cross-entropy-fusion te, core 0.12 to 0.18).
        strategies::Plan p;
        p.cp = 2;
        p.ep = 2;
        p.strategy = DataParallel::zero1;
        p.framework = "megatron@0.16";
        p.recompute = Recompute::selective;
        p.recompute_modules = parse_recompute_modules("core_attn,moe", {"", "", "--recompute-modules"});
        p.cross_entropy_fusion = strategies::CrossEntropyFusion::te;
        p.seq = 128;
        p.global_batch = ranks / 2;
        p.dtype = DType::fp32;
        run_moe_and_check(p, topo::cluster_preset("dgx-h100").first_devices(ranks));
    }
    if (ranks < 4) return;
    // tp 2 · cp 2 with sequence parallelism: each tensor rank's experts over its cp pair.
    strategies::Plan p;
    p.tp = 2;
    p.sequence_parallel = true;
    p.cp = 2;
    p.ep = 2;
    p.strategy = DataParallel::zero1;
    p.seq = 128;
    p.global_batch = 1;
    p.dtype = DType::fp32;
    run_moe_and_check(p, topo::cluster_preset("dgx-h100").first_devices(ranks));
}
TEST_CASE("exec runs fsdp with cp on a mixture of experts: the dense part sharded over dp · cp, the experts over their group",
          "[exec][mpi][plan-cp]") {
    // 2 ranks: cp 2 · ep 2, the experts split over the cp pair and held whole; 4 ranks: dp 2 ·
    // cp 2, ep 2 (each cp pair) with the experts sharded over the two replicas holding the same
    // ones.
    const int ranks = test::session().size();
    strategies::Plan p;
    p.strategy = DataParallel::fsdp;
    p.cp = 2;
    p.ep = 2;
    p.seq = 128;
    p.global_batch = ranks / 2;
    p.dtype = DType::fp32;
    run_moe_and_check(p, topo::cluster_preset("dgx-h100").first_devices(ranks));
}
TEST_CASE("exec runs fsdp with cp: every unit gathered per micro-batch over the context-parallel ranks", "[exec][mpi][plan-cp]") {
    // FSDP sharding over the cp ranks (dp 1), two micro-batches: each unit's all-gathers and
    // reduce-scatter per micro-batch around the ring attention's transfers.
    const int ranks = test::session().size();
    strategies::Plan p;
    p.strategy = DataParallel::fsdp;
    p.cp = ranks;
    p.fold = false;
    p.seq = 128;
    p.global_batch = 2;
    p.dtype = DType::fp32;
    const strategies::Built built = strategies::build(tiny(), topo::cluster_preset("dgx-h100").first_devices(ranks), p);
    REQUIRE(built.layout.microbatches == 2);
    run_and_check(built.graph, topo::localhost_cluster());
}

TEST_CASE("exec runs copies between tiers, NVMe-tier files, timers and ops without recipes, twice", "[exec][mpi][plan-synthetic]") {
    // No strategy offloads yet: a hand-built graph with everything the executor can run. Every
    // rank copies to host memory and through the NVMe tier (files in the scratch directory, removed
    // afterwards), keeps an NVMe buffer, waits on a host-stream timer and runs add_compute ops;
    // then a ring of sends and a barrier.
    exec::Session& session = test::session();
    const int p = session.size();
    const topo::Cluster cluster = topo::localhost_cluster();
    OpGraph g(p);
    std::vector<int> all;
    for (int r = 0; r < p; ++r) all.push_back(r);
    for (int r = 0; r < p; ++r) {
        const std::int32_t act = g.add_buffer(r, Tier::device, Bytes(1 << 20), BufferLabel::activations);
        const std::int32_t off = g.add_buffer(r, Tier::nvme, Bytes(3 << 20), BufferLabel::optimizer_state);
        const std::int32_t host = g.add_buffer(r, Tier::host, Bytes(1 << 20), BufferLabel::staging);
        g.add_alloc(act, Stream::compute);
        const OpId mm = g.add_compute(r, Phase::fwd, 0, 0, Flops(2.0 * 128 * 128 * 128), Bytes(0), KernelClass::gemm, DType::fp32);
        g.add_compute(r, Phase::fwd, 0, 0, Flops(0), Bytes(1 << 20), KernelClass::elementwise, DType::fp32);
        const OpId a = g.add_alloc(host, Stream::copy);
        const OpId down = g.add_copy(r, Tier::device, Tier::host, Bytes(1 << 20), Phase::opt);
        g.depend(mm, down);
        const OpId n = g.add_alloc(off, Stream::copy);
        g.add_copy(r, Tier::host, Tier::nvme, Bytes((1 << 20) + 123), Phase::opt);   // not a whole page
        const OpId back = g.add_copy(r, Tier::nvme, Tier::host, Bytes(1 << 20), Phase::opt);
        g.add_free(host, Stream::copy);
        (void)a;
        (void)n;
        const OpId tick = g.add_timer(r, Time::ms(2), Stream::host, Phase::comm);
        const OpId opt = g.add_compute(r, Phase::opt, -1, -1, Flops(12.0 * 10000), Bytes(0), KernelClass::optimizer, DType::fp32);
        g.depend(back, opt);
        g.depend(tick, opt);
        g.add_free(act, Stream::compute);
    }
    for (int r = 0; r < p; ++r) g.add_send_recv(r, (r + 1) % p, Bytes(4096 + r), Phase::fwd, -1, -1);
    g.add_collective(CollectiveKind::barrier, all, Bytes(0), Stream::comm, Phase::comm);
    g.finalize();
    const std::filesystem::path scratch = std::filesystem::temp_directory_path() / ("smol-exec-scratch-" + std::to_string(getpid()));
    std::filesystem::create_directories(scratch);
    run_and_check(g, cluster, scratch.string(), 2);   // twice: a second run waits as the first did
    // Every rank's backend removed its directory of NVMe files.
    MPI_Barrier(session.mpi().world());
    CHECK(std::filesystem::is_empty(scratch));
    MPI_Barrier(session.mpi().world());
    if (session.root()) std::filesystem::remove_all(scratch);
}
