// PyTorch FSDP: sharding modes' communication, hybrid sharding's inter-node traffic measured from
// the simulated NIC links, and the plans it refuses.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "dp_fixtures.hpp"

using namespace smol;
using namespace smol::strategies;

TEST_CASE("FSDP sharding modes move 3Ψ, 2Ψ, or DDP's 2Ψ per device", "[strategies][fsdp]") {
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
    CHECK(test::collective_bytes_sent(b.graph, 3) == Approx(factor * psi * (n - 1) / n * 2).epsilon(1e-9));
}

TEST_CASE("FSDP hybrid on 2 nodes × 8 GPUs sends less inter-node traffic than full sharding", "[strategies][fsdp]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    const topo::Topology topo(c);
    sim::SimOptions opt;
    opt.record_links = true;
    opt.record_memory = false;
    auto inter = [&](FsdpSharding mode) {
        Plan p;
        p.strategy = DataParallel::fsdp;
        p.fsdp_sharding = mode;
        Built b = build(m, c, p);
        const Timeline tl = sim::simulate(b.graph, c, topo, opt);
        return test::inter_node_bytes(topo, tl);
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
