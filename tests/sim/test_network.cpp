#include <catch2/catch.hpp>

#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "sim/network.hpp"

using namespace smol;
using namespace smol::sim;

namespace {
double gbps(const FlowNetwork& n, FlowId f) { return n.rate(f).to_gb_per_s(); }
}  // namespace

TEST_CASE("a flow alone gets its bottleneck link's rate", "[sim][network]") {
    FlowNetwork net({Bandwidth::gb_per_s(10), Bandwidth::gb_per_s(4), Bandwidth::gb_per_s(10)});
    const std::vector<std::int32_t> route{0, 1, 2};
    const FlowId f = net.start(route, Bytes::gb(2), 7, Time::zero());
    net.solve(Time::zero());
    CHECK(gbps(net, f) == Approx(4));
    // 2 GB at 4 GB/s: 0.5 s.
    CHECK(net.next_completion() == Time::ms(500));
    std::vector<std::uint32_t> tags;
    net.complete(Time::ms(500), tags);
    CHECK(tags == std::vector<std::uint32_t>{7});
    CHECK(net.active_flows() == 0);
}

TEST_CASE("two flows on one link each get half", "[sim][network]") {
    FlowNetwork net({Bandwidth::gb_per_s(10)});
    const std::vector<std::int32_t> route{0};
    const FlowId a = net.start(route, Bytes::gb(1), 0, Time::zero());
    const FlowId b = net.start(route, Bytes::gb(1), 1, Time::zero());
    net.solve(Time::zero());
    CHECK(gbps(net, a) == Approx(5));
    CHECK(gbps(net, b) == Approx(5));
    CHECK(net.next_completion() == Time::ms(200));
}

TEST_CASE("max-min fairness on a hand-solved example: three links, four flows", "[sim][network]") {
    // Links: L0 12 GB/s, L1 10 GB/s, L2 4 GB/s. Flows: f0 {L0}, f1 {L0, L1}, f2 {L1, L2}, f3 {L2}.
    // Progressive filling: L2 offers 4/2 = 2 → f2 = f3 = 2. Then L0 offers 12/2 = 6 and L1 offers
    // (10 − 2)/1 = 8 → f0 = f1 = 6. L1 carries 6 + 2 = 8 ≤ 10; no flow can grow without shrinking
    // a smaller one.
    FlowNetwork net({Bandwidth::gb_per_s(12), Bandwidth::gb_per_s(10), Bandwidth::gb_per_s(4)});
    const std::vector<std::int32_t> r0{0}, r1{0, 1}, r2{1, 2}, r3{2};
    const FlowId f0 = net.start(r0, Bytes::gb(100), 0, Time::zero());
    const FlowId f1 = net.start(r1, Bytes::gb(100), 1, Time::zero());
    const FlowId f2 = net.start(r2, Bytes::gb(100), 2, Time::zero());
    const FlowId f3 = net.start(r3, Bytes::gb(100), 3, Time::zero());
    net.solve(Time::zero());
    CHECK(gbps(net, f0) == Approx(6));
    CHECK(gbps(net, f1) == Approx(6));
    CHECK(gbps(net, f2) == Approx(2));
    CHECK(gbps(net, f3) == Approx(2));
}

TEST_CASE("rates are recomputed when flows start and end", "[sim][network]") {
    // f0: 1 GB from t = 0 on a 1 GB/s link; f1: 0.25 GB from t = 0.5 s. They share from 0.5 s:
    // f1 ends at 1.0 s; f0 has 0.5 GB left at 0.5 s, moves 0.25 GB by 1.0 s, then 0.25 GB alone:
    // it ends at 1.25 s.
    FlowNetwork net({Bandwidth::gb_per_s(1)});
    const std::vector<std::int32_t> route{0};
    net.start(route, Bytes::gb(1), 0, Time::zero());
    net.solve(Time::zero());
    CHECK(net.next_completion() == Time::seconds(1));
    net.start(route, Bytes::gb(0.25), 1, Time::ms(500));
    net.solve(Time::ms(500));
    std::vector<std::uint32_t> tags;
    CHECK(net.next_completion() == Time::seconds(1));
    net.complete(Time::seconds(1), tags);
    CHECK(tags == std::vector<std::uint32_t>{1});
    net.solve(Time::seconds(1));
    CHECK(net.next_completion() == Time::ms(1250));
}

TEST_CASE("an empty transfer finishes at once", "[sim][network]") {
    FlowNetwork net({Bandwidth::gb_per_s(1)});
    const std::vector<std::int32_t> route{0};
    net.start(route, Bytes(0), 3, Time::us(7));
    net.solve(Time::us(7));
    CHECK(net.next_completion() == Time::us(7));
}

