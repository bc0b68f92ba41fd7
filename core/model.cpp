// Model description: presets, smolcluster's own model JSON, and the Model interface. The
// per-block arithmetic of transformers is core/transformer.cpp; HuggingFace config.json files are
// read by core/hf_config.cpp, one reader per model_type (core/hf/).
#include "core/model.hpp"

#include "core/cnn_presets.hpp"
#include "core/hf_config.hpp"
#include "core/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

namespace smol {
namespace {

// ---------------------------------------------------------------------------------------------
// Presets: the published configurations.
//  * GPT-2: Radford et al. 2019, HuggingFace gpt2 / gpt2-medium / gpt2-large / gpt2-xl config.json.
//  * GPT-3 175B: Brown et al. 2020, Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048).
//  * Llama 2 7B: Touvron et al. 2023, meta-llama/Llama-2-7b-hf config.json.
//  * Llama 3 8B: meta-llama/Meta-Llama-3-8B config.json (GQA with 8 key-value heads).

TransformerShape gpt2_style(int layers, int hidden, int heads, int max_seq) {
    TransformerShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = heads;
    s.kv_heads = heads;
    s.ffn_hidden = 4 * hidden;
    s.vocab = 50257;  // GPT-2 byte-level BPE, reused by GPT-3
    s.max_seq = max_seq;
    s.tied_embeddings = true;
    s.gated_mlp = false;
    s.positions = Positions::learned;
    s.qkv_bias = s.attn_out_bias = s.mlp_bias = true;
    s.layer_norm = true;
    return s;
}

TransformerShape tiny_gpt(int layers, int hidden, int heads, int max_seq) {
    TransformerShape s = gpt2_style(layers, hidden, heads, max_seq);
    s.vocab = 8192;
    return s;
}

TransformerShape llama_style(int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int max_seq) {
    TransformerShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.ffn_hidden = ffn;
    s.vocab = vocab;
    s.max_seq = max_seq;
    s.tied_embeddings = false;
    s.gated_mlp = true;
    s.positions = Positions::rope;
    s.qkv_bias = s.attn_out_bias = s.mlp_bias = false;
    s.layer_norm = false;
    return s;
}

const std::map<std::string, TransformerShape>& transformer_presets() {
    static const std::map<std::string, TransformerShape> presets{
        // Small GPT-2-shaped models for real runs on a laptop or a CI box (a validation on two
        // cores takes seconds): not published models, their shapes are smolcluster's own.
        {"gpt-tiny", tiny_gpt(4, 256, 4, 256)},
        {"gpt-mini", tiny_gpt(8, 512, 8, 512)},
        {"gpt2-small", gpt2_style(12, 768, 12, 1024)},
        {"gpt2-medium", gpt2_style(24, 1024, 16, 1024)},
        {"gpt2-large", gpt2_style(36, 1280, 20, 1024)},
        {"gpt2-xl", gpt2_style(48, 1600, 25, 1024)},
        {"gpt3-175b", gpt2_style(96, 12288, 96, 2048)},
        {"llama2-7b", llama_style(32, 4096, 32, 32, 11008, 32000, 4096)},
        {"llama3-8b", llama_style(32, 4096, 32, 8, 14336, 128256, 8192)},
        // Meta's config.json on the Hugging Face Hub (meta-llama/Llama-2-70b-hf,
        // meta-llama/Meta-Llama-3-70B): 80 layers of 8,192, 64 query and 8 key-value heads,
        // SwiGLU of 28,672; vocabularies 32,000 and 128,256; contexts 4,096 and 8,192.
        {"llama2-70b", llama_style(80, 8192, 64, 8, 28672, 32000, 4096)},
        {"llama3-70b", llama_style(80, 8192, 64, 8, 28672, 128256, 8192)},
    };
    return presets;
}

// ---------------------------------------------------------------------------------------------
// JSON readers.

int positive_int(const JsonView& j, const std::string& key) {
    const std::int64_t n = j.positive_integer(key);
    if (n > std::numeric_limits<int>::max()) j.fail_member(key, "a size below 2^31", std::to_string(n));
    return static_cast<int>(n);
}

int non_negative_int(const JsonView& j, const std::string& key, int fallback) {
    if (!j.has(key)) return fallback;
    const std::int64_t n = j.integer(key);
    if (n < 0 || n > std::numeric_limits<int>::max()) j.fail_member(key, "a non-negative size below 2^31", std::to_string(n));
    return static_cast<int>(n);
}

/// A sorted list of layer indices ("dense_layers": [0, 1, 2]).
std::vector<int> layer_list_of(const JsonView& j, const std::string& key) {
    std::vector<int> out;
    if (!j.has(key)) return out;
    const JsonView list = j.at(key);
    for (std::size_t i = 0; i < list.size(); ++i) {
        const Json& v = list.at(i).raw();
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0) list.at(i).fail("a layer index (an integer ≥ 0)", describe_json(v));
        out.push_back(static_cast<int>(v.get<std::int64_t>()));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

template <class E, std::size_t N>
E choice(const JsonView& j, const std::string& key, const std::string& fallback, const std::pair<const char*, E> (&names)[N]) {
    const std::string text = j.string_or(key, fallback);
    std::string list;
    for (const auto& [n, v] : names) {
        if (text == n) return v;
        list += std::string(list.empty() ? "" : " or ") + "\"" + n + "\"";
    }
    j.fail_member(key, list, describe_json(j.raw()[key]));
}

/// smolcluster's own transformer JSON (README "Models"): the GPT-2 / Llama shape in a handful
/// of numbers, plus what current models need (head_dim, biases by projection, norms, positions,
/// sliding windows, experts, latent attention, T5's encoder layers).
/// The default ffn width 4 · hidden, which must itself be a size below 2^31.
int four_times(const JsonView& j, const std::string& key, int hidden) {
    if (hidden > std::numeric_limits<int>::max() / 4)
        j.fail_member(key, "a hidden size below 2^29 (the default ffn width is 4 × hidden)", std::to_string(hidden));
    return 4 * hidden;
}

Model own_transformer(const JsonView& j, const std::string& name) {
    j.expect_only({"kind", "name", "layers", "hidden", "heads", "kv_heads", "head_dim", "v_head_dim", "ffn_hidden",
                   "vocab", "seq", "max_seq", "tied_embeddings", "gated_mlp", "biases", "qkv_bias", "attn_out_bias",
                   "mlp_bias", "norm", "norms_per_layer", "qk_norm", "embedding_norm", "final_norm", "positions",
                   "position_offset", "relative_attention_buckets", "parallel_residual", "attention_sinks",
                   "sliding_window", "full_attention_layers", "encoder_layers", "moe", "mla"});
    TransformerShape m;
    m.layers = positive_int(j, "layers");
    m.hidden = positive_int(j, "hidden");
    m.heads = positive_int(j, "heads");
    m.kv_heads = j.has("kv_heads") ? positive_int(j, "kv_heads") : m.heads;
    m.head_dim = non_negative_int(j, "head_dim", 0);
    m.v_head_dim = non_negative_int(j, "v_head_dim", 0);
    m.ffn_hidden = j.has("ffn_hidden") ? positive_int(j, "ffn_hidden") : four_times(j, "hidden", m.hidden);
    m.vocab = positive_int(j, "vocab");
    // "seq" is the training length; "max_seq" the positions the model knows (default: seq).
    m.train_seq = positive_int(j, "seq");
    m.max_seq = j.has("max_seq") ? positive_int(j, "max_seq") : m.train_seq;
    if (m.train_seq > m.max_seq) j.fail_member("seq", "at most max_seq " + std::to_string(m.max_seq), std::to_string(m.train_seq));
    m.tied_embeddings = j.boolean_or("tied_embeddings", true);
    m.gated_mlp = j.boolean_or("gated_mlp", false);
    const bool biases = j.boolean_or("biases", true);
    m.qkv_bias = j.boolean_or("qkv_bias", biases);
    m.attn_out_bias = j.boolean_or("attn_out_bias", biases);
    m.mlp_bias = j.boolean_or("mlp_bias", biases);
    static const std::pair<const char*, bool> norms[] = {{"layernorm", true}, {"rmsnorm", false}};
    m.layer_norm = choice(j, "norm", "layernorm", norms);
    m.norms_per_layer = j.has("norms_per_layer") ? positive_int(j, "norms_per_layer") : 2;
    m.qk_norm = j.boolean_or("qk_norm", false);
    m.embedding_norm = j.boolean_or("embedding_norm", false);
    m.final_norm = j.boolean_or("final_norm", true);
    static const std::pair<const char*, Positions> positions[] = {
        {"learned", Positions::learned}, {"rope", Positions::rope}, {"alibi", Positions::alibi}, {"relative", Positions::relative}};
    m.positions = choice(j, "positions", "learned", positions);
    m.position_offset = non_negative_int(j, "position_offset", 0);
    m.relative_attention_buckets = non_negative_int(j, "relative_attention_buckets", 0);
    m.parallel_residual = j.boolean_or("parallel_residual", false);
    m.attention_sinks = j.boolean_or("attention_sinks", false);
    m.sliding_window = non_negative_int(j, "sliding_window", 0);
    m.full_attention_layers = layer_list_of(j, "full_attention_layers");
    m.encoder_layers = non_negative_int(j, "encoder_layers", 0);
    if (const auto moe = j.find("moe")) {
        moe->expect_only({"experts", "top_k", "ffn_hidden", "shared_experts", "shared_ffn_hidden", "shared_expert_gate",
                          "router_bias", "expert_biases", "dense_layers"});
        m.moe.experts = positive_int(*moe, "experts");
        m.moe.top_k = non_negative_int(*moe, "top_k", 0);
        m.moe.ffn_hidden = positive_int(*moe, "ffn_hidden");
        m.moe.shared_experts = non_negative_int(*moe, "shared_experts", 0);
        m.moe.shared_ffn_hidden = non_negative_int(*moe, "shared_ffn_hidden", m.moe.shared_experts > 0 ? m.moe.ffn_hidden : 0);
        m.moe.shared_expert_gate = moe->boolean_or("shared_expert_gate", false);
        m.moe.router_bias = moe->boolean_or("router_bias", false);
        m.moe.expert_biases = moe->boolean_or("expert_biases", false);
        m.moe.dense_layers = layer_list_of(*moe, "dense_layers");
        if (m.moe.top_k == 0) moe->fail("a top_k with the experts (how many experts each token goes to)", "none");
    }
    if (const auto mla = j.find("mla")) {
        mla->expect_only({"q_lora_rank", "kv_lora_rank", "rope_head_dim"});
        m.mla.q_lora_rank = non_negative_int(*mla, "q_lora_rank", 0);
        m.mla.kv_lora_rank = positive_int(*mla, "kv_lora_rank");
        m.mla.rope_head_dim = positive_int(*mla, "rope_head_dim");
    }
    try {
        return Model::transformer(j.string_or("name", name), m);
    } catch (const Error& e) {
        throw e.with_context(j.context());
    }
}

Model own_layer_list(const JsonView& j, const std::string& name) {
    j.expect_only({"kind", "name", "input_bytes_per_sample", "layers"});
    const std::int64_t input = j.positive_integer("input_bytes_per_sample");
    if (input > std::numeric_limits<int>::max())
        j.fail_member("input_bytes_per_sample", "a size below 2 GiB", std::to_string(input));
    const JsonView list = j.at("layers");
    if (list.size() == 0) list.fail("a non-empty array of layers", "an empty array");
    static const std::vector<std::string> kinds{"conv", "fc", "pool", "norm", "act", "add", "dropout", "other"};
    std::vector<LayerSpec> layers;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const JsonView l = list.at(i);
        l.expect_only({"name", "kind", "params", "fwd_flops", "activations", "output"});
        LayerSpec spec;
        spec.name = l.string("name");
        spec.kind = l.string("kind");
        if (std::find(kinds.begin(), kinds.end(), spec.kind) == kinds.end()) {
            l.fail_member("kind", "one of " + join(kinds) + did_you_mean(spec.kind, kinds),
                          describe_json(l.raw()["kind"]));
        }
        spec.params = l.integer("params");
        if (spec.params < 0) l.fail_member("params", "a non-negative parameter count", std::to_string(spec.params));
        const double flops = l.number("fwd_flops");
        if (flops < 0) l.fail_member("fwd_flops", "a non-negative FLOP count", describe_json(l.raw()["fwd_flops"]));
        spec.fwd_flops = Flops(flops);
        spec.activations = l.bytes("activations");
        spec.output = l.bytes("output");
        layers.push_back(std::move(spec));
    }
    return Model::layer_list(j.string_or("name", name), std::move(layers), static_cast<int>(input));
}

}  // namespace

int dtype_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

const char* to_string(DType d) {
    switch (d) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
    }
    return "?";
}

