// DeepSeek-V2 and V3 (model_types "deepseek_v2", "deepseek_v3"), from transformers'
// models/deepseek_v2 and models/deepseek_v3, and DeepSeek's own modeling_deepseek.py that their
// checkpoints ship (auto_map), whose keys the hub's config.json files carry:
//  * configuration_deepseek_v2.py / _v3.py: q_lora_rank (None in V2-Lite: no query
//    compression), kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim,
//    n_routed_experts, n_shared_experts, moe_intermediate_size, num_experts_per_tok,
//    first_k_dense_replace, n_group / topk_group (group-limited routing), routed_scaling_factor,
//    norm_topk_prob, attention_bias (False), tie_word_embeddings (False).
//  * modeling_deepseek_v2.py DeepseekV2Attention: q_proj Linear(hidden, heads·qk_head_dim,
//    bias=False) without q_lora, else q_a_proj Linear(hidden, q_lora_rank,
//    bias=config.attention_bias), q_a_layernorm RMSNorm(q_lora_rank), q_b_proj Linear(q_lora_rank,
//    heads·qk_head_dim, bias=False); kv_a_proj_with_mqa Linear(hidden, kv_lora_rank +
//    qk_rope_head_dim, bias=config.attention_bias), kv_a_layernorm RMSNorm(kv_lora_rank),
//    kv_b_proj Linear(kv_lora_rank, heads·(qk_nope_head_dim + v_head_dim), bias=False), o_proj
//    Linear(heads·v_head_dim, hidden, bias=config.attention_bias); qk_head_dim = nope + rope.
//  * DeepseekV2MoE / DeepseekV3MoE: gate weight (n_routed_experts, hidden) (V3: plus the
//    e_score_correction_bias buffer, not a parameter), n_routed_experts experts of
//    moe_intermediate_size, shared_experts one MLP of moe_intermediate_size · n_shared_experts.
//  * DeepseekV2DecoderLayer: the MoE block from layer first_k_dense_replace on (DeepSeek's
//    modeling_deepseek.py also requires layer_idx % moe_layer_freq == 0; both published configs
//    have moe_layer_freq 1), the dense MLP of intermediate_size before.
// num_nextn_predict_layers (V3's multi-token-prediction module, 1 layer): transformers'
// DeepseekV3 does not build it (its weights, layer 61, are skipped on load) and the published 671B
// excludes it; read, not modelled, said in a warning.
#include "core/hf/reader.hpp"

namespace smol::hf {
namespace {

Model read_deepseek(ConfigReader& c, const std::string& name, bool v3) {
    TransformerShape m;
    m.layers = c.size("num_hidden_layers");
    m.hidden = c.size("hidden_size");
    m.heads = c.size("num_attention_heads");
    // Latent attention decompresses one key and value per query head; num_key_value_heads is
    // written equal to the heads and does not shape the projections.
    c.optional_size("num_key_value_heads");
    m.kv_heads = m.heads;
    m.ffn_hidden = c.size("intermediate_size");
    m.vocab = c.size("vocab_size");
    m.max_seq = c.size("max_position_embeddings");
    m.tied_embeddings = c.flag_or("tie_word_embeddings", false);
    m.gated_mlp = true;
    m.positions = Positions::rope;
    m.qkv_bias = m.attn_out_bias = c.flag_or("attention_bias", false);
    m.mlp_bias = false;
    m.layer_norm = false;
    m.mla.q_lora_rank = c.optional_size("q_lora_rank").value_or(0);
    m.mla.kv_lora_rank = c.size("kv_lora_rank");
    m.mla.rope_head_dim = c.size("qk_rope_head_dim");
    const int nope = c.size("qk_nope_head_dim");
    m.head_dim = nope + m.mla.rope_head_dim;
    m.v_head_dim = c.size("v_head_dim");
    c.optional_size("head_dim");  // transformers sets head_dim = qk_rope_head_dim for its RoPE tables
    if (c.has("n_routed_experts")) {
        m.moe.experts = c.size("n_routed_experts");
        m.moe.top_k = c.size("num_experts_per_tok");
        m.moe.ffn_hidden = c.size("moe_intermediate_size");
        m.moe.shared_experts = c.count_or("n_shared_experts", 0);
        m.moe.shared_ffn_hidden = m.moe.shared_experts > 0 ? m.moe.ffn_hidden : 0;
        const int first_dense = c.count_or("first_k_dense_replace", 0);
        const int freq = c.size_or("moe_layer_freq", 1);
        for (int i = 0; i < m.layers; ++i)
            if (i < first_dense || i % freq != 0) m.moe.dense_layers.push_back(i);
    } else {
        c.mark("n_routed_experts");
        if (c.has("num_experts_per_tok")) c.fail("num_experts_per_tok", "null without n_routed_experts (a dense DeepSeek)");
        c.mark("num_experts_per_tok");
    }
    if (v3) {
        const int mtp = c.count_or("num_nextn_predict_layers", 0);
        if (mtp > 0)
            c.warn(c.json().file() + ": num_nextn_predict_layers " + std::to_string(mtp) +
                   ": DeepSeek-V3's multi-token-prediction layers are not modelled (transformers does not build them)");
    }
    // ep_size is the expert parallelism DeepSeek's inference code was set up with, not a shape.
    c.count_or("ep_size", 1);
    c.accept({"hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
              "attention_dropout", "pretraining_tp", "routed_scaling_factor", "topk_method", "n_group", "topk_group",
              "norm_topk_prob", "scoring_func", "aux_loss_alpha", "seq_aux", "mlp_bias"});
    return c.finish(m, name);
}

}  // namespace

Model read_deepseek_v2(ConfigReader& c, const std::string& name) { return read_deepseek(c, name, false); }
Model read_deepseek_v3(ConfigReader& c, const std::string& name) { return read_deepseek(c, name, true); }

}  // namespace smol::hf
