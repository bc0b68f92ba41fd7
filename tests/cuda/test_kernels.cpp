// The CUDA backend's kernels (exec/cuda/kernels.cu) against independent references computed on
// the host in double from the same rounded inputs: softmax(x) written out, softmax's gradient
// y∘(dy − Σ y∘dy), attention softmax(Q·Kᵀ·scale)·V with its log-sum-exp and its hand-derived
// gradients (dP = dO·Vᵀ, dS = P∘(dP − rowsum(dO∘O)), dQ = scale·dS·K, dK = scale·dSᵀ·Q,
// dV = Pᵀ·dO), torch.optim.Adam's update written out, y = a·x + b. Outputs start poisoned
// (NaN), so an element never written fails; tolerances are by dtype (fp32 1e-5, fp16 ~1e-3,
// bf16 ~1e-2 relative, as the inputs' rounding allows).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda_support.hpp"
#include "exec/cuda/kernels.hpp"
#include "exec/cuda/plan.hpp"

using namespace smol;
using namespace smol::exec::cuda;
using smol::test::DeviceMemory;

namespace {

double tolerance(Element e) { return e == Element::fp32 ? 1e-5 : e == Element::fp16 ? 3e-3 : 1.5e-2; }

int smem_limit() {
    int device = 0, smem = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
    return smem;
}

struct AttentionRef {
    std::vector<double> o, lse, dq, dk, dv;
};

/// One batch of heads, [heads][len][d], in double.
AttentionRef attention_reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                 const std::vector<float>& d_o, int heads, int nq, int nk, int d, double scale,
                                 bool causal) {
    AttentionRef r;
    r.o.assign(static_cast<std::size_t>(heads) * nq * d, 0);
    r.lse.assign(static_cast<std::size_t>(heads) * nq, 0);
    r.dq.assign(r.o.size(), 0);
    r.dk.assign(static_cast<std::size_t>(heads) * nk * d, 0);
    r.dv.assign(r.dk.size(), 0);
    auto at = [d](int row, int col) { return static_cast<std::size_t>(row) * d + col; };
    for (int h = 0; h < heads; ++h) {
        const float* Q = q.data() + static_cast<std::size_t>(h) * nq * d;
        const float* K = k.data() + static_cast<std::size_t>(h) * nk * d;
        const float* V = v.data() + static_cast<std::size_t>(h) * nk * d;
        const float* dO = d_o.data() + static_cast<std::size_t>(h) * nq * d;
        double* O = r.o.data() + static_cast<std::size_t>(h) * nq * d;
        double* dQ = r.dq.data() + static_cast<std::size_t>(h) * nq * d;
        double* dK = r.dk.data() + static_cast<std::size_t>(h) * nk * d;
        double* dV = r.dv.data() + static_cast<std::size_t>(h) * nk * d;
        std::vector<double> P(static_cast<std::size_t>(nq) * nk);
        for (int i = 0; i < nq; ++i) {
            // Causal: query i sees keys 0…i; P stays 0 beyond.
            const int seen = causal ? std::min(nk, i + 1) : nk;
            double mx = -1e300;
            for (int j = 0; j < seen; ++j) {
                double s = 0;
                for (int c = 0; c < d; ++c) s += static_cast<double>(Q[at(i, c)]) * K[at(j, c)];
                P[static_cast<std::size_t>(i) * nk + j] = s * scale;
                mx = std::max(mx, s * scale);
            }
            double sum = 0;
            for (int j = 0; j < seen; ++j) sum += std::exp(P[static_cast<std::size_t>(i) * nk + j] - mx);
            r.lse[static_cast<std::size_t>(h) * nq + i] = mx + std::log(sum);
            for (int j = 0; j < seen; ++j) {
                double& p = P[static_cast<std::size_t>(i) * nk + j];
                p = std::exp(p - mx) / sum;
                for (int c = 0; c < d; ++c) O[at(i, c)] += p * V[at(j, c)];
            }
        }
        for (int i = 0; i < nq; ++i) {
            double delta = 0;
            for (int c = 0; c < d; ++c) delta += static_cast<double>(dO[at(i, c)]) * O[at(i, c)];
            for (int j = 0; j < nk; ++j) {
                const double p = P[static_cast<std::size_t>(i) * nk + j];
                double dp = 0;
                for (int c = 0; c < d; ++c) dp += static_cast<double>(dO[at(i, c)]) * V[at(j, c)];
                const double ds = p * (dp - delta);
                for (int c = 0; c < d; ++c) {
                    dV[at(j, c)] += p * dO[at(i, c)];
                    dQ[at(i, c)] += scale * ds * K[at(j, c)];
                    dK[at(j, c)] += scale * ds * Q[at(i, c)];
                }
            }
        }
    }
    return r;
}

}  // namespace

