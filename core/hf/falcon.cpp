// Falcon (model_type "falcon"), from transformers' models/falcon:
//  * configuration_falcon.py FalconConfig: num_hidden_layers (n_layer), num_attention_heads
//    (n_head), hidden_size (n_embed), num_kv_heads (older: n_head_kv), multi_query (True),
//    new_decoder_architecture (False), parallel_attn (True), num_ln_in_parallel_attn (None: 2 with
//    the new architecture), bias (False), alibi (False), ffn_hidden_size (None: 4 · hidden),
//    max_position_embeddings (2048), tie_word_embeddings (True).
//  * modeling_falcon.py FalconAttention.query_key_value Linear(hidden, qkv, bias=config.bias)
//    with qkv = (2·num_kv_heads + heads)·head_dim (new architecture), hidden + 2·head_dim
//    (multi-query: one key-value head) or 3·hidden; dense Linear(hidden, hidden, bias=…);
//    FalconMLP.dense_h_to_4h Linear(hidden, ffn_hidden_size, bias=…) and dense_4h_to_h;
//    FalconDecoderLayer: ln_attn and ln_mlp with the new architecture and two parallel norms,
//    else input_layernorm, plus post_attention_layernorm when not parallel_attn (Falcon-7B: one
//    norm feeding both branches); FalconModel.ln_f; lm_head tied to word_embeddings.
#include "core/hf/reader.hpp"

namespace smol::hf {
namespace {

int alias(ConfigReader& c, const char* key, const char* old_key, std::optional<int> fallback = std::nullopt) {
    int v = 0;
    if (c.has(key))
        v = c.size(key);
    else if (c.has(old_key))
        v = c.size(old_key);
    else if (fallback)
        v = *fallback;
    else
        v = c.size(key);  // the missing-key error
    c.mark(key);
    c.mark(old_key);
    return v;
}

}  // namespace

Model read_falcon(ConfigReader& c, const std::string& name) {
    TransformerShape m;
    m.layers = alias(c, "num_hidden_layers", "n_layer");
    m.heads = alias(c, "num_attention_heads", "n_head");
    m.hidden = alias(c, "hidden_size", "n_embed");
    m.vocab = c.size("vocab_size");
    m.max_seq = c.size_or("max_position_embeddings", 2048);
    const bool new_arch = c.flag_or("new_decoder_architecture", false);
    const bool multi_query = c.flag_or("multi_query", true);
    const bool parallel = c.flag_or("parallel_attn", true);
    const int kv = alias(c, "num_kv_heads", "n_head_kv", m.heads);
    m.kv_heads = new_arch ? kv : (multi_query ? 1 : m.heads);
    m.ffn_hidden = c.has("ffn_hidden_size") ? c.size("ffn_hidden_size") : c.four_times(c.has("hidden_size") ? "hidden_size" : "n_embed", m.hidden);
    m.tied_embeddings = c.flag_or("tie_word_embeddings", true);
    m.gated_mlp = false;
    m.positions = c.flag_or("alibi", false) ? Positions::alibi : Positions::rope;
    m.qkv_bias = m.attn_out_bias = m.mlp_bias = c.flag_or("bias", false);
    m.layer_norm = true;
    m.parallel_residual = parallel;
    const int parallel_norms = c.size_or("num_ln_in_parallel_attn", 2);
    m.norms_per_layer = new_arch ? (parallel_norms == 2 ? 2 : 1) : (parallel ? 1 : 2);
    if (m.hidden % m.heads != 0) c.fail("num_attention_heads", "a head count dividing hidden_size " + std::to_string(m.hidden));
    c.accept({"layer_norm_epsilon", "hidden_dropout", "attention_dropout", "rope_theta", "rope_scaling",
              "rope_parameters", "activation", "apply_residual_connection_post_layernorm"});
    return c.finish(m, name);
}

}  // namespace smol::hf
