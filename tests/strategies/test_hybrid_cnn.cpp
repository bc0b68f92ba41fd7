// --strategy hybrid-cnn (Krizhevsky 2014): the bytes it moves, counted from the graph, against the
// paper's arithmetic worked by hand; FC states split 1/K; the simulated step against DDP; bad input.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/hybrid_cnn.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/simulation.hpp"

using namespace smol;
using namespace smol::strategies;
using Catch::Matchers::Contains;

namespace {

/// Bytes every rank sends in total, by the ring and chain algorithms: an all-reduce of S sends
/// 2(K − 1)·S over its K ranks, an all-gather, reduce-scatter, broadcast or reduce (K − 1)·S.
struct Traffic {
    double all_reduce_buffers = 0;   // Σ S over the all-reduces
    double all_reduce = 0, exchange = 0;   // bytes sent
};
Traffic traffic(const OpGraph& g) {
    Traffic t;
    for (const Collective& c : g.collectives()) {
        const double k = static_cast<double>(g.communicators()[static_cast<std::size_t>(c.communicator)].size());
        const double s = static_cast<double>(c.bytes);
        if (c.kind == CollectiveKind::all_reduce) {
            t.all_reduce_buffers += s;
            t.all_reduce += 2 * (k - 1) * s;
        } else {
            t.exchange += (k - 1) * s;
        }
    }
    CHECK(g.p2ps().empty());
    return t;
}

Plan hybrid(HybridVariant v, int micro_batch) {
    Plan p;
    p.strategy = DataParallel::hybrid_cnn;
    p.hybrid_variant = v;
    p.micro_batch = micro_batch;
    return p;
}

Bytes buffer_on(const OpGraph& g, int rank, BufferLabel label) {
    Bytes sum;
    for (const Buffer& b : g.buffers())
        if (b.rank == rank && b.label == static_cast<std::int32_t>(label)) sum += Bytes(b.bytes);
    return sum;
}

}  // namespace

TEST_CASE("hybrid-cnn on VGG-16 × 8 moves the bytes of Krizhevsky's scheme, worked by hand", "[strategies][hybrid_cnn]") {
    const HybridVariant v = GENERATE(HybridVariant::all_gather, HybridVariant::broadcast, HybridVariant::chunked);
    INFO(to_string(v));
    // VGG-16 (Simonyan & Zisserman 2015, configuration D): 13 3×3 convolutions with biases, then
    // fc6 512·7·7 = 25088 → 4096, fc7 4096 → 4096, fc8 4096 → 1000.
    const int cfg[] = {64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512};
    double conv_params = 0, c_in = 3;
    for (int c : cfg) conv_params += 9 * c_in * c + c, c_in = c;
    const double i0 = 25088, o6 = 4096, o7 = 4096, o8 = 1000;
    const double fc_params = (i0 + 1) * o6 + (o6 + 1) * o7 + (o7 + 1) * o8;
    REQUIRE(conv_params + fc_params == 138'357'544);   // torchvision's vgg16 num_params

    const double K = 8, b = 32, e = 2;   // dgx-a100: 8 A100s, bf16
    const Built built = build(model_preset("vgg16"), topo::cluster_preset("dgx-a100"), hybrid(v, 32));
    const Traffic t = traffic(built.graph);
    // Convolutional gradients, all-reduced as DDP does; the FC weights' gradients never are.
    CHECK(t.all_reduce_buffers == conv_params * e);
    CHECK(t.all_reduce == 2 * (K - 1) * conv_params * e);
    // The FC exchange, per worker over one step: the last conv activations of the batch in
    // (every variant brings each worker the other K − 1 workers' b samples: (K − 1)·b·i0), the
    // gradients with respect to them back, each FC layer's outputs all-gathered, and each
    // FC layer's input gradient (but the first's, counted above) reduce-scattered.
    const double per_worker = (K - 1) * b * e * (2 * i0 + (o6 + o7 + o8) + (o6 + o7));
    CHECK(t.exchange == Approx(K * per_worker).epsilon(1e-12));
    // DDP all-reduces every gradient: 2(K − 1)·P·e. Hybrid sends under a fifth of it.
    Plan ddp;
    ddp.micro_batch = 32;
    const Traffic d = traffic(build(model_preset("vgg16"), topo::cluster_preset("dgx-a100"), ddp).graph);
    CHECK(d.all_reduce_buffers == (conv_params + fc_params) * e);
    CHECK(t.all_reduce + t.exchange < 0.2 * d.all_reduce);
}

