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
    auto eff = [&](std::int64_t n) {
        const GemmShape s{n, n, n};
        return gemm_efficiency(g.device, &s);
    };
    // e = 0.8 · d / (d + 512) with d = (m·n·k)^(1/3).
    CHECK(eff(512) == Approx(0.4));
    CHECK(eff(8192) == Approx(0.8 * 8192 / (8192 + 512.0)));
    CHECK(eff(64) < 0.1);
    const GemmShape skinny{4096, 4096, 16};  // d = (4096² · 16)^(1/3) = 645
    CHECK(gemm_efficiency(g.device, &skinny) == Approx(0.8 * 645.0 / (645.0 + 512)).epsilon(0.01));
}

TEST_CASE("compute time: GEMM FLOPs plus memory-bound traffic plus a launch", "[sim][compute]") {
    const topo::NodeGroup g = a100_like();
    Op op;
    op.kind = OpKind::compute;
    op.flops = 2.0 * 8192 * 8192 * 8192;  // one 8192³ GEMM
    op.bytes = 1'000'000'000;             // 1 GB of elementwise traffic around it
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::gemm) | static_cast<int>(DType::bf16) << 3);
    const GemmShape s{8192, 8192, 8192};
    const double e = 0.8 * 8192 / (8192 + 512.0);
    const double expected = op.flops / (312e12 * e) + 1e9 / (2000e9 * 0.8) + 5e-6;
    CHECK(compute_time(op, &s, g).to_seconds() == Approx(expected).epsilon(1e-6));
    // A memory-bound kernel is a roofline: the larger of its two times.
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::elementwise) | static_cast<int>(DType::bf16) << 3);
    op.flops = 1e9;
    CHECK(compute_time(op, nullptr, g).to_seconds() == Approx(1e9 / (2000e9 * 0.8) + 5e-6).epsilon(1e-6));
    // An offloaded optimizer step runs at host DRAM bandwidth.
    op.sub = static_cast<std::uint8_t>(static_cast<int>(KernelClass::optimizer) | static_cast<int>(DType::bf16) << 3 | 64);
    CHECK(compute_time(op, nullptr, g).to_seconds() == Approx(1e9 / (400e9 * 0.8) + 5e-6).epsilon(1e-6));
}
