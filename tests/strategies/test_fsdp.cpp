// PyTorch FSDP: sharding modes' communication, hybrid sharding's inter-node traffic measured from
// the simulated NIC links, and the plans it refuses.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "core/json.hpp"
#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

/// Parameters of FSDP's root on a rank: what no wrapped block holds, the embedding and the head
/// (with the final norm), which FSDP does not reshard after forward.
double root_params(const Model& m, const Layout& l, const Plan& p) {
    double root = 0;
    for (const Block& b : strategies::detail::replica_blocks(m, l, p))
        if (b.kind == Block::Kind::embedding || b.kind == Block::Kind::head) root += static_cast<double>(b.params);
    return root;
}

}  // namespace

TEST_CASE("FSDP sharding modes move 3Ψ (less the root's backward gather), 2Ψ, or DDP's 2Ψ per device", "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const double psi = static_cast<double>(m.parameters()), n = 8;
    const auto [mode, factor] = GENERATE(table<FsdpSharding, double>(
        {{FsdpSharding::full, 3.0}, {FsdpSharding::grad_op, 2.0}, {FsdpSharding::none, 2.0}}));
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = mode;
    p.fold = false;   // every rank's own ops (folded replicas: test_folding.cpp)
    const Built b = build(m, c, p);
    INFO(to_string(mode));
    // Full sharding gathers every unit again for backward but the root's, which stays gathered
    // from its forward (torch/distributed/fsdp/_runtime_utils.py _post_forward_reshard): GPT-2's
    // tied table and position table, 39.4 M of its 124 M parameters.
    const double root = mode == FsdpSharding::full ? root_params(m, b.layout, p) : 0;
    if (mode == FsdpSharding::full) CHECK(root == Approx(50257.0 * 768 + 1024.0 * 768 + 2 * 768));
    CHECK(test::collective_bytes_sent(b.graph, 3) == Approx((factor * psi - root) * (n - 1) / n * 2).epsilon(1e-9));
}

TEST_CASE("FSDP reducing in fp32 sends its reduce-scatters at 4 bytes a gradient", "[strategies][fsdp]") {
    // torchtitan's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): two gathers of
    // 16-bit parameters (one for the root) and one reduce-scatter of fp32 gradients per unit,
    // ((2·2 + 4)·Ψ − 2·Ψ_root)·(n−1)/n bytes a device, where the bf16 reduction sends
    // ((2·2 + 2)·Ψ − 2·Ψ_root)·(n−1)/n.
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const double psi = static_cast<double>(m.parameters()), n = 8;
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fold = false;
    const auto [reduce, bytes] = GENERATE(table<std::optional<DType>, double>(
        {{std::nullopt, 6.0}, {DType::bf16, 6.0}, {DType::fp32, 8.0}}));
    p.fsdp_reduce_dtype = reduce;
    const test::DpRun r = test::dp_run(m, c, p);
    const double root = root_params(m, r.built.layout, p);
    CHECK(test::collective_bytes_sent(r.built.graph, 5) == Approx((bytes * psi - 2 * root) * (n - 1) / n).epsilon(1e-9));
    // The unsharded gradient of the largest unit (the embedding) in the reduce dtype.
    const double largest = static_cast<double>(m.shape().vocab * m.shape().hidden + m.shape().max_seq * m.shape().hidden);
    CHECK(test::peak_of_labels(r.built.graph, r.timeline, 5, {BufferLabel::bucket}).as_double() >= (bytes - 4) * largest);
}

TEST_CASE("FSDP hybrid on 2 nodes × 8 GPUs sends less inter-node traffic than full sharding", "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    auto inter = [&](FsdpSharding mode) {
        Plan p;
        p.strategy = DataParallel::fsdp;
        p.fsdp_sharding = mode;
        return test::simulated_inter_node_bytes(build(m, c, p).graph, c);
    };
    const double full = inter(FsdpSharding::full), hybrid = inter(FsdpSharding::hybrid);
    INFO("full " << full / 1e9 << " GB, hybrid " << hybrid / 1e9 << " GB");
    CHECK(full > 0);
    CHECK(hybrid > 0);
    // Hybrid sends only the all-reduce of each rank's 1/8 shard across the two nodes: 16 ranks ×
    // 2·(1/2)·Ψ/8·2 bytes = 4Ψ bytes in all. Full sharding gathers parameters twice and
    // reduce-scatters gradients once, each over all 16 ranks in NCCL's ring: both node
    // boundaries of the ring carry 15/16 of every 2Ψ-byte buffer, 3 × 2 × (15/16) × 2Ψ = 11.25Ψ.
    const double psi = static_cast<double>(m.parameters());
    CHECK(hybrid < full);
    CHECK(hybrid == Approx(4 * psi).epsilon(0.15));
    CHECK(full == Approx(11.25 * psi).epsilon(0.1));
}

TEST_CASE("FSDP hybrid keeps a node's shard: 16Ψ/8 model-state bytes per device", "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = FsdpSharding::hybrid;
    const test::DpRun r = test::dp_run(m, c, p);
    const Bytes states = test::peak_of_labels(r.built.graph, r.timeline, 9, test::kModelStates);
    CHECK(states.as_double() == Approx(16.0 * static_cast<double>(m.parameters()) / 8).epsilon(0.001));
}

