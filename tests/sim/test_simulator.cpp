#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.hpp"
#include "sim/simulator.hpp"
#include "sim_fixtures.hpp"

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
    // flow: one flow completion and one phase end.
    o.network = NetworkMode::flow;
    CHECK(simulate(g, c, o).events == 5 + 1 + 1);
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
