// The CPU backend's kernels, in fp32, on caller-owned buffers: what `run` executes and what
// `calibrate` times (so a profile measures the code a run executes).
//
//   gemm        C[m×n] = A[m×k]·B[k×n] through cblas_sgemm (row major), a batched GEMM as a loop
//   softmax     rows of n elements, in place: max, exp, sum, scale (a branch-free exp that the
//               compiler vectorises, and 16 partial sums / maxima per row)
//   flash       FlashAttention-2's tiled forward and backward for one head (Dao 2023, Algorithms 1
//               and 2): blocks of queries × blocks of keys, the scores never materialised beyond
//               a tile; tile products through cblas_sgemm
//   stream      y = a·x + b over n elements: reads 4n bytes, writes 4n bytes
//   adam        torch.optim.Adam's update (no weight decay, no amsgrad) over n parameters
//
// None of these allocate; the buffers come from the backend's workspace.
#pragma once

#include <cstdint>
#include <string>

namespace smol::exec::cpu {

/// BLAS threads for this process (openblas_set_num_threads where the library is OpenBLAS).
void set_blas_threads(int threads);
int blas_threads();
/// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64", or "CBLAS" for another library.
std::string blas_version();

/// C = A·B, row major: A is m×k, B is k×n, C is m×n.
void gemm(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k);

/// exp(x) for x in float range, relative error below 2e-7 (Cephes' expf polynomial, range
/// reduction by ln 2, the exponent set by integer arithmetic). 0 below −87.3, +inf above 88.7.
float fast_exp(float x);

/// Softmax of each of `rows` rows of `cols` elements, in place.
void softmax(float* x, std::int64_t rows, std::int64_t cols);

/// Scratch for flash attention tiles (kFlashBlock × kFlashBlock scores and per-row state).
inline constexpr std::int64_t kFlashBlock = 64;
/// Floats of scratch flash_forward / flash_backward need for head dimension d.
std::int64_t flash_scratch_floats(std::int64_t d);

/// One head: O = softmax(Q·Kᵀ·scale)·V, Q q×d, K and V kv×d, O q×d; lse (q floats) receives
/// each row's log-sum-exp, which the backward pass uses. `scratch`: flash_scratch_floats(d).
/// `causal`: query i sees keys 0…i only (all of them once i ≥ kv − 1), and the tiles the mask
/// empties are skipped: Σᵢ min(i + 1, kv) query-key pairs, the work a causal or sliding-window
/// kernel of the op graph counts (core/kernel.hpp causal_pairs).
void flash_forward(const float* q, const float* k, const float* v, float* o, float* lse, std::int64_t q_len,
                   std::int64_t kv_len, std::int64_t d, float scale, float* scratch, bool causal);
/// One head's gradients dQ, dK, dV from dO, with O and lse from the forward pass (scores
/// recomputed per tile), under the forward's mask. `scratch`: flash_scratch_floats(d) + q_len.
void flash_backward(const float* q, const float* k, const float* v, const float* o, const float* d_o,
                    const float* lse, float* dq, float* dk, float* dv, std::int64_t q_len, std::int64_t kv_len,
                    std::int64_t d, float scale, float* scratch, bool causal);

/// y[i] = a·x[i] + b.
void stream(const float* x, float* y, std::int64_t n, float a, float b);
/// `flops` floating-point operations of register-resident arithmetic (fused multiply-adds on
/// 64 accumulators): a memory-free kernel's work.
void arithmetic(double flops);

struct AdamParams {
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};
/// One Adam step number `step` (from 1) over n parameters: m = β1·m + (1−β1)·g,
/// v = β2·v + (1−β2)·g², p −= lr · (m / (1−β1^step)) / (sqrt(v / (1−β2^step)) + eps).
void adam(float* p, float* m, float* v, const float* g, std::int64_t n, const AdamParams& a, int step);

}  // namespace smol::exec::cpu
