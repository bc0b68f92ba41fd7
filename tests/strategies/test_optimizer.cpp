// Optimizers against their papers' state and passes: bytes of state per parameter (Adam's 12 in
// mixed precision, bitsandbytes' 8-bit AdamW 4 + 2 + 2·4/2048, SGD's 4 + 4, LAMB's 12), the
// step's traffic, and LAMB's per-layer norm reduction when the state is sharded.
#include <catch2/catch.hpp>

#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/optimizer.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

std::int64_t held(const OpGraph& g, int rank, BufferLabel label) {
    std::int64_t n = 0;
    for (const Buffer& b : g.buffers())
        if (b.rank == rank && b.tier == Tier::device && static_cast<BufferLabel>(b.label) == label) n += b.bytes;
    return n;
}

}  // namespace

TEST_CASE("each optimizer's state per parameter", "[strategies][optimizer]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(1);
    const double psi = static_cast<double>(m.parameters());
    const auto [opt, per_param] = GENERATE(table<Optimizer, double>({{Optimizer::adam, 12.0},
                                                                     {Optimizer::adamw_8bit, 4 + 2 + 2 * 4.0 / 2048},
                                                                     {Optimizer::sgd, 8.0},
                                                                     {Optimizer::lamb, 12.0}}));
    Plan p;
    p.optimizer = opt;
    const Built b = build(m, c, p);
    INFO(to_string(opt));
    CHECK(static_cast<double>(held(b.graph, 0, BufferLabel::optimizer_state)) == Approx(per_param * psi).epsilon(1e-6));
    // In fp32 training the parameters are the master weights: the optimizer's own state only.
    p.dtype = DType::fp32;
    const Built f = build(m, c, p);
    CHECK(static_cast<double>(held(f.graph, 0, BufferLabel::optimizer_state)) == Approx((per_param - 4) * psi).epsilon(1e-6));
}

TEST_CASE("the step's traffic per parameter, on top of the framework's mixed-precision passes", "[strategies][optimizer]") {
    Layout l;
    l.dtype = DType::fp32;   // no framework passes: the optimizer's own
    const std::int64_t n = 1'000'000;
    auto bytes = [&](Optimizer o) {
        l.optimizer = o;
        const StepKernels k = step_kernels(l, StepRunner::device, n, {n / 2, n / 2});
        std::int64_t total = 0;
        for (const Kernel& kk : k.update) total += kk.bytes;
        for (const Kernel& kk : k.apply) total += kk.bytes;
        return total;
    };
    CHECK(bytes(Optimizer::adam) == 28 * n);        // read g, w, m, v; write w, m, v
    CHECK(bytes(Optimizer::adamw_8bit) == 16 * n);  // 8-bit m and v
    CHECK(bytes(Optimizer::sgd) == 20 * n);         // read g, w, b; write w, b
    CHECK(bytes(Optimizer::lamb) == 48 * n);        // stage 1, the norms, stage 2
    // DeepSpeed's CPU-Adam: one fused pass (30 bytes) after the fp32 gradients' unscale (8).
    l.optimizer = Optimizer::adam;
    CHECK(step_kernels(l, StepRunner::deepspeed_cpu, n, {}).update.front().bytes == 38 * n);
    // PyTorch's foreach Adam on CPU tensors: 11 reads and 7 writes of 4 bytes.
    CHECK(step_kernels(l, StepRunner::torch_cpu, n, {}).update.front().bytes == 72 * n);
}

TEST_CASE("LAMB all-reduces its per-layer norms when the optimizer state is sharded", "[strategies][optimizer]") {
    // You et al. 2020, Algorithm 2: the trust ratio ‖w‖/‖u‖ of each layer. A ZeRO rank holds part
    // of every layer, so the partial sums of squares (2 floats a layer) are all-reduced.
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::zero2;
    p.optimizer = Optimizer::lamb;
    const Built b = build(m, c, p);
    const std::size_t blocks = strategies::detail::replica_blocks(m, b.layout, p).size();
    int norms = 0;
    for (const Collective& col : b.graph.collectives())
        if (col.kind == CollectiveKind::all_reduce) {
            ++norms;
            CHECK(col.bytes == static_cast<std::int64_t>(4 * 2 * blocks));
        }
    CHECK(norms == 1);
    // Unsharded (DDP), every rank has whole layers: no reduction.
    p.strategy = DataParallel::ddp;
    int ddp_norms = 0;
    const Built d = build(m, c, p);
    for (const Collective& col : d.graph.collectives()) ddp_norms += col.kind == CollectiveKind::all_reduce && col.bytes < 1024;
    CHECK(ddp_norms == 0);
    const test::DpRun run = test::dp_run(m, c, p);
    CHECK(run.summary.iteration > Time::zero());
}

TEST_CASE("optimizer choices that cannot run are refused", "[strategies][optimizer]") {
    SECTION("an unknown optimizer") {
        CHECK_THAT(test::bad_input_message([] { parse_optimizer("adamw"); }), Catch::Contains("did you mean 'adam'?"));
    }
    SECTION("LAMB with tensor parallelism") {
        Plan p;
        p.optimizer = Optimizer::lamb;
        p.tp = 2;
        CHECK_THAT(test::bad_input_message([&] { resolve(model_preset("gpt2-small"), topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("lamb is modelled for data parallelism"));
    }
    SECTION("parameter servers with SGD") {
        Plan p;
        p.strategy = DataParallel::ps;
        p.optimizer = Optimizer::sgd;
        CHECK_THAT(test::bad_input_message([&] { resolve(model_preset("resnet50"), topo::cluster_preset("pi5-1gbe"), p); }),
                   Catch::Contains("parameter servers step Adam"));
    }
}
