// GPT-NeoX (model_type "gpt_neox"; GPT-NeoX-20B, Pythia), from transformers' models/gpt_neox:
//  * configuration_gpt_neox.py GPTNeoXConfig: num_hidden_layers, hidden_size,
//    num_attention_heads, intermediate_size, vocab_size, max_position_embeddings, rotary_pct
//    (0.25: RoPE on a quarter of each head), rotary_emb_base, use_parallel_residual (True),
//    attention_bias (True), tie_word_embeddings (False).
//  * modeling_gpt_neox.py: GPTNeoXAttention.query_key_value Linear(hidden, 3·hidden,
//    bias=config.attention_bias) and dense Linear(hidden, hidden, bias=config.attention_bias);
//    GPTNeoXMLP.dense_h_to_4h Linear(hidden, intermediate) and dense_4h_to_h, with biases, not
//    gated; GPTNeoXLayer.input_layernorm and post_attention_layernorm LayerNorm(hidden) — with the
//    parallel residual the MLP reads post_attention_layernorm(x) of the same x as attention;
//    GPTNeoXModel.final_layer_norm; GPTNeoXForCausalLM.embed_out Linear(hidden, vocab, bias=False).
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_gpt_neox(ConfigReader& c, const std::string& name) {
    TransformerShape m;
    m.layers = c.size("num_hidden_layers");
    m.hidden = c.size("hidden_size");
    m.heads = c.size("num_attention_heads");
    m.kv_heads = m.heads;
    m.ffn_hidden = c.size("intermediate_size");
    m.vocab = c.size("vocab_size");
    m.max_seq = c.size("max_position_embeddings");
    m.tied_embeddings = c.flag_or("tie_word_embeddings", false);
    m.gated_mlp = false;
    m.positions = Positions::rope;
    m.qkv_bias = m.attn_out_bias = c.flag_or("attention_bias", true);
    m.mlp_bias = true;
    m.layer_norm = true;
    m.parallel_residual = c.flag_or("use_parallel_residual", true);
    if (m.hidden % m.heads != 0) c.fail("num_attention_heads", "a head count dividing hidden_size " + std::to_string(m.hidden));
    c.accept({"hidden_act", "rotary_pct", "rotary_emb_base", "rope_theta", "rope_scaling", "rope_parameters",
              "partial_rotary_factor", "attention_dropout", "hidden_dropout", "classifier_dropout", "layer_norm_eps"});
    return c.finish(m, name);
}

}  // namespace smol::hf