TEST_CASE("Llama 3 8B at sequence 8,192 fits an A100 80 GB with flash attention and selective recompute", "[strategies][fsdp]") {
    // One DGX A100 (8 × 80 GB), FSDP full sharding: 16 B/param × 8.03 B / 8 = 16 GB of model states
    // per GPU. Eager attention keeps 5·a·s²·b bytes per layer (344 GB per sample at s = 8,192):
    // no plan of one sample fits. FlashAttention keeps the log-sum-exp only (the A100's default).
    const Model m = model_preset("llama3-8b");
    Plan plan;
    plan.strategy = DataParallel::fsdp;
    plan.seq = 8192;
    plan.recompute = Recompute::selective;
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const test::DpRun flash = test::dp_run(m, c, plan);
    CHECK(flash.built.layout.attention == Attention::flash);
    CHECK(flash.summary.fits());
    CHECK(flash.summary.peak_memory < Bytes::gb(80));
    // Selective recompute with flash drops only the log-sum-exp: flash alone fits too. Eager
    // without recompute keeps the s² matrices and does not; selective recompute is what made eager
    // fit (Korthikanti et al. 2022), at the price of recomputing QKᵀ and softmax·V.
    plan.recompute = Recompute::none;
    CHECK(test::dp_run(m, c, plan).summary.fits());
    plan.attention = Attention::eager;
    CHECK_FALSE(test::dp_run(m, c, plan).summary.fits());
}

TEST_CASE("impossible FSDP plans say why", "[strategies][fsdp][plan]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = FsdpSharding::hybrid;
    SECTION("a hybrid shard group not dividing the devices") {
        p.fsdp_group = 3;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("hybrid shard group of 3 devices does not divide the 16"));
    }
    SECTION("a negative shard group") {
        p.fsdp_group = -1;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("--fsdp-group must be at least 1"));
    }
    SECTION("an unknown sharding mode") {
        CHECK_THROWS_WITH(parse_fsdp_sharding("fulll"), Catch::Contains("did you mean 'full'"));
    }
}

TEST_CASE("FSDP + TP: Megatron's collectives in each replica, FSDP's 3Ψ/tp over each tensor rank's replicas",
          "[strategies][fsdp]") {
    // GPT-2 medium (24 layers) with tp 2 on one DGX A100: 4 replicas of 2 tensor ranks.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.tp = 2;
    const bool sp = GENERATE(false, true);
    p.sequence_parallel = sp;
    const Built b = build(m, c, p);
    REQUIRE(b.layout.dp == 4);
    REQUIRE_FALSE(b.layout.folded);
    // Per pass, Megatron's f/g pairs: the embedding's all-reduce, two per layer (after attention
    // and after the MLP), the head's one: 1 + 2 × 24 + 1 = 50; forward and backward: 100
    // all-reduces, or with sequence parallelism 100 all-gather + reduce-scatter pairs.
    // FSDP: a gather before each of the 26 blocks' forward and each of the 24 layers' backward
    // (the root's embedding and head stay gathered), a reduce-scatter after each backward, over
    // the 4 replicas' ranks of the same tensor rank.
    const std::int64_t psi_tp = strategies::detail::total_params(strategies::detail::replica_blocks(m, b.layout, p));
    // Column- and row-parallel weights halve; the norms, row-parallel biases and position table
    // stay whole on both tensor ranks: a little more than half of GPT-2 medium's parameters.
    CHECK(static_cast<double>(psi_tp) / static_cast<double>(m.parameters()) == Approx(0.5).margin(0.03));
    for (const auto& [t, d] : {std::pair{0, 0}, std::pair{1, 3}}) {
        test::RankCollectives r = test::rank_collectives(b.graph, b.layout, t, d);
        INFO("sp " << sp << ", tensor rank " << t << " of replica " << d);
        if (sp) {
            CHECK(r.tp[CollectiveKind::all_gather] == 100);
            CHECK(r.tp[CollectiveKind::reduce_scatter] == 100);
            CHECK(r.tp.count(CollectiveKind::all_reduce) == 0);
        } else {
            CHECK(r.tp[CollectiveKind::all_reduce] == 100);
            CHECK(r.tp.size() == 1);
        }
        CHECK(r.dp[CollectiveKind::all_gather] == 26 + 24);
        CHECK(r.dp[CollectiveKind::reduce_scatter] == 26);
        CHECK(r.dp.size() == 2);
        CHECK(r.dp_groups_one_tensor_rank);
        // Two gathers (one for the root) and a reduce-scatter of the slice's 16-bit values:
        // (3 × Ψ_tp − Ψ_root) × 2 bytes × 3/4.
        CHECK(r.dp_bytes_sent ==
              Approx((3.0 * static_cast<double>(psi_tp) - root_params(m, b.layout, p)) * 2 * 3 / 4).epsilon(1e-9));
    }
}

TEST_CASE("FSDP + TP with full recompute redoes each layer's forward collectives", "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.tp = 4;
    p.recompute = Recompute::full;
    const Built b = build(m, c, p);
    // 100 as without recompute, and the 24 layers' two again: 148.
    CHECK(test::rank_collectives(b.graph, b.layout, 2, 1).tp[CollectiveKind::all_reduce] == 148);
}

TEST_CASE("FSDP + TP keeps 16·Ψ/(tp·dp) model-state bytes per device", "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.tp = 4;
    const test::DpRun r = test::dp_run(m, c, p);
    REQUIRE(r.built.layout.dp == 4);
    // bf16 mixed precision: 2-byte parameters and gradients, 12 bytes of fp32 Adam state (master
    // weights and two moments) per parameter of the rank's quarter of its tensor slice.
    const double psi_tp = static_cast<double>(strategies::detail::total_params(strategies::detail::replica_blocks(m, r.built.layout, p)));
    for (int rank : {0, 7}) {   // the first node's ranks: the second node mirrors them (folded)
        const Bytes states = test::peak_of_labels(r.built.graph, r.timeline, rank, test::kModelStates);
        CHECK(states.as_double() == Approx(16.0 * psi_tp / 4).epsilon(0.001));
        CHECK(states.as_double() == Approx(16.0 * static_cast<double>(m.parameters()) / 16).epsilon(0.05));
    }
    CHECK(r.summary.fits());
}

