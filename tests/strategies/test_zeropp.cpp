// ZeRO++'s weight side (Wang et al., "ZeRO++: Extremely Efficient Collective Communication for
// Giant Model Training", ICLR 2024; DeepSpeed 0.10+) against the paper's communication arithmetic
// and DeepSpeed's code: qwZ halves every parameter gather's bytes (int8 for 16-bit values, plus
// one fp32 scale per 8,000 elements); hpZ keeps a 1/N slice of every partitioned tensor on each
// rank so that backward gathers stay inside a node. ZeRO-3 moves 3M across nodes per step (forward
// gather, backward gather, gradient reduce-scatter, M the model's 16-bit bytes); qwZ makes the
// gathers 0.5M each, hpZ removes the backward one (§3 of the paper, before qgZ's gradients).
#include <catch2/catch.hpp>

#include <algorithm>

#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/zero.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

/// ZeRO-3 with every block fetched again for backward (the paper's 3M), and ZeRO++'s parts.
Plan zero3(bool qwz, int hpz, bool qgz = false) {
    Plan p;
    p.strategy = DataParallel::zero3;
    p.framework_overrides.max_reuse_distance = 0;
    p.zero_quantized_weights = qwz;
    p.zero_hpz_partition_size = hpz;
    p.zero_quantized_gradients = qgz;
    return p;
}

}  // namespace

TEST_CASE("qwZ: each parameter gather moves int8 values and fp32 scales, half the 16-bit bytes", "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);   // n = 16, bf16
    const double psi = static_cast<double>(m.parameters()), n = 16;
    Plan p = zero3(false, 1);
    p.fold = false;
    const Built plain = build(m, c, p);
    p.zero_quantized_weights = true;
    const Built quantized = build(m, c, p);
    // Plain: two gathers and a reduce-scatter of 2-byte values, 3 · 2Ψ · (n−1)/n. Quantized: the
    // gathers at 1 byte plus 4 bytes per 8,000 elements, the gradients as before.
    CHECK(test::collective_bytes_sent(plain.graph, 5) == Approx(3 * 2 * psi * (n - 1) / n).epsilon(0.01));
    CHECK(test::collective_bytes_sent(quantized.graph, 5) ==
          Approx((2 * psi * (1 + 4.0 / 8000) + 2 * psi) * (n - 1) / n).epsilon(0.01));
    // Every gather is two collectives (values, scales), quantized before and dequantized after.
    auto count = [](const OpGraph& g, auto pred) {
        return std::count_if(g.ops().begin(), g.ops().end(), [&](const Op& op) { return op.rank == 5 && pred(op); });
    };
    auto gathers = [&](const OpGraph& g) {
        return count(g, [&](const Op& op) {
            return op.kind == OpKind::collective && g.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_gather;
        });
    };
    auto kernels = [&](const OpGraph& g, KernelName name) {
        return count(g, [&](const Op& op) {
            if (op.kind != OpKind::compute || op.stream != Stream::comm) return false;
            const auto ks = op.ref >= 0 ? g.recipe(op.ref) : std::span<const Kernel>{};
            return std::any_of(ks.begin(), ks.end(), [&](const Kernel& k) { return k.name == name; });
        });
    };
    CHECK(gathers(quantized.graph) == 2 * gathers(plain.graph));
    CHECK(kernels(quantized.graph, KernelName::quantize) == gathers(plain.graph));
    CHECK(kernels(quantized.graph, KernelName::dequantize) == gathers(plain.graph));
    CHECK(kernels(plain.graph, KernelName::quantize) == 0);
}

TEST_CASE("ZeRO++ on 2 nodes: qwZ and hpZ cut the bytes that leave the nodes as the paper counts", "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    auto inter = [&](bool qwz, int hpz) { return test::simulated_inter_node_bytes(build(m, c, zero3(qwz, hpz)).graph, c); };
    const double plain = inter(false, 1), qwz = inter(true, 1), hpz = inter(false, 8), both = inter(true, 8);
    INFO("plain " << plain / 1e9 << " GB, qwZ " << qwz / 1e9 << ", hpZ " << hpz / 1e9 << ", both " << both / 1e9);
    // ZeRO-3 over 16 ranks in NCCL's ring: both node boundaries carry 15/16 of each of the three
    // 2Ψ-byte collectives (test_fsdp.cpp's arithmetic), 11.25Ψ. qwZ: gathers 0.5 each of 3 →
    // 2/3; hpZ: the backward gather inside the node → 2/3; both: 1.5 of 3 → 1/2.
    const double psi = static_cast<double>(m.parameters());
    CHECK(plain == Approx(11.25 * psi).epsilon(0.1));
    CHECK(qwz / plain == Approx(2.0 / 3).epsilon(0.05));
    CHECK(hpz / plain == Approx(2.0 / 3).epsilon(0.05));
    CHECK(both / plain == Approx(1.0 / 2).epsilon(0.05));
}

