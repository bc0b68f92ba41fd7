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

TEST_CASE("PowerSGD's Gram–Schmidt leaves orthonormal columns spanning the same space", "[exec][compression]") {
    // Columns (1, 1, 0, 0), (1, 0, 1, 0), (0, 0, 0, 2) of a 4 × 3 matrix, row major.
    std::vector<float> m{1, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2};
    const std::vector<float> before = m;
    powersgd_orthogonalize(m.data(), 4, 3);
    auto col = [&](const std::vector<float>& x, int c) { return std::vector<float>{x[c], x[3 + c], x[6 + c], x[9 + c]}; };
    auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
        double s = 0;
        for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
        return s;
    };
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) CHECK(dot(col(m, i), col(m, j)) == Approx(i == j ? 1.0 : 0.0).margin(1e-6));
    // Gram–Schmidt: the first column is the first input column normalised, the second the
    // second input column less its projection on it, (1, -1, 2, 0)/√6 … by hand.
    CHECK(col(m, 0) == std::vector<float>{1 / std::sqrt(2.0f), 1 / std::sqrt(2.0f), 0, 0});
    const float s6 = std::sqrt(6.0f);
    const std::vector<float> second = col(m, 1);
    const std::vector<float> expected{1 / s6, -1 / s6, 2 / s6, 0};
    for (int i = 0; i < 4; ++i) CHECK(second[i] == Approx(expected[i]));
    CHECK(col(m, 2) == std::vector<float>{0, 0, 0, 1});
    // A zero column stays zero (the hook's epsilon 0 would divide by it).
    std::vector<float> zero{0, 0, 0, 0};
    powersgd_orthogonalize(zero.data(), 4, 1);
    CHECK(zero == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("a PowerSGD all-reduce returns a low-rank average exactly and keeps each rank's difference as its residual",
          "[exec][mpi][compression]") {
    exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size(), me = mpi.rank();
    // Rank k's 6 × 5 gradient is (k + 1)·u·vᵀ + [rank 2] w·zᵀ scaled by the rank too: the average
    // has rank ≤ 2, so PowerSGD at rank 2 reproduces it exactly (P spans its columns), and each
    // rank's residual is what its gradient has beyond the average.
    const std::int64_t rows = 6, cols = 5, r = 2;
    const float u[rows] = {1, -2, 0.5f, 3, 0, 1}, v[cols] = {2, 0, -1, 1, 0.5f}, w[rows] = {0, 1, 1, -1, 2, 0},
                z[cols] = {1, 1, 0, -2, 3};
    auto entry = [&](int k, std::int64_t a, std::int64_t b) {
        return static_cast<float>(k + 1) * u[a] * v[b] + static_cast<float>(p - k) * w[a] * z[b];
    };
    std::vector<float> grad(rows * cols), error(rows * cols, 0.0f), pm(rows * r), scratch(rows * cols);
    std::vector<float> q{1, 0, 0.5f, 1, -1, 0.25f, 0.3f, 2, 1, -0.5f};   // cols × r, any Q of full rank
    for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b) grad[a * cols + b] = entry(me, a, b);
    powersgd_allreduce(grad.data(), rows, cols, r, error.data(), pm.data(), q.data(), scratch.data(), mpi.world());
    for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b) {
            double mean = 0;
            for (int k = 0; k < p; ++k) mean += entry(k, a, b);
            mean /= p;
            CHECK(grad[a * cols + b] == Approx(mean).margin(1e-4));
            CHECK(error[a * cols + b] == Approx(entry(me, a, b) - mean).margin(1e-4));
        }
    // At rank 1 only one direction gets through: what is sent and the residual add up to the
    // gradient, and the residual is not empty.
    std::vector<float> grad1(rows * cols), error1(rows * cols, 0.0f), p1(rows), q1{1, 1, 1, 1, 1};
    for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b) grad1[a * cols + b] = entry(me, a, b);
    const std::vector<float> sent = grad1;
    powersgd_allreduce(grad1.data(), rows, cols, 1, error1.data(), p1.data(), q1.data(), scratch.data(), mpi.world());
    double residual = 0;
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        CHECK(grad1[i] + error1[i] == Approx(sent[i]).margin(1e-4));   // M̂ + residual = M
        residual += static_cast<double>(error1[i]) * error1[i];
    }
    CHECK(residual > 1e-3);
}
