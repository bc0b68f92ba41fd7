#include "exec/cuda/gemm.hpp"

#include <memory>

#include "core/error.hpp"

namespace smol::exec::cuda {

namespace {

cudaDataType_t data_type(Element e) {
    switch (e) {
        case Element::bf16: return CUDA_R_16BF;
        case Element::fp16: return CUDA_R_16F;
        case Element::fp32: return CUDA_R_32F;
    }
    return CUDA_R_32F;
}

cublasComputeType_t compute_type(Compute c) {
    return c == Compute::fp32_fast_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T value, const std::string& what) {
    check(cublasLtMatrixLayoutSetAttribute(l, attr, &value, sizeof value), "cublasLtMatrixLayoutSetAttribute for " + what);
}

cublasLtMatrixLayout_t make_layout(const MatrixLayout& m, Element e, const std::string& what) {
    cublasLtMatrixLayout_t l = nullptr;
    check(cublasLtMatrixLayoutCreate(&l, data_type(e), static_cast<std::uint64_t>(m.rows), static_cast<std::uint64_t>(m.cols), m.ld),
          "cublasLtMatrixLayoutCreate for " + what);
    if (m.batch > 1) {
        set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<std::int32_t>(m.batch), what);
        set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<std::int64_t>(m.stride), what);
    }
    return l;
}

}  // namespace

std::string describe(cublasStatus_t s) {
    return std::string(cublasLtGetStatusName(s)) + " (" + cublasLtGetStatusString(s) + ")";
}

void check(cublasStatus_t s, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw Error(ErrorKind::internal, what + " failed: " + describe(s));
}

std::string describe(const GemmShape& g) {
    // Back to the recipe's row-major terms: m = g.n, n = g.m, k = g.k.
    std::string s = std::to_string(g.n) + "×" + std::to_string(g.k) + " · " + std::to_string(g.k) + "×" + std::to_string(g.m);
    if (g.a.batch > 1) s += " × " + std::to_string(g.a.batch);
    return s + ", " + to_string(g.element) + (g.compute == Compute::fp32_fast_tf32 ? " (TF32)" : "");
}

Matmul::Matmul(cublasLtHandle_t handle, const GemmShape& shape, std::int64_t workspace_bytes)
    : handle_(handle), shape_(shape), workspace_bytes_(workspace_bytes) {
    const std::string what = "the GEMM " + describe(shape);
    check(cublasLtMatmulDescCreate(&op_, compute_type(shape.compute), CUDA_R_32F), "cublasLtMatmulDescCreate for " + what);
    const cublasOperation_t n = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n), "cublasLtMatmulDescSetAttribute for " + what);
    check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n), "cublasLtMatmulDescSetAttribute for " + what);
    a_ = make_layout(shape.a, shape.element, what);
    b_ = make_layout(shape.b, shape.element, what);
    c_ = make_layout(shape.c, shape.element, what);

    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate for " + what);
    auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
        check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value), "cublasLtMatmulPreferenceSetAttribute for " + what);
    };
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(workspace_bytes));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(shape.align_a));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(shape.align_b));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<std::uint32_t>(shape.align_c));
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(shape.align_c));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, op_, a_, b_, c_, c_, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    check(s, "cublasLtMatmulAlgoGetHeuristic for " + what);
    if (found == 0)
        fail_input("cuBLASLt has no algorithm for " + what + " within a workspace of " + std::to_string(workspace_bytes) + " bytes");
    algo_ = result.algo;
}

Matmul::~Matmul() {
    if (c_) cublasLtMatrixLayoutDestroy(c_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (op_) cublasLtMatmulDescDestroy(op_);
}

void Matmul::run(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasLtMatmul(handle_, op_, &alpha, a, a_, b, b_, &beta, c, c_, c, c_, &algo_, workspace,
                         static_cast<std::size_t>(workspace_bytes_), stream),
          "cublasLtMatmul of " + describe(shape_));
}

Matmuls::Matmuls() { check(cublasLtCreate(&handle_), "cublasLtCreate"); }

Matmuls::~Matmuls() {
    made_.clear();
    if (handle_) cublasLtDestroy(handle_);
}

Matmuls::Key Matmuls::key(const GemmShape& s) {
    return {s.m, s.n, s.k, s.a.batch, static_cast<int>(s.element), static_cast<int>(s.compute)};
}

const Matmul& Matmuls::get(const GemmShape& shape, std::int64_t workspace_bytes) {
    auto& slot = made_[key(shape)];
    if (!slot) slot = std::make_unique<Matmul>(handle_, shape, workspace_bytes);
    return *slot;
}

const Matmul& Matmuls::at(const GemmShape& shape) const {
    const auto it = made_.find(key(shape));
    if (it == made_.end()) throw Error(ErrorKind::internal, "no prepared matmul for " + describe(shape));
    return *it->second;
}

}  // namespace smol::exec::cuda
