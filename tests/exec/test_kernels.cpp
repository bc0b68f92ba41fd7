// The CPU backend's kernels against independent references: a naive triple loop for the GEMM,
// std::exp for softmax and exp, softmax(Q·Kᵀ/√d)·V and its hand-derived gradients for flash
// attention, torch.optim.Adam's update written out for Adam.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/op_graph.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/cpu/comm.hpp"
#include "exec/cpu/kernels.hpp"

using namespace smol;
using namespace smol::exec;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen);
    return v;
}

/// Row-major C = A·B in double.
std::vector<double> naive_gemm(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m, std::int64_t n,
                               std::int64_t k) {
    std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < k; ++p)
            for (std::int64_t j = 0; j < n; ++j)
                c[static_cast<std::size_t>(i * n + j)] += static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) *
                                                          b[static_cast<std::size_t>(p * n + j)];
    return c;
}

/// Reference attention for one head in double: P = softmax(Q·Kᵀ·scale), O = P·V; `causal`:
/// query i sees keys 0…i (P = 0 beyond), and lse holds each row's log Σ exp over what it sees.
struct AttentionResult {
    std::vector<double> p, o, lse;
};
AttentionResult naive_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                          std::int64_t nq, std::int64_t nk, std::int64_t d, double scale, bool causal = false) {
    AttentionResult a;
    a.p.assign(static_cast<std::size_t>(nq * nk), 0);
    a.o.assign(static_cast<std::size_t>(nq * d), 0);
    a.lse.assign(static_cast<std::size_t>(nq), 0);
    for (std::int64_t i = 0; i < nq; ++i) {
        const std::int64_t seen = causal ? std::min(nk, i + 1) : nk;
        double mx = -1e300;
        for (std::int64_t j = 0; j < seen; ++j) {
            double s = 0;
            for (std::int64_t c = 0; c < d; ++c) s += static_cast<double>(q[static_cast<std::size_t>(i * d + c)]) * k[static_cast<std::size_t>(j * d + c)];
            a.p[static_cast<std::size_t>(i * nk + j)] = s * scale;
            mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < seen; ++j) sum += (a.p[static_cast<std::size_t>(i * nk + j)] = std::exp(a.p[static_cast<std::size_t>(i * nk + j)] - mx));
        a.lse[static_cast<std::size_t>(i)] = mx + std::log(sum);
        for (std::int64_t j = 0; j < seen; ++j) a.p[static_cast<std::size_t>(i * nk + j)] /= sum;
        for (std::int64_t j = 0; j < nk; ++j)
            for (std::int64_t c = 0; c < d; ++c)
                a.o[static_cast<std::size_t>(i * d + c)] += a.p[static_cast<std::size_t>(i * nk + j)] * v[static_cast<std::size_t>(j * d + c)];
    }
    return a;
}

}  // namespace

TEST_CASE("sgemm through BLAS equals the triple loop, for square, thin and odd shapes", "[exec][kernels]") {
    for (auto [m, n, k] : std::vector<std::array<std::int64_t, 3>>{{64, 64, 64}, {3, 129, 17}, {200, 1, 31}, {1, 1, 1}}) {
        INFO(m << "×" << n << "×" << k);
        const auto a = random_floats(static_cast<std::size_t>(m * k), 1), b = random_floats(static_cast<std::size_t>(k * n), 2);
        std::vector<float> c(static_cast<std::size_t>(m * n), -7.0f);
        cpu::gemm(a.data(), b.data(), c.data(), m, n, k);
        const auto ref = naive_gemm(a, b, m, n, k);
        for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i] == Approx(ref[i]).margin(1e-4 * static_cast<double>(k)));
    }
}