DType parse_dtype(const std::string& text, const ErrorContext& where) {
    if (text == "bf16") return DType::bf16;
    if (text == "fp16") return DType::fp16;
    if (text == "fp32") return DType::fp32;
    fail_input("bf16, fp16 or fp32", "\"" + text + "\"", where);
}

const char* to_string(Recompute r) {
    switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    }
    return "?";
}

Recompute parse_recompute(const std::string& text, const ErrorContext& where) {
    if (text == "none") return Recompute::none;
    if (text == "selective") return Recompute::selective;
    if (text == "full") return Recompute::full;
    fail_input("none, selective or full", "\"" + text + "\"", where);
}

namespace {
constexpr std::pair<RecomputeModule, const char*> kRecomputeModules[] = {
    {RecomputeModule::core_attn, "core_attn"}, {RecomputeModule::moe_act, "moe_act"},
    {RecomputeModule::layernorm, "layernorm"}, {RecomputeModule::mla_up_proj, "mla_up_proj"},
    {RecomputeModule::mlp, "mlp"},             {RecomputeModule::moe, "moe"},
    {RecomputeModule::shared_experts, "shared_experts"},
};
}  // namespace

std::vector<RecomputeModule> modules_in(RecomputeModules m) {
    std::vector<RecomputeModule> out;
    for (const auto& [module, name] : kRecomputeModules)
        if (m.has(module)) out.push_back(module);
    return out;
}

