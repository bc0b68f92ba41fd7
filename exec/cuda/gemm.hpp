// GEMMs through cuBLASLt: one prepared matmul per shape (descriptors, layouts and the
// heuristic's first algorithm, chosen once in prepare so a step times only the product), run on
// a stream with the stream's workspace.
#pragma once

#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "exec/cuda/plan.hpp"

namespace smol::exec::cuda {

/// "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
std::string describe(cublasStatus_t s);
/// Throws Error(internal) "WHAT failed: CUBLAS_STATUS_…" unless s is CUBLAS_STATUS_SUCCESS.
void check(cublasStatus_t s, const std::string& what);
/// "3×1024 · 1024×4096 (m×k · k×n) × 12, bf16": a recipe GEMM as people read it.
std::string describe(const GemmShape& g);

class Matmul {
public:
    /// Descriptors for `shape` and the heuristic's best algorithm within `workspace_bytes`;
    /// bad_input naming the shape when cuBLASLt has no algorithm for it.
    Matmul(cublasLtHandle_t handle, const GemmShape& shape, std::int64_t workspace_bytes);
    ~Matmul();
    Matmul(const Matmul&) = delete;
    Matmul& operator=(const Matmul&) = delete;

    /// C = A·B (column-major terms of the shape: A is shape.a, B is shape.b), beta 0.
    void run(const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) const;
    const GemmShape& shape() const { return shape_; }

private:
    cublasLtHandle_t handle_;
    GemmShape shape_;
    std::int64_t workspace_bytes_;
    cublasLtMatmulDesc_t op_ = nullptr;
    cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
    cublasLtMatmulAlgo_t algo_{};
};

/// The matmuls of one stream, made on first request (in prepare) and reused.
class Matmuls {
public:
    Matmuls();
    ~Matmuls();
    Matmuls(const Matmuls&) = delete;
    Matmuls& operator=(const Matmuls&) = delete;
    const Matmul& get(const GemmShape& shape, std::int64_t workspace_bytes);
    /// The matmul already made for `shape` (internal error when prepare did not make it).
    const Matmul& at(const GemmShape& shape) const;

private:
    using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int32_t, int, int>;
    static Key key(const GemmShape& s);
    cublasLtHandle_t handle_ = nullptr;
    std::map<Key, std::unique_ptr<Matmul>> made_;
};

}  // namespace smol::exec::cuda
