// Transformer arithmetic: parameters, model FLOPs, activation bytes and kernels per block.
//
// Notation follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models"): s sequence, b micro-batch, h hidden, a attention heads, t tensor-parallel
// size, v vocabulary, e bytes per element of the training dtype, f the dense MLP's width. Beyond
// GPT: hd and vd are the query/key and value widths per head (hd = h/a for GPT), kvh the
// key-value heads (grouped-query attention), so the projections are q = a·hd, k = kvh·hd,
// v = kvh·vd wide and the attention output o = a·vd. A mixture of experts has E experts of width
// fe, each token going to K of them; ep ranks each hold E/ep of them.
//
// Megatron-LM's tensor parallelism splits the QKV, up and gate projections by columns (by heads)
// and the output and down projections by rows; norms, routers and MLA's down-projections are
// replicated ("duplicated": Megatron-LM d98e8a6, megatron/core/transformer/multi_latent_attention.py:527).
// Experts are split like the dense MLP (expert tensor parallelism = tp, Megatron's default:
// megatron/core/parallel_state.py:872 `expert_tensor_parallel_size = tensor_model_parallel_size`).
#include "core/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "core/error.hpp"

namespace smol::detail {
namespace {

using I = std::int64_t;

/// The most layers a model may have (each is a block of every replica's graph).
constexpr int kMaxLayers = 100'000;

I ceil_div(I a, I b) { return (a + b - 1) / b; }

I norm_params(const TransformerShape& m) { return m.layer_norm ? 2LL * m.hidden : m.hidden; }
I ffn_matrices(const TransformerShape& m) { return m.gated_mlp ? 3 : 2; }
bool decoder_layer(const TransformerShape& m, int i) { return m.encoder_layers > 0 && i >= m.encoder_layers; }

// ---------------------------------------------------------------------------------------------
// Parameters, per tensor-parallel rank (t) and, for routed experts, per expert-parallel rank (ep).

struct Split {
    I split = 0;       // divided over the t tensor ranks
    I replicated = 0;  // held whole by every rank
    I on(I t) const { return split / t + replicated; }
};

/// One attention block (self- or T5's cross-attention): its projections, biases and norms.
///  * Multi-head / grouped-query (LlamaAttention, Qwen2Attention, GemmaAttention, …): q_proj
///    h → a·hd, k_proj and v_proj h → kvh·hd and kvh·vd, o_proj a·vd → h.
///  * MLA (DeepseekV2Attention / DeepseekV3Attention): q_a_proj h → q_lora, q_a_layernorm,
///    q_b_proj q_lora → a·hd (or q_proj h → a·hd without q_lora); kv_a_proj_with_mqa
///    h → kv_lora + rope, kv_a_layernorm, kv_b_proj kv_lora → a·(nope + vd); o_proj a·vd → h.
///    attention_bias puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj only.
Split attention_params(const TransformerShape& m) {
    const I h = m.hidden, a = m.heads, kvh = m.kv_heads, hd = m.q_head_dim(), vd = m.value_head_dim();
    Split p;
    if (m.mla.kv_lora_rank > 0) {
        const I ql = m.mla.q_lora_rank, kvl = m.mla.kv_lora_rank, rope = m.mla.rope_head_dim;
        if (ql > 0) {
            p.replicated += h * ql + ql;  // q_a_proj (duplicated) and q_a_layernorm (RMSNorm)
            p.split += ql * a * hd;       // q_b_proj
            if (m.qkv_bias) p.replicated += ql;
        } else {
            p.split += h * a * hd;        // q_proj
        }
        p.replicated += h * (kvl + rope) + kvl;  // kv_a_proj_with_mqa and kv_a_layernorm
        if (m.qkv_bias) p.replicated += kvl + rope;
        p.split += kvl * a * (hd - rope + vd);   // kv_b_proj
    } else {
        p.split += h * (a * hd + kvh * (hd + vd));
        if (m.qkv_bias) p.split += a * hd + kvh * (hd + vd);
    }
    p.split += a * vd * h;                        // o_proj
    if (m.attn_out_bias) p.replicated += h;       // a row-parallel bias is added once, after the reduction
    if (m.qk_norm) p.replicated += 2 * hd;        // Qwen3's q_norm and k_norm: RMSNorm(head_dim)
    if (m.attention_sinks) p.split += a;          // GPT-OSS: self.sinks = nn.Parameter(torch.empty(heads))
    return p;
}

/// One routed expert: the gated or plain MLP at width fe, with GPT-OSS's biases
/// (gate_up_proj_bias 2·fe, down_proj_bias h).
Split expert_params(const TransformerShape& m) {
    const I h = m.hidden, fe = m.moe.ffn_hidden, mats = ffn_matrices(m);
    Split p;
    p.split = mats * h * fe;
    if (m.moe.expert_biases) {
        p.split += (mats - 1) * fe;
        p.replicated += h;
    }
    return p;
}

/// The MLP half of layer i: the dense MLP, or the router, the routed experts (all E, or only K
/// with `active`) and the shared experts of an MoE layer. `experts_on_rank` is how many routed
/// experts count (E/ep for a rank's share).
Split mlp_params(const TransformerShape& m, int i, I experts_on_rank) {
    const I h = m.hidden, mats = ffn_matrices(m);
    Split p;
    if (!m.moe_layer(i)) {
        p.split = mats * h * m.ffn_hidden;
        if (m.mlp_bias) {
            p.split += (mats - 1) * m.ffn_hidden;
            p.replicated += h;
        }
        return p;
    }
    p.replicated += h * m.moe.experts + (m.moe.router_bias ? m.moe.experts : 0);  // the router (gate)
    const Split one = expert_params(m);
    p.split += experts_on_rank * one.split;
    p.replicated += experts_on_rank * one.replicated;
    // Shared experts: DeepseekV2MoE builds one MLP of width n_shared × moe_intermediate; Qwen2-MoE
    // one of shared_expert_intermediate_size plus shared_expert_gate, Linear(h → 1, bias=False).
    p.split += mats * h * static_cast<I>(m.moe.shared_experts) * m.moe.shared_ffn_hidden;
    if (m.moe.shared_expert_gate) p.replicated += h;
    return p;
}

/// Layer i's parameters on one rank, `experts_on_rank` routed experts counted.
Split layer_params(const TransformerShape& m, int i, I experts_on_rank) {
    Split p = attention_params(m);
    const Split mlp = mlp_params(m, i, experts_on_rank);
    p.split += mlp.split;
    p.replicated += mlp.replicated + m.norms_per_layer * norm_params(m);
    if (decoder_layer(m, i)) {  // T5 decoder: cross-attention (EncDecAttention) and its layer norm
        const Split cross = attention_params(m);
        p.split += cross.split;
        p.replicated += cross.replicated + norm_params(m);
    }
    // T5: the first layer of each stack holds relative_attention_bias, Embedding(buckets, heads).
    if (m.relative_attention_buckets > 0 && (i == 0 || i == m.encoder_layers))
        p.split += static_cast<I>(m.relative_attention_buckets) * m.heads;
    return p;
}

/// The expert parameters of layer i on one rank (0 for dense layers).
I layer_expert_params(const TransformerShape& m, int i, I t, I ep) {
    if (!m.moe_layer(i)) return 0;
    return expert_params(m).on(t) * (m.moe.experts / ep);
}

/// The embedding's parameters on one of t ranks, its token table `v` rows (padded) long.
I embedding_params(const TransformerShape& m, I v, I t) {
    I p = v / t * m.hidden;  // vocab-parallel token table
    if (m.positions == Positions::learned) p += static_cast<I>(m.max_seq + m.position_offset) * m.hidden;
    if (m.embedding_norm) p += norm_params(m);  // BLOOM's word_embeddings_layernorm
    return p;
}

I final_norm_params(const TransformerShape& m) {
    if (!m.final_norm) return 0;
    return (m.encoder_layers > 0 ? 2 : 1) * norm_params(m);  // T5: encoder and decoder final_layer_norm
}

// ---------------------------------------------------------------------------------------------
// Blocks.

/// Everything the per-block formulas need, in int64 to keep s²·a·b products exact.
struct Dims {
    I b, s, h, a, kvh, hd, vd, f, v, t, e;
    /// Context parallelism: s is this rank's share of the sequence, seq / cp; `seq` the whole
    /// sequence, whose keys its queries attend to.
    I cp = 1, seq = 0;
    CpComm cp_comm = CpComm::p2p;
    bool sp;
    Recompute recompute;
    RecomputeModules modules;   // what selective recompute redoes
    Attention attention;
    AttentionBackend attention_backend = AttentionBackend::flash;
    bool qk_layer_scaling = false;
    LossKernels loss = LossKernels::megatron;
    Fp8Recipe fp8 = Fp8Recipe::none;
    I q() const { return a * hd; }    // query width
    I k() const { return kvh * hd; }  // key width
    I vw() const { return kvh * vd; } // value width
    I o() const { return a * vd; }    // attention output width
    I tok() const { return b * s; }
    /// Selective recompute drops module m's tensors in forward and redoes it in backward.
    bool redo(RecomputeModule m) const { return recompute == Recompute::selective && modules.has(m); }
    /// Tensors outside the tensor-parallel regions (norm inputs, residual stream, dropout masks
    /// after the row-parallel layers) are replicated on all t ranks unless sequence parallelism
    /// splits them along s (Korthikanti §4.2.2).
    I rep(I bytes) const { return sp ? bytes / t : bytes; }
};

Flops gemm_flops(double m, double n, double k) { return Flops(2.0 * m * n * k); }

/// A fused attention kernel of `d`'s backend, `causal` when its mask skips blocks (what its rate
/// depends on: topologies/attention_rates.hpp).
Kernel fused_attention(const Dims& d, I heads, I q, I kv, I head_dim, bool causal) {
    Kernel k = flash_kernel(heads, q, std::max<I>(1, kv), std::max<I>(1, head_dim), static_cast<int>(d.e), false, causal);
    k.backend = d.attention_backend;
    return k;
}

/// The bytes of one context-parallel rank's Q, K, V and attention output: its b · s/cp tokens,
/// a/t query heads and kvh/t key-value heads.
struct CpTensors {
    I q, k, v, o;
};
CpTensors cp_tensors(const Dims& d) {
    const I tokens = d.b * d.s;
    return {tokens * d.a / d.t * d.hd * d.e, tokens * d.kvh / d.t * d.hd * d.e, tokens * d.kvh / d.t * d.vd * d.e,
            tokens * d.a / d.t * d.vd * d.e};
}

/// The attention core of one layer on one of cp context-parallel ranks, as Transformer Engine's
/// ring attention runs it (AttnFuncWithCPAndKVP2P, flash or cuDNN fused attention only): the
/// sequence is cut into 2·cp chunks and rank r holds chunks r and 2·cp − 1 − r, so that under
/// the causal mask every rank has the same work; in cp steps its 2·(seq / 2cp) queries meet the
/// keys and values of rank r − i (its own at step 0). Step 0 is the causal diagonal of its two
/// chunks, every later step half the blocks (both query chunks against one key chunk, or one
/// query chunk against both): each step covers 1/cp of the rank's query-key pairs, which are
/// 1/cp of the whole sequence's (causal_pairs over the full sequence; s × keys without a mask).
/// Each step is one fused-attention kernel over the rank's queries and one chunk of keys, then
/// the correction that folds its output into the running output by the log-sum-exp (read the
/// step's output and log-sum-exp, read and write the fp32 accumulator).
/// With all-gathered keys and values (AttnFuncWithCPAndKVAllGather) the core is one kernel per
/// local chunk, its queries against the keys before it: chunks r and 2·cp − 1 − r together see
/// the same pairs on every rank, each kernel is priced at half of them, over the mean key length.
/// With all-to-alls (AttnFuncWithCPAndQKVOA2A) the core is one kernel over the whole sequence and
/// 1/cp of the rank's heads, the same pairs; around it, flash_attn_a2a_communicate's copies
/// (context_parallel.py:387-536 at TransformerEngine d0067d0): each of Q, K and V is permuted
/// heads-first before its all-to-all (movedim().contiguous(), :473) and its sequence chunks put
/// back in order after it (index_select, :435); the output is reordered before its all-to-all
/// (:489) and permuted back after it (:532). The first three copies close the kernels before the
/// core, the last opens those after it.
std::vector<Kernel> context_parallel_core(const Dims& d, I keys, bool causal) {
    const I heads = d.b * d.a / d.t, e = d.e;
    const double pairs = causal ? causal_pairs(d.seq, keys) / static_cast<double>(d.cp)
                                : static_cast<double>(d.s) * static_cast<double>(keys);
    const I d_mean = std::max<I>(1, (d.hd + d.vd) / 2);
    if (d.cp_comm == CpComm::all_to_all) {
        const auto [q, k, v, o] = cp_tensors(d);
        auto copy = [](I bytes) { return stream_kernel(KernelName::cp_permute, KernelClass::attention, 2 * bytes); };
        Kernel core = fused_attention(d, heads / d.cp, d.seq, std::min(keys, d.seq), d_mean, causal);
        core.flops = 2.0 * pairs * static_cast<double>(d.hd + d.vd) * static_cast<double>(heads);   // the rank's pairs
        return {copy(q), copy(k), copy(v), copy(q), copy(k), copy(v), core, copy(o), copy(o)};
    }
    if (d.cp_comm == CpComm::all_gather) {
        const I chunk = std::max<I>(1, d.s / 2);
        // Each kernel's mask (causal_bottom_right: context_parallel.py:3078-3079 at
        // TransformerEngine d0067d0) cuts only its last chunk × chunk block out of
        // chunk × keys: at the mean key length seq/2 that is 1/(2·cp) of its blocks, so it runs
        // at the rate of an unmasked kernel (a causal square's imbalance is not there).
        Kernel k = fused_attention(d, heads, chunk, std::min(keys, d.seq / 2), d_mean, false);
        k.flops = pairs * static_cast<double>(d.hd + d.vd) * static_cast<double>(heads);   // half the pairs, 4·d FLOPs each
        return {k, k};
    }
    // Step 0 is the "diagonal" section: the rank's two chunks against themselves under the causal
    // mask; the later steps' blocks are whole and unmasked, the "lower-triangle" (both query chunks
    // against the first key chunk) or the "upper-triangle" (the second query chunk against both):
    // cp_p2p_fwd_fused_attn (context_parallel.py:854-884 at TransformerEngine d0067d0) keeps the
    // mask for the diagonal and passes "no_mask" for the triangles. Every step covers 2·chunk²
    // pairs; every later step is priced as the lower triangle (all queries, half the keys).
    Kernel step = fused_attention(d, heads, d.s, d.s / 2, d_mean, false);
    step.flops = 2.0 * pairs / static_cast<double>(d.cp) * static_cast<double>(d.hd + d.vd) * static_cast<double>(heads);
    Kernel first = fused_attention(d, heads, d.s, d.s, d_mean, causal);
    first.flops = step.flops;
    const I out = heads * d.s * d.vd;   // the rank's attention output, elements
    const Kernel correction = stream_kernel(KernelName::context, KernelClass::attention, out * (e + 8) + heads * d.s * 4);
    std::vector<Kernel> k;
    for (I i = 0; i < d.cp; ++i) {
        k.push_back(i == 0 ? first : step);
        k.push_back(correction);
    }
    return k;
}

/// Whether Megatron's fused softmax takes this rank's scores (core/model.cpp has the rule).
bool megatron_fused_softmax(const Dims& d, bool causal) {
    return smol::megatron_fused_softmax(d.b * d.a / d.t, d.s, d.s, static_cast<int>(d.e), causal);
}

/// The attention core of one layer on one rank, one kernel list per implementation.
///  * eager, as Megatron-LM's unfused path runs it (megatron/core/transformer/dot_product_attention.py):
///    the scores Q·Kᵀ as one batched GEMM over the b·a/t heads (baddbmm), the fused
///    scale-mask-softmax where its kernel takes the shape (megatron_fused_softmax), else
///    forward_torch_softmax (fused_softmax.py:299-341): the scores cast to fp32 (Megatron's
///    softmax_in_fp32, on by default for 16-bit runs), multiplied by the layer number when
///    apply_query_key_layer_scaling is on (Workload::qk_layer_scaling), masked in place
///    (attention_mask_func's masked_fill_, megatron/core/transformer/utils.py:54-56), softmax in fp32 and
///    the cast back: five passes, each over the a·s²·b/t scores, where the fused kernel makes one;
///    then attention dropout (read, write, a 1-byte mask), the context P·V as a
///    batched GEMM, and the permute of the context back to [s, b, a·vd/t] (a copy). A sliding
///    window or a causal mask masks the full s × s matrix; it does not shrink it (HuggingFace's
///    eager_attention_forward multiplies all keys too). Grouped-query attention repeats K and V
///    per head, so the GEMMs are per query head.
///  * flash: one FlashAttention-2 kernel (flash_kernel) over the pairs the mask keeps
///    (`causal`: causal_pairs; else s × keys, T5's encoder and cross-attention). Query/key and
///    value widths differ under MLA (192 and 128): the kernel runs at their mean, which gives the
///    exact FLOPs 2·pairs·(hd + vd) and the exact Q, K, V, O traffic.
std::vector<Kernel> attention_core_kernels(const Dims& d, I keys, bool causal) {
    const I heads = d.b * d.a / d.t, e = d.e;
    const int eb = static_cast<int>(e);
    if (d.cp > 1) return context_parallel_core(d, keys, causal);
    if (d.attention == Attention::flash) {
        Kernel k = fused_attention(d, heads, d.s, keys, (d.hd + d.vd) / 2, causal);
        const double pairs = causal ? causal_pairs(d.s, keys) : static_cast<double>(d.s) * static_cast<double>(keys);
        k.flops = 2.0 * pairs * static_cast<double>(d.hd + d.vd) * static_cast<double>(heads);
        return {k};
    }
    std::vector<Kernel> k{gemm_kernel(KernelName::scores, KernelClass::attention, d.s, d.s, d.hd, heads, eb, false)};
    const I scores = heads * d.s * d.s;
    if (megatron_fused_softmax(d, causal)) {
        k.push_back(softmax_kernel(heads * d.s, d.s, eb));
    } else {
        const bool cast = e < 4;
        if (cast) k.push_back(stream_kernel(KernelName::cast, KernelClass::attention, scores * (e + 4)));
        if (d.qk_layer_scaling) k.push_back(stream_kernel(KernelName::scale, KernelClass::attention, scores * 8));
        k.push_back(stream_kernel(KernelName::mask, KernelClass::attention, scores * 8));
        k.push_back(softmax_kernel(heads * d.s, d.s, 4));
        if (cast) k.push_back(stream_kernel(KernelName::cast, KernelClass::attention, scores * (4 + e)));
    }
    k.push_back(stream_kernel(KernelName::softmax, KernelClass::attention, scores * (2 * e + 1)));
    k.push_back(gemm_kernel(KernelName::context, KernelClass::attention, d.s, d.vd, d.s, heads, eb, false));
    k.push_back(stream_kernel(KernelName::context, KernelClass::attention, 2 * d.s * d.b * d.o() / d.t * e));
    return k;
}

/// Model FLOPs of the attention core (Narayanan et al. 2021: QKᵀ and attention·V over every key
/// the window allows, 2·b·a·s·keys·(hd + vd) / t; the causal mask's saving is not counted).
Flops attention_core_flops(const Dims& d, I keys) {
    return Flops(2.0 * static_cast<double>(d.b * d.a) * static_cast<double>(d.s) * static_cast<double>(keys) *
                 static_cast<double>(d.hd + d.vd) / static_cast<double>(d.t));
}

/// Bytes of the attention core kept for backward on one rank: eager keeps the softmax output,
/// its dropout mask and the dropout output over the full s × s matrix (Korthikanti's 5as²b in
/// 16-bit: 2as²b + as²b + 2as²b); flash keeps only the log-sum-exp, one fp32 per query and head
/// (FlashAttention-2, Dao 2023 Algorithm 1: "store the logsumexp L"), its output being the
/// output projection's saved input. Selective recompute keeps neither: the core is redone from
/// Q, K and V in backward (Megatron's core_attn checkpoint, the default of --recompute-modules, megatron/core/transformer/attention.py:392
/// `checkpoint_core_attention`, :446 `_checkpointed_attention_forward`).
/// The unfused softmax (forward_torch_softmax) keeps its fp32 output instead: 4as²b + as²b + 2as²b
/// in 16-bit runs; its casts, scale and in-place mask keep nothing (the mask is the shared s × s
/// causal mask).
I attention_core_activations(const Dims& d, bool causal) {
    if (d.redo(RecomputeModule::core_attn)) return 0;
    if (d.attention == Attention::flash) return 4 * d.a * d.s * d.b / d.t;
    const I as2b = d.a * d.s * d.s * d.b;
    const I softmax_out = megatron_fused_softmax(d, causal) ? d.e : 4;
    return as2b * (softmax_out + 1 + d.e) / d.t;
}

struct LayerPlan {
    I keys;              // keys per query of its self-attention
    bool causal;         // decoder self-attention (T5's encoder attends both ways)
    bool cross;          // T5 decoder: cross-attention over the encoder output
    bool moe;
    // MoE bookkeeping on this rank:
    I local_experts = 0;
    I routed = 0;        // token copies this rank's experts process (after the tensor-group gather)
    I routed_balanced = 0;
    I tpe = 0;           // tokens per local expert
    double dispatch_factor = 1;  // capacity factor, or 1
};

/// A linear layer's GEMM (m tokens of k features through a k × n weight, `batch` times): with
/// FP8, Transformer Engine's Linear (transformer_engine/pytorch/module/linear.py _Linear.forward):
/// the input cast to FP8 with the transpose its weight gradient reads, then the FP8 GEMM, whose
/// output is in the training dtype.
/// A linear right after a norm is TE's LayerNormLinear (Megatron core's TE layer spec makes the
/// norm before the QKV and first MLP projections part of them, TELayerNormColumnParallelLinear):
/// under delayed scaling the norm kernel writes the FP8 copy itself, no cast after it
/// (module/layernorm_linear.py:244-268 at NVIDIA/TransformerEngine d0067d0, with_quantized_norm);
/// its output is the FP8 copy and its transpose, or under sequence parallelism the copy alone,
/// whose transpose TE makes after the gather (Float8Quantizer.supports_only_rowwise_all_gather,
/// :230-232). Under current scaling (tensorwise) TE's norm writes its 16-bit output and finds its
/// amax in the same pass, then the cast follows (FUSED_NORM_AMAX_FP8, csrc/extensions/
/// normalization.cpp:93-119; FULLY_FUSED is the delayed case): no amax pass of its own; the cast
/// runs on the norm's tokens (the shard, before the gather, under sp). `fusable`: false where the
/// spec keeps the norm a module of its own (MLA's input norm, TENorm, before its down projections).
void linear(std::vector<Kernel>& k, const Dims& d, KernelName name, I m, I n, I kk, I batch = 1, bool fusable = true) {
    const int eb = static_cast<int>(d.e);
    if (d.fp8 == Fp8Recipe::none) {
        k.push_back(gemm_kernel(name, KernelClass::gemm, m, n, kk, batch, eb, true));
        return;
    }
    const bool after_norm = fusable && !k.empty() && k.back().name == KernelName::norm && k.back().op == KernelOp::stream;
    if (after_norm && d.fp8 == Fp8Recipe::delayed) {
        Kernel& norm = k.back();   // reads e bytes an element, wrote e
        norm.bytes = norm.bytes / (2 * d.e) * (d.e + (d.sp ? 1 : 2));
    } else if (after_norm) {
        const I elements = k.back().bytes / (2 * d.e);
        k.push_back(quantize_kernels(elements, eb, !d.sp, d.fp8).back());   // the cast, without its amax pass
    } else {
        for (const Kernel& q : quantize_kernels(m * kk * batch, eb, true, d.fp8)) k.push_back(q);
    }
    k.push_back(fp8_gemm_kernel(name, KernelClass::gemm, m, n, kk, batch, eb, true, d.fp8));
}

/// The modules of Megatron's --recompute-modules each forward kernel of a layer belongs to
/// (RecomputeModule bits; 0: none), parallel to the kernels. A kernel can sit in two: the
/// experts' activation is moe_act's and moe's.
using ModuleTags = std::vector<std::uint8_t>;
/// Tags kernels [from, end) of `k` as `module`'s too.
void tag(const std::vector<Kernel>& k, ModuleTags& tags, std::size_t from, RecomputeModule module) {
    tags.resize(k.size(), 0);
    for (std::size_t i = from; i < k.size(); ++i) tags[i] |= static_cast<std::uint8_t>(module);
}

/// The attention projections (before the core) of one attention block, as kernels.
void add_projections(std::vector<Kernel>& k, const TransformerShape& m, const Dims& d, bool cross, ModuleTags& tags) {
    const I tok = d.tok(), e = d.e, t = d.t;
    const I local = d.sp ? tok / t : tok;  // rows a replicated (duplicated) GEMM sees
    if (m.mla.kv_lora_rank > 0 && !cross) {
        const I ql = m.mla.q_lora_rank, kvl = m.mla.kv_lora_rank, rope = m.mla.rope_head_dim;
        // Megatron core's MLA spec: the input norm a TENorm of its own, the q and kv norms inside
        // their up projections (TELayerNormColumnParallelLinear).
        // mla_up_proj checkpoints the up projections (with their norms) and RoPE.
        if (ql > 0) {
            linear(k, d, KernelName::qkv, local, ql, d.h, 1, false);
            const std::size_t up = k.size();
            k.push_back(stream_kernel(KernelName::norm, KernelClass::elementwise, 2 * local * ql * e));
            linear(k, d, KernelName::qkv, tok, d.q() / t, ql);
            tag(k, tags, up, RecomputeModule::mla_up_proj);
        } else {
            linear(k, d, KernelName::qkv, tok, d.q() / t, d.h, 1, false);
        }
        linear(k, d, KernelName::qkv, local, kvl + rope, d.h);
        const std::size_t up = k.size();
        k.push_back(stream_kernel(KernelName::norm, KernelClass::elementwise, 2 * local * kvl * e));
        linear(k, d, KernelName::qkv, tok, d.a * (d.hd - rope + d.vd) / t, kvl);
        // RoPE on the rope parts of the queries and the shared key.
        k.push_back(stream_kernel(KernelName::qkv, KernelClass::elementwise, 2 * tok * (d.a * rope / t + rope) * e));
        tag(k, tags, up, RecomputeModule::mla_up_proj);
        return;
    }
    const I qkv = (d.q() + d.k() + d.vw()) / t;
    if (cross) {  // queries from the decoder, keys and values from the encoder output (the norm before: a TENorm)
        linear(k, d, KernelName::qkv, tok, d.q() / t, d.h, 1, false);
        linear(k, d, KernelName::qkv, tok, (d.k() + d.vw()) / t, d.h);
    } else {
        linear(k, d, KernelName::qkv, tok, qkv, d.h);
    }
    // ColumnParallelLinear adds its bias in a separate kernel (read and write the output).
    if (m.qkv_bias) k.push_back(stream_kernel(KernelName::qkv, KernelClass::elementwise, 2 * tok * qkv * e));
    if (m.positions == Positions::rope && !cross)  // RoPE rewrites Q and K
        k.push_back(stream_kernel(KernelName::qkv, KernelClass::elementwise, 2 * tok * (d.q() + d.k()) / t * e));
    if (m.qk_norm) k.push_back(stream_kernel(KernelName::norm, KernelClass::elementwise, 2 * tok * (d.q() + d.k()) / t * e));
}

/// Bytes per element of a linear layer's input kept for its weight gradient: with FP8, the
/// column-wise FP8 copy Transformer Engine saves instead of the 16-bit tensor (linear.py keeps
/// `inputmat` after its cast; LayerNormLinear keeps `ln_out` as cast, column-wise only).
I linear_input_bytes(const Dims& d) { return d.fp8 != Fp8Recipe::none ? 1 : d.e; }

/// Saved for backward by one attention block (before the core's own tensors), per rank: its
/// input (the norm output) and the projections' saved inputs and outputs (Korthikanti §4.1:
/// QKV input 2sbh, Q and K 4sbh, V 2sbh, the output projection's input 2sbh, in 16-bit). With
/// FP8 the two linear inputs are FP8 (linear_input_bytes); flash attention still keeps its
/// 16-bit output O for its own backward, beside the output projection's FP8 copy of it.
I attention_activations(const TransformerShape& m, const Dims& d, bool causal) {
    const I tok = d.tok(), e = d.e, t = d.t, in = linear_input_bytes(d);
    const bool mla = m.mla.kv_lora_rank > 0;
    // The norm output; MLA's input norm is a module of its own, dropped by layernorm recompute
    // (the other models' is fused into the QKV projection: RecomputeModule::layernorm).
    I bytes = mla && d.redo(RecomputeModule::layernorm) ? 0 : d.rep(tok * d.h * in);  // QKV input (the norm output)
    if (mla) {
        const I local = d.sp ? tok / t : tok;
        const I ql = m.mla.q_lora_rank, kvl = m.mla.kv_lora_rank;
        bytes += 2 * local * (ql + kvl) * e;               // the latents' norm inputs and outputs
        if (!d.redo(RecomputeModule::mla_up_proj)) {       // mla_up_proj drops what the core reads
            bytes += tok * 2 * d.q() * e / t;              // Q, K after the up-projections and RoPE
            bytes += tok * d.o() * e / t;                  // V
        }
    } else {
        bytes += tok * (d.q() + d.k()) * e / t;            // Q, K
        bytes += tok * d.vw() * e / t;                     // V
        if (m.qk_norm) bytes += tok * (d.q() + d.k()) * e / t;  // q_norm and k_norm inputs
    }
    const I o_bytes = d.fp8 == Fp8Recipe::none ? e : d.attention == Attention::flash ? e + in : in;
    bytes += tok * d.o() * o_bytes / t;                    // output projection input (flash: its O)
    bytes += d.rep(tok * d.h);                             // attention dropout mask
    return bytes + attention_core_activations(d, causal);
}

/// The forward kernels of layer `lp` on one tensor-parallel rank, in launch order (Megatron-LM's
/// TransformerLayer): norm, projections, the attention core, the output projection, fused
/// bias-dropout-add; T5's cross-attention likewise; then norm and the MLP (up projection with
/// gate and up in one GEMM, fused bias-activation, down projection) or the MoE half (router,
/// top-k, permutation, shared experts | the received tokens sorted by local expert, the local
/// experts, sorted back | un-permutation and combine), and
/// bias-dropout-add. GEMMs cover b·s tokens (the all-gathered sequence with sp); norms and the
/// residual kernels run on the sequence shard with sp. Returns the split points of an MoE layer;
/// `core_at` becomes the index of the self-attention core's first kernel; `tags` each kernel's
/// module (ModuleTags).
std::pair<int, int> layer_kernels(std::vector<Kernel>& k, const TransformerShape& m, const Dims& d, const LayerPlan& lp,
                                  int& core_at, ModuleTags& tags) {
    const I tok = d.tok(), e = d.e, t = d.t, mats = ffn_matrices(m);
    const int eb = static_cast<int>(e);
    const Kernel norm = stream_kernel(KernelName::norm, KernelClass::elementwise, d.rep(2 * tok * d.h * e));
    // Bias-dropout-add: read the projection output, the residual, write the sum, a 1-byte mask.
    const Kernel residual = stream_kernel(KernelName::bias_dropout_residual, KernelClass::elementwise,
                                          d.rep(3 * tok * d.h * e + tok * d.h));
    auto attention = [&](bool cross) {
        k.push_back(norm);
        // MLA's input norm is a TENorm of its own (gpt_layer_specs.py:336); the others are
        // fused into the QKV projection (TELayerNormColumnParallelLinear).
        if (m.mla.kv_lora_rank > 0 && !cross) tag(k, tags, k.size() - 1, RecomputeModule::layernorm);
        add_projections(k, m, d, cross, tags);
        if (!cross) core_at = static_cast<int>(k.size());
        const std::size_t core = k.size();
        for (const Kernel& a : attention_core_kernels(d, cross ? d.s : lp.keys, cross ? false : lp.causal)) k.push_back(a);
        tag(k, tags, core, RecomputeModule::core_attn);
        linear(k, d, KernelName::attn_proj, tok, d.h, d.o() / t);
        if (m.norms_per_layer >= 4) k.push_back(norm);  // Gemma 2's post_attention_layernorm
        k.push_back(residual);
    };
    attention(false);
    if (lp.cross) attention(true);
    // A parallel residual with one shared norm (Falcon-7B) feeds the MLP from the same norm output.
    const std::size_t mlp = k.size();   // a dense MLP's checkpoint holds its fused norm
    if (m.norms_per_layer != 1) k.push_back(norm);
    // An MoE layer's pre-MLP norm is a TENorm of its own (gpt_layer_specs.py:336).
    if (lp.moe && m.norms_per_layer != 1) tag(k, tags, mlp, RecomputeModule::layernorm);
    if (!lp.moe) {
        const I up = (mats - 1) * d.f / t, f_rank = d.f / t;
        linear(k, d, KernelName::mlp_up, tok, up, d.h);
        // Bias + activation (GeLU: read f, write f; SwiGLU: read gate and up, write f).
        k.push_back(stream_kernel(KernelName::activation, KernelClass::elementwise, (up + f_rank) * tok * e));
        linear(k, d, KernelName::mlp_down, tok, d.h, f_rank);
        tag(k, tags, mlp, RecomputeModule::mlp);
        if (m.norms_per_layer >= 4) k.push_back(norm);  // Gemma 2's post_feedforward_layernorm
        k.push_back(residual);
        tags.resize(k.size(), 0);
        return {0, 0};
    }
    const I local = d.sp ? tok / t : tok, E = m.moe.experts, K = m.moe.top_k;
    const I copies = static_cast<I>(std::ceil(static_cast<double>(local * K) * lp.dispatch_factor));
    const std::size_t moe_from = k.size();   // the MoE layer's checkpoint: all up to the residual
    // Router: logits over the experts (a replicated GEMM on the rank's tokens), then softmax and
    // top-k in fp32 (read the logits, write fp32 probabilities), then the permutation that copies
    // each token to its K experts' slots (read b·s·h, write K copies).
    k.push_back(gemm_kernel(KernelName::router, KernelClass::gemm, local, E, d.h, 1, eb, true));
    k.push_back(stream_kernel(KernelName::activation, KernelClass::elementwise, local * E * (e + 4)));
    k.push_back(stream_kernel(KernelName::other, KernelClass::elementwise, (local + copies) * d.h * e));
    const I shared = static_cast<I>(m.moe.shared_experts) * m.moe.shared_ffn_hidden / t;
    if (shared > 0) {
        const I up = (mats - 1) * shared;
        const std::size_t from = k.size();
        linear(k, d, KernelName::mlp_up, tok, up, d.h);
        k.push_back(stream_kernel(KernelName::activation, KernelClass::elementwise, (up + shared) * tok * e));
        linear(k, d, KernelName::mlp_down, tok, d.h, shared);
        tag(k, tags, from, RecomputeModule::shared_experts);
    }
    if (m.moe.shared_expert_gate) k.push_back(gemm_kernel(KernelName::router, KernelClass::gemm, local, 1, d.h, 1, eb, true));
    const int dispatch_at = static_cast<int>(k.size());
    // A rank holding several experts sorts the tokens it received (and their fp32 probabilities)
    // by local expert, and restores their order before the combine: Megatron's alltoall
    // dispatcher's "Permutation 2" and "Unpermutation 2" (moe/token_dispatcher.py:757-789 and
    // :803-823 at NVIDIA/Megatron-LM d98e8a6, sort_chunks_by_idxs; with a capacity the same copy as
    // a transpose made contiguous), one pass each.
    const bool sort = lp.local_experts > 1;
    if (sort) k.push_back(stream_kernel(KernelName::other, KernelClass::elementwise, 2 * lp.routed * (d.h * e + 4)));
    // The local experts as grouped GEMMs (Megatron's GroupedMLP / TEGroupedMLP): one problem per
    // local expert, over the tokens routed to it.
    const I fe = m.moe.ffn_hidden / t, up = (mats - 1) * fe;
    linear(k, d, KernelName::mlp_up, lp.tpe, up, d.h, lp.local_experts);
    k.push_back(stream_kernel(KernelName::activation, KernelClass::elementwise, (up + fe) * lp.tpe * lp.local_experts * e));
    tag(k, tags, k.size() - 1, RecomputeModule::moe_act);
    linear(k, d, KernelName::mlp_down, lp.tpe, d.h, fe, lp.local_experts);
    if (sort) k.push_back(stream_kernel(KernelName::other, KernelClass::elementwise, 2 * lp.routed * d.h * e));
    const int combine_at = static_cast<int>(k.size());
    // Un-permutation: read the K expert outputs and their fp32 probabilities, write the weighted sum.
    k.push_back(stream_kernel(KernelName::other, KernelClass::elementwise, copies * d.h * e + copies * 4 + local * d.h * e));
    tag(k, tags, moe_from, RecomputeModule::moe);
    k.push_back(residual);
    tags.resize(k.size(), 0);
    return {dispatch_at, combine_at};
}

/// Bytes layer `lp` keeps for backward on one rank, Korthikanti et al. 2022 §4.1 term by term
/// (their 16-bit figures in parentheses). e-byte tensors scale with the dtype; dropout masks
/// stay 1 byte per element.
///   Attention (11sbh + 5as²b): attention_activations and attention_core_activations.
///   MLP (19sbh with f = 4h):
///     first linear input                sbh·e  (2sbh)            replicated without sp
///     activation input and output       2·s·b·f·e  (16sbh)       split
///       gated (SwiGLU): gate, up and their product: 3·s·b·f·e
///     dropout mask                      sbh       (sbh)          replicated without sp
///   Norm inputs                         2·sbh·e  (4sbh)          replicated without sp (one per norm)
/// Sum in 16-bit, kv = h, f = 4h, eager: sbh(34 + 5as/h); with t and no sp: sbh(10 + 24/t +
/// 5as/(ht)); with sp: sbh(34 + 5as/h)/t (Korthikanti Table 2). Flash replaces 5as/h by the
/// log-sum-exp, 4as·b bytes. GQA shrinks only the K and V terms; a gated MLP keeps one more f-wide
/// tensor. Dropout masks are counted as in Megatron's GPT defaults for every model.
/// An MoE layer keeps, instead of the MLP's tensors: the router input (the norm output), the
/// fp32 routing probabilities (b·s·E·4), the K token copies each expert reads (routed·h·e), the
/// experts' activation tensors (routed·2 or 3·fe/t·e), the expert outputs the weighted combine
/// needs for the probabilities' gradient (K·b·s·h·e on the rank's shard), the shared experts'
/// tensors, and the dropout mask.
/// Full recompute keeps only the layer input, sbh·e (/t with sp).
I layer_activations(const TransformerShape& m, const Dims& d, const LayerPlan& lp) {
    const I tok = d.tok(), sbh = tok * d.h, e = d.e, t = d.t, mats = ffn_matrices(m);
    if (d.recompute == Recompute::full) return d.rep(sbh * e);
    I bytes = attention_activations(m, d, lp.causal);
    if (lp.cross) bytes += attention_activations(m, d, false) + d.rep(sbh * e);  // and its norm input
    // A linear input is kept in FP8 under FP8 (linear_input_bytes): the MLP's input and the down
    // projection's (the activation function's output); the activation function's inputs stay 16-bit.
    const I in = linear_input_bytes(d), act = (mats == 3 ? 2 : 1) * e + in;
    // Selective recompute of modules (RecomputeModule): a dense MLP's checkpoint keeps its input
    // alone, the pre-MLP norm's (Transformer Engine fuses the norm into the first linear; a shared
    // norm's output, with one norm per layer, is the input the checkpoint keeps); layernorm
    // recompute drops an MoE layer's norm output; moe_act the experts' activation output (the down
    // projection's input); shared_experts the shared experts' tensors.
    const bool mlp_redone = !lp.moe && d.redo(RecomputeModule::mlp);
    const bool norm_output_dropped = lp.moe ? d.redo(RecomputeModule::layernorm) : mlp_redone && m.norms_per_layer != 1;
    if (!norm_output_dropped) bytes += d.rep(sbh * in);      // MLP input (the norm output)
    if (!lp.moe) {
        if (!mlp_redone) bytes += act * tok * d.f / t;       // activation function tensors
    } else {
        const I local = d.sp ? tok / t : tok, fe = m.moe.ffn_hidden / t;
        const I copies = static_cast<I>(std::ceil(static_cast<double>(local * m.moe.top_k) * lp.dispatch_factor));
        // moe checkpoints the layer after its norm: of its tensors only its input (the norm
        // output, above) stays.
        if (d.redo(RecomputeModule::moe)) return bytes + d.rep(sbh) + d.rep(static_cast<I>(m.norms_per_layer) * sbh * e);
        bytes += local * m.moe.experts * 4;                  // routing probabilities
        bytes += lp.routed * d.h * in;                       // expert inputs
        const I expert_act = d.redo(RecomputeModule::moe_act) ? act - in : act;
        bytes += lp.routed * expert_act * fe;                // expert activation tensors
        bytes += copies * d.h * e;                           // expert outputs for the weighted combine
        const I shared = static_cast<I>(m.moe.shared_experts) * m.moe.shared_ffn_hidden / t;
        if (!d.redo(RecomputeModule::shared_experts)) bytes += act * tok * shared;  // shared experts' activation tensors
    }
    bytes += d.rep(sbh);                                     // MLP dropout mask
    bytes += d.rep(static_cast<I>(m.norms_per_layer) * sbh * e);  // norm inputs
    return bytes;
}

Block embedding_block(const TransformerShape& m, const Dims& d) {
    const I sbh = d.s * d.b * d.h;
    Block blk;
    blk.kind = Block::Kind::embedding;
    blk.index = 0;
    // Vocab-parallel token table; the position table (GPT-2, OPT) and BLOOM's embedding norm are
    // replicated on every rank.
    blk.params = embedding_params(m, d.v, d.t);
    // A gather (and a position add): no GEMM, so no FLOPs are counted, as in Narayanan et al.
    // Saved for backward: the embedding dropout mask, 1 byte per element (Korthikanti §4.3), and
    // the norm's input for BLOOM.
    blk.activations = Bytes(d.rep(sbh) + (m.embedding_norm ? d.rep(sbh * d.e) : 0));
    blk.output = Bytes(d.rep(sbh * d.e));
    // Gather (read the rows, write sbh), the position add (read 2, write 1), the norm, and
    // dropout (read, write, a 1-byte mask), on the sequence shard with sp.
    blk.fwd_kernels.push_back(stream_kernel(KernelName::embedding, KernelClass::elementwise, d.rep(2 * sbh * d.e)));
    if (m.positions == Positions::learned)
        blk.fwd_kernels.push_back(stream_kernel(KernelName::embedding, KernelClass::elementwise, d.rep(3 * sbh * d.e)));
    if (m.embedding_norm)
        blk.fwd_kernels.push_back(stream_kernel(KernelName::norm, KernelClass::elementwise, d.rep(2 * sbh * d.e)));
    blk.fwd_kernels.push_back(stream_kernel(KernelName::bias_dropout_residual, KernelClass::elementwise, d.rep(2 * sbh * d.e + sbh)));
    // The vocab-parallel embedding sums partial lookups: one all-reduce (reduce-scatter with sp).
    blk.tp_collectives_fwd = d.t > 1 ? 1 : 0;
    blk.tp_bytes_per_collective = Bytes(sbh * d.e);
    return blk;
}

/// Everything layer_block reads of the layer index i, besides the block's index itself: the keys
/// it attends (a sliding window or full attention), whether it is a decoder layer (causal
/// attention and T5's cross-attention), whether it routes to experts, and whether it holds a
/// stack's relative_attention_bias (layer_params). Layers of one variant have one block.
struct LayerVariant {
    int keys = 0;
    bool decoder = false, moe = false, stack_first = false;
    bool operator==(const LayerVariant&) const = default;
};

LayerVariant layer_variant(const TransformerShape& m, int i, int s) {
    return {m.attended_keys(i, s), decoder_layer(m, i), m.moe_layer(i),
            m.relative_attention_buckets > 0 && (i == 0 || i == m.encoder_layers)};
}

Block layer_block(const TransformerShape& m, const Dims& d, const Workload& w, int i) {
    LayerPlan lp{};
    lp.keys = m.attended_keys(i, static_cast<int>(d.seq));
    lp.causal = m.encoder_layers == 0 || decoder_layer(m, i);
    lp.cross = decoder_layer(m, i);
    lp.moe = m.moe_layer(i);
    const I sbh = d.s * d.b * d.h;
    if (lp.moe) {
        const I E = m.moe.experts, K = m.moe.top_k;
        lp.local_experts = E / w.ep;
        lp.dispatch_factor = w.capacity_factor > 0 ? w.capacity_factor : 1.0;
        const double load = w.capacity_factor > 0 ? w.capacity_factor : w.expert_imbalance;
        // Every rank's experts see, balanced, K copies of b·s tokens: the EP group's tokens spread
        // over its E/ep experts (ep ranks × b·s/t tokens × K × (E/ep)/E each), gathered over the
        // tensor group.
        lp.routed_balanced = d.tok() * K;
        lp.routed = static_cast<I>(std::ceil(static_cast<double>(lp.routed_balanced) * load));
        lp.tpe = std::max<I>(1, ceil_div(lp.routed, lp.local_experts));
    }
    Block blk;
    blk.kind = Block::Kind::transformer;
    blk.index = i + 1;
    blk.params = layer_params(m, i, lp.moe ? m.moe.experts / w.ep : 0).on(d.t);
    int core_at = 0;
    ModuleTags tags;
    const auto [dispatch_at, combine_at] = layer_kernels(blk.fwd_kernels, m, d, lp, core_at, tags);
    // Model FLOPs: the weight GEMMs as launched, with the experts at balanced routing (K copies
    // per token: the capacity's padding and an imbalance are not useful work), plus the core.
    // (Plain copies: a lambda cannot capture structured bindings before C++20, and clang refuses.)
    const int experts_from = dispatch_at, experts_to = combine_at;
    auto expert = [&](std::size_t k) { return lp.moe && static_cast<int>(k) >= experts_from && static_cast<int>(k) < experts_to; };
    auto model_flops = [&](std::size_t k) {
        const Kernel& kn = blk.fwd_kernels[k];
        if (kn.op != KernelOp::gemm || !kn.weight) return Flops(0);
        return Flops(expert(k) ? kn.flops * static_cast<double>(lp.routed_balanced) / static_cast<double>(lp.tpe * lp.local_experts)
                               : kn.flops);
    };
    Flops f;
    for (std::size_t k = 0; k < blk.fwd_kernels.size(); ++k) f += model_flops(k);
    f += attention_core_flops(d, lp.keys);
    if (lp.cross) f += attention_core_flops(d, d.s);
    blk.fwd = f;
    blk.bwd = blk.fwd * 2.0;
    bool fp8_experts = false;
    for (std::size_t k = 0; k < blk.fwd_kernels.size(); ++k) {
        const Kernel& kn = blk.fwd_kernels[k];
        if (kn.fp8 == Fp8Recipe::none || !kn.weight) continue;
        blk.fp8_params += kn.k * kn.n * kn.batch;
        fp8_experts = fp8_experts || expert(k);
    }
    const int attention_collectives = lp.cross ? 2 : 1;
    int redo_dispatch = -1, redo_combine = -1;
    switch (d.recompute) {
        case Recompute::none: blk.recompute = Flops(0); break;
        case Recompute::selective:
            // The selected modules' kernels in forward order (T5's cross-attention core is a
            // core_attn too); model FLOPs: the cores as counted above, the modules' weight GEMMs.
            for (std::size_t k = 0; k < blk.fwd_kernels.size(); ++k) {
                if ((d.modules.bits & tags[k]) == 0) continue;
                // The experts' all-to-alls come again with moe: where its kernels reach them.
                if (expert(k) && redo_dispatch < 0) redo_dispatch = static_cast<int>(blk.recompute_kernels.size());
                if (lp.moe && static_cast<int>(k) == combine_at) redo_combine = static_cast<int>(blk.recompute_kernels.size());
                blk.recompute_kernels.push_back(blk.fwd_kernels[k]);
                blk.recompute += model_flops(k);
            }
            if (!d.redo(RecomputeModule::moe)) redo_dispatch = redo_combine = -1;   // moe_act alone: no all-to-all
            if (d.redo(RecomputeModule::core_attn)) {
                blk.recompute += attention_core_flops(d, lp.keys);
                if (lp.cross) blk.recompute += attention_core_flops(d, d.s);
            }
            // The dense MLP's checkpoint holds its row-parallel linear's all-reduce (or the
            // reduce-scatter and all-gather pair with sp).
            if (!lp.moe && d.redo(RecomputeModule::mlp) && d.t > 1) blk.tp_collectives_recompute = 1;
            break;
        case Recompute::full:
            blk.recompute = blk.fwd;
            blk.recompute_kernels = blk.fwd_kernels;
            if (d.t > 1) blk.tp_collectives_recompute = lp.moe ? 0 : attention_collectives + 1;
            break;
    }
    blk.activations = Bytes(layer_activations(m, d, lp));
    blk.output = Bytes(d.rep(sbh * d.e));
    // Megatron's f/g operators: one all-reduce after attention (and after T5's cross-attention)
    // and one after the MLP (each a reduce-scatter + all-gather pair with sp), over the full
    // b·s·h tensor. An MoE layer's MLP half communicates in its token dispatcher instead.
    blk.tp_bytes_per_collective = Bytes(sbh * d.e);
    if (d.cp > 1) {
        // Each step's block: K and V of one rank's share of the sequence, kvh/t heads (TE sends
        // them as one tensor; grouped-query attention sends the key-value heads, not the queries').
        ContextPass c;
        c.comm = d.cp_comm;
        c.core_at = core_at;
        switch (d.cp_comm) {
            case CpComm::p2p: c.steps = static_cast<int>(d.cp), c.per_step = 2; break;
            case CpComm::all_gather: c.steps = 2, c.per_step = 1; break;
            // After the three permutes before the all-to-alls (context_parallel_core): the three
            // reorders, the core and the output's reorder.
            case CpComm::all_to_all: c.core_at += 3, c.steps = 1, c.per_step = 5; break;
        }
        if (d.redo(RecomputeModule::core_attn)) {
            c.recompute_core_at = 0;
            for (int k = 0; k < c.core_at; ++k) c.recompute_core_at += (d.modules.bits & tags[static_cast<std::size_t>(k)]) != 0;
        }
        const CpTensors x = cp_tensors(d);
        c.kv_bytes = Bytes(x.k + x.v);
        c.k_bytes = Bytes(x.k);
        c.q_bytes = Bytes(x.q);
        c.out_bytes = Bytes(x.o);
        blk.cp = c;
    }
    if (lp.moe) {
        MoePass p;
        p.dispatch_at = dispatch_at;
        p.combine_at = combine_at;
        p.recompute_dispatch_at = redo_dispatch;
        p.recompute_combine_at = redo_combine;
        const I local = d.sp ? d.tok() / d.t : d.tok();
        p.dispatch_bytes = Bytes(static_cast<I>(std::ceil(static_cast<double>(local * m.moe.top_k) * lp.dispatch_factor)) *
                                 d.h * d.e);
        p.tp_gather_bytes = Bytes(lp.routed * d.h * d.e);
        p.attention_tp_collectives = d.t > 1 ? attention_collectives : 0;
        p.expert_params = layer_expert_params(m, i, d.t, w.ep);
        // The routed experts' weight matrices (expert_params less GPT-OSS's biases).
        if (fp8_experts) p.expert_fp8_params = Split{ffn_matrices(m) * d.h * m.moe.ffn_hidden, 0}.on(d.t) * (m.moe.experts / w.ep);
        blk.moe = p;
        blk.tp_collectives_fwd = 0;
    } else {
        blk.tp_collectives_fwd = d.t > 1 ? attention_collectives + 1 : 0;
    }
    return blk;
}

/// A pass over one value per token (a target id, a mask, a loss): `bytes_per_token` read and
/// written, b·s tokens; its cost is its launch and the framework's dispatch.
Kernel token_pass(I tokens, I bytes_per_token) {
    return stream_kernel(KernelName::loss, KernelClass::elementwise, tokens * bytes_per_token);
}

/// A loss's passes as they are listed: over every logit (`bytes` each) or over every token.
struct LossPasses {
    I tokens, logits;
    std::vector<Kernel> out;
    void logit(I bytes) { out.push_back(stream_kernel(KernelName::loss, KernelClass::elementwise, logits * bytes)); }
    /// The logits cast to fp32 (read e, write 4 bytes each), none in fp32 training.
    void cast(I e) {
        if (e != 4) out.push_back(stream_kernel(KernelName::cast, KernelClass::elementwise, logits * (e + 4)));
    }
    void token(std::initializer_list<I> bytes) {
        for (const I b : bytes) out.push_back(token_pass(tokens, b));
    }
};

/// The loss's forward after the logits GEMM, on `tokens` rows of `v_rank` logits in `e`-byte
/// elements.
///   - `megatron`: first the logits cast to fp32 (read e, write 4 bytes per logit; nothing in
///     fp32 training): Megatron's `output.float()` (gpt_model.py post_language_model_processing;
///     GPTModelPipe's float16_to_fp32). Then _VocabParallelCrossEntropy.forward
///     (core/tensor_parallel/cross_entropy.py): max over the vocabulary (read 4), the max
///     subtracted (read 4, write 4), exp (read 4, write 4), their sum (read 4), the division that
///     leaves the probabilities kept for backward (read 4, write 4): 32 bytes per logit in five
///     passes. Around them, passes over one value per token: the labels' transpose, the target's
///     range mask (two comparisons and an or), its shifted copy (clone, subtract, masked fill),
///     the arange and the gather of each target's logit, its copy and masked fill, the three
///     all-reduce calls (max, target logit, sum; c10d issues them even on a one-rank group), log
///     and subtract for the loss, the loss's transpose back, and the loss function's masked mean
///     (pretrain_gpt.py loss_func: multiply, sum, mask sum, divide) and the schedule's running
///     total of it: 22 launches.
///   - `megatron_fused` (--cross-entropy-loss-fusion, impl native: core/fusions/
///     fused_cross_entropy.py at NVIDIA/Megatron-LM d98e8a6, whose four functions jit_fuser
///     compiles with torch.compile, core/jit.py): the cast and the max in one kernel (read e,
///     write the fp32 logits, 4); the max all-reduce; the subtraction, exp and sum in place (read
///     4, write 4) beside a kernel over the tokens (target masks, the target's logit, the cat of
///     it with the sum); the one batched all-reduce; the division in place (read 4, write 4)
///     beside the loss per token. The labels' and the loss's transposes and the loss function's
///     passes stay (language_module.py compute_language_model_loss, loss_func).
///   - `te` (--cross-entropy-loss-fusion, impl te: Transformer Engine d0067d0
///     transformer_engine/pytorch/triton/cross_entropy.py:39-120): the loss, the per-rank
///     (max, sum, target logit) buffer and the token count zeroed, online_softmax_kernel (read e
///     per logit), the buffer's all-gather call, the count's clamp, and cross_entropy_kernel
///     (read e, write the fp32 gradient it keeps for backward: 4 per logit); the same passes
///     around it.
///   - `torch` (F.cross_entropy = log_softmax + nll_loss, aten/src/ATen/native/cuda/SoftMax.cu
///     and Loss.cu): the cast (PyTorch models' `logits.float()`), log_softmax over a row longer
///     than shared memory holds (cunn_SoftMaxForward: the max, the sum of exponentials and the
///     output pass read the row three times and write it once, 16 bytes per logit), then
///     nll_loss's gather of each target's log-probability and its mean: one launch.
/// Each keeps 4 bytes per logit for backward (head_block's activations): the fp32 probabilities,
/// or `te`'s fp32 gradient.
std::vector<Kernel> loss_forward_kernels(I tokens, I v_rank, I e, LossKernels kind) {
    LossPasses p{tokens, tokens * v_rank, {}};
    switch (kind) {
        case LossKernels::torch:
            p.cast(e);
            p.logit(16);
            p.token({16});
            return std::move(p.out);
        case LossKernels::megatron:
            p.cast(e);
            for (const I bytes : {4, 8, 8, 4, 8}) p.logit(bytes);
            // Bytes per token of each small pass: int64 targets (8), bool masks (1), fp32 values (4).
            p.token({16, 9, 9, 3, 16, 16, 9, 8, 20, 8, 5, 4, 4, 4, 8, 12, 8, 12, 4, 4, 4, 4});
            return std::move(p.out);
        case LossKernels::megatron_fused:
            p.token({16});                 // the labels' transpose
            p.logit(e + 4);                // calculate_logits_max: the cast and the max
            p.token({4});                  // the max's all-reduce
            p.logit(8);                    // calculate_predicted_logits: subtract, exp, sum in place
            p.token({29, 8});              // its target masks, target logit and cat; their all-reduce
            p.logit(8);                    // calculate_cross_entropy_loss: the division in place
            p.token({12, 8, 12, 4, 4, 4, 4});   // the loss; its transpose, the masked mean, the total
            return std::move(p.out);
        case LossKernels::te:
            p.token({16, 4, 12, 8});       // the labels' transpose; loss, buffer and count zeroed
            p.logit(e);                    // online_softmax_kernel
            p.token({12, 8});              // the buffer's all-gather call, the count's clamp
            p.logit(e + 4);                // cross_entropy_kernel: the gradient in fp32
            p.token({8, 12, 4, 4, 4, 4});  // the loss's transpose, the masked mean, the total
            return std::move(p.out);
    }
    return std::move(p.out);
}

/// The loss's own backward, which replaces the derivatives of loss_forward_kernels (backward
/// does not revisit the forward's passes). Before the cross-entropy's, the same per-token passes
/// for every Megatron kind: the loss scaled for fp16 and divided by the micro-batches (Megatron's
/// schedules and optimizer.scale_loss; DeepSpeed's _scale_loss_by_gas and FP16_Optimizer.backward),
/// autograd's seed gradient, the masked mean's backward (divide, multiply). Then:
///   - `megatron`: _VocabParallelCrossEntropy.backward: the target mask as float and 1 − it, the
///     arange, gather, subtract and index_put that take 1 from each target's probability (small
///     passes), and `grad_input.mul_(grad_output)` over the kept probabilities (read 4, write 4
///     per logit). The cast's backward (to the logits' dtype) is derived from the forward's cast,
///     as any cast's.
///   - `megatron_fused`: calculate_gradients compiled: the target's update (a pass over the
///     tokens), then one kernel multiplying the kept probabilities in place and writing the 16-bit
///     gradient (read 4, write 4 and 2 per logit: `.to(torch.bfloat16)`).
///   - `te`: CrossEntropyFunction.backward: `torch.equal(grad_output, torch.tensor(1.0))` (the
///     scalar's copy and the comparison), element_mul_kernel over the kept fp32 gradient (read 4,
///     write 4), and autograd's cast of that gradient to the logits' dtype (read 4, write e).
///   - `torch`: autograd's seed, nll_loss's backward (the gradient zeroed, 4 bytes per logit,
///     then −1/n scattered at each target), and log_softmax's backward (cunn_SoftMaxBackward: the
///     row's gradient summed, then read again with the output and the input gradient written: 16
///     bytes per logit); the cast's backward is derived.
std::vector<Kernel> loss_backward_kernels(I tokens, I v_rank, I e, LossKernels kind) {
    LossPasses p{tokens, tokens * v_rank, {}};
    switch (kind) {
        case LossKernels::torch:
            p.token({4});
            p.logit(4);
            p.token({16});
            p.logit(16);
            return std::move(p.out);
        case LossKernels::megatron:
            p.token({4, 4, 4, 8, 12, 5, 8, 8, 20, 8, 20});
            p.logit(8);
            return std::move(p.out);
        case LossKernels::megatron_fused:
            p.token({4, 4, 4, 8, 12, 25});
            p.logit(4 + 4 + e);
            return std::move(p.out);
        case LossKernels::te:
            p.token({4, 4, 4, 8, 12, 4, 8});
            p.logit(8);
            if (e != 4) p.logit(4 + e);
            return std::move(p.out);
    }
    return std::move(p.out);
}

Block head_block(const TransformerShape& m, const Dims& d, int index) {
    const I sb = d.s * d.b, sbh = sb * d.h;
    const I v_rank = d.v / d.t;  // vocab columns on this rank
    Block blk;
    blk.kind = Block::Kind::head;
    blk.index = index;
    // With tied embeddings the projection is the embedding table, counted there once. A pipeline
    // strategy that puts the head on another stage than the embedding holds a copy of it there
    // (and all-reduces its gradient), as Megatron does.
    blk.params = final_norm_params(m) + (m.tied_embeddings ? 0 : v_rank * d.h);
    blk.fwd = gemm_flops(static_cast<double>(sb), static_cast<double>(v_rank), static_cast<double>(d.h));
    blk.bwd = blk.fwd * 2.0;
    blk.recompute = Flops(0);  // the head is outside the recomputed layers
    // Korthikanti §4.3: the final norm input and the projection input (sbh·e each, replicated
    // without sp) and the logits kept in fp32 for the cross-entropy (4·s·b·v/t bytes).
    blk.activations = Bytes(d.rep(2 * sbh * d.e) + 4 * sb * v_rank);
    blk.output = Bytes(4 * sb);  // per-token losses, fp32
    // Final norm and the logits GEMM (column-parallel over the vocabulary), then the loss as
    // Megatron's code runs it, kernel by kernel (Megatron-DeepSpeed f4157be, the same passes in
    // NVIDIA/Megatron-LM core/tensor_parallel/cross_entropy.py without --cross-entropy-loss-fusion),
    // or PyTorch's F.cross_entropy where the framework's models call it (Workload::loss).
    if (m.final_norm) blk.fwd_kernels.push_back(stream_kernel(KernelName::norm, KernelClass::elementwise, d.rep(2 * sbh * d.e)));
    blk.fwd_kernels.push_back(gemm_kernel(KernelName::logits, KernelClass::gemm, sb, v_rank, d.h, 1, static_cast<int>(d.e), true));
    for (const Kernel& k : loss_forward_kernels(sb, v_rank, d.e, d.loss)) blk.fwd_kernels.push_back(k);
    blk.loss_backward = loss_backward_kernels(sb, v_rank, d.e, d.loss);
    // The column-parallel projection's input needs one collective per pass over b·s·h: its
    // gradient is all-reduced in backward (all-gathered input in forward with sp). The forward
    // cross-entropy reductions (max, sum of exponentials, target logit: 3 × b·s fp32) are tiny
    // and folded into this one.
    blk.tp_collectives_fwd = d.t > 1 ? 1 : 0;
    blk.tp_bytes_per_collective = Bytes(sbh * d.e);
    return blk;
}

void check_divides(const std::string& name, int tp, int n, const std::string& what) {
    if (n % tp != 0)
        fail_input("tp " + std::to_string(tp) + " does not divide the " + what + " " + std::to_string(n) + " of " + name);
}

void check_parallel(const std::string& name, const TransformerShape& m, const Workload& w) {
    const int tp = w.tp;
    if (tp < 1) fail_input("tensor-parallel size must be at least 1, got " + std::to_string(tp));
    if (m.heads % tp != 0)
        fail_input("tp " + std::to_string(tp) + " does not divide the " + std::to_string(m.heads) + " attention heads of " + name);
    if (m.kv_heads % tp != 0)
        fail_input("tp " + std::to_string(tp) + " does not divide the " + std::to_string(m.kv_heads) +
                   " key-value heads of " + name);
    if (m.ffn_hidden % tp != 0)
        fail_input("tp " + std::to_string(tp) + " does not divide the ffn hidden size " + std::to_string(m.ffn_hidden) +
                   " of " + name);
    if (m.is_moe()) {
        check_divides(name, tp, m.moe.ffn_hidden, "expert ffn hidden size");
        if (m.moe.shared_experts > 0) check_divides(name, tp, m.moe.shared_experts * m.moe.shared_ffn_hidden, "shared experts' ffn width");
    }
    if (w.ep < 1) fail_input("expert-parallel size must be at least 1, got " + std::to_string(w.ep), {"", "", "--ep"});
    if (w.ep > 1 && !m.is_moe())
        fail_input("--ep " + std::to_string(w.ep) + " needs a mixture-of-experts model; " + name + " has no experts",
                   {"", "", "--ep"});
    if (m.is_moe() && m.moe.experts % w.ep != 0)
        fail_input("--ep " + std::to_string(w.ep) + " does not divide the " + std::to_string(m.moe.experts) + " experts of " + name,
                   {"", "", "--ep"});
    if (!(w.expert_imbalance >= 1))
        fail_input("--expert-imbalance is the busiest expert's tokens over the mean, at least 1; found " +
                       std::to_string(w.expert_imbalance),
                   {"", "", "--expert-imbalance"});
    if (!(w.capacity_factor >= 0))
        fail_input("--capacity-factor must be positive (or 0 for dropless), found " + std::to_string(w.capacity_factor),
                   {"", "", "--capacity-factor"});
}

/// An upper bound of the model's parameters (see check_transformer_shape).
double parameter_bound(const TransformerShape& m) {
    const double h = m.hidden, a = m.heads, kvh = m.kv_heads, hd = m.q_head_dim(), vd = m.value_head_dim();
    const double ql = m.mla.q_lora_rank, kvl = m.mla.kv_lora_rank, rope = m.mla.rope_head_dim;
    const double attention = h * (a * hd + kvh * (hd + vd)) + a * hd + kvh * (hd + vd) + ql * (h + a * hd + 2) +
                             (h + 1) * (kvl + rope) + kvl + kvl * a * (hd + vd) + a * vd * h + 2 * h + 2 * hd + a;
    const double mlp = 3 * h * m.ffn_hidden + 3.0 * m.ffn_hidden + h +
                       static_cast<double>(m.moe.experts) * (3 * h * m.moe.ffn_hidden + 3.0 * m.moe.ffn_hidden + 2 * h + 1) +
                       3 * h * static_cast<double>(m.moe.shared_experts) * m.moe.shared_ffn_hidden + h;
    const double norms = 2 * h * (m.norms_per_layer + 2);
    const double layer = 2 * attention + mlp + norms + static_cast<double>(m.relative_attention_buckets) * a;
    return 2 * (static_cast<double>(m.vocab) + m.max_seq + m.position_offset + 1) * h + m.layers * layer + 4 * h;
}

}  // namespace

void check_transformer_shape(const std::string& name, const TransformerShape& m) {
    const ErrorContext where{name, "", ""};
    const std::pair<const char*, int> sizes[] = {{"layers", m.layers},         {"hidden", m.hidden},
                                                 {"heads", m.heads},           {"kv_heads", m.kv_heads},
                                                 {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab},
                                                 {"seq", m.max_seq}};
    for (const auto& [what, n] : sizes) {
        if (n < 1) fail_input("a positive " + std::string(what), std::to_string(n), where);
    }
    // Each layer is a block of every replica's graph; no published model has a thousand.
    if (m.layers > kMaxLayers) fail_input("at most " + std::to_string(kMaxLayers) + " layers", std::to_string(m.layers), where);
    if (m.head_dim < 0 || m.v_head_dim < 0 || m.train_seq < 0 || m.sliding_window < 0 || m.position_offset < 0)
        fail_input("non-negative head_dim, v_head_dim, train_seq, sliding_window and position_offset", "a negative one", where);
    if (m.head_dim == 0 && m.hidden % m.heads != 0)
        fail_input("hidden size " + std::to_string(m.hidden) + " is not a multiple of the " + std::to_string(m.heads) +
                       " attention heads (and no head_dim is given)",
                   where);
    if (m.heads % m.kv_heads != 0)
        fail_input("the " + std::to_string(m.heads) + " attention heads are not a multiple of the " +
                       std::to_string(m.kv_heads) + " key-value heads",
                   where);
    if (m.norms_per_layer < 1 || m.norms_per_layer > 4)
        fail_input("1 to 4 norms per layer", std::to_string(m.norms_per_layer), where);
    if (m.encoder_layers < 0 || m.encoder_layers >= m.layers)
        fail_input("encoder layers from 0 to layers − 1 (the decoder needs a layer)", std::to_string(m.encoder_layers), where);
    if (m.mla.kv_lora_rank > 0) {
        if (m.mla.rope_head_dim < 1 || m.mla.rope_head_dim >= m.q_head_dim())
            fail_input("a rope head dim between 1 and the query head dim " + std::to_string(m.q_head_dim()),
                       std::to_string(m.mla.rope_head_dim), where);
        if (m.kv_heads != m.heads) fail_input("latent attention with one key-value head per query head", "kv_heads " + std::to_string(m.kv_heads), where);
    }
    const MoeShape& e = m.moe;
    if (e.experts > 0) {
        if (e.top_k < 1) fail_input("experts without a top-k: each token's number of experts (top_k) is required", where);
        if (e.top_k > e.experts)
            fail_input("a top-k of at most the " + std::to_string(e.experts) + " experts", std::to_string(e.top_k), where);
        if (e.ffn_hidden < 1) fail_input("a positive expert ffn hidden size", std::to_string(e.ffn_hidden), where);
        if (e.shared_experts < 0 || (e.shared_experts > 0 && e.shared_ffn_hidden < 1))
            fail_input("shared experts with a positive ffn width", std::to_string(e.shared_ffn_hidden), where);
        for (int l : e.dense_layers)
            if (l < 0 || l >= m.layers)
                fail_input("dense layer indices from 0 to " + std::to_string(m.layers - 1), std::to_string(l), where);
    } else if (e.top_k > 0 || e.shared_experts > 0) {
        fail_input("a top-k or shared experts only with routed experts", "no experts", where);
    }
    for (int l : m.full_attention_layers)
        if (l < 0 || l >= m.layers)
            fail_input("full-attention layer indices from 0 to " + std::to_string(m.layers - 1), std::to_string(l), where);
    // The parameter count in 64 bits: a bound above every partial sum transformer_parameters and
    // layer_params form (each term at least the one it stands for), in doubles, so the int64
    // arithmetic of those functions cannot overflow.
    const double bound = parameter_bound(m);
    if (!(bound < 0x1p62)) {
        char about[32];
        std::snprintf(about, sizeof about, "%.3g", bound);
        throw Error(ErrorKind::out_of_range,
                    "parameters of the model: about " + std::string(about) +
                        ", too close to the 2^63 a count can hold (smolcluster counts to 2^62)",
                    where);
    }
}

std::int64_t transformer_parameters(const TransformerShape& m, bool active) {
    I n = embedding_params(m, m.vocab, 1);
    for (int i = 0; i < m.layers; ++i) n += layer_params(m, i, active ? m.moe.top_k : m.moe.experts).on(1);
    n += final_norm_params(m);
    if (!m.tied_embeddings) n += static_cast<I>(m.vocab) * m.hidden;  // output projection
    return n;
}

std::vector<Block> transformer_blocks(const std::string& name, const TransformerShape& m, const Workload& w) {
    check_parallel(name, m, w);
    const int seq = w.seq == 0 ? m.default_seq() : w.seq;
    if (m.positions == Positions::learned && seq > m.max_seq + 0)
        fail_input("sequence length " + std::to_string(seq) + " exceeds the " + std::to_string(m.max_seq) +
                   " learned positions of " + name);
    if (w.cp < 1) fail_input("--cp must be at least 1, found " + std::to_string(w.cp), {"", "", "--cp"});
    if (w.cp > 1) {
        // Transformer Engine's ring attention: fused attention only, causal decoders, and a
        // sequence that cuts into 2·cp equal chunks.
        if (w.attention != Attention::flash)
            fail_input("context parallelism runs attention as Transformer Engine's ring of fused-attention kernels; "
                       "it has no eager (unfused) path: leave out --attention eager",
                       {"", "", "--cp"});
        if (m.encoder_layers > 0)
            fail_input("context parallelism is modelled for decoder-only models (causal ring attention); " + name +
                           " is an encoder-decoder",
                       {"", "", "--cp"});
        if (seq % (2 * w.cp) != 0)
            fail_input("--cp " + std::to_string(w.cp) + " cuts the sequence into 2 × cp = " + std::to_string(2 * w.cp) +
                           " chunks (two per rank, for causal load balance), but the sequence " + std::to_string(seq) +
                           " does not divide into them; choose a --seq or --cp that does",
                       {"", "", "--cp"});
    }
    Dims d{};
    d.b = w.micro_batch;
    d.seq = seq;
    d.cp = w.cp;
    d.cp_comm = w.cp_comm;
    d.s = seq / w.cp;
    d.h = m.hidden;
    d.a = m.heads;
    // Latent attention decompresses a key and a value per query head.
    d.kvh = m.mla.kv_lora_rank > 0 ? m.heads : m.kv_heads;
    d.hd = m.q_head_dim();
    d.vd = m.value_head_dim();
    d.f = m.ffn_hidden;
    d.t = w.tp;
    d.v = padded_vocab(m.vocab, w.tp, w.vocab_multiple);
    d.sp = w.sequence_parallel && w.tp > 1;
    d.e = dtype_bytes(w.dtype);
    d.recompute = w.recompute;
    d.modules = w.recompute_modules;
    d.attention = w.attention;
    d.attention_backend = w.attention_backend;
    d.qk_layer_scaling = w.qk_layer_scaling;
    d.loss = w.loss;
    d.fp8 = w.fp8;
    // Every per-block product below is at most 64 × (tokens × the widest matrix) or 16 × the
    // attention scores (a·s²·b): check those two fit in 64 bits, once, instead of each product.
    {
        const std::string what = "the micro-batch of " + std::to_string(d.b) + " × " + std::to_string(d.s) + " tokens of " + name;
        const I tokens = checked_mul(d.b, d.s, what.c_str());
        const I routed = checked_mul(checked_mul(std::max(1, m.moe.top_k), std::max<I>(1, checked_round(std::ceil(w.capacity_factor), what.c_str())), what.c_str()),
                                     std::max<I>(1, checked_round(std::ceil(w.expert_imbalance), what.c_str())), what.c_str());
        const I widest = std::max({d.q() + d.k() + d.vw(), d.o(), 3 * d.f, 3 * static_cast<I>(m.moe.ffn_hidden) * routed,
                                   d.h * routed, d.v});
        checked_mul(checked_mul(tokens, widest, what.c_str()), 64, what.c_str());
        checked_mul(checked_mul(checked_mul(d.a, d.s, what.c_str()), tokens, what.c_str()), 16, what.c_str());
    }

    std::vector<Block> out;
    out.reserve(static_cast<std::size_t>(m.layers) + 2);
    out.push_back(embedding_block(m, d));
    // Layers of one variant have the same block but for its index: build each variant once
    // (a sweep builds GPT-3's 96 layers for every plan it resolves, bounds and simulates).
    // The layers Megatron keeps in 16 bits under FP8 (Workload::fp8_bf16_first, fp8_bf16_last) are
    // built without it, and those Workload::recomputed_layers leaves out under full recompute without it.
    std::vector<std::tuple<LayerVariant, bool, bool, std::size_t>> built;   // a variant, in 16 bits, kept, where its block is
    for (int i = 0; i < m.layers; ++i) {
        const LayerVariant v = layer_variant(m, i, static_cast<int>(d.seq));
        const bool bf16 = d.fp8 != Fp8Recipe::none && (i < w.fp8_bf16_first || i >= m.layers - w.fp8_bf16_last);
        const bool kept = d.recompute == Recompute::full && !w.recomputed_layers.empty() &&
                          !w.recomputed_layers[static_cast<std::size_t>(i)];
        const auto same = std::find_if(built.begin(), built.end(), [&](const auto& b) {
            return std::get<0>(b) == v && std::get<1>(b) == bf16 && std::get<2>(b) == kept;
        });
        if (same == built.end()) {
            built.emplace_back(v, bf16, kept, out.size());
            Dims dl = d;
            if (bf16) dl.fp8 = Fp8Recipe::none;
            if (kept) dl.recompute = Recompute::none;
            out.push_back(layer_block(m, dl, w, i));
        } else {
            out.push_back(out[std::get<3>(*same)]);
            out.back().index = i + 1;
        }
    }
    out.push_back(head_block(m, d, m.layers + 1));
    return out;
}

}  // namespace smol::detail