TEST_CASE("fill: uniform in [lo, hi), reproducible from the seed", "[cuda][kernels]") {
    const std::size_t n = 100000;
    DeviceMemory a(n * 2), b(n * 2), c(n * 2);
    check(fill_uniform(a.get(), n, Element::bf16, -1.0f, 1.0f, 7, nullptr), "fill");
    check(fill_uniform(b.get(), n, Element::bf16, -1.0f, 1.0f, 7, nullptr), "fill");
    check(fill_uniform(c.get(), n, Element::bf16, -1.0f, 1.0f, 8, nullptr), "fill");
    check(cudaDeviceSynchronize(), "sync");
    const auto x = test::download(a.get(), n, Element::bf16), y = test::download(b.get(), n, Element::bf16),
               z = test::download(c.get(), n, Element::bf16);
    double mean = 0;
    for (float v : x) {
        REQUIRE(std::isfinite(v));
        CHECK((v >= -1.0f && v <= 1.0f));   // bf16 rounding may reach 1.0
        mean += v;
    }
    mean /= static_cast<double>(n);
    CHECK(std::fabs(mean) < 0.02);
    CHECK(x == y);
    CHECK(x != z);
}

TEST_CASE("softmax rows against the formula, every dtype, vector and scalar paths", "[cuda][kernels]") {
    for (Element e : {Element::fp32, Element::bf16, Element::fp16})
        for (int cols : {1024, 1000, 3}) {
            INFO(to_string(e) << ", " << cols << " columns");
            const int rows = 37;
            const std::size_t n = static_cast<std::size_t>(rows) * cols, eb = e == Element::fp32 ? 4 : 2;
            const auto x = test::rounded(test::uniform(n, 3, -6.0f, 6.0f), e);
            DeviceMemory dx(n * eb), dy(n * eb);
            test::upload(dx.get(), test::encode(x, e));
            check(softmax_forward(dx.get(), dy.get(), rows, cols, e, nullptr), "softmax");
            check(cudaDeviceSynchronize(), "sync");
            std::vector<double> ref(n);
            for (int r = 0; r < rows; ++r) {
                double mx = -1e300, sum = 0;
                for (int c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(x[static_cast<std::size_t>(r) * cols + c]));
                for (int c = 0; c < cols; ++c) sum += std::exp(x[static_cast<std::size_t>(r) * cols + c] - mx);
                for (int c = 0; c < cols; ++c)
                    ref[static_cast<std::size_t>(r) * cols + c] = std::exp(x[static_cast<std::size_t>(r) * cols + c] - mx) / sum;
            }
            const auto y = test::download(dy.get(), n, e);
            CHECK(test::relative_error(y, ref) < tolerance(e));

            // The backward: dx = y ∘ (dy − Σ y∘dy), from the forward's output.
            const auto g = test::rounded(test::uniform(n, 4), e);
            DeviceMemory dg(n * eb), dout(n * eb);
            test::upload(dg.get(), test::encode(g, e));
            check(softmax_backward(dy.get(), dg.get(), dout.get(), rows, cols, e, nullptr), "softmax backward");
            check(cudaDeviceSynchronize(), "sync");
            std::vector<double> gref(n);
            for (int r = 0; r < rows; ++r) {
                double dot = 0;
                for (int c = 0; c < cols; ++c) dot += static_cast<double>(y[static_cast<std::size_t>(r) * cols + c]) * g[static_cast<std::size_t>(r) * cols + c];
                for (int c = 0; c < cols; ++c) {
                    const std::size_t i = static_cast<std::size_t>(r) * cols + c;
                    gref[i] = y[i] * (g[i] - dot);
                }
            }
            CHECK(test::relative_error(test::download(dout.get(), n, e), gref) < 2 * tolerance(e));
        }
}

