// Mixture of experts with expert parallelism (strategies/moe.hpp) against independent
// expectations: all-to-all bytes counted from the graph against tokens × hidden × top-k × bytes ×
// (ep − 1)/ep, Megatron's expert-parallel and expert-data-parallel groups, expert gradients
// reduced over the latter, Mixtral-8x7B's memory per device against a hand calculation, and bad
// plans.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "core/error.hpp"
#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/moe.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/simulation.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

/// A small MoE: 4 layers of hidden 512, 8 experts of width 1024, 2 per token, layer 0 dense.
Model small_moe() {
    static Json doc = parse_json_text(R"({"kind": "transformer", "name": "moe-small", "layers": 4, "hidden": 512,
        "heads": 8, "ffn_hidden": 2048, "vocab": 4096, "seq": 256, "gated_mlp": true, "biases": false,
        "norm": "rmsnorm", "positions": "rope",
        "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 1024, "dense_layers": [0]}})", "moe-small.json");
    return model_from_json(JsonView(doc, "moe-small.json"), "moe-small");
}

Model mixtral() { return load_model(std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json"); }

struct AllToAll {
    int per_layer_fwd = 0, per_layer_bwd = 0;
    std::int64_t bytes = 0;            // per rank, each
    std::set<std::vector<int>> groups;
};

/// The all-to-alls rank `rank` runs for `layer` in micro-batch 0, counted from the graph.
AllToAll all_to_alls(const OpGraph& g, int rank, int layer) {
    AllToAll out;
    for (const Op& op : g.ops()) {
        if (op.kind != OpKind::collective || op.rank != rank || op.layer != layer || op.microbatch != 0) continue;
        const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
        if (c.kind != CollectiveKind::all_to_all) continue;
        (op.phase == Phase::fwd ? out.per_layer_fwd : out.per_layer_bwd) += 1;
        out.bytes = c.bytes;
        out.groups.insert(g.communicators()[static_cast<std::size_t>(c.communicator)]);
    }
    return out;
}

/// Rank `rank`'s comm-stream collectives by (kind, communicator size): their bytes and count.
struct CommTotals {
    std::map<std::pair<CollectiveKind, std::size_t>, double> bytes;
    std::map<std::pair<CollectiveKind, std::size_t>, int> count;
};
CommTotals comm_totals(const OpGraph& g, int rank) {
    CommTotals out;
    for (const Op& op : g.ops()) {
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& col = g.collectives()[static_cast<std::size_t>(op.ref)];
        const std::pair key{col.kind, g.communicators()[static_cast<std::size_t>(col.communicator)].size()};
        out.bytes[key] += static_cast<double>(col.bytes);
        ++out.count[key];
    }
    return out;
}

/// The small MoE's parameters outside the experts, and of its embedding and head.
std::pair<double, double> dense_and_root(const Model& m) {
    double dense = 0, root = 0;
    for (const Block& blk : m.blocks(Workload{})) {
        const double d = static_cast<double>(blk.params - (blk.moe ? blk.moe->expert_params : 0));
        dense += d;
        if (blk.kind == Block::Kind::embedding || blk.kind == Block::Kind::head) root += d;
    }
    return {dense, root};
}

}  // namespace

TEST_CASE("MoE all-to-all bytes per layer are tokens × hidden × top-k × bytes × (ep − 1)/ep", "[strategies][moe]") {
    const int ep = GENERATE(2, 4, 8);
    const int tp = GENERATE(1, 2);
    CAPTURE(ep, tp);
    const Model m = small_moe();
    Plan plan;
    plan.ep = ep;
    plan.tp = tp;
    plan.sequence_parallel = tp > 1;
    plan.micro_batch = 2;
    plan.global_batch = 2 * 8;  // one micro-batch per replica
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(tp);  // 8 · tp GPUs: dp 8
    const Built b = build(m, c, plan);
    const Layout& l = b.layout;
    REQUIRE(l.dp == 8);
    const double tokens = 2 * 256, hidden = 512, top_k = 2, e = 2;
    // Each tensor rank routes its sequence shard (sp): tokens / tp.
    const double buffer = tokens / tp * hidden * top_k * e;
    for (int layer : {2, 3, 4}) {  // the MoE layers (block 1 is dense layer 0)
        const AllToAll a = all_to_alls(b.graph, 0, layer);
        CHECK(a.per_layer_fwd == 2);  // dispatch and combine
        CHECK(a.per_layer_bwd == 2);  // their gradients
        CHECK(a.bytes == static_cast<std::int64_t>(buffer));
        // What the rank sends of it: all but its own share.
        CHECK(static_cast<double>(a.bytes) * (ep - 1) / ep == Approx(tokens / tp * hidden * top_k * e * (ep - 1) / ep));
        // The expert-parallel group: ep consecutive data-parallel replicas of tensor rank 0.
        REQUIRE(a.groups.size() == 1);
        std::vector<int> expected;
        for (int d = 0; d < ep; ++d) expected.push_back(l.rank(0, d, 0));
        CHECK(*a.groups.begin() == expected);
    }
    CHECK(all_to_alls(b.graph, 0, 1).per_layer_fwd == 0);  // the dense layer routes nothing
    // The simulation runs: every all-to-all meets its members.
    const tools::Simulation run = tools::simulate_plan(m, c, plan, {});
    CHECK(run.summary.iteration > Time::zero());
}

TEST_CASE("expert gradients are reduced over the expert-data-parallel group, the rest over dp", "[strategies][moe]") {
    // Megatron (megatron/core/parallel_state.py, order tp-cp-ep-dp-pp): dp 8, ep 4 → EDP groups
    // {d0, d4}, {d1, d5}, {d2, d6}, {d3, d7}.
    Layout l;
    l.tp = 1;
    l.dp = 8;
    l.pp = 1;
    l.ep = 4;
    CHECK(expert_parallel_group(l, 0, 6, 0) == std::vector<int>{4, 5, 6, 7});
    CHECK(expert_data_parallel_group(l, 0, 6, 0) == std::vector<int>{2, 6});
    CHECK(zero1_shard(800, 400, l) == 400 / 8 + 400 / 2);

    const Model m = small_moe();
    Plan plan;
    plan.ep = 4;
    plan.global_batch = 8;
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const Built b = build(m, c, plan);
    // Gradient bytes per rank: dense over the 8 replicas, experts (2 of 8 per rank) over their 2.
    const std::int64_t h = 512, fe = 1024, dense_params = [&] {
        std::int64_t p = 0;
        for (const Block& blk : m.blocks(Workload{})) p += blk.params - (blk.moe ? blk.moe->expert_params : 0);
        return p;
    }();
    const std::int64_t experts_per_rank = 3 * (2 * 3 * h * fe);  // 3 MoE layers × 2 local experts
    std::map<std::size_t, std::int64_t> reduced;  // group size → gradient bytes rank 0 all-reduces
    for (const Op& op : b.graph.ops()) {
        if (op.kind != OpKind::collective || op.rank != 0) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        if (col.kind == CollectiveKind::all_reduce)
            reduced[b.graph.communicators()[static_cast<std::size_t>(col.communicator)].size()] += col.bytes;
    }
    CHECK(reduced[8] == 2 * dense_params);
    CHECK(reduced[2] == 2 * experts_per_rank);
    CHECK(reduced.size() == 2);
}

TEST_CASE("overlap-param-gather gathers the experts under the forward over their expert-data-parallel group",
          "[strategies][moe][framework]") {
    // Megatron's distributed optimizer with --overlap-param-gather: the experts' buckets are a
    // chain of their own (distributed_data_parallel.py:374-380 at d98e8a6), gathered over the
    // expert-data-parallel group in the forward's pre-hooks, as the dense ones over dp.
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan plan;
    plan.ep = 4;
    plan.global_batch = 32;
    plan.strategy = DataParallel::zero1;
    plan.framework = "megatron";
    plan.overlap_grad_reduce = true;
    const std::int64_t h = 512, fe = 1024;
    const std::int64_t experts_per_rank = 3 * (2 * 3 * h * fe);   // 3 MoE layers × 2 local experts
    const auto dense_params = static_cast<std::int64_t>(dense_and_root(m).first);
    struct Gathers {
        std::map<std::size_t, std::int64_t> bytes;   // group size → bytes rank 0 all-gathers
        std::set<Phase> phases;
        std::set<std::vector<int>> expert_groups;
        bool before_use = true;   // each forward gather ends before its layer's first forward op
        Time step;
    };
    const auto gathers = [&](int pp) {
        plan.pp = pp;
        const tools::Simulation run = tools::simulate_plan(m, c, plan, {});
        const OpGraph& g = run.built.graph;
        Gathers out;
        out.step = run.summary.iteration;
        for (OpId id = 0; id < g.size(); ++id) {
            const Op& op = g.op(id);
            if (op.kind != OpKind::collective || op.rank != 0) continue;
            const Collective& col = g.collectives()[static_cast<std::size_t>(op.ref)];
            if (col.kind != CollectiveKind::all_gather || op.stream != Stream::comm) continue;
            const std::vector<int>& group = g.communicators()[static_cast<std::size_t>(col.communicator)];
            out.bytes[group.size()] += col.bytes;
            out.phases.insert(op.phase);
            if (group.size() == static_cast<std::size_t>(16 / pp / plan.ep)) out.expert_groups.insert(group);
            if (op.phase != Phase::fwd) continue;
            for (OpId f = 0; f < g.size(); ++f) {
                const Op& u = g.op(f);
                if (u.rank == 0 && u.kind == OpKind::compute && u.phase == Phase::fwd && u.microbatch == 0 &&
                    u.layer == op.layer && run.timeline.start[f] < run.timeline.end[id])
                    out.before_use = false;
            }
        }
        return out;
    };
    for (const int pp : {1, 2}) {
        INFO("pp " << pp);
        plan.overlap_param_gather = false;
        const Gathers after = gathers(pp);
        plan.overlap_param_gather = true;
        const Gathers under = gathers(pp);
        // The same buckets, moved: 16-bit parameters, the dense ones over the 16 / pp ranks of rank
        // 0's stage, the experts' (2 of 8 per rank) over its expert-data-parallel group of 16 / pp / ep
        // ({d0, d4, d8, d12} at pp 1: ranks 0, 4, 8, 12).
        CHECK(after.phases == std::set<Phase>{Phase::opt});
        CHECK(under.phases == std::set<Phase>{Phase::fwd});
        CHECK(under.bytes == after.bytes);
        CHECK(under.bytes.size() == 2);
        CHECK(under.expert_groups == std::set<std::vector<int>>{expert_data_parallel_group(resolve(m, c, plan), 0, 0, 0)});
        if (pp == 1) {
            CHECK(under.expert_groups == std::set<std::vector<int>>{{0, 4, 8, 12}});
            CHECK(under.bytes.at(16) == 2 * dense_params);
            CHECK(under.bytes.at(4) == 2 * experts_per_rank);
        }
        CHECK(under.before_use);
    }
    // Mixtral-8x7B's 47 B parameters, whose gathers after the step take longer than a layer's
    // forward: under the forward they are hidden.
    plan.pp = 2;
    plan.overlap_param_gather = false;
    const Time after = tools::simulate_plan(mixtral(), c, plan, {}).summary.iteration;
    plan.overlap_param_gather = true;
    CHECK(tools::simulate_plan(mixtral(), c, plan, {}).summary.iteration < after);
}

TEST_CASE("LoRA with expert parallelism trains each rank's experts' adapters, reduced over the expert-data-parallel group",
          "[strategies][moe][finetune]") {
    // The small MoE at rank 8 (PEFT's adapters, r·(in + out) a module; the routers frozen):
    // attention q, k, v, o 512→512: 4 · 8 · 1024 a layer; layer 0's dense gate, up 512→2048 and
    // down 2048→512: 3 · 8 · 2560; an expert's gate, up 512→1024 and down 1024→512: 3 · 8 · 1536,
    // and with ep 4 a rank holds 2 of the 8 experts of each of the 3 MoE layers.
    const Model m = small_moe();
    const double dense_adapters = 4 * (4 * 8 * 1024) + 3 * 8 * 2560, expert_adapters = 3 * 2 * (3 * 8 * 1536);
    const double local_experts = 3 * 2 * (3 * 512.0 * 1024);   // frozen expert weights on a rank
    const auto [dense, root] = dense_and_root(m);
    (void)root;
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan plan;
    plan.ep = 4;
    plan.global_batch = 8;
    plan.finetune = parse_finetune("lora:8");
    for (const DataParallel s : {DataParallel::ddp, DataParallel::zero1}) {
        plan.strategy = s;
        CAPTURE(to_string(s));
        const Built b = build(m, c, plan);
        for (const int rank : {0, 5}) {
            const CommTotals t = comm_totals(b.graph, rank);
            // DDP all-reduces the 16-bit gradients; zero1 reduce-scatters them: dense adapters over
            // the 8 replicas, the rank's expert adapters over the 2 holding the same experts. The
            // frozen weights are never reduced.
            const CollectiveKind reduce = s == DataParallel::ddp ? CollectiveKind::all_reduce : CollectiveKind::reduce_scatter;
            CHECK(t.bytes.at({reduce, 8}) == 2 * dense_adapters);
            CHECK(t.bytes.at({reduce, 2}) == 2 * expert_adapters);
            // Held: the frozen dense weights and the rank's experts, and the adapters, in bf16;
            // zero1 shards the adapters' 12 bytes of state, dense over 8, experts over 2.
            double params = 0, state = 0;
            for (const Buffer& buf : b.graph.buffers()) {
                if (buf.rank != rank || buf.tier != Tier::device) continue;
                if (static_cast<BufferLabel>(buf.label) == BufferLabel::parameters) params += static_cast<double>(buf.bytes);
                if (static_cast<BufferLabel>(buf.label) == BufferLabel::optimizer_state) state += static_cast<double>(buf.bytes);
            }
            CHECK(params == 2 * (dense + local_experts) + 2 * (dense_adapters + expert_adapters));
            CHECK(state == (s == DataParallel::ddp ? 12 * (dense_adapters + expert_adapters)
                                                   : 12 * (dense_adapters / 8 + expert_adapters / 2)));
        }
        // Backward computes no gradient of a frozen weight: every weight-gradient GEMM is an
        // adapter's (one side of rank 8).
        int frozen_grads = 0, adapter_grads = 0;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.kind != OpKind::compute || op.rank != 0 || op.phase != Phase::bwd || op.layer != 3 || op.microbatch != 0) continue;
            for (const Kernel& k : b.graph.kernels_of(id))
                if (k.op == KernelOp::gemm && k.weight) ++(std::min(k.m, k.n) > 8 ? frozen_grads : adapter_grads);
        }
        CHECK(frozen_grads == 0);
        CHECK(adapter_grads == 2 * (4 + 3));   // A and B of 4 attention and 3 expert modules
        CHECK(tools::simulate_plan(m, c, plan, {}).summary.iteration > Time::zero());
    }
    SECTION("with pipeline stages") {
        plan.pp = 2;
        plan.global_batch = 8;
        const tools::Simulation run = tools::simulate_plan(m, topo::cluster_preset("dgx-a100").with_nodes(2), plan, {});
        CHECK(run.summary.iteration > Time::zero());
    }
}

