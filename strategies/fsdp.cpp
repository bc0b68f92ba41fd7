#include "strategies/fsdp.hpp"

#include "strategies/zero.hpp"

namespace smol::strategies {

OpGraph build_fsdp(const Model& model, const Layout& layout, const Plan& plan) {
    ShardedOptions o;
    switch (plan.fsdp_sharding) {
        case FsdpSharding::full: break;
        case FsdpSharding::grad_op: o.reshard_after_forward = false; break;
        case FsdpSharding::hybrid: o.shard_group = layout.shard_group; break;
        case FsdpSharding::none: o.shard_params = false; break;
    }
    return build_sharded(model, layout, plan, o);
}

namespace detail {

bool fsdp_reshards_after_forward(const Block& b, bool reshard) {
    return reshard && b.kind != Block::Kind::embedding && b.kind != Block::Kind::head;
}

void fsdp_forward_order(const FsdpHooks& h) {
    for (int i = 0; i < h.units; ++i) {
        h.gather(i, Phase::fwd, -1);
        if (i > 0 && h.resharded(i - 1)) h.release(i - 1, Phase::fwd);
    }
    if (h.units > 0 && h.resharded(h.units - 1)) h.release(h.units - 1, Phase::fwd);
}

void fsdp_backward_order(const FsdpHooks& h, FsdpBackwardPrefetch prefetch) {
    // Unit j's gather against the unit whose backward runs before it, j + 1 (the loop's j = −1
    // finishes unit 0).
    for (int j = h.units - 1; j >= -1; --j) {
        const bool regather = j >= 0 && h.resharded(j), prev = j + 1 < h.units;
        switch (prefetch) {
            case FsdpBackwardPrefetch::pre:
                if (regather) h.gather(j, Phase::bwd, -1);
                if (prev) h.release(j + 1, Phase::bwd);
                if (prev) h.reduce(j + 1);
                break;
            case FsdpBackwardPrefetch::post:
                if (prev) h.release(j + 1, Phase::bwd);
                if (regather) h.gather(j, Phase::bwd, prev ? j + 1 : -1);
                if (prev) h.reduce(j + 1);
                break;
            case FsdpBackwardPrefetch::none:
                if (prev) h.release(j + 1, Phase::bwd);
                if (prev) h.reduce(j + 1);
                if (regather) h.gather(j, Phase::bwd, prev ? j + 1 : -1);
                break;
        }
    }
}

}  // namespace detail

}  // namespace smol::strategies
