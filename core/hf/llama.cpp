// Llama (model_type "llama"), from transformers' models/llama:
//  * configuration_llama.py LlamaConfig: num_hidden_layers, hidden_size, num_attention_heads,
//    num_key_value_heads (None: num_attention_heads), head_dim (None: hidden / heads),
//    intermediate_size, vocab_size, max_position_embeddings, attention_bias (False), mlp_bias
//    (False), tie_word_embeddings (False).
//  * modeling_llama.py: LlamaAttention.q_proj Linear(hidden, heads·head_dim,
//    bias=config.attention_bias), k_proj and v_proj Linear(hidden, kv_heads·head_dim, bias=…),
//    o_proj Linear(heads·head_dim, hidden, bias=config.attention_bias); LlamaMLP gate_proj,
//    up_proj Linear(hidden, intermediate, bias=config.mlp_bias), down_proj; LlamaDecoderLayer
//    input_layernorm and post_attention_layernorm LlamaRMSNorm(hidden) (a weight only);
//    LlamaModel.norm; LlamaForCausalLM.lm_head Linear(hidden, vocab, bias=False).
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_llama(ConfigReader& c, const std::string& name) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    m.qkv_bias = m.attn_out_bias = c.flag_or("attention_bias", false);
    m.mlp_bias = c.flag_or("mlp_bias", false);
    c.accept({"hidden_act", "rms_norm_eps", "pretraining_tp", "rope_theta", "rope_scaling", "rope_parameters",
              "attention_dropout"});
    return c.finish(m, name);
}

}  // namespace smol::hf
