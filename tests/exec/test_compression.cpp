// Gradient compression on the CPU, for real: 1-bit SGD and top-k with error feedback return the
// compressed average on known data, and the residual carries each step's error to the next
// (under mpirun -np 2 and -np 4).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "exec/cpu/compression.hpp"
#include "exec/mpi.hpp"
#include "exec_support.hpp"
#include "strategies/compression.hpp"

using namespace smol;
using namespace smol::exec::cpu;

TEST_CASE("1-bit packs signs most significant bit first and keeps c - scale·sign(c)", "[exec][compression]") {
    // c = [3, -1, 1, -3, 3, -1, 1, -3]: ‖c‖² = 40, scale = √(40/8) = √5.
    const std::vector<float> g{3, -1, 1, -3, 3, -1, 1, -3};
    std::vector<float> e(8, 0.0f);
    std::uint8_t signs = 0;
    const float scale = onebit_compress(g.data(), 8, 8, e.data(), &signs);
    CHECK(scale == Approx(std::sqrt(5.0f)));
    CHECK(signs == 0b10101010);
    for (int i = 0; i < 8; ++i) CHECK(e[i] == Approx(g[i] - (g[i] >= 0 ? scale : -scale)));
    std::vector<float> out(8);
    onebit_decompress(&signs, &scale, 1, 8, 8, out.data());
    for (int i = 0; i < 8; ++i) CHECK(out[i] == Approx(g[i] >= 0 ? scale : -scale));
}

TEST_CASE("top-k sends the largest magnitudes and keeps the rest", "[exec][compression]") {
    const std::vector<float> g{0.5f, -9, 1, 7, -0.25f, 2, -3, 0.75f};
    std::vector<float> e(8, 0.0f), values(2), scratch(8);
    std::vector<std::int32_t> indices(2);
    topk_compress(g.data(), 8, 2, 8, e.data(), values.data(), indices.data(), scratch.data());
    CHECK(indices == std::vector<std::int32_t>{1, 3});
    CHECK(values == std::vector<float>{-9, 7});
    CHECK(e == std::vector<float>{0.5f, 0, 1, 0, -0.25f, 2, -3, 0.75f});
    std::vector<float> out(8, -1);
    topk_decompress(values.data(), indices.data(), 2, 8, out.data());
    CHECK(out == std::vector<float>{0, -9, 0, 7, 0, 0, 0, 0});
}

