#include "core/kernel.hpp"

namespace smol {

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
    g.batch = static_cast<std::int32_t>(batch);
    g.m = m;
    g.n = n;
    g.k = k;
    g.bytes = (m * k + k * n + m * n) * elem_bytes * batch;
    g.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
    return g;
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
    s.bytes = 2 * rows * cols * elem_bytes;
    s.flops = 5.0 * static_cast<double>(rows) * static_cast<double>(cols);
    return s;
}

Kernel flash_kernel(std::int64_t heads, std::int64_t q, std::int64_t kv, std::int64_t d, int elem_bytes, bool backward) {
    Kernel f;
    f.op = KernelOp::flash;
    f.cls = KernelClass::attention;
    f.name = KernelName::scores;
    f.backward = backward;
    f.elem_bytes = static_cast<std::uint8_t>(elem_bytes);
    f.batch = static_cast<std::int32_t>(heads);
    f.m = q;
    f.n = kv;
    f.k = d;
    const double per_head = 4.0 * static_cast<double>(q) * static_cast<double>(kv) * static_cast<double>(d);
    f.flops = (backward ? 2.5 : 1.0) * per_head * static_cast<double>(heads);
    // Forward reads Q, K, V and writes O (plus the log-sum-exp, q floats); backward also reads O,
    // dO and writes dQ, dK, dV.
    const std::int64_t qkvo = (2 * q * d + 2 * kv * d) * elem_bytes + 4 * q;
    f.bytes = heads * (backward ? 2 * qkvo + q * d * elem_bytes : qkvo);
    return f;
}

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
    a.bytes = params * bytes_per_param;
    a.flops = 12.0 * static_cast<double>(params);
    return a;
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
                Kernel da = gemm_kernel(f.name, f.cls, f.m, f.k, f.n, f.batch, f.elem_bytes, false);
                Kernel db = gemm_kernel(f.name, f.cls, f.k, f.n, f.m, f.batch, f.elem_bytes, f.weight);
                da.flops = db.flops = f.flops;
                if (inputs) out.push_back(da);
                if (f.weight ? weights : inputs) out.push_back(db);
                break;
            }
            case KernelOp::softmax:
                if (inputs) {
                    Kernel b = f;
                    b.bytes = f.bytes * 3 / 2;
                    b.flops = 4.0 * static_cast<double>(f.m) * static_cast<double>(f.n);  // dx = y·(dy − Σ y·dy)
                    out.push_back(b);
                }
                break;
            case KernelOp::flash:
                if (inputs) {
                    // 2.5× the forward's FLOPs, whatever pairs the forward counted (a causal or
                    // windowed mask skips the same blocks in backward).
                    Kernel b = flash_kernel(f.batch, f.m, f.n, f.k, f.elem_bytes, true);
                    b.flops = 2.5 * f.flops;
                    out.push_back(b);
                }
                break;
            case KernelOp::stream:
                if (inputs) {
                    Kernel b = f;
                    b.bytes = f.bytes * 2;
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
    for (const Kernel& k : kernels) b += k.bytes;
    return b;
}

}  // namespace smol
