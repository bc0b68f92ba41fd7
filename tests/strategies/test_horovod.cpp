// Horovod ring all-reduce: tensor fusion into ≤ fusion-size buffers and the background cycle.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.hpp"
#include "dp_fixtures.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {
std::vector<OpId> allreduces(const OpGraph& g, int rank) {
    std::vector<OpId> out;
    for (OpId id = 0; id < g.size(); ++id)
        if (g.op(id).kind == OpKind::collective && g.op(id).rank == rank) out.push_back(id);
    return out;
}
}  // namespace

TEST_CASE("Horovod fuses gradients into buffers of at most the fusion size", "[strategies][horovod]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const double mb = GENERATE(16.0, 64.0, 256.0);
    Plan p;
    p.strategy = DataParallel::ring;
    p.fusion_mb = mb;
    const Built b = build(m, c, p);
    const auto ops = allreduces(b.graph, 0);
    const double grad_bytes = static_cast<double>(m.parameters()) * 2;
    INFO(mb << " MiB: " << ops.size() << " all-reduces");
    CHECK(ops.size() == static_cast<std::size_t>(std::ceil(grad_bytes / (mb * 1048576.0))));
    for (OpId id : ops) CHECK(b.graph.op(id).bytes <= static_cast<std::int64_t>(mb * 1048576.0));
}

TEST_CASE("Horovod launches fused all-reduces on its cycle ticks", "[strategies][horovod]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto run = [&](double cycle_ms) {
        Plan p;
        p.strategy = DataParallel::ring;
        p.fusion_mb = 16;
        p.cycle_ms = cycle_ms;
        return test::dp_run(m, c, p);
    };
    const Time cycle = Time::ms(20);
    const test::DpRun slow = run(20), fast = run(0);
    const auto ops = allreduces(slow.built.graph, 0);
    REQUIRE(ops.size() > 2);
    int back_to_back = 0;
    for (std::size_t k = 0; k < ops.size(); ++k) {
        const Time start = slow.timeline.start[ops[k]];
        // Each all-reduce starts on a tick of the 20 ms cycle, or right behind the previous
        // buffer launched in the same round.
        const bool on_tick = start.count_ps() % cycle.count_ps() == 0;
        const bool behind = k > 0 && start == slow.timeline.end[ops[k - 1]];
        CHECK((on_tick || behind));
        back_to_back += behind && !on_tick;
    }
    // Backward on a DGX takes a few ms: several buffers fill within one cycle and share its round.
    CHECK(back_to_back > 0);
    // Every launch is at most one cycle late, so the step grows by less than one cycle.
    CHECK(slow.summary.iteration > fast.summary.iteration);
    CHECK(slow.summary.iteration <= fast.summary.iteration + cycle);
}

TEST_CASE("impossible Horovod plans say why", "[strategies][horovod][plan]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::ring;
    SECTION("a zero fusion buffer") {
        p.fusion_mb = 0;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("--fusion-mb must be positive"));
    }
    SECTION("a negative cycle") {
        p.cycle_ms = -1;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("--cycle-ms must be at least 0"));
    }
}
