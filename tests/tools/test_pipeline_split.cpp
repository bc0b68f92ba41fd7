// Pipeline stages on mixed clusters (tools/pipeline_split.*): on 4 Jetson AGX Orin boards beside
// a 4 × RTX 4090 workstation, Llama-2-7B over pp 8, the speed split gives the fast stages more
// layers than the slow ones, stays within each device's memory where the time-only split would
// not, is the default there, beats the FLOP-balanced split, and the sweep finds a plan better
// still. A cluster of one device kind keeps its plans as they were.
#include <catch2/catch.hpp>

#include "core/model.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/pipeline_split.hpp"
#include "tools/simulation.hpp"
#include "tools/sweep.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::tools;
using strategies::Partition;

namespace {

const topo::Cluster& mixed() {
    static const topo::Cluster c = topo::compose_clusters("jetson-agx-orin:4,workstation-4gpu:1");
    return c;
}

strategies::Plan llama_pp8(Recompute recompute) {
    strategies::Plan p;
    p.pp = 8;
    p.global_batch = 32;
    p.recompute = recompute;
    return p;
}

Time step_of(const strategies::Plan& p) {
    const Simulation s = simulate_plan(model_preset("llama2-7b"), mixed(), p);
    REQUIRE(s.summary.fits());
    return s.summary.iteration;
}

}  // namespace

TEST_CASE("the speed split evens stage time on a mixed cluster and beats the FLOP-balanced split", "[tools][pipeline_split]") {
    const Model model = model_preset("llama2-7b");
    strategies::Plan plan = llama_pp8(Recompute::full);
    const strategies::Layout l = strategies::resolve(model, mixed(), plan);
    CHECK(stages_on_mixed_devices(mixed(), l));
    const std::vector<int> split = speed_balanced_layers(model, mixed(), plan, l);
    REQUIRE(split.size() == 8);
    int layers = 0;
    for (int k : split) layers += k;
    CHECK(layers == 32);
    // Stages 0-3 on the Jetsons (42.5 TFLOP/s bf16), 4-7 on the 4090s (165.2): every fast stage
    // holds more layers than any slow one.
    for (int slow = 0; slow < 4; ++slow)
        for (int fast = 4; fast < 8; ++fast) CHECK(split[static_cast<std::size_t>(fast)] > split[static_cast<std::size_t>(slow)]);
    // The default on these stages is the speed split.
    CHECK(with_pipeline_split(model, mixed(), plan).stage_layers == split);

    strategies::Plan balanced = plan, speed = plan;
    balanced.partition = Partition::balanced;
    speed.partition = Partition::speed;
    const Time by_flops = step_of(balanced), by_speed = step_of(speed);
    // The Jetsons' stages set the pace of the FLOP-balanced pipeline (4 of 32 layers each at a
    // quarter of the 4090's rate); the speed split moves layers to the 4090s: well under 3/4 of it.
    CHECK(by_speed < by_flops * 0.75);
    CHECK(step_of(plan) == by_speed);
}

TEST_CASE("the speed split keeps every stage within its device's memory", "[tools][pipeline_split]") {
    // Without recompute a 4090 (24 GiB) holds about 5 Llama-2-7B layers with their states and
    // activations: the split that evens time alone would give it more.
    const Model model = model_preset("llama2-7b");
    strategies::Plan plan = llama_pp8(Recompute::none);
    plan.partition = Partition::speed;
    const Simulation s = simulate_plan(model, mixed(), plan);
    CHECK(s.summary.fits());
    // Memory binds here: the 4090s holding 6 layers each, about what their speed would call for,
    // do not fit.
    strategies::Plan greedy = llama_pp8(Recompute::none);
    greedy.stage_layers = {2, 2, 2, 2, 6, 6, 6, 6};
    CHECK_FALSE(simulate_plan(model, mixed(), greedy).summary.fits());
    for (int r = 0; r < mixed().num_devices(); ++r)
        CHECK(s.timeline.peak[static_cast<std::size_t>(r)][static_cast<std::size_t>(Tier::device)] <=
              mixed().device_kind(r).memory);
}

