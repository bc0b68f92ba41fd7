// Parameter servers: one dedicated server's link is the bottleneck (the step grows with the
// workers), S shards relieve it about S-fold, asynchronous updates respect the staleness bound,
// and bad plans exit 2 with a reason.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <sys/wait.h>

#include "core/error.hpp"
#include "dp_fixtures.hpp"
#include "sim/sim_fixtures.hpp"
#include "test_support.hpp"
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

namespace {

/// When each worker's last update ended (the update ops' labels: index = worker).
std::map<int, double> last_update(const test::DpRun& r) {
    std::map<int, double> out;
    const OpGraph& g = r.built.graph;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.kind == OpKind::compute && op.phase == Phase::opt && op.index >= 0)
            out[op.index] = std::max(out[op.index], r.timeline.end[id].to_seconds());
    }
    return out;
}

}  // namespace

TEST_CASE("a straggler at half speed slows synchronous DDP to its pace and leaves ps-async nearly untouched",
          "[strategies][ps][speed]") {
    // ResNet-50 on 8 Pi 5 boards over 1 GbE, 32 images per worker per update (compute-bound:
    // a worker computes for seconds, its push of 25.6 M fp32 gradients takes 0.2 s on the wire).
    const Model m = model_preset("resnet50");
    sim::SimOptions opt;
    opt.record_memory = false;
    Plan ddp;
    ddp.micro_batch = 32;
    const topo::Cluster pis = topo::cluster_preset("pi5-1gbe").with_nodes(8);
    const test::DpRun base = test::dp_run(m, pis, ddp, opt);
    const test::DpRun slow = test::dp_run(m, pis.with_slow_devices("3:0.5"), ddp, opt);
    CHECK(base.built.graph.folded());
    CHECK_FALSE(slow.built.graph.folded());
    // Hand calculation: every rank waits for the slowest in each bucket's all-reduce, so the step
    // is the slow device's compute — twice a normal device's — plus the communication left
    // exposed after its backward (the same tail as without the straggler).
    const double compute = base.summary.per_device[0].busy.to_seconds();
    const double exposed = base.summary.exposed_comm.to_seconds();
    const double step = slow.summary.iteration.to_seconds();
    INFO("compute " << compute << " s, exposed " << exposed << " s, base " << base.summary.iteration.to_seconds()
                    << " s, with the straggler " << step << " s");
    CHECK(slow.summary.per_device[3].busy.to_seconds() == Approx(2 * compute).epsilon(0.01));
    CHECK(step == Approx(2 * compute + exposed).epsilon(0.05));
    CHECK(step / base.summary.iteration.to_seconds() > 1.8);

    // ps-async: 8 workers and 2 dedicated servers, 4 updates per worker, staleness bound 4 (it
    // never binds within 4 iterations). The fast workers keep their pace; the update rate, each
    // worker at its own pace, falls to about (7 + 0.5) / 8 = 93.75 % of the baseline's — tested
    // at 90 % and above, and each fast worker's last update within 5 % of its baseline time.
    Plan ps;
    ps.strategy = DataParallel::ps_async;
    ps.micro_batch = 32;
    ps.ps_servers = 2;
    const topo::Cluster ps_pis = topo::cluster_preset("pi5-1gbe").with_nodes(10);
    const test::DpRun ps_base = test::dp_run(m, ps_pis, ps, opt);
    const test::DpRun ps_slow = test::dp_run(m, ps_pis.with_slow_devices("3:0.5"), ps, opt);
    REQUIRE(ps_base.summary.update_rate);
    REQUIRE(ps_slow.summary.update_rate);
    const double rate = *ps_slow.summary.update_rate / *ps_base.summary.update_rate;
    INFO("update rate " << *ps_base.summary.update_rate << " /s, with the straggler " << *ps_slow.summary.update_rate
                        << " /s (" << rate << ")");
    CHECK(rate >= 0.90);
    CHECK(rate <= 0.95);
    const auto b = last_update(ps_base), s = last_update(ps_slow);
    REQUIRE(b.size() == 8);
    for (const auto& [worker, t] : s) {
        INFO("worker " << worker << ": " << b.at(worker) << " s, with the straggler " << t << " s");
        if (worker == 3) CHECK(t > 1.8 * b.at(worker));
        else CHECK(t <= 1.05 * b.at(worker));
    }
}