TEST_CASE("the vectorised exp matches std::exp to float precision and underflows to zero", "[exec][kernels]") {
    for (float x = -87.0f; x <= 87.0f; x += 0.37f) {
        INFO(x);
        CHECK(cpu::fast_exp(x) == Approx(std::exp(static_cast<double>(x))).epsilon(3e-7));
    }
    CHECK(cpu::fast_exp(-100.0f) == 0.0f);
    CHECK(cpu::fast_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
    CHECK(cpu::fast_exp(0.0f) == 1.0f);
}

TEST_CASE("softmax rows sum to one and equal exp(x - max) / sum", "[exec][kernels]") {
    const std::int64_t rows = 5, cols = 37;   // not a multiple of the 16 lanes
    auto x = random_floats(static_cast<std::size_t>(rows * cols), 3, -20.0f, 20.0f);
    const auto in = x;
    cpu::softmax(x.data(), rows, cols);
    for (std::int64_t r = 0; r < rows; ++r) {
        double mx = -1e300, sum = 0, total = 0;
        for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(in[static_cast<std::size_t>(r * cols + c)]));
        for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(in[static_cast<std::size_t>(r * cols + c)] - mx);
        for (std::int64_t c = 0; c < cols; ++c) {
            const double expect = std::exp(in[static_cast<std::size_t>(r * cols + c)] - mx) / sum;
            CHECK(x[static_cast<std::size_t>(r * cols + c)] == Approx(expect).margin(1e-6));
            total += x[static_cast<std::size_t>(r * cols + c)];
        }
        CHECK(total == Approx(1.0).epsilon(1e-5));
    }
}

TEST_CASE("flash attention forward equals softmax(Q Kt / sqrt d) V, over several tiles", "[exec][kernels]") {
    // 150 queries over 90 keys: three query tiles and two key tiles, the last ones partial; under
    // the causal mask also over 150 keys (the diagonal crossing tiles, the tiles above it empty).
    const auto [nq, nk, causal] = GENERATE(table<std::int64_t, std::int64_t, bool>({{150, 90, false}, {150, 90, true}, {150, 150, true}}));
    CAPTURE(nq, nk, causal);
    const std::int64_t d = 32;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto q = random_floats(static_cast<std::size_t>(nq * d), 4), k = random_floats(static_cast<std::size_t>(nk * d), 5),
               v = random_floats(static_cast<std::size_t>(nk * d), 6);
    std::vector<float> o(static_cast<std::size_t>(nq * d)), lse(static_cast<std::size_t>(nq));
    std::vector<float> scratch(static_cast<std::size_t>(cpu::flash_scratch_floats(d)));
    cpu::flash_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), nq, nk, d, static_cast<float>(scale), scratch.data(),
                       causal);
    const AttentionResult ref = naive_attention(q, k, v, nq, nk, d, scale, causal);
    for (std::size_t i = 0; i < o.size(); ++i) CHECK(o[i] == Approx(ref.o[i]).margin(2e-5));
    // lse: the log of Σ exp(scores) over the keys the row sees.
    for (std::size_t i = 0; i < lse.size(); ++i) CHECK(lse[i] == Approx(ref.lse[i]).margin(1e-5));
}

TEST_CASE("causal flash attention never reads the tiles its mask empties", "[exec][kernels]") {
    // 256 queries and keys, four tiles each. Poisoned with NaN: forward, the keys and values of
    // tiles 1-3, which query tile 0 must skip (a tile computed and then masked would carry the
    // NaN into P·V); backward, the queries and output gradients of tile 0, which the key tiles
    // 1-3 must skip.
    const std::int64_t n = 256, d = 16, tile = cpu::kFlashBlock;
    const float scale = 0.25f, nan = std::numeric_limits<float>::quiet_NaN();
    auto q = random_floats(static_cast<std::size_t>(n * d), 21), k = random_floats(static_cast<std::size_t>(n * d), 22),
         v = random_floats(static_cast<std::size_t>(n * d), 23), d_o = random_floats(static_cast<std::size_t>(n * d), 24);
    std::vector<float> o(q.size()), lse(static_cast<std::size_t>(n)), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> scratch(static_cast<std::size_t>(cpu::flash_scratch_floats(d) + n));
    {
        auto kp = k, vp = v;
        std::fill(kp.begin() + tile * d, kp.end(), nan);
        std::fill(vp.begin() + tile * d, vp.end(), nan);
        cpu::flash_forward(q.data(), kp.data(), vp.data(), o.data(), lse.data(), n, n, d, scale, scratch.data(), true);
        const AttentionResult ref = naive_attention(q, k, v, n, n, d, scale, true);
        for (std::int64_t i = 0; i < tile * d; ++i) CHECK(o[static_cast<std::size_t>(i)] == Approx(ref.o[static_cast<std::size_t>(i)]).margin(2e-5));
    }
    cpu::flash_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), n, n, d, scale, scratch.data(), true);
    std::fill(q.begin(), q.begin() + tile * d, nan);
    std::fill(d_o.begin(), d_o.begin() + tile * d, nan);
    cpu::flash_backward(q.data(), k.data(), v.data(), o.data(), d_o.data(), lse.data(), dq.data(), dk.data(), dv.data(), n, n, d,
                        scale, scratch.data(), true);
    for (std::size_t i = static_cast<std::size_t>(tile * d); i < dk.size(); ++i) {
        CHECK(std::isfinite(dk[i]));
        CHECK(std::isfinite(dv[i]));
    }
}

