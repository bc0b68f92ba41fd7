#include "strategies/compression.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.hpp"

namespace smol::strategies {

namespace {

const ErrorContext kFlag{"", "", "--compress"};
const char* const kExpected = "none, 1bit or topk:RATIO (RATIO in (0, 1], such as topk:0.01)";

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
    if (kind == "powersgd")
        fail_input(std::string(kExpected) + "; PowerSGD is not built yet (use 1bit or topk)", "'" + text + "'", kFlag);
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
    }
    return x;
}

}  // namespace smol::strategies