TEST_CASE("an aggregated flow moves its members at the rate of the most contended one", "[sim][network]") {
    // Members {a on L0, b on L1} as one flow; c alone on L1. L0 = L1 = 10 GB/s. Apart: a = 10,
    // b = c = 5. Aggregated: b's share on L1 is 5, so a is held at 5 too; c keeps 5 (L1 is full).
    FlowNetwork net({Bandwidth::gb_per_s(10), Bandwidth::gb_per_s(10)});
    const std::vector<std::int32_t> ab{0, 1}, l1{1};
    const FlowId g = net.start(ab, Bytes::gb(1), 0, Time::zero());
    const FlowId c = net.start(l1, Bytes::gb(1), 1, Time::zero());
    net.solve(Time::zero());
    CHECK(gbps(net, g) == Approx(5));
    CHECK(gbps(net, c) == Approx(5));
    // The members finish together, with c: one completion batch of two flows.
    std::vector<std::uint32_t> tags;
    net.complete(net.next_completion(), tags);
    CHECK(tags.size() == 2);
}

TEST_CASE("a link's load counts every member of an aggregated flow", "[sim][network]") {
    // Three members on L0 (12 GB/s) with one plain flow: four equal shares of 3 GB/s. Then a cap
    // of 2 GB/s on the members leaves 12 − 3·2 = 6 to the plain flow.
    const std::vector<std::int32_t> l0{0};
    const std::vector<std::uint32_t> three{3};
    {
        FlowNetwork net({Bandwidth::gb_per_s(12)});
        const FlowId g = net.start(l0, Bytes::gb(1), 0, Time::zero(), Bandwidth(), three);
        const FlowId f = net.start(l0, Bytes::gb(1), 1, Time::zero());
        net.solve(Time::zero());
        CHECK(gbps(net, g) == Approx(3));
        CHECK(gbps(net, f) == Approx(3));
    }
    FlowNetwork net({Bandwidth::gb_per_s(12)});
    const FlowId g = net.start(l0, Bytes::gb(1), 0, Time::zero(), Bandwidth::gb_per_s(2), three);
    const FlowId f = net.start(l0, Bytes::gb(1), 1, Time::zero());
    net.solve(Time::zero());
    CHECK(gbps(net, g) == Approx(2));
    CHECK(gbps(net, f) == Approx(6));
}

namespace {

struct RefFlow {
    std::vector<std::int32_t> links;
    std::vector<std::uint32_t> weights;
    double cap;   // GB/s, 0: none
};

/// Max-min fair rates from scratch, the textbook way (Bertsekas & Gallager, Data Networks §6.5.2,
/// progressive filling): raise every unfrozen flow's rate together; the first link to fill (or
/// cap to be reached) freezes the flows it limits; repeat. Quadratic, and independent of
/// FlowNetwork's heaps, held flows and checks.
std::vector<double> reference_rates(const std::vector<double>& capacity, const std::vector<RefFlow>& flows) {
    std::vector<double> rate(flows.size(), 0);
    std::vector<bool> frozen(flows.size(), false);
    std::vector<double> residual = capacity;
    for (;;) {
        std::vector<double> weight(capacity.size(), 0);
        bool any = false;
        for (std::size_t f = 0; f < flows.size(); ++f) {
            if (frozen[f]) continue;
            any = true;
            for (std::size_t h = 0; h < flows[f].links.size(); ++h) weight[flows[f].links[h]] += flows[f].weights[h];
        }
        if (!any) return rate;
        double level = std::numeric_limits<double>::infinity();
        for (std::size_t l = 0; l < capacity.size(); ++l)
            if (weight[l] > 0) level = std::min(level, residual[l] / weight[l]);
        for (std::size_t f = 0; f < flows.size(); ++f)
            if (!frozen[f] && flows[f].cap > 0) level = std::min(level, flows[f].cap - rate[f]);
        // Raise everyone by `level`, then freeze the flows on full links and at their caps.
        for (std::size_t f = 0; f < flows.size(); ++f) {
            if (frozen[f]) continue;
            rate[f] += level;
            for (std::size_t h = 0; h < flows[f].links.size(); ++h) residual[flows[f].links[h]] -= level * flows[f].weights[h];
        }
        for (std::size_t f = 0; f < flows.size(); ++f) {
            if (frozen[f]) continue;
            bool stop = flows[f].cap > 0 && rate[f] >= flows[f].cap * (1 - 1e-12);
            for (std::int32_t l : flows[f].links) stop = stop || (weight[l] > 0 && residual[l] <= capacity[l] * 1e-12);
            if (stop) frozen[f] = true;
        }
    }
}

/// A random flow over `links` links: 1 to `max_hops` distinct ones, each of weight 1 or, one time
/// in `heavy_one_in`, 2 to `max_weight`; a cap one time in three.
template <class Uniform, class Rng>
RefFlow random_flow(Uniform& uniform, Rng& rng, int links, int max_hops, int heavy_one_in, int max_weight) {
    RefFlow r;
    const int hops = uniform(1, std::min(max_hops, links));
    std::vector<int> all(static_cast<std::size_t>(links));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    for (int h = 0; h < hops; ++h) {
        r.links.push_back(all[static_cast<std::size_t>(h)]);
        r.weights.push_back(uniform(0, heavy_one_in - 1) == 0 ? static_cast<std::uint32_t>(uniform(2, max_weight)) : 1u);
    }
    r.cap = uniform(0, 2) == 0 ? uniform(1, 10) * 1.5 : 0;
    return r;
}

}  // namespace

