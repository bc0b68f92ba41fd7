#include "topologies/measured.hpp"

#include <algorithm>
#include <cmath>

namespace smol::topo {

namespace {

/// Position of log(v) on a grid of increasing values: the cell index i (v between g[i] and
/// g[i+1]) and the fraction t in [0, 1] across it; clamped to the grid.
std::pair<std::size_t, double> locate(const std::vector<double>& g, double v) {
    if (g.size() < 2 || v <= g.front()) return {0, 0.0};
    if (v >= g.back()) return {g.size() - 2, 1.0};
    const auto hi = static_cast<std::size_t>(std::upper_bound(g.begin(), g.end(), v) - g.begin());
    const std::size_t i = hi - 1;
    return {i, (std::log(v) - std::log(g[i])) / (std::log(g[i + 1]) - std::log(g[i]))};
}

double lerp_log(double a, double b, double t) { return std::exp(std::log(a) + t * (std::log(b) - std::log(a))); }

}  // namespace

double Curve::rate_at(double v) const {
    if (x.empty()) return 0;
    if (x.size() == 1) return y[0];
    const auto [i, t] = locate(x, v);
    return lerp_log(y[i], y[i + 1], t);
}

double Curve::time_at(double v) const {
    if (x.empty()) return 0;
    if (v <= x.front()) return y.front();
    if (v >= x.back()) return y.back() * v / x.back();
    const auto [i, t] = locate(x, v);
    return lerp_log(y[i], y[i + 1], t);
}

double ShapeTable::at(double mv, double nv, double kv) const {
    if (rate.empty()) return 0;
    auto cell = [&](std::size_t i, std::size_t j, std::size_t l) {
        return rate[(std::min(i, m.size() - 1) * n.size() + std::min(j, n.size() - 1)) * k.size() + std::min(l, k.size() - 1)];
    };
    const auto [i, ti] = locate(m, mv);
    const auto [j, tj] = locate(n, nv);
    const auto [l, tl] = locate(k, kv);
    // Trilinear in log space: the weighted mean of the eight corners' log rates.
    double log_rate = 0;
    for (int di = 0; di < 2; ++di)
        for (int dj = 0; dj < 2; ++dj)
            for (int dl = 0; dl < 2; ++dl) {
                const double w = (di ? ti : 1 - ti) * (dj ? tj : 1 - tj) * (dl ? tl : 1 - tl);
                if (w == 0) continue;
                log_rate += w * std::log(cell(i + static_cast<std::size_t>(di), j + static_cast<std::size_t>(dj),
                                              l + static_cast<std::size_t>(dl)));
            }
    return std::exp(log_rate);
}

const ShapeTable* MeasuredCompute::gemm_table(DType dtype, int elem_bytes) const {
    const ShapeTable* t = &gemm;
    if (on_gpu() && elem_bytes < 4) t = dtype == DType::bf16 ? &gemm_bf16 : dtype == DType::fp16 ? &gemm_fp16 : nullptr;
    return t && !t->empty() ? t : nullptr;
}

const MeasuredTransfer* MeasuredNetwork::collective(CollectiveKind kind, int ranks, int nodes) const {
    for (const MeasuredTransfer& t : transfers)
        if (!t.p2p && t.kind == kind && t.ranks == ranks && t.nodes == nodes) return &t;
    return nullptr;
}

const MeasuredTransfer* MeasuredNetwork::p2p(int nodes) const {
    for (const MeasuredTransfer& t : transfers)
        if (t.p2p && t.nodes == nodes) return &t;
    return nullptr;
}

}  // namespace smol::topo
