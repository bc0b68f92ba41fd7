#include "core/hf_config.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include "core/error.hpp"
#include "core/hf/reader.hpp"

namespace smol {
namespace hf {
namespace {

/// Keys every config.json may carry that say nothing about the model's size or cost: what
/// transformers' PretrainedConfig writes for every model (configuration_utils.py: architectures,
/// model_type, transformers_version, dtype / torch_dtype, return_dict, output_*, the fine-tuning
/// task's labels, chunk_size_feed_forward, is_encoder_decoder …), the special token ids, and the
/// generation defaults older configs carry (GenerationConfig's parameters, popped by
/// PretrainedConfig). `quantization_config` is handled apart (a warning).
const std::set<std::string>& common_keys() {
    static const std::set<std::string> keys{
        "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "_commit_hash",
        "auto_map", "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
        "tf_legacy_loss", "pruned_heads", "chunk_size_feed_forward", "is_decoder", "add_cross_attention",
        "tie_encoder_decoder", "cross_attention_hidden_size", "finetuning_task", "id2label", "label2id", "num_labels",
        "problem_type", "tokenizer_class", "prefix", "task_specific_params", "bos_token_id", "eos_token_id",
        "pad_token_id", "sep_token_id", "unk_token_id", "decoder_start_token_id", "use_cache", "initializer_range",
        "gradient_checkpointing", "_attn_implementation", "attn_implementation", "max_length", "min_length",
        "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
        "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
        "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
        "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "output_router_logits",
    };
    return keys;
}

/// A key whose name says it is a size or a count: reading a model without it could be wrong.
bool names_a_size(const std::string& k) {
    auto ends = [&](const char* suffix) { return k.ends_with(suffix); };
    return k.rfind("num_", 0) == 0 || k.rfind("n_", 0) == 0 || ends("_size") || ends("_dim") || ends("_rank") ||
           k.find("experts") != std::string::npos;
}

/// The length a long-context config was pretrained at, where it says so.
std::optional<int> recorded_training_length(const JsonView& j, std::string& source) {
    auto positive = [](const Json& v) { return v.is_number_integer() && v.get<std::int64_t>() > 0 &&
                                               v.get<std::int64_t>() <= std::numeric_limits<int>::max(); };
    for (const char* scaling : {"rope_scaling", "rope_parameters"}) {
        const Json& raw = j.raw();
        if (raw.contains(scaling) && raw.at(scaling).is_object() && raw.at(scaling).contains("original_max_position_embeddings") &&
            positive(raw.at(scaling).at("original_max_position_embeddings"))) {
            source = std::string(scaling) + ".original_max_position_embeddings";
            return raw.at(scaling).at("original_max_position_embeddings").get<int>();
        }
    }
    for (const char* key : {"original_max_position_embeddings", "initial_context_length"}) {
        if (j.raw().contains(key) && positive(j.raw().at(key))) {
            source = key;
            return j.raw().at(key).get<int>();
        }
    }
    return std::nullopt;
}

}  // namespace

ConfigReader::ConfigReader(const JsonView& json, std::string model_type) : json_(json), model_type_(std::move(model_type)) {
    used_.insert("model_type");
}

bool ConfigReader::has(const std::string& key) const { return json_.has(key) && !json_.raw().at(key).is_null(); }

int ConfigReader::checked_size(const std::string& key, std::int64_t minimum) const {
    const Json& v = json_.raw().at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < minimum || v.get<std::int64_t>() > std::numeric_limits<int>::max())
        json_.fail_member(key, minimum > 0 ? "a positive integer" : "a non-negative integer", describe_json(v));
    return v.get<int>();
}

int ConfigReader::size(const std::string& key) {
    used_.insert(key);
    if (!json_.has(key)) json_.at(key);  // throws "missing required key" with the path
    if (json_.raw().at(key).is_null()) json_.fail_member(key, "a positive integer", "null");
    return checked_size(key, 1);
}

int ConfigReader::size_or(const std::string& key, int fallback) {
    used_.insert(key);
    return has(key) ? checked_size(key, 1) : fallback;
}

std::optional<int> ConfigReader::optional_size(const std::string& key) {
    used_.insert(key);
    if (!has(key)) return std::nullopt;
    return checked_size(key, 1);
}

int ConfigReader::count_or(const std::string& key, int fallback) {
    used_.insert(key);
    return has(key) ? checked_size(key, 0) : fallback;
}

bool ConfigReader::flag_or(const std::string& key, bool fallback) {
    used_.insert(key);
    return has(key) ? json_.boolean(key) : fallback;
}

double ConfigReader::number_or(const std::string& key, double fallback) {
    used_.insert(key);
    return has(key) ? json_.number(key) : fallback;
}

std::string ConfigReader::text_or(const std::string& key, const std::string& fallback) {
    used_.insert(key);
    return has(key) ? json_.string(key) : fallback;
}

std::vector<std::string> ConfigReader::strings(const std::string& key) {
    used_.insert(key);
    std::vector<std::string> out;
    if (!has(key)) return out;
    const JsonView list = json_.at(key);
    for (std::size_t i = 0; i < list.size(); ++i) {
        const JsonView item = list.at(i);
        if (!item.raw().is_string()) item.fail("a string", describe_json(item.raw()));
        out.push_back(item.raw().get<std::string>());
    }
    return out;
}

std::vector<int> ConfigReader::indices(const std::string& key) {
    used_.insert(key);
    std::vector<int> out;
    if (!has(key)) return out;
    const JsonView list = json_.at(key);
    for (std::size_t i = 0; i < list.size(); ++i) {
        const JsonView item = list.at(i);
        if (!item.raw().is_number_integer() || item.raw().get<std::int64_t>() < 0)
            item.fail("a layer index (an integer ≥ 0)", describe_json(item.raw()));
        out.push_back(item.raw().get<int>());
    }
    return out;
}

void ConfigReader::accept(std::initializer_list<const char*> keys) {
    for (const char* k : keys) used_.insert(k);
}

void ConfigReader::fail(const std::string& key, const std::string& expected) const {
    json_.fail_member(key, expected, json_.has(key) ? describe_json(json_.raw().at(key)) : "nothing");
}

Model ConfigReader::finish(TransformerShape shape, const std::string& name) {
    // Every key: read by the reader, common to all configs, or not known at all.
    std::vector<std::string> known(used_.begin(), used_.end());
    for (const std::string& k : json_.keys()) {
        if (used_.count(k) || common_keys().count(k)) continue;
        if (k == "quantization_config") {
            warnings_.push_back(json_.file() + ": quantization_config is how the checkpoint's weights are stored; the "
                                "simulated training runs in the plan's --dtype");
            continue;
        }
        if (names_a_size(k))
            fail_input("unknown key '" + k + "' for model_type '" + model_type_ +
                           "': its name says it is a size or a count, and smolcluster's " + model_type_ +
                           " reader does not know what it changes" + did_you_mean(k, known) +
                           " (remove it, or describe the model in smolcluster's own JSON)",
                       {json_.file(), "/" + k, ""});
        warnings_.push_back(json_.file() + ": key '" + k + "' is not read by the " + model_type_ +
                            " reader (it names no size or count; ignored)" + did_you_mean(k, known));
    }
    // The training length a plan uses by default.
    std::string note;
    if (shape.train_seq == 0 && shape.max_seq >= kLongContextSeq) {
        std::string source;
        const std::optional<int> recorded = recorded_training_length(json_, source);
        if (recorded && *recorded < shape.max_seq) {
            shape.train_seq = *recorded;
            note = "max_position_embeddings " + std::to_string(shape.max_seq) + " is a long-context extension; " +
                   source + " gives the pretraining length " + std::to_string(*recorded) + " (--seq to change)";
        } else {
            shape.train_seq = kDefaultLongContextTrainingSeq;
            note = "max_position_embeddings " + std::to_string(shape.max_seq) +
                   " is a long-context extension; the default training length is " +
                   std::to_string(kDefaultLongContextTrainingSeq) + " (--seq to change)";
        }
    }
    try {
        return Model::transformer(name, std::move(shape)).with_notes(std::move(note), std::move(warnings_));
    } catch (const Error& e) {
        throw e.with_context(json_.context());
    }
}

TransformerShape llama_like(ConfigReader& c, bool tied) {
    TransformerShape m;
    m.layers = c.size("num_hidden_layers");
    m.hidden = c.size("hidden_size");
    m.heads = c.size("num_attention_heads");
    m.kv_heads = c.size_or("num_key_value_heads", m.heads);
    m.head_dim = c.size_or("head_dim", 0);
    m.ffn_hidden = c.size("intermediate_size");
    m.vocab = c.size("vocab_size");
    m.max_seq = c.size("max_position_embeddings");
    m.tied_embeddings = c.flag_or("tie_word_embeddings", tied);
    m.gated_mlp = true;
    m.positions = Positions::rope;
    m.qkv_bias = m.attn_out_bias = m.mlp_bias = false;
    m.layer_norm = false;
    if (!m.head_dim && m.hidden % m.heads != 0)
        c.fail("num_attention_heads", "a head count dividing hidden_size " + std::to_string(m.hidden) +
                                          " (or a head_dim key giving the width of a head)");
    return m;
}

void read_sliding_window(ConfigReader& c, TransformerShape& m) {
    const std::optional<int> window = c.optional_size("sliding_window");
    if (!window) return;
    m.sliding_window = *window;
    const std::vector<std::string> types = c.strings("layer_types");
    if (types.empty()) return;
    if (static_cast<int>(types.size()) != m.layers)
        c.fail("layer_types", "one entry per layer (" + std::to_string(m.layers) + ")");
    for (int i = 0; i < m.layers; ++i) {
        const std::string& t = types[static_cast<std::size_t>(i)];
        if (t == "full_attention")
            m.full_attention_layers.push_back(i);
        else if (t != "sliding_attention")
            c.fail("layer_types", "\"sliding_attention\" or \"full_attention\" for each layer");
    }
}

const std::vector<Family>& families() {
    static const std::vector<Family> all{
        {"bloom", "Bloom", read_bloom},
        {"deepseek_v2", "DeepseekV2", read_deepseek_v2},
        {"deepseek_v3", "DeepseekV3", read_deepseek_v3},
        {"falcon", "Falcon", read_falcon},
        {"gemma", "Gemma", read_gemma},
        {"gemma2", "Gemma2", read_gemma2},
        {"gpt2", "GPT2", read_gpt2},
        {"gpt_neox", "GPTNeoX", read_gpt_neox},
        {"gpt_oss", "GptOss", read_gpt_oss},
        {"llama", "Llama", read_llama},
        {"mistral", "Mistral", read_mistral},
        {"mixtral", "Mixtral", read_mixtral},
        {"opt", "OPT", read_opt},
        {"phi3", "Phi3", read_phi3},
        {"qwen2", "Qwen2", read_qwen2},
        {"qwen2_moe", "Qwen2Moe", read_qwen2_moe},
        {"qwen3_moe", "Qwen3Moe", read_qwen3_moe},
        {"t5", "T5", read_t5},
    };
    return all;
}

}  // namespace hf

