// Parameter servers: one dedicated server's link is the bottleneck (the step grows with the
// workers), S shards relieve it about S-fold, asynchronous updates respect the staleness bound,
// and bad plans exit 2 with a reason.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <sys/wait.h>

#include "core/error.hpp"
#include "dp_fixtures.hpp"
#include "strategies/parameter_server.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

/// W workers and S dedicated servers on Pi 5 boards with 1 GbE.
test::DpRun ps_run(int workers, int servers, DataParallel s = DataParallel::ps, int staleness = 4,
                   std::int64_t global_batch = 0) {
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe").with_nodes(workers + servers);
    Plan p;
    p.strategy = s;
    p.ps_servers = servers;
    p.staleness = staleness;
    p.global_batch = global_batch;
    sim::SimOptions opt;
    opt.record_memory = false;
    return test::dp_run(model_preset("mlp-large"), c, p, opt);
}

}  // namespace

TEST_CASE("dedicated servers are the last devices, workers the rest", "[strategies][ps]") {
    const test::DpRun r = ps_run(4, 1);
    CHECK(r.built.layout.dp == 4);
    CHECK(r.built.layout.servers == 1);
    // Each worker pushes every gradient once and pulls every parameter once (fp32 on the Pi).
    const std::int64_t psi = model_preset("mlp-large").parameters();
    std::int64_t pushed = 0, pulled = 0;
    for (const P2P& p : r.built.graph.p2ps()) {
        if (p.src == 2) pushed += p.bytes;
        if (p.dst == 2) pulled += p.bytes;
        CHECK((p.src == 4 || p.dst == 4));  // every transfer touches the server
    }
    CHECK(pushed == Approx(psi * 4).epsilon(1e-4));
    CHECK(pulled == Approx(psi * 4).epsilon(1e-4));
}

TEST_CASE("one dedicated server: the step grows with the workers", "[strategies][ps]") {
    const double t2 = ps_run(2, 1).summary.iteration.to_seconds();
    const double t4 = ps_run(4, 1).summary.iteration.to_seconds();
    const double t8 = ps_run(8, 1).summary.iteration.to_seconds();
    INFO(t2 << " s, " << t4 << " s, " << t8 << " s");
    // The server's NIC carries W·Ψ·4 bytes in and out: the step is about linear in W.
    CHECK(t4 / t2 == Approx(2).epsilon(0.2));
    CHECK(t8 / t4 == Approx(2).epsilon(0.2));
    // Hand check at W = 8: 8 pushes and 8 pulls of Ψ fp32 values at 125 MB/s each way.
    const double psi = static_cast<double>(model_preset("mlp-large").parameters());
    CHECK(t8 > 8 * psi * 4 / 125e6);
}

TEST_CASE("sharding over S servers relieves the server about S-fold", "[strategies][ps]") {
    const double t1 = ps_run(8, 1).summary.iteration.to_seconds();
    const int s = GENERATE(2, 4);
    const double ts = ps_run(8, s).summary.iteration.to_seconds();
    INFO("S = " << s << ": " << t1 << " s → " << ts << " s");
    CHECK(t1 / ts == Approx(s).epsilon(0.25));
}

TEST_CASE("colocated servers send only the other workers' shards", "[strategies][ps]") {
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe");
    Plan p;
    p.strategy = DataParallel::ps;
    p.ps_placement = PsPlacement::colocated;
    p.ps_servers = 4;
    const Built b = build(model_preset("mlp-small"), c, p);
    CHECK(b.layout.dp == 4);
    CHECK(b.layout.servers == 0);
    const std::int64_t psi = model_preset("mlp-small").parameters();
    std::int64_t pushed = 0;
    for (const P2P& x : b.graph.p2ps())
        if (x.src == 1 && b.graph.op(x.send).phase == Phase::bwd) pushed += x.bytes;
    // Three of the four shards live elsewhere.
    CHECK(static_cast<double>(pushed) == Approx(0.75 * psi * 4).epsilon(0.01));
}