TEST_CASE("flash attention forward and backward against attention in double", "[cuda][kernels]") {
    const int limit = smem_limit();
    for (Element e : {Element::bf16, Element::fp16})
        for (int d : {16, 64, 128})
            for (int warps : {2, 4})
                for (bool causal : {false, true}) {
                    const FlashTiles t{d, warps, flash_fwd_smem(d, warps), flash_bwd_smem(d, warps)};
                    if (t.fwd_smem > limit || t.bwd_smem > limit) continue;
                    INFO(to_string(e) << ", head dim " << d << ", " << warps << " warps" << (causal ? ", causal" : ""));
                    // Lengths that leave partial tiles on both sides; causal, a square whose diagonal
                    // crosses partial tiles.
                    const int heads = 3, nq = causal ? 130 : 100, nk = 130;
                    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
                    const std::size_t qn = static_cast<std::size_t>(heads) * nq * d, kn = static_cast<std::size_t>(heads) * nk * d;
                    const auto q = test::rounded(test::uniform(qn, 11), e), k = test::rounded(test::uniform(kn, 12), e),
                               v = test::rounded(test::uniform(kn, 13), e), d_o = test::rounded(test::uniform(qn, 14), e);
                    DeviceMemory Q(qn * 2), K(kn * 2), V(kn * 2), O(qn * 2), dO(qn * 2), lse(heads * nq * 4), delta(heads * nq * 4),
                        dQ(qn * 4), dK(kn * 2), dV(kn * 2);
                    test::upload(Q.get(), test::encode(q, e));
                    test::upload(K.get(), test::encode(k, e));
                    test::upload(V.get(), test::encode(v, e));
                    test::upload(dO.get(), test::encode(d_o, e));
                    check(flash_configure(t), "flash_configure");
                    check(flash_forward(Q.get(), K.get(), V.get(), O.get(), lse.get<float>(), heads, nq, nk, t,
                                        static_cast<float>(scale), causal, e, nullptr),
                          "flash forward");
                    check(flash_backward(Q.get(), K.get(), V.get(), O.get(), dO.get(), lse.get<float>(), delta.get<float>(),
                                         dQ.get<float>(), dK.get(), dV.get(), heads, nq, nk, t, static_cast<float>(scale), causal, e,
                                         nullptr),
                          "flash backward");
                    check(cudaDeviceSynchronize(), "sync");
                    const AttentionRef ref = attention_reference(q, k, v, d_o, heads, nq, nk, d, scale, causal);
                    CHECK(test::relative_error(test::download(O.get(), qn, e), ref.o) < tolerance(e));
                    CHECK(test::relative_error(test::download(lse.get(), static_cast<std::size_t>(heads) * nq, Element::fp32), ref.lse) < 1e-3);
                    CHECK(test::relative_error(test::download(dQ.get(), qn, Element::fp32), ref.dq) < 2 * tolerance(e));
                    CHECK(test::relative_error(test::download(dK.get(), kn, e), ref.dk) < 2 * tolerance(e));
                    CHECK(test::relative_error(test::download(dV.get(), kn, e), ref.dv) < 2 * tolerance(e));
                }
}

