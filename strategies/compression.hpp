// Gradient compression for the data-parallel strategies that exchange full gradients (ddp, ring):
// --compress 1bit | topk:RATIO.
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
// Compute is priced per element as memory-bound passes (KernelOp::stream): each kernel's bytes are
// what its passes read and write, priced by sim/compute.cpp on the device's memory roofline like
// every other elementwise kernel; the CPU executor runs the same kernels for real
// (exec/cpu/compression.hpp). PowerSGD is not built: --compress refuses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/kernel.hpp"
#include "core/op_graph.hpp"
#include "core/units.hpp"

namespace smol::strategies {

enum class CompressionMethod { none, onebit, topk };

/// What --compress asked for.
struct Compression {
    CompressionMethod method = CompressionMethod::none;
    double ratio = 0;   // topk: the fraction of elements sent, in (0, 1]
    bool operator==(const Compression&) const = default;
};
/// "none", "1bit" or "topk:RATIO" (RATIO in (0, 1], e.g. 0.01); bad_input naming --compress.
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

/// 1bit: the bucket padded to a multiple of ranks · lcm(ranks, 8) elements (DeepSpeed's padding).
std::int64_t onebit_padded(std::int64_t elements, int ranks);
/// topk: the pairs each rank sends, ⌈ratio · elements⌉ (at least 1).
std::int64_t topk_count(double ratio, std::int64_t elements);
/// topk: the elements sampled to find the threshold: 0.1 % (Aji & Heafield §3), at least 1,000
/// (all of them when fewer), so a small bucket's threshold is not one element's magnitude.
std::int64_t topk_sample(std::int64_t elements);

}  // namespace smol::strategies
