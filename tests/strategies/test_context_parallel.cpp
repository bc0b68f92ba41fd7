// Context parallelism (strategies/context_parallel.hpp, core/transformer.cpp) against independent
// expectations: a rank's share of the work and memory is 1/cp of the whole (the GEMMs' FLOPs by
// hand, the causal attention's pairs by the closed form s²/2), the ring's transfer is a rank's K
// and V (b · s/cp · kv heads · head dim · 2 · bytes, by hand), its hops per layer and pass
// (cp − 1 forward; cp in backward), the groups Megatron forms (tp-cp-dp-pp), gradients reduced
// over dp · cp, the ring's transfers overlapping the attention kernels, and bad plans.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "core/error.hpp"
#include "sim/simulator.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/simulation.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

/// A small Llama: 4 layers of hidden 512, 8 heads of 64, 2 key-value heads, SwiGLU 1536.
Model small_llama() {
    static Json doc = parse_json_text(R"({"kind": "transformer", "name": "llama-small", "layers": 4, "hidden": 512,
        "heads": 8, "kv_heads": 2, "ffn_hidden": 1536, "vocab": 4096, "seq": 4096, "gated_mlp": true, "biases": false,
        "norm": "rmsnorm", "positions": "rope", "tied_embeddings": false})", "llama-small.json");
    return model_from_json(JsonView(doc, "llama-small.json"), "llama-small");
}

Workload workload(int cp, int seq = 4096) {
    Workload w;
    w.micro_batch = 2;
    w.seq = seq;
    w.cp = cp;
    w.attention = Attention::flash;
    return w;
}

double kernel_flops(const Block& b, KernelOp op) {
    double f = 0;
    for (const Kernel& k : b.fwd_kernels)
        if (k.op == op) f += k.flops;
    return f;
}

/// Sends on the ring's queue that rank `rank` makes for `layer` in micro-batch 0, by phase, and their bytes.
std::map<Phase, std::vector<std::int64_t>> ring_sends(const OpGraph& g, int rank, int layer) {
    std::map<Phase, std::vector<std::int64_t>> out;
    for (const Op& op : g.ops())
        if (op.kind == OpKind::send && op.stream == Stream::cp_send && op.rank == rank && op.layer == layer && op.microbatch == 0)
            out[op.phase].push_back(op.bytes);
    return out;
}

/// Rank 1's collectives for layer 2 in micro-batch 0, by phase (each checked to be on `group`'s
/// communicator), and the ring's sends and receives of the whole graph.
std::pair<std::map<Phase, std::vector<std::pair<CollectiveKind, std::int64_t>>>, std::size_t> group_collectives(
    const Built& b, const std::vector<int>& group) {
    std::map<Phase, std::vector<std::pair<CollectiveKind, std::int64_t>>> seen;
    std::size_t ring_ops = 0;
    for (const Op& op : b.graph.ops()) {
        ring_ops += op.stream == Stream::cp_send || op.stream == Stream::cp_recv;
        if (op.kind != OpKind::collective || op.rank != 1 || op.layer != 2 || op.microbatch != 0) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        CHECK(b.graph.communicators()[static_cast<std::size_t>(col.communicator)] == group);
        seen[op.phase].emplace_back(col.kind, col.bytes);
    }
    return {seen, ring_ops};
}

Plan cp_plan(int cp) {
    Plan p;
    p.cp = cp;
    p.micro_batch = 2;
    p.seq = 4096;
    return p;
}

}  // namespace

