// ZeRO (Rajbhandari et al. 2020) against the paper's arithmetic: model-state memory per device
// (16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N; Ψ = 7.5 B, N = 64 → 120 / 31.4 / 16.6 / 1.9 GB) and
// communication per device per step (2Ψ(N−1)/N for DDP, Horovod and stages 1–2; 3Ψ(N−1)/N for
// stage 3 and FSDP full sharding), both measured, not asserted from strategy code.
//
// Memory: the peak over the simulated step of the buffers labelled parameters, gradients and
// optimizer_state on rank 0, replayed from the timeline. Activations, transient gathered
// parameters (staging) and gradient buckets are excluded, as the paper's formulas exclude them.
// The model is a synthetic layer list of 30 fully connected layers of 250 M parameters (Ψ =
// 7.5 B exactly), so the count needs no transformer arithmetic.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>

#include "dp_fixtures.hpp"
#include "sim/simulator.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/zero.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

Model synthetic_7_5b() {
    std::vector<LayerSpec> layers;
    for (int i = 0; i < 30; ++i)
        layers.push_back({"fc" + std::to_string(i), "fc", 250'000'000, Flops(2 * 250e6), Bytes(4096), Bytes(4096)});
    return Model::layer_list("synthetic-7.5b", std::move(layers), 4096);
}

}  // namespace