TEST_CASE("hybrid-cnn holds 1/K of the FC weights and optimizer state on each worker", "[strategies][hybrid_cnn]") {
    const Model m = model_preset("alexnet");
    const int first = hybrid_first_fc(m);
    CHECK(m.layers()[static_cast<std::size_t>(first)].name == "fc6");
    std::int64_t conv = 0, fc = 0;
    for (std::size_t i = 0; i < m.layers().size(); ++i)
        (static_cast<int>(i) < first ? conv : fc) += m.layers()[i].params;
    // fc6-fc8 of 4096, 4096, 1000 neurons split 512, 512, 125 over 8 workers: exactly 1/8.
    CHECK(hybrid_fc_shard(m, 8).parameters() * 8 == fc);
    const Built built = build(m, topo::cluster_preset("dgx-a100"), hybrid(HybridVariant::all_gather, 16));
    const StateBytes sb = state_bytes(DType::bf16);
    const std::int64_t held = conv + fc / 8;
    for (int r : {0, 7}) {
        CHECK(buffer_on(built.graph, r, BufferLabel::parameters) == Bytes(held * sb.params));
        CHECK(buffer_on(built.graph, r, BufferLabel::gradients) == Bytes(held * sb.grads));
        CHECK(buffer_on(built.graph, r, BufferLabel::optimizer_state) == Bytes(held * (4 + 8)));   // fp32 master, m, v
    }
}

TEST_CASE("hybrid-cnn simulates VGG-16 end to end, and beats DDP on eight Pis over gigabit Ethernet",
          "[strategies][hybrid_cnn]") {
    for (HybridVariant v : {HybridVariant::all_gather, HybridVariant::broadcast, HybridVariant::chunked}) {
        INFO(to_string(v));
        const tools::Simulation s = tools::simulate_plan(model_preset("vgg16"), topo::cluster_preset("dgx-a100"), hybrid(v, 32));
        CHECK(s.summary.fits());
        CHECK(s.summary.iteration > Time::zero());
        CHECK(s.summary.info.strategy == "hybrid-cnn");
        // The estimate that guards the graph's size bounds it, within a small factor.
        CHECK(s.built.layout.estimated_ops >= static_cast<std::int64_t>(s.built.graph.size()));
        CHECK(s.built.layout.estimated_ops <= 4 * static_cast<std::int64_t>(s.built.graph.size()));
    }
    // Krizhevsky's point: the FC layers hold 89 % of VGG-16's parameters, so on a slow network
    // not all-reducing their gradients pays. 8 Raspberry Pi 5 on 1 GbE, fp32, 8 samples each.
    const topo::Cluster pis = topo::cluster_preset("pi5-1gbe").with_nodes(8);
    Plan ddp;
    ddp.micro_batch = 8;
    const tools::Simulation d = tools::simulate_plan(model_preset("vgg16"), pis, ddp);
    const tools::Simulation h = tools::simulate_plan(model_preset("vgg16"), pis, hybrid(HybridVariant::all_gather, 8));
    INFO("ddp " << to_string(d.summary.iteration) << ", hybrid " << to_string(h.summary.iteration));
    CHECK(h.summary.iteration < d.summary.iteration);
    CHECK(h.summary.total_comm < d.summary.total_comm);
}

TEST_CASE("hybrid-cnn on one worker is a single device's step: no collectives", "[strategies][hybrid_cnn]") {
    const topo::Cluster one = topo::cluster_preset("pi5-1gbe").with_nodes(1);
    REQUIRE(one.num_devices() == 1);
    for (HybridVariant v : {HybridVariant::all_gather, HybridVariant::broadcast, HybridVariant::chunked}) {
        const tools::Simulation h = tools::simulate_plan(model_preset("alexnet"), one, hybrid(v, 4));
        CHECK(h.built.graph.collectives().empty());
        Plan ddp;
        ddp.micro_batch = 4;
        const tools::Simulation d = tools::simulate_plan(model_preset("alexnet"), one, ddp);
        CHECK(h.summary.iteration == d.summary.iteration);
    }
}