TEST_CASE("context parallelism gives each rank 1/cp of a layer's GEMMs, attention and activations", "[strategies][cp]") {
    const int cp = GENERATE(2, 4, 8);
    CAPTURE(cp);
    const Model m = small_llama();
    const std::vector<Block> whole = m.blocks(workload(1)), part = m.blocks(workload(cp));
    REQUIRE(whole.size() == part.size());
    const Block& w = whole[1];
    const Block& p = part[1];
    // The GEMMs run on the rank's b·s/cp tokens: q, k, v, o, gate+up, down, by hand.
    const double tokens = 2.0 * 4096 / cp, h = 512, q = 8 * 64, kv = 2 * 64, f = 1536;
    const double gemm = 2 * tokens * h * (q + 2 * kv) + 2 * tokens * q * h + 2 * tokens * h * 2 * f + 2 * tokens * f * h;
    CHECK(kernel_flops(p, KernelOp::gemm) == Approx(gemm));
    CHECK(kernel_flops(p, KernelOp::gemm) * cp == Approx(kernel_flops(w, KernelOp::gemm)));
    // The causal core: s(s + 1)/2 query-key pairs of the whole sequence per head, 4·hd FLOPs each
    // (QKᵀ and PV), 1/cp of them on each rank, in cp ring steps.
    const double pairs = 4096.0 * 4097 / 2, heads = 2 * 8;
    CHECK(kernel_flops(p, KernelOp::flash) == Approx(pairs * 4 * 64 * heads / cp));
    int steps = 0, masked = 0;
    for (const Kernel& k : p.fwd_kernels) {
        if (k.op != KernelOp::flash) continue;
        ++steps;
        // Only the first step is under the causal mask, the rank's two chunks against themselves;
        // TE passes "no_mask" after, each later step all queries against one chunk of keys.
        masked += k.causal;
        CHECK(k.m == 4096 / cp);
        CHECK(k.n == (k.causal ? 4096 / cp : 4096 / cp / 2));
    }
    CHECK(steps == cp);
    CHECK(masked == 1);
    // Model FLOPs per rank: 1/cp of the whole (the non-causal count, s × s pairs, split by query).
    CHECK(p.fwd.count() * cp == Approx(w.fwd.count()));
    // Memory: every saved tensor is per token (flash keeps no s² term), so 1/cp of it.
    CHECK(p.activations.count() * cp == w.activations.count());
    CHECK(p.output.count() * cp == w.output.count());
    CHECK(p.params == w.params);   // the weights are whole on every rank
    // The ring's block: K and V of the rank's tokens, 2 kv heads of 64 each, in bf16.
    REQUIRE(p.cp);
    CHECK(p.cp->steps == cp);
    CHECK(p.cp->kv_bytes == Bytes(static_cast<std::int64_t>(tokens) * 2 * 64 * 2 * 2));
    CHECK_FALSE(w.cp);
}

TEST_CASE("context-parallel groups, ring hops and the gradient group are Megatron's", "[strategies][cp]") {
    const int cp = GENERATE(2, 4);
    const Recompute recompute = GENERATE(Recompute::none, Recompute::full);
    CAPTURE(cp, recompute);
    const Model m = small_llama();
    Plan plan = cp_plan(cp);
    plan.tp = 2;
    plan.recompute = recompute;
    plan.fold = false;
    const topo::Cluster c = topo::cluster_preset("dgx-h100").with_nodes(2);   // 16 GPUs: tp 2 · cp · dp
    const Built b = build(m, c, plan);
    const Layout& l = b.layout;
    CHECK(l.cp == cp);
    CHECK(l.dp == 16 / (2 * cp));
    // Megatron's order tp-cp-dp-pp: the CP group of rank 0 is tensor rank 0 of the first cp slots.
    std::vector<int> expected;
    for (int k = 0; k < cp; ++k) expected.push_back(2 * k);
    CHECK(context_parallel_group(l, 0, 0, 0) == expected);
    // Every rank's ring for a layer: cp − 1 hops of K and V in forward (cp − 1 more with full
    // recompute); in backward K and V cp − 1 times and their gradient cp − 1 times, one step
    // behind, ending on its owner (TE context_parallel.py:2459-2500): (2·cp − 2) blocks' bytes
    // over cp sends.
    const std::int64_t kv = 2 * (4096 / cp) * (2 / 2) * 64 * 2 * 2;   // b · s/cp · kvh/t · (hd + vd) · e
    for (int rank : {0, 2 * (cp - 1) + 1}) {
        const auto sends = ring_sends(b.graph, rank, 2);
        REQUIRE(sends.count(Phase::fwd));
        CHECK(sends.at(Phase::fwd) == std::vector<std::int64_t>(static_cast<std::size_t>(cp - 1), kv));
        CHECK(sends.count(Phase::recompute) == (recompute == Recompute::full ? 1u : 0u));
        if (recompute == Recompute::full) CHECK(sends.at(Phase::recompute).size() == static_cast<std::size_t>(cp - 1));
        std::int64_t bwd = 0;
        for (std::int64_t bytes : sends.at(Phase::bwd)) bwd += bytes;
        CHECK(sends.at(Phase::bwd).size() == static_cast<std::size_t>(cp));
        CHECK(bwd == (2 * cp - 2) * kv);
    }
    // Gradients are all-reduced over the dp · cp ranks of tensor rank 0 (the data-parallel group
    // with context parallelism): ranks 0, 2, 4, … 14.
    std::set<std::vector<int>> groups;
    for (const Op& op : b.graph.ops())
        if (op.kind == OpKind::collective && op.rank == 0 && op.stream == Stream::comm) {
            const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
            groups.insert(b.graph.communicators()[static_cast<std::size_t>(col.communicator)]);
        }
    REQUIRE(groups.size() == 1);
    CHECK(*groups.begin() == std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14});
}

