// Qwen2, Qwen2-MoE and Qwen3-MoE (model_types "qwen2", "qwen2_moe", "qwen3_moe"), from
// transformers' models/qwen2, models/qwen2_moe, models/qwen3_moe:
//  * configuration_qwen2.py Qwen2Config: the Llama keys plus use_sliding_window (False),
//    sliding_window, max_window_layers, layer_types (default: "sliding_attention" for the layers
//    from max_window_layers on when use_sliding_window, else "full_attention").
//  * modeling_qwen2.py Qwen2Attention: q_proj, k_proj, v_proj Linear(…, bias=True), o_proj
//    Linear(…, bias=False) — the QKV biases are Qwen's; MLP and norms as Llama.
//  * configuration_qwen2_moe.py Qwen2MoeConfig: num_experts (60), num_experts_per_tok (4),
//    moe_intermediate_size (1408), shared_expert_intermediate_size (5632), decoder_sparse_step
//    (1), mlp_only_layers ([]), norm_topk_prob, qkv_bias (newer releases; True).
//  * modeling_qwen2_moe.py: Qwen2MoeDecoderLayer uses Qwen2MoeSparseMoeBlock when
//    `layer_idx not in config.mlp_only_layers and num_experts > 0 and (layer_idx + 1) %
//    decoder_sparse_step == 0`, else Qwen2MoeMLP(intermediate_size); the sparse block has gate
//    Linear(hidden, num_experts, bias=False), num_experts experts of moe_intermediate_size, one
//    shared_expert of shared_expert_intermediate_size and shared_expert_gate Linear(hidden, 1,
//    bias=False).
//  * configuration_qwen3_moe.py / modeling_qwen3_moe.py: the same routing without a shared
//    expert; Qwen3MoeAttention has q_norm and k_norm, Qwen3MoeRMSNorm(head_dim), and biases on
//    q/k/v/o_proj only with attention_bias (False); head_dim is explicit (128 for 30B-A3B, whose
//    32 heads × 128 = 4096 ≠ hidden 2048).
#include "core/hf/reader.hpp"

#include <algorithm>

namespace smol::hf {
namespace {

/// Qwen's sliding window: from max_window_layers on, when use_sliding_window.
void qwen_window(ConfigReader& c, TransformerShape& m) {
    const bool use = c.flag_or("use_sliding_window", false);
    const int from = c.count_or("max_window_layers", m.layers);
    if (!use) {
        c.optional_size("sliding_window");  // a size given for when the window is switched on
        c.strings("layer_types");
        return;
    }
    read_sliding_window(c, m);
    if (m.sliding_window > 0 && m.full_attention_layers.empty() && !c.has("layer_types"))
        for (int i = 0; i < std::min(from, m.layers); ++i) m.full_attention_layers.push_back(i);
}

/// The sparse layers: not in mlp_only_layers, and every decoder_sparse_step-th layer.
void qwen_moe_layers(ConfigReader& c, TransformerShape& m, int experts_default, int top_k_default, int moe_ffn_default) {
    m.moe.experts = c.size_or("num_experts", experts_default);
    m.moe.top_k = c.size_or("num_experts_per_tok", top_k_default);
    m.moe.ffn_hidden = c.size_or("moe_intermediate_size", moe_ffn_default);
    const int step = c.size_or("decoder_sparse_step", 1);
    const std::vector<int> dense = c.indices("mlp_only_layers");
    for (int i = 0; i < m.layers; ++i)
        if (std::find(dense.begin(), dense.end(), i) != dense.end() || (i + 1) % step != 0) m.moe.dense_layers.push_back(i);
    c.accept({"norm_topk_prob", "router_aux_loss_coef"});
}

void common(ConfigReader& c) {
    c.accept({"hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "attention_dropout"});
}

}  // namespace

Model read_qwen2(ConfigReader& c, const std::string& name) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    m.qkv_bias = true;
    qwen_window(c, m);
    common(c);
    return c.finish(m, name);
}

Model read_qwen2_moe(ConfigReader& c, const std::string& name) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    m.qkv_bias = c.flag_or("qkv_bias", true);
    qwen_window(c, m);
    qwen_moe_layers(c, m, 60, 4, 1408);
    m.moe.shared_ffn_hidden = c.count_or("shared_expert_intermediate_size", 5632);
    m.moe.shared_experts = m.moe.shared_ffn_hidden > 0 ? 1 : 0;
    m.moe.shared_expert_gate = m.moe.shared_experts > 0;
    common(c);
    return c.finish(m, name);
}

Model read_qwen3_moe(ConfigReader& c, const std::string& name) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    m.qkv_bias = m.attn_out_bias = c.flag_or("attention_bias", false);
    m.qk_norm = true;
    qwen_window(c, m);
    qwen_moe_layers(c, m, 128, 8, 768);
    common(c);
    return c.finish(m, name);
}

}  // namespace smol::hf
