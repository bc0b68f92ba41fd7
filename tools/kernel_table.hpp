// `simulate --kernels FILE`: every kernel of a step's compute ops as the simulator prices it, so
// a user sees where a layer's time goes (which GEMM, which memory-bound pass, which gaps the host
// leaves) instead of the op totals a trace shows.
#pragma once

#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "topologies/cluster.hpp"

namespace smol::tools {

/// CSV, one row per kernel of each compute op of `ranks` that belongs to micro-batch 0 or to no
/// micro-batch (the optimizer step): rank, device, where it runs (device, or host for an
/// offloaded step), op id, phase, layer (the op's block index: 0 the embedding), micro-batch,
/// kernel name, class, kind (gemm, flash, softmax, stream, adam), shape (m, n, k, batch; gemm and
/// flash), elements (adam), FLOPs, bytes, start_s (from the op's start), run_s, the achieved
/// FLOP/s and bytes/s, and op_s, the op's priced duration alone (sim::kernel_schedule: before
/// --slow, --jitter, communication slowing it, and a node's host steps sharing its DRAM). Ops
/// without a kernel list are left out. Rows in op order, kernels in run order; a rank a folded
/// graph mirrors shows its representative's ops (the op ids are the representative's).
std::string kernel_table_csv(const OpGraph& graph, const topo::Cluster& cluster, const std::vector<int>& ranks);

}  // namespace smol::tools
