// Fused attention kernels as measured: the rate (FLOP/s) of FlashAttention-2's, FlashAttention-3's
// and cuDNN's fused attention kernels on one device, by direction, mask, head dimension and key
// length.
//
// A fused attention kernel does not run on the GEMM curve. Each thread block loads a tile of
// queries once and loops over the key/value tiles, so what its load and epilogue cost is
// amortised over the key length, not over the total work: at the same FLOPs, a longer key loop
// runs faster, and the rate differs by head dimension (the tile's arithmetic per byte) and by
// library (cuDNN's Hopper kernels use the asynchronous warp-group MMAs, FlashAttention-2's do
// not). The published measurements give all four: the table holds them as read, and the
// simulator (sim/compute.cpp) prices a flash kernel at
//
//   t = FLOPs / (rate(backend, direction, mask, head dim, keys) · fill)
//
// where `fill` = min(1, thread blocks / SMs): the measurements ran at least 15 waves of blocks;
// a kernel of fewer blocks than SMs leaves SMs idle. The kernels' FLOPs are counted as the
// benchmarks count them (a causal kernel's half of the square, backward 2.5× forward).
//
// Between measured points the rate is linear in log2(keys) and log2(head dim); beyond the
// longest key length it stays; below the shortest it falls on the saturating curve
// r(kv) ∝ kv / (kv + h) that passes through the two shortest points (the fixed cost per query
// tile over a key loop of kv); head dimensions outside the measured ones take the nearest.
// Rows the sources did not measure are derived, each rule with the check that supports it
// (attention_rates.cpp).
#pragma once

#include <string>
#include <vector>

#include "core/kernel.hpp"
#include "core/units.hpp"

namespace smol::topo {

struct AttentionRates {
    std::string name;        // "h100-sxm5"; the figures' sources are beside them (attention_rates.cpp)
    int sms = 0;             // the device's streaming multiprocessors (fill)
    static constexpr int kSeqs = 6;    // key lengths 512, 1k, 2k, 4k, 8k, 16k
    static constexpr int kDims = 3;    // head dimensions 64, 128, 256
    static constexpr int kBackends = 3;   // AttentionBackend: flash, fused, flash3
    /// TFLOP/s [backend][backward][causal][head dim][key length]; 0 where not measured.
    double tflops[kBackends][2][2][kDims][kSeqs] = {};

    /// Whether the table holds `backend`'s kernels (a device without them prices that backend on
    /// the GEMM curve).
    bool has(AttentionBackend backend) const { return tflops[static_cast<int>(backend)][0][0][0][0] > 0; }

    /// The rate of one kernel: `kv` keys per query (the window where one is smaller), head
    /// dimension `head_dim`, the fill excluded.
    FlopRate rate(AttentionBackend backend, bool backward, bool causal, double head_dim, double kv) const;
};

/// The built-in table called `name` ("h100-sxm5"), or nullptr.
const AttentionRates* attention_rates(const std::string& name);
/// The built-in tables' names, for error messages.
std::vector<std::string> attention_rate_names();

}  // namespace smol::topo
