#include <catch2/catch.hpp>

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

TEST_CASE("coupled flows share the rate of the group's most contended flow", "[sim][network]") {
    // Group {a on L0, b on L1}; c alone on L1. L0 = L1 = 10 GB/s. Uncoupled: a = 10, b = c = 5.
    // Coupled: b's share on L1 is 5, so a is held at 5 too; c keeps 5 (L1 is full at 5 + 5).
    FlowNetwork net({Bandwidth::gb_per_s(10), Bandwidth::gb_per_s(10)});
    const std::vector<std::int32_t> l0{0}, l1{1};
    const FlowId a = net.start(l0, Bytes::gb(1), 0, Time::zero(), 0);
    const FlowId b = net.start(l1, Bytes::gb(1), 0, Time::zero(), 0);
    const FlowId c = net.start(l1, Bytes::gb(1), 1, Time::zero());
    net.solve(Time::zero());
    CHECK(net.rate(a).to_gb_per_s() == Approx(5));
    CHECK(net.rate(b).to_gb_per_s() == Approx(5));
    CHECK(net.rate(c).to_gb_per_s() == Approx(5));
    // Both group members finish together, with c: one completion batch.
    std::vector<std::uint32_t> tags;
    net.complete(net.next_completion(), tags);
    CHECK(tags.size() == 3);
}
