// The simulator with a calibration profile's measured figures: kernels priced from the measured
// tables, collectives and sends whose kind, group size and host span were measured take the
// measured time, anything else keeps the models; per-op kernel-class times add up to the op.
#include <catch2/catch.hpp>

#include <memory>

#include "core/op_graph.hpp"
#include "sim/compute.hpp"
#include "sim/simulator.hpp"
#include "sim_fixtures.hpp"

using namespace smol;

namespace {

topo::MeasuredCompute compute_tables() {
    topo::MeasuredCompute m;
    m.gemm.m = m.gemm.n = m.gemm.k = {64, 1024};
    // 10 GFLOP/s at the small corner, 80 GFLOP/s at the large one, 20 elsewhere.
    m.gemm.rate.assign(8, 20e9);
    m.gemm.rate[0] = 10e9;
    m.gemm.rate[7] = 80e9;
    m.flash_fwd = m.flash_bwd = m.gemm;
    // Under the causal mask: a quarter of the rate at the small corner, the same at the large one.
    m.flash_fwd_causal = m.flash_bwd_causal = m.gemm;
    m.flash_fwd_causal.rate[0] = m.flash_bwd_causal.rate[0] = 2.5e9;
    m.stream = {{1e3, 1e6, 1e9}, {50e9, 50e9, 10e9}};
    m.softmax = {{1e3, 1e6}, {1e9, 1e9}};
    m.adam = {{1e3, 1e8}, {2e9, 5e8}};
    m.arithmetic = 4e9;
    m.dispatch = Time::us(1);
    m.comm_slowdown = 1.0;
    return m;
}

topo::Cluster measured_cluster(int nodes) {
    topo::Cluster c = test::uniform_switch_cluster(nodes, 1.0, 10.0, 2.0);
    auto& d = c.groups[0].device;
    d.measured = std::make_shared<const topo::MeasuredCompute>(compute_tables());
    d.launch_overhead = Time::us(1);
    topo::MeasuredNetwork net;
    topo::MeasuredTransfer ar;
    ar.kind = CollectiveKind::all_reduce;
    ar.ranks = 2;
    ar.nodes = 2;
    ar.time = {{1e3, 1e6}, {1e-5, 1e-3}};
    net.transfers.push_back(ar);
    topo::MeasuredTransfer p2p;
    p2p.p2p = true;
    p2p.ranks = 2;
    p2p.nodes = 2;
    p2p.time = {{1e3, 1e6}, {2e-5, 2e-3}};
    net.transfers.push_back(p2p);
    c.measured_network = std::make_shared<const topo::MeasuredNetwork>(net);
    return c;
}

}  // namespace

TEST_CASE("measured curves and tables interpolate in log space and hold their ends", "[sim][measured]") {
    const topo::MeasuredCompute m = compute_tables();
    CHECK(m.gemm.at(64, 64, 64) == Approx(10e9));
    CHECK(m.gemm.at(1024, 1024, 1024) == Approx(80e9));
    CHECK(m.gemm.at(16, 16, 16) == Approx(10e9));           // clamped below the grid
    CHECK(m.gemm.at(8192, 8192, 8192) == Approx(80e9));     // and above
    CHECK(m.gemm.at(64, 64, 1024) == Approx(20e9));
    // Half-way in log k between 10 and 20 GFLOP/s: their geometric mean.
    CHECK(m.gemm.at(64, 64, 256) == Approx(std::sqrt(10e9 * 20e9)));
    const topo::Cluster c = measured_cluster(2);
    const topo::Curve& t = c.measured_network->transfers[0].time;
    CHECK(t.time_at(1e3) == Approx(1e-5));
    CHECK(t.time_at(10) == Approx(1e-5));                    // a latency floor below the first size
    CHECK(t.time_at(std::sqrt(1e3 * 1e6)) == Approx(std::sqrt(1e-5 * 1e-3)));
    CHECK(t.time_at(4e6) == Approx(4e-3));                   // the last point's bandwidth beyond it
    CHECK(m.stream.rate_at(1e10) == Approx(10e9));
}

