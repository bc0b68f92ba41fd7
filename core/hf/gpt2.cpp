// GPT-2 (model_type "gpt2"), from transformers' models/gpt2:
//  * configuration_gpt2.py GPT2Config: vocab_size, n_positions, n_embd, n_layer, n_head, n_inner
//    (None: 4 · n_embd), tie_word_embeddings (True).
//  * modeling_gpt2.py: GPT2Model.wte Embedding(vocab_size, n_embd), wpe Embedding(n_positions,
//    n_embd); GPT2Block.ln_1 / ln_2 LayerNorm(n_embd); GPT2Attention.c_attn Conv1D(3·n_embd,
//    n_embd) and c_proj Conv1D(n_embd, n_embd), both with biases; GPT2MLP.c_fc Conv1D(n_inner,
//    n_embd) and c_proj Conv1D(n_embd, n_inner); GPT2Model.ln_f; GPT2LMHeadModel.lm_head tied to wte.
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_gpt2(ConfigReader& c, const std::string& name) {
    TransformerShape m;
    m.layers = c.size("n_layer");
    m.hidden = c.size("n_embd");
    m.heads = c.size("n_head");
    m.kv_heads = m.heads;
    m.ffn_hidden = c.size_or("n_inner", c.four_times("n_embd", m.hidden));
    m.vocab = c.size("vocab_size");
    m.max_seq = c.size("n_positions");
    // n_ctx: the context of the original release's configs, equal to n_positions; not read by
    // transformers since v4 (GPT2Config keeps it only as an extra attribute).
    c.optional_size("n_ctx");
    m.tied_embeddings = c.flag_or("tie_word_embeddings", true);
    m.gated_mlp = false;
    m.positions = Positions::learned;
    m.qkv_bias = m.attn_out_bias = m.mlp_bias = true;
    m.layer_norm = true;
    c.accept({"activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon",
              "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
              "summary_first_dropout", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
              "reorder_and_upcast_attn"});
    return c.finish(m, name);
}

}  // namespace smol::hf