TEST_CASE("causal flash attention never reads the tiles its mask empties", "[cuda][kernels]") {
    // 256 queries and keys, bf16, 4 warps (query tiles of 64, backward key tiles of 64). Poisoned
    // with NaN: forward, the keys and values after the first 64, which query tile 0 must skip (a
    // tile computed and then masked would carry the NaN into P·V); backward, the first 64 queries
    // and output gradients, which key tiles 1-3 must skip.
    const int heads = 1, n = 256, d = 64, warps = 4, tile = 16 * warps;
    const FlashTiles t{d, warps, flash_fwd_smem(d, warps), flash_bwd_smem(d, warps)};
    REQUIRE(t.fwd_smem <= smem_limit());
    REQUIRE(t.bwd_smem <= smem_limit());
    const Element e = Element::bf16;
    const float scale = 0.125f, nan = std::numeric_limits<float>::quiet_NaN();
    const std::size_t len = static_cast<std::size_t>(n) * d, head = static_cast<std::size_t>(tile) * d;
    auto q = test::rounded(test::uniform(len, 31), e), k = test::rounded(test::uniform(len, 32), e),
         v = test::rounded(test::uniform(len, 33), e), d_o = test::rounded(test::uniform(len, 34), e);
    const AttentionRef ref = attention_reference(q, k, v, d_o, heads, n, n, d, scale, true);
    DeviceMemory Q(len * 2), K(len * 2), V(len * 2), O(len * 2), dO(len * 2), lse(n * 4), delta(n * 4), dQ(len * 4),
        dK(len * 2), dV(len * 2);
    check(flash_configure(t), "flash_configure");
    {
        auto kp = k, vp = v;
        std::fill(kp.begin() + static_cast<std::ptrdiff_t>(head), kp.end(), nan);
        std::fill(vp.begin() + static_cast<std::ptrdiff_t>(head), vp.end(), nan);
        test::upload(Q.get(), test::encode(q, e));
        test::upload(K.get(), test::encode(kp, e));
        test::upload(V.get(), test::encode(vp, e));
        check(flash_forward(Q.get(), K.get(), V.get(), O.get(), lse.get<float>(), heads, n, n, t, scale, true, e, nullptr),
              "flash forward");
        check(cudaDeviceSynchronize(), "sync");
        const auto o = test::download(O.get(), head, e);
        CHECK(test::relative_error(o, std::vector<double>(ref.o.begin(), ref.o.begin() + static_cast<std::ptrdiff_t>(head))) <
              tolerance(e));
    }
    test::upload(K.get(), test::encode(k, e));
    test::upload(V.get(), test::encode(v, e));
    check(flash_forward(Q.get(), K.get(), V.get(), O.get(), lse.get<float>(), heads, n, n, t, scale, true, e, nullptr),
          "flash forward");
    std::fill(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(head), nan);
    std::fill(d_o.begin(), d_o.begin() + static_cast<std::ptrdiff_t>(head), nan);
    test::upload(Q.get(), test::encode(q, e));
    test::upload(dO.get(), test::encode(d_o, e));
    check(flash_backward(Q.get(), K.get(), V.get(), O.get(), dO.get(), lse.get<float>(), delta.get<float>(), dQ.get<float>(),
                         dK.get(), dV.get(), heads, n, n, t, scale, true, e, nullptr),
          "flash backward");
    check(cudaDeviceSynchronize(), "sync");
    const auto dk = test::download(dK.get(), len, e), dv = test::download(dV.get(), len, e);
    for (std::size_t i = head; i < len; ++i) {
        CHECK(std::isfinite(dk[i]));
        CHECK(std::isfinite(dv[i]));
    }
}

