#include "sim/compute.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace smol::sim {

namespace {

/// FLOP rate of the vector units that run memory-bound kernels: the fp32 rate where the device
/// has one, else the plan's dtype.
FlopRate vector_peak(const topo::DeviceKind& dev, DType dtype) {
    return dev.supports(DType::fp32) ? dev.peak_for(DType::fp32) : dev.peak_for(dtype);
}

Time memory_time(Bytes bytes, const topo::DeviceKind& dev) { return bytes / (dev.memory_bandwidth * dev.memory_efficiency); }

/// A kernel of a `dtype` run priced from a calibration profile's tables, or nullopt when none was
/// measured for it: a CPU's tables hold fp32 (kernel_time asks for fp32 runs only); a GPU's GEMM
/// tables are per dtype (none for FP8), its flash attention and softmax were timed on 16-bit
/// elements, and arithmetic it did not measure runs at `vector_rate`.
std::optional<Time> measured_time(const Kernel& k, DType dtype, const topo::MeasuredCompute& m, FlopRate vector_rate) {
    const bool gpu = m.on_gpu();
    if (gpu && k.elem_bytes != 2 && (k.op == KernelOp::flash || k.op == KernelOp::softmax)) return std::nullopt;
    switch (k.op) {
        case KernelOp::gemm: {
            const topo::ShapeTable* t = k.fp8 == Fp8Recipe::none ? m.gemm_table(dtype, k.elem_bytes) : nullptr;
            if (!t) return std::nullopt;
            // A GPU tiles a batched GEMM's products side by side, as it tiles the rows of one
            // product batch × m tall; a CPU runs them one after another at one product's rate.
            const double rows = static_cast<double>(k.m) * (gpu ? static_cast<double>(k.batch) : 1.0);
            return Time::seconds(k.flops / t->at(rows, static_cast<double>(k.n), static_cast<double>(k.k)));
        }
        case KernelOp::flash: {
            const topo::ShapeTable& t = k.causal ? (k.backward ? m.flash_bwd_causal : m.flash_fwd_causal)
                                                 : (k.backward ? m.flash_bwd : m.flash_fwd);
            if (t.empty()) return std::nullopt;
            const double rate = t.at(static_cast<double>(k.m), static_cast<double>(k.n), static_cast<double>(k.k));
            // A GPU's tables hold the rate on a full GPU; a kernel of fewer tiles than SMs runs at
            // its share (topo::kFlashTileRows).
            double fill = 1;
            if (gpu && m.sms > 0) {
                const double rows = static_cast<double>(k.backward ? flash_key_rows(k) : k.m);
                fill = std::min(1.0, static_cast<double>(k.batch) * std::ceil(rows / topo::kFlashTileRows) / m.sms);
            }
            return Time::seconds(k.flops / (rate * fill));
        }
        case KernelOp::softmax: {
            if (m.softmax.empty()) return std::nullopt;
            const double elements = static_cast<double>(k.m) * static_cast<double>(k.n);
            return Time::seconds(elements / m.softmax.rate_at(elements));
        }
        case KernelOp::stream: {
            if (m.stream.empty()) return std::nullopt;
            const double bytes = static_cast<double>(k.bytes);
            // The executor's pass does 2 FLOPs per 8 bytes moved; more arithmetic runs after it.
            const double extra = std::max(0.0, k.flops - bytes / 4);
            const double arithmetic = m.arithmetic > 0 ? m.arithmetic : vector_rate.per_second();
            return Time::seconds((bytes > 0 ? bytes / m.stream.rate_at(bytes) : 0.0) + (extra > 0 ? extra / arithmetic : 0.0));
        }
        case KernelOp::adam: {
            if (m.adam.empty()) return std::nullopt;
            const double n = static_cast<double>(k.elements);
            return Time::seconds(n / m.adam.rate_at(n));
        }
    }
    return std::nullopt;
}

/// A pass on the host CPU, alone: its DRAM traffic at the host's streaming rate, or its FLOPs on
/// all the cores, whichever is longer.
Time host_time(Bytes bytes, Flops flops, const topo::NodeGroup& group) {
    const Time memory = bytes / (group.host_memory_bandwidth * group.host_memory_efficiency);
    return group.host_peak ? std::max(memory, flops / *group.host_peak) : memory;
}

/// The rate of a fused attention kernel (KernelOp::flash) on a device with measured attention
/// rates: the table's at the kernel's backend, direction, mask, head dimension and key length,
/// times its fill, min(1, thread blocks / SMs).
FlopRate attention_rate(const topo::AttentionRates& table, const Kernel& k) {
    const FlopRate r = table.rate(k.backend, k.backward, k.causal, static_cast<double>(k.k), static_cast<double>(k.n));
    // One thread block per 128-row tile of a head: of queries in forward, of keys in backward
    // (flash_key_rows: a sliding window's blocks span the whole sequence).
    const double rows = static_cast<double>(k.backward ? flash_key_rows(k) : k.m);
    const double blocks = static_cast<double>(k.batch) * std::ceil(rows / 128);
    return r * std::min(1.0, blocks / table.sms);
}

}  // namespace

