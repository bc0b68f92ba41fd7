#include "exec/cpu/compression.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/kernels.hpp"

namespace smol::exec::cpu {

namespace {

/// Sign bits of `n` elements (a multiple of 8) of c, most significant bit first; and the new
/// residual e = c − scale·sign(c) written over c.
void pack_and_residual(float* c, std::int64_t n, float scale, std::uint8_t* signs) {
    for (std::int64_t b = 0; b < n / 8; ++b) {
        std::uint8_t byte = 0;
        for (int j = 0; j < 8; ++j) {
            float& x = c[8 * b + j];
            const bool positive = x >= 0.0f;   // DeepSpeed: sign().add_(1).bool(): 0 counts as +
            byte = static_cast<std::uint8_t>(byte | (positive ? 0x80u >> j : 0u));
            x -= positive ? scale : -scale;
        }
        signs[b] = byte;
    }
}

float rms(double sum_squares, std::int64_t n) { return n > 0 ? static_cast<float>(std::sqrt(sum_squares / static_cast<double>(n))) : 0.0f; }

/// ±1 for bit j of a packed byte.
inline float sign_of(std::uint8_t byte, int j) { return (byte & (0x80u >> j)) ? 1.0f : -1.0f; }

std::int64_t floats_for_bytes(std::int64_t bytes) { return (bytes + 3) / 4; }

int comm_size(MPI_Comm comm) {
    int p = 1;
    MPI_Comm_size(comm, &p);
    return p;
}

}  // namespace

float onebit_compress(const float* grad, std::int64_t n, std::int64_t padded, float* error, std::uint8_t* signs) {
    double sum = 0;
    for (std::int64_t i = 0; i < padded; ++i) {
        const float c = (i < n ? grad[i] : 0.0f) + error[i];
        error[i] = c;
        sum += static_cast<double>(c) * c;
    }
    const float scale = rms(sum, padded);   // nccl.py:73, torch.norm(buffer_m) / sqrt(numel)
    pack_and_residual(error, padded, scale, signs);
    return scale;
}

float onebit_server(const std::uint8_t* signs, const float* scales, int p, std::int64_t chunk, float* server_error,
                    std::uint8_t* out_signs) {
    // nccl.py:126-130: unpack every worker's chunk, times its scale / p, summed; plus the server
    // residual (:131).
    for (int w = 0; w < p; ++w) {
        const std::uint8_t* s = signs + static_cast<std::int64_t>(w) * (chunk / 8);
        const float a = scales[w] / static_cast<float>(p);
        for (std::int64_t b = 0; b < chunk / 8; ++b)
            for (int j = 0; j < 8; ++j) server_error[8 * b + j] += a * sign_of(s[b], j);
    }
    double sum = 0;
    for (std::int64_t i = 0; i < chunk; ++i) sum += static_cast<double>(server_error[i]) * server_error[i];
    const float scale = rms(sum, chunk);   // :132-133
    pack_and_residual(server_error, chunk, scale, out_signs);
    return scale;
}

void onebit_decompress(const std::uint8_t* signs, const float* scales, int p, std::int64_t chunk, std::int64_t n, float* out) {
    for (int w = 0; w < p; ++w) {
        const std::uint8_t* s = signs + static_cast<std::int64_t>(w) * (chunk / 8);
        const std::int64_t first = static_cast<std::int64_t>(w) * chunk;
        for (std::int64_t i = 0; i < chunk && first + i < n; ++i) out[first + i] = scales[w] * sign_of(s[i / 8], static_cast<int>(i % 8));
    }
}

void onebit_allreduce(float* grad, std::int64_t n, std::int64_t padded, float* worker_error, float* server_error, MPI_Comm comm) {
    const int p = comm_size(comm);
    if (padded % (8 * static_cast<std::int64_t>(p)) != 0 || padded < n)
        throw Error(ErrorKind::internal, "a 1-bit all-reduce of " + std::to_string(n) + " elements padded to " +
                                             std::to_string(padded) + ", not a multiple of 8 × " + std::to_string(p));
    const std::int64_t chunk = padded / p, chunk_bytes = chunk / 8;
    std::vector<std::uint8_t> signs(static_cast<std::size_t>(padded / 8)), received(signs.size()), server(static_cast<std::size_t>(chunk_bytes));
    std::vector<float> scales(static_cast<std::size_t>(p)), server_scales(static_cast<std::size_t>(p));
    float scale = onebit_compress(grad, n, padded, worker_error, signs.data());
    // Phase 1: chunk j of the signs to rank j; every worker's scale to everyone (nccl.py:112-116).
    MPI_Alltoall(signs.data(), static_cast<int>(chunk_bytes), MPI_BYTE, received.data(), static_cast<int>(chunk_bytes), MPI_BYTE, comm);
    MPI_Allgather(&scale, 1, MPI_FLOAT, scales.data(), 1, MPI_FLOAT, comm);
    float mine = onebit_server(received.data(), scales.data(), p, chunk, server_error, server.data());
    // Phase 2: every server chunk and scale to everyone (:179-182).
    MPI_Allgather(server.data(), static_cast<int>(chunk_bytes), MPI_BYTE, signs.data(), static_cast<int>(chunk_bytes), MPI_BYTE, comm);
    MPI_Allgather(&mine, 1, MPI_FLOAT, server_scales.data(), 1, MPI_FLOAT, comm);
    onebit_decompress(signs.data(), server_scales.data(), p, chunk, n, grad);
}

void topk_compress(const float* grad, std::int64_t n, std::int64_t k, std::int64_t sample, float* error, float* values,
                   std::int32_t* indices, float* scratch) {
    for (std::int64_t i = 0; i < n; ++i) error[i] += grad[i];
    // The threshold: the sample's element at the kept fraction, largest first.
    const std::int64_t stride = std::max<std::int64_t>(1, n / sample);
    std::int64_t s = 0;
    for (std::int64_t i = 0; i < n && s < sample; i += stride) scratch[s++] = std::fabs(error[i]);
    const std::int64_t q = std::clamp<std::int64_t>((k * s + n - 1) / n - 1, 0, s - 1);
    std::nth_element(scratch, scratch + q, scratch + s, std::greater<float>());
    const float threshold = scratch[q];
    std::int64_t sent = 0;
    for (std::int64_t i = 0; i < n && sent < k; ++i)
        if (std::fabs(error[i]) >= threshold) {
            values[sent] = error[i];
            indices[sent] = static_cast<std::int32_t>(i);
            error[i] = 0.0f;
            ++sent;
        }
    for (; sent < k; ++sent) {
        values[sent] = 0.0f;
        indices[sent] = 0;
    }
}

void topk_decompress(const float* values, const std::int32_t* indices, std::int64_t pairs, std::int64_t n, float* out) {
    std::fill(out, out + n, 0.0f);
    // An index outside [0, n) never comes from topk_compress; a workspace that never received
    // pairs (an executed graph's operands) may hold one, and it is skipped.
    for (std::int64_t i = 0; i < pairs; ++i)
        if (indices[i] >= 0 && indices[i] < n) out[indices[i]] += values[i];
}

void topk_allreduce(float* grad, std::int64_t n, std::int64_t k, std::int64_t sample, float* error, MPI_Comm comm) {
    const int p = comm_size(comm);
    std::vector<float> values(static_cast<std::size_t>(k)), scratch(static_cast<std::size_t>(sample));
    std::vector<std::int32_t> indices(static_cast<std::size_t>(k));
    topk_compress(grad, n, k, sample, error, values.data(), indices.data(), scratch.data());
    std::vector<float> all_values(static_cast<std::size_t>(k * p));
    std::vector<std::int32_t> all_indices(all_values.size());
    MPI_Allgather(values.data(), static_cast<int>(k), MPI_FLOAT, all_values.data(), static_cast<int>(k), MPI_FLOAT, comm);
    MPI_Allgather(indices.data(), static_cast<int>(k), MPI_INT32_T, all_indices.data(), static_cast<int>(k), MPI_INT32_T, comm);
    topk_decompress(all_values.data(), all_indices.data(), k * p, n, grad);
    for (std::int64_t i = 0; i < n; ++i) grad[i] /= static_cast<float>(p);
}

void powersgd_orthogonalize(float* m, std::int64_t rows, std::int64_t r) {
    for (std::int64_t i = 0; i < r; ++i) {
        double norm = 0;
        for (std::int64_t a = 0; a < rows; ++a) norm += static_cast<double>(m[a * r + i]) * m[a * r + i];
        norm = std::sqrt(norm);
        if (norm > 0)
            for (std::int64_t a = 0; a < rows; ++a) m[a * r + i] = static_cast<float>(m[a * r + i] / norm);
        // rest -= (col · rest) col, for every column j after i.
        for (std::int64_t j = i + 1; j < r; ++j) {
            double dot = 0;
            for (std::int64_t a = 0; a < rows; ++a) dot += static_cast<double>(m[a * r + i]) * m[a * r + j];
            for (std::int64_t a = 0; a < rows; ++a) m[a * r + j] -= static_cast<float>(dot) * m[a * r + i];
        }
    }
}

void powersgd_allreduce(float* grad, std::int64_t rows, std::int64_t cols, std::int64_t r, float* error, float* p, float* q,
                        float* scratch, MPI_Comm comm) {
    int size = 1;
    MPI_Comm_size(comm, &size);
    const std::int64_t n = rows * cols;
    for (std::int64_t i = 0; i < n; ++i) grad[i] += error[i];   // input.add_(error)
    std::memcpy(scratch, grad, static_cast<std::size_t>(n) * sizeof(float));   // the clone
    powersgd_orthogonalize(q, cols, r);
    gemm(grad, q, p, rows, r, cols);                              // P = M·Q
    MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(rows * r), MPI_FLOAT, MPI_SUM, comm);
    powersgd_orthogonalize(p, rows, r);
    // Q = Mᵀ·P: Mᵀ is M read column-wise, here copied transposed into `grad`'s place.
    for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b) grad[b * rows + a] = scratch[a * cols + b];
    gemm(grad, p, q, cols, r, rows);
    MPI_Allreduce(MPI_IN_PLACE, q, static_cast<int>(cols * r), MPI_FLOAT, MPI_SUM, comm);
    for (std::int64_t i = 0; i < cols * r; ++i) q[i] /= static_cast<float>(size);
    // M̂ = P·Qᵀ, then the residual: the clone less M̂.
    for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b) {
            double s = 0;
            for (std::int64_t c = 0; c < r; ++c) s += static_cast<double>(p[a * r + c]) * q[b * r + c];
            grad[a * cols + b] = static_cast<float>(s);
            error[a * cols + b] = scratch[a * cols + b] - static_cast<float>(s);
        }
}

