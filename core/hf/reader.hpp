// What every HuggingFace family reader (core/hf/<family>.cpp) uses: a config.json wrapped so that
// every key read is recorded, and the list of readers. core/hf_config.cpp dispatches on
// model_type and, once a reader is done, checks the keys nobody read (hf_config.hpp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/model.hpp"

namespace smol::hf {

class ConfigReader {
public:
    ConfigReader(const JsonView& json, std::string model_type);

    const std::string& model_type() const { return model_type_; }
    const JsonView& json() const { return json_; }
    /// Present and not null (HuggingFace writes null for "use the default").
    bool has(const std::string& key) const;

    /// A required size (≥ 1).
    int size(const std::string& key);
    /// A size (≥ 1), or `fallback` when absent or null.
    int size_or(const std::string& key, int fallback);
    /// A size (≥ 1), or nothing when absent or null.
    std::optional<int> optional_size(const std::string& key);
    /// A count (≥ 0), or `fallback` when absent or null.
    int count_or(const std::string& key, int fallback);
    bool flag_or(const std::string& key, bool fallback);
    double number_or(const std::string& key, double fallback);
    std::string text_or(const std::string& key, const std::string& fallback);
    /// An array of strings (Gemma's and GPT-OSS's layer_types); empty when absent or null.
    std::vector<std::string> strings(const std::string& key);
    /// An array of non-negative integers (Qwen-MoE's mlp_only_layers); empty when absent or null.
    std::vector<int> indices(const std::string& key);

    /// Keys the reader knows and reads on purpose without them changing what is simulated
    /// (dropouts at their training values, epsilons, initialisation, token ids, RoPE's base …).
    void accept(std::initializer_list<const char*> keys);
    /// Marks `key` read (an alias the reader resolved by hand).
    void mark(const std::string& key) { used_.insert(key); }
    /// A key the reader read but does not model: it reaches the user through Model::warnings.
    void warn(const std::string& message) { warnings_.push_back(message); }

    /// 4 × `hidden` (the default MLP width of GPT-2, BLOOM and Falcon), read from `key`; an error
    /// naming it when that is not a size below 2^31.
    int four_times(const std::string& key, int hidden) const {
        if (hidden > std::numeric_limits<int>::max() / 4) fail(key, "a hidden size below 2^29 (the MLP is 4 × hidden wide)");
        return 4 * hidden;
    }

    /// Fails naming `key`: its value is one the reader cannot model.
    [[noreturn]] void fail(const std::string& key, const std::string& expected) const;

    /// The model: checks every key was read, the training length, the notes.
    Model finish(TransformerShape shape, const std::string& name);

private:
    int checked_size(const std::string& key, std::int64_t minimum) const;

    JsonView json_;
    std::string model_type_;
    std::set<std::string> used_;
    std::vector<std::string> warnings_;
};

/// One family: the model_type values it reads and the class prefix of its `architectures`
/// (LlamaForCausalLM → "Llama").
struct Family {
    const char* model_type;
    const char* architecture_prefix;
    Model (*read)(ConfigReader&, const std::string& name);
};


/// Every reader (core/hf/*.cpp), in one table (core/hf_config.cpp).
const std::vector<Family>& families();

// The readers, one per family file.
Model read_gpt2(ConfigReader& c, const std::string& name);        // hf/gpt2.cpp
Model read_llama(ConfigReader& c, const std::string& name);       // hf/llama.cpp
Model read_mistral(ConfigReader& c, const std::string& name);     // hf/mistral.cpp (mistral, mixtral)
Model read_mixtral(ConfigReader& c, const std::string& name);
Model read_qwen2(ConfigReader& c, const std::string& name);       // hf/qwen.cpp (qwen2, qwen2_moe, qwen3_moe)
Model read_qwen2_moe(ConfigReader& c, const std::string& name);
Model read_qwen3_moe(ConfigReader& c, const std::string& name);
Model read_gemma(ConfigReader& c, const std::string& name);       // hf/gemma.cpp (gemma, gemma2)
Model read_gemma2(ConfigReader& c, const std::string& name);
Model read_phi3(ConfigReader& c, const std::string& name);        // hf/phi3.cpp
Model read_gpt_neox(ConfigReader& c, const std::string& name);    // hf/gpt_neox.cpp
Model read_opt(ConfigReader& c, const std::string& name);         // hf/opt.cpp
Model read_bloom(ConfigReader& c, const std::string& name);       // hf/bloom.cpp
Model read_falcon(ConfigReader& c, const std::string& name);      // hf/falcon.cpp
Model read_deepseek_v2(ConfigReader& c, const std::string& name); // hf/deepseek.cpp (deepseek_v2, deepseek_v3)
Model read_deepseek_v3(ConfigReader& c, const std::string& name);
Model read_t5(ConfigReader& c, const std::string& name);          // hf/t5.cpp
Model read_gpt_oss(ConfigReader& c, const std::string& name);     // hf/gpt_oss.cpp

/// The Llama-shaped attention most families share: num_hidden_layers, hidden_size,
/// num_attention_heads, num_key_value_heads (absent or null: heads), head_dim (absent or null:
/// hidden / heads), intermediate_size, vocab_size, max_position_embeddings, tie_word_embeddings
/// (`tied` when absent); RoPE, RMSNorm, gated MLP, no biases.
TransformerShape llama_like(ConfigReader& c, bool tied);
/// Reads sliding_window (null: none) for a model whose every layer uses it, or (layer_types) the
/// layers marked "sliding_attention".
void read_sliding_window(ConfigReader& c, TransformerShape& m);

}  // namespace smol::hf