TEST_CASE("incremental solves give the rates of a fill from scratch", "[sim][network]") {
    // Random fabrics and random sequences of starts and completions, with caps (some flows
    // cap-limited, some link-limited) and aggregated flows; after every solve each active flow's
    // rate must equal the textbook progressive filling of all active flows.
    const int seed = GENERATE(range(1, 41));
    std::mt19937 rng(static_cast<unsigned>(seed));
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int links = uniform(3, 24);
    std::vector<double> capacity;   // GB/s
    std::vector<Bandwidth> bw;
    for (int l = 0; l < links; ++l) {
        capacity.push_back(uniform(1, 8) * 5.0);
        bw.push_back(Bandwidth::gb_per_s(capacity.back()));
    }
    FlowNetwork net(bw);
    std::deque<RefFlow> specs;   // stable storage for the spans
    std::map<FlowId, std::size_t> live;   // network flow → its spec
    std::map<std::uint32_t, FlowId> by_tag;
    Time now = Time::zero();
    std::uint32_t next_tag = 0;
    int checked = 0;
    for (int event = 0; event < 60; ++event) {
        // Start one to three flows now.
        const int starts = uniform(1, 3);
        for (int k = 0; k < starts; ++k) {
            specs.push_back(random_flow(uniform, rng, links, 5, 4, 4));
            const RefFlow& s = specs.back();
            const FlowId f = net.start(s.links, Bytes::mb(uniform(1, 400)), next_tag, now,
                                       s.cap > 0 ? Bandwidth::gb_per_s(s.cap) : Bandwidth(), s.weights);
            live[f] = specs.size() - 1;
            by_tag[next_tag++] = f;
        }
        net.solve(now);
        std::vector<RefFlow> active;
        std::vector<FlowId> ids;
        for (const auto& [f, i] : live) {
            active.push_back(specs[i]);
            ids.push_back(f);
        }
        const std::vector<double> want = reference_rates(capacity, active);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            INFO("seed " << seed << " event " << event << " flow " << ids[i]);
            CHECK(gbps(net, ids[i]) == Approx(want[i]).epsilon(1e-9));
            ++checked;
        }
        // Run to the next completion (or a random earlier instant) and retire what finished.
        const Time next = net.next_completion();
        REQUIRE(next != Time::max());
        if (uniform(0, 1) == 0) {
            std::vector<std::uint32_t> tags;
            now = next;
            net.complete(now, tags);
            for (std::uint32_t t : tags) live.erase(by_tag.at(t));
        } else {
            now = Time::ps(now.count_ps() + (next - now).count_ps() / 2);
        }
    }
    CHECK(checked > 60);
}

TEST_CASE("a start refills only the flows it can change", "[sim][network]") {
    // 200 flows, each alone on its own link and sharing one wide spine link, all held by their
    // own links: a new flow on a free link of its own and the spine changes nobody's rate, so the
    // solve refills it alone — not the 200 flows the spine connects it to.
    std::vector<Bandwidth> bw(201, Bandwidth::gb_per_s(10));
    bw.back() = Bandwidth::gb_per_s(10000);   // the spine
    FlowNetwork net(bw);
    std::vector<std::vector<std::int32_t>> routes;
    for (std::int32_t l = 0; l < 200; ++l) routes.push_back({l, 200});
    for (std::int32_t l = 0; l < 199; ++l) net.start(routes[static_cast<std::size_t>(l)], Bytes::gb(10), 0, Time::zero());
    net.solve(Time::zero());
    const std::uint64_t before = net.refilled();
    const FlowId f = net.start(routes.back(), Bytes::gb(10), 1, Time::ms(1));
    net.solve(Time::ms(1));
    CHECK(net.refilled() - before == 1);
    CHECK(gbps(net, f) == Approx(10));
}