std::string to_string(RecomputeModules m) {
    std::string out;
    for (const auto& [module, name] : kRecomputeModules)
        if (m.has(module)) {
            if (!out.empty()) out += ',';
            out += name;
        }
    return out;
}

RecomputeModules parse_recompute_modules(const std::string& text, const ErrorContext& where) {
    const char* expected = "a comma-separated list of core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts";
    RecomputeModules out{0};
    std::size_t at = 0;
    while (true) {
        const std::size_t comma = text.find(',', at);
        const std::string name = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        bool known = false;
        for (const auto& [module, n] : kRecomputeModules)
            if (name == n) {
                if (out.has(module)) fail_input(expected + std::string(", each once"), "\"" + name + "\" twice", where);
                out.bits |= static_cast<std::uint8_t>(module);
                known = true;
            }
        if (!known) fail_input(expected, "\"" + name + "\" in \"" + text + "\"", where);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

const char* to_string(Positions p) {
    switch (p) {
    case Positions::learned: return "learned";
    case Positions::rope: return "rope";
    case Positions::alibi: return "alibi";
    case Positions::relative: return "relative";
    }
    return "?";
}

const char* to_string(Attention a) { return a == Attention::flash ? "flash" : "eager"; }

/// Whether Megatron's fused scale-mask-softmax kernel takes a layer's scores, as
/// FusedScaleMaskSoftmax.is_kernel_available decides (NVIDIA/Megatron-LM d98e8a6
/// megatron/core/fusions/fused_softmax.py:238-270; the same test in microsoft/Megatron-DeepSpeed
/// f4157be megatron/model/fused_softmax.py:152-172): 16-bit scores, 16 < sk ≤ 4096, sq and sk
/// multiples of 4, the b·a/t score matrices a multiple of 4 and of the kernel's batches per block
/// (causal) or sq a multiple of it (padding mask). Batches per block is get_batch_per_block
/// (megatron/fused_kernels/scaled_masked_softmax.h:419-431): 128 threads per block over warps of
/// min(32, next power of two ≥ sk) lanes, two rows per warp up to 128 keys, one above: 8 for
/// sk ≤ 128, else 4. Otherwise the unfused PyTorch path runs (core/transformer.cpp attention_core_kernels).
bool megatron_fused_softmax(std::int64_t score_matrices, std::int64_t sq, std::int64_t sk, int elem_bytes, bool causal) {
    if (elem_bytes != 2 || sk <= 16 || sk > 4096 || sq % 4 != 0 || sk % 4 != 0 || score_matrices % 4 != 0) return false;
    const std::int64_t per_block = sk <= 128 ? 8 : 4;
    return causal ? score_matrices % per_block == 0 : sq % per_block == 0;
}

Attention parse_attention(const std::string& text, const ErrorContext& where) {
    if (text == "flash") return Attention::flash;
    if (text == "eager") return Attention::eager;
    fail_input("flash or eager", "\"" + text + "\"", where);
}

const char* to_string(CpComm c) {
    switch (c) {
        case CpComm::p2p: return "p2p";
        case CpComm::all_gather: return "all-gather";
        case CpComm::all_to_all: return "a2a";
    }
    return "?";
}

CpComm parse_cp_comm(const std::string& text, const ErrorContext& where) {
    if (text == "p2p") return CpComm::p2p;
    if (text == "all-gather" || text == "allgather") return CpComm::all_gather;   // ours, Megatron's
    if (text == "a2a") return CpComm::all_to_all;
    fail_input("p2p, all-gather or a2a (Megatron's --cp-comm-type; a2a+p2p is not modelled)", "\"" + text + "\"", where);
}

Fp8Recipe parse_fp8_recipe(const std::string& text, const ErrorContext& where) {
    if (text == "delayed") return Fp8Recipe::delayed;
    if (text == "tensorwise") return Fp8Recipe::tensorwise;
    fail_input("delayed (Transformer Engine's DelayedScaling) or tensorwise (Float8CurrentScaling), Megatron core's "
               "--fp8-recipe names",
               "\"" + text + "\"", where);
}

bool TransformerShape::moe_layer(int i) const {
    return moe.experts > 0 && !std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), i);
}

