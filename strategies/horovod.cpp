#include "strategies/horovod.hpp"

#include "strategies/data_parallel.hpp"

namespace smol::strategies {

OpGraph build_horovod(const Model& model, const Layout& layout, const Plan& plan) {
    // Tensor fusion: buffers of at most fusion-mb from the first gradient on; each launches on
    // the first cycle tick after it fills.
    const Bytes fusion = Bytes::mib(plan.fusion_mb);
    return detail::build_replicated(model, layout, plan, fusion, fusion, Time::ms(plan.cycle_ms));
}

}  // namespace smol::strategies
