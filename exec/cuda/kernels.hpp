// The CUDA backend's own kernels (kernels.cu), callable from plain C++: what `run` executes and
// what the GPU calibration times. Every launcher returns the launch's cudaError_t
// (cudaGetLastError after the launch) so the caller can name the op that failed.
//
//   fill          n elements of a dtype, uniform in [lo, hi) from a counter-based hash of
//                 (seed, index) (splitmix64, Steele et al. 2014): fresh, reproducible, never zero
//   softmax       one warp per row: an online max-and-sum pass (Milakov & Gimelshein 2018), then
//                 y = exp(x − max) / sum; 16-byte loads where the row allows; fp32 arithmetic
//   softmax_bwd   dx = y ∘ (dy − Σ y∘dy), one warp per row
//   flash_fwd     FlashAttention-2's forward (Dao 2023, Algorithm 1) on tensor cores through
//                 WMMA 16×16×16 fragments (fp32 accumulation): a block of 16·warps query rows
//                 walks the keys in tiles of 64, scores and the output accumulator in shared
//                 memory, the online softmax per row; writes O and each row's log-sum-exp
//   flash_bwd     its backward (Algorithm 2): a block per tile of keys walks the query tiles,
//                 recomputes P from the saved log-sum-exp, accumulates dK and dV in shared
//                 memory and adds dQ (fp32) with atomics, as FlashAttention-2 does; a small
//                 kernel first computes delta = rowsum(dO ∘ O)
//   stream        y = a·x + b over n floats (16-byte loads), with `fma` extra fused multiply-adds
//                 per element for a memory-bound kernel's arithmetic
//   adam          a fused multi-tensor Adam (as apex's FusedAdam / torch's fused AdamW run it: one
//                 launch over a list of tensors), torch.optim.Adam's update in fp32
//   empty         a kernel that does nothing: what calibration times launches with
//
// Layouts: attention tensors are [heads][length][d] with d a multiple of 16 (plan.hpp pads it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/types.hpp"

namespace smol::exec::cuda {

cudaError_t fill_uniform(void* data, std::int64_t elements, Element e, float lo, float hi, std::uint64_t seed,
                         cudaStream_t stream);

cudaError_t softmax_forward(const void* x, void* y, std::int64_t rows, std::int64_t cols, Element e, cudaStream_t stream);
cudaError_t softmax_backward(const void* y, const void* dy, void* dx, std::int64_t rows, std::int64_t cols, Element e,
                             cudaStream_t stream);

/// Raises the dynamic shared-memory limit of the flash kernels of the current device to what
/// `tiles` asks (cudaFuncSetAttribute); call once per device before the first launch.
cudaError_t flash_configure(const FlashTiles& tiles);
/// O = softmax(Q·Kᵀ·scale)·V per head; lse[h·q_len + i] = the row's log-sum-exp (scaled scores).
/// `causal`: query i sees keys 0…i only, and the tiles the mask empties are not computed (the
/// CPU backend's flash_forward has the same mask: exec/cpu/kernels.hpp).
cudaError_t flash_forward(const void* q, const void* k, const void* v, void* o, float* lse, std::int64_t heads,
                          std::int64_t q_len, std::int64_t kv_len, const FlashTiles& tiles, float scale, bool causal,
                          Element e, cudaStream_t stream);
/// dQ (fp32, written from zero), dK, dV from dO, with O and lse of the forward, under its mask;
/// `delta` is scratch of heads·q_len floats.
cudaError_t flash_backward(const void* q, const void* k, const void* v, const void* o, const void* d_o, const float* lse,
                           float* delta, float* dq, void* dk, void* dv, std::int64_t heads, std::int64_t q_len,
                           std::int64_t kv_len, const FlashTiles& tiles, float scale, bool causal, Element e,
                           cudaStream_t stream);

cudaError_t stream_pass(const float* x, float* y, std::int64_t n, float a, float b, int fma, cudaStream_t stream);

struct AdamTensor {
    float* p;
    float* m;
    float* v;
    const float* g;
    std::int64_t n;
};
struct AdamHyper {
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};
/// Tensors per launch of the fused Adam (more are launched in groups).
inline constexpr int kAdamTensorsPerLaunch = 32;
/// One Adam step number `step` (from 1) over every tensor, as exec/cpu/kernels.hpp's adam.
cudaError_t adam_step(const AdamTensor* tensors, std::size_t count, const AdamHyper& h, int step, cudaStream_t stream);

/// Launches one empty kernel (one thread).
cudaError_t launch_empty(cudaStream_t stream);

}  // namespace smol::exec::cuda