TEST_CASE("FSDP + TP hybrid shards within a node's replicas", "[strategies][fsdp]") {
    // 2 DGX A100 nodes, tp 2: 8 replicas, 4 per node. Hybrid sharding's default group is a node's
    // replicas: each slice is sharded 4 ways and all-reduced across the 2 nodes.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = FsdpSharding::hybrid;
    p.tp = 2;
    const Built b = build(m, c, p);
    CHECK(b.layout.shard_group == 4);
    test::RankCollectives r = test::rank_collectives(b.graph, b.layout, 1, 5);
    CHECK(r.dp[CollectiveKind::all_gather] == 26 + 24);
    CHECK(r.dp[CollectiveKind::reduce_scatter] == 26);
    CHECK(r.dp[CollectiveKind::all_reduce] == 26);
    CHECK(r.dp_groups_one_tensor_rank);
}

TEST_CASE("impossible FSDP + TP plans say why", "[strategies][fsdp][plan]") {
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.tp = 2;
    SECTION("a mixture of experts") {
        // 4 layers of hidden 512, 8 experts of width 1024, 2 per token (test_moe.cpp's small MoE).
        static Json doc = parse_json_text(R"({"kind": "transformer", "name": "moe-small", "layers": 4, "hidden": 512,
            "heads": 8, "ffn_hidden": 2048, "vocab": 4096, "seq": 256, "gated_mlp": true, "biases": false,
            "norm": "rmsnorm", "positions": "rope", "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 1024}})",
                                          "moe-small.json");
        p.sequence_parallel = true;   // Megatron's MoE with tp needs it; FSDP does not get that far
        CHECK_THROWS_WITH(build(model_from_json(JsonView(doc, "moe-small.json"), "moe-small"), topo::cluster_preset("dgx-h100"), p),
                          Catch::Contains("fsdp with tensor parallelism alone is modelled for dense models"));
    }
    SECTION("a hybrid group that cannot be a node's replicas") {
        // tp 3 does not divide a DGX A100's 8 GPUs: a node holds no whole number of replicas.
        p.tp = 3;
        p.fsdp_sharding = FsdpSharding::hybrid;
        CHECK_THROWS_WITH(build(model_preset("gpt2-small"), topo::cluster_preset("dgx-a100").with_nodes(3), p),
                          Catch::Contains("tp 3 does not divide the 8 devices of a node; give --fsdp-group"));
    }
    SECTION("a hybrid group not dividing the replicas") {
        p.fsdp_sharding = FsdpSharding::hybrid;
        p.fsdp_group = 3;
        CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100").with_nodes(2), p),
                          Catch::Contains("hybrid shard group of 3 replicas does not divide the 8 data-parallel replicas"));
    }
}

namespace {

/// What FSDP does on one rank of a pipeline plan: its all-gathers and reduce-scatters over its
/// data-parallel group, their bytes, and when they ran against the rank's compute.
struct StageFsdp {
    int gathers = 0, reduce_scatters = 0, other = 0;
    double gathered = 0, reduced = 0;   // bytes per rank (the unsharded unit)
    double other_bytes = 0;
    bool reduce_after_last_backward = true, forward_after_gather = true;
    int gathered_forwards = 0;          // micro-batch 0 forwards that found their unit gathered
};

StageFsdp stage_fsdp(const test::DpRun& r, int rank) {
    const OpGraph& g = r.built.graph;
    const Timeline& tl = r.timeline;
    StageFsdp out;
    Time last_backward = Time::zero();
    std::map<int, Time> gathered_at;   // block → its all-gather's end
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank) continue;
        if (op.kind == OpKind::compute && (op.phase == Phase::bwd || op.phase == Phase::recompute))
            last_backward = std::max(last_backward, tl.end[id]);
        if (op.kind != OpKind::collective) continue;
        const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
        if (c.kind == CollectiveKind::all_gather) {
            ++out.gathers;
            out.gathered += static_cast<double>(c.bytes);
            gathered_at[op.layer] = tl.end[id];
        } else if (c.kind == CollectiveKind::reduce_scatter) {
            ++out.reduce_scatters;
            out.reduced += static_cast<double>(c.bytes);
        } else {
            ++out.other;
            out.other_bytes += static_cast<double>(c.bytes);
        }
    }
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank) continue;
        if (op.kind == OpKind::collective && g.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::reduce_scatter)
            out.reduce_after_last_backward &= tl.start[id] >= last_backward;
        if (op.kind == OpKind::compute && op.phase == Phase::fwd && op.microbatch == 0) {
            const auto it = gathered_at.find(op.layer);
            if (it == gathered_at.end()) continue;
            out.forward_after_gather &= tl.start[id] >= it->second;
            ++out.gathered_forwards;
        }
    }
    return out;
}

}  // namespace