TEST_CASE("Hogwild!: lock-free updates contend for the node's DRAM, with no staleness bound", "[strategies][ps][hogwild]") {
    // One node of 4 GPUs whose host DRAM moves 100 GB/s, streamed at 50 %. One gradient bucket, so
    // the four workers, computing alike, copy their gradients down at once and update the store at
    // once: each update's Adam pass moves B bytes (its op's bytes) and the four share the DRAM,
    // so each takes 4 · B / (0.5 · 100 GB/s); alone, B / 50 GB/s.
    const Model m = model_preset("mlp-large");
    Plan p;
    p.strategy = DataParallel::ps_async;
    p.hogwild = true;
    p.bucket_mb = 1 << 20;   // one bucket
    sim::SimOptions opt;
    opt.record_memory = false;
    auto updates = [](const test::DpRun& r) {
        std::vector<std::pair<double, double>> out;   // (bytes, seconds)
        const OpGraph& g = r.built.graph;
        for (OpId id = 0; id < g.size(); ++id)
            if (g.op(id).kind == OpKind::compute && g.op(id).phase == Phase::opt)
                out.emplace_back(static_cast<double>(g.op(id).bytes), (r.timeline.end[id] - r.timeline.start[id]).to_seconds());
        return out;
    };
    const test::DpRun four = test::dp_run(m, test::gpu_node_cluster(4, 100), p, opt);
    CHECK(four.built.layout.servers == 0);
    CHECK(four.built.layout.dp == 4);
    const auto u4 = updates(four);
    REQUIRE(u4.size() == 4 * 4);   // 4 workers × 4 iterations × 1 bucket
    for (const auto& [bytes, seconds] : u4) CHECK(seconds == Approx(4 * bytes / 50e9).epsilon(1e-3));
    const test::DpRun one = test::dp_run(m, test::gpu_node_cluster(1, 100), p, opt);
    const auto u1 = updates(one);
    REQUIRE(u1.size() == 4);
    for (const auto& [bytes, seconds] : u1) CHECK(seconds == Approx(bytes / 50e9).epsilon(1e-3));
    // Adam over the whole model: 28 bytes per parameter (strategies/data_parallel.hpp).
    CHECK(u1.front().first == Approx(28.0 * static_cast<double>(m.parameters())).epsilon(1e-6));

    // No edge joins two workers: no lock, no server, no staleness bound.
    const OpGraph& g = four.built.graph;
    for (OpId id = 0; id < g.size(); ++id)
        for (OpId next : g.successors(id)) CHECK(g.op(next).rank == g.op(id).rank);
    // So a worker at a tenth of the speed holds nobody: GPT-2 small on the 4-GPU workstation,
    // 16 sequences per iteration (compute-bound: about 0.2 s of compute per iteration against
    // tens of ms of shared-DRAM updates), 8 iterations each. The fast workers finish all 8 before
    // the slow one has finished its second — 6 updates ahead, past any bound K < 6 that
    // bounded-staleness ps-async would enforce (its default is 4).
    Plan q;
    q.strategy = DataParallel::ps_async;
    q.hogwild = true;
    q.micro_batch = 16;
    q.global_batch = 4 * 8 * 16;
    const Model gpt2 = model_preset("gpt2-small");
    const topo::Cluster ws = topo::cluster_preset("workstation-4gpu");
    const test::DpRun even = test::dp_run(gpt2, ws, q, opt);
    const test::DpRun slow = test::dp_run(gpt2, ws.with_slow_devices("0:0.1"), q, opt);
    const auto e = last_update(even), s = last_update(slow);
    double slow_second = 0;
    for (OpId id = 0; id < slow.built.graph.size(); ++id) {
        const Op& op = slow.built.graph.op(id);
        if (op.kind == OpKind::compute && op.phase == Phase::opt && op.index == 0 && op.microbatch == 1)
            slow_second = slow.timeline.end[id].to_seconds();
    }
    for (int w = 1; w < 4; ++w) {
        CHECK(s.at(w) <= e.at(w) * 1.001);   // less contention, if anything
        CHECK(s.at(w) < slow_second);
    }
    REQUIRE(slow.summary.mean_staleness);
    CHECK(*slow.summary.mean_staleness > *even.summary.mean_staleness);
}

TEST_CASE("Hogwild! is refused where the workers share no memory the simulator models", "[strategies][ps][hogwild]") {
    Plan p;
    p.strategy = DataParallel::ps_async;
    p.hogwild = true;
    const Model m = model_preset("mlp-large");
    SECTION("across nodes") {
        const std::string msg = test::bad_input_message([&] { resolve(m, topo::cluster_preset("dgx-a100").with_nodes(2), p); });
        CHECK_THAT(msg, Catch::Contains("--hogwild"));
        CHECK_THAT(msg, Catch::Contains("span 2 nodes"));
    }
    SECTION("CPU ranks of one board, whose DRAM the simulator prices per rank") {
        Json doc = load_json_file(std::string(SMOL_SOURCE_DIR) + "/topologies/presets/pi5-1gbe.json");
        doc["node_groups"][0]["count"] = 1;
        doc["node_groups"][0]["devices_per_node"] = 4;
        doc["node_groups"][0]["intra"] = {{"kind", "shm"}, {"bandwidth", "10 GB/s"}, {"latency", "1 us"}};
        const topo::Cluster board = topo::cluster_from_json(JsonView(doc, "board.json"));
        const std::string msg = test::bad_input_message([&] { resolve(m, board, p); });
        CHECK_THAT(msg, Catch::Contains("--hogwild"));
        CHECK_THAT(msg, Catch::Contains("PCIe root"));
        // One Pi is one worker: nothing to contend with, and allowed.
        CHECK(resolve(m, topo::cluster_preset("pi5-1gbe").with_nodes(1), p).dp == 1);
    }
    SECTION("without ps-async") {
        p.strategy = DataParallel::ddp;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, test::gpu_node_cluster(4, 100), p); }),
                   Catch::Contains("--strategy ps-async"));
    }
}
