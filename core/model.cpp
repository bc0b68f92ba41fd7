// Model description: presets, JSON readers, parameter counts, and the per-block arithmetic
// (FLOPs, activation bytes, tensor-parallel traffic) that strategies lay out on devices.
//
// Notation below follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models"): s sequence, b micro-batch, h hidden, a attention heads, t tensor-parallel
// size, v vocabulary, l layers. kv = kv_heads · h / a is the key/value width (= h without GQA),
// f the ffn hidden size (4h for GPT), e the bytes per element of the training dtype.
#include "core/model.hpp"

#include "core/cnn_presets.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

namespace smol {
namespace {

// ---------------------------------------------------------------------------------------------
// Presets: the published configurations.
//  * GPT-2: Radford et al. 2019, HuggingFace gpt2 / gpt2-medium / gpt2-large / gpt2-xl config.json.
//  * GPT-3 175B: Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048).
//  * Llama 2 7B: Touvron et al. 2023, meta-llama/Llama-2-7b-hf config.json.
//  * Llama 3 8B: meta-llama/Meta-Llama-3-8B config.json (GQA with 8 key-value heads).

TransformerShape gpt2_style(int layers, int hidden, int heads, int max_seq) {
    TransformerShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = heads;
    s.kv_heads = heads;
    s.ffn_hidden = 4 * hidden;
    s.vocab = 50257;  // GPT-2 byte-level BPE, reused by GPT-3
    s.max_seq = max_seq;
    s.tied_embeddings = true;
    s.gated_mlp = false;
    s.learned_positions = true;
    s.biases = true;
    s.layer_norm = true;
    return s;
}

TransformerShape tiny_gpt(int layers, int hidden, int heads, int max_seq) {
    TransformerShape s = gpt2_style(layers, hidden, heads, max_seq);
    s.vocab = 8192;
    return s;
}

TransformerShape llama_style(int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int max_seq) {
    TransformerShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.ffn_hidden = ffn;
    s.vocab = vocab;
    s.max_seq = max_seq;
    s.tied_embeddings = false;
    s.gated_mlp = true;
    s.learned_positions = false;
    s.biases = false;
    s.layer_norm = false;
    return s;
}

const std::map<std::string, TransformerShape>& transformer_presets() {
    static const std::map<std::string, TransformerShape> presets{
        // Small GPT-2-shaped models for real runs on a laptop or a CI box (a validation on two
        // cores takes seconds): not published models, their shapes are smolcluster's own.
        {"gpt-tiny", tiny_gpt(4, 256, 4, 256)},
        {"gpt-mini", tiny_gpt(8, 512, 8, 512)},
        {"gpt2-small", gpt2_style(12, 768, 12, 1024)},
        {"gpt2-medium", gpt2_style(24, 1024, 16, 1024)},
        {"gpt2-large", gpt2_style(36, 1280, 20, 1024)},
        {"gpt2-xl", gpt2_style(48, 1600, 25, 1024)},
        {"gpt3-175b", gpt2_style(96, 12288, 96, 2048)},
        {"llama2-7b", llama_style(32, 4096, 32, 32, 11008, 32000, 4096)},
        {"llama3-8b", llama_style(32, 4096, 32, 8, 14336, 128256, 8192)},
    };
    return presets;
}

std::string join(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

/// The most layers a model may have (each is a block of every replica's graph).
constexpr int kMaxLayers = 100'000;

// ---------------------------------------------------------------------------------------------
// Parameter counts.

std::int64_t norm_params(const TransformerShape& m) { return m.layer_norm ? 2LL * m.hidden : m.hidden; }
std::int64_t kv_dim(const TransformerShape& m) {
    return static_cast<std::int64_t>(m.kv_heads) * (m.hidden / m.heads);
}
std::int64_t ffn_matrices(const TransformerShape& m) { return m.gated_mlp ? 3 : 2; }

/// Parameters of one transformer layer held by one of `t` tensor-parallel ranks. Megatron splits
/// the QKV and first MLP matrices by columns (with their biases) and the attention output and
/// second MLP matrices by rows; the row-parallel biases and the norms are replicated.
std::int64_t layer_params_per_rank(const TransformerShape& m, std::int64_t t) {
    // Checked: a hidden size near 2^31 makes h² alone pass 2^62.
    const char* what = "parameters of a transformer layer";
    const std::int64_t h = m.hidden, f = m.ffn_hidden, kv = kv_dim(m);
    const std::int64_t qkv_out = h + 2 * kv;
    std::int64_t split = checked_add(checked_add(checked_mul(qkv_out, h, what), checked_mul(h, h, what), what),
                                     checked_mul(checked_mul(ffn_matrices(m), h, what), f, what), what);  // weights
    std::int64_t replicated = 2 * norm_params(m);
    if (m.biases) {
        split = checked_add(split, qkv_out + (ffn_matrices(m) - 1) * f, what);  // column-parallel biases
        replicated += 2 * h;                                                   // attention output and MLP down biases
    }
    return split / t + replicated;
}

/// Megatron pads the vocabulary so the vocab-parallel embedding and head split evenly
/// (--make-vocab-size-divisible-by, default 128 × t). We pad only to a multiple of t: at t = 1
/// the published vocabulary, parameter counts and FLOP formulas stay exact, and the extra rows
/// (under t per rank) are negligible.
std::int64_t padded_vocab(const TransformerShape& m, std::int64_t t) { return (m.vocab + t - 1) / t * t; }

// ---------------------------------------------------------------------------------------------
// Blocks.

/// Everything the per-block formulas need, in int64 to keep s²·a·b products exact.
struct Dims {
    std::int64_t b, s, h, a, kv, f, v, t;  // v: padded vocabulary
    bool sp;
    std::int64_t e;  // bytes per element
    Recompute recompute;
    /// Tensors outside the tensor-parallel regions (norm inputs, residual stream, dropout masks
    /// after the row-parallel layers) are replicated on all t ranks unless sequence parallelism
    /// splits them along s (Korthikanti §4.2.2).
    std::int64_t rep(std::int64_t bytes) const { return sp ? bytes / t : bytes; }
};

Flops gemm_flops(double m, double n, double k) { return Flops(2.0 * m * n * k); }

Block embedding_block(const TransformerShape& m, const Dims& d) {
    const std::int64_t sbh = d.s * d.b * d.h;
    Block blk;
    blk.kind = Block::Kind::embedding;
    blk.index = 0;
    // Vocab-parallel token table; the position table (GPT-2) is replicated on every rank.
    blk.params = d.v / d.t * d.h + (m.learned_positions ? static_cast<std::int64_t>(m.max_seq) * d.h : 0);
    // A gather (and a position add): no GEMM, so no FLOPs are counted, as in Narayanan et al.
    blk.fwd = Flops(0);
    blk.bwd = Flops(0);
    blk.recompute = Flops(0);
    // Saved for backward: only the embedding dropout mask, 1 byte per element (Korthikanti §4.3).
    blk.activations = Bytes(d.rep(sbh));
    blk.output = Bytes(d.rep(sbh * d.e));
    // Gather (read the rows, write sbh), the position add (read 2, write 1) and dropout (read,
    // write, a 1-byte mask), on the sequence shard with sp.
    blk.fwd_kernels.push_back(stream_kernel(KernelName::embedding, KernelClass::elementwise, d.rep(2 * sbh * d.e)));
    if (m.learned_positions)
        blk.fwd_kernels.push_back(stream_kernel(KernelName::embedding, KernelClass::elementwise, d.rep(3 * sbh * d.e)));
    blk.fwd_kernels.push_back(stream_kernel(KernelName::bias_dropout_residual, KernelClass::elementwise, d.rep(2 * sbh * d.e + sbh)));
    // The vocab-parallel embedding sums partial lookups: one all-reduce (reduce-scatter with sp).
    blk.tp_collectives_fwd = d.t > 1 ? 1 : 0;
    blk.tp_bytes_per_collective = Bytes(sbh * d.e);
    return blk;
}

/// Forward FLOPs of one transformer layer on one rank: the GEMMs, 2mnk each (Narayanan et al.
/// 2021 §5.1). With kv = h and f = 4h this is (24·b·s·h² + 4·b·s²·h) / t.
Flops layer_fwd_flops(const Dims& d, std::int64_t mlp_matrices) {
    const double bs = static_cast<double>(d.b * d.s);
    Flops f = gemm_flops(bs, d.h + 2.0 * d.kv, d.h);                        // QKV projection
    f += gemm_flops(static_cast<double>(d.b * d.a) * d.s, d.s, d.h / d.a) * 2;  // scores and attention·V
    f += gemm_flops(bs, d.h, d.h);                                          // attention output
    f += gemm_flops(bs, d.f, d.h) * static_cast<double>(mlp_matrices);      // MLP
    return f / static_cast<double>(d.t);
}

/// The attention core (QKᵀ and attention·V), what selective recompute redoes: 4·b·s²·h / t.
Flops attention_core_flops(const Dims& d) {
    return Flops(4.0 * static_cast<double>(d.b) * d.s * d.s * d.h / static_cast<double>(d.t));
}

/// Bytes saved for backward by one layer on one rank, built from Korthikanti et al. 2022 §4.1
/// term by term (their 16-bit figures in parentheses). e-byte tensors scale with the dtype;
/// dropout masks stay 1 byte per element.
///   Attention (11sbh + 5as²b):
///     QKV input, the norm output        sbh·e  (2sbh)   replicated without sp
///     Q and K for QKᵀ                   s·b·(h + kv)·e  (4sbh)   split by t
///     softmax output                    a·s²·b·e  (2as²b)        split
///     softmax dropout mask              a·s²·b    (as²b)         split
///     dropout output, for attention·V   a·s²·b·e  (2as²b)        split
///     V                                 s·b·kv·e  (2sbh)         split
///     output projection input           sbh·e  (2sbh)            split
///     attention dropout mask            sbh       (sbh)          replicated without sp
///   MLP (19sbh with f = 4h):
///     first linear input                sbh·e  (2sbh)            replicated without sp
///     activation input and output       2·s·b·f·e  (16sbh)       split
///       gated (SwiGLU): gate, up and their product: 3·s·b·f·e
///     dropout mask                      sbh       (sbh)          replicated without sp
///   Two norm inputs                     2·sbh·e  (4sbh)          replicated without sp
/// Sum in 16-bit, kv = h, f = 4h: sbh(34 + 5as/h); with t and no sp: sbh(10 + 24/t + 5as/(ht));
/// with sp: sbh(34 + 5as/h)/t (Korthikanti Table 2). GQA shrinks only the K and V terms; a gated
/// MLP keeps one more f-wide tensor. Dropout masks are counted as in Megatron's GPT defaults
/// for every model, including Llama shapes.
/// Selective recompute drops the as²b terms (they are rebuilt from Q, K, V); full recompute
/// keeps only the layer input, sbh·e (/t with sp).
Bytes layer_activations(const Dims& d, std::int64_t mlp_matrices) {
    const std::int64_t sb = d.s * d.b, sbh = sb * d.h, e = d.e, t = d.t;
    if (d.recompute == Recompute::full) return Bytes(d.rep(sbh * e));
    std::int64_t bytes = 0;
    bytes += d.rep(sbh * e);                      // QKV input
    bytes += sb * (d.h + d.kv) * e / t;           // Q, K
    bytes += sb * d.kv * e / t;                   // V
    bytes += sbh * e / t;                         // output projection input
    bytes += d.rep(sbh);                          // attention dropout mask
    if (d.recompute != Recompute::selective) {
        const std::int64_t as2b = d.a * d.s * d.s * d.b;
        bytes += (2 * as2b * e + as2b) / t;       // softmax output, mask, dropout output
    }
    bytes += d.rep(sbh * e);                      // MLP input
    bytes += (mlp_matrices == 3 ? 3 : 2) * sb * d.f * e / t;  // activation function tensors
    bytes += d.rep(sbh);                          // MLP dropout mask
    bytes += d.rep(2 * sbh * e);                  // two norm inputs
    return Bytes(bytes);
}

/// The attention core of one layer on one rank, as Megatron-LM's eager path runs it
/// (megatron/core/transformer/dot_product_attention.py): the scores Q·Kᵀ as one batched GEMM
/// over the b·a/t heads (baddbmm), the fused scale-mask-softmax, attention dropout (read, write,
/// a 1-byte mask), the context P·V as a batched GEMM, and the permute of the context back to
/// [s, b, h/t] (a copy). Grouped-query attention repeats K and V per head, so the GEMMs are per
/// query head.
std::vector<Kernel> attention_core_kernels(const Dims& d) {
    const std::int64_t hd = d.h / d.a, heads = d.b * d.a / d.t, e = d.e;
    return {gemm_kernel(KernelName::scores, KernelClass::attention, d.s, d.s, hd, heads, static_cast<int>(e), false),
            softmax_kernel(heads * d.s, d.s, static_cast<int>(e)),
            stream_kernel(KernelName::softmax, KernelClass::attention, heads * d.s * d.s * (2 * e + 1)),
            gemm_kernel(KernelName::context, KernelClass::attention, d.s, hd, d.s, heads, static_cast<int>(e), false),
            stream_kernel(KernelName::context, KernelClass::attention, 2 * d.s * d.b * d.h / d.t * e)};
}

/// The forward kernels of one transformer layer on one tensor-parallel rank, in launch order
/// (Megatron-LM's TransformerLayer): norm, QKV projection (column-parallel, its bias added by a
/// separate kernel as ColumnParallelLinear does), rotary embedding on Q and K (RoPE models), the
/// attention core, the output projection (row-parallel), fused bias-dropout-add, norm, the MLP's
/// up projection (one GEMM for gate and up with SwiGLU), fused bias-activation, down projection,
/// bias-dropout-add. GEMMs cover b·s tokens (the all-gathered sequence with sp); norms and the
/// residual kernels run on the sequence shard with sp.
std::vector<Kernel> layer_kernels(const TransformerShape& m, const Dims& d, std::int64_t mlp_matrices) {
    const std::int64_t tok = d.b * d.s, e = d.e, ei = d.e;
    const int eb = static_cast<int>(e);
    const std::int64_t qkv = (d.h + 2 * d.kv) / d.t, up = (mlp_matrices - 1) * d.f / d.t, f_rank = d.f / d.t;
    std::vector<Kernel> k;
    const Kernel norm = stream_kernel(KernelName::norm, KernelClass::elementwise, d.rep(2 * tok * d.h * e));
    // Bias-dropout-add: read the projection output, the residual, write the sum, a 1-byte mask.
    const Kernel residual = stream_kernel(KernelName::bias_dropout_residual, KernelClass::elementwise,
                                          d.rep(3 * tok * d.h * e + tok * d.h));
    k.push_back(norm);
    k.push_back(gemm_kernel(KernelName::qkv, KernelClass::gemm, tok, qkv, d.h, 1, eb, true));
    if (m.biases) k.push_back(stream_kernel(KernelName::qkv, KernelClass::elementwise, 2 * tok * qkv * e));
    if (!m.learned_positions)  // RoPE rewrites Q and K
        k.push_back(stream_kernel(KernelName::qkv, KernelClass::elementwise, 2 * tok * (d.h + d.kv) / d.t * e));
    for (const Kernel& a : attention_core_kernels(d)) k.push_back(a);
    k.push_back(gemm_kernel(KernelName::attn_proj, KernelClass::gemm, tok, d.h, d.h / d.t, 1, eb, true));
    k.push_back(residual);
    k.push_back(norm);
    k.push_back(gemm_kernel(KernelName::mlp_up, KernelClass::gemm, tok, up, d.h, 1, eb, true));
    // Bias + activation (GeLU: read f, write f; SwiGLU: read gate and up, write f).
    k.push_back(stream_kernel(KernelName::activation, KernelClass::elementwise, (up + f_rank) * tok * ei));
    k.push_back(gemm_kernel(KernelName::mlp_down, KernelClass::gemm, tok, d.h, f_rank, 1, eb, true));
    k.push_back(residual);
    return k;
}

Block layer_block(const TransformerShape& m, const Dims& d, int index) {
    const std::int64_t mats = ffn_matrices(m);
    const std::int64_t sbh = d.s * d.b * d.h;
    Block blk;
    blk.kind = Block::Kind::transformer;
    blk.index = index;
    blk.params = layer_params_per_rank(m, d.t);
    blk.fwd = layer_fwd_flops(d, mats);
    blk.bwd = blk.fwd * 2.0;
    switch (d.recompute) {
    case Recompute::none: blk.recompute = Flops(0); break;
    case Recompute::selective: blk.recompute = attention_core_flops(d); break;
    case Recompute::full: blk.recompute = blk.fwd; break;
    }
    blk.activations = layer_activations(d, mats);
    blk.output = Bytes(d.rep(sbh * d.e));
    blk.fwd_kernels = layer_kernels(m, d, mats);
    switch (d.recompute) {
    case Recompute::none: break;
    case Recompute::selective: blk.recompute_kernels = attention_core_kernels(d); break;
    case Recompute::full: blk.recompute_kernels = blk.fwd_kernels; break;
    }
    // Megatron's f/g operators: one all-reduce after attention and one after the MLP (each a
    // reduce-scatter + all-gather pair with sp), over the full b·s·h tensor.
    blk.tp_collectives_fwd = d.t > 1 ? 2 : 0;
    blk.tp_bytes_per_collective = Bytes(sbh * d.e);
    return blk;
}

Block head_block(const TransformerShape& m, const Dims& d, int index) {
    const std::int64_t sb = d.s * d.b, sbh = sb * d.h;
    const std::int64_t v_rank = d.v / d.t;  // vocab columns on this rank
    Block blk;
    blk.kind = Block::Kind::head;
    blk.index = index;
    // With tied embeddings the projection is the embedding table, counted there once. A pipeline
    // strategy that puts the head on another stage than the embedding holds a copy of it there
    // (and all-reduces its gradient), as Megatron does.
    blk.params = norm_params(m) + (m.tied_embeddings ? 0 : v_rank * d.h);
    blk.fwd = gemm_flops(static_cast<double>(sb), static_cast<double>(v_rank), static_cast<double>(d.h));
    blk.bwd = blk.fwd * 2.0;
    blk.recompute = Flops(0);  // the head is outside the recomputed layers
    // Korthikanti §4.3: the final norm input and the projection input (sbh·e each, replicated
    // without sp) and the logits kept in fp32 for the cross-entropy (4·s·b·v/t bytes).
    blk.activations = Bytes(d.rep(2 * sbh * d.e) + 4 * sb * v_rank);
    blk.output = Bytes(4 * sb);  // per-token losses, fp32
    // Final norm, the logits GEMM (column-parallel over the vocabulary), then Megatron's
    // vocab-parallel cross-entropy on `output.float()`: the cast (read e, write 4 bytes per
    // logit), then max, exp-sum and the normalised probabilities kept for backward (read the fp32
    // logits three times, write them once: 16 bytes per logit).
    blk.fwd_kernels = {stream_kernel(KernelName::norm, KernelClass::elementwise, d.rep(2 * sbh * d.e)),
                       gemm_kernel(KernelName::logits, KernelClass::gemm, sb, v_rank, d.h, 1, static_cast<int>(d.e), true),
                       stream_kernel(KernelName::loss, KernelClass::elementwise, sb * v_rank * (d.e + 4)),
                       stream_kernel(KernelName::loss, KernelClass::elementwise, sb * v_rank * 16)};
    // The column-parallel projection's input needs one collective per pass over b·s·h: its
    // gradient is all-reduced in backward (all-gathered input in forward with sp). The forward
    // cross-entropy reductions (max, sum of exponentials, target logit: 3 × b·s fp32) are tiny
    // and folded into this one.
    blk.tp_collectives_fwd = d.t > 1 ? 1 : 0;
    blk.tp_bytes_per_collective = Bytes(sbh * d.e);
    return blk;
}

void check_tp(const std::string& name, const TransformerShape& m, int tp) {
    const std::string t = "tp " + std::to_string(tp);
    if (tp < 1) fail_input("tensor-parallel size must be at least 1, got " + std::to_string(tp));
    if (m.heads % tp != 0)
        fail_input(t + " does not divide the " + std::to_string(m.heads) + " attention heads of " + name);
    if (m.kv_heads % tp != 0)
        fail_input(t + " does not divide the " + std::to_string(m.kv_heads) + " key-value heads of " + name);
    if (m.ffn_hidden % tp != 0)
        fail_input(t + " does not divide the ffn hidden size " + std::to_string(m.ffn_hidden) + " of " + name);
}

void check_shape(const std::string& name, const TransformerShape& m) {
    const std::pair<const char*, int> sizes[] = {{"layers", m.layers},         {"hidden", m.hidden},
                                                 {"heads", m.heads},           {"kv_heads", m.kv_heads},
                                                 {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab},
                                                 {"seq", m.max_seq}};
    for (const auto& [what, n] : sizes) {
        if (n < 1) fail_input("a positive " + std::string(what), std::to_string(n), {name, "", ""});
    }
    // Each layer is a block of the op graph; no published model has a thousand.
    if (m.layers > kMaxLayers)
        fail_input("at most " + std::to_string(kMaxLayers) + " layers", std::to_string(m.layers), {name, "", ""});
    if (m.hidden % m.heads != 0)
        fail_input("hidden size " + std::to_string(m.hidden) + " is not a multiple of the " +
                       std::to_string(m.heads) + " attention heads",
                   {name, "", ""});
    if (m.heads % m.kv_heads != 0)
        fail_input("the " + std::to_string(m.heads) + " attention heads are not a multiple of the " +
                       std::to_string(m.kv_heads) + " key-value heads",
                   {name, "", ""});
}

// ---------------------------------------------------------------------------------------------
// JSON readers.

int positive_int(const JsonView& j, const std::string& key) {
    const std::int64_t n = j.positive_integer(key);
    if (n > std::numeric_limits<int>::max()) j.fail_member(key, "a size below 2^31", std::to_string(n));
    return static_cast<int>(n);
}

/// The default ffn width 4 · hidden, which must itself be a size below 2^31.
int four_times(const JsonView& j, const std::string& key, int hidden) {
    if (hidden > std::numeric_limits<int>::max() / 4)
        j.fail_member(key, "a hidden size below 2^29 (the default ffn width is 4 × hidden)", std::to_string(hidden));
    return 4 * hidden;
}

Model own_transformer(const JsonView& j, const std::string& name) {
    j.expect_only({"kind", "name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq",
                   "tied_embeddings", "gated_mlp", "biases", "norm", "positions"});
    TransformerShape m;
    m.layers = positive_int(j, "layers");
    m.hidden = positive_int(j, "hidden");
    m.heads = positive_int(j, "heads");
    m.kv_heads = j.has("kv_heads") ? positive_int(j, "kv_heads") : m.heads;
    m.ffn_hidden = j.has("ffn_hidden") ? positive_int(j, "ffn_hidden") : four_times(j, "hidden", m.hidden);
    m.vocab = positive_int(j, "vocab");
    m.max_seq = positive_int(j, "seq");
    m.tied_embeddings = j.boolean_or("tied_embeddings", true);
    m.gated_mlp = j.boolean_or("gated_mlp", false);
    m.biases = j.boolean_or("biases", true);
    const std::string norm = j.string_or("norm", "layernorm");
    if (norm != "layernorm" && norm != "rmsnorm") j.fail_member("norm", "\"layernorm\" or \"rmsnorm\"", describe_json(j.raw()["norm"]));
    m.layer_norm = norm == "layernorm";
    const std::string positions = j.string_or("positions", "learned");
    if (positions != "learned" && positions != "rope")
        j.fail_member("positions", "\"learned\" or \"rope\"", describe_json(j.raw()["positions"]));
    m.learned_positions = positions == "learned";
    try {
        return Model::transformer(j.string_or("name", name), m);
    } catch (const Error& e) {
        throw e.with_context(j.context());
    }
}

Model own_layer_list(const JsonView& j, const std::string& name) {
    j.expect_only({"kind", "name", "input_bytes_per_sample", "layers"});
    const std::int64_t input = j.positive_integer("input_bytes_per_sample");
    if (input > std::numeric_limits<int>::max())
        j.fail_member("input_bytes_per_sample", "a size below 2 GiB", std::to_string(input));
    const JsonView list = j.at("layers");
    if (list.size() == 0) list.fail("a non-empty array of layers", "an empty array");
    static const std::vector<std::string> kinds{"conv", "fc", "pool", "norm", "act", "add", "dropout", "other"};
    std::vector<LayerSpec> layers;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const JsonView l = list.at(i);
        l.expect_only({"name", "kind", "params", "fwd_flops", "activations", "output"});
        LayerSpec spec;
        spec.name = l.string("name");
        spec.kind = l.string("kind");
        if (std::find(kinds.begin(), kinds.end(), spec.kind) == kinds.end()) {
            l.fail_member("kind", "one of " + join(kinds) + did_you_mean(spec.kind, kinds),
                          describe_json(l.raw()["kind"]));
        }
        spec.params = l.integer("params");
        if (spec.params < 0) l.fail_member("params", "a non-negative parameter count", std::to_string(spec.params));
        const double flops = l.number("fwd_flops");
        if (flops < 0) l.fail_member("fwd_flops", "a non-negative FLOP count", describe_json(l.raw()["fwd_flops"]));
        spec.fwd_flops = Flops(flops);
        spec.activations = l.bytes("activations");
        spec.output = l.bytes("output");
        layers.push_back(std::move(spec));
    }
    return Model::layer_list(j.string_or("name", name), std::move(layers), static_cast<int>(input));
}

/// HuggingFace GPT-2 config.json (transformers.GPT2Config). Other keys are ignored.
Model hf_gpt2(const JsonView& j, const std::string& name) {
    TransformerShape m;
    m.layers = positive_int(j, "n_layer");
    m.hidden = positive_int(j, "n_embd");
    m.heads = positive_int(j, "n_head");
    m.kv_heads = m.heads;
    // n_inner: null or absent means 4 · n_embd (GPT2Config's documented default).
    m.ffn_hidden = j.has("n_inner") && !j.raw()["n_inner"].is_null() ? positive_int(j, "n_inner") : four_times(j, "n_embd", m.hidden);
    m.vocab = positive_int(j, "vocab_size");
    m.max_seq = positive_int(j, "n_positions");
    m.tied_embeddings = j.boolean_or("tie_word_embeddings", true);
    m.gated_mlp = false;
    m.learned_positions = true;
    m.biases = true;
    m.layer_norm = true;
    try {
        return Model::transformer(name, m);
    } catch (const Error& e) {
        throw e.with_context(j.context());
    }
}

/// HuggingFace Llama config.json (transformers.LlamaConfig; Mistral and others share the keys).
/// attention_bias / mlp_bias are not modelled: Llama has neither.
Model hf_llama(const JsonView& j, const std::string& name) {
    TransformerShape m;
    m.layers = positive_int(j, "num_hidden_layers");
    m.hidden = positive_int(j, "hidden_size");
    m.heads = positive_int(j, "num_attention_heads");
    // Absent or null: no grouped-query attention (LlamaConfig's default).
    m.kv_heads = j.has("num_key_value_heads") && !j.raw()["num_key_value_heads"].is_null()
                     ? positive_int(j, "num_key_value_heads")
                     : m.heads;
    m.ffn_hidden = positive_int(j, "intermediate_size");
    m.vocab = positive_int(j, "vocab_size");
    m.max_seq = positive_int(j, "max_position_embeddings");
    m.tied_embeddings = j.boolean_or("tie_word_embeddings", false);
    m.gated_mlp = true;
    m.learned_positions = false;
    m.biases = false;
    m.layer_norm = false;
    try {
        return Model::transformer(name, m);
    } catch (const Error& e) {
        throw e.with_context(j.context());
    }
}

}  // namespace

int dtype_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

const char* to_string(DType d) {
    switch (d) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
    }
    return "?";
}