TEST_CASE("all-gathered context parallelism: K and V all-gathered before attention (again in backward), dK and dV reduce-scattered after", "[strategies][cp]") {
    const int cp = GENERATE(2, 4);
    CAPTURE(cp);
    const Model m = small_llama();
    Workload w = workload(cp);
    const Block ring = m.blocks(w)[1];
    w.cp_comm = CpComm::all_gather;
    const Block gathered = m.blocks(w)[1];
    // The same attention work, as two kernels (the rank's two chunks) instead of cp steps.
    int kernels = 0;
    for (const Kernel& k : gathered.fwd_kernels) {
        kernels += k.op == KernelOp::flash;
        // causal_bottom_right masks one chunk × chunk block of chunk × keys: priced unmasked.
        if (k.op == KernelOp::flash) CHECK_FALSE(k.causal);
    }
    CHECK(kernels == 2);
    CHECK(kernel_flops(gathered, KernelOp::flash) == Approx(kernel_flops(ring, KernelOp::flash)));
    CHECK(kernel_flops(gathered, KernelOp::gemm) == Approx(kernel_flops(ring, KernelOp::gemm)));
    REQUIRE(gathered.cp);
    CHECK(gathered.cp->comm == CpComm::all_gather);

    Plan plan = cp_plan(cp);
    plan.cp_comm = CpComm::all_gather;
    plan.fold = false;
    const Built b = build(m, topo::cluster_preset("dgx-h100"), plan);
    auto [seen, ring_ops] = group_collectives(b, context_parallel_group(b.layout, 0, 1, 0));
    CHECK(ring_ops == 0);
    // Transformer Engine gathers K and V as two collectives (context_parallel.py:3215-3216), gathers
    // them again in backward (:3788-3789) and reduce-scatters dK and dV apart (:4122-4123).
    // Each is cp × b · s/cp · kvh · hd · e (hd == vd here).
    const std::int64_t kv_bytes = cp * 2 * (4096 / cp) * 2 * 128;
    using V = std::vector<std::pair<CollectiveKind, std::int64_t>>;
    CHECK(seen[Phase::fwd] == V{{CollectiveKind::all_gather, kv_bytes}, {CollectiveKind::all_gather, kv_bytes}});
    CHECK(seen[Phase::bwd] == V{{CollectiveKind::all_gather, kv_bytes}, {CollectiveKind::all_gather, kv_bytes},
                                {CollectiveKind::reduce_scatter, kv_bytes}, {CollectiveKind::reduce_scatter, kv_bytes}});
    const tools::Simulation run = tools::simulate_plan(m, topo::cluster_preset("dgx-h100"), plan, {});
    CHECK(run.summary.iteration > Time::zero());
}

