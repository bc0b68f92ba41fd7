// MiCS (Zhang et al., "MiCS: Near-linear Scaling for Training Gigantic Model on Public Cloud",
// VLDB 2023; DeepSpeed 0.9.2+, runtime/zero/mics.py) against its arithmetic and DeepSpeed's
// code: ZeRO-3 whose model states are sharded over groups of s consecutive ranks
// (mics_utils.py _generate_mics_config) and replicated across the groups. Every parameter gather
// and gradient reduce-scatter stays inside a group; at the accumulation boundary each rank's
// gradient partition is all-reduced with the same partition of the other groups
// (allreduce_mics_shard_grads over param_repli_group). A device holds 16Ψ/s bytes of model
// states instead of ZeRO-3's 16Ψ/N.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/zero.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

Plan mics(int s) {
    Plan p;
    p.strategy = DataParallel::zero3;
    p.zero_mics_shard_size = s;
    return p;
}

/// Bytes of rank 0's model-state buffers (parameters, gradients, optimizer state) on the device.
std::int64_t model_states(const OpGraph& g) {
    std::int64_t n = 0;
    for (const Buffer& b : g.buffers()) {
        const auto label = static_cast<BufferLabel>(b.label);
        if (b.rank == 0 && b.tier == Tier::device &&
            (label == BufferLabel::parameters || label == BufferLabel::gradients || label == BufferLabel::optimizer_state))
            n += b.bytes;
    }
    return n;
}

}  // namespace

TEST_CASE("MiCS over a node on 2 nodes: only the boundary all-reduce leaves the node", "[strategies][zero][mics]") {
    // GPT-2 medium on two DGX A100 (16 ranks), one micro-batch. ZeRO-3's three 2Ψ-byte
    // collectives over 16 ranks cross both node boundaries of NCCL's ring at 15/16 each: 11.25Ψ
    // (test_zeropp.cpp). MiCS over a node (s = 8) gathers and reduce-scatters inside it; each
    // rank's partition (2Ψ/8 bytes) is all-reduced with its one peer on the other node, each
    // sending the other half of it twice (reduce-scatter, all-gather), 2Ψ/8 across per pair and 8
    // pairs: 2Ψ, both directions 4Ψ.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan plain;
    plain.strategy = DataParallel::zero3;
    plain.framework_overrides.max_reuse_distance = 0;   // every block gathered again for backward
    Plan p = mics(8);
    p.framework_overrides.max_reuse_distance = 0;
    const double psi = static_cast<double>(m.parameters());
    const double zero3 = test::simulated_inter_node_bytes(build(m, c, plain).graph, c);
    const double over_node = test::simulated_inter_node_bytes(build(m, c, p).graph, c);
    INFO("ZeRO-3 " << zero3 / 1e9 << " GB, MiCS " << over_node / 1e9 << " GB");
    CHECK(zero3 == Approx(11.25 * psi).epsilon(0.1));
    CHECK(over_node == Approx(4.0 * psi).epsilon(0.1));
}

TEST_CASE("MiCS's groups: gathers and reduce-scatters in the shard group, the boundary all-reduce across groups",
          "[strategies][zero][mics]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p = mics(4);
    p.fold = false;
    p.micro_batch = 1;
    p.global_batch = 32;   // 2 micro-batches per rank
    const Built b = build(m, c, p);
    REQUIRE_FALSE(b.layout.folded);
    std::map<CollectiveKind, int> count;
    std::map<CollectiveKind, std::int64_t> bytes;
    for (const Op& op : b.graph.ops()) {
        if (op.kind != OpKind::collective || op.rank != 9) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& members = b.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        ++count[col.kind];
        bytes[col.kind] += col.bytes;
        // The gradient collectives name their bucket (the trace's "bucket k").
        if (col.kind != CollectiveKind::all_gather) CHECK(op.index >= 0);
        if (col.kind == CollectiveKind::all_reduce) {
            // Position 1 of every shard group of 4: ranks 1, 5, 9, 13; only after the last
            // micro-batch's backward.
            CHECK(members == std::vector<int>{1, 5, 9, 13});
            CHECK(op.microbatch == 1);
        } else {
            // Rank 9's shard group: ranks 8 … 11.
            CHECK(members == std::vector<int>{8, 9, 10, 11});
        }
    }
    // One reduce-scatter per bucket and micro-batch, one all-reduce per bucket; the all-reduce
    // carries the rank's quarter of each bucket: a quarter of a micro-batch's reduce-scatters.
    REQUIRE(count[CollectiveKind::all_reduce] > 0);
    CHECK(count[CollectiveKind::reduce_scatter] == 2 * count[CollectiveKind::all_reduce]);
    CHECK(4 * bytes[CollectiveKind::all_reduce] == Approx(bytes[CollectiveKind::reduce_scatter] / 2.0).epsilon(1e-6));
    CHECK(count[CollectiveKind::all_gather] > 0);
}