double gemm_efficiency(const topo::DeviceKind& device, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                       bool flash) {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return device.gemm_efficiency;
    const double d = std::cbrt(static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k));
    const double half = flash && device.flash_half_dim > 0 ? device.flash_half_dim : device.gemm_half_dim;
    return device.gemm_efficiency * d / (d + half);
}

double fp8_gemm_efficiency(const topo::DeviceKind& device, std::int64_t m, std::int64_t n, std::int64_t k,
                           std::int64_t batch) {
    if (!device.fp8_peak)
        fail_input("device " + device.name + " has no FP8 peak (\"peak\": {\"fp8\": …} in its cluster description)");
    const double e8 = device.fp8_gemm_efficiency.value_or(device.gemm_efficiency);
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return e8;
    const DType ref = device.supports(DType::bf16) ? DType::bf16 : DType::fp16;
    const double half = device.gemm_half_dim * ((*device.fp8_peak * e8) / (device.peak_for(ref) * device.gemm_efficiency));
    const double d = std::cbrt(static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k));
    return e8 * d / (d + half);
}

Time kernel_time(const Kernel& kernel, DType dtype, bool on_host, const topo::NodeGroup& group) {
    const topo::DeviceKind& dev = group.device;
    const Bytes bytes(kernel.bytes);
    // A 16-bit GEMM on a leading dimension that is not a multiple of 8 elements runs on cuBLAS's
    // narrower-aligned kernels, at the device's measured fraction of the aligned rate (a
    // profile's GEMM table too, whose shapes are aligned).
    const double alignment = kernel.op == KernelOp::gemm && kernel.unaligned && kernel.elem_bytes == 2 &&
                                     kernel.fp8 == Fp8Recipe::none && !on_host
                                 ? dev.gemm_unaligned_factor
                                 : 1.0;
    // A CPU's measured rates are fp32 (what the CPU executor runs), and a CPU board's host is its
    // device; a GPU's are per dtype, for what runs on the GPU.
    if (dev.measured && (dev.measured->on_gpu() ? !on_host : dtype == DType::fp32 && (dev.is_cpu || !on_host)))
        if (const auto t = measured_time(kernel, dtype, *dev.measured, vector_peak(dev, dtype)))
            return alignment == 1.0 ? *t : *t * (1.0 / alignment);
    if (on_host) return host_time(bytes, Flops(kernel.flops), group);
    const Flops flops(kernel.flops);
    switch (kernel.op) {
        case KernelOp::gemm:
            if (kernel.fp8 != Fp8Recipe::none)
                return std::max(dev.gemm_fixed_time + flops / (*dev.fp8_peak * fp8_gemm_efficiency(dev, kernel.m, kernel.n, kernel.k, kernel.batch)),
                                memory_time(bytes, dev));
            return std::max(dev.gemm_fixed_time + flops / (dev.peak_for(dtype) * alignment *
                                                           gemm_efficiency(dev, kernel.m, kernel.n, kernel.k, kernel.batch)),
                            memory_time(bytes, dev));
        case KernelOp::flash:
            if (dev.attention_rates && dtype_bytes(dtype) == 2 && dev.attention_rates->has(kernel.backend))
                return std::max(flops / attention_rate(*dev.attention_rates, kernel), memory_time(bytes, dev));
            return std::max(flops / (dev.peak_for(dtype) * gemm_efficiency(dev, kernel.m, kernel.n, kernel.k, kernel.batch, true)),
                            memory_time(bytes, dev));
        case KernelOp::softmax:
        case KernelOp::stream:
        case KernelOp::adam:
            return std::max(flops / vector_peak(dev, dtype), memory_time(bytes, dev));
    }
    return Time::zero();
}

