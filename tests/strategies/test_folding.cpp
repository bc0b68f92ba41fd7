// Folding identical data-parallel replicas: the shortcut must give what the full expansion gives.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/error.hpp"
#include "strategies/plan.hpp"
#include "tools/simulation.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

tools::Simulation run(const std::string& model, const topo::Cluster& c, Plan p, bool fold) {
    p.fold = fold;
    return tools::simulate_plan(model_preset(model), c, p);
}

/// Every rank of the folded simulation as the full expansion has it: peak memory exactly, busy
/// time within 1e-6, communication within `comm_eps` (relative).
void same_ranks(const tools::Simulation& folded, const tools::Simulation& full, double comm_eps) {
    REQUIRE(folded.summary.per_device.size() == full.summary.per_device.size());
    for (std::size_t r = 0; r < full.summary.per_device.size(); ++r) {
        const auto& a = folded.summary.per_device[r];
        const auto& b = full.summary.per_device[r];
        INFO("rank " << r);
        CHECK(a.peak_memory == b.peak_memory);
        CHECK(a.busy.to_seconds() == Approx(b.busy.to_seconds()).epsilon(1e-6));
        CHECK(a.comm.to_seconds() == Approx(b.comm.to_seconds()).epsilon(comm_eps));
        CHECK(a.exposed_comm.to_seconds() == Approx(b.exposed_comm.to_seconds()).epsilon(comm_eps));
    }
}

}  // namespace

TEST_CASE("a folded 3D plan simulates to the same step as its full expansion", "[strategies][folding]") {
    const auto [nodes, tp, pp, dp, strategy, schedule] = GENERATE(
        std::make_tuple(4, 8, 2, 2, DataParallel::ddp, Schedule::one_f_one_b),
        std::make_tuple(4, 4, 2, 4, DataParallel::ddp, Schedule::one_f_one_b),      // two replicas per node
        std::make_tuple(8, 2, 4, 8, DataParallel::zero1, Schedule::interleaved),   // four per node
        std::make_tuple(8, 8, 2, 4, DataParallel::zero1, Schedule::one_f_one_b),
        std::make_tuple(4, 8, 4, 1, DataParallel::ddp, Schedule::gpipe),  // dp 1: nothing to fold
        std::make_tuple(8, 8, 2, 4, DataParallel::ddp, Schedule::interleaved),
        std::make_tuple(8, 2, 4, 8, DataParallel::fsdp, Schedule::interleaved),    // FSDP under pipeline stages
        std::make_tuple(4, 4, 2, 4, DataParallel::fsdp, Schedule::one_f_one_b));
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(nodes);
    Plan p;
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    p.strategy = strategy;
    p.schedule = schedule;
    if (schedule == Schedule::interleaved) p.virtual_stages = 2;
    p.global_batch = 4 * dp;
    const tools::Simulation folded = run("gpt2-medium", c, p, true), full = run("gpt2-medium", c, p, false);
    INFO("tp " << tp << " pp " << pp << " dp " << dp << " " << to_string(strategy) << " " << to_string(schedule));
    CHECK(folded.built.graph.folded() == (dp > 1));
    CHECK_FALSE(full.built.graph.folded());
    // The replicas a node holds (8 / tp) are kept, the others mirror them.
    const int kept = std::max(1, 8 / tp);
    if (dp > 1) CHECK(folded.built.graph.size() * static_cast<std::size_t>(dp / kept) < full.built.graph.size() + 1000);
    CHECK(folded.summary.iteration.to_seconds() == Approx(full.summary.iteration.to_seconds()).epsilon(1e-6));
    CHECK(folded.summary.bubble_fraction == Approx(full.summary.bubble_fraction).epsilon(1e-4));
    same_ranks(folded, full, 1e-4);
}