TEST_CASE("MiCS keeps 16Ψ/s model-state bytes a device, ZeRO-3's over s ranks", "[strategies][zero][mics]") {
    // Mixed-precision Adam's 16 bytes a parameter over the shard group, not every rank: on 16
    // ranks, s = 8 holds twice ZeRO-3's, s = 16 exactly ZeRO-3's (one group).
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan plain;
    plain.strategy = DataParallel::zero3;
    const double psi = static_cast<double>(m.parameters());
    const double zero3 = static_cast<double>(model_states(build(m, c, plain).graph));
    const double s8 = static_cast<double>(model_states(build(m, c, mics(8)).graph));
    CHECK(zero3 == Approx(16 * psi / 16).epsilon(0.01));
    CHECK(s8 == Approx(16 * psi / 8).epsilon(0.01));
    // One group of every rank is plain ZeRO-3, op for op.
    const test::DpRun one = test::dp_run(m, c, mics(16));
    const test::DpRun z3 = test::dp_run(m, c, plain);
    CHECK(one.built.graph.size() == z3.built.graph.size());
    CHECK(one.summary.iteration == z3.summary.iteration);
}

TEST_CASE("MiCS simulates every shard group (one group folds as ZeRO-3 does), the op estimate bounding its graph",
          "[strategies][zero][mics]") {
    // The boundary all-reduces join one rank of every group: folded to the first node's replicas,
    // the other positions' all-reduces would leave the nodes' links idle.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    Plan p = mics(8);
    p.global_batch = 64;   // 2 micro-batches per rank
    const Built b = build(m, c, p);
    CHECK_FALSE(b.layout.folded);
    CHECK(static_cast<std::int64_t>(b.graph.size()) <= b.layout.estimated_ops);
    p.zero_mics_shard_size = 32;
    CHECK(build(m, c, p).layout.folded);
}

TEST_CASE("MiCS's hierarchical gather: across nodes among one local index, then inside the node", "[strategies][zero][mics]") {
    // One shard group of all 16 ranks of two DGX A100s (no replicas, no all-reduce). A flat
    // gather of 2Ψ bytes crosses both node boundaries of the ring at 15/16: 3.75Ψ. The
    // hierarchical one sends each rank's 1/16 partition to its one peer on the other node: 2Ψ
    // across. Every block gathered again for backward: 2 × 3.75Ψ + the reduce-scatter's 3.75Ψ =
    // 11.25Ψ flat, 2 × 2Ψ + 3.75Ψ = 7.75Ψ hierarchical.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    Plan p = mics(16);
    p.zero_mics_hierarchical = true;
    p.framework_overrides.max_reuse_distance = 0;
    const double psi = static_cast<double>(m.parameters());
    const Built b = build(m, c, p);
    CHECK_FALSE(b.layout.folded);   // its across-node groups leave the first node's ranks
    CHECK(b.layout.mics_node_ranks == 8);
    CHECK(test::simulated_inter_node_bytes(b.graph, c) == Approx(7.75 * psi).epsilon(0.1));
    // Rank 9 (the second node's local rank 1): across nodes with rank 1, then with ranks 8 … 15.
    std::map<std::vector<int>, int> groups;
    for (const Op& op : b.graph.ops()) {
        if (op.kind != OpKind::collective || op.rank != 9) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        if (col.kind == CollectiveKind::all_gather) ++groups[b.graph.communicators()[static_cast<std::size_t>(col.communicator)]];
    }
    REQUIRE(groups.size() == 2);
    CHECK(groups[std::vector<int>{1, 9}] == groups[std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}]);
    CHECK(groups[std::vector<int>{1, 9}] > 0);
    // The op estimate still bounds the graph.
    CHECK(static_cast<std::int64_t>(b.graph.size()) <= b.layout.estimated_ops);
}

TEST_CASE("MiCS plans DeepSpeed cannot run say why", "[strategies][zero][mics][plan]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    auto refused = [&](Plan p) { return test::bad_input_message([&] { resolve(m, c, p); }); };
    Plan p = mics(8);
    p.strategy = DataParallel::zero2;
    CHECK_THAT(refused(p), Catch::Contains("--strategy zero3"));
    p = mics(8);
    p.framework = "deepspeed@0.9";
    CHECK_THAT(refused(p), Catch::Contains("0.9.2 and later"));
    p.framework = "deepspeed@0.9.2";
    CHECK_NOTHROW(resolve(m, c, p));
    p = mics(6);
    CHECK_THAT(refused(p), Catch::Contains("dividing the 16 data-parallel ranks") && Catch::Contains("6"));
    p = mics(4);
    p.tp = 2;
    CHECK_THAT(refused(p), Catch::Contains("mix tensor ranks"));
    p = mics(8);
    p.offload_optimizer = Offload::cpu;
    CHECK_THAT(refused(p), Catch::Contains("Local sharding has no support for CPU offloading"));
    p = mics(8);
    p.zero_hpz_partition_size = 4;
    CHECK_THAT(refused(p), Catch::Contains("ZeRO++"));
    p = mics(8);
    p.optimizer = Optimizer::lamb;
    CHECK_THAT(refused(p), Catch::Contains("lamb"));
    // The hierarchical gather: a group over several nodes, and MiCS itself.
    p = mics(8);
    p.zero_mics_hierarchical = true;
    CHECK_THAT(refused(p), Catch::Contains("sharding spans on single node"));
    p.zero_mics_shard_size = 0;
    CHECK_THAT(refused(p), Catch::Contains("give --mics-shard-size too"));
}
