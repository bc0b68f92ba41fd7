#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.hpp"
#include "sim/compute.hpp"
#include "sim/simulator.hpp"
#include "sim_fixtures.hpp"
#include "topologies/topology.hpp"

using namespace smol;
using namespace smol::sim;

namespace {

std::vector<int> iota_ranks(int p) {
    std::vector<int> v(static_cast<std::size_t>(p));
    for (int i = 0; i < p; ++i) v[static_cast<std::size_t>(i)] = i;
    return v;
}

/// One collective over all ranks, simulated alone; returns the step time.
Time one_collective(const topo::Cluster& c, CollectiveKind kind, Bytes s, CollectiveAlgo algo,
                    NetworkMode mode = NetworkMode::flow) {
    OpGraph g(c.num_devices());
    g.add_collective(kind, iota_ranks(c.num_devices()), s, Stream::comm, Phase::comm);
    g.finalize();
    SimOptions o;
    o.algo = algo;
    o.network = mode;
    return simulate(g, c, o).makespan;
}

}  // namespace

TEST_CASE("ring all-reduce on a uniform ring matches 2(p-1)/p·S/B + 2(p-1)·α", "[sim][collectives]") {
    const int p = GENERATE(2, 4, 8, 16);
    const double B = 1.25e9;                 // 10 GbE, bytes/s
    const double nic_us = 5, switch_us = 1;  // α: two NIC hops and one switch per step
    const topo::Cluster c = test::uniform_switch_cluster(p, 1.25, nic_us, switch_us);
    const Bytes S = Bytes::mib(64);
    const double alpha = (2 * nic_us + switch_us) * 1e-6;
    const double expected = 2.0 * (p - 1) / p * S.as_double() / B + 2.0 * (p - 1) * alpha;
    for (auto mode : {NetworkMode::flow, NetworkMode::analytic}) {
        const Time t = one_collective(c, CollectiveKind::all_reduce, S, CollectiveAlgo::ring, mode);
        INFO("p = " << p << ", mode " << to_string(mode));
        CHECK(t.to_seconds() == Approx(expected).epsilon(0.01));
    }
}

TEST_CASE("reduce-scatter and all-gather move (p-1)/p·S per rank", "[sim][collectives]") {
    const int p = 4;
    const topo::Cluster c = test::uniform_switch_cluster(p, 1.0, 0, 0);
    const Bytes S = Bytes::gb(1);
    for (auto kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
        const Time t = one_collective(c, kind, S, CollectiveAlgo::ring);
        CHECK(t.to_seconds() == Approx(0.75).epsilon(0.001));
    }
}

TEST_CASE("tree latency grows with log p, ring latency with p", "[sim][collectives]") {
    const Bytes tiny(8);
    std::vector<double> tree, ring;
    for (int p : {4, 8, 16, 32, 64}) {
        const topo::Cluster c = test::uniform_switch_cluster(p, 1.25, 5, 1);
        tree.push_back(one_collective(c, CollectiveKind::all_reduce, tiny, CollectiveAlgo::tree).to_seconds());
        ring.push_back(one_collective(c, CollectiveKind::all_reduce, tiny, CollectiveAlgo::ring).to_seconds());
    }
    // Each doubling of p adds about the same to the tree (2 steps of α), and doubles the ring.
    for (std::size_t i = 1; i + 1 < tree.size(); ++i)
        CHECK(tree[i + 1] - tree[i] == Approx(tree[i] - tree[i - 1]).epsilon(0.05));
    CHECK(ring.back() / ring.front() > 15);
    CHECK(tree.back() / tree.front() < 4);
    CHECK(tree.back() < ring.back() / 4);
}