TEST_CASE("FSDP under pipeline stages gathers each unit once per step and reduce-scatters after the stage's backward",
          "[strategies][fsdp]") {
    // torchtitan's FSDP + PP (apply_fsdp: no reshard after forward with pipeline stages; torch
    // pipelining's REDUCE_GRAD after a stage's last backward). GPT-2 medium on 2 DGX A100s, pp 4,
    // dp 4: stages of 7, 6, 6 and 7 blocks (the embedding and 6 layers, 6, 6, 6 layers and the
    // head). Per step each rank gathers and reduce-scatters every unit of its stage once, however
    // many micro-batches: 2 · Ψ_stage 16-bit values, where FSDP without stages moves 3 · Ψ per
    // micro-batch.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.pp = 4;
    p.fold = false;
    p.global_batch = GENERATE(16, 64);   // 4 or 16 micro-batches per replica
    const test::DpRun r = test::dp_run(m, c, p);
    REQUIRE(r.built.layout.dp == 4);
    const int blocks_of_stage[4] = {7, 6, 6, 7};
    double gathered = 0;
    for (int s = 0; s < 4; ++s) {
        const int rank = r.built.layout.rank(0, 1, s);
        const StageFsdp f = stage_fsdp(r, rank);
        INFO("stage " << s << ", global batch " << p.global_batch);
        CHECK(f.gathers == blocks_of_stage[s]);
        CHECK(f.reduce_scatters == blocks_of_stage[s]);
        // The tied table's two copies (the embedding's on stage 0, the head's on stage 3) sum
        // their gradients in one all-reduce, as the pipeline builder runs it for every strategy;
        // under FSDP each rank's shard of them, a quarter of the table.
        CHECK(f.other == (s == 0 || s == 3 ? 1 : 0));
        if (f.other == 1) CHECK(f.other_bytes == Approx(2.0 * m.shape().vocab * m.shape().hidden / 4));
        CHECK(f.gathered == f.reduced);   // bf16 parameters and gradients
        CHECK(f.reduce_after_last_backward);
        CHECK(f.forward_after_gather);
        CHECK(f.gathered_forwards == blocks_of_stage[s]);
        gathered += f.gathered;
    }
    // Over the 4 stages, every parameter once, and the last stage's copy of the tied table (its
    // head, as Megatron places it): 2 bytes × (Ψ + vocab · hidden).
    const TransformerShape& shape = m.shape();
    CHECK(gathered == Approx(2.0 * (static_cast<double>(m.parameters()) + static_cast<double>(shape.vocab) * shape.hidden)));
}

TEST_CASE("FSDP under pipeline stages holds the stage's shards, and its unsharded units through the step",
          "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.pp = 2;
    p.tp = 2;
    p.global_batch = 32;
    p.fsdp_reduce_dtype = GENERATE(std::optional<DType>{}, std::optional<DType>{DType::fp32});
    const double grad_bytes = p.fsdp_reduce_dtype ? 4 : 2;
    const test::DpRun r = test::dp_run(m, c, p);
    REQUIRE(r.built.layout.dp == 4);
    // Ψ_stage from the gathers (its 16-bit units): model states 16 · Ψ_stage / dp (2-byte
    // parameter and gradient shards, 12 bytes of fp32 Adam state), and the unsharded 16-bit
    // parameters and gradients of every unit, held from the first forward and backward to the
    // reduce-scatter: 2 · Ψ_stage each.
    for (int s = 0; s < 2; ++s) {
        const int rank = r.built.layout.rank(1, 0, s);
        const double psi_stage = stage_fsdp(r, rank).gathered / 2;
        INFO("stage " << s);
        CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, test::kModelStates).as_double() ==
              Approx(16.0 * psi_stage / 4).epsilon(0.001));
        CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, {BufferLabel::staging}).as_double() == Approx(2.0 * psi_stage));
        // The unsharded gradients accumulate in the reduce dtype (FSDP2's unsharded_accumulated_grad
        // with an fp32 reduce_dtype), and are reduce-scattered in it.
        CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, {BufferLabel::bucket}).as_double() ==
              Approx(grad_bytes * psi_stage));
        CHECK(stage_fsdp(r, rank).reduced == Approx(grad_bytes * psi_stage));
    }
}

TEST_CASE("impossible FSDP + PP plans say why", "[strategies][fsdp][plan]") {
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.pp = 2;
    SECTION("no sharding") {
        p.fsdp_sharding = FsdpSharding::none;
        CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100").with_nodes(2), p),
                          Catch::Contains("--fsdp-sharding none with pipeline parallelism is not modelled"));
    }
    SECTION("ZeRO-3 keeps DeepSpeed's refusal") {
        p.strategy = DataParallel::zero3;
        p.framework = "megatron-deepspeed";
        CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100"), p),
                          Catch::Contains("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"));
    }
}

namespace {

/// A rank's backward gathers against the unit after them in backward order (block j + 1, same
/// micro-batch): how many started before that unit's backward compute ended, and before its
/// reduce-scatter ended.
struct BackwardGathers {
    int gathers = 0, before_prev_backward = 0, before_prev_reduce = 0;
};

BackwardGathers backward_gathers(const test::DpRun& r, int rank) {
    const OpGraph& g = r.built.graph;
    const Timeline& tl = r.timeline;
    std::map<std::pair<int, int>, Time> bwd_end, rs_end;   // (micro-batch, block) → end
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank) continue;
        const std::pair<int, int> key{op.microbatch, op.layer};
        if (op.kind == OpKind::compute && op.phase == Phase::bwd) bwd_end[key] = std::max(bwd_end[key], tl.end[id]);
        if (op.kind == OpKind::collective && g.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::reduce_scatter)
            rs_end[key] = tl.end[id];
    }
    BackwardGathers out;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank || op.kind != OpKind::collective || op.phase != Phase::bwd) continue;
        if (g.collectives()[static_cast<std::size_t>(op.ref)].kind != CollectiveKind::all_gather) continue;
        const std::pair<int, int> prev{op.microbatch, op.layer + 1};
        if (!bwd_end.count(prev)) continue;   // the first unit in backward has none before it
        ++out.gathers;
        out.before_prev_backward += tl.start[id] < bwd_end[prev];
        out.before_prev_reduce += tl.start[id] < rs_end.at(prev);
    }
    return out;
}

}  // namespace

