#include "sim/compute.hpp"

#include <algorithm>
#include <cmath>

namespace smol::sim {

double gemm_efficiency(const topo::DeviceKind& device, const GemmShape* shape) {
    if (!shape || shape->m <= 0 || shape->n <= 0 || shape->k <= 0) return device.gemm_efficiency;
    const double d = std::cbrt(static_cast<double>(shape->m) * static_cast<double>(shape->n) * static_cast<double>(shape->k));
    return device.gemm_efficiency * d / (d + device.gemm_half_dim);
}

Time compute_time(const Op& op, const GemmShape* shape, const topo::NodeGroup& group) {
    const topo::DeviceKind& dev = group.device;
    const Flops flops(op.flops);
    const Bytes traffic(op.bytes);
    Time t;
    if (op.on_host()) {
        // The optimizer step on the host is bound by DRAM bandwidth (Adam reads and writes ~16
        // bytes per parameter for a few FLOPs each).
        t = traffic / (group.host_memory_bandwidth * dev.memory_efficiency);
    } else {
        const FlopRate peak = dev.peak_for(op.dtype());
        const Time memory = traffic / (dev.memory_bandwidth * dev.memory_efficiency);
        switch (op.kernel()) {
            case KernelClass::gemm:
            case KernelClass::attention:
                t = flops / (peak * gemm_efficiency(dev, shape)) + memory;
                break;
            case KernelClass::elementwise:
            case KernelClass::optimizer:
                t = std::max(flops / peak, memory);
                break;
        }
    }
    return t + dev.launch_overhead;
}

}  // namespace smol::sim
