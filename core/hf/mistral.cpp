// Mistral and Mixtral (model_types "mistral", "mixtral"), from transformers' models/mistral and
// models/mixtral:
//  * configuration_mistral.py MistralConfig: the Llama keys (no biases anywhere) plus
//    sliding_window (4096 in Mistral-7B-v0.1; None from v0.2 on) and head_dim.
//  * modeling_mistral.py MistralAttention: q/k/v/o_proj with bias=False, the window passed to
//    the attention kernel for every layer (sliding_window=getattr(config, "sliding_window")).
//  * configuration_mixtral.py MixtralConfig: num_local_experts (8), num_experts_per_tok (2),
//    router_aux_loss_coef, router_jitter_noise; attribute_map num_experts → num_local_experts.
//  * modeling_mixtral.py MixtralSparseMoeBlock: gate Linear(hidden, num_local_experts,
//    bias=False); each expert (MixtralBlockSparseTop2MLP, in newer releases MixtralExperts'
//    gate_up_proj and down_proj) w1, w3 Linear(hidden, intermediate_size) and w2
//    Linear(intermediate_size, hidden), no biases; every layer is an MoE layer.
#include "core/hf/reader.hpp"

namespace smol::hf {
namespace {

TransformerShape mistral_shape(ConfigReader& c) {
    TransformerShape m = llama_like(c, /*tied=*/false);
    read_sliding_window(c, m);
    c.accept({"hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "attention_dropout"});
    return m;
}

}  // namespace

Model read_mistral(ConfigReader& c, const std::string& name) { return c.finish(mistral_shape(c), name); }

Model read_mixtral(ConfigReader& c, const std::string& name) {
    TransformerShape m = mistral_shape(c);
    const bool aliased = !c.has("num_local_experts") && c.has("num_experts");
    m.moe.experts = aliased ? c.size("num_experts") : c.size_or("num_local_experts", 8);
    c.mark("num_local_experts");
    c.mark("num_experts");
    m.moe.top_k = c.size_or("num_experts_per_tok", 2);
    m.moe.ffn_hidden = m.ffn_hidden;
    c.accept({"router_aux_loss_coef", "router_jitter_noise"});
    return c.finish(m, name);
}

}  // namespace smol::hf