TEST_CASE("a 1-bit all-reduce returns the compressed average and its residual carries the error", "[exec][mpi][compression]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank();
    const std::int64_t n = 60, padded = strategies::onebit_padded(n, p);   // 64 (p = 2) or 128 (p = 4)
    REQUIRE(padded % (8 * p) == 0);
    SECTION("rank r sends (r + 1) · s: every magnitude is its scale, the average is exact") {
        // s = ±1 by element; rank r's scale is (r + 1)·√(n / padded), the server's the mean of those.
        std::vector<float> grad(n), we(padded, 0.0f), se(padded / p, 0.0f);
        const auto s = [](std::int64_t i) { return i % 3 == 0 ? -1.0f : 1.0f; };
        for (std::int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>(me + 1) * s(i);
        onebit_allreduce(grad.data(), n, padded, we.data(), se.data(), mpi.world());
        // The padding (zeros, counted +) makes each scale √(n/padded) times the magnitude; the
        // server's chunks then all hold that magnitude times the mean of r + 1, so the server
        // sends them exactly and keeps no residual.
        const double shrink = std::sqrt(static_cast<double>(n) / static_cast<double>(padded));
        const double mean = (p + 1) / 2.0;
        for (std::int64_t i = 0; i < n; ++i) CHECK(grad[i] == Approx(s(i) * mean * shrink).epsilon(1e-5));
        for (float x : se) CHECK(x == Approx(0.0f).margin(1e-5));
        for (std::int64_t i = 0; i < n; ++i) CHECK(we[i] == Approx((me + 1) * s(i) * (1 - shrink)).epsilon(1e-5));
    }
    SECTION("the same gradient twice: what is not sent the first time is sent the second") {
        // Every rank holds g: half of the elements ±7, half ±1 (mean square 25, scale 5 with no
        // padding: use the first n = padded elements).
        const std::int64_t m = padded;
        std::vector<float> g(m), we(m, 0.0f), se(m / p, 0.0f);
        for (std::int64_t i = 0; i < m; ++i) g[i] = (i % 2 == 0 ? 7.0f : 1.0f) * (i % 4 < 2 ? 1.0f : -1.0f);
        std::vector<float> step1 = g;
        onebit_allreduce(step1.data(), m, m, we.data(), se.data(), mpi.world());
        // Step 1: every element ±5 (the sign of g times the scale); residual 7 − 5 = 2, 1 − 5 = −4.
        for (std::int64_t i = 0; i < m; ++i) {
            const float sign = g[i] >= 0 ? 1.0f : -1.0f;
            CHECK(step1[i] == Approx(5.0f * sign));
            CHECK(we[i] == Approx(g[i] - 5.0f * sign));
        }
        for (float x : se) CHECK(x == Approx(0.0f).margin(1e-5));
        std::vector<float> step2 = g;
        onebit_allreduce(step2.data(), m, m, we.data(), se.data(), mpi.world());
        // Step 2 compresses c = g + e: 9 and −3 (the small elements flip sign), scale √45. Error
        // feedback: what both steps sent plus what is left equals what was to be sent, 2g.
        for (std::int64_t i = 0; i < m; ++i) {
            const float c = g[i] + (g[i] - 5.0f * (g[i] >= 0 ? 1.0f : -1.0f));
            CHECK(step2[i] == Approx(std::sqrt(45.0f) * (c >= 0 ? 1.0f : -1.0f)));
            CHECK(step1[i] + step2[i] + we[i] == Approx(2 * g[i]));
        }
    }
    SECTION("different data on every rank: the average is what was sent plus what is left") {
        std::vector<float> grad(n), we(padded, 0.0f), se(padded / p, 0.0f);
        const auto value = [](int r, std::int64_t i) { return static_cast<float>(((r + 2) * (i + 1) * 37) % 23) - 11.0f; };
        for (std::int64_t i = 0; i < n; ++i) grad[i] = value(me, i);
        onebit_allreduce(grad.data(), n, padded, we.data(), se.data(), mpi.world());
        // Two levels of error feedback: mean_r(g_r) = out + mean_r(e_r) + e_server (each rank
        // holds its chunk's server residual). All-reduce the residuals to check it.
        std::vector<float> mean_we(padded), se_all(padded, 0.0f), se_mine(padded, 0.0f);
        MPI_Allreduce(we.data(), mean_we.data(), static_cast<int>(padded), MPI_FLOAT, MPI_SUM, mpi.world());
        for (std::int64_t i = 0; i < padded / p; ++i) se_mine[static_cast<std::size_t>(me * (padded / p) + i)] = se[i];
        MPI_Allreduce(se_mine.data(), se_all.data(), static_cast<int>(padded), MPI_FLOAT, MPI_SUM, mpi.world());
        for (std::int64_t i = 0; i < n; ++i) {
            double mean = 0;
            for (int r = 0; r < p; ++r) mean += value(r, i);
            mean /= p;
            CHECK(grad[i] + mean_we[i] / p + se_all[i] == Approx(mean).margin(1e-4));
        }
    }
}

TEST_CASE("a top-k all-reduce returns the average of what every rank sent", "[exec][mpi][compression]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank();
    // Rank r's gradient is 100 at element r and small elsewhere: with k = 1 each rank sends its
    // 100, and the average is 100 / p at elements 0 … p−1.
    const std::int64_t n = 64;
    std::vector<float> grad(n), e(n, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) grad[i] = i == me ? 100.0f : 0.01f * static_cast<float>(i % 5);
    const std::vector<float> sent = grad;
    topk_allreduce(grad.data(), n, 1, n, e.data(), mpi.world());
    for (std::int64_t i = 0; i < n; ++i) CHECK(grad[i] == Approx(i < p ? 100.0f / p : 0.0f));
    // The residual is the gradient less what was sent; the next step sends its largest.
    for (std::int64_t i = 0; i < n; ++i) CHECK(e[i] == (i == me ? 0.0f : sent[i]));
    std::vector<float> zero(n, 0.0f);
    topk_allreduce(zero.data(), n, 1, n, e.data(), mpi.world());
    // The largest residual, 0.04, is at i = 4, 9, 14, … (i mod 5 = 4; no rank's own element, as
    // p ≤ 4); the first of them goes out from every rank, the others stay.
    CHECK(e[4] == 0.0f);
    CHECK(e[9] == sent[9]);
    float total = 0;
    for (float x : zero) total += x;
    CHECK(total == Approx(0.04f));
}
