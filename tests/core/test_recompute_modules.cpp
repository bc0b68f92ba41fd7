// Megatron core's --recompute-modules (core/model.hpp RecomputeModule): what each module drops
// from a layer's saved activations and what its recompute redoes, against the tensors Megatron's
// checkpoints hold (transformer_layer.py, moe/experts.py, multi_latent_attention.py at
// NVIDIA/Megatron-LM d98e8a6), computed here term by term from the shapes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/model.hpp"
#include "test_support.hpp"

using namespace smol;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

Model from_text(const std::string& text) { return test::model_from_text(text); }

RecomputeModules modules(const std::string& text) { return parse_recompute_modules(text, {"", "", "--recompute-modules"}); }

Workload selective(const std::string& text, int tp = 1) {
    Workload w;
    w.recompute = Recompute::selective;
    w.recompute_modules = modules(text);
    w.tp = tp;
    return w;
}

double activations(const Model& m, const Workload& w, int block) {
    return m.blocks(w)[static_cast<std::size_t>(block)].activations.as_double();
}

/// The attention core's kernels of layer 1 as selective recompute of core_attn alone redoes them.
std::vector<Kernel> attention_core_kernels_of(const Model& m, Workload w) {
    w.recompute_modules = RecomputeModules{};
    return m.blocks(w)[1].recompute_kernels;
}

std::vector<KernelName> names(const std::vector<Kernel>& ks) {
    std::vector<KernelName> out;
    for (const Kernel& k : ks) out.push_back(k.name);
    return out;
}

// Two layers, the first dense (SwiGLU, f = 1024), the second MoE: 8 experts, top 2, expert
// ffn 512, one shared expert of 512. Sequence 128, micro-batch 1, bf16.
const char* kMoe = R"({"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 1024,
    "vocab": 1000, "seq": 128, "gated_mlp": true, "biases": false, "norm": "rmsnorm", "positions": "rope",
    "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 512, "shared_experts": 1, "dense_layers": [0]}})";

}  // namespace

TEST_CASE("recompute modules: names, Megatron's order, and bad lists", "[core][model]") {
    CHECK(to_string(RecomputeModules{}) == "core_attn");   // --recompute selective's default
    CHECK(to_string(modules("moe_act,layernorm")) == "moe_act,layernorm");
    CHECK(to_string(modules("layernorm,moe_act")) == "moe_act,layernorm");
    CHECK(to_string(modules("mlp,core_attn,shared_experts,mla_up_proj")) == "core_attn,mla_up_proj,mlp,shared_experts");
    CHECK_FALSE(modules("mlp").has(RecomputeModule::core_attn));
    auto bad = [](const std::string& text) { return bad_input_message([&] { (void)modules(text); }); };
    CHECK(to_string(modules("moe,layernorm,core_attn")) == "core_attn,layernorm,moe");
    CHECK_THAT(bad("mlp,attn"), Contains("\"attn\" in \"mlp,attn\""));
    CHECK_THAT(bad("mlp,mlp"), Contains("each once"));
    CHECK_THAT(bad(""), Contains("comma-separated list"));
    CHECK_THAT(bad("mlp,"), Contains("comma-separated list"));
}

TEST_CASE("recompute modules: a dense MLP drops its input and activation tensors and redoes norm, GEMMs and activation", "[core][model]") {
    const Model m = from_text(kMoe);
    const double s = 128, h = 256, f = 1024, e = 2;
    Workload none;
    const double kept = activations(m, none, 1);
    // The MLP's checkpoint (TE's LayerNormColumnParallelLinear holds the pre-MLP norm) keeps its
    // input, the norm's input; it drops the norm output (the first linear's input) and the
    // gate, up and product tensors.
    CHECK(kept - activations(m, selective("mlp"), 1) == Approx(s * h * e + 3 * s * f * e));
    // core_attn and mlp together drop both; core_attn alone drops the s² tensors (eager).
    CHECK(kept - activations(m, selective("core_attn,mlp"), 1) ==
          Approx((kept - activations(m, selective("core_attn"), 1)) + s * h * e + 3 * s * f * e));
    const Block b = m.blocks(selective("mlp"))[1];
    CHECK(names(b.recompute_kernels) ==
          std::vector<KernelName>{KernelName::norm, KernelName::mlp_up, KernelName::activation, KernelName::mlp_down});
    CHECK(b.recompute.count() == Approx(2 * s * h * 2 * f + 2 * s * f * h));   // gate+up, down
    CHECK(b.tp_collectives_recompute == 0);
    // Its row-parallel linear's all-reduce is inside the checkpoint: one collective again at tp 2;
    // full recompute redoes both of the layer's.
    CHECK(m.blocks(selective("mlp", 2))[1].tp_collectives_recompute == 1);
    CHECK(m.blocks(selective("core_attn", 2))[1].tp_collectives_recompute == 0);
    Workload full;
    full.recompute = Recompute::full;
    full.tp = 2;
    CHECK(m.blocks(full)[1].tp_collectives_recompute == 2);
    // The MoE layer is untouched by mlp.
    CHECK(activations(m, selective("mlp"), 2) == Approx(activations(m, none, 2)));
    CHECK(m.blocks(selective("mlp"))[2].recompute_kernels.empty());
}

