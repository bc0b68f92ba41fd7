#include "core/kernel.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/units.hpp"

namespace smol {

namespace {
/// A kernel's count of independent problems (GEMMs of a batch, attention heads), which Kernel
/// keeps in 32 bits.
std::int32_t batch_count(std::int64_t n) {
    if (n < 0 || n > std::numeric_limits<std::int32_t>::max())
        throw Error(ErrorKind::out_of_range, "a kernel of " + std::to_string(n) +
                                                 " independent problems (micro-batch × heads), more than the 2^31 - 1 "
                                                 "one kernel holds");
    return static_cast<std::int32_t>(n);
}
}  // namespace

const char* to_string(KernelClass k) {
    switch (k) {
        case KernelClass::gemm: return "gemm";
        case KernelClass::attention: return "attention";
        case KernelClass::elementwise: return "elementwise";
        case KernelClass::optimizer: return "optimizer";
    }
    return "?";
}

const char* to_string(KernelOp k) {
    switch (k) {
        case KernelOp::gemm: return "gemm";
        case KernelOp::softmax: return "softmax";
        case KernelOp::flash: return "flash";
        case KernelOp::stream: return "stream";
        case KernelOp::adam: return "adam";
    }
    return "?";
}

const char* to_string(KernelName k) {
    switch (k) {
        case KernelName::other: return "other";
        case KernelName::embedding: return "embedding";
        case KernelName::norm: return "norm";
        case KernelName::qkv: return "qkv";
        case KernelName::scores: return "scores";
        case KernelName::softmax: return "softmax";
        case KernelName::context: return "context";
        case KernelName::attn_proj: return "attn_proj";
        case KernelName::bias_dropout_residual: return "bias_dropout_residual";
        case KernelName::mlp_up: return "mlp_up";
        case KernelName::activation: return "activation";
        case KernelName::mlp_down: return "mlp_down";
        case KernelName::logits: return "logits";
        case KernelName::loss: return "loss";
        case KernelName::optimizer: return "optimizer";
        case KernelName::layer: return "layer";
        case KernelName::onebit_compress: return "onebit_compress";
        case KernelName::onebit_server: return "onebit_server";
        case KernelName::onebit_decompress: return "onebit_decompress";
        case KernelName::topk_compress: return "topk_compress";
        case KernelName::topk_decompress: return "topk_decompress";
        case KernelName::powersgd: return "powersgd";
        case KernelName::cp_permute: return "cp_permute";
        case KernelName::cast: return "cast";
        case KernelName::scale: return "scale";
        case KernelName::mask: return "mask";
        case KernelName::grad_accumulate: return "grad_accumulate";
        case KernelName::quantize: return "quantize";
        case KernelName::powersgd_orthogonalize: return "powersgd_orthogonalize";
        case KernelName::router: return "router";
        case KernelName::dequantize: return "dequantize";
        case KernelName::secondary_partition: return "secondary_partition";
    }
    return "?";
}

Kernel gemm_kernel(KernelName name, KernelClass cls, std::int64_t m, std::int64_t n, std::int64_t k,
                   std::int64_t batch, int elem_bytes, bool weight) {
    Kernel g;
    g.op = KernelOp::gemm;
    g.cls = cls;
    g.name = name;
    g.weight = weight;
    g.elem_bytes = static_cast<std::uint8_t>(elem_bytes);
    g.batch = batch_count(batch);
    g.m = m;
    g.n = n;
    g.k = k;
    const char* what = "bytes a GEMM moves";
    const std::int64_t elements = checked_add(checked_add(checked_mul(m, k, what), checked_mul(k, n, what), what),
                                              checked_mul(m, n, what), what);
    g.bytes = checked_mul(checked_mul(elements, elem_bytes, what), batch, what);
    g.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
    const std::int64_t per_16_bytes = elem_bytes > 0 && elem_bytes < 16 ? 16 / elem_bytes : 1;
    g.unaligned = n % per_16_bytes != 0 || k % per_16_bytes != 0;
    return g;
}

const char* to_string(Fp8Recipe r) {
    switch (r) {
        case Fp8Recipe::none: return "none";
        case Fp8Recipe::delayed: return "delayed";
        case Fp8Recipe::tensorwise: return "tensorwise";
    }
    return "?";
}

const char* to_string(AttentionBackend b) {
    switch (b) {
        case AttentionBackend::flash: return "flash";
        case AttentionBackend::fused: return "fused";
        case AttentionBackend::flash3: return "flash3";
    }
    return "?";
}

AttentionBackend parse_attention_backend(const std::string& text, const std::string& flag) {
    if (text == "flash") return AttentionBackend::flash;
    if (text == "fused") return AttentionBackend::fused;
    if (text == "flash3") return AttentionBackend::flash3;
    fail_input("flash (FlashAttention-2), fused (cuDNN's fused attention, Transformer Engine's FusedAttention) or flash3 "
               "(FlashAttention-3, Hopper only)",
               "\"" + text + "\"", {"", "", flag});
}

Kernel fp8_gemm_kernel(KernelName name, KernelClass cls, std::int64_t m, std::int64_t n, std::int64_t k,
                       std::int64_t batch, int out_bytes, bool weight, Fp8Recipe recipe) {
    Kernel g = gemm_kernel(name, cls, m, n, k, batch, out_bytes, weight);
    const char* what = "bytes an FP8 GEMM moves";
    g.bytes = checked_mul(checked_add(checked_add(checked_mul(m, k, what), checked_mul(k, n, what), what),
                                      checked_mul(checked_mul(m, n, what), out_bytes, what), what),
                          batch, what);
    g.fp8 = recipe;
    return g;
}

std::vector<Kernel> quantize_kernels(std::int64_t elements, int src_bytes, bool transpose, Fp8Recipe recipe) {
    const char* what = "bytes a cast to FP8 moves";
    std::vector<Kernel> out;
    // Current scaling's amax: a reduction reading the tensor (TE's compute_amax, then the scale
    // from it, before the cast can start).
    if (recipe == Fp8Recipe::tensorwise)
        out.push_back(stream_kernel(KernelName::quantize, KernelClass::elementwise, checked_mul(elements, src_bytes, what),
                                    static_cast<double>(elements)));
    // The cast: read the tensor, write one FP8 byte per element (and the transposed copy).
    out.push_back(stream_kernel(KernelName::quantize, KernelClass::elementwise,
                                checked_mul(elements, src_bytes + (transpose ? 2 : 1), what), static_cast<double>(elements)));
    return out;
}

Kernel softmax_kernel(std::int64_t rows, std::int64_t cols, int elem_bytes) {
    Kernel s;
    s.op = KernelOp::softmax;
    s.cls = KernelClass::attention;
    s.name = KernelName::softmax;
    s.batch = 1;
    s.elem_bytes = static_cast<std::uint8_t>(elem_bytes);
    s.m = rows;
    s.n = cols;
    s.bytes = checked_mul(checked_mul(rows, cols, "bytes a softmax moves"), 2 * elem_bytes, "bytes a softmax moves");
    s.flops = 5.0 * static_cast<double>(rows) * static_cast<double>(cols);
    return s;
}

double causal_pairs(std::int64_t q, std::int64_t keys) {
    const double qd = static_cast<double>(q), w = static_cast<double>(std::min(q, keys));
    return w * (w + 1) / 2 + (qd - w) * w;
}

Kernel flash_kernel(std::int64_t heads, std::int64_t q, std::int64_t kv, std::int64_t d, int elem_bytes, bool backward,
                    bool causal) {
    Kernel f;
    f.op = KernelOp::flash;
    f.cls = KernelClass::attention;
    f.name = KernelName::scores;
    f.backward = backward;
    f.causal = causal;
    f.elem_bytes = static_cast<std::uint8_t>(elem_bytes);
    f.batch = batch_count(heads);
    f.m = q;
    f.n = kv;
    f.k = d;
    const double pairs = causal ? causal_pairs(q, kv) : static_cast<double>(q) * static_cast<double>(kv);
    const double per_head = 4.0 * pairs * static_cast<double>(d);
    f.flops = (backward ? 2.5 : 1.0) * per_head * static_cast<double>(heads);
    // Forward reads Q, K, V and writes O (plus the log-sum-exp, q floats); backward also reads O,
    // dO and writes dQ, dK, dV.
    const char* what = "bytes a fused attention kernel moves";
    const std::int64_t qd = checked_mul(q, d, what), kvd = checked_mul(kv, d, what);
    const std::int64_t qkvo = checked_add(checked_mul(checked_add(qd, kvd, what), 2 * elem_bytes, what), checked_mul(q, 4, what), what);
    f.bytes = checked_mul(heads, backward ? checked_add(checked_mul(qkvo, 2, what), checked_mul(qd, elem_bytes, what), what) : qkvo, what);
    return f;
}

std::int64_t flash_key_rows(const Kernel& k) { return k.causal && k.n < k.m ? k.m : k.n; }

Kernel stream_kernel(KernelName name, KernelClass cls, std::int64_t bytes, double flops) {
    Kernel s;
    s.op = KernelOp::stream;
    s.cls = cls;
    s.name = name;
    s.bytes = bytes;
    s.flops = flops;
    return s;
}

Kernel adam_kernel(std::int64_t params, int bytes_per_param) {
    Kernel a;
    a.op = KernelOp::adam;
    a.cls = KernelClass::optimizer;
    a.name = KernelName::optimizer;
    a.elements = params;
    a.bytes = checked_mul(params, bytes_per_param, "bytes an optimizer step moves");
    a.flops = 12.0 * static_cast<double>(params);
    return a;
}

bool same_pass_gradient(KernelName name) {
    return name == KernelName::cp_permute || name == KernelName::cast || name == KernelName::scale ||
           name == KernelName::mask;
}

std::vector<Kernel> backward_kernels(std::span<const Kernel> forward, BackwardPart part) {
    const bool inputs = part != BackwardPart::weight, weights = part != BackwardPart::input;
    std::vector<Kernel> out;
    out.reserve(forward.size() * 2);
    for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
        const Kernel& f = *it;
        switch (f.op) {
            case KernelOp::gemm: {
                // Each gradient is the same product count as the forward: carry its FLOPs over
                // (a layer list's GEMM carries the spec's exact FLOPs, not its rounded shape's).
                // An FP8 linear's backward (TE's Linear backward, transformer_engine/pytorch/module/
                // linear.py): the incoming gradient cast to FP8 with its transpose, then the data
                // gradient dC·Bᵀ and the weight gradient Aᵀ·dC, both FP8 GEMMs. A zero-bubble
                // weight pass reuses the cast its input pass made.
                const bool fp8 = f.fp8 != Fp8Recipe::none;
                if (fp8 && inputs)
                    for (const Kernel& q : quantize_kernels(checked_mul(checked_mul(f.m, f.n, "gradient elements"), f.batch, "gradient elements"),
                                                            f.elem_bytes, true, f.fp8))
                        out.push_back(q);
                Kernel da = fp8 ? fp8_gemm_kernel(f.name, f.cls, f.m, f.k, f.n, f.batch, f.elem_bytes, false, f.fp8)
                                : gemm_kernel(f.name, f.cls, f.m, f.k, f.n, f.batch, f.elem_bytes, false);
                Kernel db = fp8 ? fp8_gemm_kernel(f.name, f.cls, f.k, f.n, f.m, f.batch, f.elem_bytes, f.weight, f.fp8)
                                : gemm_kernel(f.name, f.cls, f.k, f.n, f.m, f.batch, f.elem_bytes, f.weight);
                da.flops = db.flops = f.flops;
                da.unaligned = db.unaligned = f.unaligned;   // the forward's leading dimensions
                if (inputs) out.push_back(da);
                if (f.weight ? weights : inputs) out.push_back(db);
                break;
            }
            case KernelOp::softmax:
                if (inputs) {
                    Kernel b = f;
                    b.bytes = checked_mul(f.bytes / 2, 3, "bytes a softmax backward moves") + f.bytes % 2 * 3 / 2;
                    b.flops = 4.0 * static_cast<double>(f.m) * static_cast<double>(f.n);  // dx = y·(dy − Σ y·dy)
                    out.push_back(b);
                }
                break;
            case KernelOp::flash:
                if (inputs) {
                    // 2.5× the forward's FLOPs, whatever pairs the forward counted (a causal or
                    // windowed mask skips the same blocks in backward).
                    Kernel b = flash_kernel(f.batch, f.m, f.n, f.k, f.elem_bytes, true, f.causal);
                    b.flops = 2.5 * f.flops;
                    b.backend = f.backend;
                    out.push_back(b);
                }
                break;
            case KernelOp::stream:
                if (f.name == KernelName::quantize) break;   // its input's gradient is the GEMM's data gradient
                if (f.name == KernelName::loss) break;       // the loss's own backward: Block::loss_backward
                if (inputs && same_pass_gradient(f.name)) {
                    out.push_back(f);   // the inverse permutation, the cast back, the same scale or mask
                } else if (inputs) {
                    Kernel b = f;
                    b.bytes = checked_mul(f.bytes, 2, "bytes a backward pass moves");
                    b.flops = f.flops * 2;
                    out.push_back(b);
                }
                break;
            case KernelOp::adam: break;  // no backward
        }
    }
    return out;
}

double total_flops(std::span<const Kernel> kernels) {
    double f = 0;
    for (const Kernel& k : kernels) f += k.flops;
    return f;
}

std::int64_t total_bytes(std::span<const Kernel> kernels) {
    std::int64_t b = 0;
    for (const Kernel& k : kernels) b = checked_add(b, k.bytes, "bytes a compute op moves");
    return b;
}

}  // namespace smol
