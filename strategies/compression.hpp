// Gradient compression for the data-parallel strategies that exchange full gradients (ddp, ring):
// --compress 1bit | topk:RATIO | powersgd:RANK.
//
//  1bit  1-bit SGD with error feedback (Seide et al. 2014), exchanged as DeepSpeed's
//        compressed_allreduce does (deepspeed/runtime/comm/nccl.py at commit 0a849d5,
//        NcclBackend.compressed_allreduce): each worker adds its residual to the bucket
//        (nccl.py:72), keeps one scale ‖c‖₂/√N for it (:73) and the new residual c − scale·sign(c)
//        (:74-75), packs the signs into bits; phase 1 is an all-to-all of the sign bits, chunk j to
//        rank j (:112-114), and an all-gather of the worker scales (:116); each rank then
//        averages its chunk from every worker, adds its server residual, compresses again
//        (:126-136); phase 2 all-gathers the server sign chunks and scales (:179-182), and every
//        rank unpacks the averaged gradient. The bucket is padded to a multiple of p·lcm(p, 8)
//        elements (DeepSpeed's 1-bit Adam: self.divider = lcm(size, 8), buffers padded to
//        size × divider, deepspeed/runtime/fp16/onebit/adam.py), so every chunk is whole bytes.
//        Residuals: fp32 worker error the size of the padded bucket plus fp32 server error of one
//        chunk (what DeepSpeed keeps, worker_errors and server_errors).
//  topk  Sparse exchange (Aji & Heafield 2017, "Sparse Communication for Distributed Gradient
//        Descent"; they drop 99 %, topk:0.01): each worker adds its residual, keeps the k = ⌈ratio·n⌉
//        largest magnitudes (threshold from a sample of 0.1 % of the elements, as they do), sends
//        them as (value, int32 index) pairs and keeps the rest as its residual. Sparse sums do not
//        reduce in place, so the pairs are all-gathered (p·k pairs on every rank) and scatter-added.
//
//  powersgd  Rank-r PowerSGD (Vogels, Karimireddy & Jaggi 2019), as PyTorch's DDP comm hook runs it
//        (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py at pytorch/pytorch commit
//        f6b9eef, powerSGD_hook, with PowerSGDState's defaults: min_compression_rate 2,
//        use_error_feedback and warm_start on; start_powerSGD_iter is the warm-up of vanilla
//        all-reduces before it, so the steady state modelled here is a step after it). Per bucket:
//        the residual is added to the whole bucket and the bucket cloned (error_dict holds one
//        residual the size of the bucket, in the gradient dtype); each tensor is viewed as
//        shape[0] × rest; it is compressed when (n + m)·r·2 < n·m (_should_compress, r clamped to
//        min(n, m, RANK)), the rest (biases, norms, small matrices) go in one flat buffer that is
//        all-reduced uncompressed. Compressed: orthogonalise the warm-started Qs, P = M·Q, all-reduce
//        the flat buffer then all Ps, orthogonalise each P (Gram–Schmidt), Q = Mᵀ·P, all-reduce
//        all Qs, M̂ = P·Qᵀ, residual = clone − M̂. P and Q stay allocated across steps (warm start).
//
// Compute is priced per element as memory-bound passes (KernelOp::stream): each kernel's bytes are
// what its passes read and write, priced by sim/compute.cpp on the device's memory roofline like
// every other elementwise kernel; PowerSGD's factor products are GEMMs (gemm_kernel) priced like
// every other GEMM. The CPU executor runs the 1-bit and top-k kernels and PowerSGD's Gram–Schmidt
// (KernelName::powersgd_orthogonalize) for real (exec/cpu/compression.hpp), PowerSGD's factor
// products as its GEMMs and the hook's passes as memory-bound passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/kernel.hpp"
#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "core/units.hpp"

