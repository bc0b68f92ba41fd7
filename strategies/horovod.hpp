// Horovod ring all-reduce (Sergeev & Del Balso 2018).
//
// A background thread wakes every cycle (HOROVOD_CYCLE_TIME, 5 ms; --cycle-ms), negotiates which
// gradients every rank has ready, packs them into the tensor fusion buffer (HOROVOD_FUSION_THRESHOLD,
// 64 MB; --fusion-mb) and all-reduces each fused buffer with NCCL's ring, while backward runs on.
//
// In the graph: gradients are fused in the order backward produces them (reverse block order)
// into buffers of at most fusion-mb; on each replica's comm stream every fused all-reduce is
// preceded by a negotiation wait of one cycle, so fused all-reduce k starts at
//     max(its last gradient ready, end of all-reduce k−1 + cycle)
// — the background thread sleeps a cycle between rounds, and a buffer's gradients must all exist.
// Gradient accumulation (backward_passes_per_step) all-reduces in the last micro-batch only.
//
// The wait is a host-side op lasting exactly the cycle time (a compute op on the host CPU whose
// DRAM traffic is sized from the cluster's host bandwidth). It stands in until the op graph has
// a fixed-duration op; it is why this builder reads the cluster.
#pragma once

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

namespace smol::strategies {

OpGraph build_horovod(const Model& model, const topo::Cluster& cluster, const Layout& layout, const Plan& plan);

/// A host op on `rank` that the simulator's roofline prices at `wait` (host DRAM-bound
/// elementwise op: launch overhead + traffic / (host bandwidth × memory efficiency)).
OpId add_wait(OpGraph& g, const topo::Cluster& cluster, int rank, Time wait, Stream stream, DType dtype, int index);

}  // namespace smol::strategies