TEST_CASE("across the pods of an InfiniBand fat tree a folded interleaved plan is its full expansion",
          "[strategies][folding]") {
    // Two nodes per leaf: the stages of tp 8 · pp 4 sit in four pods, and every replica's sends
    // to the next stage cross a spine at the same moment. Routed by destination (d-mod-k), each
    // replica's transfer has a spine of its own, as its representative's does.
    topo::Cluster c = topo::cluster_preset("dgx-h100").with_nodes(8);
    c.network.nodes_per_leaf = 2;
    REQUIRE(c.network.routing == topo::Routing::destination);
    Plan p;
    p.tp = 8;
    p.pp = 4;
    p.schedule = Schedule::interleaved;
    p.virtual_stages = 2;
    p.strategy = DataParallel::zero1;
    p.sequence_parallel = true;
    p.global_batch = 16;
    const tools::Simulation folded = run("gpt2-medium", c, p, true), full = run("gpt2-medium", c, p, false);
    REQUIRE(folded.built.graph.folded());
    CHECK(folded.summary.iteration.to_seconds() == Approx(full.summary.iteration.to_seconds()).epsilon(1e-9));
    same_ranks(folded, full, 1e-9);
}

TEST_CASE("folded data-parallel replicas simulate to the same step as the full expansion", "[strategies][folding]") {
    // Every data-parallel strategy that folds, on a GPU cluster with eight replicas per node and
    // on a Pi cluster of one replica per board; gradient accumulation (2 micro-batches) included.
    const auto [cluster, nodes, strategy, sharding] = GENERATE(
        std::make_tuple("dgx-a100", 2, DataParallel::ddp, FsdpSharding::full),
        std::make_tuple("dgx-a100", 2, DataParallel::ring, FsdpSharding::full),
        std::make_tuple("dgx-a100", 2, DataParallel::zero1, FsdpSharding::full),
        std::make_tuple("dgx-a100", 2, DataParallel::zero2, FsdpSharding::full),
        std::make_tuple("dgx-a100", 2, DataParallel::zero3, FsdpSharding::full),
        std::make_tuple("dgx-a100", 2, DataParallel::fsdp, FsdpSharding::full),
        std::make_tuple("dgx-a100", 2, DataParallel::fsdp, FsdpSharding::grad_op),
        std::make_tuple("dgx-a100", 2, DataParallel::fsdp, FsdpSharding::none),
        std::make_tuple("pi5-1gbe", 6, DataParallel::ddp, FsdpSharding::full),
        std::make_tuple("pi5-1gbe", 6, DataParallel::zero3, FsdpSharding::full));
    const topo::Cluster c = topo::cluster_preset(cluster).with_nodes(nodes);
    Plan p;
    p.strategy = strategy;
    p.fsdp_sharding = sharding;
    const int dp = c.num_devices();
    p.global_batch = 2 * dp;
    const std::string model = c.device_kind(0).is_cpu ? "resnet50" : "gpt2-medium";
    const tools::Simulation folded = run(model, c, p, true), full = run(model, c, p, false);
    INFO(cluster << " x " << nodes << " " << to_string(strategy) << " " << to_string(sharding));
    CHECK(folded.built.graph.folded());
    CHECK_FALSE(full.built.graph.folded());
    CHECK(folded.built.graph.size() * static_cast<std::size_t>(dp) < full.built.graph.size() + 100 * static_cast<std::size_t>(dp));
    CHECK(folded.summary.iteration.to_seconds() == Approx(full.summary.iteration.to_seconds()).epsilon(1e-6));
    same_ranks(folded, full, 1e-6);
}