int TransformerShape::attended_keys(int i, int s) const {
    const bool windowed = sliding_window > 0 && !std::binary_search(full_attention_layers.begin(), full_attention_layers.end(), i);
    return windowed ? std::min(s, sliding_window) : s;
}

std::vector<Kernel> block_backward(const Block& b, BackwardPart part) {
    std::vector<Kernel> out;
    if (part != BackwardPart::weight) out = b.loss_backward;
    for (const Kernel& k : backward_kernels(b.fwd_kernels, part)) out.push_back(k);
    // The sum, once both gradients are in (after the lookup's backward, the block's last).
    if (b.tied_grad_sum && part != BackwardPart::input) out.push_back(*b.tied_grad_sum);
    return out;
}

Model Model::transformer(std::string name, TransformerShape shape) {
    std::sort(shape.moe.dense_layers.begin(), shape.moe.dense_layers.end());
    std::sort(shape.full_attention_layers.begin(), shape.full_attention_layers.end());
    detail::check_transformer_shape(name, shape);
    Model m;
    m.name_ = std::move(name);
    m.transformer_ = shape;
    return m;
}

Model Model::layer_list(std::string name, std::vector<LayerSpec> layers, int input_bytes_per_sample) {
    if (layers.empty()) fail_input("model " + name + " has no layers");
    Model m;
    m.name_ = std::move(name);
    m.layers_ = std::move(layers);
    m.input_bytes_per_sample_ = input_bytes_per_sample;
    return m;
}

