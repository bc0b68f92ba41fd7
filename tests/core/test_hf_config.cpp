// HuggingFace config.json readers (core/hf_config.hpp, core/hf/*.cpp): a published config of each
// family read to the published parameter count, the family's features read from its keys, the
// training-length default, FLOPs per token against 6 × active parameters plus attention, and
// every bad config. The configs in tests/data/hf/ are the config.json files published with the
// models (tests/data/hf/README.md names each one's repository).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/hf_config.hpp"
#include "core/json.hpp"
#include "core/model.hpp"
#include "test_support.hpp"

using namespace smol;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

const std::string hf_dir = std::string(SMOL_TEST_DATA) + "/hf/";

Model hf(const std::string& file) { return load_model(hf_dir + file); }

Model from_text(const std::string& text) { return test::model_from_text(text, "config"); }

/// A small Llama config with `extra` keys spliced in (a JSON fragment starting with a comma).
std::string llama_with(const std::string& extra, const std::string& type = "llama") {
    return R"({"model_type": ")" + type + R"(", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256)" + extra + "}";
}

bool has_warning(const Model& m, const std::string& text) {
    for (const auto& w : m.warnings())
        if (w.find(text) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("a published config of each family reads to the published parameter count", "[core][hf_config]") {
    struct Case {
        const char* file;
        double published;
        const char* source;
        double unit = 1;  // the published figure's last digit (0.1e9 for "14.3B")
    };
    // Published totals: exact where the publisher gives the exact count, else the rounded figure
    // of the model card or paper; within 0.1 %, or within the rounding of a figure given to three
    // digits (Qwen's 14.3B and 30.5B are 0.11 % from their exact counts).
    const Case c = GENERATE(
        Case{"gpt2.json", 124'439'808, "GPT-2 small, Radford et al. 2019 (exact, HF model card)"},
        Case{"Llama-2-7b-hf.json", 6'738'415'616, "Llama 2 7B (exact, HF)"},
        Case{"Llama-3.1-8B.json", 8'030'261'248, "Llama 3.1 8B (exact, HF)"},
        Case{"Mistral-7B-v0.1.json", 7'241'732'096, "Mistral 7B (exact, HF)"},
        Case{"Mixtral-8x7B-v0.1.json", 46.7e9, "Mixtral of Experts, Jiang et al. 2024: 47B (HF card: 46.7B)"},
        Case{"Qwen2-7B.json", 7.62e9, "Qwen2 technical report, 7.6B (HF card: 7.62B)"},
        Case{"Qwen1.5-MoE-A2.7B.json", 14.3e9, "Qwen1.5-MoE-A2.7B model card: 14.3B", 0.1e9},
        Case{"Qwen3-30B-A3B.json", 30.5e9, "Qwen3-30B-A3B model card: 30.5B", 0.1e9},
        Case{"gemma-7b.json", 8.54e9, "Gemma report, Table 1: 786M embedding + 7,751M non-embedding"},
        Case{"gemma-2-9b.json", 9'241'705'984, "Gemma 2 report, Table 2: 917,504,000 + 8,324,201,984"},
        Case{"Phi-3-mini-4k-instruct.json", 3.82e9, "Phi-3-mini-4k-instruct model card: 3.82B"},
        Case{"gpt-neox-20b.json", 20'554'567'680, "Black et al. 2022, GPT-NeoX-20B (exact)"},
        Case{"opt-1.3b.json", 1'315'758'080, "OPT-1.3B (exact, HF)"},
        Case{"bloom-560m.json", 559'214'592, "bigscience/bloom-560m model card (exact)"},
        Case{"falcon-7b.json", 6'921'720'704, "Falcon-7B (exact, HF)"},
        Case{"DeepSeek-V2-Lite.json", 15.7e9, "DeepSeek-V2 paper: V2-Lite, 15.7B total"},
        Case{"DeepSeek-V3.json", 671e9, "DeepSeek-V3 report: 671B total (without the 14B MTP module)"},
        Case{"t5-base.json", 222'903'552, "T5-base (exact, HF; Raffel et al. 2020 round it to 220M)"},
        Case{"gpt-oss-120b.json", 116.83e9, "gpt-oss model card: 116.83B total"});
    CAPTURE(c.file, c.source);
    const Model m = hf(c.file);
    CHECK(std::abs(static_cast<double>(m.parameters()) - c.published) <= std::max(0.001 * c.published, c.unit / 2));
}

TEST_CASE("active parameters: the routed experts a token goes to", "[core][hf_config]") {
    // Mixtral: "13B active parameters" per token (Jiang et al. 2024; 12.9B on the model card), counting
    // both embedding tables.
    CHECK(static_cast<double>(hf("Mixtral-8x7B-v0.1.json").active_parameters()) == Approx(12.9e9).epsilon(0.002));
    // gpt-oss-120b: 5.13B active, counting the unembedding but not the input embedding (model card).
    const Model oss = hf("gpt-oss-120b.json");
    const double embedding = 201088.0 * 2880;
    CHECK(static_cast<double>(oss.active_parameters()) - embedding == Approx(5.13e9).epsilon(0.001));
    // Dense models: all of them.
    const Model llama = hf("Llama-3.1-8B.json");
    CHECK(llama.active_parameters() == llama.parameters());
}

TEST_CASE("each family's features come from its keys", "[core][hf_config]") {
    SECTION("Mistral: a 4,096 window on every layer; Mixtral: 8 experts, 2 per token") {
        const TransformerShape m = hf("Mistral-7B-v0.1.json").shape();
        CHECK(m.sliding_window == 4096);
        CHECK(m.full_attention_layers.empty());
        CHECK(m.attended_keys(5, 8192) == 4096);
        const TransformerShape x = hf("Mixtral-8x7B-v0.1.json").shape();
        CHECK((x.moe.experts == 8 && x.moe.top_k == 2 && x.moe.ffn_hidden == 14336));
        CHECK(x.sliding_window == 0);  // sliding_window null
        for (int i = 0; i < 32; ++i) CHECK(x.moe_layer(i));
    }
    SECTION("Qwen2: biases on Q, K, V only; Qwen2-MoE: 60 experts, a gated shared expert; Qwen3-MoE: head_dim, q/k norms") {
        const TransformerShape q = hf("Qwen2-7B.json").shape();
        CHECK((q.qkv_bias && !q.attn_out_bias && !q.mlp_bias));
        CHECK(q.sliding_window == 0);  // use_sliding_window false
        const TransformerShape m = hf("Qwen1.5-MoE-A2.7B.json").shape();
        CHECK((m.moe.experts == 60 && m.moe.top_k == 4 && m.moe.shared_experts == 1 && m.moe.shared_ffn_hidden == 5632));
        CHECK(m.moe.shared_expert_gate);
        const TransformerShape q3 = hf("Qwen3-30B-A3B.json").shape();
        CHECK((q3.head_dim == 128 && q3.heads * q3.head_dim == 2 * q3.hidden));
        CHECK(q3.qk_norm);
        CHECK(q3.moe.shared_experts == 0);
    }
    SECTION("Gemma: head_dim 256 and tied embeddings; Gemma 2: four norms, a window on even layers") {
        const TransformerShape g = hf("gemma-7b.json").shape();
        CHECK((g.head_dim == 256 && g.tied_embeddings && g.norms_per_layer == 2));
        const TransformerShape g2 = hf("gemma-2-9b.json").shape();
        CHECK((g2.norms_per_layer == 4 && g2.sliding_window == 4096));
        CHECK(g2.attended_keys(0, 8192) == 4096);
        CHECK(g2.attended_keys(1, 8192) == 8192);
    }
    SECTION("GPT-NeoX: parallel residual, LayerNorm, ungated MLP with biases; OPT: 2 extra position rows") {
        const TransformerShape n = hf("gpt-neox-20b.json").shape();
        CHECK((n.parallel_residual && n.layer_norm && !n.gated_mlp && n.mlp_bias && !n.tied_embeddings));
        const TransformerShape o = hf("opt-1.3b.json").shape();
        CHECK((o.positions == Positions::learned && o.position_offset == 2 && o.ffn_hidden == 8192));
    }
    SECTION("BLOOM: ALiBi and an embedding norm; Falcon-7B: one key-value head, one norm for both branches") {
        const TransformerShape b = hf("bloom-560m.json").shape();
        CHECK((b.positions == Positions::alibi && b.embedding_norm && b.ffn_hidden == 4 * b.hidden));
        const TransformerShape f = hf("falcon-7b.json").shape();
        CHECK((f.kv_heads == 1 && f.norms_per_layer == 1 && f.parallel_residual && !f.qkv_bias));
    }
    SECTION("DeepSeek: latent attention, shared experts, leading dense layers") {
        const TransformerShape lite = hf("DeepSeek-V2-Lite.json").shape();
        CHECK((lite.mla.q_lora_rank == 0 && lite.mla.kv_lora_rank == 512 && lite.mla.rope_head_dim == 64));
        CHECK((lite.head_dim == 192 && lite.v_head_dim == 128));
        CHECK((lite.moe.experts == 64 && lite.moe.top_k == 6 && lite.moe.shared_experts == 2));
        CHECK(lite.moe.dense_layers == std::vector<int>{0});
        const Model v3 = hf("DeepSeek-V3.json");
        CHECK(v3.shape().mla.q_lora_rank == 1536);
        CHECK(v3.shape().moe.dense_layers == std::vector<int>{0, 1, 2});
        CHECK(has_warning(v3, "num_nextn_predict_layers 1"));  // read, and said not to be modelled
        CHECK(has_warning(v3, "quantization_config"));
    }
    SECTION("T5: 12 encoder and 12 decoder layers, relative positions, tied") {
        const TransformerShape t = hf("t5-base.json").shape();
        CHECK((t.layers == 24 && t.encoder_layers == 12 && t.positions == Positions::relative));
        CHECK((t.relative_attention_buckets == 32 && t.tied_embeddings && !t.gated_mlp));
        // Decoder layers hold a cross-attention and a third norm: more parameters than encoder layers.
        const auto blocks = hf("t5-base.json").blocks(Workload{});
        const std::int64_t d = 768, ff = 3072;
        CHECK(blocks[2].params == 4 * d * d + d * ff * 2 + 2 * d);            // encoder layer 1
        CHECK(blocks[14].params == 8 * d * d + d * ff * 2 + 3 * d);           // decoder layer 1
        CHECK(blocks[1].params == blocks[2].params + 32 * 12);                // relative bias in the first layer
    }
    SECTION("GPT-OSS: sinks, biases, router bias, alternating windows from layer_types") {
        const TransformerShape g = hf("gpt-oss-120b.json").shape();
        CHECK((g.attention_sinks && g.qkv_bias && g.moe.router_bias && g.moe.expert_biases));
        CHECK((g.moe.experts == 128 && g.moe.top_k == 4 && g.sliding_window == 128));
        CHECK(g.attended_keys(0, 4096) == 128);
        CHECK(g.attended_keys(1, 4096) == 4096);
    }
}

TEST_CASE("the training length: a long-context config defaults to the length it was pretrained at", "[core][hf_config]") {
    SECTION("Llama 3.1: 131,072 positions, rope_scaling records 8,192") {
        const Model m = hf("Llama-3.1-8B.json");
        CHECK(m.shape().max_seq == 131072);
        CHECK(m.default_seq() == 8192);
        CHECK_THAT(m.seq_note(), Contains("rope_scaling.original_max_position_embeddings"));
    }
    SECTION("GPT-OSS: 4,096 from rope_scaling; DeepSeek-V3: 4,096") {
        CHECK(hf("gpt-oss-120b.json").default_seq() == 4096);
        CHECK(hf("DeepSeek-V3.json").default_seq() == 4096);
    }
    SECTION("Qwen2 and Mistral record no pretraining length: the stated default, 8,192") {
        for (const char* f : {"Qwen2-7B.json", "Mistral-7B-v0.1.json"}) {
            CAPTURE(f);
            const Model m = hf(f);
            CHECK(m.default_seq() == kDefaultLongContextTrainingSeq);
            CHECK(kDefaultLongContextTrainingSeq == 8192);
            CHECK_THAT(m.seq_note(), Contains("default training length is 8192"));
        }
    }
    SECTION("a config below 32,768 positions trains at its length, no note") {
        const Model m = hf("Phi-3-mini-4k-instruct.json");
        CHECK(m.default_seq() == 4096);
        CHECK(m.seq_note().empty());
        CHECK(hf("gemma-2-9b.json").default_seq() == 8192);
    }
}

TEST_CASE("FLOPs per token are 6 × active parameters plus attention", "[core][hf_config]") {
    // Training FLOPs per token (forward + backward, Narayanan et al. 2021): 6 × the parameters a
    // token multiplies (active, without the embedding lookup tables, which are gathered, not
    // multiplied) plus 3 × the attention scores and context, 2·a·keys·(hd + vd) per layer, keys
    // capped by a sliding window. Norm weights, biases and sinks are elementwise (≪ 0.1 %).
    const char* file = GENERATE("Llama-3.1-8B.json", "gemma-2-9b.json", "gpt-neox-20b.json", "Mixtral-8x7B-v0.1.json",
                                "DeepSeek-V3.json", "gpt-oss-120b.json", "Qwen1.5-MoE-A2.7B.json");
    CAPTURE(file);
    const Model m = hf(file);
    const TransformerShape& s = m.shape();
    const int seq = 4096;
    double lookup = static_cast<double>(s.vocab) * s.hidden;  // the input table (the head multiplies its own)
    if (s.tied_embeddings) lookup = 0;                           // tied: the table is the head's weight
    double attention = 0;
    for (int i = 0; i < s.layers; ++i)
        attention += 2.0 * s.heads * s.attended_keys(i, seq) * (s.q_head_dim() + s.value_head_dim());
    const double expected = 6 * (static_cast<double>(m.active_parameters()) - lookup) + 3 * attention;
    CHECK(m.flops_per_iteration(1, seq, Recompute::none).count() / seq == Approx(expected).epsilon(0.001));
}

TEST_CASE("bad configs exit 2 naming the key", "[core][hf_config]") {
    SECTION("an unknown size or count key: DeepSeek-V3's num_nextn_predict_layers in a qwen2 config") {
        const std::string msg = bad_input_message([] { from_text(llama_with(R"(, "num_nextn_predict_layers": 1)", "qwen2")); });
        CHECK_THAT(msg, Contains("config.json: at /num_nextn_predict_layers: unknown key 'num_nextn_predict_layers' "
                                 "for model_type 'qwen2'"));
        CHECK_THAT(msg, Contains("size or a count"));
    }
    SECTION("every size pattern is refused: _size, _dim, _rank, experts") {
        for (const char* key : {"expert_hidden_size", "rotary_dim", "lora_rank", "moe_num_experts"}) {
            CAPTURE(key);
            const std::string extra = std::string(R"(, ")") + key + R"(": 8)";
            CHECK_THAT(bad_input_message([&] { from_text(llama_with(extra)); }), Contains(std::string("/") + key));
        }
    }
    SECTION("an unknown key naming no size is a warning, not an error") {
        const Model m = from_text(llama_with(R"(, "my_training_note": "hello")"));
        CHECK(has_warning(m, "key 'my_training_note' is not read by the llama reader"));
        CHECK(m.parameters() > 0);
    }
    SECTION("heads not dividing hidden without head_dim") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 66,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256})"); }),
                   Contains("at /num_attention_heads: expected a head count dividing hidden_size 66 (or a head_dim key"));
        // With head_dim it is a valid shape (Gemma's, Qwen3's).
        const Model ok = from_text(llama_with(R"(, "head_dim": 32)"));
        CHECK(ok.shape().q_head_dim() == 32);
    }
    SECTION("experts without a top-k") {
        CHECK_THAT(bad_input_message([] {
                       from_text(R"({"model_type": "deepseek_v2", "num_hidden_layers": 2, "hidden_size": 64,
                           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
                           "max_position_embeddings": 256, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
                           "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "moe_intermediate_size": 32,
                           "num_experts_per_tok": null})"); }),
                   Contains("at /num_experts_per_tok: expected a positive integer, found null"));
        CHECK_THAT(bad_input_message([] {
                       from_text(R"({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq": 64,
                           "moe": {"experts": 8, "ffn_hidden": 32}})"); }),
                   Contains("at /moe: expected a top_k with the experts"));
    }
    SECTION("an unknown model_type lists the supported ones") {
        const std::string msg = bad_input_message([] { from_text(llama_with("", "lama")); });
        CHECK_THAT(msg, Contains("at /model_type: expected a model_type smolcluster reads: bloom, deepseek_v2, deepseek_v3, "
                                 "falcon, gemma, gemma2, gpt2, gpt_neox, gpt_oss, llama, mistral, mixtral, opt, phi3, "
                                 "qwen2, qwen2_moe, qwen3_moe, t5 (did you mean 'llama'?)"));
        CHECK_THAT(msg, Contains("found 'lama'"));
    }
    SECTION("neither model_type nor a known architecture") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"num_hidden_layers": 2, "architectures": ["FooForCausalLM"]})"); }),
                   Contains("a HuggingFace config.json with a model_type"));
    }
    SECTION("BLOOM with an n_inner transformers would not read") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"model_type": "bloom", "n_layer": 2, "hidden_size": 64,
            "n_head": 4, "vocab_size": 100, "n_inner": 512})"); }),
                   Contains("at /n_inner: expected null (BLOOM's MLP is 4 × hidden"));
    }
    SECTION("OPT's projected embeddings are refused, not read wrong") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "ffn_dim": 256, "vocab_size": 100, "max_position_embeddings": 64,
            "word_embed_proj_dim": 32})"); }),
                   Contains("at /word_embed_proj_dim: expected hidden_size 64"));
    }
    SECTION("layer_types with the wrong length") {
        CHECK_THAT(bad_input_message([] { from_text(llama_with(R"(, "sliding_window": 16, "layer_types": ["full_attention"])",
                                                               "mistral")); }),
                   Contains("at /layer_types: expected one entry per layer (2)"));
    }
}

TEST_CASE("architectures: the family of a config without model_type, and a mismatch said", "[core][hf_config]") {
    const Model m = from_text(R"({"architectures": ["MixtralForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256})");
    CHECK(m.shape().moe.experts == 8);  // MixtralConfig's default num_local_experts
    CHECK(has_warning(m, "no model_type; read as mixtral from architectures MixtralForCausalLM"));
    const Model q = from_text(llama_with(R"(, "architectures": ["Qwen2MoeForCausalLM"])", "qwen2"));
    CHECK(has_warning(q, "is not a qwen2 class"));
    // GPT2LMHeadModel is a GPT-2 class (no warning).
    CHECK(hf("gpt2.json").warnings().empty());
    CHECK(hf_model_types().size() == 18);
}
