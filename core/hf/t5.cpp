// T5 (model_type "t5"), an encoder–decoder, from transformers' models/t5:
//  * configuration_t5.py T5Config: d_model, d_kv (the width of a head), d_ff, num_layers (the
//    encoder), num_decoder_layers (None: num_layers), num_heads, relative_attention_num_buckets,
//    relative_attention_max_distance, feed_forward_proj ("relu", or "gated-gelu" for T5 v1.1),
//    tie_word_embeddings (True; False for v1.1); attribute_map hidden_size → d_model,
//    num_attention_heads → num_heads, num_hidden_layers → num_layers, head_dim → d_kv.
//  * modeling_t5.py: T5Model.shared Embedding(vocab, d_model), used by both stacks;
//    T5Attention q/k/v Linear(d_model, heads·d_kv, bias=False), o Linear(heads·d_kv, d_model,
//    bias=False), relative_attention_bias Embedding(buckets, heads) in the first layer of each
//    stack (has_relative_attention_bias=bool(i == 0)); T5LayerNorm (a weight only) before each
//    sub-layer: two per encoder block (self-attention, feed-forward), three per decoder block
//    (plus EncDecAttention); final_layer_norm per stack; T5DenseActDense wi Linear(d_model, d_ff)
//    and wo, or T5DenseGatedActDense wi_0, wi_1 and wo, without biases; lm_head tied to shared.
// The training length, where the config does not give n_positions: 512 (Raffel et al. 2020,
// §3.1.2: inputs of 512 tokens). The decoder runs at the same length (T5's targets are shorter;
// the simulation does not tell the two apart).
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_t5(ConfigReader& c, const std::string& name) {
    TransformerShape m;
    const int encoder = c.size("num_layers");
    const int decoder = c.size_or("num_decoder_layers", encoder);
    m.layers = encoder + decoder;
    m.encoder_layers = encoder;
    m.hidden = c.size("d_model");
    m.heads = c.size("num_heads");
    m.kv_heads = m.heads;
    m.head_dim = c.size("d_kv");
    m.ffn_hidden = c.size("d_ff");
    m.vocab = c.size("vocab_size");
    // n_positions: the 512-token length of the original release's configs (not read by T5Config).
    m.max_seq = c.size_or("n_positions", 512);
    m.tied_embeddings = c.flag_or("tie_word_embeddings", true);
    const std::string ff = c.text_or("feed_forward_proj", "relu");
    m.gated_mlp = ff.rfind("gated-", 0) == 0;
    m.positions = Positions::relative;
    m.relative_attention_buckets = c.size_or("relative_attention_num_buckets", 32);
    m.qkv_bias = m.attn_out_bias = m.mlp_bias = false;
    m.layer_norm = false;
    if (!c.flag_or("is_encoder_decoder", true)) c.fail("is_encoder_decoder", "true (T5's encoder–decoder)");
    c.accept({"relative_attention_max_distance", "dropout_rate", "layer_norm_epsilon", "initializer_factor",
              "classifier_dropout", "output_past", "dense_act_fn", "is_gated_act"});
    return c.finish(m, name);
}

}  // namespace smol::hf