TEST_CASE("a flow alone is solved off its links and entered on them when another joins", "[sim][network]") {
    // A: 2 GB, two members on L0 (10 GB/s), one on L1 (4 GB/s): alone, min(10 / 2, 4 / 1) = 4 GB/s.
    // At 0.25 s (1 GB left) B, 0.5 GB on L1, joins: L1 splits 2 + 2 (L0 then carries 2 × 2 ≤ 10),
    // B ends at 0.5 s; A, 0.5 GB left, is alone again at 4 GB/s and ends at 0.625 s.
    FlowNetwork net({Bandwidth::gb_per_s(10), Bandwidth::gb_per_s(4)});
    const std::vector<std::int32_t> both{0, 1}, l1{1};
    const std::vector<std::uint32_t> weights{2, 1};
    const FlowId a = net.start(both, Bytes::gb(2), 0, Time::zero(), Bandwidth(), weights);
    net.solve(Time::zero());
    CHECK(gbps(net, a) == Approx(4));
    CHECK(net.next_completion() == Time::ms(500));
    const FlowId b = net.start(l1, Bytes::gb(0.5), 1, Time::ms(250));
    net.solve(Time::ms(250));
    CHECK(gbps(net, a) == Approx(2));
    CHECK(gbps(net, b) == Approx(2));
    std::vector<std::uint32_t> tags;
    CHECK(net.next_completion() == Time::ms(500));
    net.complete(Time::ms(500), tags);
    CHECK(tags == std::vector<std::uint32_t>{1});
    net.solve(Time::ms(500));
    CHECK(gbps(net, a) == Approx(4));
    CHECK(net.next_completion() == Time::ms(625));
    net.complete(Time::ms(625), tags);
    CHECK(net.active_flows() == 0);
    // A flow capped below its links is bound by its cap alone too.
    const FlowId c = net.start(both, Bytes::gb(1), 2, Time::ms(625), Bandwidth::gb_per_s(1), weights);
    net.solve(Time::ms(625));
    CHECK(gbps(net, c) == Approx(1));
    CHECK(net.next_completion() == Time::ms(1625));
}

TEST_CASE("solving flows alone off their links changes no rate and no completion", "[sim][network]") {
    // The same random sequences of starts and completions (alone, then joined, often) on two
    // networks: one records link samples, which keeps every flow on its links (and refills the
    // flows of every link a flow starts on, so its rates may differ in the last bits).
    const int seed = GENERATE(range(1, 21));
    std::mt19937 rng(static_cast<unsigned>(seed));
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int links = uniform(2, 12);
    std::vector<Bandwidth> bw;
    for (int l = 0; l < links; ++l) bw.push_back(Bandwidth::gb_per_s(uniform(1, 8) * 5.0));
    FlowNetwork fast(bw), kept(bw);
    std::vector<LinkSample> samples;
    kept.record_links(&samples);
    std::deque<RefFlow> specs;
    Time now = Time::zero();
    std::uint32_t tag = 0;
    int compared = 0;
    std::map<std::uint32_t, FlowId> live;   // tag → flow
    for (int event = 0; event < 80; ++event) {
        const int starts = uniform(0, 3) == 0 ? 2 : 1;   // mostly one at a time: alone often
        for (int k = 0; k < starts; ++k) {
            specs.push_back(random_flow(uniform, rng, links, 4, 3, 5));
            const RefFlow& s = specs.back();
            const Bytes bytes = Bytes::mb(uniform(1, 400));
            const Bandwidth cap = s.cap > 0 ? Bandwidth::gb_per_s(s.cap) : Bandwidth();
            const FlowId f = fast.start(s.links, bytes, tag, now, cap, s.weights);
            REQUIRE(kept.start(s.links, bytes, tag, now, cap, s.weights) == f);
            live[tag++] = f;
        }
        fast.solve(now);
        kept.solve(now);
        for (const auto& [t, f] : live) {
            INFO("seed " << seed << " event " << event << " flow " << f);
            CHECK(fast.rate(f).bytes_per_second() == Approx(kept.rate(f).bytes_per_second()).epsilon(1e-12));
            ++compared;
        }
        const Time next = fast.next_completion();
        REQUIRE(next.count_ps() == Approx(kept.next_completion().count_ps()).epsilon(1e-12).margin(1));
        REQUIRE(next != Time::max());
        if (uniform(0, 2) > 0) {   // run to the completion, usually: the survivor is alone
            std::vector<std::uint32_t> a, b;
            now = next;
            fast.complete(now, a);
            kept.complete(kept.next_completion(), b);
            REQUIRE(a == b);
            for (std::uint32_t t : a) live.erase(t);
        } else {
            now = Time::ps(now.count_ps() + (next - now).count_ps() / 2);
        }
    }
    CHECK(compared > 80);
}