TEST_CASE("a cluster of one device kind keeps its split", "[tools][pipeline_split]") {
    const Model model = model_preset("llama2-7b");
    const topo::Cluster dgx = topo::cluster_preset("dgx-a100");
    strategies::Plan plan = llama_pp8(Recompute::none);
    CHECK_FALSE(stages_on_mixed_devices(dgx, strategies::resolve(model, dgx, plan)));
    CHECK(with_pipeline_split(model, dgx, plan).stage_layers.empty());
    // Asked for, the speed split on equal devices and equal layers is the equal split.
    plan.partition = Partition::speed;
    const std::vector<int> split = with_pipeline_split(model, dgx, plan).stage_layers;
    REQUIRE(split.size() == 8);
    for (std::size_t k = 1; k + 1 < 8; ++k) CHECK(split[k] == 4);
}

TEST_CASE("the sweep searches the split on a mixed cluster and its best beats the FLOP-balanced one", "[tools][pipeline_split]") {
    SweepOptions o;
    o.global_batch = 32;
    o.jobs = 2;
    o.space.strategies = {strategies::DataParallel::ddp};
    o.space.tp = {1};
    o.space.pp = {8};
    o.space.micro_batch = {1};
    const SweepResult r = sweep(model_preset("llama2-7b"), mixed(), o);
    REQUIRE(!r.ranking.empty());
    std::optional<Time> best_balanced;
    bool both = false;
    for (std::size_t i : r.ranking) {
        const PlanResult& p = r.plans[i];
        REQUIRE(p.plan.partition.has_value());
        if (*p.plan.partition == Partition::balanced && !best_balanced) best_balanced = p.result->iteration;
        both |= *p.plan.partition == Partition::speed;
    }
    CHECK(both);
    REQUIRE(best_balanced);
    // The Jetsons (64 GB) come first as given; the other order puts the 4090s (24 GB) first.
    REQUIRE(r.orders.size() == 2);
    CHECK(r.orders[1].name == "memory last");
    CHECK(r.orders[1].cluster.groups.front().device.name == "rtx-4090");
    std::size_t reordered = 0;
    for (const PlanResult& p : r.plans) reordered += p.order == 1 && p.status == PlanStatus::ranked;
    CHECK(reordered > 0);
    // One device kind: one order.
    CHECK(device_orders(topo::cluster_preset("dgx-a100")).size() == 1);
    const PlanResult& best = r.plans[r.ranking.front()];
    CHECK(*best.plan.partition == Partition::speed);
    CHECK(best.result->iteration < *best_balanced * 0.75);
}

TEST_CASE("a slow device's stage gets fewer layers, and the step beats the equal split", "[tools][pipeline_split]") {
    // GPT-2 medium (24 layers) over 4 Pis in a pipeline, the last at half speed (--slow 3:0.5):
    // equal stages of 6 layers wait for the slow one's 12 layers' worth of time; the speed split
    // hands it about half as many layers as the others (a stage's time is its layers' time over
    // its device's speed, sim/simulator.cpp device_time).
    const Model model = model_preset("gpt2-medium");
    const topo::Cluster pis = topo::cluster_preset("pi5-1gbe").with_nodes(4).with_slow_devices("3:0.5");
    strategies::Plan plan;
    plan.pp = 4;
    plan.global_batch = 8;
    CHECK(stages_on_mixed_devices(pis, strategies::resolve(model, pis, plan)));
    const std::vector<int> split = with_pipeline_split(model, pis, plan).stage_layers;
    REQUIRE(split.size() == 4);
    CHECK(split[3] < split[1]);
    CHECK(split[3] <= 4);
    strategies::Plan equal = plan;
    equal.partition = Partition::equal;
    const Time balanced = simulate_plan(model, pis, plan).summary.iteration;
    const Time even = simulate_plan(model, pis, equal).summary.iteration;
    CHECK(balanced.to_seconds() < 0.85 * even.to_seconds());
    // The same cluster without the straggler keeps Megatron's equal split.
    CHECK_FALSE(stages_on_mixed_devices(topo::cluster_preset("pi5-1gbe").with_nodes(4),
                                        strategies::resolve(model, topo::cluster_preset("pi5-1gbe").with_nodes(4), plan)));
}