TEST_CASE("with context parallelism the experts' groups fold the context-parallel ranks in, after the ring",
          "[strategies][moe][cp]") {
    // Megatron's MoE parallel folding (parallel_state.py: the expert RankGenerator has cp = 1):
    // dp 4 · cp 2 = 8 slots of a stage, cp fastest; ep 4 → EP groups of slots {0-3} {4-7}, EDP
    // groups of the slots equal mod 4, {1, 5} for slot 5.
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan plan;
    plan.cp = 2;
    plan.ep = 4;
    plan.global_batch = 4;
    plan.seq = 256;
    for (const Recompute rc : {Recompute::none, Recompute::full}) {
        plan.recompute = rc;
        CAPTURE(static_cast<int>(rc));
        const Built b = build(m, c, plan);
        const Layout& l = b.layout;
        REQUIRE(l.dp == 4);
        const int rank = l.rank(0, 5, 0);
        std::vector<int> ep_group, edp_group{l.rank(0, 1, 0), l.rank(0, 5, 0)};
        for (int d = 4; d < 8; ++d) ep_group.push_back(l.rank(0, d, 0));
        const AllToAll a = all_to_alls(b.graph, rank, 3);
        CHECK(a.per_layer_fwd == 2);   // dispatch and combine
        REQUIRE(a.groups.size() == 1);
        CHECK(*a.groups.begin() == ep_group);
        // Each rank routes its half of the sequence: 128 tokens × top-2 × 512 × 2 bytes.
        CHECK(a.bytes == 128 * 2 * 512 * 2);
        // Gradients: the dense part over the 8 data- and context-parallel slots, the rank's two
        // experts of each MoE layer over its expert-data-parallel pair.
        const auto [dense, root] = dense_and_root(m);
        (void)root;
        const CommTotals t = comm_totals(b.graph, rank);
        CHECK(t.bytes.at({CollectiveKind::all_reduce, 8}) == 2 * dense);
        CHECK(t.bytes.at({CollectiveKind::all_reduce, 2}) == 2 * (3 * 2 * 3 * 512.0 * 1024));
        for (const Op& op : b.graph.ops())
            if (op.kind == OpKind::collective && op.rank == rank && op.stream == Stream::comm &&
                b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_reduce &&
                b.graph.communicators()[static_cast<std::size_t>(b.graph.collectives()[static_cast<std::size_t>(op.ref)].communicator)].size() == 2)
                CHECK(b.graph.communicators()[static_cast<std::size_t>(b.graph.collectives()[static_cast<std::size_t>(op.ref)].communicator)] ==
                      edp_group);
        // In time: a layer's dispatch starts after its ring's last receive in forward, and its
        // backward ring's first send after the dispatch's gradient.
        const tools::Simulation run = tools::simulate_plan(m, c, plan, {});
        const Built& g = run.built;
        const Timeline& tl = run.timeline;
        Time ring_fwd_end = Time::zero(), a2a_fwd_start = Time::max(), a2a_bwd_end = Time::zero(), ring_bwd_start = Time::max();
        for (OpId id = 0; id < g.graph.size(); ++id) {
            const Op& op = g.graph.op(id);
            if (op.rank != rank || op.layer != 3 || op.microbatch != 0) continue;
            const bool ring = op.stream == Stream::cp_recv || op.stream == Stream::cp_send;
            const bool a2a = op.kind == OpKind::collective &&
                             g.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_to_all;
            if (op.phase == Phase::fwd && ring) ring_fwd_end = std::max(ring_fwd_end, tl.end[id]);
            if (op.phase == Phase::fwd && a2a) a2a_fwd_start = std::min(a2a_fwd_start, tl.start[id]);
            if (op.phase == Phase::bwd && a2a) a2a_bwd_end = std::max(a2a_bwd_end, tl.end[id]);
            if (op.phase == Phase::bwd && ring) ring_bwd_start = std::min(ring_bwd_start, tl.start[id]);
        }
        CHECK(ring_fwd_end > Time::zero());
        CHECK(a2a_bwd_end > Time::zero());
        CHECK(a2a_fwd_start < Time::max());
        CHECK(ring_bwd_start < Time::max());
        CHECK(a2a_fwd_start >= ring_fwd_end);
        CHECK(ring_bwd_start >= a2a_bwd_end);
    }
    SECTION("with tensor parallelism: each tensor rank's experts over its own folded groups") {
        plan.tp = 2;
        plan.sequence_parallel = true;
        plan.recompute = Recompute::full;
        const topo::Cluster two = topo::cluster_preset("dgx-a100").with_nodes(2);
        const Built b = build(m, two, plan);
        const Layout& l = b.layout;
        REQUIRE(l.dp == 4);
        std::vector<int> ep_group;
        for (int d = 4; d < 8; ++d) ep_group.push_back(l.rank(1, d, 0));
        const AllToAll a = all_to_alls(b.graph, l.rank(1, 5, 0), 3);
        REQUIRE(a.groups.size() == 1);
        CHECK(*a.groups.begin() == ep_group);
        // Its sequence share split over the tensor group (sp): 128 / 2 tokens routed a rank.
        CHECK(a.bytes == 64 * 2 * 512 * 2);
        CHECK(tools::simulate_plan(m, two, plan, {}).summary.iteration > Time::zero());
    }
}