TEST_CASE("on dgx-a100 x 4 NCCL's ring leaves every node on all 8 rails", "[sim][collectives]") {
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    const Bytes S = Bytes::gib(1);
    const Time ring = one_collective(c, CollectiveKind::all_reduce, S, CollectiveAlgo::ring);
    // One channel per HDR NIC, NCCL's multi-node model: bus bandwidth 16 channels × 12 GB/s, so
    // 2·(31/32)·S / 192 GB/s after NCCL's latency, (8.4 + 56 × 6 + 6 × 14) µs × 1.4 for the ring
    // plateau (sim/test_nccl_tuner.cpp has the hand calculation). A ring through one port per
    // node boundary would need ≥ 2·(31/32)·S / 25 GB/s, 7.7× longer.
    const double one_port = 2.0 * 31 / 32 * S.as_double() / 25e9;
    const double latency = (8.4 + 56 * 6 + 6 * 14) * 1.4e-6;
    INFO("ring " << to_string(ring));
    CHECK(ring.to_seconds() == Approx(latency + 2.0 * 31 / 32 * S.as_double() / 192e9).epsilon(0.01));
    CHECK(ring.to_seconds() < one_port / 7);
    // Hierarchical (not an NCCL algorithm) runs when asked for.
    const Time hier = one_collective(c, CollectiveKind::all_reduce, S, CollectiveAlgo::hierarchical);
    CHECK(hier > Time::zero());
}

TEST_CASE("on pi5-1gbe x 4 two concurrent all-reduces take about twice as long as one", "[sim][network]") {
    const topo::Cluster c = topo::cluster_preset("pi5-1gbe").with_nodes(4);
    const Bytes S = Bytes::mb(100);
    OpGraph one(4), two(4);
    one.add_collective(CollectiveKind::all_reduce, {0, 1, 2, 3}, S, Stream::comm, Phase::comm);
    two.add_collective(CollectiveKind::all_reduce, {0, 1, 2, 3}, S, Stream::comm, Phase::comm);
    // The same ring rotated: the same switch ports in the same direction, on another stream.
    two.add_collective(CollectiveKind::all_reduce, {1, 2, 3, 0}, S, Stream::p2p, Phase::comm);
    one.finalize();
    two.finalize();
    SimOptions o;
    o.algo = CollectiveAlgo::ring;
    const double t1 = simulate(one, c, o).makespan.to_seconds();
    const double t2 = simulate(two, c, o).makespan.to_seconds();
    CHECK(t2 / t1 == Approx(2.0).epsilon(0.02));
    // Priced alone (analytic), the two would overlap completely.
    o.network = NetworkMode::analytic;
    CHECK(simulate(two, c, o).makespan.to_seconds() == Approx(t1).epsilon(0.02));
}

TEST_CASE("a send and its receive move bytes at the route's rate after its latency", "[sim][network]") {
    const topo::Cluster c = test::uniform_switch_cluster(2, 1.0, 5, 1);
    OpGraph g(2);
    g.add_send_recv(0, 1, Bytes::gb(1), Phase::fwd, 0, 0);
    g.finalize();
    const Timeline tl = simulate(g, c);
    CHECK(tl.makespan.to_seconds() == Approx(1.0 + 11e-6).epsilon(1e-6));
}

TEST_CASE("compute ops take their roofline time, streams run concurrently", "[sim][compute]") {
    const topo::Cluster c = test::uniform_switch_cluster(2, 1.0, 0, 0);
    OpGraph g(2);
    // 100 GFLOP at 100 GFLOP/s with efficiency ~1: 1 s. Two in a row on one stream: 2 s.
    const OpId a = g.add_compute(0, Phase::fwd, 0, 0, Flops(1e11), Bytes(0), KernelClass::gemm, DType::fp32);
    const OpId b = g.add_compute(0, Phase::fwd, 1, 0, Flops(1e11), Bytes(0), KernelClass::gemm, DType::fp32);
    // A memory-bound op: 20 GB at 20 GB/s: 1 s, on the other rank.
    const OpId m = g.add_compute(1, Phase::opt, -1, -1, Flops(0), Bytes::gb(20), KernelClass::optimizer, DType::fp32);
    g.finalize();
    const Timeline tl = simulate(g, c);
    CHECK(tl.duration(a).to_seconds() == Approx(1.0).epsilon(1e-4));
    CHECK(tl.start[b] == tl.end[a]);
    CHECK(tl.duration(m).to_seconds() == Approx(1.0).epsilon(1e-6));
    CHECK(tl.makespan.to_seconds() == Approx(2.0).epsilon(1e-4));
}

