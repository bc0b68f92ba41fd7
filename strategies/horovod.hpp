// Horovod ring all-reduce (Sergeev & Del Balso 2018).
//
// A background thread wakes every cycle (HOROVOD_CYCLE_TIME, 5 ms; --cycle-ms), negotiates which
// gradients every rank has ready, packs them into the tensor fusion buffer (HOROVOD_FUSION_THRESHOLD,
// 64 MB; --fusion-mb) and all-reduces each fused buffer with NCCL's ring, while backward runs on.
//
// In the graph: gradients are fused in the order backward produces them (reverse block order)
// into buffers of at most fusion-mb. Each fused buffer has a timer on the replica's host thread
// that waits for the first cycle tick after the buffer's last gradient is ready; its all-reduce
// (comm stream) waits for that tick. Buffers that fill within one cycle share the tick and go out
// back to back, as one negotiation round launches them all. Gradient accumulation
// (backward_passes_per_step) all-reduces in the last micro-batch only.
#pragma once

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

OpGraph build_horovod(const Model& model, const Layout& layout, const Plan& plan);

}  // namespace smol::strategies
