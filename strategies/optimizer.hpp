// Optimizers (--optimizer): the bytes of state each keeps per parameter and the kernels of one
// step, on the device or on the host CPU.
//
// State per parameter, on top of the parameter itself (16-bit training adds fp32 master weights,
// 4 bytes, as Megatron's and DeepSpeed's mixed-precision optimizers keep them; in fp32 training
// the parameters are the masters):
//
//   adam        momentum and variance in fp32: 8 (Kingma & Ba 2015; torch.optim.Adam / AdamW)
//   adamw-8bit  momentum and variance as uint8 in blocks of 2048 with an fp32 absolute maximum per
//               block and state: 2 + 2·4/2048 (Dettmers et al. 2022, "8-bit Optimizers via
//               Block-wise Quantization" §2; bitsandbytes optim/optimizer.py Optimizer8bit.init_state,
//               blocksize 2048)
//   sgd         momentum buffer in fp32: 4 (torch.optim.SGD with momentum)
//   lamb        momentum and variance in fp32: 8 (You et al. 2020, Algorithm 2)
//
// Traffic and FLOPs of the step per parameter, counted from each algorithm's passes (reads +
// writes; the framework's own mixed-precision passes — unscale, norm, clip, copy to the 16-bit
// weights, zeroing — are added on top, strategies/framework.cpp):
//
//   adam        read g, w, m, v (16), write w, m, v (12): 28 bytes, 12 FLOPs
//   adamw-8bit  read g, w (8), m, v (2); write w (4), m, v (2): 16 bytes; 12 FLOPs of Adam plus
//               the dequantisation of two states (a code-book look-up and a scale, 2 each) and their
//               quantisation (a binary search of the 256-entry dynamic code, 8 comparisons each):
//               32 FLOPs (bitsandbytes csrc/kernels.cu kOptimizerStatic8bit2StateBlockwise)
//   sgd         read g, w, b (12), write w, b (8): 20 bytes; b = μ·b + g, w −= η·b: 4 FLOPs
//   lamb        stage 1, the Adam update u = m̂/(√v̂ + ε) + λw: read g, w, m, v, write m, v, u (28
//               bytes, 14 FLOPs); the trust ratio's per-layer norms ‖w‖ and ‖u‖: read w, u (8 bytes,
//               4 FLOPs), one reduction per layer; stage 2, w −= η·(‖w‖/‖u‖)·u: read w, u, write w
//               (12 bytes, 3 FLOPs). 48 bytes, 21 FLOPs. With the optimizer state sharded over
//               data-parallel ranks (ZeRO, FSDP) each rank holds part of every layer, so the
//               per-layer partial norms (2 floats a layer) are all-reduced between the stages.
//
// On the host CPU the step is the framework's CPU optimizer: DeepSpeed's CPU-Adam (csrc/adam/
// cpu_adam_impl.cpp: one vectorised pass over fp32 g, w, m, v writing w, m, v and the 16-bit copy
// of w into a pinned buffer, 30 bytes; with the fp32 gradients unscaled and clipped on the CPU
// first, runtime/zero/stage_1_and_2.py unscale_and_clip_grads, read + write 8: 38 bytes), or
// PyTorch's foreach optimizers for FSDP's CPU offload, one pass per tensor operation
// (torch/optim/adam.py _multi_tensor_adam: lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_ —
// 11 reads and 7 writes of 4 bytes: 72 bytes; SGD's mul_, add_ and add_: 9 passes, 36 bytes), or
// Megatron's HybridDeviceOptimizer (megatron/core/optimizer/__init__.py: CPUAdam with fused=True,
// "used to improve the performance of the cpu optimizer": PyTorch's fused AdamW kernel on CPU
// tensors, one pass of Adam's 28 bytes; CPUSGD as above), whose post-step hook copies each fp32
// parameter into its 16-bit device parameter with copy_(non_blocking=True), which PyTorch converts
// on the host first (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: src.to(dst.dtype())):
// read 4, write 2 more.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernel.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// Bytes of optimizer state (master weights included in 16-bit training) for `params`
/// parameters, rounded up to whole bytes.
Bytes optimizer_state_bytes(Optimizer o, DType dtype, std::int64_t params);
Bytes optimizer_state_bytes(const Layout& l, std::int64_t params);
/// The same per parameter, for formulas and the summary.
double optimizer_state_per_param(Optimizer o, DType dtype);

/// Who runs the step: the device (with the framework's mixed-precision passes), DeepSpeed's CPU
/// optimizer, PyTorch's foreach optimizer on the CPU (FSDP's CPU offload), or the CPU side of
/// Megatron's HybridDeviceOptimizer (--optimizer-cpu-offload): torch.optim.AdamW(fused=True) or
/// SGD on fp32 CPU copies, then the cast of the updated parameters for their copy back.
enum class StepRunner { device, deepspeed_cpu, torch_cpu, megatron_cpu };

/// One step over a shard: the kernels before the per-layer norms are combined, and (LAMB) the
/// kernels after. `layer_params` are the shard's parameters per layer (for LAMB's norms).
struct StepKernels {
    std::vector<Kernel> update;
    std::vector<Kernel> apply;      // LAMB's stage 2; empty otherwise
    int norm_floats = 0;            // LAMB: floats of per-layer partial norms to combine across shards
};
StepKernels step_kernels(const Layout& l, StepRunner runner, std::int64_t params,
                         const std::vector<std::int64_t>& layer_params);

/// The optimizer step of every rank in `ranks` over `params` parameters each (`layer_params`
/// per layer, for LAMB), on the device's compute stream or the host's (`on_host`), each after
/// `after[i]` (kNoOp: nothing). With `sharded`, LAMB's per-layer partial norms are all-reduced
/// over `ranks` between its stages, on `collectives` (the stream the strategy's other collectives
/// on that communicator use). `ranks` lists replicas' ranks replica by replica, a replica's tp
/// tensor ranks together (a single rank is a list too). Returns each rank's last op of the step;
/// with the layout's replicas folded (Layout::folded) only the first min(ranks.size(),
/// emitted_replicas × tp) get ops, the rest kNoOp.
std::vector<OpId> add_optimizer_steps(OpGraph& g, const Layout& l, StepRunner runner, const std::vector<int>& ranks,
                                      std::int64_t params, const std::vector<std::int64_t>& layer_params, bool sharded,
                                      const std::vector<OpId>& after, Stream collectives = Stream::comm);

}  // namespace smol::strategies
