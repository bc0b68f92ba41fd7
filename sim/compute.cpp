#include "sim/compute.hpp"

#include <algorithm>
#include <cmath>

namespace smol::sim {

namespace {

/// FLOP rate of the vector units that run memory-bound kernels: the fp32 rate where the device
/// has one, else the plan's dtype.
FlopRate vector_peak(const topo::DeviceKind& dev, DType dtype) {
    return dev.supports(DType::fp32) ? dev.peak_for(DType::fp32) : dev.peak_for(dtype);
}

Time memory_time(Bytes bytes, const topo::DeviceKind& dev) { return bytes / (dev.memory_bandwidth * dev.memory_efficiency); }

/// A pass on the host CPU, alone: its DRAM traffic at the host's streaming rate, or its FLOPs on
/// all the cores, whichever is longer.
Time host_time(Bytes bytes, Flops flops, const topo::NodeGroup& group) {
    const Time memory = bytes / (group.host_memory_bandwidth * group.host_memory_efficiency);
    return group.host_peak ? std::max(memory, flops / *group.host_peak) : memory;
}

}  // namespace

double gemm_efficiency(const topo::DeviceKind& device, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return device.gemm_efficiency;
    const double d = std::cbrt(static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k));
    return device.gemm_efficiency * d / (d + device.gemm_half_dim);
}

Time kernel_time(const Kernel& kernel, DType dtype, bool on_host, const topo::NodeGroup& group) {
    const topo::DeviceKind& dev = group.device;
    const Bytes bytes(kernel.bytes);
    if (on_host) return host_time(bytes, Flops(kernel.flops), group);
    const Flops flops(kernel.flops);
    switch (kernel.op) {
        case KernelOp::gemm:
        case KernelOp::flash:
            return std::max(flops / (dev.peak_for(dtype) * gemm_efficiency(dev, kernel.m, kernel.n, kernel.k, kernel.batch)),
                            memory_time(bytes, dev));
        case KernelOp::softmax:
        case KernelOp::stream:
        case KernelOp::adam:
            return std::max(flops / vector_peak(dev, dtype), memory_time(bytes, dev));
    }
    return Time::zero();
}

Time compute_time(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group) {
    const topo::DeviceKind& dev = group.device;
    if (op.ref < 0) {
        // No kernel list: the op's totals as one kernel of its class (synthetic graphs).
        const Bytes traffic(op.bytes);
        const Flops flops(op.flops);
        Time t;
        if (op.on_host())
            t = host_time(traffic, flops, group);
        else if (op.kernel() == KernelClass::gemm || op.kernel() == KernelClass::attention)
            t = flops / (dev.peak_for(op.dtype()) * dev.gemm_efficiency) + memory_time(traffic, dev);
        else
            t = std::max(flops / dev.peak_for(op.dtype()), memory_time(traffic, dev));
        return t + dev.launch_overhead;
    }
    if (kernels.empty()) return Time::zero();
    const Time launch = dev.launch_overhead;
    if (dev.is_cpu || op.on_host()) {
        Time t;
        for (const Kernel& k : kernels) t += launch + kernel_time(k, op.dtype(), op.on_host(), group);
        return t;
    }
    // The host issues kernel i at i·launch; the device runs each when issued and free.
    Time device_free;
    for (std::size_t i = 0; i < kernels.size(); ++i)
        device_free = std::max(device_free, launch * static_cast<std::int64_t>(i)) + kernel_time(kernels[i], op.dtype(), false, group);
    return std::max(device_free, launch * static_cast<std::int64_t>(kernels.size()));
}

}  // namespace smol::sim