TEST_CASE("FSDP's backward prefetch: pre overlaps the next gather with the gradients, post follows them, none the reduce-scatter",
          "[strategies][fsdp]") {
    // torch.distributed.fsdp.BackwardPrefetch: BACKWARD_PRE "overlaps the next all-gather and the
    // current gradient computation", BACKWARD_POST prefetches "after the current set of
    // parameters' gradient computation", and without prefetch "the next all-gather is delayed
    // until the current reduce-scatter finishes". GPT-2 medium, full sharding over 2 DGX A100s.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.global_batch = 32;
    double step[3];
    for (const FsdpBackwardPrefetch mode : {FsdpBackwardPrefetch::pre, FsdpBackwardPrefetch::post, FsdpBackwardPrefetch::none}) {
        p.fsdp_backward_prefetch = mode;
        const test::DpRun r = test::dp_run(m, c, p);
        const BackwardGathers b = backward_gathers(r, 0);
        INFO(to_string(mode));
        CHECK(b.gathers == 2 * 24);   // 2 micro-batches × every layer (the root's units stay gathered)
        switch (mode) {
            case FsdpBackwardPrefetch::pre: CHECK(b.before_prev_backward > 0); break;
            case FsdpBackwardPrefetch::post:
                CHECK(b.before_prev_backward == 0);
                CHECK(b.before_prev_reduce > 0);
                break;
            case FsdpBackwardPrefetch::none: CHECK(b.before_prev_reduce == 0); break;
        }
        step[static_cast<int>(mode)] = r.summary.iteration.to_seconds();
    }
    // Less overlap, a longer step.
    CHECK(step[0] < step[1]);
    CHECK(step[1] < step[2]);
    CHECK(parse_fsdp_backward_prefetch("post") == FsdpBackwardPrefetch::post);
    CHECK_THROWS_WITH(parse_fsdp_backward_prefetch("BACKWARD_PRE"), Catch::Contains("--fsdp-backward-prefetch"));
}

TEST_CASE("HSDP under pipeline stages shards each stage within a node's replicas and all-reduces the shards across nodes",
          "[strategies][fsdp]") {
    // torchtitan's HSDP (dp_replicate × dp_shard) with pp 2 on 4 DGX A100: each stage's 16
    // replicas sit on two nodes; the default shard group is a node's 8. Per unit per step: one
    // gather and one reduce-scatter over the 8 ranks of its node, then the 1/8 shard all-reduced
    // with the other node's rank of the same position (FSDP's replicate dimension).
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = FsdpSharding::hybrid;
    p.pp = 2;
    p.global_batch = 32;
    const test::DpRun r = test::dp_run(m, c, p);
    REQUIRE(r.built.layout.dp == 16);
    REQUIRE(r.built.layout.shard_group == 8);
    REQUIRE_FALSE(r.built.layout.folded);
    const int rank = r.built.layout.rank(0, 11, 1);   // stage 1, replica 11: the second node of the stage
    const OpGraph& g = r.built.graph;
    std::map<CollectiveKind, int> count;
    std::map<CollectiveKind, double> bytes;
    bool in_node = true;   // gathers and reduce-scatters stay inside the rank's node
    for (const Op& op : g.ops()) {
        if (op.kind != OpKind::collective || op.rank != rank) continue;
        const Collective& col = g.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = g.communicators()[static_cast<std::size_t>(col.communicator)];
        ++count[col.kind];
        bytes[col.kind] += static_cast<double>(col.bytes);
        if (col.kind != CollectiveKind::all_reduce) {
            CHECK(members.size() == 8);
            for (int mbr : members) in_node &= mbr / 8 == rank / 8;
        } else if (members.size() == 2) {
            CHECK(members[0] / 8 != members[1] / 8);   // one rank of each node of the stage
        }
    }
    CHECK(in_node);
    // Stage 1: 12 layers and the head (13 units), the head's copy of the tied table included;
    // the one all-reduce of two members beyond them is that table's with stage 0 (a shard).
    CHECK(count[CollectiveKind::all_gather] == 13);
    CHECK(count[CollectiveKind::reduce_scatter] == 13);
    CHECK(count[CollectiveKind::all_reduce] == 13 + 1);
    const double psi_stage = bytes[CollectiveKind::all_gather] / 2;
    CHECK(bytes[CollectiveKind::reduce_scatter] == Approx(2 * psi_stage));
    // The shards' all-reduces: 1/8 of the stage's gradients, and the tied table's shard.
    const double tied = 2.0 * std::ceil(50257.0 * 1024 / 8);
    CHECK(bytes[CollectiveKind::all_reduce] - tied == Approx(2 * psi_stage / 8).epsilon(1e-4));
    // Model states: 16 · Ψ_stage / 8 (a node's shard), plus the unsharded units through the step.
    CHECK(test::peak_of_labels(g, r.timeline, rank, test::kModelStates).as_double() == Approx(16.0 * psi_stage / 8).epsilon(1e-3));
}