TEST_CASE("memory: peak per tier, and the first allocation that does not fit", "[sim][memory]") {
    const topo::Cluster c = test::uniform_switch_cluster(1, 1.0, 0, 0);  // 8 GB per board
    OpGraph g(1);
    const auto a = g.add_buffer(0, Tier::device, Bytes::gb(5), BufferLabel::parameters);
    const auto b = g.add_buffer(0, Tier::device, Bytes::gb(2), BufferLabel::activations);
    const auto d = g.add_buffer(0, Tier::device, Bytes::gb(4), BufferLabel::activations);
    g.add_alloc(a, Stream::compute);
    g.add_alloc(b, Stream::compute);
    g.add_free(b, Stream::compute);
    g.add_alloc(d, Stream::compute);  // 5 + 4 = 9 GB > 8 GB
    const OpId last = g.add_free(d, Stream::compute);
    g.finalize();
    const Timeline tl = simulate(g, c);
    CHECK(tl.peak[0][0] == Bytes::gb(9));
    REQUIRE(tl.oom.has_value());
    CHECK(tl.oom->rank == 0);
    CHECK(tl.oom->requested == Bytes::gb(4));
    CHECK(tl.oom->free == Bytes::gb(3));
    CHECK(tl.oom->op == last - 1);
    for (const auto& s : tl.memory) CHECK(s.in_use >= Bytes(0));
}

TEST_CASE("an engineered deadlock is reported with the stuck ops", "[sim][deadlock]") {
    // Each rank sends only after it has received (as a badly written exchange does): the send
    // 0→1 waits for the receive of 1→0 on rank 0, whose send on rank 1 waits for the receive of
    // 0→1. Acyclic as a graph; a deadlock once sends and receives meet (rendezvous).
    const topo::Cluster c = test::uniform_switch_cluster(2, 1.0, 0, 0);
    OpGraph g(2);
    const auto [s01, r01] = g.add_send_recv(0, 1, Bytes::mb(1), Phase::fwd, 0, 0, Stream::p2p);
    const auto [s10, r10] = g.add_send_recv(1, 0, Bytes::mb(1), Phase::bwd, 0, 0, Stream::comm, Stream::comm);
    g.depend(r10, s01);
    g.depend(r01, s10);
    g.finalize();
    try {
        simulate(g, c);
        FAIL("expected a deadlock");
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::deadlock);
        const std::string m = e.what();
        CHECK_THAT(m, Catch::Contains("rank 0"));
        CHECK_THAT(m, Catch::Contains("rank 1"));
        CHECK_THAT(m, Catch::Contains("send fwd L0 mb0 r0->r1"));
        CHECK_THAT(m, Catch::Contains("recv bwd L0 mb0 r1->r0"));
        CHECK_THAT(m, Catch::Contains("waits for the send on rank 1"));
    }
}

TEST_CASE("events counts what the engine processed", "[sim][engine]") {
    const topo::Cluster c = test::uniform_switch_cluster(2, 1.0, 0, 0);
    OpGraph g(2);
    for (int i = 0; i < 5; ++i) g.add_compute(0, Phase::fwd, i, 0, Flops(1e9), Bytes(0), KernelClass::gemm, DType::fp32);
    g.add_collective(CollectiveKind::all_reduce, {0, 1}, Bytes::mb(1), Stream::comm, Phase::comm);
    g.finalize();
    SimOptions o;
    o.network = NetworkMode::analytic;
    // Five compute completions and one collective completion.
    CHECK(simulate(g, c, o).events == 6);
    // Flow mode: a ring of 2 is one phase of 2 equal flows, moving in lockstep as one aggregated
    // flow: one flow completion, which ends the phase (the cluster has no latency to wait after it).
    o.network = NetworkMode::flow;
    CHECK(simulate(g, c, o).events == 5 + 1);
    // With a latency, the phase ends one event after its flows.
    CHECK(simulate(g, test::uniform_switch_cluster(2, 1.0, 0, 5), o).events == 5 + 1 + 1);
}

