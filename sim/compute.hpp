// The compute cost model: a roofline with a shape-dependent GEMM efficiency.
//
//   GEMM-class op:  t = FLOPs / (peak(dtype) · e(shape)) + traffic / (memory bandwidth · e_mem) + launch
//   memory-bound:   t = max(FLOPs / peak, traffic / (memory bandwidth · e_mem)) + launch
//
// A GEMM-class op's traffic is that of the memory-bound kernels (norms, softmax, activations,
// residual adds) that run between its matrix products, so the two terms add rather than overlap.
// e(shape) = e_max · d / (d + d_half), d = (m·n·k)^(1/3): small GEMMs run far below peak,
// large ones approach the device's e_max. Host ops (offloaded optimizer steps) run on the node's
// CPU at the host memory bandwidth.
#pragma once

#include "core/op_graph.hpp"
#include "topologies/cluster.hpp"

namespace smol::sim {

/// Efficiency of a GEMM of the given shape on `device` (0 < e ≤ gemm_efficiency).
double gemm_efficiency(const topo::DeviceKind& device, const GemmShape* shape);
/// Duration of a compute op on the group's device, with nothing else running on it.
Time compute_time(const Op& op, const GemmShape* shape, const topo::NodeGroup& group);

}  // namespace smol::sim
