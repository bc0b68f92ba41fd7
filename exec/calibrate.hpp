// Calibration: micro-benchmarks of the machine, run as op graphs through the executor itself (the
// runner and the CPU backend: the same threads, kernels, workspaces, MPI calls and polling that
// `run` uses), so a profile measures exactly what a run executes. Every rank runs the same
// benchmarks at the same time, as every rank of a run computes at once (the ranks of a host
// share its memory bandwidth and caches).
//
//   compute   GEMM FLOP/s on a grid of m × n × k; streaming-pass bandwidth, softmax and Adam
//             throughput over sizes; flash attention forward and backward; register arithmetic;
//             the dispatch cost of a kernel (an op of a thousand kernels that do nothing);
//   network   every collective over message sizes (1 KiB to 256 MiB; --quick fewer) on every
//             available group size (2, 4, …, the world; one rank per host as well across hosts),
//             and point to point within a host and between hosts, timed from the last member's
//             arrival to completion;
//   memory    memcpy between tiers and file I/O in the scratch directory (the NVMe tier);
//   overlap   how much slower GEMMs run while all-reduces run on the comm stream (comm_slowdown).
// Each figure is the median of several repetitions after a warm-up repetition; the compute
// figures are the fastest of three rounds of those medians (two with --quick), run one after
// another, so a shape timed while something else held a core is timed again seconds later.
// With `cuda`, the GPU's figures instead (exec/cuda/measure.hpp), as a GPU's profile
// (topologies/profile.hpp, format 3).
#pragma once

#include <ostream>
#include <string>

#include "exec/executor.hpp"
#include "topologies/profile.hpp"

namespace smol::exec {

struct CalibrateOptions {
    bool quick = false;          // fewer shapes and sizes (CI, a first look)
    /// Measure each rank's GPU and NCCL instead (exec/cuda/measure.hpp: cuBLASLt GEMMs per dtype,
    /// the CUDA backend's kernels, pinned copies, NCCL over every group size): a GPU's profile.
    bool cuda = false;
    std::string scratch;         // directory for the file I/O benchmark; empty: the temporary directory
};

/// Runs every benchmark on every rank; returns the profile on rank 0 (an empty one elsewhere).
/// `progress` gets one line per section on rank 0.
topo::Profile calibrate(Session& session, const CalibrateOptions& options, std::ostream& progress);

}  // namespace smol::exec