TEST_CASE("fp32 kernels are priced from the measured tables, with the measured dispatch", "[sim][measured]") {
    const topo::Cluster c = measured_cluster(2);
    const topo::NodeGroup& g = c.groups[0];
    const Kernel big = gemm_kernel(KernelName::qkv, KernelClass::gemm, 1024, 1024, 1024, 2, 4, true);
    CHECK(sim::kernel_time(big, DType::fp32, false, g) == Time::seconds(big.flops / 80e9));
    const Kernel pass = stream_kernel(KernelName::norm, KernelClass::elementwise, 1'000'000);
    CHECK(sim::kernel_time(pass, DType::fp32, false, g) == Time::seconds(1e6 / 50e9));
    // Arithmetic beyond the pass's 2 FLOPs per 8 bytes runs at the measured arithmetic rate.
    const Kernel busy = stream_kernel(KernelName::layer, KernelClass::elementwise, 8000, 2000 + 4e6);
    CHECK(sim::kernel_time(busy, DType::fp32, false, g).to_seconds() == Approx(8000 / 50e9 + 4e6 / 4e9));
    const Kernel adam = adam_kernel(1000, 28);
    CHECK(sim::kernel_time(adam, DType::fp32, true, g) == Time::seconds(1000 / 2e9));   // a board's host is its device
    const Kernel soft = softmax_kernel(1000, 1000, 4);
    CHECK(sim::kernel_time(soft, DType::fp32, false, g) == Time::seconds(1e6 / 1e9));
    // Each kernel pays the dispatch; the op's class split adds up to its time.
    OpGraph graph(1);
    const Kernel ks[] = {big, pass, soft};
    const OpId op = graph.add_kernels(0, Phase::fwd, 0, 0, graph.intern_recipe(ks), DType::fp32);
    graph.finalize();
    std::array<Time, kKernelClasses> split{};
    const Time t = sim::compute_time(graph.op(op), graph.kernels_of(op), g, Time::zero(), &split);
    CHECK(t == Time::us(3) + Time::seconds(big.flops / 80e9) + Time::seconds(1e6 / 50e9) + Time::seconds(1e6 / 1e9));
    CHECK(split[static_cast<int>(KernelClass::gemm)] == Time::us(1) + Time::seconds(big.flops / 80e9));
    CHECK(split[0] + split[1] + split[2] + split[3] == t);
    // bf16 was not measured: the roofline prices it.
    CHECK(sim::kernel_time(pass, DType::bf16, false, g) != Time::seconds(1e6 / 50e9));
}

TEST_CASE("a causal flash kernel is priced from the causal table, over the pairs it computes", "[sim][measured]") {
    const topo::Cluster c = measured_cluster(1);
    const topo::NodeGroup& g = c.groups[0];
    for (const bool bwd : {false, true}) {
        const Kernel full = flash_kernel(4, 64, 64, 64, 4, bwd);
        const Kernel causal = flash_kernel(4, 64, 64, 64, 4, bwd, true);
        // 64·65/2 pairs of 64² per head: the FLOPs count what the kernel computes.
        CHECK(causal.flops == Approx(full.flops * (64.0 * 65 / 2) / (64.0 * 64)));
        CHECK(sim::kernel_time(full, DType::fp32, false, g) == Time::seconds(full.flops / 10e9));
        CHECK(sim::kernel_time(causal, DType::fp32, false, g) == Time::seconds(causal.flops / 2.5e9));
        // At the large corner both tables hold 80 GFLOP/s: the causal kernel takes its pairs' share.
        const Kernel big = flash_kernel(1, 1024, 1024, 1024, 4, bwd), big_causal = flash_kernel(1, 1024, 1024, 1024, 4, bwd, true);
        CHECK(sim::kernel_time(big_causal, DType::fp32, false, g).to_seconds() ==
              Approx(sim::kernel_time(big, DType::fp32, false, g).to_seconds() * 1025.0 / 2048));
    }
    // The backward a graph derives from a causal forward keeps the mask, so it reads the causal table.
    const Kernel fwd = flash_kernel(4, 64, 64, 64, 4, false, true);
    const std::vector<Kernel> bwd = backward_kernels(std::span<const Kernel>(&fwd, 1));
    REQUIRE(bwd.size() == 1);
    CHECK(bwd[0].causal);
    CHECK(sim::kernel_time(bwd[0], DType::fp32, false, g) == Time::seconds(2.5 * fwd.flops / 2.5e9));
}

TEST_CASE("measured collectives and sends take the measured time, other group sizes the model", "[sim][measured]") {
    const topo::Cluster c = measured_cluster(3);
    OpGraph g(3);
    const auto measured = g.add_collective(CollectiveKind::all_reduce, {0, 1}, Bytes(1'000'000), Stream::comm, Phase::bwd);
    const auto modelled = g.add_collective(CollectiveKind::all_reduce, {0, 1, 2}, Bytes(1'000'000), Stream::comm, Phase::bwd);
    const auto [send, recv] = g.add_send_recv(2, 0, Bytes(1000), Phase::fwd, 0, 0);
    g.finalize();
    sim::SimOptions o;
    o.record_kernel_classes = true;
    const Timeline tl = sim::simulate(g, c, o);
    CHECK(tl.duration(measured[0]) == Time::seconds(1e-3));
    CHECK(tl.duration(measured[1]) == Time::seconds(1e-3));
    // Three ranks over 1 GB/s NICs: the ring moves 2·(2/3) MB per rank, well over a millisecond.
    CHECK(tl.duration(modelled[0]) > Time::ms(1.2));
    CHECK(tl.end[recv] - std::max(tl.start[send], tl.start[recv]) == Time::seconds(2e-5));
}

