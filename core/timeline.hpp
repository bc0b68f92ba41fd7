// The Timeline: what happened when. Both backends fill it — the simulator from its clock, a real
// executor from CUDA events or wall clocks — so one writer exports both traces and one comparer
// lines them up op by op. It lives in core/ because sim/ and exec/ both produce it; traces/
// owns what is done with it (Chrome trace, summary, comparison).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "core/units.hpp"

namespace smol {

/// What one tier of a device held at an instant: the graph's buffers by BufferLabel, and what
/// the runtime keeps for itself (simulator: CUDA context, NCCL buffers, the caching allocator's
/// rounding — sim/memory.hpp).
struct MemoryBreakdown {
    std::array<Bytes, kBufferLabels> labels{};
    Bytes cuda_context, nccl, allocator;
    Bytes runtime() const { return cuda_context + nccl + allocator; }
    Bytes total() const {
        Bytes t = runtime();
        for (Bytes b : labels) t += b;
        return t;
    }
};

/// The first allocation that did not fit.
struct OutOfMemory {
    int rank = 0;
    std::string device;     // "node0/gpu3"
    Tier tier = Tier::device;
    OpId op = 0;
    Bytes requested;
    Bytes free;
};

struct MemorySample {
    std::int32_t rank;
    Tier tier;
    Time time;
    Bytes in_use;
};

/// Utilisation of one link (0..1) from `time` until the next sample of that link.
struct LinkSample {
    std::int32_t link;
    Time time;
    float utilisation;
};

struct Timeline {
    // Per op, indexed by OpId: when it started and ended. Ops never run have start = end = -1 ps.
    std::vector<Time> start;
    std::vector<Time> end;

    std::vector<std::string> device_names;        // per rank: "node1/gpu3"
    std::vector<std::array<Bytes, kTiers>> peak;  // per rank, per tier
    std::vector<std::array<Bytes, kTiers>> capacity;  // per rank, per tier (0: tier absent)
    std::vector<MemorySample> memory;             // every change, in time order
    std::vector<std::string> link_names;          // simulator only
    std::vector<LinkSample> links;                // simulator only, in time order
    std::optional<OutOfMemory> oom;
    /// Per rank, per tier (optional; the simulator fills it): the contents when the tier peaked.
    std::vector<std::array<MemoryBreakdown, kTiers>> peak_breakdown;
    /// Per op, optional (empty unless the backend was asked to record it): the time a compute op
    /// spent in kernels of each class (KernelClass: gemm, attention, elementwise, optimizer),
    /// each kernel's dispatch included. Zero for other ops. A validation compares these class
    /// by class: the executor times every kernel, the simulator splits its price by kernel.
    std::vector<std::array<Time, kKernelClasses>> kernel_class_time;

    Time makespan;
    std::uint64_t events = 0;    // events the backend processed
    double wall_s = 0;           // how long the backend itself took

    void resize(std::size_t ops, int ranks) {
        start.assign(ops, Time::ps(-1));
        end.assign(ops, Time::ps(-1));
        peak.assign(ranks, {});
        capacity.assign(ranks, {});
        device_names.resize(ranks);
    }
    Time duration(OpId id) const { return end[id] - start[id]; }
};

}  // namespace smol
