#include "strategies/compression.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.hpp"

namespace smol::strategies {

namespace {

const ErrorContext kFlag{"", "", "--compress"};
const char* const kExpected = "none, 1bit, topk:RATIO (RATIO in (0, 1], such as topk:0.01) or powersgd:RANK (such as powersgd:4)";

/// A compression kernel: a memory-bound pass of `bytes` with `flops` arithmetic, and the shape
/// fields the executor reads (compression.hpp).
Kernel pass(KernelName name, std::int64_t bytes, double flops, std::int64_t elements, std::int64_t m, std::int64_t n) {
    Kernel k = stream_kernel(name, KernelClass::elementwise, bytes, flops);
    k.elements = elements;
    k.m = m;
    k.n = n;
    return k;
}

ExchangeStep compute(Kernel k, bool after_comm) {
    ExchangeStep s;
    s.kernels = {k};
    s.after_comm = after_comm;
    return s;
}

ExchangeStep collective(CollectiveKind kind, std::int64_t bytes) {
    ExchangeStep s;
    s.kind = kind;
    s.bytes = Bytes(bytes);
    return s;
}

}  // namespace

Compression parse_compression(const std::string& text) {
    Compression c;
    if (text == "none") return c;
    if (text == "1bit") {
        c.method = CompressionMethod::onebit;
        return c;
    }
    const std::size_t colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    if (kind == "powersgd") {
        if (colon == std::string::npos)
            fail_input("powersgd:RANK; the approximation rank is required (powersgd:4 all-reduces rank-4 factors)", "'" + text + "'", kFlag);
        const std::string number = text.substr(colon + 1);
        std::size_t used = 0;
        long rank = 0;
        try {
            rank = std::stol(number, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (number.empty() || used != number.size() || rank < 1 || rank > 1'000'000)
            fail_input("a whole rank of at least 1 after 'powersgd:' (the rank of each gradient's low-rank approximation)",
                       "'" + number + "'", kFlag);
        c.method = CompressionMethod::powersgd;
        c.rank = static_cast<int>(rank);
        return c;
    }
    if (kind != "topk") fail_input(kExpected, "'" + text + "'", kFlag);
    if (colon == std::string::npos) fail_input("topk:RATIO; the ratio of elements sent is required (topk:0.01 sends 1 %)", "'" + text + "'", kFlag);
    const std::string number = text.substr(colon + 1);
    double ratio = 0;
    std::size_t used = 0;
    try {
        ratio = std::stod(number, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (number.empty() || used != number.size() || !std::isfinite(ratio) || !(ratio > 0) || ratio > 1)
        fail_input("a ratio in (0, 1] after 'topk:' (the fraction of gradient elements each rank sends)", "'" + number + "'", kFlag);
    c.method = CompressionMethod::topk;
    c.ratio = ratio;
    return c;
}

std::string to_string(const Compression& c) {
    switch (c.method) {
        case CompressionMethod::none: return "none";
        case CompressionMethod::onebit: return "1bit";
        case CompressionMethod::topk: {
            std::ostringstream s;
            s << "topk:" << c.ratio;
            return s.str();
        }
        case CompressionMethod::powersgd: return "powersgd:" + std::to_string(c.rank);
    }
    return "?";
}

std::int64_t onebit_padded(std::int64_t elements, int ranks) {
    const std::int64_t unit = std::int64_t{ranks} * std::lcm(std::int64_t{ranks}, std::int64_t{8});
    return (elements + unit - 1) / unit * unit;
}

std::int64_t topk_count(double ratio, std::int64_t elements) {
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(ratio * static_cast<double>(elements))), 1, elements);
}

std::int64_t topk_sample(std::int64_t elements) {
    return std::min(elements, std::max<std::int64_t>(1000, (elements + 999) / 1000));
}

CompressedExchange compressed_exchange(const Compression& c, std::int64_t elements, int grad_bytes, int ranks) {
    CompressedExchange x;
    const std::int64_t n = elements, g = grad_bytes, p = ranks;
    switch (c.method) {
        case CompressionMethod::none:
            x.steps.push_back(collective(CollectiveKind::all_reduce, n * g));
            return x;
        case CompressionMethod::onebit: {
            const std::int64_t padded = onebit_padded(n, ranks), chunk = padded / p;
            // Worker: pass 1 reads the gradient and the residual and writes c = g + e over the
            // residual, summing c²; pass 2 reads c, writes the new residual and the sign bits.
            x.steps.push_back(compute(pass(KernelName::onebit_compress, g * n + 16 * padded + padded / 8, 4.0 * static_cast<double>(padded),
                                           n, padded, p),
                                      false));
            x.steps.push_back(collective(CollectiveKind::all_to_all, padded / 8));   // chunk j's signs to rank j
            x.steps.push_back(collective(CollectiveKind::all_gather, 4 * p));       // one fp32 worker scale each
            // Server: unpack p chunks of signs, average them by their scales into the server
            // residual (pass 1, summing c²), then write the new residual and the chunk's signs.
            x.steps.push_back(compute(pass(KernelName::onebit_server, padded / 8 + 4 * p + 16 * chunk + chunk / 8,
                                           2.0 * static_cast<double>(padded) + 4.0 * static_cast<double>(chunk), chunk, 0, p),
                                      true));
            x.steps.push_back(collective(CollectiveKind::all_gather, padded / 8));   // every server chunk's signs
            x.steps.push_back(collective(CollectiveKind::all_gather, 4 * p));       // and scales
            // Every rank: unpack the p chunks by their scales into the gradient.
            x.steps.push_back(compute(pass(KernelName::onebit_decompress, padded / 8 + 4 * p + g * n, static_cast<double>(n), n, padded, p),
                                      true));
            x.error_feedback = Bytes(4 * padded + 4 * chunk);
            return x;
        }
        case CompressionMethod::topk: {
            const std::int64_t k = topk_count(c.ratio, n), sample = topk_sample(n), pair = g + 4;
            // Pass 1 reads the gradient and the residual and writes c over the residual; the
            // threshold comes from `sample` elements of c; pass 2 reads c, writes the k pairs and
            // zeroes the k residuals it sends.
            x.steps.push_back(compute(pass(KernelName::topk_compress, g * n + 12 * n + 4 * sample + k * (pair + 4),
                                           2.0 * static_cast<double>(n), n, k, sample),
                                      false));
            x.steps.push_back(collective(CollectiveKind::all_gather, p * k * pair));
            // Zero the gradient, then add the p·k pairs into it (read a pair, read and write its
            // element).
            x.steps.push_back(compute(pass(KernelName::topk_decompress, g * n + p * k * (pair + 2 * g), static_cast<double>(p * k), n, k, p),
                                      true));
            x.error_feedback = Bytes(4 * n);
            return x;
        }
        case CompressionMethod::powersgd:
            throw Error(ErrorKind::internal, "powersgd needs the bucket's matrices: use compressed_exchanges");
    }
    return x;
}

std::int64_t powersgd_rank(const GradMatrix& m, int rank) {
    const std::int64_t r = std::min({m.rows, m.cols, std::int64_t{rank}});
    // _should_compress: compressed_size · min_compression_rate < uncompressed_size, rate 2.
    return (m.rows + m.cols) * r * 2 < m.rows * m.cols ? r : 0;
}

namespace {

/// Gram–Schmidt over the r columns of a rows × r matrix (powerSGD_hook.py, _orthogonalize): for
/// column i, its norm (read), the division (read + write), then for each of the r − i − 1
/// columns after it the dot product (read both) and the subtraction (read, write): 3·rows·r
/// elements moved plus 3·rows per pair of columns; 3·rows·r FLOPs plus 4·rows per pair.
Kernel orthogonalize(std::int64_t rows, std::int64_t r, std::int64_t g) {
    const std::int64_t pairs = r * (r - 1) / 2;
    return pass(KernelName::powersgd_orthogonalize, g * rows * (3 * r + 3 * pairs),
                static_cast<double>(rows) * static_cast<double>(3 * r + 4 * pairs), rows, r, 0);
}

}  // namespace

CompressedExchange powersgd_exchange(int rank, std::int64_t elements, const std::vector<GradMatrix>& matrices, int grad_bytes) {
    const std::int64_t g = grad_bytes, n = elements;
    std::int64_t ps = 0, qs = 0, compressed = 0;
    std::vector<Kernel> first, second, third;
    // The hook's first pass: input.add_(error) and the clone kept to compute the new residual.
    first.push_back(pass(KernelName::powersgd, 3 * g * n + 2 * g * n, static_cast<double>(n), n, 0, 0));
    for (const GradMatrix& m : matrices) {
        const std::int64_t r = powersgd_rank(m, rank);
        if (r == 0) throw Error(ErrorKind::internal, "powersgd_exchange: a matrix not worth compressing");
        ps += m.rows * r;
        qs += m.cols * r;
        compressed += m.rows * m.cols;
        first.push_back(orthogonalize(m.cols, r, g));   // the warm-started Q
        // P = M·Q: (rows × cols)·(cols × r); Q = Mᵀ·P: (cols × rows)·(rows × r); M̂ = P·Qᵀ.
        first.push_back(gemm_kernel(KernelName::powersgd, KernelClass::gemm, m.rows, r, m.cols, 1, grad_bytes, false));
        second.push_back(orthogonalize(m.rows, r, g));
        second.push_back(gemm_kernel(KernelName::powersgd, KernelClass::gemm, m.cols, r, m.rows, 1, grad_bytes, false));
        third.push_back(gemm_kernel(KernelName::powersgd, KernelClass::gemm, m.rows, m.cols, r, 1, grad_bytes, false));
    }
    const std::int64_t flat = n - compressed;
    if (flat < 0) throw Error(ErrorKind::internal, "powersgd_exchange: the matrices exceed the bucket");
    CompressedExchange x;
    ExchangeStep s1;
    s1.kernels = std::move(first);
    x.steps.push_back(std::move(s1));
    // The flat buffer is all-reduced first, then the Ps once it is back (the hook chains them).
    if (flat > 0) x.steps.push_back(collective(CollectiveKind::all_reduce, flat * g));
    if (ps > 0) {
        x.steps.push_back(collective(CollectiveKind::all_reduce, ps * g));
        ExchangeStep s2;
        s2.kernels = std::move(second);
        s2.after_comm = true;
        x.steps.push_back(std::move(s2));
        x.steps.push_back(collective(CollectiveKind::all_reduce, qs * g));
    }
    // Unpack the flat buffer divided by the ranks (read, write), divide the Qs, M̂ = P·Qᵀ, then
    // the residual clone − M̂ over the bucket (read two, write one).
    third.push_back(pass(KernelName::powersgd, 2 * g * flat + 2 * g * qs + 3 * g * n,
                         static_cast<double>(flat + qs + n), n, ps, qs));
    ExchangeStep s3;
    s3.kernels = std::move(third);
    s3.after_comm = true;
    x.steps.push_back(std::move(s3));
    // error_dict (the bucket, gradient dtype) and the warm-started P and Q memory.
    x.error_feedback = Bytes(g * (n + ps + qs));
    return x;
}

BlockGradients block_gradients(const Block& block, int activation_bytes) {
    BlockGradients out;
    std::int64_t in_matrices = 0;
    if (block.kind == Block::Kind::layer) {
        const double out_elements = static_cast<double>(block.output.count()) / activation_bytes;
        if (block.params > 0 && out_elements >= 1 && block.fwd.count() > 0) {
            const double exact = block.fwd.count() / (2.0 * out_elements);
            const auto cols = static_cast<std::int64_t>(std::llround(exact));
            std::vector<GradMatrix> found;
            for (std::int64_t extra = 0; extra <= 3 && cols > 0 && std::abs(exact - static_cast<double>(cols)) < 1e-6 * exact; ++extra) {
                const std::int64_t rows = block.params / (cols + extra);
                if (rows >= 1 && rows * (cols + extra) == block.params && std::llround(out_elements) % rows == 0)
                    found.push_back({rows, cols});
            }
            if (found.size() == 1) {
                out.matrices = found;
                in_matrices = found[0].rows * found[0].cols;
            }
        }
    } else {
        // Backward produces the weight gradients in reverse launch order. A weight GEMM whose
        // parameters are not this block's (the tied output layer reuses the embedding table)
        // does not fit in what is left of the block's parameters and is skipped.
        for (auto it = block.fwd_kernels.rbegin(); it != block.fwd_kernels.rend(); ++it) {
            if (it->op != KernelOp::gemm || !it->weight) continue;
            const std::int64_t size = it->n * it->k * it->batch;
            if (in_matrices + size > block.params) continue;
            for (std::int32_t e = 0; e < it->batch; ++e) out.matrices.push_back({it->n, it->k});
            in_matrices += size;
        }
    }
    out.vectors = block.params - in_matrices;
    return out;
}

std::vector<CompressedExchange> compressed_exchanges(const Compression& c, const std::vector<Block>& blocks,
                                                     const std::vector<std::int64_t>& bucket_elements, int grad_bytes,
                                                     int activation_bytes, int ranks) {
    std::vector<CompressedExchange> out;
    if (c.method != CompressionMethod::powersgd) {
        for (const std::int64_t n : bucket_elements) out.push_back(compressed_exchange(c, n, grad_bytes, ranks));
        return out;
    }
    // Walk the gradients in the order the buckets fill: blocks last to first, each block's
    // vectors then its matrices in backward order. A matrix joins the bucket its first element
    // falls in, with all its elements: the buckets it reaches into hold that much less to send
    // uncompressed (`elements` moves those elements to the matrix's bucket).
    const std::size_t count = bucket_elements.size();
    std::vector<std::int64_t> start(count + 1, 0);
    for (std::size_t k = 0; k < count; ++k) start[k + 1] = start[k] + bucket_elements[k];
    std::vector<std::int64_t> elements = bucket_elements;
    std::vector<std::vector<GradMatrix>> in_bucket(count);
    std::int64_t offset = 0;
    std::int64_t widest = 0;   // the largest min(rows, cols), for the error
    const auto bucket_of = [&](std::int64_t at) {
        const auto it = std::upper_bound(start.begin(), start.end(), at);
        return std::min<std::size_t>(count - 1, static_cast<std::size_t>(it - start.begin()) - 1);
    };
    for (auto b = blocks.rbegin(); b != blocks.rend() && count > 0; ++b) {
        const BlockGradients grads = block_gradients(*b, activation_bytes);
        offset += grads.vectors;
        for (const GradMatrix& m : grads.matrices) {
            widest = std::max(widest, std::min(m.rows, m.cols));
            const std::int64_t size = m.rows * m.cols;
            if (powersgd_rank(m, c.rank) > 0) {
                const std::size_t home = bucket_of(offset);
                in_bucket[home].push_back(m);
                for (std::size_t j = home + 1; j < count && start[j] < offset + size; ++j) {
                    const std::int64_t share = std::min(offset + size, start[j + 1]) - start[j];
                    elements[j] -= share;
                    elements[home] += share;
                }
            }
            offset += size;
        }
    }
    bool any = false;
    for (const auto& ms : in_bucket) any = any || !ms.empty();
    if (!any && count > 0) {
        const std::string why = std::int64_t{c.rank} > widest
                                    ? "a rank at most " + std::to_string(widest) + ", the largest min(rows, cols) of the model's weight matrices"
                                    : "a rank low enough that (rows + cols) · rank · 2 < rows · cols for some weight matrix "
                                      "(PyTorch's min_compression_rate 2)";
        fail_input(why + "; powersgd:" + std::to_string(c.rank) + " compresses no gradient", "'" + to_string(c) + "'", kFlag);
    }
    // A bucket wholly inside a matrix compressed in an earlier one sends nothing of its own.
    for (std::size_t k = 0; k < count; ++k)
        out.push_back(elements[k] > 0 ? powersgd_exchange(c.rank, elements[k], in_bucket[k], grad_bytes) : CompressedExchange{});
    return out;
}

}  // namespace smol::strategies