namespace {

/// GEMMs and attention run at the rate of the SMs they get (the tensor cores); the other classes
/// stream memory.
bool sm_bound(KernelClass c) { return c == KernelClass::gemm || c == KernelClass::attention; }

/// How an op runs its kernel list, told kernel by kernel to `on(i, start, run)` (start: from the
/// op's start; run: on the device, or on the CPU with its launch); returns the op's duration. A
/// CPU (or a host op) runs each launch and kernel in turn on the same cores. On a GPU the host
/// issues each kernel after the ones before it, launch + dispatch apart (the launch alone for a
/// kernel autograd's engine issues); the device runs each when issued and free; the op lasts
/// until the last kernel ends or the host has issued them all, whichever is later.
template <class OnKernel>
Time schedule_kernels(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch, OnKernel on) {
    const Time launch = group.device.launch_overhead;
    if (group.device.is_cpu || op.on_host()) {
        Time t;
        for (std::size_t i = 0; i < kernels.size(); ++i) {
            const Time one = launch + kernel_time(kernels[i], op.dtype(), op.on_host(), group);
            on(i, t, one);
            t += one;
        }
        return t;
    }
    Time device_free, issued;
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        const Kernel& k = kernels[i];
        const Time run = kernel_time(k, op.dtype(), false, group);
        const Time start = std::max(device_free, issued);
        on(i, start, run);
        device_free = start + run;
        issued += k.dispatched ? launch + dispatch : launch;
    }
    return std::max(device_free, issued);
}

}  // namespace

Time compute_time(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch,
                  std::array<Time, kKernelClasses>* by_class) {
    const topo::DeviceKind& dev = group.device;
    std::array<Time, kKernelClasses> split{};
    const auto done = [&](Time total) {
        if (by_class) *by_class = split;
        return total;
    };
    if (op.ref < 0) {
        // No kernel list: the op's totals as one kernel of its class (synthetic graphs).
        const Bytes traffic(op.bytes);
        const Flops flops(op.flops);
        Time t;
        if (op.on_host())
            t = host_time(traffic, flops, group);
        else if (sm_bound(op.kernel()))
            t = flops / (dev.peak_for(op.dtype()) * dev.gemm_efficiency) + memory_time(traffic, dev);
        else
            t = std::max(flops / dev.peak_for(op.dtype()), memory_time(traffic, dev));
        split[static_cast<std::size_t>(op.kernel())] = t + dev.launch_overhead;
        return done(t + dev.launch_overhead);
    }
    if (kernels.empty()) return done(Time::zero());
    Time busy;
    const Time total = schedule_kernels(op, kernels, group, dispatch, [&](std::size_t i, Time, Time run) {
        split[static_cast<std::size_t>(kernels[i].cls)] += run;
        busy += run;
    });
    if (by_class && busy > Time::zero() && !(dev.is_cpu || op.on_host()))
        for (Time& c : split) c = c * (total / busy);
    return done(total);
}

double sm_bound_share(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch) {
    if (group.device.is_cpu || op.on_host()) return 0;
    if (op.ref < 0) return sm_bound(op.kernel()) ? 1.0 : 0.0;
    Time on_sms;
    const Time total = schedule_kernels(op, kernels, group, dispatch, [&](std::size_t i, Time, Time run) {
        if (sm_bound(kernels[i].cls)) on_sms += run;
    });
    return total > Time::zero() ? std::min(1.0, on_sms / total) : 0.0;
}

KernelSchedule kernel_schedule(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch) {
    KernelSchedule s;
    s.kernels.reserve(kernels.size());
    s.total = schedule_kernels(op, kernels, group, dispatch,
                               [&](std::size_t, Time start, Time run) { s.kernels.push_back({start, run}); });
    return s;
}

double jitter_factor(const topo::ComputeJitter& jitter, OpId id) {
    // SplitMix64 over the seed advanced by the op id (splitmix64.c: x += 0x9e3779b97f4a7c15, then
    // the two xor-shift-multiply rounds and a final xor-shift).
    std::uint64_t z = jitter.seed + (static_cast<std::uint64_t>(id) + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53;   // [0, 1), 53 random bits
    return 1.0 + jitter.percent / 100.0 * (2.0 * u - 1.0);
}

}  // namespace smol::sim