TEST_CASE("Mixtral-8x7B on 2 × dgx-a100 with ep 8: memory per device by hand", "[strategies][moe]") {
    // Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1): 32 layers, hidden 4096, 32 heads, 8 kv heads, 8
    // experts of 14336, vocab 32000. Plan: pp 2 (16 layers per stage), dp 8, ep 8 (one expert per
    // rank), zero1, full recompute, micro-batch 1 at seq 4096, two micro-batches per replica.
    const Model m = mixtral();
    Plan plan;
    plan.pp = 2;
    plan.ep = 8;
    plan.strategy = DataParallel::zero1;
    plan.recompute = Recompute::full;
    plan.seq = 4096;
    plan.global_batch = 16;
    plan.stage_layers = {16, 16};
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    const tools::Simulation run = tools::simulate_plan(m, c, plan, {});
    REQUIRE(run.built.layout.dp == 8);
    // Stage 0 by hand: the embedding (32000 × 4096), 16 layers' attention (q and o 4096², k and v
    // 4096 × 1024), routers (4096 × 8) and norms (2 × 4096), and one expert per layer (3 × 4096 ×
    // 14336) of the eight.
    const std::int64_t attention = 2 * 4096LL * 4096 + 2 * 4096LL * 1024, router = 4096 * 8, norms = 2 * 4096;
    const std::int64_t dense = 32000LL * 4096 + 16 * (attention + router + norms);
    const std::int64_t experts = 16 * 3 * 4096LL * 14336;
    CHECK(dense == 802'816'000);
    CHECK(experts == 2'818'572'288);
    // bf16 parameters and gradients (2 + 2 bytes); Adam's fp32 states (12 bytes) sharded by the
    // distributed optimizer over dp = 8 for the dense part and over dp / ep = 1 for the experts.
    const std::int64_t states = 4 * (dense + experts) + 12 * dense / 8 + 12 * experts;
    // Full recompute keeps each layer's input (s·b·h·2 bytes) and the embedding's dropout mask
    // (s·b·h bytes); 1F1B keeps two micro-batches in flight on the first of two stages.
    const std::int64_t sbh = 4096LL * 4096, activations = 2 * (sbh + 16 * 2 * sbh);
    // The peak holds those buffers beside the runtime's own memory (CUDA context, NCCL's buffers,
    // the caching allocator's rounding: sim/memory.hpp), which the breakdown counts apart.
    const auto buffers_at_peak = [&](int r) {
        const MemoryBreakdown& m = run.timeline.peak_breakdown[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)];
        CHECK(run.summary.per_device[static_cast<std::size_t>(r)].peak_memory == m.total());
        return (m.total() - m.runtime()).count();
    };
    CHECK(buffers_at_peak(0) == states + activations);
    CHECK(run.summary.fits());
    // Every rank of the first stage holds the same: experts are spread evenly.
    for (int r = 0; r < 8; ++r) CHECK(buffers_at_peak(r) == states + activations);
    // Model FLOPs count two experts per token: ep does not change them.
    CHECK(run.built.model_flops.count() == Approx(m.flops_per_iteration(16, 4096, Recompute::full).count()));
}

