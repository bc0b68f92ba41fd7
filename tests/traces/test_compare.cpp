// The simulated-versus-measured comparison on a hand-built graph whose two timelines the test
// fills itself, so each per-class sum and error is known.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "traces/compare.hpp"

using namespace smol;
using traces::OpClass;

namespace {

constexpr std::int64_t kUs = 1'000'000;   // ps per µs

struct Fixture {
    OpGraph g{2};
    OpId c0, c1, send, recv, copy;
    std::vector<OpId> ar;
    Timeline sim, real;

    Fixture() {
        const Kernel ks[] = {gemm_kernel(KernelName::qkv, KernelClass::gemm, 64, 64, 64, 1, 4, true),
                             stream_kernel(KernelName::norm, KernelClass::elementwise, 4096)};
        const std::int32_t recipe = g.intern_recipe(ks);
        c0 = g.add_kernels(0, Phase::fwd, 0, 0, recipe, DType::fp32);
        c1 = g.add_kernels(1, Phase::fwd, 0, 0, recipe, DType::fp32);
        ar = g.add_collective(CollectiveKind::all_reduce, {0, 1}, Bytes(1024), Stream::comm, Phase::bwd);
        g.depend(c0, ar[0]);
        g.depend(c1, ar[1]);
        std::tie(send, recv) = g.add_send_recv(0, 1, Bytes(100), Phase::fwd, 0, 0);
        copy = g.add_copy(1, Tier::device, Tier::host, Bytes(100), Phase::opt);
        g.finalize();
        for (Timeline* t : {&sim, &real}) {
            t->resize(g.size(), 2);
            t->kernel_class_time.assign(g.size(), {});
        }
        // Simulated: compute 10 µs (8 gemm + 2 elementwise) on both ranks; the all-reduce from 10
        // to 30; the send posted at 0, its receive at 5, done at 9; the copy 0–4.
        set(sim, c0, 0, 10, 8, 2);
        set(sim, c1, 0, 10, 8, 2);
        set(sim, ar[0], 10, 30);
        set(sim, ar[1], 10, 30);
        set(sim, send, 0, 9);
        set(sim, recv, 5, 9);
        set(sim, copy, 0, 4);
        sim.makespan = Time::ps(30 * kUs);
        // Measured: rank 1's compute takes 20 (16 + 4), so it arrives late at the all-reduce, which
        // then takes 10 more; the transfer takes 6 from the rendezvous; the copy 5.
        set(real, c0, 0, 10, 8, 2);
        set(real, c1, 0, 20, 16, 4);
        set(real, ar[0], 10, 30);
        set(real, ar[1], 20, 30);
        set(real, send, 1, 8);
        set(real, recv, 2, 8);
        set(real, copy, 0, 5);
        real.makespan = Time::ps(40 * kUs);
    }
    void set(Timeline& t, OpId id, std::int64_t s, std::int64_t e, std::int64_t gemm = 0, std::int64_t ew = 0) {
        t.start[id] = Time::ps(s * kUs);
        t.end[id] = Time::ps(e * kUs);
        t.kernel_class_time[id][static_cast<int>(KernelClass::gemm)] = Time::ps(gemm * kUs);
        t.kernel_class_time[id][static_cast<int>(KernelClass::elementwise)] = Time::ps(ew * kUs);
    }
};

const traces::ClassComparison& of(const traces::Comparison& c, OpClass k) { return c.per_class[static_cast<int>(k)]; }

}  // namespace

TEST_CASE("compare: per-class sums and signed errors, simulated / measured - 1", "[traces][compare]") {
    Fixture f;
    const traces::Comparison c = traces::compare(f.g, f.sim, f.real);
    CHECK(c.step_error == Approx(30.0 / 40 - 1));
    CHECK(of(c, OpClass::gemm).simulated == Time::us(16));
    CHECK(of(c, OpClass::gemm).measured == Time::us(24));
    CHECK(of(c, OpClass::gemm).error == Approx(16.0 / 24 - 1));
    CHECK(of(c, OpClass::gemm).ops == 2);
    CHECK(of(c, OpClass::elementwise).error == Approx(4.0 / 6 - 1));
    // The all-reduce from the last arrival: 20 µs per member simulated, 10 measured (rank 1 came
    // 10 µs late; that wait is the step's, not the collective's).
    CHECK(of(c, OpClass::collective).simulated == Time::us(40));
    CHECK(of(c, OpClass::collective).measured == Time::us(20));
    CHECK(of(c, OpClass::collective).ops == 2);
    // p2p from the rendezvous, once per transfer: 9 − 5 simulated, 8 − 2 measured.
    CHECK(of(c, OpClass::p2p).simulated == Time::us(4));
    CHECK(of(c, OpClass::p2p).measured == Time::us(6));
    CHECK(of(c, OpClass::p2p).ops == 1);
    CHECK(of(c, OpClass::copy).error == Approx(4.0 / 5 - 1));
    CHECK(of(c, OpClass::attention).ops == 0);
    // The largest difference first: rank 1's compute (10 vs 20 µs).
    REQUIRE_FALSE(c.largest.empty());
    CHECK(c.largest.front().op == f.c1);
    const Json j = traces::to_json(f.g, c);
    for (const char* key : {"simulated_step_s", "measured_step_s", "step_error", "per_class"}) CHECK(j.contains(key));
    CHECK(j["per_class"].contains("gemm"));
    CHECK_FALSE(j["per_class"].contains("attention"));
    CHECK(j["per_class"]["p2p"]["measured_s"].get<double>() == Approx(6e-6));
}

TEST_CASE("compare: a timeline without kernel classes counts each compute op in its class", "[traces][compare]") {
    Fixture f;
    f.real.kernel_class_time.clear();
    const traces::Comparison c = traces::compare(f.g, f.sim, f.real);
    // Both compute ops are GEMM-class ops: 10 + 20 µs measured.
    CHECK(of(c, OpClass::gemm).measured == Time::us(30));
    CHECK(of(c, OpClass::elementwise).measured == Time::zero());
}

TEST_CASE("compare: a timeline that is not of the graph is an error", "[traces][compare]") {
    Fixture f;
    f.real.start.pop_back();
    CHECK_THROWS_AS(traces::compare(f.g, f.sim, f.real), Error);
    Fixture h;
    h.real.start[h.copy] = Time::ps(-1);
    CHECK_THROWS_AS(traces::compare(h.g, h.sim, h.real), Error);
}
