// PyTorch FSDP (Zhao et al. 2023), one flat parameter per wrapped unit (each block: a transformer
// block, the embedding and the head; each layer of a layer list), --fsdp-sharding:
//
//   full     FULL_SHARD: parameters, gradients and optimizer states sharded over dp; a unit's
//            flat parameter is all-gathered before its forward (forward prefetch of the next
//            unit, at most two in flight: the all-gather rate limiter), resharded after forward,
//            all-gathered again before its backward (backward prefetch: issued before the
//            previous unit's reduce-scatter, --fsdp-backward-prefetch), and its gradient
//            reduce-scattered after backward. The root's units (the embedding and the head) are
//            not resharded after forward (_post_forward_reshard), so not gathered again.
//            Moves 3Ψ·(N−1)/N per device per step, like ZeRO-3, less the root's second gather.
//   grad-op  SHARD_GRAD_OP: no reshard after forward, so no all-gather in backward (2Ψ).
//   hybrid   HYBRID_SHARD: full sharding inside a shard group of consecutive ranks (a node by
//            default, --fsdp-group), replication across groups: after the in-group
//            reduce-scatter, each shard is all-reduced with the same shard of the other groups.
//            Only that all-reduce crosses nodes.
//   none     NO_SHARD: DDP-like, one all-reduce per unit in the last micro-batch.
//
// The engine: strategies/zero.hpp build_sharded (its replicas of tensor-parallel ranks shared with
// DeepSpeed's ZeRO engines there).
#pragma once

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

OpGraph build_fsdp(const Model& model, const Layout& layout, const Plan& plan);

}  // namespace smol::strategies