TEST_CASE("all-to-all context parallelism: Q, K, V all-to-all'ed before attention over 1/cp of the heads, the output after", "[strategies][cp]") {
    const int cp = 2;   // small_llama's 2 key-value heads split over 2 ranks at most
    const Model m = small_llama();
    Workload w = workload(cp);
    const Block ring = m.blocks(w)[1];
    w.cp_comm = CpComm::all_to_all;
    const Block a2a = m.blocks(w)[1];
    // One attention kernel over the whole sequence and 1/cp of the heads: 2 · 8 / 2 = 8 (batch · heads),
    // 4096 queries; the same FLOPs as the ring's steps, the same GEMMs.
    std::vector<Kernel> flash;
    for (const Kernel& k : a2a.fwd_kernels)
        if (k.op == KernelOp::flash) flash.push_back(k);
    REQUIRE(flash.size() == 1);
    CHECK(flash[0].batch == 2 * 8 / cp);
    CHECK(flash[0].m == 4096);
    CHECK(kernel_flops(a2a, KernelOp::flash) == Approx(kernel_flops(ring, KernelOp::flash)));
    CHECK(kernel_flops(a2a, KernelOp::gemm) == Approx(kernel_flops(ring, KernelOp::gemm)));
    // Transformer Engine's copies around the all-to-alls: two of each of Q, K, V and the output,
    // each reading and writing the tensor (b · s/cp · heads · 64 · 2 bytes), backward the same.
    const std::int64_t q = 2 * (4096 / cp) * 8 * 64 * 2, kv = 2 * (4096 / cp) * 2 * 64 * 2;
    std::vector<std::int64_t> copies, grads;
    for (const Kernel& k : a2a.fwd_kernels)
        if (k.name == KernelName::cp_permute) copies.push_back(k.bytes);
    CHECK(copies == std::vector<std::int64_t>{2 * q, 2 * kv, 2 * kv, 2 * q, 2 * kv, 2 * kv, 2 * q, 2 * q});
    for (const Kernel& k : backward_kernels(a2a.fwd_kernels))
        if (k.name == KernelName::cp_permute) grads.push_back(k.bytes);
    CHECK(grads == std::vector<std::int64_t>{2 * q, 2 * q, 2 * kv, 2 * kv, 2 * q, 2 * kv, 2 * kv, 2 * q});

    Plan plan = cp_plan(cp);
    plan.cp_comm = CpComm::all_to_all;
    plan.fold = false;
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(2);
    const Built b = build(m, c, plan);
    auto [seen, ring_ops] = group_collectives(b, context_parallel_group(b.layout, 0, 0, 0));
    CHECK(ring_ops == 0);
    const auto a = CollectiveKind::all_to_all;
    using V = std::vector<std::pair<CollectiveKind, std::int64_t>>;
    CHECK(seen[Phase::fwd] == V{{a, q}, {a, kv}, {a, kv}, {a, q}});   // Q, K, V; the output (vd = hd)
    CHECK(seen[Phase::bwd] == V{{a, q}, {a, q}, {a, kv}, {a, kv}});   // dO; dQ, dK, dV
    const tools::Simulation run = tools::simulate_plan(m, c, plan, {});
    CHECK(run.summary.iteration > Time::zero());

    // 4 ranks cannot split 2 key-value heads.
    plan.cp = 4;
    CHECK_THAT(bad_input_message([&] { build(m, topo::cluster_preset("dgx-h100").first_devices(4), plan); }),
               Contains("--cp-comm") && Contains("2 key-value heads") && Contains("--cp 4"));
}

TEST_CASE("context parallelism splits the work: the ranks' FLOPs add up to one rank's without it", "[strategies][cp]") {
    const Model m = small_llama();
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan one = cp_plan(1), split = cp_plan(4);
    one.global_batch = split.global_batch = 2;
    auto flops = [&](Plan p, int devices) {
        const Built b = build(m, c.first_devices(devices), p);
        double f = 0;
        for (const Op& op : b.graph.ops())
            if (op.kind == OpKind::compute && (op.phase == Phase::fwd || op.phase == Phase::bwd)) f += op.flops;
        return f;
    };
    CHECK(flops(split, 4) == Approx(flops(one, 1)).epsilon(1e-9));
}

