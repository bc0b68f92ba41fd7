// Framework behaviour as data: releases resolve to the latest row at or before them, and the
// behaviours change the graph the way the frameworks' code does.
#include <catch2/catch.hpp>

#include "sim/simulator.hpp"
#include "strategies/framework.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;

TEST_CASE("a release means the behaviour of the latest release at or before it", "[strategies][framework]") {
    CHECK(parse_framework("deepspeed@0.5.10").zero3_gather == GatherGranularity::per_tensor);
    CHECK(parse_framework("deepspeed@0.5.10").zero3_blocking_fetch);
    CHECK(parse_framework("deepspeed@0.6").zero3_gather == GatherGranularity::per_module);
    CHECK(parse_framework("deepspeed@0.14.2").zero3_gather == GatherGranularity::per_module);
    CHECK_FALSE(parse_framework("deepspeed").zero3_blocking_fetch);
    // Megatron-LM v2.x is older than megatron-core 0.x: only the latter can overlap.
    CHECK_FALSE(parse_framework("megatron@2.5").can_overlap_grad_reduce);
    CHECK(parse_framework("megatron@0.8").can_overlap_grad_reduce);
    CHECK(parse_framework("megatron").can_overlap_grad_reduce);
    CHECK(describe(parse_framework("megatron@2.5")) == "megatron@2.5");
    CHECK(parse_framework("pytorch").grad_reduce == GradReduce::overlapped);
    CHECK(parse_framework("megatron").grad_reduce == GradReduce::after_backward);
}

TEST_CASE("bad framework specs name --framework", "[strategies][framework]") {
    SECTION("unknown name") {
        const std::string m = test::bad_input_message([] { parse_framework("megatorn"); });
        CHECK_THAT(m, Catch::Contains("--framework") && Catch::Contains("did you mean 'megatron'"));
    }
    SECTION("not a release number") {
        CHECK_THAT(test::bad_input_message([] { parse_framework("deepspeed@latest"); }), Catch::Contains("release number"));
    }
    SECTION("older than every row") {
        CHECK_THAT(test::bad_input_message([] { parse_framework("pytorch@0.4"); }), Catch::Contains("older than"));
    }
    SECTION("a strategy the framework does not run") {
        const Model m = model_preset("gpt2-small");
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        Plan p;
        p.strategy = DataParallel::fsdp;
        p.framework = "deepspeed";
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("does not run on deepspeed"));
        p.strategy = DataParallel::ddp;
        p.framework = "pytorch";
        p.overlap_grad_reduce = true;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("--overlap-grad-reduce"));
    }
}

namespace {

/// When the first gradient collective starts and when the last backward ends, on rank 0.
std::pair<Time, Time> first_sync_and_last_backward(const Plan& p) {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const Built b = build(m, c, p);
    const Timeline tl = sim::simulate(b.graph, c);
    Time first_sync = Time::max(), last_bwd;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != 0) continue;
        if (op.kind == OpKind::collective && op.phase == Phase::comm) first_sync = std::min(first_sync, tl.start[id]);
        if (op.kind == OpKind::compute && op.phase == Phase::bwd) last_bwd = std::max(last_bwd, tl.end[id]);
    }
    return {first_sync, last_bwd};
}

}  // namespace

TEST_CASE("gradients: PyTorch DDP overlaps backward, Megatron reduces after it unless asked", "[strategies][framework]") {
    Plan p;
    SECTION("pytorch DDP: the first bucket goes out during backward") {
        const auto [sync, bwd] = first_sync_and_last_backward(p);
        CHECK(sync < bwd);
    }
    SECTION("megatron: after the whole backward (megatron/training.py all-reduces after backward)") {
        p.framework = "megatron";
        const auto [sync, bwd] = first_sync_and_last_backward(p);
        CHECK(sync >= bwd);
        p.overlap_grad_reduce = true;
        const auto [sync2, bwd2] = first_sync_and_last_backward(p);
        CHECK(sync2 < bwd2);
    }
    SECTION("with a pipeline: megatron's buckets wait for the rank's last backward") {
        p.tp = 2;
        p.pp = 2;
        p.global_batch = 8;
        const auto [sync, bwd] = first_sync_and_last_backward(p);
        CHECK(sync >= bwd);
    }
}

TEST_CASE("the mixed-precision optimizer step moves the framework's bytes per parameter", "[strategies][framework]") {
    // Megatron's step: unscale 8 + norm and clip 12 + Adam 28 + master copy 6 + zeroing 4 = 58 B.
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.framework = "megatron";
    const Built b = build(m, c, p);
    bool found = false;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank == 0 && op.phase == Phase::opt && op.kind == OpKind::compute) {
            CHECK(op.bytes == 58 * m.parameters());
            found = true;
        }
    }
    CHECK(found);
}