TEST_CASE("with the analytic network, replicas sharing nodes and tensor ranks fold exactly", "[strategies][folding]") {
    // The analytic network shares no links, so ranks running one program are mirrors wherever
    // they sit: the folded graph (one rank per stage) must give what every rank gives.
    const auto [tp, pp, strategy, schedule, sp, recompute] = GENERATE(
        std::make_tuple(2, 2, DataParallel::ddp, Schedule::one_f_one_b, false, Recompute::none),
        std::make_tuple(4, 2, DataParallel::zero1, Schedule::one_f_one_b, true, Recompute::selective),
        std::make_tuple(8, 2, DataParallel::ddp, Schedule::interleaved, false, Recompute::full),
        std::make_tuple(2, 4, DataParallel::zero1, Schedule::zb_h1, false, Recompute::none),
        std::make_tuple(4, 1, DataParallel::ddp, Schedule::one_f_one_b, true, Recompute::none),   // no pipeline
        std::make_tuple(8, 4, DataParallel::ddp, Schedule::gpipe, false, Recompute::none));     // dp 1
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    Plan p;
    p.tp = tp;
    p.pp = pp;
    p.strategy = strategy;
    p.schedule = schedule;
    p.sequence_parallel = sp;
    p.recompute = recompute;
    if (schedule == Schedule::interleaved) p.virtual_stages = 2;
    const int dp = c.num_devices() / (tp * pp);
    p.global_batch = 4 * dp;
    sim::SimOptions analytic;
    analytic.network = sim::NetworkMode::analytic;
    const Model m = model_preset("gpt2-medium");   // tied embeddings: an all-reduce between the end stages
    Plan unfolded = p;
    unfolded.fold = false;
    const tools::Simulation folded = tools::simulate_plan(m, c, p, analytic), full = tools::simulate_plan(m, c, unfolded, analytic);
    INFO("tp " << tp << " pp " << pp << " dp " << dp << " " << to_string(strategy) << " " << to_string(schedule));
    CHECK(folded.built.layout.folded_tp);
    CHECK_FALSE(full.built.graph.folded());
    // One materialized rank per stage.
    for (int r = 0; r < c.num_devices(); ++r)
        CHECK(folded.built.graph.materialized(r) == (r % (tp * dp) == 0));
    CHECK(folded.built.graph.size() * static_cast<std::size_t>(dp * tp) < full.built.graph.size() + 2000);
    CHECK(folded.summary.iteration.to_seconds() == Approx(full.summary.iteration.to_seconds()).epsilon(1e-6));
    CHECK(folded.summary.bubble_fraction == Approx(full.summary.bubble_fraction).epsilon(1e-4));
    same_ranks(folded, full, 1e-6);
    // The flow network shares links: there a node holding several replicas keeps them all (its
    // first node's per stage), and only the tensor ranks of the analytic fold are gone.
    if (tp < 8 && dp > 8 / tp) {
        const tools::Simulation flow = tools::simulate_plan(m, c, p);
        CHECK(flow.built.graph.folded());
        CHECK_FALSE(flow.built.layout.folded_tp);
        CHECK(flow.built.layout.fold_width == 8 / tp);
    }
}

TEST_CASE("FSDP, ZeRO-2 and ZeRO-3 + TP fold a node's replicas to the same step as the full expansion", "[strategies][folding]") {
    // 4 DGX A100 nodes: tp 2 keeps a node's 4 replicas (dp 16), tp 4 with sp its 2 (dp 8, full
    // recompute), tp 8 its one (dp 4).
    const auto [tp, sp, recompute] = GENERATE(std::make_tuple(2, false, Recompute::none), std::make_tuple(4, true, Recompute::full),
                                              std::make_tuple(8, false, Recompute::selective));
    const DataParallel strategy = GENERATE(DataParallel::fsdp, DataParallel::zero2, DataParallel::zero3);
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    Plan p;
    p.strategy = strategy;
    p.tp = tp;
    p.sequence_parallel = sp;
    p.recompute = recompute;
    p.global_batch = 2 * (32 / tp);
    const tools::Simulation folded = run("gpt2-medium", c, p, true), full = run("gpt2-medium", c, p, false);
    INFO("tp " << tp << " " << to_string(strategy));
    REQUIRE(folded.built.layout.folded);
    CHECK(folded.built.layout.fold_width == 8 / tp);
    CHECK_FALSE(full.built.graph.folded());
    // One node of four emitted.
    CHECK(folded.built.graph.size() * 4 < full.built.graph.size() + 1000);
    CHECK(folded.summary.iteration == full.summary.iteration);
    same_ranks(folded, full, 1e-9);
}