TEST_CASE("expert parallelism composes with pipelines, tensor parallelism and zero1", "[strategies][moe]") {
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan plan;
    plan.ep = 4;
    plan.pp = 2;
    plan.tp = 2;
    plan.sequence_parallel = true;
    plan.strategy = DataParallel::zero1;
    plan.global_batch = 8;
    const tools::Simulation run = tools::simulate_plan(m, c, plan, {});
    const Layout& l = run.built.layout;
    REQUIRE((l.dp == 4 && l.ep == 4));
    // The tensor group all-gathers the routed tokens after the dispatch and reduce-scatters them
    // before the combine: b·s·K·h·e over the group.
    bool gathered = false;
    for (const Op& op : run.built.graph.ops()) {
        if (op.kind != OpKind::collective || op.layer != 2 || op.phase != Phase::fwd) continue;
        const Collective& col = run.built.graph.collectives()[static_cast<std::size_t>(op.ref)];
        if (col.kind == CollectiveKind::all_gather && col.bytes == 256LL * 2 * 512 * 2) gathered = true;
    }
    CHECK(gathered);
    CHECK(run.summary.iteration > Time::zero());
    // A skewed router slows the step: every rank waits for the busiest expert.
    plan.expert_imbalance = 2;
    const tools::Simulation skewed = tools::simulate_plan(m, c, plan, {});
    CHECK(skewed.summary.iteration > run.summary.iteration);
    CHECK(skewed.built.model_flops.count() == Approx(run.built.model_flops.count()));
}

TEST_CASE("expert parallelism runs on Megatron by default, FSDP's on PyTorch", "[strategies][moe][framework]") {
    // The model-parallel builder's MoE passes are Megatron's (its all-to-all dispatcher, its
    // groups): ddp and zero1 with --ep default to Megatron core as with --tp or --pp; before, a
    // data-parallel-only layout took PyTorch's DDP and DeepSpeed's ZeRO-1 labels.
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    for (const auto& [strategy, framework] : {std::pair{DataParallel::ddp, FrameworkName::megatron},
                                              std::pair{DataParallel::zero1, FrameworkName::megatron},
                                              std::pair{DataParallel::fsdp, FrameworkName::pytorch}}) {
        Plan p;
        p.strategy = strategy;
        p.ep = 2;
        p.global_batch = 8;
        CAPTURE(to_string(strategy));
        CHECK(resolve(small_moe(), c, p).framework.name == framework);
    }
}