TEST_CASE("recompute modules: moe_act, layernorm and shared_experts drop what their checkpoints discard", "[core][model]") {
    const Model m = from_text(kMoe);
    const double s = 128, h = 256, fe = 512, K = 2, e = 2;
    const double routed = s * K;   // token copies this rank's experts see (ep 1: all 8 experts)
    Workload none;
    const double kept = activations(m, none, 2);
    // moe_act: the activation's output, the down projection's input, routed × fe × e.
    CHECK(kept - activations(m, selective("moe_act"), 2) == Approx(routed * fe * e));
    // layernorm: the pre-MLP norm's output (router and shared expert input), s·h·e; the dense
    // layer's norms are fused into their linear layers, nothing to drop there.
    CHECK(kept - activations(m, selective("layernorm"), 2) == Approx(s * h * e));
    CHECK(activations(m, selective("layernorm"), 1) == Approx(activations(m, none, 1)));
    // shared_experts: gate, up and product of the shared expert (f = 512).
    CHECK(kept - activations(m, selective("shared_experts"), 2) == Approx(3 * s * fe * e));
    // Together, the sum.
    CHECK(kept - activations(m, selective("moe_act,layernorm,shared_experts"), 2) ==
          Approx(routed * fe * e + s * h * e + 3 * s * fe * e));
    // What they redo, in forward order: the norm, the shared expert, the experts' activation
    // (SwiGLU: read gate and up, write the product: 3 × routed × fe × e).
    const Block b = m.blocks(selective("moe_act,layernorm,shared_experts"))[2];
    CHECK(names(b.recompute_kernels) == std::vector<KernelName>{KernelName::norm, KernelName::mlp_up, KernelName::activation,
                                                                 KernelName::mlp_down, KernelName::activation});
    CHECK(b.recompute_kernels.back().bytes == Approx(3 * routed * fe * e));
    CHECK(b.recompute.count() == Approx(2 * s * h * 2 * fe + 2 * s * fe * h));   // the shared expert's GEMMs
    CHECK(m.blocks(selective("moe_act"))[2].recompute.count() == 0);
}