TEST_CASE("folding applies only where it is exact", "[strategies][folding]") {
    const Model m = model_preset("gpt2-medium");
    Plan p;
    p.pp = 2;
    p.global_batch = 16;
    SECTION("tensor groups smaller than a node: a node's two replicas are kept, other nodes mirror them") {
        p.tp = 4;
        const Layout l = resolve(m, topo::cluster_preset("dgx-a100").with_nodes(4), p);   // dp 4
        CHECK(l.folded);
        CHECK(l.fold_width == 2);
        // dp 2: the two replicas of each stage are one node's, nothing mirrors them.
        CHECK_FALSE(resolve(m, topo::cluster_preset("dgx-a100").with_nodes(2), p).folded);
    }
    SECTION("tensor groups smaller than a node, and a node holding ranks of two stages: not folded") {
        p.tp = 4;
        p.global_batch = 12;   // 3 nodes, tp 4 · pp 2 · dp 3: stage 1 starts mid-node
        CHECK_FALSE(resolve(m, topo::cluster_preset("dgx-a100").with_nodes(3), p).folded);
    }
    SECTION("pure data parallelism is folded, even with a node's eight replicas") {
        p.pp = 1;
        CHECK(resolve(m, topo::cluster_preset("dgx-a100").with_nodes(2), p).folded);
    }
    SECTION("parameter servers talk point to point: not folded") {
        p.pp = 1;
        p.strategy = DataParallel::ps;
        p.global_batch = 6;   // dp = 4 boards − 1 server
        CHECK_FALSE(resolve(m, topo::cluster_preset("pi5-1gbe"), p).folded);
    }
    SECTION("hybrid FSDP: replica 0 is not in the other shard groups") {
        p.pp = 1;
        p.strategy = DataParallel::fsdp;
        p.fsdp_sharding = FsdpSharding::hybrid;
        CHECK_FALSE(resolve(m, topo::cluster_preset("dgx-a100").with_nodes(2), p).folded);
    }
    SECTION("offloaded, only whole nodes fold: a node cut short by --devices does not") {
        p.pp = 1;
        p.strategy = DataParallel::zero2;
        p.offload_optimizer = Offload::cpu;
        p.global_batch = 0;
        const topo::Cluster two = topo::cluster_preset("dgx-a100").with_nodes(2);
        const Layout whole = resolve(m, two, p);
        CHECK(whole.folded);
        CHECK(whole.fold_width == 8);
        CHECK_FALSE(resolve(m, two.first_devices(12), p).folded);
        CHECK_FALSE(resolve(m, two.first_devices(8), p).folded);   // one node: nothing to fold
    }
    SECTION("FSDP + TP: whole replicas per node fold, hybrid sharding does not") {
        p.pp = 1;
        p.tp = 2;
        p.strategy = DataParallel::fsdp;
        const Layout l = resolve(m, topo::cluster_preset("dgx-a100").with_nodes(2), p);   // dp 8
        CHECK(l.folded);
        CHECK(l.fold_width == 4);
        CHECK_FALSE(resolve(m, topo::cluster_preset("dgx-a100"), p).folded);   // one node: nothing mirrors it
        p.fsdp_sharding = FsdpSharding::hybrid;
        CHECK_FALSE(resolve(m, topo::cluster_preset("dgx-a100").with_nodes(2), p).folded);
    }
    SECTION("tensor groups of a whole node") {
        p.tp = 8;
        CHECK(resolve(m, topo::cluster_preset("dgx-a100").with_nodes(4), p).folded);
    }
}

