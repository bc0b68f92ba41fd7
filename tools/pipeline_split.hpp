// Pipeline stages on mixed clusters: layers per stage chosen by each stage's own devices.
//
// On a cluster of one device kind a stage's time is proportional to its FLOPs, and
// --partition balanced (strategies/model_parallel.cpp) evens those. When the stages sit on
// different device kinds (Jetson AGX Orin boards beside RTX 4090s), even FLOPs leave the fast
// stages idle; the speed split evens each stage's *time* instead: the layers' forward, backward
// and recompute kernels priced by the simulator's own compute model (sim::compute_time) on the
// stage's devices (the slowest of them where a stage spans kinds), so every rate, efficiency
// curve and launch cost is the one the simulation uses — and any per-device factor it applies.
//
// Memory: a stage may not take more layers than its devices hold. Per virtual stage, its model
// states (16-bit parameters and gradients plus the optimizer's state, zero1 sharded over dp) and
// its activations times the micro-batches the schedule table keeps in flight for that chunk
// (strategies/schedule.hpp) must fit the smallest memory of its devices, divided among a
// device's chunks when interleaved. When no split fits, the fastest split is returned anyway and
// the simulation reports the out-of-memory.
#pragma once

#include <vector>

#include "core/model.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

namespace smol::tools {

/// Whether the pipeline stages of a resolved plan (pp > 1) sit on more than one device kind, or on
/// devices of different speeds (a group's speed, --slow).
bool stages_on_mixed_devices(const topo::Cluster& cluster, const strategies::Layout& layout);

/// Layers per virtual stage (pp × virtual stages entries) evening each stage's time on its own
/// devices, within their memory where a split fits (see the file comment).
std::vector<int> speed_balanced_layers(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                                       const strategies::Layout& layout);

/// The plan as it is built: with --partition speed, or no --partition on stages of different
/// device kinds, and no --stage-layers, its stage_layers from speed_balanced_layers. Any other
/// plan unchanged.
strategies::Plan with_pipeline_split(const Model& model, const topo::Cluster& cluster, strategies::Plan plan);

}  // namespace smol::tools