TEST_CASE("flash attention backward equals the gradients of softmax(Q Kt / sqrt d) V", "[exec][kernels]") {
    // Under the causal mask with more keys than queries the last keys are seen by no query (their
    // gradients 0); over 130 × 130 the diagonal crosses three tiles.
    const auto [nq, nk, causal] = GENERATE(table<std::int64_t, std::int64_t, bool>({{70, 80, false}, {70, 80, true}, {130, 130, true}}));
    CAPTURE(nq, nk, causal);
    const std::int64_t d = 16;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto q = random_floats(static_cast<std::size_t>(nq * d), 7), k = random_floats(static_cast<std::size_t>(nk * d), 8),
               v = random_floats(static_cast<std::size_t>(nk * d), 9), d_o = random_floats(static_cast<std::size_t>(nq * d), 10);
    std::vector<float> o(static_cast<std::size_t>(nq * d)), lse(static_cast<std::size_t>(nq));
    std::vector<float> scratch(static_cast<std::size_t>(cpu::flash_scratch_floats(d) + nq));
    cpu::flash_forward(q.data(), k.data(), v.data(), o.data(), lse.data(), nq, nk, d, static_cast<float>(scale), scratch.data(),
                       causal);
    std::vector<float> dq(o.size()), dk(k.size()), dv(v.size());
    cpu::flash_backward(q.data(), k.data(), v.data(), o.data(), d_o.data(), lse.data(), dq.data(), dk.data(), dv.data(), nq,
                        nk, d, static_cast<float>(scale), scratch.data(), causal);
    // dV = Pᵀ dO; dP = dO Vᵀ; dS = P ∘ (dP − rowsum(dO ∘ O)); dQ = scale·dS K; dK = scale·dSᵀ Q.
    const AttentionResult ref = naive_attention(q, k, v, nq, nk, d, scale, causal);
    std::vector<double> rdq(dq.size(), 0), rdk(dk.size(), 0), rdv(dv.size(), 0);
    for (std::int64_t i = 0; i < nq; ++i) {
        double delta = 0;
        for (std::int64_t c = 0; c < d; ++c) delta += static_cast<double>(d_o[static_cast<std::size_t>(i * d + c)]) * ref.o[static_cast<std::size_t>(i * d + c)];
        for (std::int64_t j = 0; j < nk; ++j) {
            const double p = ref.p[static_cast<std::size_t>(i * nk + j)];
            double dp = 0;
            for (std::int64_t c = 0; c < d; ++c) {
                dp += static_cast<double>(d_o[static_cast<std::size_t>(i * d + c)]) * v[static_cast<std::size_t>(j * d + c)];
                rdv[static_cast<std::size_t>(j * d + c)] += p * d_o[static_cast<std::size_t>(i * d + c)];
            }
            const double ds = p * (dp - delta);
            for (std::int64_t c = 0; c < d; ++c) {
                rdq[static_cast<std::size_t>(i * d + c)] += scale * ds * k[static_cast<std::size_t>(j * d + c)];
                rdk[static_cast<std::size_t>(j * d + c)] += scale * ds * q[static_cast<std::size_t>(i * d + c)];
            }
        }
    }
    for (std::size_t i = 0; i < dq.size(); ++i) CHECK(dq[i] == Approx(rdq[i]).margin(2e-5));
    for (std::size_t i = 0; i < dk.size(); ++i) CHECK(dk[i] == Approx(rdk[i]).margin(2e-5));
    for (std::size_t i = 0; i < dv.size(); ++i) CHECK(dv[i] == Approx(rdv[i]).margin(2e-5));
}