Model Model::with_notes(std::string seq_note, std::vector<std::string> warnings) && {
    seq_note_ = std::move(seq_note);
    warnings_ = std::move(warnings);
    return std::move(*this);
}

const TransformerShape& Model::shape() const {
    if (!transformer_) throw Error(ErrorKind::internal, "model " + name_ + " is a layer list, not a transformer");
    return *transformer_;
}

std::int64_t Model::parameters() const {
    if (!transformer_) {
        std::int64_t n = 0;
        for (const auto& l : layers_) n = checked_add(n, l.params, "parameters of the model");
        return n;
    }
    return detail::transformer_parameters(*transformer_, false);
}

std::int64_t Model::active_parameters() const {
    return transformer_ ? detail::transformer_parameters(*transformer_, true) : parameters();
}

std::int64_t Model::tied_table_params(int tp, int vocab_multiple) const {
    if (!transformer_ || !transformer_->tied_embeddings) return 0;
    const int t = std::max(1, tp);
    return padded_vocab(transformer_->vocab, t, vocab_multiple) / t * transformer_->hidden;
}

std::int64_t padded_vocab(std::int64_t vocab, int tp, int vocab_multiple) {
    const std::int64_t multiple = static_cast<std::int64_t>(std::max(1, vocab_multiple)) * std::max(1, tp);
    return (vocab + multiple - 1) / multiple * multiple;
}