TEST_CASE("FSDP with expert parallelism gathers and reduce-scatters each layer's experts over the expert-data-parallel group",
          "[strategies][moe][fsdp]") {
    // torchtitan's FSDP + EP (models/llama4/infra/parallelize.py apply_fsdp): each block's
    // experts are an FSDP unit over the dp_mod_ep mesh — the replicas holding the same experts,
    // Megatron's expert-data-parallel group — and the rest of the block over every data-parallel
    // rank; resharded after forward, every micro-batch reduce-scattered. The small MoE on one DGX
    // A100, dp 8, ep 4: 2 local experts per rank, expert groups of 2. With context parallelism
    // (torchtitan's FSDP + CP + EP, parallel_dims.py: ep borrows from dp_shard · cp; the dense
    // part over the dp_shard_cp mesh) dp 4 · cp 2 = 8 slots, cp fastest, and the same groups.
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.ep = 4;
    plan.seq = 256;
    plan.cp = GENERATE(1, 2);
    plan.recompute = GENERATE(Recompute::none, Recompute::full);
    plan.global_batch = GENERATE(8, 16);   // 1 or 2 micro-batches per replica (2 or 4 with cp)
    const test::DpRun r = test::dp_run(m, c, plan);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp_cp() == 8);
    const int mbs = l.microbatches;
    INFO("global batch " << plan.global_batch << ", recompute " << to_string(plan.recompute) << ", cp " << plan.cp);
    // By hand: 3 MoE layers × 2 local experts × 3 · h · f_e; the dense rest of every unit, and of
    // the root's (embedding, head), which FSDP does not reshard after forward.
    const std::int64_t h = 512, fe = 1024;
    const double experts = 3 * (2 * 3 * h * fe);
    const auto [dense, root] = dense_and_root(m);
    const int units = static_cast<int>(m.blocks(Workload{}).size());
    const int rank = l.rank(0, 5, 0);
    const OpGraph& g = r.built.graph;
    auto [bytes, count] = comm_totals(g, rank);
    std::map<std::tuple<int, Phase, int>, Time> gathered;   // (micro-batch, phase, block) → last gather's end
    std::set<std::vector<int>> expert_groups;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& col = g.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = g.communicators()[static_cast<std::size_t>(col.communicator)];
        if (members.size() == 2) expert_groups.insert(members);
        if (col.kind == CollectiveKind::all_gather) {
            Time& end = gathered[{op.microbatch, op.phase, op.layer}];
            end = std::max(end, r.timeline.end[id]);
        }
    }
    const auto ag = CollectiveKind::all_gather, rs = CollectiveKind::reduce_scatter;
    // Per micro-batch: every unit's dense part gathered before its forward, the layers' again
    // before backward; the 3 MoE layers' experts both times; every unit reduce-scattered.
    CHECK(count[{ag, 8}] == mbs * (units + units - 2));
    CHECK(count[{ag, 2}] == mbs * 3 * 2);
    CHECK(count[{rs, 8}] == mbs * units);
    CHECK(count[{rs, 2}] == mbs * 3);
    CHECK(count.size() == 4);
    const int rb = l.fsdp_reduce_bytes;
    CHECK(bytes[{ag, 8}] == Approx(mbs * 2.0 * (2 * dense - root)));
    CHECK(bytes[{ag, 2}] == Approx(mbs * 2.0 * 2 * experts));
    CHECK(bytes[{rs, 8}] == Approx(mbs * rb * dense));
    CHECK(bytes[{rs, 2}] == Approx(mbs * rb * experts));
    // Rank 5 (expert set 1 of 4) meets rank 1, the other replica holding the same experts.
    CHECK(expert_groups == std::set<std::vector<int>>{{l.rank(0, 1, 0), l.rank(0, 5, 0)}});
    // Every compute op of a unit starts after its gathers (both, for an MoE layer) of that
    // micro-batch: the forward's, or for a layer's recompute and backward the backward's.
    int checked = 0;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank || op.kind != OpKind::compute || op.layer < 0) continue;
        const bool root_unit = op.layer == 0 || op.layer == units - 1;
        const auto it = gathered.find({op.microbatch, op.phase == Phase::fwd || root_unit ? Phase::fwd : Phase::bwd, op.layer});
        REQUIRE(it != gathered.end());
        CHECK(r.timeline.start[id] >= it->second);
        ++checked;
    }
    CHECK(checked > 0);
    // The all-to-alls still run around the experts, over slots 4-7 for slot 5, each rank routing
    // its share of the sequence (128 tokens with cp 2) × top-2 × 512 × 2 bytes; with cp after
    // the ring's sends and receives around each layer's attention.
    const AllToAll a = all_to_alls(g, rank, 3);
    CHECK(a.per_layer_fwd == 2);
    REQUIRE(a.groups.size() == 1);
    CHECK(*a.groups.begin() == std::vector<int>{l.rank(0, 4, 0), l.rank(0, 5, 0), l.rank(0, 6, 0), l.rank(0, 7, 0)});
    CHECK(a.bytes == 256 / plan.cp * 2 * 512 * 2);
    int ring = 0;
    for (const Op& op : g.ops()) ring += op.rank == rank && op.layer == 3 && (op.stream == Stream::cp_send || op.stream == Stream::cp_recv);
    CHECK((ring > 0) == (plan.cp > 1));
    // Model states: 16 bytes a parameter of the dense shard (1/8) and the experts' (1/2).
    CHECK(test::peak_of_labels(g, r.timeline, rank, test::kModelStates).as_double() ==
          Approx(16.0 * (std::ceil(dense / 8) + std::ceil(experts / 2))).epsilon(1e-9));
}

TEST_CASE("HSDP with context and expert parallelism shards within each node's dp · cp slots, experts too",
          "[strategies][moe][fsdp][cp]") {
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.cp = 2;
    plan.ep = 4;
    plan.seq = 256;
    plan.recompute = Recompute::full;
    // dp 8 · cp 2 = 16 slots, a shard group per node (4 replicas · cp 2 = 8 slots); slot 13
    // on the second node shares its experts with slot 9, its all-to-alls over 12-15.
    plan.fsdp_sharding = FsdpSharding::hybrid;
    plan.global_batch = 16;
    const topo::Cluster two = topo::cluster_preset("dgx-a100").with_nodes(2);
    const Built b = build(m, two, plan);
    const Layout& l = b.layout;
    REQUIRE(l.dp_cp() == 16);
    const int rank = l.rank(0, 13, 0);
    std::set<std::vector<int>> pairs;
    for (const Op& op : b.graph.ops()) {
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = b.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (members.size() == 2 && col.kind != CollectiveKind::all_reduce) pairs.insert(members);
    }
    CHECK(pairs == std::set<std::vector<int>>{{l.rank(0, 9, 0), rank}});
    const AllToAll a = all_to_alls(b.graph, rank, 3);
    REQUIRE(a.groups.size() == 1);
    CHECK(*a.groups.begin() == std::vector<int>{l.rank(0, 12, 0), rank, l.rank(0, 14, 0), l.rank(0, 15, 0)});
    CHECK(tools::simulate_plan(m, two, plan, {}).summary.iteration > Time::zero());
}

