// Pipeline schedules as data: for each pipeline device, the ordered list of steps it runs — a
// (micro-batch, model chunk, pass) triple — generated per schedule and testable on its own
// (Megatron-LM's schedules.py keeps the same table implicitly in its loops).
//
// Devices are pipeline stages 0..p−1. With v model chunks per device (interleaved), chunk c of
// device s is virtual stage c·p + s, so activations flow 0 → 1 → … → p·v − 1 and wrap from the
// last device back to the first between chunks.
//
//  gpipe        all forwards, then all backwards (Huang et al. 2019): m micro-batches in flight.
//  1f1b         PipeDream-flush (Narayanan et al. 2021 §2.2): device s runs p − s − 1 warm-up
//               forwards, then alternates one forward and one backward, then drains; at most p − s
//               micro-batches in flight.
//  interleaved  Megatron's interleaved 1F1B (Narayanan et al. 2021 §2.2.2), the loop of
//               forward_backward_pipelining_with_interleaving: (p − s − 1)·2 + (v − 1)·p warm-up
//               forwards over virtual micro-batches; m must be a multiple of p.
//  zb-h1        zero bubble H1 (Qi et al. 2023, Fig. 3): 1F1B's order of forwards and input
//               gradients (bwd_input), with the weight gradient (bwd_weight) of micro-batch k
//               deferred on device s until after the input gradient of micro-batch k + s, the
//               rest at the end: the deferred weight passes fill the drain bubble and the peak
//               stays at p micro-batches, as in 1F1B.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "strategies/plan.hpp"

namespace smol::strategies {

enum class Pass : std::uint8_t { fwd, bwd, bwd_input, bwd_weight };
const char* to_string(Pass p);

struct Step {
    int microbatch = 0;
    int chunk = 0;
    Pass pass = Pass::fwd;
    bool operator==(const Step&) const = default;
};

struct PipelineSchedule {
    Schedule kind = Schedule::one_f_one_b;
    int stages = 1;        // p: pipeline devices
    int microbatches = 1;  // m
    int chunks = 1;        // v: model chunks per device
    std::vector<std::vector<Step>> steps;   // per device, in execution order

    int virtual_stages() const { return stages * chunks; }
    int virtual_stage(int device, int chunk) const { return chunk * stages + device; }
    int device_of(int virtual_stage) const { return virtual_stage % stages; }
    int chunk_of(int virtual_stage) const { return virtual_stage / stages; }
    /// True when the backward is split into bwd_input and bwd_weight (zb-h1).
    bool split_backward() const { return kind == Schedule::zb_h1; }
};

/// The table for a schedule. Throws bad_input for impossible shapes (interleaved with m not a
/// multiple of p, or v < 2 with p < 2; v ≠ 1 for the others).
PipelineSchedule make_schedule(Schedule kind, int stages, int microbatches, int chunks = 1);

/// What a step waits for across devices, besides the step before it on its own device:
/// forward of virtual stage k needs the forward of k − 1; the backward (or bwd_input) of k needs
/// the forward of k and the backward (or bwd_input) of k + 1; bwd_weight needs bwd_input.
/// Each cross-device dependency is one send and its receive.
struct Transfer {
    int src_device, dst_device;
    int microbatch;
    int src_chunk, dst_chunk;
    bool gradient;   // false: activations (forward), true: input gradients (backward)
};
/// Every point-to-point transfer the schedule implies, in no particular order.
std::vector<Transfer> transfers(const PipelineSchedule& s);

/// When each step starts and ends if every step takes `duration(device, step)` and transfers are
/// free: each device runs its steps in table order, each step as soon as its dependencies are
/// done. Indexed like `steps`. Throws an internal Error naming the stuck steps if the table
/// deadlocks.
struct StepTime {
    double start = 0, end = 0;
};
std::vector<std::vector<StepTime>> run_schedule(const PipelineSchedule& s,
                                                const std::function<double(int device, const Step&)>& duration);

/// Micro-batches whose activations are held at once on `device` (alloc at forward, free after
/// the backward, or after bwd_weight when the backward is split), at worst over the table.
int peak_in_flight(const PipelineSchedule& s, int device);

}  // namespace smol::strategies