TEST_CASE("an Adam step equals torch.optim.Adam's formula", "[exec][kernels]") {
    const std::size_t n = 1001;
    auto p = random_floats(n, 11), m = random_floats(n, 12, 0, 0.1f), v = random_floats(n, 13, 0, 0.01f);
    const auto g = random_floats(n, 14);
    const auto p0 = p, m0 = m, v0 = v;
    const cpu::AdamParams a{0.01f, 0.9f, 0.999f, 1e-8f};
    const int step = 3;
    cpu::adam(p.data(), m.data(), v.data(), g.data(), static_cast<std::int64_t>(n), a, step);
    // In double, with the float hyper-parameters the kernel was given.
    const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, eps = a.eps;
    for (std::size_t i = 0; i < n; ++i) {
        const double gi = g[i];
        const double mi = b1 * m0[i] + (1 - b1) * gi, vi = b2 * v0[i] + (1 - b2) * gi * gi;
        const double mhat = mi / (1 - std::pow(b1, step)), vhat = vi / (1 - std::pow(b2, step));
        CHECK(m[i] == Approx(mi).epsilon(1e-5).margin(1e-7));
        CHECK(v[i] == Approx(vi).epsilon(1e-5).margin(1e-9));
        CHECK(p[i] == Approx(p0[i] - lr * mhat / (std::sqrt(vhat) + eps)).margin(1e-6));
    }
}

TEST_CASE("a streaming pass writes a·x + b", "[exec][kernels]") {
    const auto x = random_floats(100, 15);
    std::vector<float> y(100);
    cpu::stream(x.data(), y.data(), 100, 2.0f, 0.5f);
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(2.0 * x[i] + 0.5));
}

TEST_CASE("collective buffer counts follow the graph's sizes", "[exec][kernels]") {
    using cpu::collective_counts;
    // 10 bytes over 3 ranks: 3 whole floats, blocks of 1.
    CHECK(collective_counts(CollectiveKind::all_reduce, 10, 3).send == 3);
    CHECK(collective_counts(CollectiveKind::reduce_scatter, 4096, 4).send == 1024);
    CHECK(collective_counts(CollectiveKind::reduce_scatter, 4096, 4).recv == 256);
    CHECK(collective_counts(CollectiveKind::all_gather, 4096, 4).send == 256);
    CHECK(collective_counts(CollectiveKind::all_gather, 4096, 4).recv == 1024);
    CHECK(collective_counts(CollectiveKind::all_to_all, 4000, 3).send == 1002);   // 3 blocks of ⌈1000/3⌉
    CHECK(collective_counts(CollectiveKind::broadcast, 400, 2).recv == 100);
    CHECK(collective_counts(CollectiveKind::barrier, 400, 2).recv == 0);
}

TEST_CASE("an op without a recipe runs as one kernel of its class from its totals", "[exec][kernels]") {
    OpGraph g(1);
    const OpId gemm = g.add_compute(0, Phase::fwd, 0, 0, Flops(2.0 * 100 * 100 * 100), Bytes(0), KernelClass::gemm, DType::fp32);
    const OpId ew = g.add_compute(0, Phase::fwd, 0, 0, Flops(0), Bytes(8000), KernelClass::elementwise, DType::fp32);
    const OpId opt = g.add_compute(0, Phase::opt, -1, -1, Flops(12.0 * 500), Bytes(0), KernelClass::optimizer, DType::fp32);
    const Kernel adam = adam_kernel(10, 28);
    const OpId rec = g.add_kernels(0, Phase::opt, -1, -1, g.intern_recipe({&adam, 1}), DType::fp32);
    g.finalize();
    const auto k1 = kernels_to_run(g, gemm);
    REQUIRE(k1.size() == 1);
    CHECK(k1[0].op == KernelOp::gemm);
    CHECK(k1[0].m == 100);
    CHECK(k1[0].n == 100);
    CHECK(k1[0].k == 100);
    const auto k2 = kernels_to_run(g, ew);
    REQUIRE(k2.size() == 1);
    CHECK(k2[0].op == KernelOp::stream);
    CHECK(k2[0].bytes == 8000);
    const auto k3 = kernels_to_run(g, opt);
    REQUIRE(k3.size() == 1);
    CHECK(k3[0].op == KernelOp::adam);
    CHECK(k3[0].elements == 500);
    const auto k4 = kernels_to_run(g, rec);
    REQUIRE(k4.size() == 1);
    CHECK(k4[0] == adam);
    // The workspace holds the largest kernel's operands: 3 × 100² floats for the GEMM.
    CHECK(cpu::workspace_bytes(g, 0)[static_cast<int>(Stream::compute)] == 4 * 3 * 100 * 100);
}