TEST_CASE("hybrid-cnn's graph is the same for the same input", "[strategies][hybrid_cnn]") {
    const Plan p = hybrid(HybridVariant::broadcast, 4);
    const Built a = build(model_preset("alexnet"), topo::cluster_preset("dgx-a100"), p);
    const Built b = build(model_preset("alexnet"), topo::cluster_preset("dgx-a100"), p);
    REQUIRE(a.graph.size() == b.graph.size());
    for (OpId i = 0; i < a.graph.size(); ++i) {
        CHECK(a.graph.op(i).kind == b.graph.op(i).kind);
        CHECK(a.graph.op(i).bytes == b.graph.op(i).bytes);
    }
}

TEST_CASE("hybrid-cnn refuses what it cannot split", "[strategies][hybrid_cnn]") {
    const topo::Cluster dgx = topo::cluster_preset("dgx-a100");
    auto refused = [&](const Model& m, const Plan& p, const std::string& flag, const std::string& why) {
        try {
            build(m, dgx, p);
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.kind() == ErrorKind::bad_input);
            CHECK(e.context().flag == flag);
            CHECK_THAT(e.what(), Contains(why));
        }
    };
    const Plan p = hybrid(HybridVariant::all_gather, 8);
    SECTION("a transformer") { refused(model_preset("gpt2-small"), p, "--strategy", "is a transformer"); }
    SECTION("no fully connected layer") {
        LayerSpec conv{"conv1", "conv", 1000, Flops(1e6), Bytes(4000), Bytes(4000)};
        refused(Model::layer_list("convs", {conv, conv}, 4000), p, "--strategy", "has no fc layer");
    }
    SECTION("an MLP: nothing to run data-parallel") { refused(model_preset("mlp-small"), p, "--strategy", "(an MLP)"); }
    SECTION("a conv layer after the fc stack") {
        LayerSpec conv{"conv1", "conv", 1000, Flops(1e6), Bytes(4000), Bytes(4000)};
        LayerSpec fc{"fc1", "fc", 1000 * 10 + 10, Flops(2.0 * 1000 * 10), Bytes(4000), Bytes(40)};
        refused(Model::layer_list("odd", {conv, fc, conv}, 4000), p, "--strategy", "is a conv layer after fc layer 'fc1'");
    }
    SECTION("tensor parallelism") {
        Plan q = p;
        q.tp = 2;
        refused(model_preset("vgg16"), q, "--tp", "--tp 2 is not modelled");
    }
    SECTION("pipeline parallelism") {
        Plan q = p;
        q.pp = 2;
        refused(model_preset("vgg16"), q, "--pp", "--pp 2 is not modelled");
    }
    SECTION("chunks of a micro-batch the workers do not divide") {
        refused(model_preset("vgg16"), hybrid(HybridVariant::chunked, 12), "--micro-batch", "multiple of the 8 workers");
    }
    SECTION("an all-gather pass of more samples than an int holds") {
        // 8 workers × 2^28 samples = 2^31: one past INT_MAX (found by fuzz_plan).
        refused(model_preset("vgg16"), hybrid(HybridVariant::all_gather, 1 << 28), "--micro-batch",
                "2147483648 samples, more than the 2147483647");
    }
    SECTION("LAMB's per-layer norms") {
        Plan q = p;
        q.optimizer = Optimizer::lamb;
        refused(model_preset("vgg16"), q, "--optimizer", "lamb");
    }
    SECTION("another framework") {
        Plan q = p;
        q.framework = "megatron";
        refused(model_preset("vgg16"), q, "--framework", "does not run on");
    }
    SECTION("an unknown variant") {
        CHECK_THROWS_WITH(parse_hybrid_variant("allgather"), Contains("did you mean"));
        CHECK(parse_hybrid_variant("chunked") == HybridVariant::chunked);
    }
}