TEST_CASE("the ring's transfers run under the attention kernels, and folding keeps the result", "[strategies][cp]") {
    const Model m = small_llama();
    const topo::Cluster c = topo::cluster_preset("dgx-h100").with_nodes(2);
    Plan plan = cp_plan(8);  // a CP group fills a node: replicas fold
    plan.global_batch = 4;   // dp 2, one micro-batch each
    plan.fold = false;
    const tools::Simulation whole = tools::simulate_plan(m, c, plan, {});
    const OpGraph& g = whole.built.graph;
    const Timeline& t = whole.timeline;
    // Rank 1, layer 2, forward: the first hop starts before the first attention step ends.
    OpId first_send = OpGraph::kNoOp, first_step = OpGraph::kNoOp;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != 1 || op.layer != 2 || op.microbatch != 0 || op.phase != Phase::fwd) continue;
        if (op.kind == OpKind::send && first_send == OpGraph::kNoOp) first_send = id;
        if (op.kind == OpKind::compute && op.kernel() == KernelClass::attention && first_step == OpGraph::kNoOp) first_step = id;
    }
    REQUIRE(first_send != OpGraph::kNoOp);
    REQUIRE(first_step != OpGraph::kNoOp);
    CHECK(t.start[first_send] < t.end[first_step]);
    // Folding the data-parallel replicas (one CP group kept) gives the same step.
    plan.fold = true;
    const tools::Simulation folded = tools::simulate_plan(m, c, plan, {});
    CHECK(folded.built.layout.folded);
    CHECK(folded.summary.iteration.to_seconds() == Approx(whole.summary.iteration.to_seconds()).epsilon(1e-6));
}

TEST_CASE("context-parallel plans that cannot run say why", "[strategies][cp]") {
    const Model m = small_llama();
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    SECTION("the sequence does not cut into 2 · cp chunks") {
        Plan p = cp_plan(8);
        p.seq = 4088;   // 255.5 chunks of 16
        CHECK_THAT(bad_input_message([&] { build(m, c, p); }), Contains("2 × cp = 16") && Contains("--cp"));
    }
    SECTION("eager attention") {
        Plan p = cp_plan(2);
        p.attention = Attention::eager;
        CHECK_THAT(bad_input_message([&] { build(m, c, p); }), Contains("no eager"));
    }
    SECTION("a sharded strategy") {
        Plan p = cp_plan(2);
        p.strategy = DataParallel::zero3;
        p.framework = "deepspeed";
        CHECK_THAT(bad_input_message([&] { build(m, c, p); }), Contains("context parallelism") && Contains("ddp, zero1"));
        p.strategy = DataParallel::zero2;
        CHECK_THAT(bad_input_message([&] { build(m, c, p); }), Contains("context parallelism") && Contains("or fsdp"));
    }
    SECTION("cp not dividing the devices") {
        Plan p = cp_plan(3);
        CHECK_THAT(bad_input_message([&] { build(m, c, p); }), Contains("tp × pp × cp = 3") && Contains("8"));
    }
    SECTION("a layer list") {
        Plan p = cp_plan(2);
        p.seq = 0;
        CHECK_THAT(bad_input_message([&] { build(model_preset("resnet50"), c, p); }), Contains("layer list"));
    }
}

TEST_CASE("zb-h1 on one stage runs as 1F1B: FSDP's hooks with context parallelism do not deadlock", "[strategies][cp][fsdp]") {
    // Found by fuzz_plan: gpt-tiny, FSDP, cp 4, pp 1, zb-h1, selective recompute. Zero-bubble H1
    // splits backward to fill pipeline bubbles; with one stage there are none (the command line
    // refuses the schedule there), and the split weight passes deadlocked against the ring's
    // sends queued behind FSDP's backward gathers. The library runs it as 1F1B.
    const Model m = model_preset("gpt-tiny");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.cp = 4;
    p.recompute = Recompute::selective;
    p.micro_batch = 8;
    p.global_batch = 16;
    p.seq = 256;
    sim::SimOptions o;
    o.network = sim::NetworkMode::analytic;
    p.schedule = Schedule::one_f_one_b;
    const tools::Simulation a = tools::simulate_plan(m, c, p, o);
    p.schedule = Schedule::zb_h1;
    const tools::Simulation b = tools::simulate_plan(m, c, p, o);
    CHECK(b.summary.iteration == a.summary.iteration);
    CHECK(b.built.graph.size() == a.built.graph.size());
}
