// GPT-OSS (model_type "gpt_oss"; gpt-oss-20b and gpt-oss-120b), from transformers' models/gpt_oss:
//  * configuration_gpt_oss.py GptOssConfig: num_hidden_layers, hidden_size, head_dim (64),
//    num_attention_heads, num_key_value_heads, intermediate_size (each expert's width),
//    num_local_experts (attribute_map num_experts), num_experts_per_tok (the hub's configs also
//    write experts_per_token), sliding_window (128), layer_types (default: even layers
//    "sliding_attention", odd "full_attention"), attention_bias (True), tie_word_embeddings
//    (False), max_position_embeddings 131072 with rope_scaling.original_max_position_embeddings
//    4096 (YaRN; initial_context_length 4096 in the hub's configs).
//  * modeling_gpt_oss.py: GptOssAttention q/k/v/o_proj Linear(…, bias=config.attention_bias) and
//    sinks nn.Parameter(num_attention_heads); GptOssTopKRouter weight (E, hidden) and bias (E);
//    GptOssExperts gate_up_proj (E, hidden, 2·intermediate), gate_up_proj_bias (E,
//    2·intermediate), down_proj (E, intermediate, hidden), down_proj_bias (E, hidden); every
//    layer is an MoE layer; input_layernorm and post_attention_layernorm RMSNorm; lm_head untied.
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_gpt_oss(ConfigReader& c, const std::string& name) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    m.qkv_bias = m.attn_out_bias = c.flag_or("attention_bias", true);
    m.attention_sinks = true;
    const bool aliased = !c.has("num_local_experts") && c.has("num_experts");
    m.moe.experts = aliased ? c.size("num_experts") : c.size_or("num_local_experts", 128);
    c.mark("num_local_experts");
    c.mark("num_experts");
    m.moe.top_k = c.has("num_experts_per_tok") ? c.size("num_experts_per_tok") : c.size_or("experts_per_token", 4);
    c.mark("num_experts_per_tok");
    c.mark("experts_per_token");
    m.moe.ffn_hidden = m.ffn_hidden;
    m.moe.router_bias = true;
    m.moe.expert_biases = true;
    m.sliding_window = c.size_or("sliding_window", 128);
    if (c.has("layer_types")) {
        read_sliding_window(c, m);
    } else {
        c.mark("layer_types");
        for (int i = 1; i < m.layers; i += 2) m.full_attention_layers.push_back(i);
    }
    c.optional_size("initial_context_length");  // read by the training-length default
    c.accept({"hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "attention_dropout",
              "swiglu_limit", "swiglu_alpha", "router_aux_loss_coef"});
    return c.finish(m, name);
}

}  // namespace smol::hf
