// The plan resolver: its op estimate bounds every strategy's real graph (the figure that refuses
// plans too large before they are built), and plan errors name the flag to change.
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;
using Catch::Matchers::Contains;

TEST_CASE("estimated_ops bounds the ops each strategy builds, within a small factor", "[strategies][plan]") {
    struct Case {
        const char* model;
        const char* cluster;
        int nodes;
        DataParallel strategy;
        int tp, pp;
        Schedule schedule;
        std::int64_t global_batch;
        Recompute recompute;
        bool sp;
        int cp = 1;
        double bucket_mb = 25;
        bool qwz = false;   // ZeRO++
        int hpz = 1;
        bool qgz = false;
        double offload_fraction = -1;   // ≥ 0: the optimizer offloaded to the CPU with this Twin-Flow fraction (1: all)
    };
    const Case c = GENERATE(Case{"gpt2-small", "pi5-1gbe", 4, DataParallel::ddp, 1, 1, Schedule::one_f_one_b, 8, Recompute::none, false},
                            Case{"resnet50", "pi5-1gbe", 5, DataParallel::ps, 1, 1, Schedule::one_f_one_b, 8, Recompute::none, false},
                            Case{"resnet50", "pi5-1gbe", 5, DataParallel::ps_async, 1, 1, Schedule::one_f_one_b, 0, Recompute::none, false},
                            Case{"gpt2-small", "pi5-1gbe", 4, DataParallel::ring, 1, 1, Schedule::one_f_one_b, 8, Recompute::full, false},
                            Case{"gpt2-small", "dgx-a100", 1, DataParallel::zero1, 1, 1, Schedule::one_f_one_b, 16, Recompute::none, false},
                            Case{"gpt2-small", "dgx-a100", 1, DataParallel::zero2, 1, 1, Schedule::one_f_one_b, 16, Recompute::none, false},
                            Case{"gpt2-small", "dgx-a100", 1, DataParallel::zero3, 1, 1, Schedule::one_f_one_b, 16, Recompute::none, false},
                            Case{"gpt2-small", "dgx-a100", 2, DataParallel::fsdp, 1, 1, Schedule::one_f_one_b, 32, Recompute::selective, false},
                            Case{"gpt2-medium", "dgx-a100", 2, DataParallel::ddp, 2, 4, Schedule::one_f_one_b, 16, Recompute::none, true},
                            Case{"gpt2-medium", "dgx-a100", 2, DataParallel::zero1, 2, 4, Schedule::interleaved, 16, Recompute::none, false},
                            Case{"gpt2-medium", "dgx-a100", 2, DataParallel::ddp, 1, 4, Schedule::zb_h1, 32, Recompute::none, false},
                            Case{"gpt2-medium", "dgx-a100", 4, DataParallel::ddp, 8, 2, Schedule::gpipe, 16, Recompute::full, false},
                            // One replica of 8 context-parallel ranks still reduces its gradients, in 16 KiB buckets here.
                            Case{"gpt2-medium", "dgx-a100", 1, DataParallel::ddp, 1, 1, Schedule::one_f_one_b, 2, Recompute::none, false, 8, 1.0 / 64},
                            Case{"gpt2-medium", "dgx-a100", 2, DataParallel::fsdp, 1, 1, Schedule::one_f_one_b, 16, Recompute::full, false, 2},
                            Case{"gpt2-small", "dgx-a100", 2, DataParallel::zero3, 1, 1, Schedule::one_f_one_b, 32, Recompute::full, false, 1, 25, true, 8},
                            Case{"llama2-7b", "dgx-a100", 2, DataParallel::zero3, 1, 1, Schedule::one_f_one_b, 32, Recompute::none, false, 1, 25, true, 8, true},
                            // ZeRO-3 offloaded: each bucket's partition through the host every micro-batch, split
                            // between host and device sub-groups with Twin-Flow.
                            Case{"gpt2-medium", "dgx-a100", 1, DataParallel::zero3, 1, 1, Schedule::one_f_one_b, 32, Recompute::full, false, 1, 25, false, 1, false, 1.0},
                            Case{"gpt2-medium", "dgx-a100", 1, DataParallel::zero3, 1, 1, Schedule::one_f_one_b, 32, Recompute::full, false, 1, 25, false, 1, false, 0.5});
    const Model m = model_preset(c.model);
    const topo::Cluster cluster = topo::cluster_preset(c.cluster).with_nodes(c.nodes);
    Plan p;
    p.strategy = c.strategy;
    p.tp = c.tp;
    p.pp = c.pp;
    p.schedule = c.schedule;
    if (c.schedule == Schedule::interleaved) p.virtual_stages = 3;
    p.global_batch = c.global_batch;
    p.recompute = c.recompute;
    p.sequence_parallel = c.sp;
    p.cp = c.cp;
    if (c.bucket_mb != 25) {   // else the framework's
        p.bucket_mb = c.bucket_mb;
        p.overlap_grad_reduce = c.cp > 1;   // Megatron's (context parallelism) buckets only when it overlaps
    }
    p.zero_quantized_weights = c.qwz;
    p.zero_hpz_partition_size = c.hpz;
    p.zero_quantized_gradients = c.qgz;
    if (c.offload_fraction >= 0) {
        p.offload_optimizer = Offload::cpu;
        p.optimizer_offload_fraction = c.offload_fraction;
        p.framework_overrides.reduce_bucket = 2'000'000;     // a bucket every block or so
        p.framework_overrides.sub_group_size = 10'000'000;   // several sub-groups a rank
    }
    const Built b = build(m, cluster, p);
    const auto real = static_cast<std::int64_t>(b.graph.size());
    INFO(c.model << " " << to_string(c.strategy) << " tp " << c.tp << " pp " << c.pp << ": " << real << " ops, estimated "
                 << b.layout.estimated_ops);
    CHECK(b.layout.estimated_ops >= real);
    CHECK(b.layout.estimated_ops <= 4 * real);
}

TEST_CASE("a plan too large for an op graph is refused before it is built", "[strategies][plan]") {
    const Model m = model_preset("gpt3-175b");
    Plan p;
    p.global_batch = 1'000'000'000;
    try {
        (void)resolve(m, topo::cluster_preset("pi5-1gbe"), p);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::out_of_range);
        CHECK(e.context().flag == "--global-batch");
        CHECK_THAT(std::string(e.what()), Contains("more than the 2.1e+09 an op graph holds"));
    }
}

TEST_CASE("plan errors name the flag to change", "[strategies][plan]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster dgx = topo::cluster_preset("dgx-a100");
    auto flag_of = [&](Plan p) {
        try {
            (void)resolve(m, dgx, p);
        } catch (const Error& e) {
            return e.context().flag;
        }
        return std::string("none");
    };
    Plan p;
    p.pp = 3;
    CHECK(flag_of(p) == "--pp");   // tp 1 divides the 8 devices; pp 3 does not
    p = Plan{};
    p.tp = 3;
    CHECK(flag_of(p) == "--tp");
    p = Plan{};
    p.tp = 16;
    CHECK(flag_of(p) == "--tp");   // more than the devices
    p = Plan{};
    p.micro_batch = 1 << 30;
    p.global_batch = std::int64_t{8} << 30;
    CHECK(flag_of(p) == "--micro-batch");   // a micro-batch whose sizes pass 64 bits
}
