// Phi-3 (model_type "phi3"), from transformers' models/phi3:
//  * configuration_phi3.py Phi3Config: the Llama keys (vocab 32064), original_max_position_embeddings
//    (the pretraining length of the 128k variants), partial_rotary_factor, resid_pdrop,
//    embd_pdrop, sliding_window, tie_word_embeddings (False).
//  * modeling_phi3.py Phi3Attention.qkv_proj Linear(hidden, heads·head_dim + 2·kv_heads·head_dim,
//    bias=False) and o_proj; Phi3MLP.gate_up_proj Linear(hidden, 2·intermediate, bias=False) and
//    down_proj: the same parameters as Llama's separate projections, fused into one GEMM each;
//    the window applies to every layer.
#include "core/hf/reader.hpp"

namespace smol::hf {

Model read_phi3(ConfigReader& c, const std::string& name) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    read_sliding_window(c, m);
    c.optional_size("original_max_position_embeddings");  // read by the training-length default
    c.accept({"hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "attention_dropout",
              "resid_pdrop", "embd_pdrop", "partial_rotary_factor"});
    return c.finish(m, name);
}

}  // namespace smol::hf
