// Gradient compression on the CPU, for real: the kernels a compressed bucket runs
// (strategies/compression.hpp) and the compressed all-reduces built from them over MPI.
//
//   1-bit (Seide et al. 2014, as DeepSpeed's NcclBackend.compressed_allreduce,
//   deepspeed/runtime/comm/nccl.py at 0a849d5):
//     onebit_compress   c = g + e (g zero-padded to N); scale = ‖c‖₂ / √N; e = c − scale·sign(c);
//                       bit i = c_i ≥ 0, packed most significant bit first (numpy.packbits order)
//     onebit_server     the p workers' chunks of signs averaged by their scales, plus the server
//                       residual, compressed again the same way
//     onebit_decompress p chunks of signs times their scales: the averaged gradient
//   top-k (Aji & Heafield 2017):
//     topk_compress     c = g + e; the threshold is the k-th largest |c| of a strided sample (the
//                       sample's quantile k/n); up to k elements with |c| ≥ threshold are sent as
//                       (value, index) and zeroed in e (unused pairs are (0, index 0), which add
//                       nothing); e keeps everything not sent
//     topk_decompress   the gradient zeroed, then every rank's pairs added in
//   PowerSGD (Vogels et al. 2019, as PyTorch's powerSGD_hook.py):
//     powersgd_orthogonalize  Gram–Schmidt over a factor's r columns, in place
//   (its factor products are the backend's GEMMs, its other passes memory-bound passes)
//
// onebit_allreduce, topk_allreduce and powersgd_allreduce run the whole exchange on a
// communicator (MPI_Alltoall, MPI_Allgather and MPI_Allreduce of the compressed data), as a
// graph's compressed bucket does op by op.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "core/kernel.hpp"

namespace smol::exec::cpu {

/// Bytes of packed signs for `n` elements (n a multiple of 8).
inline std::int64_t sign_bytes(std::int64_t n) { return n / 8; }

/// Worker step over `n` gradients padded to `padded` (a multiple of 8): updates `error`
/// (`padded` floats), writes padded/8 bytes of signs, returns the scale.
float onebit_compress(const float* grad, std::int64_t n, std::int64_t padded, float* error, std::uint8_t* signs);
/// Server step for one chunk of `chunk` elements (a multiple of 8): `signs` holds p chunks of
/// chunk/8 bytes (worker w's at w·chunk/8), `scales` p floats. Averages them, adds and updates
/// `server_error` (chunk floats), writes chunk/8 bytes of signs, returns the server scale.
float onebit_server(const std::uint8_t* signs, const float* scales, int p, std::int64_t chunk, float* server_error,
                    std::uint8_t* out_signs);
/// out[w·chunk + i] = ±scales[w] for the p chunks; the first `n` elements are written.
void onebit_decompress(const std::uint8_t* signs, const float* scales, int p, std::int64_t chunk, std::int64_t n, float* out);

/// The 1-bit compressed all-reduce of `n` gradients on `comm`: `grad` becomes the compressed
/// average over the ranks. `worker_error` (padded floats) and `server_error` (padded / p floats)
/// carry each step's compression error to the next; `padded` is strategies::onebit_padded(n, p).
void onebit_allreduce(float* grad, std::int64_t n, std::int64_t padded, float* worker_error, float* server_error, MPI_Comm comm);

/// Worker step: c = grad + error over n elements, up to k pairs of |c| ≥ the threshold from
/// `sample` strided elements (scratch: `sample` floats); `values` and `indices` get k entries.
void topk_compress(const float* grad, std::int64_t n, std::int64_t k, std::int64_t sample, float* error, float* values,
                   std::int32_t* indices, float* scratch);
/// out = Σ over the `pairs` (value, index) of every rank, zero elsewhere (n elements).
void topk_decompress(const float* values, const std::int32_t* indices, std::int64_t pairs, std::int64_t n, float* out);
/// The top-k compressed all-reduce on `comm`: `grad` becomes the sum of every rank's k pairs
/// divided by p (the average, as DDP's gradients are), `error` (n floats) keeps what was not sent.
void topk_allreduce(float* grad, std::int64_t n, std::int64_t k, std::int64_t sample, float* error, MPI_Comm comm);

/// Gram–Schmidt over the r columns of the row-major rows × r matrix `m`, in place
/// (powerSGD_hook.py _orthogonalize_gram_schmidt with PowerSGDState's default
/// orthogonalization_epsilon 0): each column divided by its norm, then its projection taken out
/// of every column after it. A column of norm 0 is left as it is, where the hook divides by 0.
void powersgd_orthogonalize(float* m, std::int64_t rows, std::int64_t r);

/// PowerSGD's exchange of one rows × cols gradient `grad` (row major) at rank r on `comm`, with
/// error feedback and warm start (powerSGD_hook.py): M = grad + error, kept; Q (cols × r, the last
/// step's) orthogonalised; P = M·Q, all-reduced (summed); P orthogonalised; Q = Mᵀ·P, all-reduced
/// and divided by the ranks; grad = P·Qᵀ, the rank-r approximation of the ranks' average M;
/// error = M − grad. `q` keeps the averaged Q for the next step; `p` (rows × r) and `scratch`
/// (rows × cols) are workspace.
void powersgd_allreduce(float* grad, std::int64_t rows, std::int64_t cols, std::int64_t r, float* error, float* p, float* q,
                        float* scratch, MPI_Comm comm);

/// Floats of workspace one compression kernel needs (strategies/compression.hpp's shape fields).
std::int64_t compression_floats(const Kernel& k);
/// Runs one compression kernel on `workspace` (compression_floats(k) floats): its operands, its
/// residuals and its outputs back to back.
void run_compression_kernel(const Kernel& k, float* workspace);
/// Whether `k` is a compression kernel (by its name).
bool is_compression_kernel(const Kernel& k);

}  // namespace smol::exec::cpu