std::vector<std::string> hf_model_types() {
    std::vector<std::string> out;
    for (const hf::Family& f : hf::families()) out.emplace_back(f.model_type);
    std::sort(out.begin(), out.end());
    return out;
}

Model model_from_hf_config(const JsonView& json, const std::string& name) {
    const std::vector<std::string> types = hf_model_types();
    const auto& families = hf::families();
    std::vector<std::string> architectures;
    if (json.has("architectures") && json.raw().at("architectures").is_array())
        for (const Json& a : json.raw().at("architectures"))
            if (a.is_string()) architectures.push_back(a.get<std::string>());
    // The family whose class prefix is the longest prefix of an architecture (Qwen2MoeForCausalLM
    // is qwen2_moe, not qwen2).
    auto by_architecture = [&]() -> const hf::Family* {
        const hf::Family* best = nullptr;
        std::size_t best_len = 0;
        for (const std::string& a : architectures)
            for (const hf::Family& f : families) {
                const std::string prefix = f.architecture_prefix;
                // The class name goes on with a capitalised word (LlamaForCausalLM, GPT2LMHeadModel),
                // so Gemma2ForCausalLM is not a Gemma class.
                const bool word = a.size() == prefix.size() || std::isupper(static_cast<unsigned char>(a[prefix.size()]));
                if (a.rfind(prefix, 0) == 0 && prefix.size() > best_len && word) {
                    best = &f;
                    best_len = prefix.size();
                }
            }
        return best;
    };
    const hf::Family* family = nullptr;
    std::vector<std::string> notes;
    if (json.has("model_type")) {
        const std::string type = json.string("model_type");
        for (const hf::Family& f : families)
            if (type == f.model_type) family = &f;
        if (!family)
            fail_input("a model_type smolcluster reads: " + join(types) + did_you_mean(type, types) +
                           " (or describe the model in smolcluster's own JSON, README \"Models\")",
                       "'" + type + "'", {json.file(), "/model_type", ""});
        if (!architectures.empty() && by_architecture() != family)
            notes.push_back(json.file() + ": architectures " + join(architectures) + " is not a " + type +
                            " class; read as model_type " + type);
    } else {
        family = by_architecture();
        if (!family)
            fail_input("a HuggingFace config.json with a model_type (one of " + join(types) +
                           ") or architectures naming one of their classes; or smolcluster's own model JSON with \"kind\"",
                       architectures.empty() ? "neither" : "architectures " + join(architectures), {json.file(), "", ""});
        notes.push_back(json.file() + ": no model_type; read as " + family->model_type + " from architectures " +
                        join(architectures));
    }
    hf::ConfigReader reader(json, family->model_type);
    for (const std::string& n : notes) reader.warn(n);
    return family->read(reader, name);
}

}  // namespace smol
