#include "strategies/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"

namespace smol::strategies {

namespace {

// bitsandbytes block-wise 8-bit optimizers: blocks of 2048 elements, one fp32 absmax per block
// and state (optim/optimizer.py Optimizer8bit.init_state, functional.py optimizer_update_8bit_blockwise).
constexpr double kBlockwise8bitBlock = 2048;

/// Optimizer state per parameter, without master weights (see optimizer.hpp).
double own_state(Optimizer o) {
    switch (o) {
        case Optimizer::adam: return 8;
        case Optimizer::adamw_8bit: return 2 + 2 * 4 / kBlockwise8bitBlock;
        case Optimizer::sgd: return 4;
        case Optimizer::lamb: return 8;
    }
    return 8;
}

Kernel scaled(Kernel k, std::int64_t params, double flops_per_param) {
    k.flops = flops_per_param * static_cast<double>(params);
    return k;
}

Kernel pass(std::int64_t params, std::int64_t bytes_per_param, double flops_per_param) {
    return stream_kernel(KernelName::optimizer, KernelClass::optimizer, params * bytes_per_param,
                         flops_per_param * static_cast<double>(params));
}

}  // namespace

double optimizer_state_per_param(Optimizer o, DType dtype) {
    // 16-bit training keeps fp32 master weights with the optimizer (Megatron, DeepSpeed).
    return own_state(o) + (dtype_bytes(dtype) == 4 ? 0.0 : 4.0);
}

Bytes optimizer_state_bytes(Optimizer o, DType dtype, std::int64_t params) {
    return Bytes(static_cast<std::int64_t>(std::ceil(optimizer_state_per_param(o, dtype) * static_cast<double>(params))));
}

Bytes optimizer_state_bytes(const Layout& l, std::int64_t params) { return optimizer_state_bytes(l.optimizer, l.dtype, params); }

StepKernels step_kernels(const Layout& l, StepRunner runner, std::int64_t params,
                         const std::vector<std::int64_t>& layer_params) {
    StepKernels s;
    if (runner == StepRunner::deepspeed_cpu) {
        // DeepSpeed's CPU-Adam (csrc/adam/cpu_adam_impl.cpp Step_AVX): read fp32 g, w, m, v, write
        // w, m, v and the 16-bit copy (30 bytes), after unscale_and_clip_grads on the fp32
        // gradients (8): 38 bytes, Adam's 12 FLOPs.
        if (l.optimizer != Optimizer::adam) throw Error(ErrorKind::internal, "DeepSpeed's CPU optimizer is Adam");
        s.update.push_back(adam_kernel(params, 38));
        return s;
    }
    if (runner == StepRunner::megatron_cpu) {
        if (l.optimizer == Optimizer::adam) s.update.push_back(adam_kernel(params, 28));
        else if (l.optimizer == Optimizer::sgd) s.update.push_back(pass(params, 36, 4));
        else throw Error(ErrorKind::internal, "Megatron's CPU offload runs Adam or SGD");
        // The fp32 copies cast to the 16-bit dtype before they cross to the device.
        if (const int e = dtype_bytes(l.dtype); e < 4) s.update.push_back(pass(params, 4 + e, 0));
        return s;
    }
    if (runner == StepRunner::torch_cpu) {
        // PyTorch's foreach optimizers on CPU tensors: one pass per tensor operation.
        if (l.optimizer == Optimizer::sgd) s.update.push_back(pass(params, 36, 4));
        else if (l.optimizer == Optimizer::adam) s.update.push_back(adam_kernel(params, 72));
        else throw Error(ErrorKind::internal, "no PyTorch CPU optimizer for this one");
        return s;
    }
    // On the device: the framework's mixed-precision passes around the optimizer's own (Adam's
    // 28 bytes are part of the framework's figure, strategies/framework.cpp).
    const int framework = detail::optimizer_bytes_per_param(l) - detail::kAdamBytesPerParam;
    switch (l.optimizer) {
        case Optimizer::adam: s.update.push_back(adam_kernel(params, detail::optimizer_bytes_per_param(l))); break;
        case Optimizer::adamw_8bit: s.update.push_back(scaled(adam_kernel(params, 16 + framework), params, 32)); break;
        case Optimizer::sgd: s.update.push_back(pass(params, 20 + framework, 4)); break;
        case Optimizer::lamb:
            s.update.push_back(scaled(adam_kernel(params, 28 + framework), params, 14));
            // One reduction of ‖w‖ and ‖u‖ per layer (You et al. 2020, Algorithm 2).
            for (std::int64_t p : layer_params)
                if (p > 0) s.update.push_back(pass(p, 8, 4));
            s.apply.push_back(pass(params, 12, 3));
            s.norm_floats = 2 * static_cast<int>(layer_params.size());
            break;
    }
    return s;
}

std::vector<OpId> add_optimizer_steps(OpGraph& g, const Layout& l, StepRunner runner, const std::vector<int>& ranks,
                                      std::int64_t params, const std::vector<std::int64_t>& layer_params, bool sharded,
                                      const std::vector<OpId>& after, Stream collectives) {
    const StepKernels k = step_kernels(l, runner, params, layer_params);
    const bool host = runner != StepRunner::device;
    const Stream stream = host ? Stream::host : Stream::compute;
    const std::int32_t update = g.intern_recipe(k.update);
    // A folded data-parallel layout emits the steps of its kept replicas only (the others mirror
    // them); with tensor parallelism a replica is tp consecutive ranks of the list, each stepping
    // its own slice.
    const std::size_t emit = std::min(ranks.size(), static_cast<std::size_t>(detail::emitted_replicas(l)) * static_cast<std::size_t>(l.tp));
    std::vector<OpId> last(ranks.size(), OpGraph::kNoOp);
    for (std::size_t i = 0; i < emit; ++i) {
        last[i] = g.add_kernels(ranks[i], Phase::opt, -1, -1, update, l.dtype, host, stream);
        if (i < after.size() && after[i] != OpGraph::kNoOp) g.depend(after[i], last[i]);
    }
    if (k.apply.empty()) return last;
    if (sharded && ranks.size() > 1) {
        // LAMB's trust ratio needs each layer's whole norm: the shards' partial sums of squares
        // are all-reduced (fp32) before the update is applied.
        const auto ops = detail::add_replica_collective(g, l, CollectiveKind::all_reduce, ranks, Bytes(4 * k.norm_floats),
                                                        collectives, Phase::opt);
        for (std::size_t i = 0; i < emit; ++i) {
            g.depend(last[i], ops[i]);
            last[i] = ops[i];
        }
    }
    const std::int32_t apply = g.intern_recipe(k.apply);
    for (std::size_t i = 0; i < emit; ++i) {
        const OpId a = g.add_kernels(ranks[i], Phase::opt, -1, -1, apply, l.dtype, host, stream);
        g.depend(last[i], a);
        last[i] = a;
    }
    return last;
}

}  // namespace smol::strategies
