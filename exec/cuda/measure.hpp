// GPU calibration: micro-benchmarks of what the CUDA backend runs — its cuBLASLt matmuls, its own
// kernels, its copies and NCCL — each timed with CUDA events immediately around one launch (the
// device fed ahead, so the host's launch latency is not in the figure), the median of
// `repeats` after a warm-up. Plain figures in a plain struct: exec/cuda/README.md says how they
// map onto the profile format (topologies/profile.hpp) that `calibrate` writes.
//
//   gemm       FLOP/s of C[m×n] = A[m×k]·B[k×n] over a grid of m, n, k, per dtype (bf16, fp16,
//              fp32; fp32 on TF32 tensor cores too where the device has them)
//   stream     bytes moved (read + written) → seconds of the memory-bound pass: HBM bandwidth
//   softmax    rows × columns → seconds (bf16, forward)
//   flash      FLOP/s of flash attention forward and backward over queries = keys × head dim,
//              without a mask and under the causal one
//   adam       parameters → seconds of the fused Adam
//   launch     the interval between back-to-back launches of an empty kernel issued from the
//              host: what each kernel of a recipe costs beyond its own work
//   h2d, d2h   bytes → seconds of cudaMemcpyAsync between pinned host memory and the device
//   nccl       every collective over message sizes on 2, 4, … ranks (each a GPU), from a barrier
//              to the slowest member's end
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "core/units.hpp"
#include "topologies/profile.hpp"

namespace smol::exec {
class Session;
}

namespace smol::exec::cuda {

struct MeasureOptions {
    bool quick = false;     // a smaller grid and fewer sizes (CI-sized: seconds)
    int repeats = 5;        // timed launches per figure (the median is kept)
};

struct GemmRate {
    DType dtype = DType::bf16;
    bool tf32 = false;
    std::int64_t m = 0, n = 0, k = 0;
    double flops_per_s = 0;
};
struct FlashRate {
    bool backward = false;
    bool causal = false;   // under the causal mask: FLOPs of the pairs computed (core/kernel.hpp causal_pairs)
    std::int64_t heads = 0, q = 0, kv = 0, d = 0;
    double flops_per_s = 0;
};
/// `size` (bytes, elements or parameters, as the figure says) → seconds.
struct SizeTime {
    std::int64_t size = 0;
    double seconds = 0;
};
struct NcclTime {
    CollectiveKind kind = CollectiveKind::all_reduce;
    int ranks = 2;
    std::int64_t bytes = 0;   // the graph's size convention (plan.hpp collective_floats)
    double seconds = 0;
};

struct GpuFigures {
    std::string device;                      // device_description
    int sms = 0;                             // streaming multiprocessors (the flash tables' full occupancy)
    std::vector<std::int64_t> gemm_dims;     // the grid of each of m, n, k
    std::vector<GemmRate> gemm;              // per dtype (and TF32), m, n, k in grid order, k fastest
    std::vector<SizeTime> stream;            // bytes moved → s
    std::vector<SizeTime> softmax;           // elements → s
    std::vector<FlashRate> flash;
    std::vector<SizeTime> adam;              // parameters → s
    Time launch;
    std::vector<SizeTime> h2d, d2h;          // bytes → s
    std::vector<NcclTime> nccl;              // rank 0's figures (empty with one rank)
};

/// Every figure but NCCL's, on the GPU this process would run on (`device`).
GpuFigures measure_device(int device, const MeasureOptions& options);
/// NCCL collectives on groups of 2, 4, … up to every rank of the session (each rank one GPU, its
/// local rank's); every rank calls it; rank 0 gets the figures.
std::vector<NcclTime> measure_nccl(Session& session, int device, const MeasureOptions& options);

/// The figures as one JSON object (sizes and seconds as arrays).
Json to_json(const GpuFigures& f);

/// measure_device on rank 0's GPU (each rank's is its local rank's) and measure_nccl over every
/// rank: `smolcluster calibrate --backend cuda`. Every rank calls it; rank 0 gets the figures.
/// In a build without the CUDA backend: bad_input saying so (exec/cuda_unavailable.cpp).
GpuFigures measure_session(Session& session, const MeasureOptions& options);

/// The figures as a GPU's profile (topologies/profile.hpp, format 3): `p` arrives with
/// measured_on filled (its ranks_per_node places each NCCL group's ranks on hosts) and leaves
/// with the GPU's compute tables, host link and collective curves; no memory section. The TF32
/// GEMMs have no place in a profile and are left out. Pure (no GPU): exec/cuda/profile.cpp.
void fill_profile(const GpuFigures& f, topo::Profile& p);

/// Median of `v` (empty: 0).
double median(std::vector<double> v);

}  // namespace smol::exec::cuda
