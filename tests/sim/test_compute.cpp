#include <catch2/catch.hpp>

#include <cmath>

#include "sim/compute.hpp"

using namespace smol;
using namespace smol::sim;

namespace {
topo::NodeGroup a100_like() {
    topo::NodeGroup g;
    g.device.peak[static_cast<int>(DType::bf16)] = FlopRate::tflops(312);
    g.device.memory_bandwidth = Bandwidth::gb_per_s(2000);
    g.device.launch_overhead = Time::us(5);
    g.device.gemm_efficiency = 0.8;
    g.device.gemm_half_dim = 512;
    g.device.memory_efficiency = 0.8;
    g.host_memory_bandwidth = Bandwidth::gb_per_s(400);
    return g;
}
}  // namespace

TEST_CASE("small GEMMs run far below peak, large ones approach the device's efficiency", "[sim][compute]") {
    const topo::NodeGroup g = a100_like();
    auto eff = [&](std::int64_t n) { return gemm_efficiency(g.device, n, n, n); };
    // e = 0.8 · d / (d + 512) with d = (m·n·k)^(1/3).
    CHECK(eff(512) == Approx(0.4));
    CHECK(eff(8192) == Approx(0.8 * 8192 / (8192 + 512.0)));
    CHECK(eff(64) < 0.1);
    // d = (4096² · 16)^(1/3) = 645
    CHECK(gemm_efficiency(g.device, 4096, 4096, 16) == Approx(0.8 * 645.0 / (645.0 + 512)).epsilon(0.01));
    // A batch of 8 GEMMs fills the device like one with 8× the work: d doubles.
    CHECK(gemm_efficiency(g.device, 256, 256, 256, 8) == Approx(eff(512)));
}

TEST_CASE("an op without kernels is priced as one kernel of its class", "[sim][compute]") {
    const topo::NodeGroup g = a100_like();
    Op op;
    op.kind = OpKind::compute;
    op.flops = 2.0 * 8192 * 8192 * 8192;
    op.bytes = 1'000'000'000;
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::gemm) | static_cast<int>(DType::bf16) << 3);
    const double expected = op.flops / (312e12 * 0.8) + 1e9 / (2000e9 * 0.8) + 5e-6;
    CHECK(compute_time(op, {}, g).to_seconds() == Approx(expected).epsilon(1e-6));
    // An offloaded optimizer step runs at host DRAM bandwidth.
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::optimizer) | static_cast<int>(DType::bf16) << 3 | 64);
    CHECK(compute_time(op, {}, g).to_seconds() == Approx(1e9 / (400e9 * g.host_memory_efficiency) + 5e-6).epsilon(1e-6));
}

TEST_CASE("every kernel on its own roofline, a GPU hides launches behind long kernels", "[sim][compute]") {
    const topo::NodeGroup g = a100_like();
    Op op;
    op.kind = OpKind::compute;
    op.ref = 0;  // has a recipe
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::gemm) | static_cast<int>(DType::bf16) << 3);
    const Kernel big = gemm_kernel(KernelName::mlp_up, KernelClass::gemm, 8192, 8192, 8192, 1, 2, true);
    const Kernel pass = stream_kernel(KernelName::norm, KernelClass::elementwise, 1'000'000'000);
    const double t_big = big.flops / (312e12 * 0.8 * 8192 / (8192 + 512.0));
    const double t_pass = 1e9 / (2000e9 * 0.8);
    CHECK(kernel_time(big, DType::bf16, false, g).to_seconds() == Approx(t_big).epsilon(1e-6));
    CHECK(kernel_time(pass, DType::bf16, false, g).to_seconds() == Approx(t_pass).epsilon(1e-6));
    // Long kernels: the second is issued 5 us after the first starts, long before the device is free.
    const std::vector<Kernel> two{big, pass};
    CHECK(compute_time(op, two, g).to_seconds() == Approx(t_big + t_pass).epsilon(1e-6));
    // Tiny kernels: bound by the host issuing one every 5 us.
    const Kernel tiny = stream_kernel(KernelName::norm, KernelClass::elementwise, 1000);
    const std::vector<Kernel> ten(10, tiny);
    CHECK(compute_time(op, ten, g).to_seconds() == Approx(10 * 5e-6).epsilon(1e-6));
    // A CPU runs dispatch and kernel on the same cores: they add up.
    topo::NodeGroup cpu = g;
    cpu.device.is_cpu = true;
    CHECK(compute_time(op, two, cpu).to_seconds() == Approx(t_big + t_pass + 2 * 5e-6).epsilon(1e-6));
}

TEST_CASE("the framework's dispatch adds to each kernel's issue on a GPU, not on a CPU", "[sim][compute]") {
    const topo::NodeGroup g = a100_like();
    Op op;
    op.kind = OpKind::compute;
    op.ref = 0;
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::elementwise) | static_cast<int>(DType::bf16) << 3);
    const Kernel tiny = stream_kernel(KernelName::norm, KernelClass::elementwise, 1000);
    const std::vector<Kernel> ten(10, tiny);
    // Ten tiny kernels issued every 5 us (driver) + 50 us (framework): 550 us, host-bound.
    CHECK(compute_time(op, ten, g, Time::us(50)).to_seconds() == Approx(10 * 55e-6).epsilon(1e-6));
    // A long kernel hides the issue of the next ones: the 1 ms pass runs from 0 while the host
    // issues the ten tiny ones by 11 · 55 = 605 us; they run back to back after it.
    const Kernel pass = stream_kernel(KernelName::norm, KernelClass::elementwise, 1'600'000'000);  // 1 ms at 1.6 TB/s
    std::vector<Kernel> mixed{pass};
    mixed.insert(mixed.end(), ten.begin(), ten.end());
    const double t_tiny = kernel_time(tiny, DType::bf16, false, g).to_seconds();
    CHECK(compute_time(op, mixed, g, Time::us(50)).to_seconds() == Approx(1e-3 + 10 * t_tiny).epsilon(1e-6));
    // A CPU board's launch_overhead is already its framework's dispatch; nothing is added.
    topo::NodeGroup cpu = g;
    cpu.device.is_cpu = true;
    CHECK(compute_time(op, ten, cpu, Time::us(50)) == compute_time(op, ten, cpu));
}
