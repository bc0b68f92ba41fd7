// BLOOM (model_type "bloom"), from transformers' models/bloom:
//  * configuration_bloom.py BloomConfig: vocab_size, hidden_size (older configs: n_embed),
//    n_layer, n_head (attribute_map num_hidden_layers → n_layer, num_attention_heads → n_head),
//    apply_residual_connection_post_layernorm, pretraining_tp, slow_but_exact; no length (ALiBi).
//  * modeling_bloom.py: BloomModel.word_embeddings Embedding(vocab, hidden) and
//    word_embeddings_layernorm LayerNorm(hidden); BloomAttention.query_key_value Linear(hidden,
//    3·hidden, bias=True) and dense Linear(hidden, hidden); BloomMLP.dense_h_to_4h Linear(hidden,
//    4·hidden) and dense_4h_to_h, with biases (the width is always 4·hidden: a non-null n_inner
//    is not read by transformers, so it is refused here); BloomBlock input_layernorm and
//    post_attention_layernorm; BloomModel.ln_f; lm_head tied. ALiBi biases are computed, not
//    learned.
// The training length, where the config does not give seq_length: 2,048 (BigScience 2022, "BLOOM: A
// 176B-Parameter Open-Access Multilingual Language Model", arXiv 2211.05100, training hyperparameters:
// sequence length 2048).
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_bloom(ConfigReader& c, const std::string& name) {
    TransformerShape m;
    m.layers = c.has("n_layer") ? c.size("n_layer") : c.size("num_hidden_layers");
    c.mark("n_layer");
    c.mark("num_hidden_layers");
    m.heads = c.has("n_head") ? c.size("n_head") : c.size("num_attention_heads");
    c.mark("n_head");
    c.mark("num_attention_heads");
    m.hidden = c.has("n_embed") ? c.size("n_embed") : c.size("hidden_size");
    c.mark("n_embed");
    c.mark("hidden_size");
    if (c.has("n_inner")) c.fail("n_inner", "null (BLOOM's MLP is 4 × hidden in transformers, which does not read n_inner)");
    c.mark("n_inner");
    m.kv_heads = m.heads;
    m.ffn_hidden = c.four_times(c.has("n_embed") ? "n_embed" : "hidden_size", m.hidden);
    m.vocab = c.size("vocab_size");
    // seq_length: the training length Megatron-DeepSpeed's BLOOM configs carry (bigscience/bloom).
    m.max_seq = c.size_or("seq_length", 2048);
    m.tied_embeddings = c.flag_or("tie_word_embeddings", true);
    m.gated_mlp = false;
    m.positions = Positions::alibi;
    m.qkv_bias = m.attn_out_bias = m.mlp_bias = true;
    m.layer_norm = true;
    m.embedding_norm = true;
    if (m.hidden % m.heads != 0) c.fail("n_head", "a head count dividing the hidden size " + std::to_string(m.hidden));
    c.accept({"apply_residual_connection_post_layernorm", "attention_dropout", "hidden_dropout", "layer_norm_epsilon",
              "pretraining_tp", "slow_but_exact", "attention_softmax_in_fp32", "bias_dropout_fusion",
              "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv"});
    return c.finish(m, name);
}

}  // namespace smol::hf
