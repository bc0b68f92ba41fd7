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

}  // namespace smol::strategies