TEST_CASE("ZeRO model-state memory per device matches the paper", "[strategies][zero]") {
    const Model m = synthetic_7_5b();
    REQUIRE(m.parameters() == 7'500'000'000);
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(8);  // N = 64
    REQUIRE(c.num_devices() == 64);
    const auto [strategy, expected_gb] = GENERATE(table<DataParallel, double>(
        {{DataParallel::ddp, 120.0}, {DataParallel::zero1, 31.4}, {DataParallel::zero2, 16.6}, {DataParallel::zero3, 1.875}}));
    Plan p;
    p.strategy = strategy;
    p.dtype = DType::bf16;
    sim::SimOptions opt;
    opt.network = sim::NetworkMode::analytic;
    opt.record_memory = false;
    const test::DpRun r = test::dp_run(m, c, p, opt);
    const Bytes peak = test::peak_of_labels(r.built.graph, r.timeline, 0, test::kModelStates);
    INFO(to_string(strategy) << ": " << to_string(peak));
    CHECK(peak.as_double() / 1e9 == Approx(expected_gb).epsilon(0.01));
}

TEST_CASE("ZeRO-3 releases gathered parameters by DeepSpeed's reuse-distance rule", "[strategies][zero]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::zero3;
    Workload w;
    std::int64_t largest = 0, partitioned = 0;
    for (const Block& b : m.blocks(w)) {
        largest = std::max(largest, b.params);
        for (std::int64_t e : partitioned_tensors(b, 100'000)) partitioned += e;
    }
    SECTION("default stage3_max_reuse_distance (1e9 elements): a 355 M model is kept gathered to backward") {
        // Every block's next use is under 2 × 355 M elements away, so nothing is released after
        // forward: at the forward→backward turn every partitioned tensor is gathered.
        const test::DpRun r = test::dp_run(m, c, p);
        const Bytes staging = test::peak_of_labels(r.built.graph, r.timeline, 0, {BufferLabel::staging});
        CHECK(staging == Bytes(partitioned * 2));
    }
    SECTION("stage3_max_reuse_distance 0: released after forward, fetched again, a prefetch window live") {
        p.framework_overrides.max_reuse_distance = 0;
        const test::DpRun r = test::dp_run(m, c, p);
        const Bytes staging = test::peak_of_labels(r.built.graph, r.timeline, 0, {BufferLabel::staging});
        CHECK(staging > Bytes(0));
        // The 5e7-element prefetch bucket holds a few blocks of gpt2-medium (12.6 M each); the
        // 51 M-element embedding alone exceeds it.
        CHECK(staging <= Bytes((50'000'000 + 2 * largest) * 2));
        CHECK(staging < Bytes(m.parameters() * 2 / 3));
    }
}

TEST_CASE("ZeRO-3's recompute waits for its gather, deepspeed@0.5 gathers per tensor, blocking", "[strategies][zero]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::zero3;
    p.recompute = Recompute::full;
    p.framework_overrides.max_reuse_distance = 0;   // every block fetched again for backward
    SECTION("no recompute starts before the backward gather of its block ends") {
        for (const char* fw : {"deepspeed", "deepspeed@0.5"}) {
            p.framework = fw;
            const test::DpRun r = test::dp_run(m, c, p);
            const OpGraph& g = r.built.graph;
            std::map<std::pair<int, int>, Time> gathered;   // (micro-batch, block) → end of its last backward gather
            for (OpId id = 0; id < g.size(); ++id) {
                const Op& op = g.op(id);
                if (op.rank == 0 && op.kind == OpKind::collective && op.phase == Phase::bwd &&
                    g.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_gather)
                    gathered[{op.microbatch, op.layer}] = std::max(gathered[{op.microbatch, op.layer}], r.timeline.end[id]);
            }
            int checked = 0;
            for (OpId id = 0; id < g.size(); ++id) {
                const Op& op = g.op(id);
                if (op.rank != 0 || op.kind != OpKind::compute || op.phase != Phase::recompute) continue;
                const auto it = gathered.find({op.microbatch, op.layer});
                if (it == gathered.end()) continue;
                CHECK(r.timeline.start[id] >= it->second);
                ++checked;
            }
            CHECK(checked > 0);
        }
    }
    SECTION("collectives per step: partitioned tensors × (forward + backward) gathers for deepspeed@0.5") {
        p.framework = "deepspeed@0.5";
        const Built b = build(m, c, p);
        std::size_t tensors = 0;
        for (const Block& blk : m.blocks(Workload{})) tensors += partitioned_tensors(blk, 100'000).size();
        std::size_t gathers = 0;
        for (const Op& op : b.graph.ops())
            gathers += op.rank == 0 && op.kind == OpKind::collective &&
                       b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_gather;
        CHECK(gathers == tensors * 2);
        // Blocking: a block's gathers start only after the previous block's forward is done.
        const Timeline tl = sim::simulate(b.graph, c);
        Time fwd_end_prev = Time::zero();
        int block = -1;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.rank != 0) continue;
            if (op.kind == OpKind::compute && op.phase == Phase::fwd) {
                fwd_end_prev = tl.end[id];
                block = op.layer;
            }
            if (op.kind == OpKind::collective && op.phase == Phase::fwd && op.layer == block + 1)
                CHECK(tl.start[id] >= fwd_end_prev);
        }
    }
}

TEST_CASE("ZeRO-3 partitions every expert's weights as tensors of their own", "[strategies][zero]") {
    // Mixtral-8x7B's layer (its config.json): the fused QKV (4096 × 6144) and output (4096 ×
    // 4096) projections, and 8 experts of two partitioned tensors each (the fused gate and up
    // projection, 4096 × 28672, and the down projection, 14336 × 4096); the router (4096 × 8) and
    // the two norms fall under param_persistence_threshold (1e5) and stay whole.
    const Model m = load_model(std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json");
    int layers = 0;
    for (const Block& b : m.blocks(Workload{})) {
        if (b.kind != Block::Kind::transformer) continue;
        ++layers;
        std::int64_t persistent = 0;
        const std::vector<std::int64_t> tensors = partitioned_tensors(b, 100'000, &persistent);
        CHECK(tensors.size() == 2 + 8 * 2);
        CHECK(std::count(tensors.begin(), tensors.end(), 4096ll * 28672) == 8);
        CHECK(std::count(tensors.begin(), tensors.end(), 14336ll * 4096) == 8);
        CHECK(persistent == 4096 * 8 + 2 * 4096);
        CHECK(std::accumulate(tensors.begin(), tensors.end(), persistent) == b.params);
    }
    CHECK(layers == 32);
}

TEST_CASE("elements sent per device per step follow 2Ψ(N−1)/N and 3Ψ(N−1)/N", "[strategies][zero][fsdp][horovod]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");  // N = 8, bf16: 2 bytes on the wire
    const double psi = static_cast<double>(m.parameters()), n = 8;
    const auto [strategy, factor] = GENERATE(table<DataParallel, double>({{DataParallel::ddp, 2.0},
                                                                          {DataParallel::ring, 2.0},
                                                                          {DataParallel::zero1, 2.0},
                                                                          {DataParallel::zero2, 2.0},
                                                                          {DataParallel::zero3, 2.0},
                                                                          {DataParallel::fsdp, 3.0}}));
    Plan p;
    p.strategy = strategy;
    p.fold = false;   // every rank's own ops (folded replicas: test_folding.cpp)
    const Built b = build(m, c, p);
    // ZeRO-3 with DeepSpeed's default reuse distance keeps gpt2-small's gathered parameters from
    // forward to backward (2Ψ); fetched again (stage3_max_reuse_distance 0) it moves 3Ψ. Tensors
    // under stage3_param_persistence_threshold stay whole and are only reduced: a few 0.1 %.
    const double eps = strategy == DataParallel::zero3 ? 0.01 : 1e-9;
    // FSDP's root (the tied table, the position table and the final norm: what no wrapped block
    // holds) stays gathered from forward to backward, so it is gathered once, not twice.
    const double root = strategy == DataParallel::fsdp ? 50257.0 * 768 + 1024.0 * 768 + 2 * 768 : 0;
    for (int rank : {0, 5}) {
        INFO(to_string(strategy) << " rank " << rank);
        CHECK(test::collective_bytes_sent(b.graph, rank) == Approx((factor * psi - root) * (n - 1) / n * 2).epsilon(eps));
    }
    if (strategy == DataParallel::zero3) {
        p.framework_overrides.max_reuse_distance = 0;
        const Built again = build(m, c, p);
        CHECK(test::collective_bytes_sent(again.graph, 0) == Approx(3 * psi * (n - 1) / n * 2).epsilon(0.01));
    }
}

TEST_CASE("ZeRO-2 reduce-scatters every micro-batch, ZeRO-1 only the last", "[strategies][zero]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto reduce_scatters = [&](DataParallel s) {
        Plan p;
        p.strategy = s;
        p.global_batch = 8 * 3;  // three micro-batches per replica
        const Built b = build(m, c, p);
        std::size_t n = 0;
        for (const Op& op : b.graph.ops())
            n += op.kind == OpKind::collective && op.rank == 0 &&
                 b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::reduce_scatter;
        return n;
    };
    CHECK(reduce_scatters(DataParallel::zero2) == 3 * reduce_scatters(DataParallel::zero1));
}

TEST_CASE("DeepSpeed's ZeRO-2 reduces gradients in reduce_bucket_size buckets", "[strategies][zero]") {
    // stage_1_and_2.py:939-961: an IPG bucket is reduced when the next gradient would take it past
    // reduce_bucket_size elements (5e8 by default: GPT-2 small's 124 M in one bucket).
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto per_microbatch = [&](std::optional<std::int64_t> reduce_bucket) {
        Plan p;
        p.strategy = DataParallel::zero2;
        p.global_batch = 8 * 2;   // two micro-batches per replica
        p.framework_overrides.reduce_bucket = reduce_bucket;
        const Built b = build(m, c, p);
        std::size_t n = 0;
        for (const Op& op : b.graph.ops())
            n += op.kind == OpKind::collective && op.rank == 0 &&
                 b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::reduce_scatter;
        return n / 2;
    };
    CHECK(per_microbatch(std::nullopt) == 1);
    // 2e7 elements: at least ⌈Ψ / 2e7⌉ buckets, at most one per block.
    Workload w;
    const auto blocks = m.blocks(w);
    const std::size_t n = per_microbatch(20'000'000);
    CHECK(n >= static_cast<std::size_t>((m.parameters() + 20'000'000 - 1) / 20'000'000));
    CHECK(n <= blocks.size());
}

TEST_CASE("DeepSpeed's ZeRO-2 holds one IPG buffer of reduce_bucket_size, two with overlap_comm", "[strategies][zero]") {
    // stage_1_and_2.py:2049-2060: backward takes torch.empty(reduce_bucket_size) in the gradient
    // dtype, and a second buffer with overlap_comm, whatever the model's size.
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto bucket_peak = [&](std::optional<bool> overlap, std::optional<std::int64_t> reduce_bucket) {
        Plan p;
        p.strategy = DataParallel::zero2;
        p.dtype = DType::bf16;
        p.global_batch = 8 * 2;
        p.framework_overrides.overlap_comm = overlap;
        p.framework_overrides.reduce_bucket = reduce_bucket;
        const test::DpRun r = test::dp_run(m, c, p);
        return test::peak_of_labels(r.built.graph, r.timeline, 0, {BufferLabel::bucket}).as_double();
    };
    CHECK(bucket_peak(std::nullopt, std::nullopt) == 2.0 * 5e8);
    CHECK(bucket_peak(true, std::nullopt) == 2 * 2.0 * 5e8);
    // Smaller buckets, several per backward: still one buffer's worth live.
    CHECK(bucket_peak(std::nullopt, 20'000'000) == 2.0 * 2e7);
}

TEST_CASE("DeepSpeed's ZeRO-1, and ZeRO-2 on one GPU, hold the IPG buffer backward takes", "[strategies][zero]") {
    // backward() takes torch.empty(reduce_bucket_size) whatever the stage (contiguous_gradients:
    // stage_1_and_2.py:2049-2060). Stage 1 fills it at the accumulation boundary and releases it
    // after the last reduction (reduce_gradients :706-722, epilogue :802); each micro-batch's
    // backward replaces the buffer the previous one took. Stage 2 on one GPU releases it after
    // every backward (engine.py:2052-2053).
    const Model m = model_preset("gpt2-small");
    const topo::Cluster node = topo::cluster_preset("dgx-a100");
    struct Seen {
        double peak = 0;
        std::vector<OpId> allocs, frees;
        test::DpRun run;
    };
    auto run = [&](DataParallel s, const topo::Cluster& c, std::optional<bool> overlap) {
        Plan p;
        p.strategy = s;
        p.dtype = DType::bf16;
        p.global_batch = 8 * c.num_devices() * 2;   // two micro-batches per replica
        p.micro_batch = 8;
        p.framework_overrides.overlap_comm = overlap;
        Seen out{0, {}, {}, test::dp_run(m, c, p)};
        const OpGraph& g = out.run.built.graph;
        out.peak = test::peak_of_labels(g, out.run.timeline, 0, {BufferLabel::bucket}).as_double();
        for (OpId id = 0; id < g.size(); ++id) {
            const Op& op = g.op(id);
            if (op.rank != 0 || (op.kind != OpKind::alloc && op.kind != OpKind::free)) continue;
            if (static_cast<BufferLabel>(g.buffers()[static_cast<std::size_t>(op.ref)].label) != BufferLabel::bucket) continue;
            (op.kind == OpKind::alloc ? out.allocs : out.frees).push_back(id);
        }
        return out;
    };
    const double buffer = 2.0 * 5e8;   // 5e8 bf16 elements (runtime/zero/config.py:109)

    const Seen z1 = run(DataParallel::zero1, node, std::nullopt);
    CHECK(z1.peak == buffer);
    REQUIRE(z1.allocs.size() == 1);
    REQUIRE(z1.frees.size() == 1);
    const OpGraph& g1 = z1.run.built.graph;
    const Timeline& t1 = z1.run.timeline;
    Time first_fwd_end, last_rs_end;
    for (OpId id = 0; id < g1.size(); ++id) {
        const Op& op = g1.op(id);
        if (op.rank != 0) continue;
        if (op.kind == OpKind::compute && op.phase == Phase::fwd && op.microbatch == 0) first_fwd_end = std::max(first_fwd_end, t1.end[id]);
        if (op.kind == OpKind::collective && g1.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::reduce_scatter)
            last_rs_end = std::max(last_rs_end, t1.end[id]);
    }
    CHECK(last_rs_end > Time::zero());
    CHECK(t1.start[z1.allocs[0]] >= first_fwd_end);   // taken by the first backward
    CHECK(t1.start[z1.frees[0]] >= last_rs_end);      // released after the boundary's reductions
    CHECK(run(DataParallel::zero1, node, true).peak == 2 * buffer);

    const Seen z2 = run(DataParallel::zero2, node.first_devices(1), std::nullopt);
    CHECK(z2.peak == buffer);   // one per backward, never two at once
    CHECK(z2.allocs.size() == 2);
    CHECK(z2.frees.size() == 2);
}

TEST_CASE("ZeRO-3 + TP: Megatron's collectives in each replica, the tensor slices partitioned over each tensor rank's replicas",
          "[strategies][zero]") {
    // Megatron-DeepSpeed's layers under zero.Init(mpu=…): GPT-2 medium with tp 2 on one DGX A100,
    // 4 replicas of 2 tensor ranks, on DeepSpeed's engine (its collectives are what is counted,
    // whichever framework's host time).
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::zero3;
    p.tp = 2;
    p.framework = "deepspeed";
    const bool sp = GENERATE(false, true);
    p.sequence_parallel = sp;
    const Built b = build(m, c, p);
    REQUIRE(b.layout.dp == 4);
    REQUIRE_FALSE(b.layout.folded);
    const std::int64_t psi_tp = strategies::detail::total_params(strategies::detail::replica_blocks(m, b.layout, p));
    for (const auto& [t, d] : {std::pair{0, 0}, std::pair{1, 3}}) {
        test::RankCollectives r = test::rank_collectives(b.graph, b.layout, t, d);
        INFO("sp " << sp << ", tensor rank " << t << " of replica " << d);
        // Megatron's f and g per pass: 1 + 2 × 24 + 1, forward and backward.
        if (sp) {
            CHECK(r.tp[CollectiveKind::all_gather] == 100);
            CHECK(r.tp[CollectiveKind::reduce_scatter] == 100);
        } else {
            CHECK(r.tp[CollectiveKind::all_reduce] == 100);
            CHECK(r.tp.size() == 1);
        }
        // DeepSpeed 0.6+ gathers each block's partitioned tensors in one coalesced all-gather (the
        // embedding and the 24 layers; the head's weight is the tied table, its norm under
        // stage3_param_persistence_threshold) and, with its default stage3_max_reuse_distance of
        // 1e9 elements, keeps them for backward; the gradients leave in reduce_bucket_size
        // buckets, over the 4 replicas' ranks of the same tensor rank.
        CHECK(r.dp[CollectiveKind::all_gather] == 25);
        CHECK(r.dp[CollectiveKind::reduce_scatter] >= 1);
        CHECK(r.dp.size() == 2);
        CHECK(r.dp_groups_one_tensor_rank);
        // One gather and one reduce-scatter of the slice's 16-bit values, but the tensors under
        // stage3_param_persistence_threshold (norms, biases), which stay whole and are only
        // reduced: 2 × Ψ_tp × 2 bytes × 3/4, within 1 %.
        CHECK(r.dp_bytes_sent == Approx(2.0 * static_cast<double>(psi_tp) * 2 * 3 / 4).epsilon(0.01));
    }
}

TEST_CASE("ZeRO-3 + TP keeps 16·Ψ/(tp·dp) model-state bytes per device and folds to its full expansion", "[strategies][zero]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p;
    p.strategy = DataParallel::zero3;
    p.tp = 4;
    p.global_batch = 8;
    const test::DpRun folded = test::dp_run(m, c, p);
    REQUIRE(folded.built.layout.dp == 4);
    REQUIRE(folded.built.layout.folded);
    CHECK(folded.built.layout.framework.name == FrameworkName::megatron_deepspeed);
    const double psi_tp = static_cast<double>(strategies::detail::total_params(strategies::detail::replica_blocks(m, folded.built.layout, p)));
    for (int rank : {0, 7}) {
        // 2-byte partitions of the parameters and gradients, 12 bytes of fp32 Adam state, of a
        // quarter of the slice (the persistent tensors whole: within 1 %).
        const Bytes states = test::peak_of_labels(folded.built.graph, folded.timeline, rank, test::kModelStates);
        CHECK(states.as_double() == Approx(16.0 * psi_tp / 4).epsilon(0.01));
    }
    p.fold = false;
    const test::DpRun full = test::dp_run(m, c, p);
    CHECK(folded.summary.iteration == full.summary.iteration);
}

TEST_CASE("impossible ZeRO + TP plans say why", "[strategies][zero][plan]") {
    Plan p;
    p.tp = 2;
    p.framework = "megatron-deepspeed";
    SECTION("zero3 with pipeline stages: DeepSpeed's pipeline engine refuses it") {
        p.strategy = DataParallel::zero3;
        p.pp = 2;
        CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100"), p),
                          Catch::Contains("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"));
    }
    SECTION("zero2 with pipeline stages: DeepSpeed's pipeline engine refuses it") {
        p.strategy = DataParallel::zero2;
        p.pp = 2;
        CHECK_THROWS_WITH(build(model_preset("gpt2-medium"), topo::cluster_preset("dgx-a100"), p),
                          Catch::Contains("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"));
    }

}

TEST_CASE("ZeRO-1 and ZeRO-2 + TP on DeepSpeed's engine: each tensor rank's gradients reduce-scattered over its replicas",
          "[strategies][zero]") {
    // Megatron-DeepSpeed's layers on DeepSpeed's ZeRO engine (stage_1_and_2.py), not Megatron's
    // distributed optimizer: GPT-2 medium, tp 2 on one DGX A100 (4 replicas), 2 micro-batches a
    // replica. ZeRO-2 reduce-scatters every micro-batch's gradients, ZeRO-1 accumulates them whole
    // and reduces them after the last; both all-gather the updated partitions once: (2 + 1) or
    // (1 + 1) × Ψ_tp × 2 bytes × 3/4. Model states: ZeRO-2 2Ψ_tp + 14Ψ_tp/4 (16-bit parameters
    // whole, gradients and Adam's 12 bytes partitioned), ZeRO-1 4Ψ_tp + 12Ψ_tp/4.
    const auto [strategy, framework] = GENERATE(std::pair{DataParallel::zero2, "deepspeed"},
                                                std::pair{DataParallel::zero1, "deepspeed"},
                                                std::pair{DataParallel::zero1, "megatron-deepspeed"});
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = strategy;
    p.tp = 2;
    p.framework = framework;
    p.global_batch = 8;
    p.fold = false;
    const test::DpRun r = test::dp_run(m, c, p);
    REQUIRE(r.built.layout.dp == 4);
    REQUIRE(r.built.layout.microbatches == 2);
    REQUIRE(sharded_with_tp(p, r.built.layout));
    const bool stage2 = strategy == DataParallel::zero2;
    const double psi_tp = static_cast<double>(strategies::detail::total_params(strategies::detail::replica_blocks(m, r.built.layout, p)));
    for (const auto& [t, d] : {std::pair{0, 0}, std::pair{1, 2}, std::pair{0, 1}, std::pair{1, 3}}) {
        test::RankCollectives rc = test::rank_collectives(r.built.graph, r.built.layout, t, d);
        INFO(to_string(strategy) << " on " << framework << ", tensor rank " << t << " of replica " << d);
        CHECK(rc.tp[CollectiveKind::all_reduce] == 2 * 100);   // 100 per micro-batch (FSDP + TP's count)
        CHECK(rc.dp_groups_one_tensor_rank);
        CHECK(rc.dp_bytes_sent == Approx((stage2 ? 3.0 : 2.0) * psi_tp * 2 * 3 / 4).epsilon(1e-9));
        const Bytes states = test::peak_of_labels(r.built.graph, r.timeline, r.built.layout.rank(t, d, 0), test::kModelStates);
        CHECK(states.as_double() == Approx(stage2 ? 2.0 * psi_tp + 14.0 * psi_tp / 4 : 4.0 * psi_tp + 12.0 * psi_tp / 4).epsilon(1e-6));
    }
    // Megatron's own zero1 stays its distributed optimizer (the model-parallel builder).
    p.strategy = DataParallel::zero1;
    p.framework = "megatron";
    CHECK_FALSE(sharded_with_tp(p, resolve(m, c, p)));
}

TEST_CASE("ZeRO with tensor parallelism: every tensor rank steps its own slice, one replica or many", "[strategies][zero]") {
    // add_optimizer_steps emitted the first dp ranks of a replica-major list, so with tp 2 and one
    // replica the second tensor rank had no optimizer step. Each rank steps its Ψ_t/dp parameters
    // with Megatron-DeepSpeed's 58-byte mixed-precision step (DeepSpeed's FP16 optimizer).
    const Model m = model_preset("gpt2-medium");
    for (const int devices : {2, 4})
        for (const DataParallel st : {DataParallel::zero1, DataParallel::zero2, DataParallel::zero3}) {
            Plan p;
            p.strategy = st;
            p.tp = 2;
            p.framework = "megatron-deepspeed";
            p.dtype = DType::fp16;
            const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(devices);
            const Built b = build(m, c, p);
            const int dp = devices / 2;
            const std::int64_t psi_t = strategies::detail::total_params(strategies::detail::replica_blocks(m, b.layout, p));
            INFO(to_string(st) << " on " << devices << " devices");
            for (int r = 0; r < devices; ++r) {
                std::int64_t bytes = 0;
                for (const Op& op : b.graph.ops())
                    if (op.rank == r && op.kind == OpKind::compute && op.phase == Phase::opt) bytes += op.bytes;
                CHECK(static_cast<double>(bytes) == Approx(58.0 * static_cast<double>(psi_t) / dp).epsilon(1e-3));
            }
        }
}