DType parse_dtype(const std::string& text, const ErrorContext& where) {
    if (text == "bf16") return DType::bf16;
    if (text == "fp16") return DType::fp16;
    if (text == "fp32") return DType::fp32;
    fail_input("bf16, fp16 or fp32", "\"" + text + "\"", where);
}

const char* to_string(Recompute r) {
    switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    }
    return "?";
}

Recompute parse_recompute(const std::string& text, const ErrorContext& where) {
    if (text == "none") return Recompute::none;
    if (text == "selective") return Recompute::selective;
    if (text == "full") return Recompute::full;
    fail_input("none, selective or full", "\"" + text + "\"", where);
}

Model Model::transformer(std::string name, TransformerShape shape) {
    check_shape(name, shape);
    Model m;
    m.name_ = std::move(name);
    m.transformer_ = shape;
    // The parameter count, and with it every per-layer weight product, fits in 64 bits.
    try {
        (void)m.parameters();
    } catch (const Error& e) {
        throw e.with_context({m.name_, "", ""});
    }
    return m;
}

Model Model::layer_list(std::string name, std::vector<LayerSpec> layers, int input_bytes_per_sample) {
    if (layers.empty()) fail_input("model " + name + " has no layers");
    Model m;
    m.name_ = std::move(name);
    m.layers_ = std::move(layers);
    m.input_bytes_per_sample_ = input_bytes_per_sample;
    return m;
}