TEST_CASE("ps-async: a worker never runs more than K updates ahead", "[strategies][ps]") {
    const int K = GENERATE(0, 1);
    const test::DpRun r = ps_run(3, 1, DataParallel::ps_async, K, 3 * 6);  // 6 iterations per worker
    const OpGraph& g = r.built.graph;
    // Iteration j's first forward on any worker starts after every update of iteration j − K − 1.
    std::vector<Time> last_update(6, Time::zero()), first_fwd(6, Time::max());
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.phase == Phase::opt && op.kind == OpKind::compute)
            last_update[static_cast<std::size_t>(op.microbatch)] =
                std::max(last_update[static_cast<std::size_t>(op.microbatch)], r.timeline.end[id]);
        if (op.phase == Phase::fwd && op.kind == OpKind::compute && op.layer == 0)
            first_fwd[static_cast<std::size_t>(op.microbatch)] =
                std::min(first_fwd[static_cast<std::size_t>(op.microbatch)], r.timeline.start[id]);
    }
    for (int j = K + 1; j < 6; ++j) CHECK(first_fwd[static_cast<std::size_t>(j)] >= last_update[static_cast<std::size_t>(j - K - 1)]);
    const auto st = mean_staleness(g, r.timeline);
    REQUIRE(st.has_value());
    // Round-robin on one shard: at most the other workers' updates of K + 1 iterations intervene.
    CHECK(*st > 0);
    CHECK(*st <= (K + 1) * 2 + 2);
}

TEST_CASE("ps-async with one worker has no staleness", "[strategies][ps]") {
    const test::DpRun r = ps_run(1, 1, DataParallel::ps_async);
    const auto st = mean_staleness(r.built.graph, r.timeline);
    REQUIRE(st.has_value());
    CHECK(*st == 0);
    CHECK(r.built.layout.microbatches == 4);  // four iterations per worker by default
}

TEST_CASE("impossible parameter-server plans say why", "[strategies][ps][plan]") {
    const Model m = model_preset("mlp-small");
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe");
    Plan p;
    p.strategy = DataParallel::ps;
    SECTION("no servers") {
        p.ps_servers = 0;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("--ps-servers must be at least 1, found 0"));
    }
    SECTION("dedicated servers leaving no worker") {
        p.ps_servers = 4;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("leave no worker"));
    }
    SECTION("more colocated servers than workers") {
        p.ps_placement = PsPlacement::colocated;
        p.ps_servers = 5;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("need as many workers, but dp = 4"));
    }
    SECTION("negative staleness") {
        p.strategy = DataParallel::ps_async;
        p.staleness = -1;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("--staleness must be at least 0"));
    }
    SECTION("an unknown placement") {
        CHECK_THROWS_WITH(parse_ps_placement("dedicate"), Catch::Contains("did you mean 'dedicated'"));
    }
    SECTION("an unknown strategy lists the valid names") {
        CHECK_THROWS_WITH(parse_data_parallel("zero4"),
                          Catch::Contains("ps, ps-async, ring, ddp, zero1, zero2, zero3, fsdp"));
    }
}

#ifdef SMOLCLUSTER_BIN
TEST_CASE("bad data-parallel plans exit 2 from the command line", "[strategies][ps][cli]") {
    auto status = [](const std::string& args) {
        const std::string cmd = std::string(SMOLCLUSTER_BIN) + " simulate " + args + " > /dev/null 2>&1";
        const int rc = std::system(cmd.c_str());
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    };
    SECTION("--ps-servers 0") {
        CHECK(status("--model mlp-small --cluster pi5-1gbe --strategy ps --ps-servers 0") == 2);
    }
    SECTION("a hybrid shard group not dividing the devices") {
        CHECK(status("--model gpt2-small --cluster dgx-a100 --nodes 2 --strategy fsdp --fsdp-sharding hybrid "
                     "--fsdp-group 3") == 2);
    }
    SECTION("an unknown strategy") {
        CHECK(status("--model gpt2-small --cluster dgx-a100 --strategy zero4") == 2);
    }
    SECTION("a good plan") {
        CHECK(status("--model mlp-small --cluster pi5-1gbe --strategy ps-async") == 0);
    }
}
#endif