TEST_CASE("the same graph simulates to the same timeline", "[sim][determinism]") {
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    OpGraph g(16);
    std::vector<int> all = iota_ranks(16);
    for (int i = 0; i < 3; ++i) g.add_collective(CollectiveKind::all_reduce, all, Bytes::mb(64), Stream::comm, Phase::comm);
    for (int r = 0; r < 8; ++r) g.add_send_recv(r, r + 8, Bytes::mb(32), Phase::fwd, 0, 0);
    g.finalize();
    const Timeline a = simulate(g, c), b = simulate(g, c);
    CHECK(a.start == b.start);
    CHECK(a.end == b.end);
    CHECK(a.events == b.events);
}

TEST_CASE("compute slows down while communication runs on the same device", "[sim][compute]") {
    // comm_slowdown 2: a 1 s compute op overlapping a 0.5 s transfer does 0.25 s of work in the
    // first 0.5 s, then the remaining 0.75 s at full speed: it ends at 1.25 s.
    const topo::Cluster c = test::uniform_switch_cluster(2, 1.0, 0, 0, 2.0);
    OpGraph g(2);
    const OpId work = g.add_compute(0, Phase::fwd, 0, 0, Flops(1e11), Bytes(0), KernelClass::gemm, DType::fp32);
    g.add_send_recv(0, 1, Bytes::gb(0.5), Phase::fwd, 1, 0);
    g.finalize();
    const Timeline tl = simulate(g, c);
    CHECK(tl.end[work].to_seconds() == Approx(1.25).epsilon(1e-4));
}

