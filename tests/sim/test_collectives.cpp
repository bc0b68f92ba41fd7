// The collectives' route facts: PhaseRouteCache finds a phase's routes once per set of endpoints,
// and a prediction from it is the one the routes give flow by flow.
#include <catch2/catch.hpp>

#include <set>

#include "sim/collectives.hpp"
#include "sim_fixtures.hpp"
#include "topologies/topology.hpp"

using namespace smol;
using namespace smol::sim;

namespace {

/// The routes and placement of `c`, as the simulator builds them; `cache` may be null.
CollectiveContext context(const topo::Cluster& c, const topo::Topology& t, PhaseRouteCache* cache) {
    CollectiveContext ctx;
    ctx.routes.route = [&t](int a, int b) { return t.route(t.device_vertex(a), t.device_vertex(b)); };
    ctx.routes.latency = [&t](int a, int b) { return t.route_latency(t.device_vertex(a), t.device_vertex(b)); };
    for (const auto& l : t.links()) ctx.routes.link_bandwidth.push_back(l.bandwidth);
    ctx.routes.cache = cache;
    ctx.node_of = [&c](int r) { return c.device(r).node; };
    ctx.nic_of = [&c](int r) {
        const topo::DeviceRef d = c.device(r);
        return d.node * 4096 + c.groups[static_cast<std::size_t>(d.group)].nic_of(d.local);
    };
    ctx.gpu = !c.groups.front().device.is_cpu;
    ctx.cluster = &c;
    return ctx;
}

CollectivePhase phase(std::initializer_list<std::pair<int, int>> ends, Bytes bytes) {
    CollectivePhase ph;
    for (const auto& [a, b] : ends) ph.flows.push_back({a, b, bytes});
    return ph;
}

}  // namespace

TEST_CASE("a phase's cached routes count the flows crossing each link", "[sim][collectives]") {
    // Four boards on one switch: a route is board → NIC → switch → NIC → board, and only the two
    // NIC links of a route are shared between flows leaving or entering the same board.
    const topo::Cluster c = test::uniform_switch_cluster(4, 1.0, 2.0, 1.0);
    const topo::Topology t(c);
    PhaseRouteCache cache;
    const CollectiveContext ctx = context(c, t, nullptr);
    const auto count_of = [](const PhaseRouteCache::Routes& r, std::int32_t link) {
        for (const auto& [l, n] : r.links)
            if (l == link) return n;
        return 0u;
    };
    const auto ring = phase({{0, 1}, {1, 2}, {2, 3}, {3, 0}}, Bytes(1000));
    const auto fan = phase({{0, 1}, {0, 2}, {0, 3}}, Bytes(1000));
    const PhaseRouteCache::Routes r = cache.of(ring, ctx.routes);   // copies: the cache grows below
    const PhaseRouteCache::Routes f = cache.of(fan, ctx.routes);
    std::size_t hops = 0;
    for (const auto& fl : ring.flows) {
        const auto route = ctx.routes.route(fl.src, fl.dst);
        hops += route.size();
        for (std::int32_t l : route) CHECK(count_of(r, l) == 1);   // a ring's links each carry one flow
    }
    CHECK(r.links.size() == hops);
    // Board 0's way out carries all three of the fan's flows; each destination's way in one.
    for (std::int32_t l : ctx.routes.route(0, 1)) {
        bool shared = false;
        for (std::int32_t m : ctx.routes.route(0, 2)) shared = shared || m == l;
        CHECK(count_of(f, l) == (shared ? 3u : 1u));
    }
    // The longest route latency: every route here crosses the same hops.
    CHECK(r.wire == ctx.routes.latency(0, 1));
    // Asked again, the ring gets its own entry back, not the fan's.
    CHECK(cache.of(ring, ctx.routes).links == r.links);
    CHECK(cache.of(fan, ctx.routes).links == f.links);
}