int Model::default_seq() const { return transformer_ ? transformer_->default_seq() : 1; }

std::vector<Block> Model::blocks(const Workload& w) const {
    if (w.micro_batch < 1) fail_input("micro-batch must be at least 1, got " + std::to_string(w.micro_batch));
    if (w.seq < 0) fail_input("sequence length must be positive, got " + std::to_string(w.seq));
    const std::int64_t e = dtype_bytes(w.dtype);
    std::vector<Block> out;

    if (!transformer_) {
        if (w.tp != 1)
            fail_input("tensor parallelism is not modelled for layer-list model " + name_ + " (tp " +
                       std::to_string(w.tp) + ")");
        // Layer specs are per sample in fp32: scale by the micro-batch and the dtype.
        const double scale = static_cast<double>(e) / 4.0;
        const std::int64_t b = w.micro_batch;
        for (std::size_t i = 0; i < layers_.size(); ++i) {
            const LayerSpec& l = layers_[i];
            Block blk;
            blk.kind = Block::Kind::layer;
            blk.index = static_cast<int>(i);
            blk.params = l.params;
            blk.fwd = l.fwd_flops * static_cast<double>(b);
            blk.bwd = blk.fwd * 2.0;
            blk.recompute = w.recompute == Recompute::full ? blk.fwd : Flops(0);
            // Full recompute keeps only each layer's input.
            const Bytes input = i > 0 ? layers_[i - 1].output : Bytes(input_bytes_per_sample_);
            blk.activations = (w.recompute == Recompute::full ? input : l.activations) * (static_cast<double>(b) * scale);
            blk.output = l.output * (static_cast<double>(b) * scale);
            // One GEMM with W = params weights applied fwd/(2·params) times per sample: m is the
            // number of output positions (1 for fc, H·W for a conv, as im2col lowers it); n·k =
            // params, split evenly as the spec does not give the two dimensions. Then one
            // memory-bound pass that reads the input and writes the output (norm, activation,
            // pooling, or the GEMM's own epilogue).
            const int eb = static_cast<int>(e);
            if (l.params > 0 && l.fwd_flops.count() > 0) {
                const double positions = l.fwd_flops.count() / (2.0 * static_cast<double>(l.params));
                const auto side = static_cast<std::int64_t>(std::sqrt(static_cast<double>(l.params)) + 0.5);
                const std::int64_t rows =
                    std::max<std::int64_t>(1, checked_round(positions * static_cast<double>(b), "output positions of a micro-batch"));
                Kernel g = gemm_kernel(KernelName::layer, KernelClass::gemm, rows, std::max<std::int64_t>(1, side),
                                       std::max<std::int64_t>(1, side), 1, eb, true);
                g.flops = blk.fwd.count();  // exact: the spec's FLOPs, not the rounded shape's
                blk.fwd_kernels.push_back(g);
            } else if (l.fwd_flops.count() > 0) {
                blk.fwd_kernels.push_back(stream_kernel(KernelName::layer, KernelClass::elementwise, 0, blk.fwd.count()));
            }
            blk.fwd_kernels.push_back(stream_kernel(KernelName::layer, KernelClass::elementwise,
                                                    ((input + l.output) * (static_cast<double>(b) * scale)).count()));
            if (w.recompute == Recompute::full) blk.recompute_kernels = blk.fwd_kernels;
            out.push_back(blk);
        }
        return out;
    }

    return detail::transformer_blocks(name_, *transformer_, w);
}