TEST_CASE("GEMMs beside a running NCCL call get the SMs its thread blocks leave", "[sim][compute]") {
    // Two GPUs of 100 SMs. An all-reduce (b thread blocks, C seconds alone) starts with a GEMM of
    // D seconds: the GEMM runs on 100 − b SMs while the call runs, then on all 100, so it ends at
    // C + D − C · (100 − b) / 100. An elementwise op (memory-bound) keeps its time, and without
    // "sms" nothing slows.
    const auto cluster = [](const std::string& sms) {
        const std::string text = R"({
          "name": "pair", "description": "test", "sources": ["test"],
          "device_kinds": {"gpu": {"peak": {"bf16": "100 TFLOP/s"}, "memory": "80 GiB", "memory_bandwidth": "1000 GB/s",
                                   "launch_overhead": "0 us", "gemm_efficiency": 1.0, "gemm_half_dim": 0.000001,
                                   "memory_efficiency": 1.0, "compute_capability": 9.0)" + sms + R"(}},
          "node_groups": [{"name": "n", "count": 1, "device": "gpu", "devices_per_node": 2, "host_memory": "1 TiB",
                           "host_memory_bandwidth": "100 GB/s", "intra": {"kind": "nvlink", "bandwidth": "100 GB/s", "latency": "0 us"},
                           "host_link": {"bandwidth": "25 GB/s", "latency": "0 us"},
                           "nics": {"count": 1, "bandwidth": "10 GB/s", "latency": "0 us"}}],
          "network": {"fabric": "switch", "switch_latency": "0 us"}})";
        return topo::cluster_from_json(JsonView(parse_json_text(text, "pair.json"), "pair.json"));
    };
    const topo::Cluster with = cluster(R"(, "sms": 100)"), without = cluster("");
    REQUIRE(with.groups[0].device.sms == 100);
    REQUIRE(without.groups[0].device.sms == 0);
    const Bytes S = Bytes::gib(1);
    const auto run = [&](const topo::Cluster& c, KernelClass cls, Flops flops, Bytes bytes, bool with_call) {
        OpGraph g(2);
        const OpId work = g.add_compute(0, Phase::fwd, 0, 0, flops, bytes, cls, DType::bf16);
        if (with_call) g.add_collective(CollectiveKind::all_reduce, {0, 1}, S, Stream::comm, Phase::comm);
        g.finalize();
        return simulate(g, c).end[work].to_seconds();
    };
    // The call alone, and NCCL's blocks for it.
    OpGraph alone(2);
    alone.add_collective(CollectiveKind::all_reduce, {0, 1}, S, Stream::comm, Phase::comm);
    alone.finalize();
    const double C = simulate(alone, with).makespan.to_seconds();
    CollectiveContext ctx;
    ctx.gpu = true;
    ctx.cluster = &with;
    ctx.node_of = [](int) { return 0; };
    ctx.nic_of = [](int) { return 0; };
    const topo::Topology topo(with);
    ctx.routes.route = [&](int a, int b) { return topo.route(topo.device_vertex(a), topo.device_vertex(b)); };
    ctx.routes.latency = [&](int a, int b) { return topo.route_latency(topo.device_vertex(a), topo.device_vertex(b)); };
    for (const auto& l : topo.links()) ctx.routes.link_bandwidth.push_back(l.bandwidth);
    const int b = choose(CollectiveKind::all_reduce, {0, 1}, S, 0, CollectiveAlgo::automatic, ctx).thread_blocks;
    REQUIRE(b > 0);
    REQUIRE(b < 100);
    // A GEMM three times the call's length.
    const Flops F(3 * C * 100e12);
    const double D = run(with, KernelClass::gemm, F, Bytes(0), false);
    CHECK(D == Approx(3 * C).epsilon(1e-6));
    CHECK(run(with, KernelClass::gemm, F, Bytes(0), true) == Approx(C + D - C * (100.0 - b) / 100).epsilon(1e-6));
    CHECK(run(without, KernelClass::gemm, F, Bytes(0), true) == Approx(D).epsilon(1e-9));
    const Bytes stream(static_cast<std::int64_t>(3 * C * 1000e9));
    CHECK(run(with, KernelClass::elementwise, Flops(0), stream, true) == Approx(run(with, KernelClass::elementwise, Flops(0), stream, false)).epsilon(1e-9));
}

TEST_CASE("a timer ends on the next tick of its period", "[sim][engine]") {
    // Compute for 1 s, then wait for a 0.3 s cycle: the tick after 1 s is 1.2 s. A second timer
    // that starts on a tick (1.2 s) ends at once.
    const topo::Cluster c = test::uniform_switch_cluster(1, 1.0, 0, 0);
    OpGraph g(1);
    g.add_compute(0, Phase::fwd, 0, 0, Flops(1e11), Bytes(0), KernelClass::gemm, DType::fp32);
    const OpId t1 = g.add_timer(0, Time::ms(300), Stream::compute, Phase::comm);
    const OpId t2 = g.add_timer(0, Time::ms(300), Stream::compute, Phase::comm);
    g.finalize();
    const Timeline tl = simulate(g, c);
    CHECK(tl.end[t1].to_seconds() == Approx(1.2));
    CHECK(tl.end[t2] == tl.end[t1]);
    CHECK(g.op_name(t1) == "cycle 300 ms");
}

TEST_CASE("a hierarchical reduce-scatter across DGX nodes uses every rail", "[sim][collectives]") {
    // dgx-a100 × 2, 16 ranks, S = 1 GiB: an intra-node ring reduce-scatter over NVSwitch
    // (7/8 · S at 300 GB/s), then 8 rail rings of two nodes exchange half of each 1/8 shard over
    // their own 25 GB/s HDR port (1/2 · S/8). Latencies add ~1 %.
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
    const Bytes S = Bytes::gib(1);
    const double expected = 7.0 / 8 * S.as_double() / 300e9 + 0.5 * S.as_double() / 8 / 25e9;
    for (auto kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
        const Time hier = one_collective(c, kind, S, CollectiveAlgo::hierarchical);
        CHECK(hier.to_seconds() == Approx(expected).epsilon(0.03));
        // NCCL runs its ring instead, over every rail (hierarchical is explicit only).
        CHECK(one_collective(c, kind, S, CollectiveAlgo::automatic) != hier);
    }
}