TEST_CASE("predictions from cached routes equal those found flow by flow", "[sim][collectives]") {
    // Every algorithm the tuners consider, over a rail-optimized fat tree (dgx-a100) and over
    // boards on Ethernet (pi5-1gbe), at several sizes — even splits and the uneven ones of a
    // rooted chain — each priced twice from the cache (the second a hit) and once without.
    const auto [preset, nodes] = GENERATE(std::make_pair("dgx-a100", 4), std::make_pair("pi5-1gbe", 8));
    const topo::Cluster c = topo::cluster_preset(preset).with_nodes(nodes);
    const topo::Topology t(c);
    PhaseRouteCache cache;
    const CollectiveContext plain = context(c, t, nullptr), cached = context(c, t, &cache);
    std::vector<int> members;
    for (int r = 0; r < c.num_devices(); ++r) members.push_back(r);
    int compared = 0;
    for (const CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                                      CollectiveKind::broadcast, CollectiveKind::reduce})
        for (const CollectiveAlgo algo : {CollectiveAlgo::ring, CollectiveAlgo::tree, CollectiveAlgo::halving_doubling,
                                          CollectiveAlgo::hierarchical, CollectiveAlgo::direct})
            for (const std::int64_t bytes : {std::int64_t{4}, std::int64_t{1000003}, std::int64_t{25} << 20}) {
                if (!applicable(algo, kind, members, plain)) continue;
                const int root = kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce ? 3 : -1;
                CollectiveSchedule s = decompose(kind, members, Bytes(bytes), root, algo, plain);
                for (const Protocol p : {Protocol::simple, Protocol::host}) {
                    s.protocol = p;
                    INFO(preset << " " << to_string(algo) << " " << bytes << " B, protocol " << to_string(p));
                    const Time expected = predict(s, plain.routes);
                    CHECK(predict(s, cached.routes) == expected);
                    CHECK(predict(s, cached.routes) == expected);
                    for (const auto& ph : s.phases) CHECK(step_latency(ph, p, cached.routes) == step_latency(ph, p, plain.routes));
                    ++compared;
                }
            }
    CHECK(compared >= 20);
    // And the tuners' choice is the same schedule at the same predicted time.
    for (const std::int64_t bytes : {std::int64_t{4096}, std::int64_t{64} << 20}) {
        const CollectiveSchedule a = choose(CollectiveKind::all_reduce, members, Bytes(bytes), -1, CollectiveAlgo::automatic, plain);
        const CollectiveSchedule b = choose(CollectiveKind::all_reduce, members, Bytes(bytes), -1, CollectiveAlgo::automatic, cached);
        CHECK(a.algo == b.algo);
        CHECK(a.protocol == b.protocol);
        CHECK(predict(a, plain.routes) == predict(b, cached.routes));
    }
}

TEST_CASE("NCCL's tree all-reduce leaves every node on all of its rails", "[sim][collectives]") {
    // Four DGX A100 nodes: NCCL's channels spread over the 8 NICs (src/graph/connect.cc
    // connectTrees heads each channel's chain on the GPU of its NIC), so every GPU sends to other
    // nodes and the inter-node bytes split 8 ways: each rail's pair of binary trees over the 4
    // nodes carries 1/8 of the buffer, half on each tree.
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(4);
    const topo::Topology t(c);
    const CollectiveContext ctx = context(c, t, nullptr);
    std::vector<int> members(32);
    for (int r = 0; r < 32; ++r) members[static_cast<std::size_t>(r)] = r;
    const Bytes S = Bytes::mib(64);
    const CollectiveSchedule s = decompose(CollectiveKind::all_reduce, members, S, -1, CollectiveAlgo::tree, ctx);
    REQUIRE(s.phases.size() == 1);
    std::set<int> senders;
    double inter = 0;
    for (const FlowSpec& f : s.phases.front().flows) {
        if (c.device(f.src).node == c.device(f.dst).node) continue;
        senders.insert(f.src);
        CHECK(f.bytes.as_double() == Approx(S.as_double() / 16));
        inter += f.bytes.as_double();
    }
    CHECK(senders.size() == 32);
    // Per rail, two trees of 3 edges each, every edge up and down: 12 flows of S/16.
    CHECK(inter == Approx(8 * 12 * S.as_double() / 16));
}
