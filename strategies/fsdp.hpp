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
// DeepSpeed's ZeRO engines there). With context parallelism (and no pipeline stages) the
// model-parallel builder runs the same per-micro-batch order (detail::FsdpHooks) over its
// context-parallel passes, and with expert parallelism over its MoE passes, each MoE layer's
// local experts gathered and reduce-scattered over their expert-data-parallel group (torchtitan's
// FSDP + EP, strategies/moe.hpp); under pipeline stages each stage gathers once per step instead
// (strategies/model_parallel.cpp fsdp_gather).
#pragma once

#include <functional>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

OpGraph build_fsdp(const Model& model, const Layout& layout, const Plan& plan);

namespace detail {

/// What FSDP's hooks issue for one micro-batch over `units` wrapped units (0 … units − 1 in
/// forward order), in issue order — the order of the collectives on every rank's communicator;
/// the forward's after the micro-batch's forward is emitted, the backward's after its backward:
///   gather(i, phase, after): all-gather unit i's parameters before its forward (phase fwd) or
///     its recompute and backward (bwd); `after` ≥ 0: issued only once unit `after`'s backward
///     has ended (the hook that issues it runs then), −1: as soon as the stream reaches it;
///   release(i, phase): free unit i's gathered parameters after its forward or backward;
///   reduce(i): reduce-scatter unit i's gradient after its backward (and free that gradient).
/// Forward: unit i's gather is issued while unit i − 1 computes (forward prefetch) and unit i − 1
/// released after it, so at most two units are gathered (the all-gather rate limiter). Units that
/// `resharded` says no to (the root's: the embedding and the head, which FSDP does not reshard
/// after forward, torch/distributed/fsdp/_runtime_utils.py _post_forward_reshard; every unit of
/// SHARD_GRAD_OP) keep their parameters until their backward and are not gathered again. Backward
/// (--fsdp-backward-prefetch, _runtime_utils.py _prefetch_handle): BACKWARD_PRE issues unit j's
/// gather in unit j + 1's pre-backward hook, before j + 1's reduce-scatter, so it overlaps j + 1's
/// gradients; BACKWARD_POST in j + 1's post-backward hook, once j + 1 is resharded and before its
/// reduce-scatter; none: j's own pre-backward hook, after j + 1's reduce-scatter, behind which it
/// waits (one communicator runs its collectives in issue order).
struct FsdpHooks {
    int units = 0;
    std::function<bool(int)> resharded;
    std::function<void(int, Phase, int)> gather;
    std::function<void(int, Phase)> release;
    std::function<void(int)> reduce;
};
void fsdp_forward_order(const FsdpHooks& h);
/// Whether FSDP reshards unit `b` after its forward (FsdpHooks::resharded): with `reshard`
/// (FULL_SHARD, HYBRID_SHARD), every unit but the root's, the embedding and the head.
bool fsdp_reshards_after_forward(const Block& b, bool reshard);
void fsdp_backward_order(const FsdpHooks& h, FsdpBackwardPrefetch prefetch);

}  // namespace detail

}  // namespace smol::strategies