TEST_CASE("host steps share the node's DRAM with each other and with copies", "[sim][host]") {
    // Two GPUs' host steps of B bytes each at once: the DRAM (100 GB/s read and write, streaming
    // at 50 %) is shared, so each takes 2·B / 50 GB/s — as long as one step of both.
    const topo::Cluster c = test::gpu_node_cluster(2, 100);
    const double bytes = 10e9;
    auto graph = [&](int ranks) {
        OpGraph g(2);
        for (int r = 0; r < ranks; ++r)
            g.add_compute(r, Phase::opt, -1, -1, Flops(0), Bytes::from_double(bytes), KernelClass::optimizer, DType::fp32,
                          true, Stream::host);
        g.finalize();
        return g;
    };
    const OpGraph one = graph(1), two = graph(2);
    const Timeline a = simulate(one, c), b = simulate(two, c);
    CHECK(a.makespan.to_seconds() == Approx(bytes / 50e9).epsilon(1e-3));
    CHECK(b.makespan.to_seconds() == Approx(2 * bytes / 50e9).epsilon(1e-3));
    SECTION("a copy into host memory shares the DRAM's write side") {
        OpGraph g(2);
        g.add_compute(0, Phase::opt, -1, -1, Flops(0), Bytes::from_double(bytes), KernelClass::optimizer, DType::fp32, true,
                      Stream::host);
        g.add_copy(1, Tier::device, Tier::host, Bytes::from_double(bytes), Phase::opt);
        g.finalize();
        const Timeline t = simulate(g, c);
        // Alone, the copy runs at its 25 GB/s PCIe slot and the step at 50 GB/s of DRAM traffic
        // (20 GB on the wire at 100 GB/s); together the 100 GB/s write side is enough for both.
        CHECK(t.makespan.to_seconds() == Approx(bytes / 25e9).epsilon(1e-3));
    }
}

TEST_CASE("host steps on different nodes do not share DRAM", "[sim][host]") {
    // Two nodes of one GPU, a host step of B bytes on each at once: each node streams its own
    // DRAM (100 GB/s at 50 %), so both take B / 50 GB/s, as one alone does. (The host op's plan
    // was once cached per node group, putting every node's steps on the first node's DRAM.)
    const topo::Cluster c = test::gpu_node_cluster(1, 100).with_nodes(2);
    const double bytes = 10e9;
    OpGraph g(2);
    for (int r = 0; r < 2; ++r)
        g.add_compute(r, Phase::opt, -1, -1, Flops(0), Bytes::from_double(bytes), KernelClass::optimizer, DType::fp32, true,
                      Stream::host);
    g.finalize();
    CHECK(simulate(g, c).makespan.to_seconds() == Approx(bytes / 50e9).epsilon(1e-3));
}

TEST_CASE("host steps share the node's cores", "[sim][host]") {
    // Cores of 100 GFLOP/s and steps of 1e11 FLOPs over little memory: compute-bound. One takes
    // 1 s; two at once get half the cores each and take 2 s.
    const topo::Cluster c = test::gpu_node_cluster(2, 1000, 100);
    auto run = [&](int ranks) {
        OpGraph g(2);
        for (int r = 0; r < ranks; ++r)
            g.add_compute(r, Phase::opt, -1, -1, Flops(1e11), Bytes(1'000'000), KernelClass::optimizer, DType::fp32, true,
                          Stream::host);
        g.finalize();
        return simulate(g, c).makespan.to_seconds();
    };
    CHECK(run(1) == Approx(1.0).epsilon(1e-3));
    CHECK(run(2) == Approx(2.0).epsilon(1e-3));
}

