// A run over link classes (sim/link_classes.hpp) against the same run over the links (a run
// recording link samples keeps them): every strategy family, every op at the same picosecond.
#include <catch2/catch.hpp>

#include "sim/simulator.hpp"
#include "strategies/plan.hpp"

using namespace smol;
using namespace smol::sim;

namespace {

/// The plan simulated over link classes and over the links (record_links keeps them): every op
/// starts and ends at the same picosecond.
void same_run(const std::string& model, const topo::Cluster& cluster, const strategies::Plan& plan) {
    const strategies::Built built = strategies::build(model_preset(model), cluster, plan);
    SimOptions over_classes, over_links;
    over_links.record_links = true;
    const Timeline a = simulate(built.graph, cluster, over_classes);
    const Timeline b = simulate(built.graph, cluster, over_links);
    CHECK(a.makespan == b.makespan);
    CHECK(a.start == b.start);
    CHECK(a.end == b.end);
    CHECK(a.events == b.events);
}

}  // namespace

TEST_CASE("a run over link classes is the run over the links, op for op", "[strategies][link_classes]") {
    using strategies::DataParallel;
    strategies::Plan p;
    p.global_batch = 16;
    SECTION("DDP over six Pis (MPI)") {
        p.strategy = DataParallel::ddp;
        p.global_batch = 24;
        same_run("gpt2-small", topo::cluster_preset("pi5-1gbe").with_nodes(6), p);
    }
    SECTION("ZeRO-3 over two DGX A100, folded") {
        p.strategy = DataParallel::zero3;
        p.recompute = Recompute::full;
        same_run("gpt2-small", topo::cluster_preset("dgx-a100").with_nodes(2), p);
    }
    SECTION("FSDP hybrid sharding, not folded") {
        p.strategy = DataParallel::fsdp;
        p.fsdp_sharding = strategies::FsdpSharding::hybrid;
        same_run("gpt2-small", topo::cluster_preset("dgx-a100").with_nodes(2), p);
    }
    SECTION("tensor and pipeline parallelism with data parallelism") {
        p.strategy = DataParallel::ddp;
        p.tp = 4;
        p.pp = 2;
        p.global_batch = 32;
        same_run("gpt2-medium", topo::cluster_preset("dgx-a100").with_nodes(2), p);
    }
    SECTION("a parameter server") {
        p.strategy = DataParallel::ps;
        p.global_batch = 24;
        same_run("resnet50", topo::cluster_preset("pi5-1gbe").with_nodes(4), p);
    }
    SECTION("ZeRO-Offload: host optimizer steps and copies over PCIe") {
        p.strategy = DataParallel::zero2;
        p.offload_optimizer = strategies::Offload::cpu;
        same_run("gpt2-small", topo::cluster_preset("workstation-4gpu"), p);
    }
}