namespace smol::strategies {

enum class CompressionMethod { none, onebit, topk, powersgd };

/// What --compress asked for.
struct Compression {
    CompressionMethod method = CompressionMethod::none;
    double ratio = 0;   // topk: the fraction of elements sent, in (0, 1]
    int rank = 0;       // powersgd: the approximation rank (PowerSGDState.matrix_approximation_rank), ≥ 1
    bool operator==(const Compression&) const = default;
};
/// "none", "1bit", "topk:RATIO" (RATIO in (0, 1], e.g. 0.01) or "powersgd:RANK" (an integer ≥ 1);
/// bad_input naming --compress.
Compression parse_compression(const std::string& text);
std::string to_string(const Compression& c);

/// The kernels' shape fields, which the CPU executor reads to run them (exec/cpu/compression.hpp):
///   onebit_compress    elements n gradients, m the padded N, n the ranks p
///   onebit_server      elements the chunk N/p, n the ranks p
///   onebit_decompress  elements n, m the padded N, n the ranks p
///   topk_compress      elements n, m the k pairs kept, n the sampled elements
///   topk_decompress    elements n, m the k pairs per rank, n the ranks p

/// One step of a bucket's compressed exchange: a compute op (kernels not empty) or a collective of
/// `kind` and `bytes` (the graph's size convention, sim/collectives.hpp: an all-gather's output, an
/// all-to-all's per-rank total).
struct ExchangeStep {
    std::vector<Kernel> kernels;
    CollectiveKind kind = CollectiveKind::all_reduce;
    Bytes bytes;
    /// Runs on the comm stream after the collective before it (the work a DDP comm hook chains on
    /// its future); the first compute step runs on the compute stream when the bucket is ready.
    bool after_comm = false;
    bool collective() const { return kernels.empty(); }
};

/// A bucket's compressed exchange, in order, and the residual buffers it keeps between steps.
struct CompressedExchange {
    std::vector<ExchangeStep> steps;
    Bytes error_feedback;   // fp32 residuals kept across steps on every rank
};

/// The exchange of a bucket of `elements` gradients of `grad_bytes` bytes each over `ranks` ranks.
/// 1bit: worker compression, all-to-all of signs, all-gather of scales, server step, all-gather of
/// signs, all-gather of scales, decompression. topk: selection, all-gather of pairs, scatter-add.
CompressedExchange compressed_exchange(const Compression& c, std::int64_t elements, int grad_bytes, int ranks);

/// One weight gradient as PowerSGD views it: tensor.view(shape[0], -1), rows × cols.
struct GradMatrix {
    std::int64_t rows = 0, cols = 0;
    bool operator==(const GradMatrix&) const = default;
};

/// A block's gradient tensors: its weight matrices in backward order (the reverse of the forward
/// kernels), and the parameters that are no matrix (biases, norms, embedding tables). Transformer
/// blocks: each weight GEMM of the forward kernels (C = A·B with B a k × n parameter, `batch`
/// experts of it) is an n × k weight (torch.nn.Linear's out × in). Layer-list blocks: the kernel's
/// GEMM shape is a stand-in (core/model.cpp), so the shape is derived exactly from the layer's
/// totals: a conv or fc layer computes 2·(c_in·k_h·k_w)·(c_out·H·W) FLOPs per sample for an
/// output of c_out·H·W elements, so cols = c_in·k_h·k_w = fwd / (2 · output elements), and
/// params = c_out·cols + c_out·extra (extra: conv bias 1 or fc bias 1, batch norm 2, both 3,
/// core/cnn_presets.cpp); rows = c_out is the one that divides exactly, with H·W whole. A layer
/// whose totals admit no or several such shapes is left uncompressed (all of it in `vectors`).
/// `activation_bytes`: bytes per element of the block's output (the workload's dtype).
struct BlockGradients {
    std::vector<GradMatrix> matrices;
    std::int64_t vectors = 0;
};
BlockGradients block_gradients(const Block& block, int activation_bytes);

/// Every bucket's exchange. `bucket_elements`: the buckets' gradient counts, filled in backward
/// order (the last block first), as strategies/data_parallel.cpp packs them. 1bit and topk:
/// compressed_exchange of each. powersgd: a matrix that straddles two buckets is compressed in
/// the first one it enters (the simulator's buckets split blocks by bytes, PyTorch's never split
/// a tensor); each bucket all-reduces what is left of it uncompressed. Refuses (bad_input naming
/// --compress) a rank that compresses no matrix of the model.
std::vector<CompressedExchange> compressed_exchanges(const Compression& c, const std::vector<Block>& blocks,
                                                     const std::vector<std::int64_t>& bucket_elements, int grad_bytes,
                                                     int activation_bytes, int ranks);

/// powersgd: the exchange of one bucket of `elements` gradients holding these `matrices` (all
/// of them worth compressing at `rank`) and elements − Σ rows·cols others.
CompressedExchange powersgd_exchange(int rank, std::int64_t elements, const std::vector<GradMatrix>& matrices,
                                     int grad_bytes);
/// powersgd: PyTorch's rank for a matrix, min(rows, cols, rank), and whether it is compressed:
/// (rows + cols)·r·2 < rows·cols (_should_compress with min_compression_rate 2). 0: not compressed.
std::int64_t powersgd_rank(const GradMatrix& m, int rank);

/// 1bit: the bucket padded to a multiple of ranks · lcm(ranks, 8) elements (DeepSpeed's padding).
std::int64_t onebit_padded(std::int64_t elements, int ranks);
/// topk: the pairs each rank sends, ⌈ratio · elements⌉ (at least 1).
std::int64_t topk_count(double ratio, std::int64_t elements);
/// topk: the elements sampled to find the threshold: 0.1 % (Aji & Heafield §3), at least 1,000
/// (all of them when fewer), so a small bucket's threshold is not one element's magnitude.
std::int64_t topk_sample(std::int64_t elements);

}  // namespace smol::strategies