TEST_CASE("qgZ on 2 nodes: int4 all-to-alls inside the node, then across, carry an eighth of the reduce-scatter's bytes out",
          "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    auto inter = [&](bool qwz, int hpz, bool qgz) {
        return test::simulated_inter_node_bytes(build(m, c, zero3(qwz, hpz, qgz)).graph, c);
    };
    const double psi = static_cast<double>(m.parameters());
    const double plain = inter(false, 1, false), qgz = inter(false, 1, true), all = inter(true, 8, true);
    INFO("plain " << plain / 1e9 << " GB, qgZ " << qgz / 1e9 << ", all three " << all / 1e9);
    // The reduce-scatter's 3.75Ψ (ring over 16 ranks, 2Ψ bytes, both boundaries) becomes, for each
    // matrix of e elements, the across-node all-to-all of the node's int4 sums: 16 ranks each
    // sending half of e/16 half-bytes out, e/2 in all — Ψ/2 (scales and the 1-D tensors' own
    // reduce-scatters add under 1 %). All three: the int8 forward gather's 1.875Ψ and that, the
    // paper's "3M → 0.75M" (a quarter) — plus the flags of NCCL's LL and LL128 protocols, which
    // the smaller messages take (LL puts a flag beside every 4 bytes: sim/collectives.cpp), up to
    // 15 % here.
    CHECK(qgz == Approx(plain - 3.75 * psi + 0.5 * psi).epsilon(0.03));
    CHECK(all == Approx(1.875 * psi + 0.5 * psi).epsilon(0.15));
    CHECK(all / plain <= 0.25);
}

TEST_CASE("qgZ's groups: a node's ranks, then one rank of each node (one node reduce-scatters as before)",
          "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-small");
    Plan p = zero3(false, 1, true);
    const Built two = build(m, topo::cluster_preset("dgx-a100").with_nodes(2), p);
    CHECK(two.layout.qgz_node_ranks == 8);
    CHECK_FALSE(two.layout.folded);
    int inside = 0, across = 0, reduce_scatters = 0;
    for (const Op& op : two.graph.ops()) {
        if (op.kind != OpKind::collective || op.rank != 11) continue;
        const Collective& col = two.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = two.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (col.kind == CollectiveKind::reduce_scatter) ++reduce_scatters;
        if (col.kind != CollectiveKind::all_to_all) continue;
        if (members == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}) ++inside;       // local_1
        else if (members == std::vector<int>{3, 11}) ++across;                          // global_3
        else FAIL("an all-to-all over ranks outside rank 11's groups");
    }
    // Values and scales, for each partitioned matrix; the blocks' 1-D tensors reduce-scattered.
    std::size_t matrices = 0;
    for (const Block& b : m.blocks(Workload{})) matrices += partitioned_tensors(b, 100'000).size();
    CHECK(inside == static_cast<int>(2 * matrices));
    CHECK(across == inside);
    CHECK(reduce_scatters > 0);
    const Built one = build(m, topo::cluster_preset("dgx-a100"), p);   // world // device_count = 1
    CHECK(one.layout.qgz_node_ranks == 0);
    CHECK(one.graph.size() == build(m, topo::cluster_preset("dgx-a100"), zero3(false, 1)).graph.size());
}

