#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim/simulator.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/plan.hpp"
#include "tools/simulation.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

tools::Simulation run(const std::string& model, const topo::Cluster& cluster, Plan plan) {
    return tools::simulate_plan(model_preset(model), cluster, plan);
}

std::size_t count_kind(const OpGraph& g, OpKind k) {
    std::size_t n = 0;
    for (const Op& op : g.ops()) n += op.kind == k;
    return n;
}

}  // namespace

TEST_CASE("DDP buckets hold every gradient once, in reverse block order", "[strategies][ddp]") {
    const Model m = model_preset("gpt2-small");
    Workload w;
    const auto blocks = m.blocks(w);
    const Bytes cap = Bytes::mib(25), first = Bytes::mib(1);
    const auto buckets = make_buckets(blocks, 2, cap, first);
    Bytes total;
    for (const auto& b : buckets) {
        CHECK(b.bytes <= cap);
        total += b.bytes;
    }
    CHECK(total == Bytes(m.parameters() * 2));
    CHECK(buckets.front().bytes == first);
    // Ready in reverse block order: the head's bucket first, the embedding's last.
    for (std::size_t k = 1; k < buckets.size(); ++k) CHECK(buckets[k].ready_after_block <= buckets[k - 1].ready_after_block);
    CHECK(buckets.back().ready_after_block == 0);
}

TEST_CASE("with dp = 1 there is no communication at all", "[strategies][ddp]") {
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe").with_nodes(1);
    const tools::Simulation r = run("gpt2-small", c, Plan{});
    CHECK(count_kind(r.built.graph, OpKind::collective) == 0);
    CHECK(r.summary.total_comm == Time::zero());
    CHECK(r.summary.exposed_comm == Time::zero());
}

TEST_CASE("DDP all-reduces every gradient byte once per step", "[strategies][ddp]") {
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe").with_nodes(4);
    Plan p;
    p.global_batch = 8;  // two micro-batches per replica: the first runs under no_sync
    const tools::Simulation r = run("gpt2-small", c, p);
    std::int64_t bytes_rank0 = 0;
    for (const Op& op : r.built.graph.ops())
        if (op.kind == OpKind::collective && op.rank == 0) bytes_rank0 += op.bytes;
    // fp32 on the Pi: 4 bytes per gradient.
    CHECK(bytes_rank0 == model_preset("gpt2-small").parameters() * 4);
    CHECK(r.built.layout.microbatches == 2);
}

TEST_CASE("DDP hides communication behind backward, one giant bucket hides nothing", "[strategies][ddp]") {
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe").with_nodes(4);
    const tools::Simulation small = run("gpt2-small", c, Plan{});
    INFO("exposed " << to_string(small.summary.exposed_comm) << " of " << to_string(small.summary.total_comm));
    CHECK(small.summary.total_comm > Time::zero());
    CHECK(small.summary.exposed_comm < small.summary.total_comm * 0.8);

    Plan giant;
    giant.bucket_mb = giant.first_bucket_mb = 1e6;  // one bucket: ready when the whole backward is done
    const tools::Simulation one = run("gpt2-small", c, giant);
    CHECK(one.summary.exposed_comm.to_seconds() == Approx(one.summary.total_comm.to_seconds()).epsilon(0.001));
    CHECK(one.summary.iteration > small.summary.iteration);
}

TEST_CASE("smaller DDP buckets start communicating earlier", "[strategies][ddp]") {
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto first_comm = [&](double mb) {
        Plan p;
        p.bucket_mb = p.first_bucket_mb = mb;
        const tools::Simulation r = run("gpt2-xl", c, p);
        Time first = Time::max();
        for (OpId id = 0; id < r.built.graph.size(); ++id)
            if (r.built.graph.op(id).kind == OpKind::collective) first = std::min(first, r.timeline.start[id]);
        return first;
    };
    CHECK(first_comm(5) < first_comm(200));
}

TEST_CASE("impossible data-parallel plans say why", "[strategies][plan]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe");
    Plan p;
    SECTION("micro-batch not dividing the per-replica batch") {
        p.global_batch = 8;
        p.micro_batch = 3;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("micro-batch 3 does not divide the per-replica batch 2"));
    }
    SECTION("global batch not splitting over replicas") {
        p.global_batch = 6;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("does not split over dp = 4"));
    }
    SECTION("dp not matching the devices") {
        p.dp = 3;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("but the cluster has 4 devices"));
    }
    SECTION("a dtype the device lacks") {
        p.dtype = DType::bf16;
        CHECK_THROWS_WITH(build(m, c, p), Catch::Contains("no bf16 peak"));
    }
    SECTION("an unknown strategy lists the valid ones") {
        CHECK_THROWS_WITH(parse_data_parallel("dpp"), Catch::Contains("did you mean 'ddp'"));
    }
}

TEST_CASE("on a mixed cluster the slowest device sets the pace", "[strategies][ddp]") {
    // Two Pi 5 and two Pi 4 on one switch, against the same cluster with four Pi 4: DDP's
    // all-reduces make the Pi 5s wait for the Pi 4s, so the steps match.
    const std::string path = std::string(SMOL_TEST_DATA) + "/cluster-mixed-pi.json";
    const topo::Cluster mixed = topo::load_cluster(path);
    Json text = load_json_file(path);
    text["node_groups"][0]["device"] = "pi4-8gb";
    const topo::Cluster slow = topo::cluster_from_json(JsonView(text, "all-pi4"));
    const tools::Simulation a = run("gpt2-small", mixed, Plan{}), b = run("gpt2-small", slow, Plan{});
    const auto& d = a.summary.per_device;
    REQUIRE(d.size() == 4);
    CHECK(d[0].busy < d[2].busy * 0.6);   // a Pi 5 computes in well under the Pi 4's time…
    CHECK(d[0].comm > d[2].comm);         // …and waits for it in the all-reduces
    CHECK(a.summary.iteration.to_seconds() == Approx(b.summary.iteration.to_seconds()).epsilon(0.01));
}