TEST_CASE("the memory-bound pass computes y = a·x + b with its extra multiply-adds, aligned or not", "[cuda][kernels]") {
    const std::size_t n = 1001;
    const auto x = test::uniform(n + 1, 21);
    DeviceMemory dx((n + 1) * 4), dy((n + 1) * 4);
    test::upload(dx.get(), test::encode(x, Element::fp32));
    for (int offset : {0, 1})
        for (int fma : {0, 3}) {
            INFO("offset " << offset << ", " << fma << " extra multiply-adds");
            check(stream_pass(dx.get<float>() + offset, dy.get<float>() + offset, static_cast<std::int64_t>(n), 1.5f, 0.25f, fma, nullptr),
                  "stream");
            check(cudaDeviceSynchronize(), "sync");
            const auto y = test::download(dy.get<float>() + offset, n, Element::fp32);
            std::vector<double> ref(n);
            for (std::size_t i = 0; i < n; ++i) {
                float r = 1.5f * x[i + static_cast<std::size_t>(offset)] + 0.25f;
                for (int j = 0; j < fma; ++j) r = r * 0.9999999f + 1e-7f;
                ref[i] = r;
            }
            CHECK(test::relative_error(y, ref) < 1e-6);
        }
}

TEST_CASE("fused multi-tensor Adam follows torch.optim.Adam over two steps", "[cuda][kernels]") {
    // 33 tensors (more than one launch holds), sizes 1 to 70001.
    std::vector<std::size_t> sizes{1, 1000, 70001};
    for (std::size_t i = 0; sizes.size() < 33; ++i) sizes.push_back(17 * i + 3);
    std::vector<std::unique_ptr<DeviceMemory>> mem;
    std::vector<AdamTensor> tensors;
    std::vector<std::vector<double>> p, m, v;
    std::vector<std::vector<float>> g;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
        const std::size_t n = sizes[t];
        const auto p0 = test::uniform(n, 100 + static_cast<unsigned>(t)), m0 = test::uniform(n, 200 + static_cast<unsigned>(t), -1e-3f, 1e-3f),
                   v0 = test::uniform(n, 300 + static_cast<unsigned>(t), 1e-6f, 1e-4f), g0 = test::uniform(n, 400 + static_cast<unsigned>(t));
        for (const auto* src : {&p0, &m0, &v0, &g0}) {
            mem.push_back(std::make_unique<DeviceMemory>(n * 4));
            test::upload(mem.back()->get(), test::encode(*src, Element::fp32));
        }
        const std::size_t b = mem.size() - 4;
        tensors.push_back({mem[b]->get<float>(), mem[b + 1]->get<float>(), mem[b + 2]->get<float>(), mem[b + 3]->get<float>(),
                           static_cast<std::int64_t>(n)});
        p.emplace_back(p0.begin(), p0.end());
        m.emplace_back(m0.begin(), m0.end());
        v.emplace_back(v0.begin(), v0.end());
        g.push_back(g0);
    }
    const AdamHyper h;
    for (int step = 1; step <= 2; ++step) {
        check(adam_step(tensors.data(), tensors.size(), h, step, nullptr), "adam");
        const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.999, step);
        for (std::size_t t = 0; t < sizes.size(); ++t)
            for (std::size_t i = 0; i < sizes[t]; ++i) {
                m[t][i] = 0.9 * m[t][i] + 0.1 * g[t][i];
                v[t][i] = 0.999 * v[t][i] + 0.001 * g[t][i] * g[t][i];
                p[t][i] -= 1e-3 / bc1 * m[t][i] / (std::sqrt(v[t][i]) / std::sqrt(bc2) + 1e-8);
            }
    }
    check(cudaDeviceSynchronize(), "sync");
    for (std::size_t t = 0; t < sizes.size(); ++t) {
        INFO("tensor " << t << " of " << sizes[t]);
        CHECK(test::relative_error(test::download(tensors[t].p, sizes[t], Element::fp32), p[t]) < 1e-6);
        CHECK(test::relative_error(test::download(tensors[t].m, sizes[t], Element::fp32), m[t]) < 1e-5);
        CHECK(test::relative_error(test::download(tensors[t].v, sizes[t], Element::fp32), v[t]) < 1e-5);
    }
}

TEST_CASE("an empty kernel launches", "[cuda][kernels]") {
    check(launch_empty(nullptr), "launch");
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}
