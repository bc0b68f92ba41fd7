// Gemma and Gemma 2 (model_types "gemma", "gemma2"), from transformers' models/gemma and
// models/gemma2:
//  * configuration_gemma.py GemmaConfig: the Llama keys with head_dim explicit (256: Gemma-7B's
//    16 heads × 256 = 4096 ≠ hidden 3072), hidden_activation (GeGLU), tie_word_embeddings (True),
//    attention_bias (False).
//  * modeling_gemma.py: GemmaAttention q/k/v/o_proj with bias=config.attention_bias,
//    GemmaMLP gate/up/down_proj without biases, input_layernorm and post_attention_layernorm
//    GemmaRMSNorm(hidden) (one weight each, applied as 1 + w), GemmaModel.norm; lm_head tied.
//  * configuration_gemma2.py Gemma2Config: adds query_pre_attn_scalar, sliding_window (4096),
//    attn_logit_softcapping, final_logit_softcapping, cache_implementation, layer_types.
//  * modeling_gemma2.py Gemma2DecoderLayer: four norms (input_layernorm,
//    post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm); layers with
//    an even index attend through the window (`config.sliding_window if not bool(layer_idx % 2)`;
//    newer releases write the same pattern into layer_types).
#include "core/hf/reader.hpp"

namespace smol::hf {
namespace {

TransformerShape gemma_shape(ConfigReader& c) {
    TransformerShape m = llama_like(c, /*tied=*/true);
    m.qkv_bias = m.attn_out_bias = c.flag_or("attention_bias", false);
    c.accept({"hidden_act", "hidden_activation", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
              "attention_dropout"});
    return m;
}

}  // namespace

Model read_gemma(ConfigReader& c, const std::string& name) { return c.finish(gemma_shape(c), name); }

Model read_gemma2(ConfigReader& c, const std::string& name) {
    TransformerShape m = gemma_shape(c);
    m.norms_per_layer = 4;
    const bool listed = c.has("layer_types");
    m.sliding_window = c.size_or("sliding_window", 4096);
    if (listed) {
        read_sliding_window(c, m);
    } else {
        for (int i = 1; i < m.layers; i += 2) m.full_attention_layers.push_back(i);
    }
    // Soft-capping the logits is an elementwise pass (tanh) inside the attention and on the
    // logits: no size, and fused into the kernels that are priced.
    c.accept({"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "cache_implementation"});
    return c.finish(m, name);
}

}  // namespace smol::hf