TEST_CASE("FSDP with expert parallelism under pipeline stages gathers each stage's units once a step, experts over their group",
          "[strategies][moe][fsdp]") {
    // torchtitan's PP + FSDP + EP (how it trains DeepSeek-V3): under pipeline stages FSDP keeps
    // each stage's units gathered through all its micro-batches (reshard_after_forward off with
    // PP) and reduce-scatters once after the stage's last backward; an MoE layer's local experts
    // over their expert-data-parallel group. The small MoE on two DGX A100: pp 2, dp 8, ep 4,
    // 2 micro-batches; stage 1 holds layers 2 and 3 (both MoE) and the head.
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.ep = 4;
    plan.pp = 2;
    plan.global_batch = 16;
    const test::DpRun r = test::dp_run(m, topo::cluster_preset("dgx-a100").with_nodes(2), plan);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 8);
    REQUIRE(l.microbatches == 2);
    const std::vector<Block> blocks = m.blocks(Workload{});
    const std::int64_t h = 512, fe = 1024;
    const double experts = 2 * (2 * 3 * h * fe);   // layers 2 and 3, 2 local experts each
    // Blocks 3, 4 (the layers) and 5 (the head, with the last stage's copy of the tied 4,096 × 512
    // table, Megatron's).
    double dense = 4096.0 * 512;
    for (std::size_t i = 3; i < blocks.size(); ++i)
        dense += static_cast<double>(blocks[i].params - (blocks[i].moe ? blocks[i].moe->expert_params : 0));
    auto [bytes, count] = comm_totals(r.built.graph, l.rank(0, 5, 1));
    const auto ag = CollectiveKind::all_gather, rs = CollectiveKind::reduce_scatter;
    CHECK(count[{ag, 8}] == 3);   // the stage's 3 units, once
    CHECK(count[{ag, 2}] == 2);   // its 2 MoE layers' experts, once
    CHECK(count[{rs, 8}] == 3);
    CHECK(count[{rs, 2}] == 2);
    CHECK(bytes[{ag, 8}] == Approx(2 * dense));
    CHECK(bytes[{ag, 2}] == Approx(2 * experts));
    CHECK(bytes[{rs, 8}] == Approx(l.fsdp_reduce_bytes * dense));
    CHECK(bytes[{rs, 2}] == Approx(l.fsdp_reduce_bytes * experts));
    CHECK(r.summary.iteration > Time::zero());
}

TEST_CASE("HSDP with expert parallelism under pipeline stages all-reduces each stage's dense and expert shards once a step",
          "[strategies][moe][fsdp]") {
    // Four DGX A100, pp 2 (stage 1 on nodes 2 and 3), dp 16, a node's 8 replicas a shard group, ep 4:
    // after stage 1's last backward each unit's dense shard (1/8) and each MoE layer's expert shard
    // (1/2 of its 2 local experts) are all-reduced with the other node's rank at the same position.
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.fsdp_sharding = FsdpSharding::hybrid;
    plan.ep = 4;
    plan.pp = 2;
    plan.global_batch = 32;
    const Built b = build(m, topo::cluster_preset("dgx-a100").with_nodes(4), plan);
    REQUIRE(b.layout.dp == 16);
    REQUIRE(b.layout.shard_group == 8);
    const std::vector<Block> blocks = m.blocks(Workload{});
    double dense_shards = 0;   // layers 2 and 3, and the head with the tied table's copy
    for (std::size_t i = 3; i < blocks.size(); ++i) {
        const double own = static_cast<double>(blocks[i].params - (blocks[i].moe ? blocks[i].moe->expert_params : 0));
        dense_shards += std::ceil((own + (i + 1 == blocks.size() ? 4096.0 * 512 : 0)) / 8);
    }
    const double expert_shards = 2 * (2 * 3 * 512.0 * 1024) / 2;   // layers 2 and 3
    const int rank = b.layout.rank(0, 3, 1);
    double reduced = 0;
    int all_reduces = 0;
    for (const Op& op : b.graph.ops()) {
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const auto& members = b.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (col.kind != CollectiveKind::all_reduce || members.size() != 2 || members[0] != b.layout.rank(0, 3, 1)) continue;
        CHECK(members[1] == b.layout.rank(0, 11, 1));
        reduced += static_cast<double>(col.bytes);
        ++all_reduces;
    }
    CHECK(all_reduces == 3 + 2);   // the stage's 3 units' dense shards, its 2 MoE layers' expert shards
    CHECK(reduced == Approx(b.layout.fsdp_reduce_bytes * (dense_shards + expert_shards)));
}

TEST_CASE("FSDP under pipeline stages without expert parallelism gathers every expert over dp", "[strategies][moe][fsdp]") {
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.pp = 2;
    plan.global_batch = 16;
    const Built b = build(m, topo::cluster_preset("dgx-a100").with_nodes(2), plan);
    const std::vector<Block> blocks = m.blocks(Workload{});
    double stage1 = 4096.0 * 512;   // the tied table's copy, as above
    for (std::size_t i = 3; i < blocks.size(); ++i) stage1 += static_cast<double>(blocks[i].params);
    double gathered = 0;
    const int rank = b.layout.rank(0, 5, 1);
    for (const Op& op : b.graph.ops()) {
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        if (col.kind == CollectiveKind::all_reduce) continue;   // the tied table's shard with stage 0
        CHECK(b.graph.communicators()[static_cast<std::size_t>(col.communicator)].size() == 8);
        if (col.kind == CollectiveKind::all_gather) gathered += static_cast<double>(col.bytes);
    }
    CHECK(gathered == Approx(2 * stage1));
}