TEST_CASE("recompute modules: moe keeps the MoE layer's input alone and redoes it, all-to-alls between its parts", "[core][model]") {
    const Model m = from_text(kMoe);
    const double s = 128, h = 256, fe = 512, K = 2, E = 8, e = 2;
    const double routed = s * K;
    Workload none;
    // Dropped: the fp32 routing probabilities (s·E·4), the expert inputs (routed·h), the experts'
    // gate, up and product (3·routed·fe), the outputs the weighted combine keeps (routed·h), the
    // shared expert's tensors (3·s·512); kept: its input, the norm output.
    CHECK(activations(m, none, 2) - activations(m, selective("moe"), 2) ==
          Approx(s * E * 4 + routed * h * e + 3 * routed * fe * e + routed * h * e + 3 * s * fe * e));
    // moe_act and shared_experts add nothing to it; layernorm drops the input too.
    CHECK(activations(m, selective("moe,moe_act,shared_experts"), 2) == Approx(activations(m, selective("moe"), 2)));
    CHECK(activations(m, selective("moe"), 2) - activations(m, selective("moe,layernorm"), 2) == Approx(s * h * e));
    // Redone: router, its softmax and top-k, the permutation, the shared expert, then the experts
    // (split where the all-to-alls go), then the un-permutation; not the norm, not the residual.
    Workload ep = selective("core_attn,moe");
    ep.ep = 4;
    const Block b = m.blocks(ep)[2];
    const MoePass& p = *b.moe;
    std::vector<KernelName> moe_part(b.recompute_kernels.size());
    for (std::size_t i = 0; i < moe_part.size(); ++i) moe_part[i] = b.recompute_kernels[i].name;
    const std::size_t core = names(attention_core_kernels_of(m, ep)).size();
    moe_part.erase(moe_part.begin(), moe_part.begin() + static_cast<std::ptrdiff_t>(core));
    // (Two experts a rank: the received tokens sorted by expert and back, around the experts.)
    CHECK(moe_part == std::vector<KernelName>{KernelName::router, KernelName::activation, KernelName::other, KernelName::mlp_up,
                                              KernelName::activation, KernelName::mlp_down, KernelName::other, KernelName::mlp_up,
                                              KernelName::activation, KernelName::mlp_down, KernelName::other, KernelName::other});
    CHECK(p.recompute_dispatch_at == static_cast<int>(core) + 6);
    CHECK(p.recompute_combine_at == static_cast<int>(core) + 11);
    CHECK(b.recompute_kernels[static_cast<std::size_t>(p.recompute_dispatch_at) + 1].batch == 2);   // the grouped GEMM, 8 / 4 experts
    // Model FLOPs redone: the core and the MoE layer's forward (router, shared expert, experts at
    // balanced routing): all of the layer's forward but the attention projections.
    const Block f = m.blocks(selective("moe"))[2];
    CHECK(f.recompute.count() == Approx(2 * s * h * E + 2 * s * h * 2 * fe + 2 * s * fe * h + K * (2 * s * h * 2 * fe + 2 * s * fe * h)));
    // moe_act alone repeats no all-to-all.
    Workload act = selective("moe_act");
    act.ep = 4;
    CHECK(m.blocks(act)[2].moe->recompute_dispatch_at == -1);
}

TEST_CASE("recompute modules: MLA's up projections and its input norm", "[core][model]") {
    // DeepSeek-V2-Lite-like attention: no query latent, kv latent 512, RoPE 64, heads of 192/128.
    const Model m = from_text(R"({"kind": "transformer", "layers": 1, "hidden": 512, "heads": 4, "head_dim": 192,
        "v_head_dim": 128, "ffn_hidden": 1024, "vocab": 1000, "seq": 128, "gated_mlp": true, "biases": false,
        "norm": "rmsnorm", "positions": "rope", "mla": {"kv_lora_rank": 512, "rope_head_dim": 64}})");
    const double s = 128, h = 512, a = 4, hd = 192, vd = 128, e = 2;
    Workload none;
    const double kept = activations(m, none, 1);
    // mla_up_proj discards what the core reads: Q and K (a·192 each) and V (a·128).
    CHECK(kept - activations(m, selective("mla_up_proj"), 1) == Approx(s * (2 * a * hd + a * vd) * e));
    // MLA's input norm is a TENorm of its own: layernorm drops its output.
    CHECK(kept - activations(m, selective("layernorm"), 1) == Approx(s * h * e));
    // The up projection's recompute: the kv latent's norm, its up projection, RoPE.
    const Block b = m.blocks(selective("mla_up_proj"))[1];
    CHECK(names(b.recompute_kernels) == std::vector<KernelName>{KernelName::norm, KernelName::qkv, KernelName::qkv});
    CHECK(b.recompute.count() == Approx(2 * s * 512 * a * (hd - 64 + vd)));
}

TEST_CASE("recompute modules: model FLOPs per iteration count what is redone", "[core][model]") {
    const Model m = from_text(kMoe);
    const double s = 128, h = 256, f = 1024;
    const Flops core = m.flops_per_iteration(1, 0, Recompute::selective);
    const Flops with_mlp = m.flops_per_iteration(1, 0, Recompute::selective, modules("core_attn,mlp"));
    CHECK((with_mlp - core).count() == Approx(2 * s * h * 2 * f + 2 * s * f * h));
    CHECK(m.flops_per_iteration(1, 0, Recompute::none, modules("mlp")) == m.flops_per_iteration(1, 0, Recompute::none));
}