TEST_CASE("a GPU's profile prices what runs on the GPU in its dtype (FP8, fp32 softmax and the host keep the leads)",
          "[sim][measured]") {
    const topo::NodeGroup lead = topo::cluster_preset("dgx-h100").groups[0];
    topo::NodeGroup g = lead;
    topo::MeasuredCompute m = compute_tables();
    m.gpu = "test GPU";
    m.gemm_bf16 = m.gemm_fp16 = m.gemm;
    for (double& r : m.gemm_bf16.rate) r *= 10;   // 800 GFLOP/s at the large corner
    for (double& r : m.gemm_fp16.rate) r *= 9;    // 720
    m.arithmetic = 0;
    m.comm_slowdown = 0;
    g.device.measured = std::make_shared<const topo::MeasuredCompute>(m);
    using sim::kernel_time;

    const Kernel big = gemm_kernel(KernelName::qkv, KernelClass::gemm, 1024, 1024, 1024, 1, 2, true);
    CHECK(kernel_time(big, DType::bf16, false, g) == Time::seconds(big.flops / 800e9));
    CHECK(kernel_time(big, DType::fp16, false, g) == Time::seconds(big.flops / 720e9));
    // Sixteen products of 64 rows side by side: the rate of one of 1,024 rows.
    const Kernel batched = gemm_kernel(KernelName::scores, KernelClass::attention, 64, 1024, 1024, 16, 2, false);
    CHECK(kernel_time(batched, DType::bf16, false, g) == Time::seconds(batched.flops / 800e9));
    // fp32 operands inside a bf16 run: the fp32 table.
    const Kernel wide = gemm_kernel(KernelName::router, KernelClass::gemm, 1024, 1024, 1024, 1, 4, true);
    CHECK(kernel_time(wide, DType::bf16, false, g) == Time::seconds(wide.flops / 80e9));
    // No FP8 GEMM was measured: the FP8 curve, as without a profile.
    const Kernel f8 = fp8_gemm_kernel(KernelName::qkv, KernelClass::gemm, 1024, 1024, 1024, 1, 2, true, Fp8Recipe::delayed);
    CHECK(kernel_time(f8, DType::bf16, false, g) == kernel_time(f8, DType::bf16, false, lead));

    // Flash attention and softmax were timed on 16-bit elements.
    const Kernel flash = flash_kernel(4, 64, 64, 64, 2, false);
    CHECK(kernel_time(flash, DType::bf16, false, g) == Time::seconds(flash.flops / 10e9));
    {
        // The flash tables hold a full GPU's rate (calibrate timed two 64-row tiles or more per
        // SM): on 132 SMs the 4 query tiles of 4 heads × 64 queries run at 4/132 of it; 3 heads
        // × 4,096 queries (192 tiles) at all of it; backward counts tiles of keys, 3 × 1 here.
        topo::NodeGroup filled = g;
        topo::MeasuredCompute with_sms = m;
        with_sms.sms = 132;
        filled.device.measured = std::make_shared<const topo::MeasuredCompute>(with_sms);
        CHECK(kernel_time(flash, DType::bf16, false, filled).to_seconds() ==
              Approx(kernel_time(flash, DType::bf16, false, g).to_seconds() * 132 / 4));
        const Kernel wide_fwd = flash_kernel(3, 4096, 64, 64, 2, false), wide_bwd = flash_kernel(3, 4096, 64, 64, 2, true);
        CHECK(kernel_time(wide_fwd, DType::bf16, false, filled) == kernel_time(wide_fwd, DType::bf16, false, g));
        CHECK(kernel_time(wide_bwd, DType::bf16, false, filled).to_seconds() ==
              Approx(kernel_time(wide_bwd, DType::bf16, false, g).to_seconds() * 132 / 3));
    }
    const Kernel soft16 = softmax_kernel(1000, 1000, 2), soft32 = softmax_kernel(1000, 1000, 4);
    CHECK(kernel_time(soft16, DType::bf16, false, g) == Time::seconds(1e6 / 1e9));
    CHECK(kernel_time(soft32, DType::bf16, false, g) == kernel_time(soft32, DType::bf16, false, lead));

    // Streaming passes and Adam by size in any dtype; arithmetic beyond the pass's at the vector peak.
    const Kernel busy = stream_kernel(KernelName::layer, KernelClass::elementwise, 8000, 2000 + 4e6);
    CHECK(kernel_time(busy, DType::bf16, false, g).to_seconds() ==
          Approx(8000 / 50e9 + 4e6 / lead.device.peak_for(DType::fp32).per_second()));
    const Kernel adam = adam_kernel(1000, 28);
    CHECK(kernel_time(adam, DType::bf16, false, g) == Time::seconds(1000 / 2e9));
    // Offload's Adam on the host CPU is not the GPU's: the host's rate, as without the profile.
    CHECK(kernel_time(adam, DType::bf16, true, g) == kernel_time(adam, DType::bf16, true, lead));
}
