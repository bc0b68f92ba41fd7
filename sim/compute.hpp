// The compute cost model: every kernel on its own roofline, and the launch of each kernel.
//
//   GEMM:                    t = max(t0 + FLOPs / (peak(dtype) · e(shape)), bytes / (bandwidth · e_mem))
//                            (an FP8 GEMM: peak fp8 and fp8_gemm_efficiency)
//   flash attention:         t = max(FLOPs / rate, bytes / (bandwidth · e_mem)), the rate measured for
//                            its library, direction, mask, head dim and key length where the device
//                            has a table (topologies/attention_rates.hpp), else peak(dtype) · e_flash(shape)
//   memory-bound kernels:    t = max(FLOPs / peak, bytes / (bandwidth · e_mem))
//   host kernels (an optimizer step offloaded to the CPU): max(bytes / (host bandwidth · host e_mem),
//                            FLOPs / host CPU peak) — alone; the simulator shares DRAM and cores
//                            among a node's host ops and copies (simulator.cpp, HostCpu)
//
// e(shape) = e_max · d / (d + d_half), d = (batch·m·n·k)^(1/3): small GEMMs run far below peak,
// large ones approach the device's e_max (a batched GEMM fills the device like one GEMM of the
// same total work); t0 (DeviceKind::gemm_fixed_time) is what a GEMM kernel costs beyond that, its
// fill and drain, which sets the time of small ones. Where a device's (d_half, t0) come from
// measured GEMMs (the H100 and H200 presets: OpenXLA's sm_90 matmul table,
// validation/xla-h100-matmul.csv), e_flash uses the device's flash_half_dim instead (a device
// without measured attention rates).
//
// Launches. A GPU runs kernels asynchronously: the host issues one every `launch_overhead` (the
// driver's launch) plus the framework's dispatch (Python, the dispatcher, autograd:
// OpGraph::dispatch_overhead, from strategies/framework.hpp), the device runs them in order as they arrive, so
// an op of n kernels takes the longer of the device's chain and the host's n issues — large
// kernels hide the launches, tiny ones are bound by them (small models). A CPU device runs the
// dispatch and the kernel on the same cores: each kernel costs its dispatch plus its run time.
// An op built without a kernel list is priced as one kernel of its class.
//
// Measured rates. A device kind with a calibration profile (DeviceKind::measured, measured by
// the executor's own fp32 kernels) prices each fp32 kernel from the tables instead: a GEMM at
// its FLOPs over the table's rate for its m × n × k (a batched GEMM runs its products one after
// another at that rate), flash attention likewise over q × kv × head dim, softmax, streaming
// passes and Adam over the rate measured at their size; a pass's arithmetic beyond the two FLOPs
// per element its streaming loop does runs at the measured arithmetic rate. On a CPU board the
// host is the device, so host kernels are priced the same way.
// A GPU's profile (calibrate --backend cuda) prices what runs on the GPU in any dtype: a GEMM
// from the table of its dtype (an FP8 GEMM keeps the FP8 curve: none was measured) at batch × m
// rows, as the GPU tiles a batched GEMM's products side by side; flash attention and softmax
// from their 16-bit tables (on fp32 elements, such as Megatron's unfused fp32 softmax, they
// keep the leads); streaming passes and Adam by size, extra arithmetic at the vector peak.
//
// Slow devices and jitter (topologies/cluster.hpp DeviceSpeed, ComputeJitter) are applied by the
// simulator on top of these times (sim/simulator.cpp device_time): time / speed × jitter_factor.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "core/op_graph.hpp"
#include "topologies/cluster.hpp"

namespace smol::sim {

/// Efficiency of a GEMM of `batch` products of m×n×k on `device` (0 < e ≤ gemm_efficiency);
/// `flash`: of a FlashAttention kernel, on the device's flash_half_dim.
double gemm_efficiency(const topo::DeviceKind& device, std::int64_t m, std::int64_t n, std::int64_t k,
                       std::int64_t batch = 1, bool flash = false);
/// Efficiency of an FP8 GEMM (Kernel::fp8) on `device`, of its fp8_peak: fp8_gemm_efficiency at
/// the 16-bit curve's shape, its half size scaled so that the curve's d² term — the time per
/// output element a kernel spends beyond its multiply-adds (the epilogue writing a 16-bit output,
/// the waves' tails), which FP8 operands do not shorten — stays the same in seconds:
/// d_half,fp8 = d_half · (P_fp8 · e_fp8) / (P_16 · e_16). t0 is the 16-bit curve's. No FP8
/// GEMM table of these devices is published to fit the shape itself.
double fp8_gemm_efficiency(const topo::DeviceKind& device, std::int64_t m, std::int64_t n, std::int64_t k,
                           std::int64_t batch = 1);
/// Run time of one kernel on the group's device (or its host CPU), launch excluded.
Time kernel_time(const Kernel& kernel, DType dtype, bool on_host, const topo::NodeGroup& group);
/// Duration of a compute op running `kernels` (empty: the op's own totals as one kernel) on the
/// group's device, with nothing else running on it. On a GPU the host issues each kernel in
/// `dispatch` (the framework's, OpGraph::dispatch_overhead) plus the device's launch_overhead.
/// `by_class`, when given, receives the part of it spent in each kernel class (launches counted
/// with their kernel; on a GPU whose launches outlast the kernels, the launch-bound time is
/// shared in proportion to the kernels' times).
Time compute_time(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch = {},
                  std::array<Time, kKernelClasses>* by_class = nullptr);

/// The share of an op's time (compute_time's) that its GEMMs and attention kernels run on the
/// device: the part that slows when SMs are taken by NCCL's thread blocks (each such kernel's
/// throughput is its SMs'); memory-bound kernels, which saturate DRAM on fewer SMs, and the gaps
/// of a host-bound op do not. 0 on a CPU and for host ops.
double sm_bound_share(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch = {});

/// When each kernel of an op runs, as compute_time prices it: `start` from the op's start (on a
/// GPU the later of the device's freeing and the host's issue of the kernel, which is how a
/// host-bound op shows its gaps), `run` its time on the device (on a CPU or the host: with its
/// launch); `total` the op's duration, compute_time's. Before the device's speed (--slow) and
/// --jitter, which scale the whole op.
struct KernelTiming {
    Time start, run;
};
struct KernelSchedule {
    std::vector<KernelTiming> kernels;
    Time total;
};
KernelSchedule kernel_schedule(const Op& op, std::span<const Kernel> kernels, const topo::NodeGroup& group, Time dispatch = {});

/// --jitter: the factor on compute op `id`'s time, 1 + percent/100 · u with u uniform in [−1, 1)
/// drawn by SplitMix64 (Steele, Lea & Flood 2014; Vigna's splitmix64.c, prng.di.unimi.it) from
/// the seed and the op id: a pure function of the two, so the same graph and seed give the same
/// times whatever order the events run in, and a sweep's --jobs cannot change them.
double jitter_factor(const topo::ComputeJitter& jitter, OpId id);

}  // namespace smol::sim
