#include "exec/cpu/kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace smol::exec::cpu {

namespace {

int threads_set = 1;

/// Cephes expf (Moshier, cephes/single/expf.c): exp(x) = 2^n · exp(r), n = round(x / ln 2),
/// r = x − n·ln 2 in [−ln2/2, ln2/2] (ln 2 split in two for exactness), exp(r) by a degree-6
/// polynomial. Branch-free so a loop over it vectorises; the rounding uses the 1.5·2^23 trick,
/// the power of two is built in the exponent bits.
[[gnu::always_inline]] inline float exp_inline(float x) {
    constexpr float lo = -87.33654f, hi = 88.0f;
    const float xc = std::min(std::max(x, lo), hi);
    constexpr float magic = 12582912.0f;   // 1.5 · 2^23
    const float t = xc * 1.44269504088896341f + magic;
    const float n = t - magic;
    const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(magic);
    const float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    const float z = r * r;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    const float scale = std::bit_cast<float>((ni + 127) << 23);
    return x < lo ? 0.0f : y * scale;
}

constexpr int kLanes = 16;

float row_max(const float* x, std::int64_t n) {
    float m[kLanes];
    for (float& v : m) v = -std::numeric_limits<float>::infinity();
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) m[j] = std::max(m[j], x[i + j]);
    float out = -std::numeric_limits<float>::infinity();
    for (float v : m) out = std::max(out, v);
    for (; i < n; ++i) out = std::max(out, x[i]);
    return out;
}

/// x[i] = exp(x[i] − shift); returns the sum.
float exp_shift_sum(float* x, std::int64_t n, float shift) {
    float s[kLanes] = {};
    std::int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) {
            const float e = exp_inline(x[i + j] - shift);
            x[i + j] = e;
            s[j] += e;
        }
    float out = 0;
    for (float v : s) out += v;
    for (; i < n; ++i) {
        x[i] = exp_inline(x[i] - shift);
        out += x[i];
    }
    return out;
}

void scale_row(float* x, std::int64_t n, float a) {
    for (std::int64_t i = 0; i < n; ++i) x[i] *= a;
}

/// Sets the entries of a rows × cols tile (queries from i0, keys from j0) whose key comes after
/// its query (j > i) to `value`: −∞ for scores, 0 for probabilities.
void mask_above_diagonal(float* tile, std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols, float value) {
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = std::max<std::int64_t>(0, i0 + r + 1 - j0); c < cols; ++c) tile[r * cols + c] = value;
}

}  // namespace

void set_blas_threads(int threads) {
    threads_set = std::max(1, threads);
#ifdef SMOL_OPENBLAS
    openblas_set_num_threads(threads_set);
#endif
}

int blas_threads() {
#ifdef SMOL_OPENBLAS
    return openblas_get_num_threads();
#else
    return threads_set;
#endif
}

std::string blas_version() {
#ifdef SMOL_OPENBLAS
    return openblas_get_config();
#else
    return "CBLAS";
#endif
}

void gemm(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c, static_cast<int>(n));
}

float fast_exp(float x) { return exp_inline(x); }

void softmax(float* x, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
        float* row = x + r * cols;
        const float m = row_max(row, cols);
        const float sum = exp_shift_sum(row, cols, m);
        scale_row(row, cols, 1.0f / sum);
    }
}

std::int64_t flash_scratch_floats(std::int64_t d) {
    (void)d;
    return 2 * kFlashBlock * kFlashBlock + 2 * kFlashBlock;
}

void flash_forward(const float* q, const float* k, const float* v, float* o, float* lse, std::int64_t q_len,
                   std::int64_t kv_len, std::int64_t d, float scale, float* scratch, bool causal) {
    constexpr std::int64_t B = kFlashBlock;
    float* s = scratch;                      // B × B scores, then probabilities
    float* m = scratch + 2 * B * B;          // running row maxima
    float* l = m + B;                        // running row sums
    const int di = static_cast<int>(d);
    for (std::int64_t i0 = 0; i0 < q_len; i0 += B) {
        const std::int64_t br = std::min(B, q_len - i0);
        float* oi = o + i0 * d;
        std::fill(oi, oi + br * d, 0.0f);
        std::fill(m, m + br, -std::numeric_limits<float>::infinity());
        std::fill(l, l + br, 0.0f);
        // Under the causal mask the key blocks after the tile's last query are skipped, as
        // FlashAttention-2 does (Dao 2023 §3.1.1); the block holding the diagonal is masked.
        const std::int64_t kv_end = causal ? std::min(kv_len, i0 + br) : kv_len;
        for (std::int64_t j0 = 0; j0 < kv_end; j0 += B) {
            const std::int64_t bc = std::min(B, kv_len - j0);
            const int bci = static_cast<int>(bc);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(br), bci, di, scale, q + i0 * d, di,
                        k + j0 * d, di, 0.0f, s, bci);
            if (causal) mask_above_diagonal(s, i0, br, j0, bc, -std::numeric_limits<float>::infinity());
            for (std::int64_t r = 0; r < br; ++r) {
                float* row = s + r * bc;
                const float mx = std::max(m[r], row_max(row, bc));
                const float alpha = exp_inline(m[r] - mx);
                l[r] = alpha * l[r] + exp_shift_sum(row, bc, mx);
                scale_row(oi + r * d, d, alpha);
                m[r] = mx;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(br), di, bci, 1.0f, s, bci,
                        v + j0 * d, di, 1.0f, oi, di);
        }
        for (std::int64_t r = 0; r < br; ++r) {
            scale_row(oi + r * d, d, 1.0f / l[r]);
            lse[i0 + r] = m[r] + std::log(l[r]);
        }
    }
}