const TransformerShape& Model::shape() const {
    if (!transformer_) throw Error(ErrorKind::internal, "model " + name_ + " is a layer list, not a transformer");
    return *transformer_;
}

std::int64_t Model::parameters() const {
    if (!transformer_) {
        std::int64_t n = 0;
        for (const auto& l : layers_) n = checked_add(n, l.params, "parameters of the model");
        return n;
    }
    const TransformerShape& m = *transformer_;
    const std::int64_t h = m.hidden;
    const char* what = "parameters of the model";
    const std::int64_t table = checked_mul(m.vocab, h, what);
    std::int64_t n = table;                                                                  // token embedding
    if (m.learned_positions) n = checked_add(n, checked_mul(m.max_seq, h, what), what);      // position table
    n = checked_add(n, checked_mul(m.layers, layer_params_per_rank(m, 1), what), what);
    n = checked_add(n, norm_params(m), what);                                                // final norm
    if (!m.tied_embeddings) n = checked_add(n, table, what);                                 // output projection
    return n;
}

int Model::default_seq() const { return transformer_ ? transformer_->max_seq : 1; }

std::vector<Block> Model::blocks(const Workload& w) const {
    if (w.micro_batch < 1) fail_input("micro-batch must be at least 1, got " + std::to_string(w.micro_batch));
    if (w.seq < 0) fail_input("sequence length must be positive, got " + std::to_string(w.seq));
    const std::int64_t e = dtype_bytes(w.dtype);
    std::vector<Block> out;

    if (!transformer_) {
        if (w.tp != 1)
            fail_input("tensor parallelism is not modelled for layer-list model " + name_ + " (tp " +
                       std::to_string(w.tp) + ")");
        // Layer specs are per sample in fp32: scale by the micro-batch and the dtype.
        const double scale = static_cast<double>(e) / 4.0;
        const std::int64_t b = w.micro_batch;
        for (std::size_t i = 0; i < layers_.size(); ++i) {
            const LayerSpec& l = layers_[i];
            Block blk;
            blk.kind = Block::Kind::layer;
            blk.index = static_cast<int>(i);
            blk.params = l.params;
            blk.fwd = l.fwd_flops * static_cast<double>(b);
            blk.bwd = blk.fwd * 2.0;
            blk.recompute = w.recompute == Recompute::full ? blk.fwd : Flops(0);
            // Full recompute keeps only each layer's input.
            const Bytes input = i > 0 ? layers_[i - 1].output : Bytes(input_bytes_per_sample_);
            blk.activations = (w.recompute == Recompute::full ? input : l.activations) * (static_cast<double>(b) * scale);
            blk.output = l.output * (static_cast<double>(b) * scale);
            // One GEMM with W = params weights applied fwd/(2·params) times per sample: m is the
            // number of output positions (1 for fc, H·W for a conv, as im2col lowers it); n·k =
            // params, split evenly as the spec does not give the two dimensions. Then one
            // memory-bound pass that reads the input and writes the output (norm, activation,
            // pooling, or the GEMM's own epilogue).
            const int eb = static_cast<int>(e);
            if (l.params > 0 && l.fwd_flops.count() > 0) {
                const double positions = l.fwd_flops.count() / (2.0 * static_cast<double>(l.params));
                const auto side = static_cast<std::int64_t>(std::sqrt(static_cast<double>(l.params)) + 0.5);
                const std::int64_t rows =
                    std::max<std::int64_t>(1, checked_round(positions * static_cast<double>(b), "output positions of a micro-batch"));
                Kernel g = gemm_kernel(KernelName::layer, KernelClass::gemm, rows, std::max<std::int64_t>(1, side),
                                       std::max<std::int64_t>(1, side), 1, eb, true);
                g.flops = blk.fwd.count();  // exact: the spec's FLOPs, not the rounded shape's
                blk.fwd_kernels.push_back(g);
            } else if (l.fwd_flops.count() > 0) {
                blk.fwd_kernels.push_back(stream_kernel(KernelName::layer, KernelClass::elementwise, 0, blk.fwd.count()));
            }
            blk.fwd_kernels.push_back(stream_kernel(KernelName::layer, KernelClass::elementwise,
                                                    ((input + l.output) * (static_cast<double>(b) * scale)).count()));
            if (w.recompute == Recompute::full) blk.recompute_kernels = blk.fwd_kernels;
            out.push_back(blk);
        }
        return out;
    }

    const TransformerShape& m = *transformer_;
    check_tp(name_, m, w.tp);
    const int seq = w.seq == 0 ? m.max_seq : w.seq;
    if (m.learned_positions && seq > m.max_seq)
        fail_input("sequence length " + std::to_string(seq) + " exceeds the " + std::to_string(m.max_seq) +
                   " learned positions of " + name_);
    Dims d{};
    d.b = w.micro_batch;
    d.s = seq;
    d.h = m.hidden;
    d.a = m.heads;
    d.kv = kv_dim(m);
    d.f = m.ffn_hidden;
    d.t = w.tp;
    d.v = padded_vocab(m, d.t);
    d.sp = w.sequence_parallel && w.tp > 1;
    d.e = e;
    d.recompute = w.recompute;
    // Every per-block product below is at most 64 × (tokens × the widest matrix) or 16 × the
    // attention scores (a·s²·b): check those two fit in 64 bits, once, instead of each product.
    {
        const std::string what = "the micro-batch of " + std::to_string(d.b) + " × " + std::to_string(d.s) +
                                 " tokens of " + name_;
        const std::int64_t tokens = checked_mul(d.b, d.s, what.c_str());
        const std::int64_t widest = std::max({d.h + 2 * d.kv, 3 * d.f, d.v});
        checked_mul(checked_mul(tokens, widest, what.c_str()), 64, what.c_str());
        checked_mul(checked_mul(checked_mul(d.a, d.s, what.c_str()), tokens, what.c_str()), 16, what.c_str());
    }

    out.reserve(static_cast<std::size_t>(m.layers) + 2);
    out.push_back(embedding_block(m, d));
    for (int i = 0; i < m.layers; ++i) out.push_back(layer_block(m, d, i + 1));
    out.push_back(head_block(m, d, m.layers + 1));
    return out;
}