TEST_CASE("hpZ: the step's first forward gathers over every rank, every later gather inside its group", "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p = zero3(false, 8);
    p.fold = false;
    p.micro_batch = 1;
    p.global_batch = 32;   // 2 micro-batches per rank
    const Built b = build(m, c, p);
    int first_forward = 0, later = 0;
    for (const Op& op : b.graph.ops()) {
        if (op.kind != OpKind::collective || op.rank != 9) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        if (col.kind != CollectiveKind::all_gather) continue;
        const std::vector<int>& members = b.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (op.microbatch == 0 && op.phase == Phase::fwd) {
            CHECK(members.size() == 16);
            ++first_forward;
        } else {
            // Rank 9's group: ranks 8 … 15, the second node (groups._create_zero_param_parallel_group).
            CHECK(members == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
            ++later;
        }
    }
    CHECK(first_forward > 0);
    CHECK(later == 3 * first_forward);   // micro-batch 0's backward, micro-batch 1's forward and backward
}

TEST_CASE("hpZ holds a 1/N slice of every partitioned tensor, copied once a step where it is first released",
          "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    std::int64_t slices = 0;
    int partitioned_blocks = 0;
    for (const Block& b : m.blocks(Workload{})) {
        std::int64_t e = 0;
        for (std::int64_t t : partitioned_tensors(b, 100'000)) e += t;
        slices += (e + 7) / 8;
        partitioned_blocks += e > 0;
    }
    for (const std::int64_t reuse : {std::int64_t{0}, std::int64_t{1'000'000'000}}) {
        INFO("stage3_max_reuse_distance " << reuse);
        Plan p = zero3(false, 1);
        p.framework_overrides.max_reuse_distance = reuse;
        p.global_batch = 32;   // 2 micro-batches per rank
        const test::DpRun without = test::dp_run(m, c, p);
        p.zero_hpz_partition_size = 8;
        const test::DpRun with = test::dp_run(m, c, p);
        // Model-state parameters: the primary partition, plus the slices once all are made.
        const Bytes before = test::peak_of_labels(without.built.graph, without.timeline, 0, {BufferLabel::parameters});
        const Bytes after = test::peak_of_labels(with.built.graph, with.timeline, 0, {BufferLabel::parameters});
        CHECK(after.count() - before.count() == slices * 2);
        // One copy per partitioned block, in micro-batch 0, after the pass that releases it: the
        // forward when it is fetched again for backward (reuse distance 0), else the backward.
        int copies = 0;
        for (const Op& op : with.built.graph.ops()) {
            if (op.rank != 0 || op.kind != OpKind::compute) continue;
            const auto ks = op.ref >= 0 ? with.built.graph.recipe(op.ref) : std::span<const Kernel>{};
            if (ks.empty() || ks.front().name != KernelName::secondary_partition) continue;
            ++copies;
            CHECK(op.microbatch == 0);
            CHECK(op.phase == (reuse == 0 ? Phase::fwd : Phase::bwd));
            CHECK(op.stream == Stream::compute);
        }
        CHECK(copies == partitioned_blocks);
    }
}

TEST_CASE("hpZ over whole nodes folds to its full expansion (smaller groups and qgZ are not folded)", "[strategies][zero][zeropp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    Plan p = zero3(true, 8);
    p.global_batch = 64;   // 2 micro-batches per rank
    const test::DpRun folded = test::dp_run(m, c, p);
    CHECK(folded.built.layout.folded);
    p.fold = false;
    const test::DpRun full = test::dp_run(m, c, p);
    CHECK(folded.summary.iteration == full.summary.iteration);
    CHECK(folded.summary.peak_memory == full.summary.peak_memory);
    p.fold = true;
    p.zero_hpz_partition_size = 4;
    CHECK_FALSE(build(m, c, p).layout.folded);
    p.zero_hpz_partition_size = 1;
    p.zero_quantized_gradients = true;
    CHECK_FALSE(build(m, c, p).layout.folded);
}

TEST_CASE("LoCo keeps qgZ's errors in int8 between steps: a byte and an eighth a matrix parameter, ten more bytes moved",
          "[strategies][zero][zeropp]") {
    // all_to_all_loco_quant_reduce on two DGX A100s (L = 8): each quantized matrix of e elements
    // keeps intra_ef_buf (e int8 values) and inter_ef_buf (e/8), each with fp32 scales. Each
    // reduction dequantizes both (reads e + e/8 bytes, writes 2e + 2e/8), loco_swizzle_quant
    // also reads and writes the 16-bit intra error (4e), the intra error is quantized back
    // (reads 2e, writes e), loco_quantized_reduction reads and writes the inter error (4e/8),
    // which is quantized back (reads 2e/8, writes e/8): 10e + 10e/8 bytes beyond qgZ's.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p = zero3(false, 1, true);
    const Built qgz = build(m, c, p);
    p.zero_loco = true;
    const Built loco = build(m, c, p);
    REQUIRE(loco.layout.qgz_node_ranks == 8);
    // The quantized matrices: the partitioned ones that split into 2 · 16 pieces.
    double e = 0;
    for (const Block& b : m.blocks(Workload{}))
        for (const std::int64_t t : partitioned_tensors(b, 100'000))
            if (t % 32 == 0) e += static_cast<double>(t);
    REQUIRE(e > 0.9 * static_cast<double>(m.parameters()));
    auto held = [](const Built& b, BufferLabel label) {
        std::int64_t n = 0;
        for (const Buffer& x : b.graph.buffers())
            if (x.rank == 0 && static_cast<BufferLabel>(x.label) == label) n += x.bytes;
        return static_cast<double>(n);
    };
    CHECK(held(qgz, BufferLabel::error_feedback) == 0);
    CHECK(held(loco, BufferLabel::error_feedback) == Approx(e * (1 + 1.0 / 8)).epsilon(0.01));   // and the scales
    auto moved = [](const Built& b) {
        double n = 0;
        for (const Op& op : b.graph.ops())
            if (op.rank == 0 && op.kind == OpKind::compute && op.phase == Phase::comm) n += static_cast<double>(op.bytes);
        return n;
    };
    CHECK(moved(loco) - moved(qgz) == Approx(e * (10 + 10.0 / 8)).epsilon(0.01));
    CHECK(static_cast<std::int64_t>(loco.graph.size()) <= loco.layout.estimated_ops);
    // Refused without qgZ, and before DeepSpeed 0.16.2.
    p.zero_quantized_gradients = false;
    CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }), Catch::Contains("give --zero-quantized-gradients"));
    p.zero_quantized_gradients = true;
    p.framework = "deepspeed@0.16";
    CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }), Catch::Contains("0.16.2 and later"));
}

TEST_CASE("ZeRO++ plans DeepSpeed cannot run say why", "[strategies][zero][zeropp][plan]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p = zero3(true, 1);
    SECTION("not ZeRO-3") {
        p.strategy = DataParallel::zero2;
        CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }), Catch::Contains("--strategy zero3"));
    }
    SECTION("a DeepSpeed before 0.10") {
        p.framework = "deepspeed@0.9";
        CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }), Catch::Contains("DeepSpeed 0.10 and later"));
    }
    SECTION("a secondary group that does not divide the ranks") {
        p.zero_hpz_partition_size = 3;
        CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }),
                   Catch::Contains("--zero-hpz-partition-size") && Catch::Contains("dividing the 16"));
    }
    SECTION("hpZ with tensor parallelism") {
        p.zero_hpz_partition_size = 4;
        p.tp = 2;
        p.framework = "megatron-deepspeed";
        CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }), Catch::Contains("mix tensor ranks"));
    }
    SECTION("qgZ with tensor parallelism") {
        p.zero_quantized_gradients = true;
        p.tp = 2;
        p.framework = "megatron-deepspeed";
        CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }),
                   Catch::Contains("--zero-quantized-gradients") && Catch::Contains("mix tensor ranks"));
    }
    SECTION("qgZ on a world that is not whole nodes") {
        p.zero_quantized_gradients = true;
        const topo::Cluster twelve = topo::cluster_preset("dgx-a100").with_nodes(2).first_devices(12);
        // (12 of 2 × 8: DeepSpeed asserts a world of whole nodes; the second node's group is 4.)
        CHECK_THAT(test::bad_input_message([&] { build(m, twelve, p); }),
                   Catch::Contains("--zero-quantized-gradients") && Catch::Contains("8 and 4 devices"));
    }
    SECTION("quantized on CPU boards, which DeepSpeed's CUDA quantizers do not run on") {
        CHECK_THAT(test::bad_input_message([&] { build(m, topo::cluster_preset("pi5-1gbe").with_nodes(4), p); }),
                   Catch::Contains("--zero-quantized-weights") && Catch::Contains("CUDA kernels"));
        Plan hpz_only = zero3(false, 2);
        CHECK_NOTHROW(build(m, topo::cluster_preset("pi5-1gbe").with_nodes(4), hpz_only));
    }
    SECTION("hpZ with offloaded parameters") {
        p.zero_hpz_partition_size = 8;
        p.offload = Offload::cpu;
        CHECK_THAT(test::bad_input_message([&] { build(m, c, p); }), Catch::Contains("offloaded parameters"));
    }
}
