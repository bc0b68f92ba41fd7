// OPT (model_type "opt"), from transformers' models/opt:
//  * configuration_opt.py OPTConfig: num_hidden_layers, hidden_size, num_attention_heads,
//    ffn_dim, vocab_size, max_position_embeddings, word_embed_proj_dim (default hidden_size),
//    do_layer_norm_before (True), _remove_final_layer_norm (False), enable_bias (True),
//    layer_norm_elementwise_affine (True).
//  * modeling_opt.py: OPTLearnedPositionalEmbedding(max_position_embeddings, hidden) holds
//    max_position_embeddings + 2 rows ("OPT is set up so that if padding_idx is specified then
//    offset the embedding ids by 2"); OPTAttention k/v/q/out_proj Linear(hidden, hidden,
//    bias=config.enable_bias); OPTDecoderLayer self_attn_layer_norm and final_layer_norm
//    LayerNorm(hidden), fc1 Linear(hidden, ffn_dim) and fc2 Linear(ffn_dim, hidden) with biases;
//    OPTDecoder.final_layer_norm only when do_layer_norm_before and not _remove_final_layer_norm;
//    project_in / project_out only when word_embed_proj_dim ≠ hidden (OPT-350m: not modelled);
//    OPTForCausalLM.lm_head tied to embed_tokens.
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_opt(ConfigReader& c, const std::string& name) {
    TransformerShape m;
    m.layers = c.size("num_hidden_layers");
    m.hidden = c.size("hidden_size");
    m.heads = c.size("num_attention_heads");
    m.kv_heads = m.heads;
    m.ffn_hidden = c.size("ffn_dim");
    m.vocab = c.size("vocab_size");
    m.max_seq = c.size("max_position_embeddings");
    m.position_offset = 2;
    m.tied_embeddings = c.flag_or("tie_word_embeddings", true);
    m.gated_mlp = false;
    m.positions = Positions::learned;
    m.qkv_bias = m.attn_out_bias = m.mlp_bias = c.flag_or("enable_bias", true);
    m.layer_norm = true;
    if (c.size_or("word_embed_proj_dim", m.hidden) != m.hidden)
        c.fail("word_embed_proj_dim", "hidden_size " + std::to_string(m.hidden) +
                                          " (projected embeddings, OPT-350m's project_in / project_out, are not modelled)");
    if (!c.flag_or("layer_norm_elementwise_affine", true))
        c.fail("layer_norm_elementwise_affine", "true (layer norms without weights are not modelled)");
    m.final_norm = c.flag_or("do_layer_norm_before", true) && !c.flag_or("_remove_final_layer_norm", false);
    if (m.hidden % m.heads != 0) c.fail("num_attention_heads", "a head count dividing hidden_size " + std::to_string(m.hidden));
    c.accept({"activation_function", "dropout", "attention_dropout", "activation_dropout", "layerdrop", "init_std"});
    return c.finish(m, name);
}

}  // namespace smol::hf