Flops Model::flops_per_iteration(std::int64_t global_batch, int seq, Recompute r, RecomputeModules modules) const {
    // FLOPs are linear in the batch: work out one sample and scale, so huge batches stay exact.
    Workload w;
    w.micro_batch = 1;
    w.seq = seq;
    w.recompute = r;
    w.recompute_modules = modules;
    Flops per_sample;
    for (const Block& blk : blocks(w)) per_sample += blk.fwd + blk.bwd + blk.recompute;
    return per_sample * static_cast<double>(global_batch);
}

std::vector<std::string> model_preset_names() {
    std::vector<std::string> names;
    for (const auto& [name, shape] : transformer_presets()) names.push_back(name);  // std::map: sorted
    for (const auto& name : cnn_preset_names()) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
}

Model model_preset(const std::string& name) {
    const auto& presets = transformer_presets();
    const auto it = presets.find(name);
    if (it != presets.end()) return Model::transformer(name, it->second);
    if (auto cnn = cnn_preset(name)) return std::move(*cnn);
    const std::vector<std::string> names = model_preset_names();
    fail_input("unknown model preset '" + name + "'" + did_you_mean(name, names) +
               "; presets: " + join(names));
}

Model model_from_json(const JsonView& json, const std::string& name) {
    json.expect_object();
    if (json.has("kind")) {
        const std::string kind = json.string("kind");
        if (kind == "transformer") return own_transformer(json, name);
        if (kind == "layers") return own_layer_list(json, name);
        json.fail_member("kind", "\"transformer\" or \"layers\"", describe_json(json.raw()["kind"]));
    }
    return model_from_hf_config(json, name);
}

Model load_model(const std::string& spec) {
    const auto& presets = transformer_presets();
    if (presets.count(spec) || cnn_preset(spec)) return model_preset(spec);
    std::error_code ec;
    // A path (it exists, or names a folder or a .json file) is read as one: a missing file is
    // "no such file", not an unknown preset.
    const bool path = !spec.empty() && (std::filesystem::exists(spec, ec) || spec.find('/') != std::string::npos ||
                                        spec.ends_with(".json"));
    if (path) {
        const Json doc = load_json_file(spec);
        return model_from_json(JsonView(doc, spec), std::filesystem::path(spec).stem().string());
    }
    const std::vector<std::string> names = model_preset_names();
    fail_input("unknown model '" + spec + "'" + did_you_mean(spec, names) +
               "; presets: " + join(names) + "; or give a path to a JSON file");
}

}  // namespace smol
