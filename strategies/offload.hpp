// Offload as the frameworks run it: which tier an offloaded state lives in, DeepSpeed's buffer
// defaults, and the copies that move a gradient partition off the device.
//
// Sources (DeepSpeed v0.19.6 unless said):
//  * runtime/zero/stage_1_and_2.py: with offload_optimizer (any device: `self.cpu_offload = True`
//    for anything but none, :186) the fp32 master weights, moments and gradient partitions live
//    in pinned host memory; each reduced gradient partition is cast to fp32 on the device and
//    copied into the host's fp32 gradient partition (async_inplace_copy_grad_to_fp32_buffer_from_gpu,
//    :1601, as in v0.3.0's stage2.py:879 `.float()`), so 4 bytes a parameter cross PCIe — not the
//    2 of the ZeRO-Offload paper's Figure 2; before the last micro-batch the 16-bit partition is
//    accumulated through the host instead (async_accumulate_grad_in_cpu_via_gpu: copy the
//    accumulated partition back, add on the device, copy out); a device buffer of the largest
//    parameter tensor holds that round trip (temp_grad_buffer_for_gpu_offload, :585). After the
//    CPU step the updated 16-bit partition is copied from its pinned host buffer to the device in
//    one copy (:2341), then all-gathered.
//  * runtime/zero/stage3.py: reduce-scattered partitions accumulate in a flat 16-bit buffer in
//    host memory, round-tripping through the device, and their fp32 cast is offloaded at the
//    boundary (partition_grads, v0.6 on: stage3_partition_grads below; the 0.5 row accumulates
//    as stages 1-2 do); with NVMe the fp32 gradients are swapped out
//    (_swap_out_offload_fp32_gradients) and the optimizer steps sub-group by sub-group
//    (sub_group_size 1e9 elements, config.py:175): swap the sub-group's fp32 weights, moments and
//    gradients in, step, swap weights and moments out (swap_tensor/partitioned_optimizer_swapper.py,
//    pipeline_read/pipeline_write false: one after the other) through offload_optimizer.buffer_count
//    (4) pinned buffers of a sub-group each; offloaded parameters are fetched partition by
//    partition (CPU: pinned host → device; NVMe: through offload_param.buffer_count (5) pinned
//    buffers of offload_param.buffer_size (1e8) elements, swap_tensor/partitioned_param_swapper.py)
//    before the all-gather, and the step writes the updated 16-bit partition where it lives.
#pragma once

#include <cstdint>

#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies::detail {

/// The tier a state offloaded to `o` lives in (none: the device).
Tier offload_tier(Offload o);


/// How a framework moves a reduced gradient partition off the device.
struct GradientOffload {
    int grad_bytes = 2;         // the device's gradient dtype
    int accumulate_bytes = 2;   // what is accumulated through the host before the last micro-batch
    Tier to = Tier::host;       // where the fp32 partition ends (NVMe: through a pinned host buffer;
                                // device: Twin-Flow's device sub-groups, stage3_partition_grads only)
    DType dtype = DType::bf16;  // of the device kernels
    bool unified = false;       // unified memory: the host is the device, NVMe is reached from it directly
};

struct OffloadedPartition {
    OpId device_done = OpGraph::kNoOp;   // the device is done with its buffer
    OpId done = OpGraph::kNoOp;          // the partition is where it belongs
};

/// The copies (and the device kernels between them) that move a gradient partition of
/// `elements` produced by `ready` off `rank`'s device in micro-batch `mb` of `mbs`; device
/// kernels run on `stream` (the reduction's). The copy into the host's fp32 partition also waits
/// for `host_reader` (a delayed update still reading it; kNoOp: none). `previous` is the rank's
/// previous partition's device_done: the device buffers that hold a partition on its way out are
/// reused (DeepSpeed's temp_grad_buffer_for_gpu_offload), so this one waits for it; updated.
OffloadedPartition offload_gradient(OpGraph& g, int rank, std::int64_t elements, const GradientOffload& how, int mb,
                                    int mbs, Stream stream, OpId ready, OpId host_reader, OpId& previous, int layer = -1,
                                    int index = -1);

/// DeepSpeed ZeRO-3's partition_grads (stage3.py, v0.6 on: 4912e0ad7, #1453) with the optimizer
/// offloaded, for one reduced partition of `elements` in micro-batch `mb` of `mbs`. The partition
/// accumulates in a flat buffer in host memory of the model's 16-bit dtype
/// (grad_partitions_flat_buffer on self.device, the CPU; gradient_accumulation_dtype is the model's
/// dtype under ZeRO, engine.py get_data_types): micro-batch 0 copies it there and straight back
/// (`grad_buffer.copy_(…)`, then `.to(device)` "to speed up the next few operations"); each later
/// one brings the sum in, adds on the device and copies it out. At the boundary the device copy's
/// norm is taken, it is cast to fp32 (`.float()`) and copied into its sub-group's fp32 gradient:
/// in host memory (`to` host), on the device (Twin-Flow's device sub-groups), or, swapped to NVMe,
/// through the host (swap_out_gradients). The copies and kernels are issued on `stream` (the
/// reduction's, as DeepSpeed issues them on reduce_and_partition_stream); `previous` as above.
OffloadedPartition stage3_partition_grads(OpGraph& g, int rank, std::int64_t elements, const GradientOffload& how, int mb,
                                          int mbs, Stream stream, OpId ready, OpId& previous, int index);

}  // namespace smol::strategies::detail
