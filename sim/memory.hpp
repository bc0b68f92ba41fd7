// The memory model: what each device and tier holds over the step, so "fits" means fits.
//
// Every Alloc and Free of the graph changes the tier's use; host allocations on unified memory
// (Jetson, CPU boards) come out of the device's one pool. On a GPU the tier starts with what the
// runtime keeps for itself, and every allocation is rounded as the caching allocator rounds it:
//
//  * CUDA context and kernel images: 1,343 MiB, measured by Hugging Face on a V100 with CUDA 11.2
//    after loading the first tensor (transformers docs, model_memory_anatomy.md: "the kernels
//    alone take up 1.3GB of GPU memory"). Lazy module loading (CUDA_MODULE_LOADING=LAZY) loads
//    less; a calibration profile measures the real figure.
//  * NCCL's buffers: for every communicator of two or more GPUs the rank joins, NCCL's channels
//    (twice the ring graph's, connect.cc:460; the tuner's channel search, sim/nccl_tuner.hpp) each
//    hold one receive connection's buffers for the three protocols: LL 8 lines × 512 threads × 8
//    steps × 16 B = 512 KiB, LL128 120 × 640 × 8 × 8 B = 4.69 MiB, Simple NCCL_BUFFSIZE 4 MiB
//    (src/init.cc DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE, DEFAULT_BUFFSIZE; src/include/
//    device.h) — 9,633,792 B a channel.
//  * The caching allocator's rounding (c10/cuda/CUDACachingAllocator.cpp round_size and
//    get_allocation_size, constants in c10/core/AllocatorConfig.h): a request is rounded up to a
//    multiple of 512 B (kMinBlockSize); one of 10 MiB (kMinLargeAlloc) or more gets a segment of
//    its own rounded up to a multiple of 2 MiB (kRoundLarge).
//
// The first allocation that does not fit is the out-of-memory result (the run goes on, so the
// summary shows the whole step's need); each tier's contents at its peak are kept by label.
#pragma once

#include <array>
#include <vector>

#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "sim/collectives.hpp"
#include "topologies/cluster.hpp"

namespace smol::sim {

constexpr std::int64_t kCudaContextBytes = 1343ll << 20;
constexpr std::int64_t kNcclBytesPerChannel = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + (1 << 22);

/// What the runtime keeps on each rank's device before the step's first allocation (zero on CPUs).
std::vector<MemoryBreakdown> runtime_reserve(const OpGraph& graph, const topo::Cluster& cluster, const CollectiveContext& ctx);
/// The bytes PyTorch's caching allocator hands out for a request of `bytes`.
std::int64_t allocator_size(std::int64_t bytes);

class MemoryModel {
public:
    /// Sets the timeline's capacities and the GPUs' runtime reserve.
    MemoryModel(const OpGraph& graph, const topo::Cluster& cluster, const CollectiveContext& ctx, Timeline& timeline,
                bool record);
    /// An alloc or free op at `now`.
    void apply(OpId id, const Op& op, Time now);
    /// A folded graph's mirror ranks hold what their representatives hold.
    void copy_mirrors();

private:
    struct Use {
        Bytes total;
        MemoryBreakdown parts;
    };
    const OpGraph& graph_;
    const topo::Cluster& cluster_;
    Timeline& tl_;
    bool record_;
    std::vector<std::array<Use, kTiers>> use_;   // per rank, per tier
    std::vector<bool> gpu_, unified_;
};

}  // namespace smol::sim