bool is_compression_kernel(const Kernel& k) {
    switch (k.name) {
        case KernelName::powersgd_orthogonalize:
        case KernelName::onebit_compress:
        case KernelName::onebit_server:
        case KernelName::onebit_decompress:
        case KernelName::topk_compress:
        case KernelName::topk_decompress: return k.op == KernelOp::stream;
        default: return false;
    }
}

std::int64_t compression_floats(const Kernel& k) {
    const std::int64_t n = k.elements;
    switch (k.name) {
        case KernelName::onebit_compress: return n + k.m + floats_for_bytes(k.m / 8);
        case KernelName::onebit_server: return floats_for_bytes(k.n * n / 8) + k.n + n + floats_for_bytes(n / 8);
        case KernelName::onebit_decompress: return floats_for_bytes(k.m / 8) + k.n + n;
        case KernelName::topk_compress: return 2 * n + 2 * k.m + k.n;
        case KernelName::topk_decompress: return 2 * k.n * k.m + n;
        case KernelName::powersgd_orthogonalize: return n * k.m;
        default: return 0;
    }
}

void run_compression_kernel(const Kernel& k, float* w) {
    const std::int64_t n = k.elements;
    switch (k.name) {
        case KernelName::onebit_compress: {
            float* grad = w;
            float* error = grad + n;
            onebit_compress(grad, n, k.m, error, reinterpret_cast<std::uint8_t*>(error + k.m));
            break;
        }
        case KernelName::onebit_server: {
            auto* signs = reinterpret_cast<std::uint8_t*>(w);
            float* scales = w + floats_for_bytes(k.n * n / 8);
            float* error = scales + k.n;
            onebit_server(signs, scales, static_cast<int>(k.n), n, error, reinterpret_cast<std::uint8_t*>(error + n));
            break;
        }
        case KernelName::onebit_decompress: {
            auto* signs = reinterpret_cast<const std::uint8_t*>(w);
            const float* scales = w + floats_for_bytes(k.m / 8);
            onebit_decompress(signs, scales, static_cast<int>(k.n), k.m / k.n, n, w + floats_for_bytes(k.m / 8) + k.n);
            break;
        }
        case KernelName::topk_compress: {
            float* grad = w;
            float* error = grad + n;
            float* values = error + n;
            auto* indices = reinterpret_cast<std::int32_t*>(values + k.m);
            topk_compress(grad, n, k.m, k.n, error, values, indices, values + 2 * k.m);
            break;
        }
        case KernelName::topk_decompress: {
            const std::int64_t pairs = k.n * k.m;
            topk_decompress(w, reinterpret_cast<const std::int32_t*>(w + pairs), pairs, n, w + 2 * pairs);
            break;
        }
        case KernelName::powersgd_orthogonalize: powersgd_orthogonalize(w, n, k.m); break;
        default: throw Error(ErrorKind::internal, std::string("not a compression kernel: ") + to_string(k.name));
    }
}

}  // namespace smol::exec::cpu