TEST_CASE("a folded graph keeps mirrors out of its ops", "[core][op_graph][folding]") {
    OpGraph g(4);
    g.set_representatives({0, 1, 0, 1});  // ranks 2 and 3 mirror 0 and 1
    CHECK(g.mirrors(0).size() == 1);
    CHECK(g.mirrors(0)[0] == 2);
    SECTION("an op on a mirror") {
        g.add_compute(2, Phase::fwd, 0, 0, Flops(1), Bytes(0), KernelClass::gemm, DType::bf16);
        CHECK_THROWS_WITH(g.finalize(), Catch::Contains("is a mirror"));
    }
    SECTION("a mirror whose representative is not in the communicator") {
        const auto c = g.declare_collective(CollectiveKind::all_reduce, {1, 2}, Bytes(8));
        g.add_collective_op(c, 1, Stream::comm, Phase::comm);
        CHECK_THROWS_WITH(g.finalize(), Catch::Contains("mirrors rank 0, which is not in it"));
    }
    SECTION("a data-parallel all-reduce over a rank and its mirror") {
        const auto c = g.declare_collective(CollectiveKind::all_reduce, {0, 2}, Bytes(8));
        g.add_collective_op(c, 0, Stream::comm, Phase::comm);
        CHECK_NOTHROW(g.finalize());
    }
}

TEST_CASE("offloaded replicas fold node by node to the same step as the full expansion", "[strategies][folding]") {
    // Offload shares a node's PCIe, DRAM, cores and drives among its replicas: the first node's
    // eight are kept, every other node mirrors them, and the step, the busy and communication time
    // and the device, host and NVMe peaks of every rank are those of the full expansion.
    struct Case {
        const char* name;
        DataParallel strategy;
        Offload all, params, optimizer, activations;   // --offload, --offload-params/-optimizer/-activations
        bool delayed;
    };
    const Case k = GENERATE(Case{"zero1 optimizer cpu", DataParallel::zero1, Offload::none, Offload::none, Offload::cpu, Offload::none, false},
                            Case{"zero2 optimizer cpu", DataParallel::zero2, Offload::none, Offload::none, Offload::cpu, Offload::none, false},
                            Case{"zero2 delayed update", DataParallel::zero2, Offload::none, Offload::none, Offload::cpu, Offload::none, true},
                            Case{"zero3 optimizer cpu", DataParallel::zero3, Offload::none, Offload::none, Offload::cpu, Offload::none, false},
                            Case{"zero3 params cpu", DataParallel::zero3, Offload::none, Offload::cpu, Offload::cpu, Offload::none, false},
                            Case{"zero3 optimizer nvme", DataParallel::zero3, Offload::none, Offload::none, Offload::nvme, Offload::none, false},
                            Case{"zero3 activations cpu", DataParallel::zero3, Offload::none, Offload::none, Offload::none, Offload::cpu, false},
                            Case{"fsdp offload cpu", DataParallel::fsdp, Offload::cpu, Offload::none, Offload::none, Offload::none, false});
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(3);
    Plan p;
    p.strategy = k.strategy;
    p.offload = k.all;
    p.offload_params = k.params;
    p.offload_optimizer = k.optimizer;
    p.offload_activations = k.activations;
    p.delayed_update = k.delayed;
    if (k.activations != Offload::none) p.recompute = Recompute::full;
    const int dp = c.num_devices();
    p.global_batch = 2 * dp;   // two micro-batches per replica
    const tools::Simulation folded = run("gpt2-medium", c, p, true), full = run("gpt2-medium", c, p, false);
    INFO(k.name);
    REQUIRE(folded.built.graph.folded());
    CHECK(folded.built.layout.fold_width == 8);
    for (int r = 0; r < dp; ++r) CHECK(folded.built.graph.materialized(r) == (r < 8));
    CHECK(folded.built.graph.size() * 3 < full.built.graph.size() + 1000);
    CHECK(folded.summary.iteration.to_seconds() == Approx(full.summary.iteration.to_seconds()).epsilon(1e-6));
    same_ranks(folded, full, 1e-6);
    for (int r = 0; r < dp; ++r) {
        INFO("rank " << r);
        for (const Tier t : {Tier::host, Tier::nvme})
            CHECK(folded.timeline.peak[static_cast<std::size_t>(r)][static_cast<int>(t)] ==
                  full.timeline.peak[static_cast<std::size_t>(r)][static_cast<int>(t)]);
    }
}