namespace {

/// FSDP's collectives on one rank, per (micro-batch, phase, block): when its all-gathers ended,
/// and their counts, bytes and group sizes by kind.
struct RankFsdp {
    std::map<std::tuple<int, Phase, int>, Time> gathered;   // (micro-batch, fwd | bwd, block) → end
    std::map<CollectiveKind, int> count;
    std::map<CollectiveKind, double> bytes;
    std::map<CollectiveKind, std::size_t> members;          // of the last seen
};

RankFsdp rank_fsdp(const test::DpRun& r, int rank) {
    const OpGraph& g = r.built.graph;
    RankFsdp out;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
        ++out.count[c.kind];
        out.bytes[c.kind] += static_cast<double>(c.bytes);
        out.members[c.kind] = g.communicators()[static_cast<std::size_t>(c.communicator)].size();
        if (c.kind == CollectiveKind::all_gather) out.gathered[{op.microbatch, op.phase, op.layer}] = r.timeline.end[id];
    }
    return out;
}

}  // namespace

TEST_CASE("FSDP with context parallelism shards over the data- and context-parallel ranks and gathers every micro-batch",
          "[strategies][fsdp][cp]") {
    // torchtitan's FSDP + CP without pipeline stages: FSDP over the dp_shard_cp mesh (every data-
    // and context-parallel rank), resharding after forward (apply_fsdp: reshard_after_forward is
    // `not pp_enabled`), each micro-batch of the accumulation reduce-scattered. GPT-2 medium on 2
    // DGX A100, cp 2 · dp 8: per micro-batch a rank gathers every unit before its forward and
    // every layer again before its recompute and backward (the root's embedding and head stay
    // gathered), and reduce-scatters every unit, each over all 16 ranks: 2 · (2Ψ − Ψ_root) bytes
    // gathered and 2Ψ reduced per micro-batch.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.cp = 2;
    p.recompute = GENERATE(Recompute::none, Recompute::full);
    p.global_batch = GENERATE(8, 16);   // 1 or 2 micro-batches per replica
    p.fold = false;
    const test::DpRun r = test::dp_run(m, c, p);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 8);
    const int mbs = l.microbatches;
    const std::vector<Block> blocks = strategies::detail::replica_blocks(m, l, p);
    const int units = static_cast<int>(blocks.size());
    const double psi = static_cast<double>(strategies::detail::total_params(blocks)), root = root_params(m, l, p);
    const int rank = l.rank(0, 5, 0);
    INFO("global batch " << p.global_batch << ", recompute " << to_string(p.recompute));
    const RankFsdp f = rank_fsdp(r, rank);
    CHECK(f.count.at(CollectiveKind::all_gather) == mbs * (units + units - 2));
    CHECK(f.count.at(CollectiveKind::reduce_scatter) == mbs * units);
    CHECK(f.count.count(CollectiveKind::all_reduce) == 0);
    CHECK(f.members.at(CollectiveKind::all_gather) == 16);
    CHECK(f.members.at(CollectiveKind::reduce_scatter) == 16);
    CHECK(f.bytes.at(CollectiveKind::all_gather) == Approx(mbs * 2.0 * (2 * psi - root)));
    CHECK(f.bytes.at(CollectiveKind::reduce_scatter) == Approx(mbs * 2.0 * psi));
    // Every compute op of a unit starts after its gather of that micro-batch: the forward's, or
    // for a layer's recompute and backward the backward's.
    const OpGraph& g = r.built.graph;
    int checked = 0;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank || op.kind != OpKind::compute || op.layer < 0) continue;
        const Block::Kind kind = blocks[static_cast<std::size_t>(op.layer)].kind;
        const bool root_unit = kind == Block::Kind::embedding || kind == Block::Kind::head;
        const Phase gather = op.phase == Phase::fwd || root_unit ? Phase::fwd : Phase::bwd;
        const auto it = f.gathered.find({op.microbatch, gather, op.layer});
        REQUIRE(it != f.gathered.end());
        CHECK(r.timeline.start[id] >= it->second);
        ++checked;
    }
    CHECK(checked > 0);
    // Model states: 16Ψ/16, every state sharded over the 16 ranks.
    CHECK(test::peak_of_labels(g, r.timeline, rank, test::kModelStates).as_double() == Approx(16.0 * psi / 16).epsilon(1e-3));
}

TEST_CASE("FSDP with context parallelism folds a node's replicas to the same step as the full expansion", "[strategies][fsdp][cp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = GENERATE(FsdpSharding::full, FsdpSharding::grad_op);
    p.cp = 2;
    p.global_batch = 32;
    p.fold = false;
    const test::DpRun full = test::dp_run(m, c, p);
    p.fold = true;
    const test::DpRun folded = test::dp_run(m, c, p);
    REQUIRE(folded.built.layout.folded);
    CHECK(folded.built.graph.size() * 3 < full.built.graph.size());
    CHECK(folded.summary.iteration.to_seconds() == Approx(full.summary.iteration.to_seconds()).epsilon(1e-6));
    for (std::size_t rk = 0; rk < full.summary.per_device.size(); ++rk) {
        INFO("rank " << rk);
        CHECK(folded.summary.per_device[rk].peak_memory == full.summary.per_device[rk].peak_memory);
        CHECK(folded.summary.per_device[rk].busy.to_seconds() == Approx(full.summary.per_device[rk].busy.to_seconds()).epsilon(1e-6));
    }
}

