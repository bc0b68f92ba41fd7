// cuBLASLt matmuls as the backend makes them (exec/cuda/gemm.hpp over plan.hpp's layouts) against
// a triple loop in double over the same rounded row-major inputs: bf16 and fp16 with fp32
// accumulation, fp32, and fp32 on TF32 tensor cores; odd shapes and strided batches.
#include <catch2/catch.hpp>

#include "cuda_support.hpp"
#include "exec/cuda/gemm.hpp"

using namespace smol;
using namespace smol::exec::cuda;
using smol::test::DeviceMemory;

namespace {

double compute_capability() {
    int device = 0, major = 0, minor = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "attribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "attribute");
    return major + 0.1 * minor;
}

}  // namespace

TEST_CASE("cuBLASLt GEMMs equal the row-major product, per dtype and shape", "[cuda][gemm]") {
    struct Case {
        DType dtype;
        bool tf32;
        double tolerance;   // relative: the output's rounding (bf16 2^-8, fp16 2^-11) or TF32's 10-bit mantissa
    };
    const double cc = compute_capability();
    std::vector<Case> cases{{DType::bf16, false, 1e-2}, {DType::fp16, false, 2e-3}, {DType::fp32, false, 1e-5}};
    if (cc >= 8.0) cases.push_back({DType::fp32, true, 3e-3});
    Matmuls matmuls;
    DeviceMemory ws(kLtWorkspaceBytes);
    for (const Case& c : cases)
        for (auto [m, n, k, batch] : std::vector<std::array<std::int64_t, 4>>{{3, 5, 7, 2}, {64, 128, 32, 1}, {129, 65, 33, 3}, {256, 256, 256, 1}}) {
            INFO(to_string(c.dtype) << (c.tf32 ? " (TF32)" : "") << ": " << m << "×" << k << " · " << k << "×" << n << " × " << batch);
            const Element e = element_of(c.dtype);
            const std::size_t an = static_cast<std::size_t>(batch * m * k), bn = static_cast<std::size_t>(batch * k * n),
                              cn = static_cast<std::size_t>(batch * m * n), eb = static_cast<std::size_t>(element_bytes(e));
            const auto a = test::rounded(test::uniform(an, 1), e), b = test::rounded(test::uniform(bn, 2), e);
            DeviceMemory da(an * eb), db(bn * eb), dc(cn * eb);
            test::upload(da.get(), test::encode(a, e));
            test::upload(db.get(), test::encode(b, e));
            const Kernel kernel = gemm_kernel(KernelName::qkv, KernelClass::gemm, m, n, k, batch, static_cast<int>(eb), true);
            const Matmul& mm = matmuls.get(gemm_shape(kernel, c.dtype, c.tf32, cc), kLtWorkspaceBytes);
            mm.run(db.get(), da.get(), dc.get(), ws.get(), nullptr);   // the matmul's A is the recipe's B
            check(cudaDeviceSynchronize(), "sync");
            std::vector<double> ref(cn, 0.0);
            for (std::int64_t s = 0; s < batch; ++s)
                for (std::int64_t i = 0; i < m; ++i)
                    for (std::int64_t p = 0; p < k; ++p)
                        for (std::int64_t j = 0; j < n; ++j)
                            ref[static_cast<std::size_t>(s * m * n + i * n + j)] +=
                                static_cast<double>(a[static_cast<std::size_t>(s * m * k + i * k + p)]) * b[static_cast<std::size_t>(s * k * n + p * n + j)];
            CHECK(test::relative_error(test::download(dc.get(), cn, e), ref) < c.tolerance);
        }
}