Flops Model::flops_per_iteration(std::int64_t global_batch, int seq, Recompute r) const {
    // FLOPs are linear in the batch: work out one sample and scale, so huge batches stay exact.
    Workload w;
    w.micro_batch = 1;
    w.seq = seq;
    w.recompute = r;
    Flops per_sample;
    for (const Block& blk : blocks(w)) per_sample += blk.fwd + blk.bwd + blk.recompute;
    return per_sample * static_cast<double>(global_batch);
}

std::vector<std::string> model_preset_names() {
    std::vector<std::string> names;
    for (const auto& [name, shape] : transformer_presets()) names.push_back(name);  // std::map: sorted
    for (const auto& name : cnn_preset_names()) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
}

Model model_preset(const std::string& name) {
    const auto& presets = transformer_presets();
    const auto it = presets.find(name);
    if (it != presets.end()) return Model::transformer(name, it->second);
    if (auto cnn = cnn_preset(name)) return std::move(*cnn);
    const std::vector<std::string> names = model_preset_names();
    fail_input("unknown model preset '" + name + "'" + did_you_mean(name, names) +
               "; presets: " + join(names));
}

Model model_from_json(const JsonView& json, const std::string& name) {
    json.expect_object();
    if (json.has("kind")) {
        const std::string kind = json.string("kind");
        if (kind == "transformer") return own_transformer(json, name);
        if (kind == "layers") return own_layer_list(json, name);
        json.fail_member("kind", "\"transformer\" or \"layers\"", describe_json(json.raw()["kind"]));
    }
    if (json.has("n_layer") || json.has("n_embd")) return hf_gpt2(json, name);
    if (json.has("num_hidden_layers") || json.has("hidden_size")) return hf_llama(json, name);
    json.fail("smolcluster's model JSON (with \"kind\") or a HuggingFace config.json with GPT-2 keys "
              "(n_layer, n_embd, …) or Llama keys (num_hidden_layers, hidden_size, …)",
              "an object with neither");
}

Model load_model(const std::string& spec) {
    const auto& presets = transformer_presets();
    if (presets.count(spec) || cnn_preset(spec)) return model_preset(spec);
    std::error_code ec;
    // A path (it exists, or names a folder or a .json file) is read as one: a missing file is
    // "no such file", not an unknown preset.
    const bool path = !spec.empty() && (std::filesystem::exists(spec, ec) || spec.find('/') != std::string::npos ||
                                        spec.ends_with(".json"));
    if (path) {
        const Json doc = load_json_file(spec);
        return model_from_json(JsonView(doc, spec), std::filesystem::path(spec).stem().string());
    }
    const std::vector<std::string> names = model_preset_names();
    fail_input("unknown model '" + spec + "'" + did_you_mean(spec, names) +
               "; presets: " + join(names) + "; or give a path to a JSON file");
}

}  // namespace smol