void flash_backward(const float* q, const float* k, const float* v, const float* o, const float* d_o,
                    const float* lse, float* dq, float* dk, float* dv, std::int64_t q_len, std::int64_t kv_len,
                    std::int64_t d, float scale, float* scratch, bool causal) {
    constexpr std::int64_t B = kFlashBlock;
    float* p = scratch;                      // B × B probabilities
    float* dp = scratch + B * B;             // B × B gradient of the probabilities, then of the scores
    float* delta = scratch + flash_scratch_floats(d);   // q_len: rowsum(dO ∘ O)
    const int di = static_cast<int>(d);
    for (std::int64_t r = 0; r < q_len; ++r) {
        float acc = 0;
        for (std::int64_t c = 0; c < d; ++c) acc += d_o[r * d + c] * o[r * d + c];
        delta[r] = acc;
    }
    std::fill(dq, dq + q_len * d, 0.0f);
    std::fill(dk, dk + kv_len * d, 0.0f);
    std::fill(dv, dv + kv_len * d, 0.0f);
    for (std::int64_t j0 = 0; j0 < kv_len; j0 += B) {
        const std::int64_t bc = std::min(B, kv_len - j0);
        const int bci = static_cast<int>(bc);
        // Causal: the query tiles before this key tile see none of it (tiles of both are B wide).
        for (std::int64_t i0 = causal ? j0 : 0; i0 < q_len; i0 += B) {
            const std::int64_t br = std::min(B, q_len - i0);
            const int bri = static_cast<int>(br);
            // P = exp(scale · Q_i K_jᵀ − lse_i)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bri, bci, di, scale, q + i0 * d, di, k + j0 * d, di,
                        0.0f, p, bci);
            for (std::int64_t r = 0; r < br; ++r) {
                float* row = p + r * bc;
                const float shift = lse[i0 + r];
                for (std::int64_t c = 0; c < bc; ++c) row[c] = exp_inline(row[c] - shift);
            }
            if (causal) mask_above_diagonal(p, i0, br, j0, bc, 0.0f);
            // dV_j += Pᵀ dO_i
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bci, di, bri, 1.0f, p, bci, d_o + i0 * d, di, 1.0f,
                        dv + j0 * d, di);
            // dP = dO_i V_jᵀ, then dS = P ∘ (dP − delta_i)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bri, bci, di, 1.0f, d_o + i0 * d, di, v + j0 * d, di,
                        0.0f, dp, bci);
            for (std::int64_t r = 0; r < br; ++r) {
                const float dr = delta[i0 + r];
                for (std::int64_t c = 0; c < bc; ++c) dp[r * bc + c] = p[r * bc + c] * (dp[r * bc + c] - dr);
            }
            // dQ_i += scale · dS K_j ; dK_j += scale · dSᵀ Q_i
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bri, di, bci, scale, dp, bci, k + j0 * d, di, 1.0f,
                        dq + i0 * d, di);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bci, di, bri, scale, dp, bci, q + i0 * d, di, 1.0f,
                        dk + j0 * d, di);
        }
    }
}

void stream(const float* x, float* y, std::int64_t n, float a, float b) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = a * x[i] + b;
}

void arithmetic(double flops) {
    constexpr int kAcc = 64;
    // Read at run time, so the compiler cannot fold the recurrence.
    volatile float runtime_mul = 0.9999999f, runtime_add = 1e-7f;
    const float mul = runtime_mul, add = runtime_add;
    float acc[kAcc];
    for (int j = 0; j < kAcc; ++j) acc[j] = 1.0f + static_cast<float>(j) * 1e-3f;
    const auto iterations = static_cast<std::int64_t>(flops / (2.0 * kAcc));
    for (std::int64_t i = 0; i < iterations; ++i)
        for (int j = 0; j < kAcc; ++j) acc[j] = acc[j] * mul + add;
    float sum = 0;
    for (float a : acc) sum += a;
    volatile float sink = sum;   // keeps the loop
    (void)sink;
}

void adam(float* p, float* m, float* v, const float* g, std::int64_t n, const AdamParams& a, int step) {
    // torch.optim.Adam (single-tensor path): step_size = lr / (1 − β1^t), denominator
    // sqrt(v) / sqrt(1 − β2^t) + eps.
    const float bc1 = 1.0f - std::pow(a.beta1, static_cast<float>(step));
    const float bc2_sqrt = std::sqrt(1.0f - std::pow(a.beta2, static_cast<float>(step)));
    const float step_size = a.lr / bc1, inv_bc2_sqrt = 1.0f / bc2_sqrt;
    const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2, eps = a.eps;
    for (std::int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        const float mi = b1 * m[i] + c1 * gi;
        const float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps);
    }
}

}  // namespace smol::exec::cpu