TEST_CASE("FSDP with tensor and expert parallelism shards each tensor rank's slices: dense over dp, experts over their group",
          "[strategies][moe][fsdp]") {
    // torchtitan's FSDP + TP + EP with expert tensor parallelism (Megatron's layout: the experts
    // split over the tensor group too): two DGX A100, tp 2 · dp 8, ep 2. Each tensor rank's dense
    // slices are gathered and reduce-scattered over the 8 replicas' ranks of that tensor rank, its
    // slices of the 4 local experts of each MoE layer over the 4 replicas holding them.
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.tp = 2;
    plan.sequence_parallel = true;
    plan.ep = 2;
    plan.global_batch = 8;
    const test::DpRun r = test::dp_run(m, topo::cluster_preset("dgx-a100").with_nodes(2), plan);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 8);
    const double experts = 3 * (4 * 3 * 512.0 * 1024) / 2;   // 3 MoE layers, 4 local experts, half of each
    double dense = 0, root = 0;   // one tensor rank's
    for (const Block& b : strategies::detail::replica_blocks(m, l, plan)) {
        const double d = static_cast<double>(b.params - (b.moe ? b.moe->expert_params : 0));
        dense += d;
        if (b.kind == Block::Kind::embedding || b.kind == Block::Kind::head) root += d;
        if (b.moe) CHECK(static_cast<double>(b.moe->expert_params) == Approx(experts / 3));
    }
    const int rank = l.rank(1, 5, 0);
    const auto bytes = comm_totals(r.built.graph, rank).bytes;
    const auto ag = CollectiveKind::all_gather, rs = CollectiveKind::reduce_scatter;
    CHECK(bytes.at({ag, 8}) == Approx(2.0 * (2 * dense - root)));
    CHECK(bytes.at({ag, 4}) == Approx(2.0 * 2 * experts));
    CHECK(bytes.at({rs, 8}) == Approx(l.fsdp_reduce_bytes * dense));
    CHECK(bytes.at({rs, 4}) == Approx(l.fsdp_reduce_bytes * experts));
    // The expert group: tensor rank 1 of replicas 1, 3, 5, 7.
    bool group = false;
    for (const Op& op : r.built.graph.ops())
        if (op.rank == rank && op.kind == OpKind::collective && op.stream == Stream::comm) {
            const auto& members = r.built.graph.communicators()[static_cast<std::size_t>(
                r.built.graph.collectives()[static_cast<std::size_t>(op.ref)].communicator)];
            group = group || members == std::vector<int>{l.rank(1, 1, 0), l.rank(1, 3, 0), l.rank(1, 5, 0), l.rank(1, 7, 0)};
        }
    CHECK(group);
    CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, test::kModelStates).as_double() ==
          Approx(16.0 * (std::ceil(dense / 8) + experts / 4)).epsilon(1e-4));
}

TEST_CASE("FSDP with one replica per expert set holds the experts whole: only the dense part is sharded", "[strategies][moe][fsdp]") {
    // dp 8, ep 8: each rank's expert shard group is itself, so its one expert per layer is neither
    // gathered nor reduce-scattered (each rank's experts are its own); the dense part is.
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.ep = 8;
    plan.global_batch = 8;
    const test::DpRun r = test::dp_run(m, topo::cluster_preset("dgx-a100"), plan);
    const auto [dense, root] = dense_and_root(m);
    const double experts = 3 * (1 * 3 * 512.0 * 1024);   // 3 MoE layers, one local expert each
    const auto bytes = comm_totals(r.built.graph, 3).bytes;
    CHECK(bytes.size() == 2);
    CHECK(bytes.at({CollectiveKind::all_gather, 8}) == Approx(2.0 * (2 * dense - root)));
    CHECK(bytes.at({CollectiveKind::reduce_scatter, 8}) == Approx(r.built.layout.fsdp_reduce_bytes * dense));
    CHECK(test::peak_of_labels(r.built.graph, r.timeline, 3, test::kModelStates).as_double() ==
          Approx(16.0 * (std::ceil(dense / 8) + experts)).epsilon(1e-9));
}

TEST_CASE("HSDP with expert parallelism shards the experts within a node and all-reduces their shards across nodes",
          "[strategies][moe][fsdp]") {
    // torchtitan's HSDP + EP (dp_replicate 2 × dp_shard 8, ep 4 taken from dp_shard): two DGX A100,
    // a node's 8 replicas a shard group. Per micro-batch the dense part is gathered and
    // reduce-scattered over the node's 8 ranks and each 1/8 shard all-reduced with the other node's
    // rank at the same position; each MoE layer's 2 local experts over the 2 ranks of the node
    // holding them, their 1/2 shard all-reduced across the nodes the same way.
    const Model m = small_moe();
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.fsdp_sharding = FsdpSharding::hybrid;
    plan.ep = 4;
    plan.global_batch = 16;
    const test::DpRun r = test::dp_run(m, topo::cluster_preset("dgx-a100").with_nodes(2), plan);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 16);
    REQUIRE(l.shard_group == 8);
    const auto [dense, root] = dense_and_root(m);
    const double experts = 3 * (2 * 3 * 512.0 * 1024);
    const int rank = l.rank(0, 13, 0), rb = l.fsdp_reduce_bytes;
    const auto bytes = comm_totals(r.built.graph, rank).bytes;
    const auto ag = CollectiveKind::all_gather, rs = CollectiveKind::reduce_scatter, ar = CollectiveKind::all_reduce;
    CHECK(bytes.at({ag, 8}) == Approx(2.0 * (2 * dense - root)));
    CHECK(bytes.at({ag, 2}) == Approx(2.0 * 2 * experts));
    CHECK(bytes.at({rs, 8}) == Approx(rb * dense));
    CHECK(bytes.at({rs, 2}) == Approx(rb * experts));
    // Across the nodes: every unit's dense shard (1/8, rounded up per unit) and each MoE layer's
    // expert shard (1/2).
    double dense_shards = 0;
    for (const Block& blk : m.blocks(Workload{}))
        dense_shards += std::ceil(static_cast<double>(blk.params - (blk.moe ? blk.moe->expert_params : 0)) / 8);
    CHECK(bytes.at({ar, 2}) == Approx(rb * (dense_shards + experts / 2)));
    CHECK(bytes.size() == 5);
    // Rank 13 (node 1, expert set 1) reduce-scatters its experts with rank 9 and all-reduces with 5.
    std::set<std::vector<int>> groups;
    for (const Op& op : r.built.graph.ops())
        if (op.rank == rank && op.kind == OpKind::collective && op.stream == Stream::comm)
            groups.insert(r.built.graph.communicators()[static_cast<std::size_t>(r.built.graph.collectives()[static_cast<std::size_t>(op.ref)].communicator)]);
    CHECK(groups.count({l.rank(0, 9, 0), l.rank(0, 13, 0)}) == 1);
    CHECK(groups.count({l.rank(0, 5, 0), l.rank(0, 13, 0)}) == 1);
    CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, test::kModelStates).as_double() ==
          Approx(16.0 * (std::ceil(dense / 8) + experts / 2)).epsilon(1e-4));
}

