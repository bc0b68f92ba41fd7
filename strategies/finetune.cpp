#include "strategies/finetune.hpp"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.hpp"

namespace smol::strategies {

namespace {

/// One Hugging Face linear module inside a fused weight GEMM: in × out.
struct Module {
    std::int64_t in, out;
};

/// The modules PEFT wraps for the weight GEMM `k` of a layer (see finetune.hpp), as one of `tp`
/// tensor ranks holds them: a column-parallel GEMM (qkv, mlp_up) has its outputs split, a
/// row-parallel one (attn_proj, mlp_down) its inputs; `k` is already this rank's slice.
std::vector<Module> modules_of(const TransformerShape& s, const Kernel& k, int tp) {
    const bool split = s.gated_mlp;   // Llama's separate projections; GPT-2's fused Conv1D modules
    // Query, key and value widths from the heads' own widths (Qwen3's and Gemma's head_dim is not
    // hidden / heads).
    const std::int64_t kv_heads = s.kv_heads > 0 ? s.kv_heads : s.heads;
    const std::int64_t q = static_cast<std::int64_t>(s.heads) * s.q_head_dim() / tp, key = kv_heads * s.q_head_dim() / tp,
                       value = kv_heads * s.value_head_dim() / tp;
    switch (k.name) {
        case KernelName::qkv:
            // The fused QKV GEMM (or a cross-attention's fused K and V) is q_proj, k_proj and
            // v_proj; MLA's projections (q_a_proj, kv_a_proj_with_mqa, kv_b_proj …) are one each.
            if (split && k.n == q + key + value) return {{k.k, q}, {k.k, key}, {k.k, value}};
            if (split && k.n == key + value) return {{k.k, key}, {k.k, value}};
            return {{k.k, k.n}};
        case KernelName::mlp_up:
            if (split) return {{k.k, k.n / 2}, {k.k, k.n / 2}};
            return {{k.k, k.n}};
        default: return {{k.k, k.n}};
    }
}

bool targeted(const FineTune& f, KernelName n) { return std::find(f.targets.begin(), f.targets.end(), n) != f.targets.end(); }

/// Megatron's row-parallel linears (inputs split over the tensor ranks); the others a layer's
/// weight GEMMs run are column-parallel.
bool row_parallel(KernelName n) { return n == KernelName::attn_proj || n == KernelName::mlp_down; }

/// A forward kernel and what training does with it.
struct Unit {
    std::vector<Kernel> before;   // QLoRA: the dequantisation of a frozen weight, redone in backward
    Kernel kernel;
    bool frozen_weight = false;   // a weight GEMM whose weight is frozen: input gradient only
};

/// The backward of `units` in reverse order; `part` as in backward_kernels.
std::vector<Kernel> backward_of(const std::vector<Unit>& units, BackwardPart part) {
    std::vector<Kernel> out;
    for (auto it = units.rbegin(); it != units.rend(); ++it) {
        if (it->frozen_weight) {
            if (part == BackwardPart::weight) continue;
            for (const Kernel& d : it->before) out.push_back(d);
            for (const Kernel& k : backward_kernels({&it->kernel, 1}, BackwardPart::input)) out.push_back(k);
        } else {
            for (const Kernel& k : backward_kernels({&it->kernel, 1}, part)) out.push_back(k);
        }
    }
    return out;
}

/// What the adapters of one layer exchange between `tp` tensor ranks (PEFT's LoraParallelLinear,
/// peft/tuners/lora/tp_layer.py: on a row-parallel linear A is row-parallel too, its rank-r output
/// all-reduced in the forward, and B whole; on a column-parallel linear A is whole and B
/// column-parallel, whose input gradient is all-reduced in the backward): counts of those
/// all-reduces of tok × r elements.
struct AdapterCollectives {
    int fwd = 0, bwd = 0;
    std::int64_t elements = 0;
};

/// The forward units of a kernel list with adapters on the targets (`adapters`: transformer
/// layers only) and frozen weights; `frozen_gemm_elements` collects the weight elements. With
/// `tp` tensor ranks the kernels are one rank's and so are the adapters (modules_of).
std::vector<Unit> train_units(std::span<const Kernel> fwd, const TransformerShape& shape, const FineTune& f,
                              bool adapters, bool quantised, std::int64_t* frozen_gemm_elements,
                              std::int64_t* adapter_params, std::int64_t* kept_bytes, int tp = 1,
                              AdapterCollectives* collectives = nullptr) {
    std::vector<Unit> units;
    for (const Kernel& k : fwd) {
        if (k.op != KernelOp::gemm || !k.weight) {
            units.push_back({{}, k, false});
            continue;
        }
        Unit base{{}, k, true};
        // A grouped GEMM (an MoE layer's local experts, core/transformer.cpp) is `batch` weights.
        const std::int64_t elements = k.k * k.n * k.batch;
        if (frozen_gemm_elements) *frozen_gemm_elements += elements;
        if (quantised) {
            // Read the 4-bit weight and its constants, write it in the compute dtype; one multiply
            // by the block's constant per element.
            const auto nf4 = static_cast<std::int64_t>(std::ceil(static_cast<double>(elements) * kNf4BytesPerParam));
            base.before.push_back(stream_kernel(k.name, KernelClass::elementwise, nf4 + elements * k.elem_bytes,
                                                static_cast<double>(elements)));
        }
        for (const Kernel& d : base.before) units.push_back({{}, d, false});
        units.push_back(base);
        if (!adapters || !targeted(f, k.name)) continue;
        // Every expert's modules are adapted apart (PEFT wraps each expert's nn.Linear: Mixtral's
        // w1, w2, w3, Qwen-MoE's gate_proj, up_proj, down_proj), each on its own tokens: the
        // adapters of a grouped GEMM are grouped GEMMs over its `batch` experts.
        const std::int64_t tok = k.m, r = f.rank, experts = k.batch;
        for (const Module& m : modules_of(shape, k, tp)) {
            if (collectives && tp > 1) {
                ++(row_parallel(k.name) ? collectives->fwd : collectives->bwd);
                collectives->elements = tok * r;
            }
            units.push_back({{}, gemm_kernel(k.name, KernelClass::gemm, tok, r, m.in, experts, k.elem_bytes, true), false});
            units.push_back({{}, gemm_kernel(k.name, KernelClass::gemm, tok, m.out, r, experts, k.elem_bytes, true), false});
            units.push_back(
                {{}, stream_kernel(k.name, KernelClass::elementwise, 5 * tok * m.out * experts * k.elem_bytes), false});
            if (adapter_params) *adapter_params += r * (m.in + m.out) * experts;
            if (kept_bytes) *kept_bytes += tok * r * experts * k.elem_bytes;
        }
    }
    // The dequantisation kernels sit in `units` for the forward; in backward they are redone by
    // the frozen GEMM that needs them, so the forward copies are not differentiated.
    return units;
}

/// The forward's kernels. A frozen weight's GEMM is no longer a weight GEMM there (core/kernel.hpp:
/// its B is a parameter with no gradient), so what lists a step's weight gradients from the
/// forward (PowerSGD's matrices, strategies/compression.cpp) finds the adapters' alone.
std::vector<Kernel> forward_of(const std::vector<Unit>& units) {
    std::vector<Kernel> out;
    for (const Unit& u : units) {
        out.push_back(u.kernel);
        if (u.frozen_weight) out.back().weight = false;
    }
    return out;
}

/// Units for backward: the forward's dequantisation kernels have no backward of their own.
std::vector<Unit> differentiated(const std::vector<Unit>& units) {
    std::vector<Unit> out;
    for (std::size_t i = 0; i < units.size(); ++i) {
        const bool dequant_of_next = i + 1 < units.size() && units[i + 1].frozen_weight && !units[i + 1].before.empty() &&
                                     units[i].kernel == units[i + 1].before.front();
        if (!dequant_of_next) out.push_back(units[i]);
    }
    return out;
}

}  // namespace

Training apply_finetune(const Model& model, const Layout& layout, std::vector<Block>& blocks) {
    Training t;
    const FineTune& f = layout.finetune;
    if (f.kind == FineTuneKind::full) {
        for (const Block& b : blocks) t.trainable_params += b.params;
        return t;
    }
    if (!model.is_transformer()) throw Error(ErrorKind::internal, "fine-tuning a layer list");
    const TransformerShape& shape = model.shape();
    const bool qlora = f.kind == FineTuneKind::qlora;
    const int dtype = dtype_bytes(layout.dtype);
    t.kernels.resize(blocks.size());
    t.frozen_by_block.resize(blocks.size());
    double frozen = 0;
    for (Block& b : blocks) {
        BlockKernels& bk = t.kernels[static_cast<std::size_t>(b.index)];
        const bool layer = b.kind == Block::Kind::transformer;
        std::int64_t gemm_elements = 0, adapters = 0, kept = 0;
        AdapterCollectives exchanged;
        // Kernel by kernel, so an MoE layer's three parts (before the dispatch, the experts, after
        // the combine) are trained apart and joined, their boundaries kept.
        const std::span<const Kernel> all(b.fwd_kernels);
        std::vector<std::span<const Kernel>> parts{all};
        if (b.moe) {
            const auto dispatch = static_cast<std::size_t>(b.moe->dispatch_at), combine = static_cast<std::size_t>(b.moe->combine_at);
            parts = {all.subspan(0, dispatch), all.subspan(dispatch, combine - dispatch), all.subspan(combine)};
        }
        std::vector<std::vector<Unit>> part_units;
        for (std::size_t k = 0; k < parts.size(); ++k) {
            const std::int64_t before = adapters;
            part_units.push_back(train_units(parts[k], shape, f, layer, qlora && layer, &gemm_elements,
                                             &adapters, &kept, layout.tp, &exchanged));
            for (const Kernel& k : forward_of(part_units.back())) bk.fwd.push_back(k);
            if (b.moe && k == 0) b.moe->dispatch_at = static_cast<int>(bk.fwd.size());
            if (b.moe && k == 1) {
                b.moe->combine_at = static_cast<int>(bk.fwd.size());
                b.moe->expert_params = adapters - before;
            }
        }
        b.tp_adapter_fwd = exchanged.fwd;
        b.tp_adapter_bwd = exchanged.bwd;
        b.tp_adapter_bytes = Bytes(exchanged.elements * dtype);
        if (b.kind == Block::Kind::embedding) {
            // Frozen, and first: nothing upstream needs its gradient.
        } else {
            // The loss's own backward first (the head's), then the parts, last first.
            bk.bwd = b.loss_backward;
            bk.bwd_input = b.loss_backward;
            for (std::size_t k = part_units.size(); k-- > 0;) {
                const std::vector<Unit> diff = differentiated(part_units[k]);
                for (const Kernel& x : backward_of(diff, BackwardPart::all)) bk.bwd.push_back(x);
                for (const Kernel& x : backward_of(diff, BackwardPart::input)) bk.bwd_input.push_back(x);
                for (const Kernel& x : backward_of(diff, BackwardPart::weight)) bk.bwd_weight.push_back(x);
                const std::size_t at = part_units.size() - 1 - k;   // parts done so far, less one
                if (at < 2) {
                    bk.bwd_at[at] = static_cast<int>(bk.bwd.size());
                    bk.bwd_input_at[at] = static_cast<int>(bk.bwd_input.size());
                }
            }
        }
        if (!b.recompute_kernels.empty())
            bk.recompute =
                forward_of(train_units(b.recompute_kernels, shape, f, layer, qlora && layer, nullptr, nullptr, nullptr, layout.tp));
        // The weights a GEMM reads are its B operands; the rest (norms, biases, tables) is the
        // block's other parameters. A tied head reads the embedding's table (counted there).
        const std::int64_t gemm_owned = std::min(gemm_elements, b.params);
        const double mine = layer && qlora ? static_cast<double>(gemm_owned) * kNf4BytesPerParam +
                                                 static_cast<double>(b.params - gemm_owned) * dtype
                                           : static_cast<double>(b.params) * dtype;
        frozen += mine;
        t.frozen_by_block[static_cast<std::size_t>(b.index)] = Bytes(static_cast<std::int64_t>(std::ceil(mine)));
        t.frozen_params += b.params;
        t.trainable_params += adapters;
        // x·A of every adapter is kept for B's weight gradient, unless the layer is recomputed.
        if (b.recompute_kernels != b.fwd_kernels) b.activations += Bytes(kept);
        b.params = adapters;
        b.fwd_kernels = bk.fwd;
        if (!bk.recompute.empty()) b.recompute_kernels = bk.recompute;
    }
    t.frozen = Bytes(static_cast<std::int64_t>(std::ceil(frozen)));
    return t;
}

}  // namespace smol::strategies
