// SimOptions::link_ranks: a run that samples only the links some ranks' traffic crosses (a trace
// of a few ranks of a big cluster) is the same run, and samples those links exactly as a run that
// samples every link.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "sim/simulator.hpp"
#include "strategies/plan.hpp"

using namespace smol;
using namespace smol::sim;

namespace {

using Samples = std::map<std::string, std::vector<std::pair<std::int64_t, float>>>;

Samples by_link(const Timeline& t) {
    Samples out;
    for (const LinkSample& s : t.links)
        out[t.link_names[static_cast<std::size_t>(s.link)]].emplace_back(s.time.count_ps(), s.utilisation);
    return out;
}

/// The plan run twice, sampling every link and only `ranks`' links: the same op times, and the
/// second run's links a subset of the first's with the same samples. Returns both runs' links.
std::pair<Samples, Samples> both(const std::string& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                                 std::vector<int> ranks) {
    const strategies::Built built = strategies::build(model_preset(model), cluster, plan);
    SimOptions all, some;
    all.record_links = some.record_links = true;
    some.link_ranks = std::move(ranks);
    const Timeline a = simulate(built.graph, cluster, all);
    const Timeline b = simulate(built.graph, cluster, some);
    CHECK(a.makespan == b.makespan);
    CHECK(a.start == b.start);
    CHECK(a.end == b.end);
    Samples sa = by_link(a), sb = by_link(b);
    for (const auto& [name, samples] : sb) {
        INFO(name);
        REQUIRE(sa.count(name) == 1);
        CHECK(sa.at(name) == samples);
    }
    return {std::move(sa), std::move(sb)};
}

bool any_of_node(const Samples& s, const std::string& node) {
    for (const auto& [name, samples] : s)
        if (name.find(node + "/") != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("a run sampling some ranks' links samples the links their traffic crosses, as a full run does",
          "[strategies][trace][links]") {
    strategies::Plan p;
    SECTION("a pipeline over four Pis: rank 0 talks to ranks 1 and 3, not 2") {
        p.strategy = strategies::DataParallel::ddp;
        p.pp = 4;
        p.global_batch = 8;
        const auto [all, some] = both("gpt2-small", topo::cluster_preset("pi5-1gbe").with_nodes(4), p, {0});
        // Every node's links carry traffic in the full run. Rank 0 sends activations to and
        // receives gradients from stage 1 (node 1), and all-reduces the tied embedding's gradient
        // with the last stage (node 3: Megatron's embedding group); nothing of it crosses node 2.
        for (const std::string node : {"node0", "node1", "node2", "node3"}) CHECK(any_of_node(all, node));
        CHECK(any_of_node(some, "node0"));
        CHECK(any_of_node(some, "node1"));
        CHECK(any_of_node(some, "node3"));
        CHECK_FALSE(any_of_node(some, "node2"));
    }
    SECTION("ZeRO-3 over four DGX A100, folded: rank 0's ring neighbours, not every node's links") {
        p.strategy = strategies::DataParallel::zero3;
        p.global_batch = 32;
        const auto [all, some] = both("gpt2-small", topo::cluster_preset("dgx-a100").with_nodes(4), p, {0});
        CHECK(any_of_node(some, "node0"));
        CHECK(some.size() < all.size());
        // Rank 0's flows go to its neighbours in NCCL's rings: GPU 1 over the NVSwitch and GPU 0
        // of the nodes before and after it over rail 0. GPU 5's links carry others' traffic only.
        auto gpu5 = [](const Samples& s) {
            return std::count_if(s.begin(), s.end(), [](const auto& l) { return l.first.find("gpu5") != std::string::npos; });
        };
        CHECK(gpu5(all) > 0);
        CHECK(gpu5(some) == 0);
    }
    SECTION("every rank named: every link") {
        p.strategy = strategies::DataParallel::ddp;
        p.global_batch = 8;
        const topo::Cluster pis = topo::cluster_preset("pi5-1gbe").with_nodes(2);
        const auto [all, some] = both("gpt2-small", pis, p, {0, 1});
        CHECK(some.size() == all.size());
    }
}