TEST_CASE("HSDP with context parallelism shards within a node and all-reduces each shard across nodes", "[strategies][fsdp][cp]") {
    // 2 DGX A100, cp 2 · dp 8: the default shard group is a node's 4 replicas, 8 ranks with their
    // context-parallel peers; each micro-batch's reduce-scatter there is followed by an
    // all-reduce of the 1/8 shard with the other node's rank at the same position.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = FsdpSharding::hybrid;
    p.cp = 2;
    p.global_batch = 16;
    const test::DpRun r = test::dp_run(m, c, p);
    const Layout& l = r.built.layout;
    REQUIRE(l.shard_group == 4);
    const int rank = l.rank(0, 5, 0), mbs = l.microbatches;
    const int units = static_cast<int>(strategies::detail::replica_blocks(m, l, p).size());
    const RankFsdp f = rank_fsdp(r, rank);
    CHECK(f.members.at(CollectiveKind::all_gather) == 8);
    CHECK(f.members.at(CollectiveKind::reduce_scatter) == 8);
    CHECK(f.members.at(CollectiveKind::all_reduce) == 2);
    CHECK(f.count.at(CollectiveKind::all_reduce) == mbs * units);
    CHECK(f.bytes.at(CollectiveKind::all_reduce) == Approx(f.bytes.at(CollectiveKind::reduce_scatter) / 8).epsilon(1e-4));
    for (const Op& op : r.built.graph.ops()) {
        if (op.rank != rank || op.kind != OpKind::collective || op.stream != Stream::comm) continue;
        const Collective& col = r.built.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = r.built.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (col.kind == CollectiveKind::all_reduce)
            CHECK(members[0] / 8 != members[1] / 8);
        else
            for (int mbr : members) CHECK(mbr / 8 == rank / 8);
    }
    CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, test::kModelStates).as_double() ==
          Approx(16.0 * f.bytes.at(CollectiveKind::reduce_scatter) / 2 / mbs / 8).epsilon(1e-3));
}

TEST_CASE("FSDP's no_sync with CPU offload is refused", "[strategies][fsdp][plan]") {
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_no_sync = true;
    p.offload = Offload::cpu;
    CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100"), p),
                      Catch::Contains("--fsdp-no-sync with FSDP's CPU offload is not modelled"));
}

TEST_CASE("FSDP with context parallelism refuses NO_SHARD", "[strategies][fsdp][cp][plan]") {
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.fsdp_sharding = FsdpSharding::none;
    p.cp = 2;
    CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100"), p),
                      Catch::Contains("--fsdp-sharding none with context parallelism is not modelled"));
}

TEST_CASE("FSDP + TP + CP shards each tensor rank's slices over its data- and context-parallel peers", "[strategies][fsdp][cp]") {
    // torchtitan's 3-D mesh without stages: tp 2 · cp 2 · dp 4 on 2 DGX A100. A rank's gathers and
    // reduce-scatters run over the 8 ranks of its tensor rank (4 replicas × 2 context ranks),
    // Megatron's collectives over its 2 tensor ranks, and it holds 16/(tp · 8) of the states.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.tp = 2;
    p.cp = 2;
    p.global_batch = 8;
    const test::DpRun r = test::dp_run(m, c, p);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 4);
    const int rank = l.rank(1, 3, 0);
    const RankFsdp f = rank_fsdp(r, rank);
    CHECK(f.members.at(CollectiveKind::all_gather) == 8);
    CHECK(f.members.at(CollectiveKind::reduce_scatter) == 8);
    int tensor_parallel = 0;
    for (const Op& op : r.built.graph.ops()) {
        if (op.rank != rank || op.kind != OpKind::collective) continue;
        const Collective& col = r.built.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = r.built.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (op.stream == Stream::comm)
            for (int mbr : members) CHECK(mbr % 2 == 1);   // tensor rank 1 of every replica
        else if (col.kind == CollectiveKind::all_reduce && members.size() == 2)
            ++tensor_parallel;
    }
    CHECK(tensor_parallel > 0);
    const double psi_tp = f.bytes.at(CollectiveKind::reduce_scatter) / 2 / l.microbatches;
    CHECK(test::peak_of_labels(r.built.graph, r.timeline, rank, test::kModelStates).as_double() == Approx(16.0 * psi_tp / 8).epsilon(1e-3));
}

