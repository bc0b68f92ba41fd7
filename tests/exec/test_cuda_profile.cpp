// GPU calibration figures as a profile (exec/cuda/profile.cpp fill_profile), checked on any
// machine: figures made by hand, as measure_device and measure_nccl lay them out, become the
// tables, curves and collective curves a GPU's profile holds, and survive the profile's JSON.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "exec/cuda/measure.hpp"
#include "topologies/profile.hpp"

using namespace smol;
using namespace smol::exec::cuda;
using Catch::Matchers::Contains;

namespace {

/// Figures of a GPU measured on a 2-point grid: every GEMM of dtype d at m·n·k · (1, 2, 3 for
/// bf16, fp16, fp32) FLOP/s; TF32 at 7; flash at q + kv + d (+1000 backward, ×0.5 causal).
GpuFigures figures() {
    GpuFigures f;
    f.device = "NVIDIA H200 (compute capability 9.0, 132 SMs, 139.8 GiB)";
    f.sms = 132;
    f.gemm_dims = {256, 4096};
    const std::pair<DType, double> dtypes[] = {{DType::bf16, 1}, {DType::fp16, 2}, {DType::fp32, 3}};
    for (const auto& [d, x] : dtypes)
        for (std::int64_t m : f.gemm_dims)
            for (std::int64_t n : f.gemm_dims)
                for (std::int64_t k : f.gemm_dims) f.gemm.push_back({d, false, m, n, k, x * static_cast<double>(m * n * k)});
    for (std::int64_t m : f.gemm_dims)
        for (std::int64_t n : f.gemm_dims)
            for (std::int64_t k : f.gemm_dims) f.gemm.push_back({DType::fp32, true, m, n, k, 7});
    for (bool causal : {false, true})
        for (std::int64_t d : {64, 128})
            for (std::int64_t q : {512, 4096})
                for (std::int64_t kv : {512, 4096})
                    for (bool bwd : {false, true})
                        f.flash.push_back({bwd, causal, 33, q, kv, d, (causal ? 0.5 : 1.0) * static_cast<double>(q + kv + d + (bwd ? 1000 : 0))});
    f.stream = {{1 << 20, 1e-6}, {1 << 30, 4e-4}};
    f.softmax = {{1 << 20, 2e-6}};
    f.adam = {{1 << 20, 1e-5}, {256 << 20, 1e-3}};
    f.launch = Time::us(2.5);
    f.h2d = {{1 << 20, 4e-5}, {1 << 30, 2e-2}};
    f.d2h = {{1 << 20, 5e-5}, {1 << 30, 2.5e-2}};
    // rank 0's NCCL figures: all-reduce on 2 and 4 GPUs, all-gather on 4, sizes out of order.
    f.nccl = {{CollectiveKind::all_reduce, 2, 1 << 20, 2e-5},
              {CollectiveKind::all_reduce, 2, 4 << 10, 8e-6},
              {CollectiveKind::all_reduce, 4, 1 << 20, 3e-5},
              {CollectiveKind::all_gather, 4, 1 << 20, 1.5e-5}};
    return f;
}

topo::Profile header(int ranks_per_node) {
    topo::Profile p;
    p.hosts = {"gpu0", "gpu1"};
    p.cpu_model = "Test CPU";
    p.nodes = 2;
    p.ranks_per_node = ranks_per_node;
    p.date = "2026-12-06T00:00:00Z";
    return p;
}

}  // namespace

TEST_CASE("a GPU's figures become its profile's tables, curves and collective curves", "[exec][cuda][profile]") {
    topo::Profile p = header(2);
    fill_profile(figures(), p);
    const topo::MeasuredCompute& c = p.compute;
    CHECK(c.on_gpu());
    CHECK(c.gpu == figures().device);
    CHECK(c.sms == 132);
    // GEMM tables per dtype on the grid, k fastest; TF32 left out.
    CHECK(c.gemm_bf16.m == std::vector<double>{256, 4096});
    REQUIRE(c.gemm_bf16.rate.size() == 8);
    CHECK(c.gemm_bf16.rate[1] == 256.0 * 256 * 4096);          // m 256, n 256, k 4096
    CHECK(c.gemm_bf16.rate[4] == 4096.0 * 256 * 256);          // m 4096, n 256, k 256
    CHECK(c.gemm_fp16.rate[7] == 2.0 * 4096 * 4096 * 4096);
    CHECK(c.gemm.rate[2] == 3.0 * 256 * 4096 * 256);           // fp32 without TF32
    // Flash attention: q × kv × head dim, per direction and mask.
    CHECK(c.flash_fwd.m == std::vector<double>{512, 4096});
    CHECK(c.flash_fwd.n == std::vector<double>{512, 4096});
    CHECK(c.flash_fwd.k == std::vector<double>{64, 128});
    CHECK(c.flash_fwd.at(512, 4096, 128) == Approx(512 + 4096 + 128));
    CHECK(c.flash_bwd.at(4096, 512, 64) == Approx(4096 + 512 + 64 + 1000));
    CHECK(c.flash_fwd_causal.at(4096, 4096, 64) == Approx(0.5 * (4096 + 4096 + 64)));
    CHECK(c.flash_bwd_causal.at(512, 512, 128) == Approx(0.5 * (512 + 512 + 128 + 1000)));
    // Size → rate curves; the launch interval as the dispatch; nothing of the CPU calibration's.
    CHECK(c.stream.x == std::vector<double>{1 << 20, 1 << 30});
    CHECK(c.stream.y[1] == Approx((1 << 30) / 4e-4));
    CHECK(c.softmax.y[0] == Approx((1 << 20) / 2e-6));
    CHECK(c.adam.y[1] == Approx((256 << 20) / 1e-3));
    CHECK(c.dispatch == Time::us(2.5));
    CHECK(c.arithmetic == 0);
    CHECK(c.comm_slowdown == 0);
    CHECK(p.has_compute);
    CHECK_FALSE(p.has_memory);
    CHECK(p.h2d.y == std::vector<double>{4e-5, 2e-2});
    CHECK(p.d2h.x == std::vector<double>{1 << 20, 1 << 30});
    // NCCL: one curve per collective and group size, sizes increasing; with 2 ranks per host a
    // group of 4 spans 2 hosts.
    const topo::MeasuredTransfer* ar2 = p.network.collective(CollectiveKind::all_reduce, 2, 1);
    REQUIRE(ar2);
    CHECK(ar2->time.x == std::vector<double>{4 << 10, 1 << 20});
    CHECK(ar2->time.y == std::vector<double>{8e-6, 2e-5});
    CHECK(p.network.collective(CollectiveKind::all_reduce, 4, 2) != nullptr);
    CHECK(p.network.collective(CollectiveKind::all_gather, 4, 2) != nullptr);
    CHECK(p.network.transfers.size() == 3);

    // It is a valid profile: its JSON reads back the same.
    const Json j = topo::to_json(p);
    CHECK(topo::to_json(topo::profile_from_json(JsonView(j, "gpu.json"))) == j);
}

TEST_CASE("GPU figures with a grid point missing are an internal error naming it", "[exec][cuda][profile]") {
    GpuFigures f = figures();
    f.gemm.erase(f.gemm.begin() + 9);   // fp16 256 × 256 × 4096
    topo::Profile p = header(1);
    try {
        fill_profile(f, p);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::internal);
        CHECK_THAT(e.what(), Contains("fp16 GEMM 256×256×4096"));
    }
    f = figures();
    f.sms = 0;
    CHECK_THROWS_WITH(fill_profile(f, p), Contains("streaming multiprocessors"));
}