TEST_CASE("a slow device computes at its speed, a slow NIC moves its share of the bandwidth", "[sim][speed]") {
    // Boards of 100 GFLOP/s: an op of 1e9 FLOPs takes 10 ms; at speed 0.5, 20 ms; in a group of
    // speed 0.5 with --slow 0.5 on top, 40 ms.
    topo::Cluster c = test::uniform_switch_cluster(2, 1, 0, 0);
    auto run = [](const topo::Cluster& cluster) {
        OpGraph g(2);
        const OpId a = g.add_compute(0, Phase::fwd, 0, 0, Flops(1e9), Bytes(0), KernelClass::elementwise, DType::fp32);
        const OpId b = g.add_compute(1, Phase::fwd, 0, 0, Flops(1e9), Bytes(0), KernelClass::elementwise, DType::fp32);
        g.finalize();
        const Timeline t = simulate(g, cluster);
        return std::pair{(t.end[a] - t.start[a]).to_seconds(), (t.end[b] - t.start[b]).to_seconds()};
    };
    CHECK(run(c).first == Approx(0.010).epsilon(1e-9));
    const auto [fast, slow] = run(c.with_slow_devices("1:0.5"));
    CHECK(fast == Approx(0.010).epsilon(1e-9));
    CHECK(slow == Approx(0.020).epsilon(1e-9));
    c.groups[0].speed = 0.5;
    CHECK(run(c).first == Approx(0.020).epsilon(1e-9));
    CHECK(run(c.with_slow_devices("1:0.5")).second == Approx(0.040).epsilon(1e-9));

    // 100 MB from rank 0 to rank 1 over 1 GB/s NICs without latency: 0.1 s; rank 1's NIC at a
    // quarter of its bandwidth: 0.4 s, whatever its compute speed.
    const topo::Cluster net = test::uniform_switch_cluster(2, 1, 0, 0);
    auto transfer = [](const topo::Cluster& cluster) {
        OpGraph g(2);
        g.add_send_recv(0, 1, Bytes(100'000'000), Phase::fwd, 0, 0);
        g.finalize();
        return simulate(g, cluster).makespan.to_seconds();
    };
    CHECK(transfer(net) == Approx(0.1).epsilon(1e-6));
    CHECK(transfer(net.with_slow_devices("1:1:nic=0.25")) == Approx(0.4).epsilon(1e-6));
    CHECK(transfer(net.with_slow_devices("1:0.5")) == Approx(0.1).epsilon(1e-6));
}

TEST_CASE("jitter is a pure function of the seed and the op", "[sim][speed]") {
    const topo::ComputeJitter j{10, 42};
    double sum = 0, lo = 2, hi = 0;
    for (OpId id = 0; id < 20000; ++id) {
        const double f = jitter_factor(j, id);
        CHECK(f == jitter_factor(j, id));
        sum += f;
        lo = std::min(lo, f);
        hi = std::max(hi, f);
    }
    // Uniform in [0.9, 1.1): the mean of 20,000 draws is 1 within 4 standard errors
    // (0.1 / √3 / √20000 = 0.0004), and the draws reach close to both ends.
    CHECK(sum / 20000 == Approx(1.0).margin(0.0017));
    CHECK(lo >= 0.9);
    CHECK(lo < 0.901);
    CHECK(hi < 1.1);
    CHECK(hi > 1.099);
    CHECK(jitter_factor({10, 43}, 7) != jitter_factor(j, 7));
    CHECK(jitter_factor({0, 42}, 7) == 1.0);

    // In a run: each op's time is its priced time (10 ms) times its own factor, whatever ran
    // before it; the same seed gives the same timeline, another seed another one.
    const topo::Cluster c = test::uniform_switch_cluster(2, 1, 0, 0);
    auto run = [&](std::uint64_t seed) {
        OpGraph g(2);
        for (int i = 0; i < 40; ++i)
            g.add_compute(i % 2, Phase::fwd, i, 0, Flops(1e9), Bytes(0), KernelClass::elementwise, DType::fp32);
        g.finalize();
        return std::pair{simulate(g, c.with_jitter(10, seed)), std::move(g)};
    };
    const auto [t1, g1] = run(42);
    for (OpId id = 0; id < g1.size(); ++id)
        CHECK((t1.end[id] - t1.start[id]).to_seconds() == Approx(0.010 * jitter_factor(j, id)).epsilon(1e-9));
    const auto [t2, g2] = run(42);
    CHECK(t2.start == t1.start);
    CHECK(t2.end == t1.end);
    CHECK(run(43).first.makespan != t1.makespan);
}