TEST_CASE("FP8 parameters (--fp8-param-gather) with expert parallelism gather the experts' FP8 weights at a byte too",
          "[strategies][moe][fp8]") {
    // Megatron keeps the experts' FP8 weights in expert-parallel buffers of their own, bucketed as
    // the dense ones (partition_buckets over expert_parallel_buffers).
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-h100");   // 8 GPUs: dp 8, ep 2
    Plan plan;
    plan.framework = "megatron";
    plan.fp8 = Fp8Recipe::delayed;
    plan.strategy = DataParallel::zero1;
    plan.ep = 2;
    plan.micro_batch = 1;
    plan.global_batch = 8;
    plan.overlap_param_gather = GENERATE(false, true);   // after the step, or under the forward
    CAPTURE(plan.overlap_param_gather);
    Plan kept = plan;
    plan.fp8_param_gather = true;
    const Built b = build(m, c, plan), plain = build(m, c, kept);
    // By hand (hidden 512): each layer's QKV and projection 4h², layer 0's gated MLP 3 · h · 2048;
    // each MoE layer's 4 local experts 4 · 3 · h · 1024 (the router stays 16-bit).
    const std::int64_t h = 512, dense = 4 * 4 * h * h + 3 * h * 2048, experts_per_layer = 4 * 3 * h * 1024;
    for (const Block& blk : strategies::detail::replica_blocks(m, b.layout, plan))
        if (blk.moe) CHECK(blk.moe->expert_fp8_params == experts_per_layer);
    // A byte saved per FP8 weight gathered: the dense ones over dp, each expert group's over its
    // own expert-data-parallel groups (one per expert set: ep of them). Gradients as before.
    CHECK(test::declared_collective_bytes(plain.graph, CollectiveKind::all_gather) -
              test::declared_collective_bytes(b.graph, CollectiveKind::all_gather) == dense + 2 * 3 * experts_per_layer);
    CHECK(test::declared_collective_bytes(plain.graph, CollectiveKind::reduce_scatter) ==
              test::declared_collective_bytes(b.graph, CollectiveKind::reduce_scatter));
}

TEST_CASE("bad expert-parallel plans exit 2 naming the flag", "[strategies][moe]") {
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto plan_with = [](auto&& set) {
        Plan p;
        p.global_batch = 8;
        set(p);
        return p;
    };
    SECTION("ep not dividing dp") {
        const Plan p = plan_with([](Plan& q) { q.ep = 3; });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--ep: --ep 3 does not divide dp = 8"));
    }
    SECTION("ep not dividing the experts") {
        const Model odd = [] {
            static Json doc = parse_json_text(R"({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                "seq": 32, "moe": {"experts": 6, "top_k": 2, "ffn_hidden": 64}})", "odd.json");
            return model_from_json(JsonView(doc, "odd.json"), "odd");
        }();
        const Plan p = plan_with([](Plan& q) { q.ep = 4; });
        CHECK_THAT(bad_input_message([&] { build(odd, c, p); }), Contains("--ep 4 does not divide the 6 experts of odd"));
    }
    SECTION("ep not dividing dp · cp") {
        const Plan p = plan_with([](Plan& q) {
            q.cp = 2;
            q.ep = 8;
            q.seq = 256;
            q.global_batch = 4;
            q.dp = 2;
        });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c.first_devices(4), p); }),
                   Contains("--ep 8 does not divide dp · cp = 4"));
    }
    SECTION("ep on a dense model") {
        const Plan p = plan_with([](Plan& q) { q.ep = 2; });
        CHECK_THAT(bad_input_message([&] { build(model_preset("gpt2-small"), c, p); }),
                   Contains("needs a mixture-of-experts model; gpt2-small has no experts"));
    }
    SECTION("FSDP's hybrid sharding with expert-parallel groups crossing shard groups") {
        const Plan p = plan_with([](Plan& q) {
            q.ep = 4;
            q.strategy = DataParallel::fsdp;
            q.fsdp_sharding = FsdpSharding::hybrid;
            q.fsdp_group = 2;
        });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--ep 4 does not divide the hybrid shard group of 2"));
        // With context parallelism a shard group holds replicas · cp slots: ep 4 fits 2 · 2, not 8.
        Plan cp = p;
        cp.cp = 2;
        cp.seq = 256;
        cp.global_batch = 4;
        CHECK(build(small_moe(), c, cp).layout.dp_cp() == 8);
        cp.ep = 8;
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, cp); }),
                   Contains("--ep 8 does not divide the hybrid shard group of 2 replicas · cp 2 = 4 slots"));
    }
    SECTION("flags the expert-parallel builder does not model, which it ignored before") {
        Plan p = plan_with([](Plan& q) {
            q.ep = 2;
            q.strategy = DataParallel::zero1;
            q.recompute = Recompute::full;
        });
        Plan lamb = p, activations = p;
        lamb.optimizer = Optimizer::lamb;
        activations.offload_activations = Offload::cpu;
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, lamb); }), Contains("--optimizer lamb is modelled for data parallelism (tp = pp = ep = 1)"));
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, activations); }),
                   Contains("--offload-activations is DeepSpeed's activation checkpointing: it needs --strategy zero1, zero2 or zero3 (tp = pp = ep = 1)"));
    }
    SECTION("expert parallelism on DeepSpeed's engine") {
        const Plan p = plan_with([](Plan& q) {
            q.ep = 2;
            q.strategy = DataParallel::zero1;
            q.framework = "deepspeed";
        });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--framework: --ep with --strategy zero1 is modelled as Megatron runs it"));
    }
    SECTION("offload with expert parallelism on a Megatron without --optimizer-cpu-offload") {
        const Plan p = plan_with([](Plan& q) {
            q.ep = 2;
            q.strategy = DataParallel::zero1;
            q.offload = Offload::cpu;
            q.framework = "megatron@0.11";
        });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--offload: --offload with tensor, pipeline, context or expert parallelism is Megatron core's"));
    }
    SECTION("a data-parallel flavour that does not shard experts") {
        const Plan p = plan_with([](Plan& q) {
            q.ep = 2;
            q.strategy = DataParallel::zero3;
        });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--strategy zero3 is not modelled with expert parallelism"));
    }
    SECTION("tensor parallelism without sequence parallelism") {
        const Plan p = plan_with([](Plan& q) {
            q.ep = 2;
            q.tp = 2;
            q.global_batch = 4;
        });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--sp: a mixture of experts with tensor parallelism needs --sp"));
    }
    SECTION("an imbalance below 1") {
        const Plan p = plan_with([](Plan& q) { q.expert_imbalance = 0.5; });
        CHECK_THAT(bad_input_message([&] { build(small_moe(), c, p); }), Contains("--expert-imbalance"));
    }
    SECTION("flash attention where FlashAttention-2 does not run") {
        const Plan p = plan_with([](Plan& q) {
            q.attention = Attention::flash;
            q.global_batch = 16;
        });
        CHECK_THAT(bad_input_message([&] { build(model_preset("gpt2-small"), topo::cluster_preset("dgx2-v100"), p); }),
                   Contains("--attention: --attention flash needs GPUs of compute capability 8.0 or later"));
    }
}
