// Figures measured on a machine (smolcluster calibrate), attached to a cluster's device kinds and
// network by a profile (profile.hpp), and read by the simulator in place of datasheet leads.
//
// Rates are tables, not fits: a CPU GEMM's speed depends on each of m, n and k (OpenBLAS packs
// panels of k, runs edge kernels on ragged m and n, and is memory-bound when k is small), which a
// one-parameter efficiency curve e·d/(d + d½) of d = (m·n·k)^⅓ cannot follow — a 4096×4096×16
// product and a 256³ one have the same d and run at very different speeds. So the profile keeps
// what was measured on a grid, and the simulator interpolates between grid points in log space
// (sizes and rates both vary over orders of magnitude; log-log interpolation is exact for power
// laws and for the constant rate a large kernel settles at), holding the end values beyond the
// grid (rates saturate).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "core/units.hpp"

namespace smol::topo {

/// y(x) measured at increasing x > 0 (y > 0), interpolated piecewise linearly in (log x, log y).
struct Curve {
    std::vector<double> x, y;

    bool empty() const { return x.empty(); }
    /// A rate at x: interpolated inside, the end values beyond the ends.
    double rate_at(double x) const;
    /// A duration at x (x bytes, y seconds): interpolated inside; below the first point its time
    /// (a latency floor); beyond the last, that point's time scaled by x / x_last (its bandwidth).
    double time_at(double x) const;
};

/// A rate measured on a grid of three sizes (GEMM m × n × k; flash attention q × kv × d): the
/// rate of grid point (i, j, l) is rate[(i·n.size() + j)·k.size() + l]. Interpolated trilinearly in
/// log sizes of log rates, clamped to the grid.
struct ShapeTable {
    std::vector<double> m, n, k;
    std::vector<double> rate;

    bool empty() const { return rate.empty(); }
    double at(double m, double n, double k) const;
};

/// What one rank of a host computes at, measured through the executor's own kernels: the CPU
/// executor's, every table in fp32; or a GPU's (`calibrate --backend cuda`): cuBLASLt GEMMs per
/// dtype, the CUDA backend's flash attention and softmax on 16-bit elements, its streaming pass and
/// fused Adam.
/// Rows of a head one thread block of the CUDA backend's flash kernel takes (16 rows × 4 warps:
/// exec/cuda/plan.cpp), queries forward and keys backward: calibrate gives its flash timings two
/// such tiles per SM or more, and the simulator prices a kernel of fewer tiles than SMs at its
/// share of the table's rate (sim/compute.cpp).
inline constexpr int kFlashTileRows = 64;

struct MeasuredCompute {
    /// The GPU measured ("NVIDIA H200 (compute capability 9.0, 132 SMs, …)"); empty for a CPU.
    std::string gpu;
    /// Its streaming multiprocessors: the flash tables were timed with two tiles of
    /// kFlashTileRows or more per SM, so a kernel of fewer tiles runs at its share,
    /// min(1, tiles / sms) (sim/compute.cpp).
    int sms = 0;
    ShapeTable gemm;          // FLOP/s of one m×n×k product in fp32 (a GPU's without TF32; a
                              // batched GEMM runs them one by one on a CPU)
    ShapeTable gemm_bf16;     // a GPU's bf16 and fp16 products (empty for a CPU)
    ShapeTable gemm_fp16;
    ShapeTable flash_fwd;     // FLOP/s of one head of FlashAttention-2 forward, q × kv × head dim
    ShapeTable flash_bwd;     // and backward
    /// The same under the causal mask, FLOP/s of the pairs it computes (causal_pairs): the tiles
    /// across the diagonal run whole and masked, so a short sequence's useful rate is lower.
    ShapeTable flash_fwd_causal;
    ShapeTable flash_bwd_causal;
    Curve stream;             // bytes moved (read + written) → bytes/s of a streaming pass
    Curve softmax;            // elements → elements/s
    Curve adam;               // parameters → parameters/s
    double arithmetic = 0;    // FLOP/s of register-resident vector arithmetic (a memory-free pass); 0: not measured (a GPU)
    Time dispatch;            // per kernel: the executor's dispatch around a kernel that does nothing (a GPU: its launch)
    double comm_slowdown = 1; // compute time while a collective runs on the rank ÷ alone; 0: not measured (a GPU)

    bool on_gpu() const { return !gpu.empty(); }
    /// The GEMM table of a product of `elem_bytes`-byte elements in a run of `dtype` (a CPU's fp32
    /// table whatever they are; a GPU's by dtype: fp32, bf16 or fp16), or null.
    const ShapeTable* gemm_table(DType dtype, int elem_bytes) const;
};

/// A collective (or, with `p2p`, a point-to-point transfer) timed over message sizes on `ranks`
/// ranks spanning `nodes` hosts: bytes (the graph's size convention) → seconds, from the last
/// member's arrival to completion.
struct MeasuredTransfer {
    bool p2p = false;
    CollectiveKind kind = CollectiveKind::all_reduce;
    int ranks = 2;
    int nodes = 1;
    Curve time;
};

struct MeasuredNetwork {
    std::vector<MeasuredTransfer> transfers;

    /// The curve for a collective of `kind` over `ranks` ranks on `nodes` hosts, if measured.
    const MeasuredTransfer* collective(CollectiveKind kind, int ranks, int nodes) const;
    /// The curve for a point-to-point transfer within one host (nodes 1) or between two (nodes 2).
    const MeasuredTransfer* p2p(int nodes) const;
};

}  // namespace smol::topo