TEST_CASE("a stream served in arrival order runs its ops as they become ready, one at a time", "[sim][speed]") {
    // Rank 1 computes for 50 ms, then rank 0's op A (added first) may run; B, C have no
    // dependency. In program order B and C would wait behind A (ending at 80 ms); served in arrival
    // order they run at once, one after the other, and A when it is ready.
    const topo::Cluster c = test::uniform_switch_cluster(2, 1, 0, 0);
    OpGraph g(2);
    g.serve_in_arrival_order(0, Stream::compute);
    const OpId l = g.add_compute(1, Phase::fwd, 0, 0, Flops(5e9), Bytes(0), KernelClass::elementwise, DType::fp32);
    const OpId a = g.add_compute(0, Phase::fwd, 0, 0, Flops(1e9), Bytes(0), KernelClass::elementwise, DType::fp32);
    const OpId b = g.add_compute(0, Phase::fwd, 1, 0, Flops(1e9), Bytes(0), KernelClass::elementwise, DType::fp32);
    const OpId d = g.add_compute(0, Phase::fwd, 2, 0, Flops(1e9), Bytes(0), KernelClass::elementwise, DType::fp32);
    g.depend(l, a);
    g.finalize();
    const Timeline t = simulate(g, c);
    CHECK(t.start[b].to_seconds() == Approx(0.0).margin(1e-12));
    CHECK(t.start[d].to_seconds() == Approx(0.010).epsilon(1e-9));   // after B: one at a time
    CHECK(t.start[a].to_seconds() == Approx(0.050).epsilon(1e-9));
    CHECK(t.makespan.to_seconds() == Approx(0.060).epsilon(1e-9));

    SECTION("a stream must be served in arrival order before it has ops") {
        OpGraph h(1);
        h.add_compute(0, Phase::fwd, 0, 0, Flops(1), Bytes(0), KernelClass::elementwise, DType::fp32);
        CHECK_THROWS_WITH(h.serve_in_arrival_order(0, Stream::compute), Catch::Contains("already has ops"));
    }
}

TEST_CASE("a ring over nodes of unequal size keeps the smaller node's rails", "[sim][collectives]") {
    // Twelve GPUs of two DGX A100 nodes: eight on one, four on the other. NCCL builds each node's
    // rings from its own GPUs and NICs and all ranks keep the fewest channels (src/init.cc takes
    // the minimum of the ranks' ring graphs): the rings cross between the nodes on the four-GPU
    // node's 4 HDR NICs, 25 GB/s each, which set the time (2 nodes: NCCL's bus cap is the
    // intra-node channels', 192 GB/s, tuning.cc). A single ring through one port per node
    // boundary (the flat ring this replaced) could not pass 25 GB/s.
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2).first_devices(12);
    const Bytes S = Bytes::gib(1);
    const double moved = 2.0 * 11 / 12 * S.as_double();
    const Time ring = one_collective(c, CollectiveKind::all_reduce, S, CollectiveAlgo::ring);
    INFO("ring " << to_string(ring));
    CHECK(ring.to_seconds() == Approx(moved / (4 * 25e9)).epsilon(0.02));
    CHECK(ring.to_seconds() < moved / 25e9 / 3);
    // NCCL's tree likewise chains each node's GPUs, whatever their number.
    const Time tree = one_collective(c, CollectiveKind::all_reduce, S, CollectiveAlgo::tree);
    CHECK(tree.to_seconds() < moved / 25e9 / 2);
}