TEST_CASE("FSDP under no_sync holds every unit's gradient unsharded and reduce-scatters it after the last micro-batch",
          "[strategies][fsdp]") {
    // FSDP's no_sync() through gradient accumulation (Hugging Face Accelerate's default): the
    // gathers are the same every micro-batch, but each unit's gradient stays in its unsharded
    // buffer, autograd adding the later micro-batches' to it, and is reduce-scattered once.
    // GPT-2 medium on 2 DGX A100, 4 micro-batches per replica; with --cp 2 on the pipeline builder.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.cp = GENERATE(1, 2);
    p.global_batch = 64 / p.cp;
    p.fold = false;
    const test::DpRun sync = test::dp_run(m, c, p);
    p.fsdp_no_sync = true;
    const test::DpRun held = test::dp_run(m, c, p);
    const Layout& l = held.built.layout;
    INFO("cp " << p.cp);
    REQUIRE(l.microbatches == 4);
    const std::vector<Block> blocks = strategies::detail::replica_blocks(m, l, p);
    const int units = static_cast<int>(blocks.size());
    const double psi = static_cast<double>(strategies::detail::total_params(blocks));
    const int rank = l.rank(0, 3, 0);
    const RankFsdp a = rank_fsdp(sync, rank), b = rank_fsdp(held, rank);
    CHECK(a.count.at(CollectiveKind::reduce_scatter) == 4 * units);
    CHECK(b.count.at(CollectiveKind::reduce_scatter) == units);
    CHECK(b.bytes.at(CollectiveKind::reduce_scatter) == Approx(2.0 * psi));
    CHECK(b.count.at(CollectiveKind::all_gather) == a.count.at(CollectiveKind::all_gather));
    // The unsharded gradients, 2 bytes each, all held at once (a few units' at a time without).
    const double all = test::peak_of_labels(held.built.graph, held.timeline, rank, {BufferLabel::bucket}).as_double();
    CHECK(all == Approx(2.0 * psi));
    CHECK(test::peak_of_labels(sync.built.graph, sync.timeline, rank, {BufferLabel::bucket}).as_double() < all / 4);
    // Every reduce-scatter in the last micro-batch; autograd's accumulation pass for every unit in
    // each later one (beyond the tied table's sum of its two gradients, in both plans).
    auto accumulations = [&](const test::DpRun& r) {
        int n = 0;
        for (OpId id = 0; id < r.built.graph.size(); ++id) {
            const Op& op = r.built.graph.op(id);
            if (op.rank != rank) continue;
            if (op.kind == OpKind::collective &&
                r.built.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::reduce_scatter &&
                &r == &held)
                CHECK(op.microbatch == 3);
            if (op.kind == OpKind::compute)
                for (const Kernel& k : r.built.graph.kernels_of(id)) n += k.name == KernelName::grad_accumulate;
        }
        return n;
    };
    CHECK(accumulations(held) - accumulations(sync) == 3 * units);
}

TEST_CASE("Megatron-FSDP gathers and reduce-scatters every unit in every micro-batch, as FULL_SHARD without no_sync",
          "[strategies][fsdp][megatron]") {
    // Megatron-FSDP with optim_grads_params (NVIDIA/Megatron-LM d98e8a6 megatron/core/distributed/
    // fsdp/src/megatron_fsdp/megatron_fsdp.py): each layer gathered before its forward and again
    // before its backward, the embedding and head (no unit) kept from their forward, and every
    // unit's gradients reduce-scattered after each backward (grad_reduce_every_bprop). Per
    // micro-batch a rank sends (Ψ + (Ψ − root) + Ψ)·(n − 1)/n elements at 2 bytes, Ψ with
    // Megatron's vocabulary padding (50,257 rows to 50,304).
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const double padded = 50304.0 - 50257.0;
    const double psi = static_cast<double>(m.parameters()) + padded * 768, n = 8, micro_batches = 4;
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.framework = "megatron";
    p.global_batch = 32;   // 4 micro-batches of 1 on each of 8 replicas
    p.fold = false;
    const Built b = build(m, c, p);
    CHECK(b.layout.framework.name == FrameworkName::megatron);
    const double root = root_params(m, b.layout, p);
    CHECK(test::collective_bytes_sent(b.graph, 3) ==
          Approx(micro_batches * (3 * psi - root) * (n - 1) / n * 2).epsilon(1e-9));
    // The same collectives as PyTorch FSDP's FULL_SHARD, which Megatron-FSDP's schedule is; the
    // kernels between them are Megatron's (its vocabulary padded to a multiple of 128: 50,304).
    Plan torch = p;
    torch.framework.clear();
    const Built t = build(m, c, torch);
    CHECK(t.layout.framework.name == FrameworkName::pytorch);
    CHECK(test::collective_bytes_sent(b.graph, 3) - test::collective_bytes_sent(t.graph, 3) ==
          Approx(micro_batches * 2 * padded * 768 * (n - 1) / n * 2).epsilon(1e-9));
}

TEST_CASE("Megatron-FSDP runs Transformer Engine's FP8 linears, which PyTorch's FSDP has no path for",
          "[strategies][fsdp][megatron][fp8]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.global_batch = 16;
    p.seq = 4096;
    p.fp8 = Fp8Recipe::tensorwise;
    CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("--fp8 is modelled as Megatron core runs it"));
    p.framework = "megatron";
    const double fp8 = test::dp_run(m, c, p).summary.iteration.to_seconds();
    p.fp8 = Fp8Recipe::none;
    const double bf16 = test::dp_run(m, c, p).summary.iteration.to_seconds();
    CHECK(fp8 < bf16);
}

TEST_CASE("impossible Megatron-FSDP plans say why", "[strategies][fsdp][megatron][plan]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::fsdp;
    p.framework = "megatron";
    p.global_batch = 32;
    SECTION("before core 0.12") {
        p.framework = "megatron@0.11";
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("Megatron-FSDP from Megatron core 0.12 on"));
    }
    SECTION("another sharding") {
        p.fsdp_sharding = FsdpSharding::hybrid;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("optim_grads_params, --fsdp-sharding full"));
    }
    SECTION("PyTorch's backward prefetch") {
        p.fsdp_backward_prefetch = FsdpBackwardPrefetch::none;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("always gathers the previous unit"));
    }
    SECTION("no_sync") {
        p.fsdp_no_sync = true;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("grad_reduce_every_bprop"));
    }
    SECTION("the overlap flags") {
        p.overlap_grad_reduce = true;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("overlaps both whenever it shards parameters"));
    }
    SECTION("pipeline stages") {
        p.pp = 2;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("with pipeline stages (--pp) it is not"));
    }
    SECTION("offload") {
        p.offload = Offload::cpu;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("keeps model states on the device"));
    }
}
