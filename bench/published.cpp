#include "bench/published.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>
#include <unistd.h>

#include "bench/accuracy.hpp"
#include "core/model.hpp"
#include "tools/cli.hpp"

namespace smol::bench {

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Small readers.

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool contains(const std::string& text, const std::string& word) { return lower(text).find(lower(word)) != std::string::npos; }

/// The member as text whatever its type (`"8 [U]"`, `8`, `{…}`), "" when absent.
std::string text_of(const Json& obj, const char* key) {
    if (!obj.is_object() || !obj.contains(key)) return "";
    const Json& v = obj.at(key);
    return v.is_string() ? v.get<std::string>() : v.dump();
}

/// The member when it is a JSON integer; a string ("8 [U, …]", "1-8") is not a figure to use.
std::optional<std::int64_t> integer_of(const Json& obj, const char* key) {
    if (!obj.is_object() || !obj.contains(key) || !obj.at(key).is_number_integer()) return std::nullopt;
    return obj.at(key).get<std::int64_t>();
}

std::optional<double> number_of(const Json& obj, const char* key) {
    if (!obj.is_object() || !obj.contains(key) || !obj.at(key).is_number()) return std::nullopt;
    return obj.at(key).get<double>();
}

const Json& member_or_null(const Json& obj, const char* key) {
    static const Json null_json;
    return obj.is_object() && obj.contains(key) ? obj.at(key) : null_json;
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_input("cannot read " + path + " (run from a clone with validation/, or pass --validation DIR)");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Lines without their '\r\n' or '\n' ends, a leading UTF-8 byte-order mark removed.
std::vector<std::string> lines_of(std::string text) {
    if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
    std::vector<std::string> lines;
    std::stringstream s(text);
    std::string line;
    while (std::getline(s, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(line);
    }
    return lines;
}

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// vTrain's CSV.

namespace {

// VIA-Research/vTrain data/ground_truth_single.csv, header and column names as published.
constexpr const char* kVtrainHeader =
    "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
    "data parallelism,pipeline parallelism,iteration time (ms)";
/// vTrain's NCCL all-reduce tables (trace/a100/AR_GPU*_LUT) as a profile: validation/vtrain-nccl/.
constexpr const char* kVtrainNcclProfile = "vtrain-a100-nccl.json";
constexpr const char* kVtrainKeys[] = {"gpus", "gbs", "mbs", "h", "heads", "L", "seq", "tp", "dp", "pp", "iter_ms"};
/// vTrain's data/ground_truth_multi.csv: the same columns after the model's size in billions.
constexpr const char* kVtrainMultiHeader =
    "Parameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
    "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)";

}  // namespace

std::vector<Row> read_vtrain_csv(const std::string& path) {
    const std::string name = file_name(path);
    const std::vector<std::string> lines = lines_of(read_text_file(path));
    // The single-node file, or the multi-node one, whose first column (the size in billions, a
    // label: the shape is in the other columns) is checked and dropped.
    const bool multi = !lines.empty() && lines[0] == kVtrainMultiHeader;
    if (lines.empty() || (lines[0] != kVtrainHeader && !multi))
        fail_input(std::string("the header line of vTrain's ground_truth_single.csv ('") + kVtrainHeader +
                       "') or ground_truth_multi.csv ('" + kVtrainMultiHeader + "')",
                   "'" + (lines.empty() ? std::string() : lines[0]) + "'", {name, "", ""});
    std::vector<Row> rows;
    for (std::size_t i = 1; i < lines.size(); ++i) {
        if (lines[i].empty()) continue;
        const int line = static_cast<int>(i) + 1;
        std::vector<std::string> cells;
        std::stringstream s(lines[i]);
        std::string cell;
        while (std::getline(s, cell, ',')) cells.push_back(cell);
        const std::size_t fields = std::size(kVtrainKeys) + (multi ? 1 : 0);
        if (cells.size() != fields)
            fail_input(std::to_string(fields) + " comma-separated fields on line " + std::to_string(line),
                       std::to_string(cells.size()), {name, "", ""});
        if (multi) {
            std::size_t used = 0;
            double billions = 0;
            try {
                billions = std::stod(cells[0], &used);
            } catch (const std::exception&) {
            }
            if (used != cells[0].size() || !(billions > 0))
                fail_input("a positive size in billions for 'Parameters (billion)' on line " + std::to_string(line),
                           "'" + cells[0] + "'", {name, "", ""});
            cells.erase(cells.begin());
        }
        Json data = Json::object();
        for (std::size_t c = 0; c < cells.size(); ++c) {
            std::size_t used = 0;
            double v = 0;
            try {
                v = std::stod(cells[c], &used);
            } catch (const std::exception&) {
            }
            const bool last = c + 1 == cells.size();
            if (used != cells[c].size() || !(v > 0) || (!last && v != std::floor(v)))
                fail_input(std::string(last ? "a positive time" : "a positive integer") + " for '" + kVtrainKeys[c] +
                               "' on line " + std::to_string(line),
                           "'" + cells[c] + "'", {name, "", ""});
            if (last)
                data[kVtrainKeys[c]] = v;
            else
                data[kVtrainKeys[c]] = static_cast<std::int64_t>(v);
        }
        char id[16];
        std::snprintf(id, sizeof id, multi ? "M%04zu" : "V%04zu", rows.size() + 1);
        rows.push_back({id, multi ? "vtrain-multi" : "vtrain", name, line, std::move(data), fs::path(path).parent_path().string()});
    }
    return rows;
}

// ---------------------------------------------------------------------------------------------
// published.jsonl: sources named from "src", "same" and model names resolved.

namespace {

struct SourceName {
    const char* src_prefix;  // how the row's "src" begins
    const char* name;
};

// Each publication of published.jsonl, by the first words of its "src".
constexpr SourceName kSources[] = {
    {"Llama 3 Herd", "llama3-herd"},
    {"OPT (", "opt"},
    {"NVIDIA/dgxc-benchmarking", "dgxc-benchmarking"},
    {"NVIDIA/NeMo docs", "nemo-performance"},
    {"NVIDIA-NeMo/Megatron-Bridge", "megatron-bridge"},
    {"pytorch/torchtitan", "torchtitan"},
    {"PyTorch blog 'Introducing PyTorch FSDP API'", "pytorch-fsdp-blog"},
    {"deepspeedai/DeepSpeed docs/_posts/2022-07-26-deepspeed-azure", "deepspeed-azure"},
    {"deepspeedai/DeepSpeed docs/_posts/2021-03-08-zero3-offload", "deepspeed-zero3-offload"},
    {"ZeRO-Offload (", "zero-offload"},
    {"ZeRO (", "zero"},
    {"horovod/horovod", "horovod"},
    {"NVIDIA/Megatron-LM README", "megatron-lm"},
    {"VIA-Research/vTrain", "vtrain-samples"},
    {"Papakyriakou & Barbounakis", "arm-clusters"},
};

bool has_shape(const Json& model) {
    return integer_of(model, "L") && integer_of(model, "h") && integer_of(model, "heads");
}

/// A model given by name becomes the shape of the row that described it; a described model
/// without a shape takes it from an earlier row of the same name, and the fullest description
/// of each name is kept for later rows.
void resolve_model(Json& model, std::map<std::string, Json>& known) {
    if (model.is_string()) {
        const auto it = known.find(model.get<std::string>());
        model = it != known.end() ? it->second : Json{{"name", model.get<std::string>()}};
        return;
    }
    if (!model.is_object() || !model.contains("name") || !model["name"].is_string()) return;
    const std::string name = model["name"].get<std::string>();
    const auto it = known.find(name);
    if (it != known.end() && !has_shape(model) && has_shape(it->second))
        for (const auto& [k, v] : it->second.items())
            if (!model.contains(k)) model[k] = v;
    if (it == known.end() || has_shape(model)) known[name] = model;
}

}  // namespace

std::vector<Row> read_published_jsonl(const std::string& path) {
    const std::string name = file_name(path);
    const std::vector<std::string> lines = lines_of(read_text_file(path));
    std::vector<Row> rows;
    std::map<std::string, Json> models;  // model name → the fullest shape seen so far
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].empty()) continue;
        const int line = static_cast<int>(i) + 1;
        const std::string where = name + ":" + std::to_string(line);
        Json data = parse_json_text(lines[i], where);
        const JsonView view(data, where);
        view.expect_object();
        const std::string id = view.string("id");
        const std::string src = view.string("src");
        std::string source;
        if (src.rfind("same", 0) == 0) {
            if (rows.empty()) fail_input("a source on the first row", "'" + src + "'", view.context());
            source = rows.back().source;
        } else {
            for (const SourceName& s : kSources)
                if (src.rfind(s.src_prefix, 0) == 0) {
                    source = s.name;
                    break;
                }
            if (source.empty())
                fail_input("a source the harness knows (add it to kSources and give it a mapping function in "
                           "bench/published.cpp)",
                           "'" + src + "'", {where, "/src", ""});
        }
        if (data.contains("model")) resolve_model(data["model"], models);
        rows.push_back({id, source, name, line, std::move(data), fs::path(path).parent_path().string()});
    }
    return rows;
}

std::vector<Row> read_validation(const std::string& dir) {
    std::vector<Row> rows = read_vtrain_csv((fs::path(dir) / "vtrain-single-node.csv").string());
    std::vector<Row> multi = read_vtrain_csv((fs::path(dir) / "vtrain-multi-node.csv").string());
    rows.insert(rows.end(), std::make_move_iterator(multi.begin()), std::make_move_iterator(multi.end()));
    std::vector<Row> published = read_published_jsonl((fs::path(dir) / "published.jsonl").string());
    rows.insert(rows.end(), std::make_move_iterator(published.begin()), std::make_move_iterator(published.end()));
    return rows;
}

// ---------------------------------------------------------------------------------------------
// Models.

Json model_json(const ModelShape& m) {
    Json j{{"kind", "transformer"},
           {"name", fs::path(model_file_name(m)).stem().string()},
           {"layers", m.layers},
           {"hidden", m.hidden},
           {"heads", m.heads},
           {"kv_heads", m.kv_heads},
           {"ffn_hidden", m.ffn_hidden},
           {"vocab", m.vocab},
           {"seq", m.seq},
           {"tied_embeddings", !m.llama},
           {"gated_mlp", m.llama},
           {"biases", !m.llama},
           {"norm", m.llama ? "rmsnorm" : "layernorm"},
           {"positions", m.llama ? "rope" : "learned"}};
    return j;
}

std::string model_file_name(const ModelShape& m) {
    std::string n = std::string(m.llama ? "llama" : "gpt") + "-l" + std::to_string(m.layers) + "-h" +
                    std::to_string(m.hidden) + "-a" + std::to_string(m.heads);
    if (m.kv_heads != m.heads) n += "-kv" + std::to_string(m.kv_heads);
    return n + "-f" + std::to_string(m.ffn_hidden) + "-v" + std::to_string(m.vocab) + "-s" + std::to_string(m.seq) +
           ".json";
}

// ---------------------------------------------------------------------------------------------
// Gaps: what keeps a row from being simulated, in the order a row is grouped by its first.

namespace {

const std::vector<std::string> kGapOrder{
    "FP8",
    "MoE",
    "hardware not described",
    "unknown parallel layout",
    "unknown model shape",
    "unknown batch",
    "metric 'up to'",
    "metric not comparable yet",
    "no mapping yet",
};

void add_gap(Mapping& m, const std::string& feature, const std::string& detail) {
    if (std::find(kGapOrder.begin(), kGapOrder.end(), feature) == kGapOrder.end())
        throw Error(ErrorKind::internal, "gap feature '" + feature + "' is not in kGapOrder");
    m.gaps.push_back({feature, detail});
}

/// Sorts the gaps; a row with gaps has no command line.
Mapping finish(Mapping m) {
    std::stable_sort(m.gaps.begin(), m.gaps.end(), [](const Gap& a, const Gap& b) {
        return std::find(kGapOrder.begin(), kGapOrder.end(), a.feature) <
               std::find(kGapOrder.begin(), kGapOrder.end(), b.feature);
    });
    if (!m.gaps.empty()) {
        m.args.clear();
        m.model.reset();
        m.model_config.reset();
    }
    return m;
}

/// The figure to compare, in order of directness. `tflops_are_model` says whether the source's
/// "tflops_per_gpu" counts model FLOPs (no recompute), as the Llama 3 paper's does (its TFLOPs/GPU
/// column is its BF16 MFU × 989 TFLOP/s: 430 ↔ 43 %).
void choose_metric(const Row& row, bool tflops_are_model, Mapping& m) {
    const Json& metric = member_or_null(row.data, "metric");
    if (const auto v = number_of(metric, "iter_ms")) {
        m.metric = Metric{"iter_ms", MetricKind::step_time, *v, 1e-3, "iteration time (ms), measured"};
    } else if (const auto v = number_of(metric, "sec_per_iter")) {
        m.metric = Metric{"sec_per_iter", MetricKind::step_time, *v, 1, "seconds per iteration, measured"};
    } else if (const auto v = number_of(metric, "tokens_per_s_per_gpu")) {
        m.metric = Metric{"tokens_per_s_per_gpu", MetricKind::tokens_per_s_per_gpu, *v, 1,
                          "tokens/s per GPU -> step = global batch x seq / (value x GPUs)"};
    } else if (const auto v = number_of(metric, "model_tflops_per_gpu")) {
        m.metric = Metric{"model_tflops_per_gpu", MetricKind::model_tflops_per_gpu, *v, 1,
                          "model TFLOP/s per GPU -> step = model FLOPs (no recompute) / (value x GPUs)"};
    } else if (const auto v = number_of(metric, "tflops_per_gpu"); v && tflops_are_model) {
        m.metric = Metric{"tflops_per_gpu", MetricKind::model_tflops_per_gpu, *v, 1,
                          "model TFLOP/s per GPU -> step = model FLOPs (no recompute) / (value x GPUs)"};
    } else if (metric.is_object() && metric.contains("tflops_per_gpu_upto")) {
        add_gap(m, "metric 'up to'", "tflops_per_gpu_upto " + text_of(metric, "tflops_per_gpu_upto") + ": a best case, not a run");
    } else if (text_of(metric, "tflops_per_gpu").rfind('>', 0) == 0) {
        add_gap(m, "metric 'up to'", "tflops_per_gpu '" + text_of(metric, "tflops_per_gpu") + "': a bound, not a run");
    } else if (metric.is_object() && metric.contains("hw_tflops_per_gpu")) {
        add_gap(m, "metric not comparable yet",
                "hardware TFLOP/s (Megatron's 96·B·s·l·h² formula, recompute counted): no conversion to a step time yet");
    } else if (metric.is_object() && metric.contains("tflops_per_gpu")) {
        add_gap(m, "metric not comparable yet", "TFLOP/s per GPU " + text_of(metric, "tflops_per_gpu") + " with an unstated FLOP formula");
    } else {
        std::string keys;
        if (metric.is_object())
            for (const auto& [k, v] : metric.items()) keys += (keys.empty() ? "" : ", ") + k;
        add_gap(m, "metric not comparable yet", keys.empty() ? "no metric" : keys + " (not a step time or a throughput)");
    }
}

/// OpenAI's openai/gpt-oss-120b config.json (huggingface.co/openai/gpt-oss-120b, as published with
/// the model, August 2025; the quantization_config of its MXFP4 checkpoint left out: the harness
/// simulates BF16 training). 36 layers, 128 experts of width 2880, 4 per token, 116.8 B parameters.
const char* const kGptOss120bConfig = R"({
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0, "eos_token_id": 200002,
  "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
  "initializer_range": 0.02, "intermediate_size": 2880, "max_position_embeddings": 131072, "model_type": "gpt_oss",
  "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "num_local_experts": 128, "output_router_logits": false, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                   "rope_type": "yarn", "truncate": false},
  "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
  "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088
})";

/// The mixture-of-experts models the harness has a config.json for, by the name rows give them.
std::optional<std::pair<std::string, Json>> known_moe_config(const std::string& name) {
    if (name == "GPT-OSS-120B (MoE)") return std::make_pair(std::string("gpt-oss-120b.json"), Json::parse(kGptOss120bConfig));
    return std::nullopt;
}

/// Gaps any row can show by its own fields: FP8, MoE (a model the harness has no config.json
/// for), and a model without a shape. (Offload and context parallelism are modelled: ZeRO-Offload,
/// ZeRO-Infinity, FSDP's CPU offload; Transformer Engine's ring attention.)
void common_gaps(const Row& row, Mapping& m) {
    const Json& d = row.data;
    const Json& par = member_or_null(d, "par");
    const Json& model = member_or_null(d, "model");
    const std::string prec = text_of(d, "prec");
    // FP8 is modelled as Transformer Engine runs it under Megatron core (--fp8); torchao's Float8
    // (torchtitan) casts and scales its own way.
    if (contains(prec, "float8")) add_gap(m, "FP8", prec + ": FP8 is modelled as Transformer Engine runs it under Megatron core, not torchao's Float8");
    const bool known_config = known_moe_config(text_of(model, "name")).has_value();
    if ((contains(text_of(d, "tag"), "moe") || integer_of(par, "ep").value_or(1) > 1 || contains(text_of(model, "name"), "moe")) &&
        !known_config)
        add_gap(m, "MoE", text_of(model, "name") + (par.contains("ep") ? ", ep " + text_of(par, "ep") : "") +
                              ": no config.json for this mixture of experts in the harness");
    if (!has_shape(model) && !known_config)
        add_gap(m, "unknown model shape",
                (model.is_object() ? text_of(model, "name") : text_of(d, "model")) + ": layers, hidden size or heads not given");
}

/// The --fp8 recipe of a row's precision (NeMo's and Megatron-Bridge's spellings): current scaling
/// ("FP8 current-scaling", "FP8-CS") is Megatron core's tensorwise recipe, any other FP8 NeMo's
/// default, Transformer Engine's delayed scaling (fp8_hybrid with an amax history); none for 16-bit rows.
std::optional<std::string> fp8_recipe(const Row& row) {
    const std::string prec = text_of(row.data, "prec");
    if (!contains(prec, "fp8")) return std::nullopt;
    return contains(prec, "current") || contains(prec, "-cs") ? "tensorwise" : "delayed";
}

/// A source whose rows the harness cannot map yet: the common gaps, the source's own, and, should
/// a row show none, "no mapping yet" so that it is still reported.
Mapping gaps_only(const Row& row, const std::vector<Gap>& own) {
    Mapping m;
    common_gaps(row, m);
    choose_metric(row, /*tflops_are_model=*/false, m);
    for (const Gap& g : own) add_gap(m, g.feature, g.detail);
    if (m.gaps.empty()) add_gap(m, "no mapping yet", "write a mapping function for source '" + row.source + "'");
    return finish(std::move(m));
}

std::string model_path(const std::string& dir, const ModelShape& shape) {
    return (fs::path(dir) / model_file_name(shape)).string();
}

ErrorContext at(const Row& row, const std::string& path) { return {row.file + ":" + std::to_string(row.line), path, ""}; }

/// par.cp, the context-parallel ranks; 1 when the row gives none.
std::int64_t context_parallel(const Row& row, const Json& par) {
    if (!par.is_object() || !par.contains("cp")) return 1;
    const auto v = integer_of(par, "cp");
    if (!v || *v < 1) fail_input("a positive integer", describe_json(par.at("cp")), at(row, "/par/cp"));
    return *v;
}

std::int64_t required_integer(const Row& row, const Json& obj, const char* key, const std::string& path) {
    const auto v = integer_of(obj, key);
    if (!v || *v < 1)
        fail_input("a positive integer", obj.is_object() && obj.contains(key) ? describe_json(obj.at(key)) : "nothing",
                   at(row, path + "/" + key));
    return *v;
}

/// A row's layout on whole 8-GPU nodes: /hw/gpus, /par's tp, pp, dp, cp (1 when absent) and vp
/// (required with `vp_required`, else 1 when absent), /gbs and /mbs; tp × cp × pp × dp must be the GPUs.
struct RowLayout {
    std::int64_t gpus, tp, pp, dp, cp, vp, gbs, mbs;
};
RowLayout row_layout(const Row& row, bool vp_required) {
    const Json& d = row.data;
    const Json& par = member_or_null(d, "par");
    RowLayout l{};
    l.gpus = required_integer(row, member_or_null(d, "hw"), "gpus", "/hw");
    l.tp = required_integer(row, par, "tp", "/par");
    l.pp = required_integer(row, par, "pp", "/par");
    l.dp = required_integer(row, par, "dp", "/par");
    l.cp = context_parallel(row, par);
    l.vp = vp_required || par.contains("vp") ? required_integer(row, par, "vp", "/par") : 1;
    l.gbs = required_integer(row, d, "gbs", "");
    l.mbs = required_integer(row, d, "mbs", "");
    if (l.tp * l.cp * l.pp * l.dp != l.gpus || l.gpus % 8 != 0)
        fail_input("tp × cp × pp × dp = GPUs, in whole 8-GPU nodes",
                   std::to_string(l.tp * l.cp * l.pp * l.dp) + " for " + std::to_string(l.gpus), at(row, "/par"));
    return l;
}

/// The row's model (at /model) as a shape; kv heads default to the heads, the MLP to 4 × hidden.
ModelShape shape_of(const Row& row, bool llama, std::int64_t seq) {
    const Json& model = member_or_null(row.data, "model");
    const auto i = [&](const char* key) { return static_cast<int>(required_integer(row, model, key, "/model")); };
    ModelShape s;
    s.llama = llama;
    s.layers = i("L");
    s.hidden = i("h");
    s.heads = i("heads");
    s.kv_heads = model.contains("kv") ? i("kv") : s.heads;
    s.ffn_hidden = model.contains("ffn") ? i("ffn") : 4 * s.hidden;
    s.vocab = i("vocab");
    s.seq = static_cast<int>(seq);
    return s;
}

// ---------------------------------------------------------------------------------------------
// One function per source.

/// Megatron-DeepSpeed as vTrain measured it (config use_gradient_bucket: false; src/predictor.py
/// puts one data-parallel all-reduce per stage after the last backward): gradients all-reduced
/// after the whole backward, not bucketed: --framework megatron-deepspeed says so.
std::vector<std::string> vtrain_framework_flags() {
    // Megatron-DeepSpeed: DeepSpeed's engine all-reduces gradients after backward (strategies/framework.cpp).
    // Attention: Megatron-DeepSpeed's unfused path (baddbmm, fused softmax) unless --use-flash-attn,
    // which vTrain's configs do not name: --attention eager.
    return {"--strategy", "ddp", "--framework", "megatron-deepspeed", "--attention", "eager"};
}

/// One vTrain measurement: the CSV's columns.
struct VtrainRun {
    std::int64_t gpus, gbs, mbs, hidden, heads, layers, seq, tp, dp, pp;
    double iter_ms;
};

/// vTrain (VIA-Research/vTrain data/ground_truth_single.csv, and the two samples of it in
/// published.jsonl): GPT models in Megatron-DeepSpeed on one HGX A100 node, GPT-2 vocabulary
/// padded by Megatron, fp16 (src/predictor.py:112 sets torch.float16), full activation
/// checkpointing and 1F1B (config use_checkpoint: true, pipeline_scheduling: "1f1b"). All-reduces
/// take the times vTrain measured with nccl-tests on that node (kVtrainNcclProfile, beside the CSV).
Mapping map_vtrain_run(const Row& row, const VtrainRun& v, const std::string& model_dir) {
    if (v.tp * v.dp * v.pp != v.gpus)
        fail_input("tp × dp × pp = GPUs",
                   std::to_string(v.tp) + " × " + std::to_string(v.dp) + " × " + std::to_string(v.pp) + " for " +
                       std::to_string(v.gpus) + " GPUs",
                   at(row, ""));
    Mapping m;
    ModelShape s;
    s.layers = static_cast<int>(v.layers);
    s.hidden = static_cast<int>(v.hidden);
    s.heads = s.kv_heads = static_cast<int>(v.heads);
    s.ffn_hidden = static_cast<int>(4 * v.hidden);
    s.vocab = 50257;  // GPT-2 BPE, which Megatron-DeepSpeed pads to 128 × tp (--framework megatron-deepspeed)
    s.seq = static_cast<int>(v.seq);
    m.model = s;
    m.gpus = v.gpus;
    m.global_batch = v.gbs;
    m.seq = s.seq;
    m.metric = Metric{"iter_ms", MetricKind::step_time, v.iter_ms, 1e-3, "iteration time (ms), measured"};
    // vTrain's configs: nodes of 8 GPUs ("node_size": 8), config/validation/{single,multi}/.
    if (v.gpus > 8 && v.gpus % 8 != 0)
        fail_input("whole nodes of 8 GPUs", std::to_string(v.gpus) + " GPUs", at(row, ""));
    m.args = {"simulate",       "--model",     model_path(model_dir, s), "--cluster", "hgx-a100-4hdr",
              v.gpus > 8 ? "--nodes" : "--devices", std::to_string(v.gpus > 8 ? v.gpus / 8 : v.gpus),
              "--tp",           std::to_string(v.tp),
              "--pp",           std::to_string(v.pp),
              "--dp",           std::to_string(v.dp),
              "--micro-batch",  std::to_string(v.mbs),
              "--global-batch", std::to_string(v.gbs),
              "--dtype",        "fp16",
              "--recompute",    "full",
              "--schedule",     "1f1b",
              "--profile",      (fs::path(row.folder) / kVtrainNcclProfile).string()};
    for (const std::string& f : vtrain_framework_flags()) m.args.push_back(f);
    m.args.push_back("--json");
    return finish(std::move(m));
}

Mapping map_vtrain(const Row& row, const std::string& model_dir) {
    const Json& d = row.data;
    const auto i = [&](const char* k) { return required_integer(row, d, k, ""); };
    return map_vtrain_run(row,
                          {i("gpus"), i("gbs"), i("mbs"), i("h"), i("heads"), i("L"), i("seq"), i("tp"), i("dp"), i("pp"),
                           d.at("iter_ms").get<double>()},
                          model_dir);
}

/// published.jsonl P44/P45: rows of the same CSV, in the jsonl's own field names.
Mapping map_vtrain_samples(const Row& row, const std::string& model_dir) {
    const Json& d = row.data;
    const auto in = [&](const char* obj, const char* key) {
        return required_integer(row, member_or_null(d, obj), key, std::string("/") + obj);
    };
    const auto top = [&](const char* key) { return required_integer(row, d, key, ""); };
    const auto iter_ms = number_of(member_or_null(d, "metric"), "iter_ms");
    if (!iter_ms) fail_input("a number", describe_json(member_or_null(d, "metric")), at(row, "/metric/iter_ms"));
    return map_vtrain_run(row,
                          {in("hw", "gpus"), top("gbs"), top("mbs"), in("model", "h"), in("model", "heads"),
                           in("model", "L"), in("model", "seq"), in("par", "tp"), in("par", "dp"), in("par", "pp"), *iter_ms},
                          model_dir);
}

/// Llama 3 Herd (arXiv 2407.21783) §3.3.2 Table 4: Llama 3 405B on Grand Teton H100 nodes.
/// batch_per_dp sequences per data-parallel group per step, micro-batch 1.
Mapping map_llama3_herd(const Row& row, const std::string& model_dir) {
    Mapping m;
    common_gaps(row, m);
    choose_metric(row, /*tflops_are_model=*/true, m);
    if (!m.gaps.empty()) return finish(std::move(m));
    const Json& d = row.data;
    const Json& par = member_or_null(d, "par");
    const std::int64_t gpus = required_integer(row, member_or_null(d, "hw"), "gpus", "/hw");
    const std::int64_t tp = required_integer(row, par, "tp", "/par"), pp = required_integer(row, par, "pp", "/par"),
                       dp = required_integer(row, par, "dp", "/par"), cp = context_parallel(row, par);
    const std::int64_t seq = required_integer(row, d, "seq", "");
    const std::int64_t gbs = required_integer(row, d, "batch_per_dp", "") * dp;
    if (tp * cp * pp * dp != gpus || gpus % 8 != 0)
        fail_input("tp × cp × pp × dp = GPUs, in whole 8-GPU nodes",
                   std::to_string(tp * cp * pp * dp) + " for " + std::to_string(gpus), at(row, "/par"));
    const ModelShape s = shape_of(row, /*llama=*/true, seq);
    m.model = s;
    m.gpus = gpus;
    m.global_batch = gbs;
    m.seq = s.seq;
    // §3.3.2: "we reduce one Transformer layer each from the first and the last stages" (the
    // embedding and the head take their place): 126 layers on 16 stages as 7, 8, …, 8, 7.
    std::string stages;
    if (s.layers == (pp - 2) * (s.layers / pp + 1) + 2 * (s.layers / pp)) {
        const std::int64_t inner = s.layers / pp + 1;
        for (std::int64_t k = 0; k < pp; ++k)
            stages += (k ? "," : "") + std::to_string(k == 0 || k == pp - 1 ? inner - 1 : inner);
    }
    m.notes = {"FSDP of optimizer states and gradients (parameters kept after forward) as zero1, the distributed optimizer",
               "stages as the paper cuts them: one layer fewer on the first and the last",
               "the paper's tuned interleaved schedule has no published virtual-stage count: 1F1B",
               "fused attention as the plan's default framework (Megatron core) runs it on the H100, cuDNN's kernel: the paper names no attention kernel; its backward recomputes the scores; no other recompute",
               "sequence parallelism not stated: on, because the runs ran: without it the plan needs about 209 GiB "
               "of each GPU's 80 (1F1B keeps up to 16 micro-batches of 8 layers' activations, their norms' and "
               "residuals' replicated over tp 8); the other way to fit, full recompute, would be a third slower",
               "the vocabulary's 128,256 rows as the paper's model has them, not padded as Megatron pads (Meta's "
               "own training stack): --make-vocab-size-divisible-by 1"};
    if (cp > 1)
        m.notes.push_back("context parallelism as Llama 3 runs it: K and V all-gathered over the CP group before attention "
                          "(§3.3.2), --cp-comm all-gather");
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "grand-teton-h100",
              "--nodes", std::to_string(gpus / 8), "--tp", std::to_string(tp), "--pp", std::to_string(pp),
              "--dp", std::to_string(dp), "--sp", "--strategy", "zero1", "--schedule", "1f1b", "--recompute", "none",
              "--micro-batch", "1", "--global-batch", std::to_string(gbs), "--dtype", "bf16",
              "--make-vocab-size-divisible-by", "1", "--json"};
    if (!stages.empty()) m.args.insert(m.args.end() - 1, {"--stage-layers", stages});
    if (cp > 1) m.args.insert(m.args.end() - 1, {"--cp", std::to_string(cp), "--cp-comm", "all-gather"});
    return finish(std::move(m));
}

/// NVIDIA/dgxc-benchmarking nemo_megatron: GPT-3 175B in NeMo on DGX H100 nodes (DGX Cloud), as
/// gpt3_175b_hydra.yaml runs it: tp 4, pp 8, virtual pipeline 12, micro-batch 1,
/// sequence_parallel true, distributed_fused_adam (the distributed optimizer),
/// activations_checkpoint_granularity null with Transformer Engine's fused attention.
Mapping map_dgxc_benchmarking(const Row& given, const std::string& model_dir) {
    Row row = given;
    Mapping m;
    // The row gives layers, hidden and vocabulary; the recipe (gpt3_175b_hydra.yaml) gives the rest:
    // num_attention_heads 96, ffn_hidden_size 49152 (4 × hidden).
    Json& model = row.data["model"];
    if (text_of(model, "name") == "GPT3-175B" && !model.contains("heads")) {
        model["heads"] = 96;
        m.notes.push_back("96 heads and ffn 49152 from the recipe's gpt3_175b_hydra.yaml");
    }
    common_gaps(row, m);
    choose_metric(row, false, m);
    if (!m.gaps.empty()) return finish(std::move(m));
    const Json& d = row.data;
    const auto [gpus, tp, pp, dp, cp, vp, gbs, mbs] = row_layout(row, /*vp_required=*/true);
    const bool llama = contains(text_of(member_or_null(d, "model"), "name"), "llama");
    const ModelShape s = shape_of(row, llama, required_integer(row, member_or_null(d, "model"), "seq", "/model"));
    m.model = s;
    m.gpus = gpus;
    m.global_batch = gbs;
    m.seq = s.seq;
    if (llama)
        m.notes.push_back("Llama 3.1 70B run as the GPT-3 recipe runs (sequence parallelism, the distributed optimizer, "
                          "no activation checkpointing); its own recipe is not in the row");
    if (cp > 1)
        m.notes.push_back("context parallelism as NeMo runs it: Transformer Engine's ring attention (cp_comm_type p2p)");
    m.notes.insert(m.notes.end(),
                   {"DGX Cloud taken as DGX H100 nodes (8 x 400 Gb/s InfiniBand), as the row assumes",
                    "no activation checkpointing (activations_checkpoint_granularity null); Transformer Engine's fused "
                    "attention is flash attention (the default on H100), whose backward recomputes the scores",
                    "NeMo overlaps the gradient reduce-scatter with backward (overlap_grad_sync: --overlap-grad-reduce), the "
                    "parameter all-gather with forward (overlap_param_sync: --overlap-param-gather), both in buckets of "
                    "bucket_cap_mb 220 (--bucket-mb 220), and tensor-parallel communication with GEMMs through Transformer "
                    "Engine's userbuffers (ub_tp_comm_overlap: --tp-comm-overlap, at TE's default settings rather than the "
                    "recipe's ub_tp_comm_overlap_cfg); the recipe of dgxc-benchmarking v25.02, whose table the rows are "
                    "(nemo_megatron/gpt3_175b_hydra.yaml:119, 140-142 at 8f5cbb3)"});
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "dgx-h100",
              "--nodes", std::to_string(gpus / 8), "--tp", std::to_string(tp), "--pp", std::to_string(pp),
              "--dp", std::to_string(dp), "--schedule", "interleaved", "--virtual-stages", std::to_string(vp), "--sp",
              "--strategy", "zero1", "--framework", "megatron", "--overlap-grad-reduce", "--bucket-mb", "220",
              "--recompute", "none", "--micro-batch", std::to_string(mbs),
              "--global-batch", std::to_string(gbs), "--dtype", "bf16", "--json"};
    if (dp * cp > 1) m.args.insert(m.args.end() - 1, "--overlap-param-gather");
    if (cp > 1) {
        m.args.insert(m.args.end() - 1, {"--cp", std::to_string(cp)});
        m.notes.push_back("the Llama recipe sets the userbuffers overlap too (ub_tp_comm_overlap, llama3.1/llama3.1_70b.yaml:129), "
                          "its linears' collectives beside their GEMMs on either side of the ring");
    }
    m.args.insert(m.args.end() - 1, "--tp-comm-overlap");
    if (const auto fp8 = fp8_recipe(row)) {
        m.args.insert(m.args.end() - 1, {"--fp8", *fp8});
        m.notes.push_back("FP8 as the recipe runs it (fp8_hybrid): the linear layers' GEMMs in FP8 through Transformer "
                          "Engine, " + *fp8 + " scaling");
    }
    return finish(std::move(m));
}

Mapping map_opt(const Row& row, const std::string&) {
    // FSDP with Megatron's tensor parallelism is modelled (--strategy fsdp --tp); the run is not.
    return gaps_only(row, {{"hardware not described", "992 A100-80GB; the interconnect is not stated in §2.4"},
                           {"unknown batch", "gbs_tokens " + text_of(row.data, "gbs_tokens")}});
}

/// A model of NeMo's performance summary by the name its rows give, as the NeMo-Framework-Launcher
/// recipe the summary ran defines it (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/):
/// its shape, GPT-2's 50,257-token vocabulary (GPT2BPETokenizer) or Llama's, and the recipe's
/// activations_checkpoint_granularity.
struct NemoModel {
    const char* name;
    const char* recipe;     // the recipe file, for the notes
    bool llama;
    int layers, hidden, heads, kv_heads, ffn_hidden, vocab;
    const char* recompute;  // "selective" (core attention) or "none" (null)
    /// The recipe's cross_entropy_loss_fusion at the 24.07 tag (Megatron core's native fusion):
    /// llama3_8b.yaml:94 (9352b045, "perf patch"); the others gained it later or never.
    bool ce_fusion = false;
    /// The recipe's distributed_fused_adam bucket_cap_mb (its gradient buckets, MiB), at the
    /// recipe file's last version: 5b_fp8_performance.yaml:157 (949f53b3), 20b_fp8_performance.yaml:157
    /// (b1a59070), 175b_fp8_performance.yaml:152 (1e46ac6c), llama2_70b.yaml:157 and
    /// llama3_8b.yaml:153 at the 24.07 tag.
    int bucket_cap_mb = 0;
    /// The recipe's ub_tp_comm_overlap (Transformer Engine's userbuffers: --tp-comm-overlap), at
    /// the same versions: 175b_fp8_performance.yaml:129 and llama2_70b.yaml:136 true,
    /// 20b_fp8_performance.yaml:136 and llama3_8b.yaml:136 false (5B runs tp 1).
    bool ub_tp_comm_overlap = false;
};
const NemoModel* nemo_model(const std::string& name) {
    static const NemoModel models[] = {
        {"GPT3-5B", "gpt3/5b_fp8_performance.yaml", false, 24, 4096, 32, 32, 16384, 50257, "selective", false, 400, false},
        {"GPT3-20B", "gpt3/20b_fp8_performance.yaml", false, 44, 6144, 48, 48, 24576, 50257, "selective", false, 220, false},
        {"GPT3-175B", "gpt3/175b_fp8_performance.yaml", false, 96, 12288, 96, 96, 49152, 50257, "selective", false, 100, true},
        {"Llama2-70B", "llama/llama2_70b.yaml", true, 80, 8192, 64, 8, 28672, 32000, "none", false, 125, true},
        {"Llama3-8B", "llama/llama3_8b.yaml", true, 32, 4096, 32, 8, 14336, 128256, "none", true, 125, false},
    };
    for (const NemoModel& m : models)
        if (name == m.name) return &m;
    return nullptr;
}

/// NVIDIA/NeMo docs/source/performance/performance_summary.md (NeMo 24.07, DGX-H100, FP8): the
/// row's layout, batch and sequence; the rest as its recipe runs: Transformer Engine's FP8 with
/// delayed scaling (fp8_hybrid, amax history 1024), sequence parallelism wherever tp > 1, the
/// distributed optimizer (distributed_fused_adam: zero1), flash attention, the recipe's recompute.
Mapping map_nemo_performance(const Row& given, const std::string& model_dir) {
    Row row = given;
    Mapping m;
    Json& model = row.data["model"];
    const NemoModel* nm = nemo_model(text_of(model, "name"));
    if (nm) {
        model["L"] = nm->layers, model["h"] = nm->hidden, model["heads"] = nm->heads, model["kv"] = nm->kv_heads;
        model["ffn"] = nm->ffn_hidden;
    }
    common_gaps(row, m);
    choose_metric(row, false, m);
    if (!m.gaps.empty()) return finish(std::move(m));
    const auto [gpus, tp, pp, dp, cp, vp, gbs, mbs] = row_layout(row, /*vp_required=*/false);
    ModelShape s;
    s.llama = nm->llama;
    s.layers = nm->layers, s.hidden = nm->hidden, s.heads = nm->heads, s.kv_heads = nm->kv_heads;
    s.ffn_hidden = nm->ffn_hidden;
    s.vocab = nm->vocab;   // the tokenizer's; NeMo pads it to 128 × tp as Megatron does (--framework megatron)
    s.seq = static_cast<int>(required_integer(row, model, "seq", "/model"));
    m.model = s;
    m.gpus = gpus;
    m.global_batch = gbs;
    m.seq = s.seq;
    m.notes = {std::string("shape and settings from NeMo-Framework-Launcher's ") + nm->recipe + " (recompute " + nm->recompute +
                   ", sequence parallelism with tp > 1, distributed_fused_adam); the row's layout",
               "FP8 as the recipe runs it: Transformer Engine, fp8_hybrid with delayed scaling (amax history 1024)",
               "NeMo overlaps the gradient reduce-scatter (overlap_grad_sync: --overlap-grad-reduce) and the parameter "
               "all-gather (overlap_param_sync: --overlap-param-gather) in buckets of bucket_cap_mb " +
                   std::to_string(nm->bucket_cap_mb) + " (--bucket-mb), as Megatron's distributed optimizer runs them"};
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "dgx-h100", "--nodes", std::to_string(gpus / 8),
              "--tp", std::to_string(tp), "--pp", std::to_string(pp), "--dp", std::to_string(dp), "--strategy", "zero1",
              "--framework", "megatron", "--overlap-grad-reduce", "--bucket-mb", std::to_string(nm->bucket_cap_mb),
              "--recompute", nm->recompute, "--micro-batch", std::to_string(mbs), "--global-batch", std::to_string(gbs),
              "--dtype", "bf16", "--json"};
    if (dp * cp > 1) m.args.insert(m.args.end() - 1, "--overlap-param-gather");
    if (tp > 1) m.args.insert(m.args.end() - 1, "--sp");
    if (tp > 1 && nm->ub_tp_comm_overlap) {
        m.args.insert(m.args.end() - 1, "--tp-comm-overlap");
        m.notes.push_back("the recipe's ub_tp_comm_overlap: tensor-parallel communication beside the GEMMs through Transformer "
                          "Engine's userbuffers (--tp-comm-overlap), at TE's default settings rather than the recipe's "
                          "ub_tp_comm_overlap_cfg");
    }
    if (pp > 1)
        m.args.insert(m.args.end() - 1, {"--schedule", vp > 1 ? "interleaved" : "1f1b"});
    if (vp > 1) m.args.insert(m.args.end() - 1, {"--virtual-stages", std::to_string(vp)});
    if (cp > 1) m.args.insert(m.args.end() - 1, {"--cp", std::to_string(cp)});
    if (const auto fp8 = fp8_recipe(row)) m.args.insert(m.args.end() - 1, {"--fp8", *fp8});
    if (nm->ce_fusion) {
        m.args.insert(m.args.end() - 1, {"--cross-entropy-fusion", "native"});
        m.notes.push_back("the recipe's cross_entropy_loss_fusion: Megatron core's fused cross-entropy (native)");
    }
    return finish(std::move(m));
}

/// Megatron-Bridge's performance scripts run Megatron core 0.16 (3rdparty/Megatron-LM at v0.2.0:
/// 0d8e0714cd; at c0b9a0003: 23dd639cf3, package_info.py MINOR 16) with GPTModelProvider's
/// cross_entropy_loss_fusion (True, gpt_provider.py:180 at v0.2.0) and their common overrides'
/// cross_entropy_fusion_impl "te" (scripts/performance/utils/helpers.py:108 at v0.2.0,
/// utils/overrides.py:65 at c0b9a0003).
const std::vector<std::string> kMegatronBridgeFramework = {"--framework", "megatron@0.16", "--cross-entropy-fusion", "te"};
const char* const kMegatronBridgeNote =
    "Megatron core 0.16 with the scripts' fused cross-entropy (Transformer Engine's: cross_entropy_fusion_impl te)";

/// Megatron-Bridge's Llama 3 8B on one DGX H100 in FP8 current scaling with Megatron-FSDP (25.11:
/// the v0.2.1 scripts). The shape is the model's (meta-llama/Meta-Llama-3-8B config.json: 32 ×
/// 4,096, 32 heads, 8 key-value heads, FFN 14,336, vocabulary 128,256, a multiple of 128 already);
/// the recipe's settings: LLAMA3_8B_H100_FP8_CS_BASE_CONFIG (scripts/performance/configs/llama3/
/// workload_base_configs.py:231-235: cp 1, recompute_num_layers 5, which set_recompute_overrides
/// runs as granularity full, method block: utils/helpers.py:175-178), BASE_LLAMA3_8B_CONFIG's global
/// batch 128 at micro-batch 1, the row's FSDP = 1 as set_megatron_fsdp_overrides sets it
/// (helpers.py:116-125: optim_grads_params), and get_precision_config("fp8_cs") (helpers.py:35-41):
/// bf16_with_fp8_current_scaling_mixed with its first and last layers' BF16 turned off and its
/// fp8_param_gather on (src/megatron/bridge/training/mixed_precision.py at v0.2.0).
Mapping map_megatron_bridge_llama3_8b_fsdp(const Row& row, const std::string& model_dir, Mapping m) {
    if (!m.gaps.empty()) return finish(std::move(m));
    const Json& d = row.data;
    const Json& par = member_or_null(d, "par");
    const std::int64_t gpus = required_integer(row, member_or_null(d, "hw"), "gpus", "/hw");
    const std::int64_t tp = required_integer(row, par, "tp", "/par"), pp = required_integer(row, par, "pp", "/par");
    const std::int64_t cp = context_parallel(row, par);
    const std::int64_t gbs = required_integer(row, d, "gbs", ""), mbs = required_integer(row, d, "mbs", "");
    if (tp != 1 || pp != 1 || cp != 1 || gpus != 8)
        fail_input("Megatron-Bridge's H100 Llama 3 8B FSDP recipe: tp, pp and cp 1 on 8 GPUs",
                   "tp " + std::to_string(tp) + ", pp " + std::to_string(pp) + ", cp " + std::to_string(cp) + " on " +
                       std::to_string(gpus),
                   at(row, "/par"));
    ModelShape s;
    s.llama = true;
    s.layers = 32, s.hidden = 4096, s.heads = 32, s.kv_heads = 8, s.ffn_hidden = 14336, s.vocab = 128256;
    s.seq = static_cast<int>(required_integer(row, member_or_null(d, "model"), "seq", "/model"));
    m.model = s;
    m.gpus = gpus;
    m.global_batch = gbs;
    m.seq = s.seq;
    m.notes = {"Megatron-FSDP (FSDP = 1) as the scripts' set_megatron_fsdp_overrides runs it: optim_grads_params, "
               "--strategy fsdp --framework megatron",
               "the recipe's recompute_num_layers 5: the first 5 layers recomputed in full (--recompute full "
               "--recompute-method block --recompute-num-layers 5)",
               "FP8 current scaling: --fp8 tensorwise, every layer in FP8 (the scripts turn the recipe's first and last "
               "BF16 layers off), with the recipe's fp8_param_gather (--fp8-param-gather: FP8 shards gathered at a byte, "
               "the transposes built before each backward)",
               "not modelled: NCCL user buffers (nccl_ub)"};
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "dgx-h100", "--nodes", "1",
              "--strategy", "fsdp", "--recompute", "full", "--recompute-method", "block", "--recompute-num-layers", "5",
              "--micro-batch", std::to_string(mbs), "--global-batch", std::to_string(gbs), "--dtype", "bf16", "--json"};
    m.args.insert(m.args.end() - 1, kMegatronBridgeFramework.begin(), kMegatronBridgeFramework.end());
    m.notes.push_back(kMegatronBridgeNote);
    if (const auto fp8 = fp8_recipe(row)) m.args.insert(m.args.end() - 1, {"--fp8", *fp8, "--fp8-param-gather"});
    return finish(std::move(m));
}

/// NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (25.11, DGX-H100): FP8 rows are gaps;
/// P20 is GPT-OSS-120B, a mixture of experts, in BF16 with expert parallelism, routing
/// force-balanced (Megatron's --moe-router-force-load-balancing: --expert-imbalance 1, the default).
/// Megatron-Bridge's dense Llama rows (scripts/performance/configs/llama/llama31_workload_base_configs.py,
/// LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS_V1: 1,024 H100s, tp 8, pp 8, cp 2, vp 8, global batch
/// 512, micro-batch 1, no recompute, the distributed optimizer, sequence parallelism; FP8 current
/// scaling). Llama 3.1 405B's 126 layers on 64 virtual stages: Megatron counts the embedding and
/// the loss as a layer each (account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split),
/// so the first and last chunks hold one layer, every other chunk two. The recipe's
/// CommOverlapConfig(tp_comm_overlap=True) (src/megatron/bridge/recipes/llama/llama3.py:415-418 at
/// v0.2.0) turns on the userbuffers, and with dp > 1 the distributed optimizer's overlaps in buckets
/// of 128 · 1024 · 1024 parameters (training/comm_overlap.py:539-546 _get_optimizer_overlap_cfgs);
/// the scripts move the first chunk's parameter all-gathers under the optimizer step where dp, pp
/// and vp exceed 1 (scripts/performance/utils/helpers.py:267-270).
Mapping map_megatron_bridge_dense(const Row& given, const std::string& model_dir, Mapping m) {
    Row row = given;
    const Json& d = row.data;
    const Json& par = member_or_null(d, "par");
    const std::string name = text_of(member_or_null(d, "model"), "name");
    const bool fsdp = contains(text_of(par, "shard"), "fsdp=1");
    if (name == "Llama3-8B" && fsdp) return map_megatron_bridge_llama3_8b_fsdp(row, model_dir, std::move(m));
    if (name != "Llama3.1-405B")
        add_gap(m, "no mapping yet", "only this source's Llama 3 8B (Megatron-FSDP), Llama 3.1 405B and mixture-of-experts "
                                     "recipes are extracted");
    if (!m.gaps.empty()) return finish(std::move(m));
    const auto [gpus, tp, pp, dp, cp, vp, gbs, mbs] = row_layout(row, /*vp_required=*/true);
    // Llama 3.1 405B (meta-llama/Llama-3.1-405B config.json): 126 × 16,384, 128 heads, 8 key-value heads.
    ModelShape s;
    s.llama = true;
    s.layers = 126, s.hidden = 16384, s.heads = 128, s.kv_heads = 8, s.ffn_hidden = 53248, s.vocab = 128256;
    s.seq = static_cast<int>(required_integer(row, member_or_null(d, "model"), "seq", "/model"));
    const std::int64_t chunks = pp * vp;
    if ((s.layers + 2) % chunks != 0)
        fail_input("pp × vp dividing Llama 3.1 405B's 126 layers and its embedding and loss", std::to_string(chunks), at(row, "/par"));
    const std::int64_t per = (s.layers + 2) / chunks;
    std::string stages;
    for (std::int64_t k = 0; k < chunks; ++k) stages += (k ? "," : "") + std::to_string(k == 0 || k == chunks - 1 ? per - 1 : per);
    m.model = s;
    m.gpus = gpus;
    m.global_batch = gbs;
    m.seq = s.seq;
    m.notes = {"settings from Megatron-Bridge's LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS_V1 (no recompute, the distributed "
               "optimizer, sequence parallelism); the embedding and the loss each count as a layer of the pipeline split",
               "FP8 current scaling: --fp8 tensorwise, every layer in FP8 (the scripts' get_precision_config turns the "
               "recipe's first and last BF16 layers off), with its fp8_param_gather (bf16_with_fp8_current_scaling_mixed, "
               "src/megatron/bridge/training/mixed_precision.py at v0.2.0): --fp8-param-gather",
               "context parallelism as Megatron runs it: Transformer Engine's ring attention (p2p)",
               "the recipe's CommOverlapConfig: Transformer Engine's userbuffers (tp_comm_overlap: --tp-comm-overlap, at TE's "
               "default settings rather than userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192), the gradient "
               "reduce-scatter overlapped in buckets of 128 Mi parameters (--overlap-grad-reduce --bucket-mb 256), the "
               "parameter all-gathers aligned in the forward (--overlap-param-gather) but the first chunk's, which go out "
               "under the optimizer step (overlap_param_gather_with_optimizer_step, which the scripts set with dp, pp and "
               "vp above 1: --overlap-param-gather-with-optimizer-step)"};
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "dgx-h100", "--nodes", std::to_string(gpus / 8),
              "--tp", std::to_string(tp), "--pp", std::to_string(pp), "--dp", std::to_string(dp), "--cp", std::to_string(cp),
              "--sp", "--strategy", "zero1", "--overlap-grad-reduce", "--bucket-mb", "256", "--overlap-param-gather",
              "--overlap-param-gather-with-optimizer-step", "--tp-comm-overlap", "--schedule", "interleaved",
              "--virtual-stages", std::to_string(vp), "--stage-layers", stages, "--recompute", "none",
              "--micro-batch", std::to_string(mbs), "--global-batch", std::to_string(gbs), "--dtype", "bf16", "--json"};
    m.args.insert(m.args.end() - 1, kMegatronBridgeFramework.begin(), kMegatronBridgeFramework.end());
    m.notes.push_back(kMegatronBridgeNote);
    if (const auto fp8 = fp8_recipe(row)) m.args.insert(m.args.end() - 1, {"--fp8", *fp8, "--fp8-param-gather"});
    return finish(std::move(m));
}

Mapping map_megatron_bridge(const Row& row, const std::string& model_dir) {
    Mapping m;
    common_gaps(row, m);
    choose_metric(row, false, m);
    const Json& d = row.data;
    const Json& model = member_or_null(d, "model");
    const auto config = known_moe_config(text_of(model, "name"));
    if (!config) {
        // A dense model: the shape comes with its recipe, not from the row.
        m.gaps.erase(std::remove_if(m.gaps.begin(), m.gaps.end(), [](const Gap& g) { return g.feature == "unknown model shape"; }),
                     m.gaps.end());
        return map_megatron_bridge_dense(row, model_dir, std::move(m));
    }
    if (!m.gaps.empty()) return finish(std::move(m));
    const Json& par = member_or_null(d, "par");
    const std::int64_t gpus = required_integer(row, member_or_null(d, "hw"), "gpus", "/hw");
    const std::int64_t tp = required_integer(row, par, "tp", "/par"), pp = required_integer(row, par, "pp", "/par"),
                       ep = required_integer(row, par, "ep", "/par");
    const std::int64_t gbs = required_integer(row, d, "gbs", ""), row_mbs = required_integer(row, d, "mbs", "");
    const std::int64_t seq = required_integer(row, model, "seq", "/model");
    if (gpus % (tp * pp) != 0 || gpus % 8 != 0)
        fail_input("GPUs in whole 8-GPU nodes and a multiple of tp × pp", std::to_string(gpus), at(row, "/par"));
    const std::int64_t dp = gpus / (tp * pp);
    // The micro-batch is the recipe's, not the row's. The 25.11 container ran Megatron-Bridge
    // v0.2.0, whose scripts/performance/configs/gpt_oss/workload_base_configs.py gives the H100
    // recipe (GPT_OSS_120B_H100_BF16_BASE_CONFIG: pp 4, BASE_GPT_OSS_120B_CONFIG's ep 8, gbs 512)
    // micro_batch_size 1: only the GB300, GB200 and B200 recipes set 4. P20's MBS 4 and GA 2 are
    // the B200 row's above it (GA 2 = 512 / (64 × 4) needs dp 64, so pp 1); the 26.02 summary
    // (docs/performance-summary.md at c0b9a0003, P48) lists the same H100 recipe (v0.3.0's
    // GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2: V1 at gbs 1,280) at MBS 1.
    const std::int64_t mbs = 1;
    m.model_config = config;
    m.gpus = gpus;
    m.global_batch = gbs;
    m.seq = static_cast<int>(seq);
    m.notes = {"dp = GPUs / (tp x pp) = " + std::to_string(dp) + ", the expert-parallel groups inside it (Megatron)",
               "micro-batch " + std::to_string(mbs) + " as Megatron-Bridge's H100 recipe runs it (GPT_OSS_120B_H100_BF16_BASE_CONFIG)" +
                   (row_mbs == mbs ? std::string()
                                   : ", not the row's " + std::to_string(row_mbs) + ": its mbs and ga (" + text_of(d, "ga") +
                                         ") are the B200 row's (pp 1)") +
                   "; gbs / (dp x mbs) = " + std::to_string(gbs / (dp * mbs)) + " micro-batches",
               "Megatron's distributed optimizer (Megatron-Bridge's default): zero1; flash attention, 1F1B",
               "the recipe overlaps the gradient reduce-scatter with backward and the parameter all-gather with forward: "
               "--overlap-grad-reduce --overlap-param-gather",
               "routing force-balanced: --expert-imbalance 1"};
    // Both releases' gpt_oss_120b_pretrain_config overlap the distributed optimizer's communication
    // (DistributedDataParallelConfig overlap_grad_reduce and overlap_param_gather True:
    // src/megatron/bridge/recipes/gpt_oss/gpt_oss.py:284-291 at v0.2.0, :346-347 at c0b9a0003);
    // the performance scripts leave them (configs/gpt_oss/gpt_oss_llm_pretrain.py sets only the
    // gradient reduce to bf16, the router fusion and the forced balance).
    // The H100 recipe's recompute_modules ["layernorm", "moe_act"] take effect from the 26.02
    // scripts on, which set recompute_granularity "selective" with them (scripts/performance/utils/
    // overrides.py:142-144 at c0b9a0003); v0.2.0's set_recompute_overrides (utils/helpers.py:178-179)
    // sets the modules alone, and the recipe's granularity stays None: no recompute.
    const bool selective = contains(text_of(d, "src"), "26.02");
    m.notes.push_back(selective ? "selective recompute of moe_act and layernorm, the H100 recipe's recompute_modules"
                                : "no recompute: the 25.11 scripts set the H100 recipe's recompute_modules without a granularity");
    m.args = {"simulate", "--model", (fs::path(model_dir) / config->first).string(), "--cluster", "dgx-h100",
              "--nodes", std::to_string(gpus / 8), "--tp", std::to_string(tp), "--pp", std::to_string(pp),
              "--dp", std::to_string(dp), "--ep", std::to_string(ep), "--strategy", "zero1",
              "--overlap-grad-reduce", "--overlap-param-gather", "--schedule", "1f1b", "--recompute", selective ? "selective" : "none", "--micro-batch", std::to_string(mbs),
              "--global-batch", std::to_string(gbs), "--seq", std::to_string(seq), "--dtype", "bf16", "--json"};
    if (selective) m.args.insert(m.args.end() - 1, {"--recompute-modules", "moe_act,layernorm"});
    m.args.insert(m.args.end() - 1, kMegatronBridgeFramework.begin(), kMegatronBridgeFramework.end());
    m.notes.push_back(kMegatronBridgeNote);
    return finish(std::move(m));
}

Mapping map_torchtitan(const Row& row, const std::string&) {
    const Json& d = row.data;
    std::vector<Gap> own;
    const std::string type = text_of(member_or_null(d, "hw"), "type");
    if (contains(type, "96GB") || contains(type, "500W"))
        own.push_back({"hardware not described", type + ": no published peak FLOP/s or memory bandwidth for this H100 part"});
    else
        own.push_back({"hardware not described", type + ": the network between the nodes is not stated"});
    // FSDP with tensor and pipeline parallelism is modelled (--strategy fsdp --tp --pp).
    return gaps_only(row, own);
}

Mapping map_pytorch_fsdp_blog(const Row& row, const std::string&) {
    return gaps_only(row, {{"hardware not described", "AWS A100-SXM4-40GB nodes with 400 Gb/s EFA: no preset"}});
}

/// Megatron's FLOPs per step, recompute counted (Narayanan et al. 2021 eq. 3; the DeepSpeed Azure
/// post's formula): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
double megatron_flops(const ModelShape& s, std::int64_t global_batch) {
    const double b = static_cast<double>(global_batch), seq = s.seq, l = s.layers, h = s.hidden, v = s.vocab;
    return 96 * b * seq * l * h * h * (1 + seq / (6 * h) + v / (16 * l * h));
}

/// DeepSpeed on Azure (deepspeedai/DeepSpeed docs/_posts/2022-07-26-deepspeed-azure.md): GPT
/// models with ZeRO-3 and no tensor or pipeline parallelism on NDm A100 v4 VMs, run by
/// Megatron-DeepSpeed's examples_deepspeed/azure recipes (run-175b.sh, run-1t.sh): GPT-2's
/// vocabulary padded to 50,304, fp16, activation checkpointing, the recipes' ds_config (stage 3,
/// stage3_max_live_parameters and stage3_max_reuse_distance 3e9, reduce_bucket_size 9e7,
/// sub_group_size 1e9, overlap_comm, the optimizer offloaded to the CPU as run-1t.sh does it) and,
/// as the post says ("the activation and optimizer states are allocated in the main memory"),
/// activation checkpoints in CPU memory. Attention is Megatron's unfused path (baddbmm, fused
/// softmax): FlashAttention came to Megatron-DeepSpeed on 2022-12-08 (microsoft/Megatron-DeepSpeed
/// d693034e, `--use-flash-attn`), after the recipes (62bc4562, 2022-07-11) and the post. TFLOP/s as
/// the post counts them: Megatron's formula with the recompute (megatron_flops).
Mapping map_deepspeed_azure(const Row& given, const std::string& model_dir) {
    Row row = given;
    Mapping m;
    Json& model = row.data["model"];
    // GPT-2's vocabulary as the Megatron model code these runs train pads it at tp 1 (DeepSpeed's
    // engine, --framework deepspeed, pads nothing itself).
    if (model.is_object() && !model.contains("vocab")) model["vocab"] = padded_vocab(50257, 1, 128);
    common_gaps(row, m);
    const Json& d = row.data;
    const auto mbs = integer_of(d, "mbs");
    if (!mbs) add_gap(m, "unknown batch", "mbs " + text_of(d, "mbs") + ": the peak's micro-batch is not stated");
    const auto hw = number_of(member_or_null(d, "metric"), "hw_tflops_per_gpu");
    if (!hw) add_gap(m, "metric not comparable yet", "no hw_tflops_per_gpu");
    if (!m.gaps.empty()) return finish(std::move(m));
    const std::int64_t gpus = required_integer(row, member_or_null(d, "hw"), "gpus", "/hw");
    if (gpus % 8 != 0) fail_input("whole 8-GPU NDm A100 v4 VMs", std::to_string(gpus) + " GPUs", at(row, "/hw/gpus"));
    const ModelShape s = shape_of(row, /*llama=*/false, required_integer(row, model, "seq", "/model"));
    m.model = s;
    m.gpus = gpus;
    m.global_batch = *mbs * gpus;
    m.seq = s.seq;
    m.metric = Metric{"hw_tflops_per_gpu", MetricKind::hardware_tflops_per_gpu, *hw, 1,
                      "hardware TFLOP/s per GPU (Megatron's 96·B·s·l·h² formula, recompute counted) -> step = FLOPs / (value x GPUs)",
                      megatron_flops(s, m.global_batch)};
    const Json ds{{"train_micro_batch_size_per_gpu", *mbs},
                  {"gradient_accumulation_steps", 1},
                  {"zero_optimization",
                   {{"stage", 3},
                    {"stage3_max_live_parameters", 3e9},
                    {"stage3_max_reuse_distance", 3e9},
                    {"stage3_param_persistence_threshold", 1e5},
                    {"stage3_prefetch_bucket_size", 5e7},
                    {"contiguous_gradients", true},
                    {"overlap_comm", true},
                    {"reduce_bucket_size", 90000000},
                    {"sub_group_size", 1e9},
                    {"offload_optimizer", {{"device", "cpu"}, {"buffer_count", 4}}}}},
                  {"fp16", {{"enabled", true}}},
                  {"activation_checkpointing", {{"cpu_checkpointing", true}}}};
    const std::string config = "ds-azure-zero3-mbs" + std::to_string(*mbs) + ".json";
    m.files.emplace_back(config, ds);
    m.notes = {"GPT-2 vocabulary (Megatron-DeepSpeed's gpt2-vocab.json) padded to 50,304",
               "the azure recipes' ds_config with the optimizer on the CPU (run-1t.sh) and CPU activation checkpoints "
               "(the post's experimental setup)",
               "the post reports the peak over micro-batches; the row's micro-batch is the peak's",
               "eager attention: FlashAttention reached Megatron-DeepSpeed on 2022-12-08 (d693034e), after the post"};
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "ndm-a100-v4", "--nodes",
              std::to_string(gpus / 8), "--deepspeed-config", (fs::path(model_dir) / config).string(), "--recompute", "full",
              "--attention", "eager", "--global-batch", std::to_string(m.global_batch), "--json"};
    return finish(std::move(m));
}

Mapping map_deepspeed_zero3_offload(const Row& row, const std::string&) {
    return gaps_only(row, {{"unknown batch", "batch and sequence not given"}});
}

/// ZeRO-Offload (Ren et al. 2021): the 10 B GPT-2 on one V100 of a DGX-2, as DeepSpeed's
/// ZeRO-Offload tutorial (docs/_tutorials/zero-offload.md) configures it — 50 layers of 4096, 32
/// heads, batch 10, activation checkpointing, ZeRO-2 with the optimizer on the CPU — in
/// DeepSpeedExamples' Megatron-LM-v1.1.5 (sequence 1,024, GPT-2's vocabulary padded to 50,304,
/// fp16). The paper's TFLOP/s count the recompute (Megatron's formula).
Mapping map_zero_offload(const Row& given, const std::string& model_dir) {
    Row row = given;
    Mapping m;
    Json& model = row.data["model"];
    if (text_of(model, "name") == "10B GPT-2-like" && !model.contains("L")) {
        model["L"] = 50;
        model["h"] = 4096;
        model["heads"] = 32;
        model["vocab"] = padded_vocab(50257, 1, 128);   // Megatron-LM v1.1.5's padding of GPT-2's, at tp 1
        model["seq"] = 1024;
        m.notes.push_back("shape and batch from DeepSpeed's ZeRO-Offload tutorial (50 x 4096, 32 heads, batch 10) and "
                          "DeepSpeedExamples Megatron-LM-v1.1.5-ZeRO3/examples/ds_pretrain_gpt2-zero2.sh (seq 1024)");
    }
    common_gaps(row, m);
    const auto tflops = number_of(member_or_null(row.data, "metric"), "tflops_per_gpu");
    if (!tflops) add_gap(m, "metric not comparable yet", "no tflops_per_gpu");
    if (!m.gaps.empty()) return finish(std::move(m));
    const ModelShape s = shape_of(row, /*llama=*/false, required_integer(row, model, "seq", "/model"));
    m.model = s;
    m.gpus = 1;
    m.global_batch = 10;
    m.seq = s.seq;
    m.metric = Metric{"tflops_per_gpu", MetricKind::hardware_tflops_per_gpu, *tflops, 1,
                      "TFLOP/s per GPU (Megatron's formula, recompute counted) -> step = FLOPs / value",
                      megatron_flops(s, m.global_batch)};
    m.args = {"simulate", "--model", model_path(model_dir, s), "--cluster", "dgx2-v100", "--devices", "1", "--strategy",
              "zero2", "--offload", "cpu", "--recompute", "full", "--micro-batch", "10", "--dtype", "fp16", "--json"};
    return finish(std::move(m));
}

Mapping map_zero(const Row& row, const std::string&) {
    return gaps_only(row, {{"unknown batch", "batch per GPU in the paper's appendix, not in the row"},
                           {"unknown parallel layout", "model parallelism " + text_of(member_or_null(row.data, "par"), "mp")}});
}

Mapping map_horovod(const Row& row, const std::string&) {
    return gaps_only(row, {{"hardware not described",
                            "\"128 servers with 4 Pascal GPUs each\": GPU model, memory and links inside a server not stated"}});
}

Mapping map_megatron_lm(const Row& row, const std::string&) {
    return gaps_only(row, {{"unknown parallel layout", "TP/PP only in the README's images"}});
}

Mapping map_arm_clusters(const Row& row, const std::string&) {
    return gaps_only(row, {{"hardware not described", "Raspberry Pi cluster; the network is not stated in the abstract"},
                           {"unknown batch", "batch not stated in the abstract"}});
}

using Mapper = Mapping (*)(const Row&, const std::string&);

const std::map<std::string, Mapper>& mappers() {
    static const std::map<std::string, Mapper> all{
        {"vtrain", map_vtrain},
        {"vtrain-multi", map_vtrain},
        {"vtrain-samples", map_vtrain_samples},
        {"llama3-herd", map_llama3_herd},
        {"opt", map_opt},
        {"dgxc-benchmarking", map_dgxc_benchmarking},
        {"nemo-performance", map_nemo_performance},
        {"megatron-bridge", map_megatron_bridge},
        {"torchtitan", map_torchtitan},
        {"pytorch-fsdp-blog", map_pytorch_fsdp_blog},
        {"deepspeed-azure", map_deepspeed_azure},
        {"deepspeed-zero3-offload", map_deepspeed_zero3_offload},
        {"zero-offload", map_zero_offload},
        {"zero", map_zero},
        {"horovod", map_horovod},
        {"megatron-lm", map_megatron_lm},
        {"arm-clusters", map_arm_clusters},
    };
    return all;
}

}  // namespace

Mapping map_row(const Row& row, const std::string& model_dir) {
    const auto it = mappers().find(row.source);
    if (it == mappers().end()) throw Error(ErrorKind::internal, "no mapping function for source '" + row.source + "'");
    return it->second(row, model_dir);
}

std::string command_line(const std::vector<std::string>& args) {
    std::string line = "smolcluster";
    for (const std::string& a : args) line += " " + a;
    return line;
}

double measured_step_seconds(const Mapping& m, double flops_per_token) {
    const Metric& x = *m.metric;
    const double gpus = static_cast<double>(m.gpus), tokens = static_cast<double>(m.global_batch) * m.seq;
    switch (x.kind) {
        case MetricKind::step_time: return x.value * x.seconds_per_unit;
        case MetricKind::tokens_per_s_per_gpu: return tokens / (x.value * gpus);
        case MetricKind::model_tflops_per_gpu: return flops_per_token * tokens / (x.value * 1e12 * gpus);
        case MetricKind::hardware_tflops_per_gpu: return x.flops_per_step / (x.value * 1e12 * gpus);
    }
    return 0;
}

const char* to_string(Status s) {
    switch (s) {
        case Status::simulated: return "simulated";
        case Status::not_representable: return "not representable";
        case Status::failed: return "failed";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// Running.

namespace {

struct CliResult {
    int code = 0;
    std::string out, err;
};

CliResult run_smolcluster(const std::vector<std::string>& args) {
    std::vector<const char*> argv{"smolcluster"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = tools::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
}

/// Written next to its final name and renamed, so a concurrent harness never reads half a file.
void write_model(const std::string& dir, const ModelShape& s) {
    const fs::path path = fs::path(dir) / model_file_name(s);
    const fs::path tmp = path.string() + ".tmp" + std::to_string(getpid());
    {
        std::ofstream out(tmp, std::ios::binary);
        out << model_json(s).dump(2) << '\n';
        if (!out) fail_input("cannot write " + tmp.string());
    }
    fs::rename(tmp, path);
}

/// Written like the models (next to its name, then renamed).
void write_file(const std::string& dir, const std::string& name, const Json& json) {
    const fs::path path = fs::path(dir) / name;
    const fs::path tmp = path.string() + ".tmp" + std::to_string(getpid());
    {
        std::ofstream out(tmp, std::ios::binary);
        out << json.dump(2) << '\n';
        if (!out) fail_input("cannot write " + tmp.string());
    }
    fs::rename(tmp, path);
}

/// Model FLOPs of one training step without recompute, from `smolcluster describe` (Narayanan et
/// al. 2021 eq. 3's 3 × forward, from the model's own blocks).
double train_flops_per_token(const std::string& model_file) {
    const CliResult r = run_smolcluster({"describe", "--model", model_file, "--json"});
    if (r.code != 0) throw Error(ErrorKind::internal, "smolcluster describe --model " + model_file + " failed: " + r.err);
    return Json::parse(r.out).at("train_flops_per_token").get<double>();
}

/// Runs one representable row and fills its outcome. Exit 3 means the plan does not fit the
/// simulated memory: the summary and its step time are still printed and still compared (the
/// measured run did fit, so that is a gap of the memory model, counted apart).
void run_one(Outcome& o, double flops_per_token) {
    const CliResult r = run_smolcluster(o.mapping.args);
    if (r.code != 0 && r.code != 3) {
        o.status = Status::failed;
        o.failure = r.err.empty() ? "exit " + std::to_string(r.code) : r.err;
        while (!o.failure.empty() && o.failure.back() == '\n') o.failure.pop_back();
        return;
    }
    const Json j = Json::parse(r.out);
    o.status = Status::simulated;
    o.fits = j.at("fits").get<bool>();
    o.simulated_step_s = j.at("iteration_time_s").get<double>();
    o.measured_step_s = measured_step_seconds(o.mapping, flops_per_token);
    o.error = relative_error(o.simulated_step_s, o.measured_step_s);
}

}  // namespace

std::vector<Outcome> run_rows(const std::vector<Row>& rows, const std::string& model_dir, int jobs) {
    std::vector<Outcome> outcomes;
    outcomes.reserve(rows.size());
    for (const Row& r : rows) {
        Outcome o;
        o.row = r;
        o.mapping = map_row(r, model_dir);
        outcomes.push_back(std::move(o));
    }
    // Each distinct model once; its FLOPs per token where a metric counts model FLOPs.
    fs::create_directories(model_dir);
    std::vector<ModelShape> written;
    std::map<std::string, double> flops_per_token;  // model file → train FLOPs per token
    for (const Outcome& o : outcomes)
        if (o.mapping.model_config) {
            const fs::path path = fs::path(model_dir) / o.mapping.model_config->first;
            const fs::path tmp = path.string() + ".tmp" + std::to_string(getpid());
            {
                std::ofstream out(tmp, std::ios::binary);
                out << o.mapping.model_config->second.dump(2) << '\n';
                if (!out) fail_input("cannot write " + tmp.string());
            }
            fs::rename(tmp, path);
        }
    for (const Outcome& o : outcomes) {
        if (!o.mapping.model || std::find(written.begin(), written.end(), *o.mapping.model) != written.end()) continue;
        write_model(model_dir, *o.mapping.model);
        written.push_back(*o.mapping.model);
        if (o.mapping.metric->kind == MetricKind::model_tflops_per_gpu) {
            const std::string file = model_path(model_dir, *o.mapping.model);
            flops_per_token[file] = train_flops_per_token(file);
        }
    }

    for (const Outcome& o : outcomes)
        for (const auto& [name, json] : o.mapping.files) write_file(model_dir, name, json);
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
        for (std::size_t i = next++; i < outcomes.size(); i = next++) {
            Outcome& o = outcomes[i];
            if (!o.mapping.representable()) continue;
            const auto t0 = std::chrono::steady_clock::now();
            try {
                const auto f = o.mapping.model ? flops_per_token.find(model_path(model_dir, *o.mapping.model))
                                               : flops_per_token.end();
                run_one(o, f == flops_per_token.end() ? 0 : f->second);
            } catch (const std::exception& e) {  // a harness bug must not take the other rows down
                o.status = Status::failed;
                o.failure = std::string("harness: ") + e.what();
            }
            o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::max(1, jobs); ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    return outcomes;
}

std::vector<LayerCostFit> vtrain_layer_costs(const std::vector<Outcome>& outcomes) {
    constexpr int K = 4;   // t = a + L·d + n·b + n·L·c
    using Vec = std::array<double, K>;
    struct Point {
        Vec x;
        double measured, simulated;
    };
    std::map<std::tuple<int, int, int>, std::vector<Point>> groups;
    for (const Outcome& o : outcomes) {
        if (o.row.source != "vtrain" || o.status != Status::simulated || o.row.data.at("pp") != 1) continue;
        const Json& d = o.row.data;
        const double n = d.at("gbs").get<double>() / (d.at("mbs").get<double>() * d.at("dp").get<double>());
        const double layers = d.at("L").get<double>();
        groups[{d.at("h").get<int>(), d.at("tp").get<int>(), d.at("mbs").get<int>()}].push_back(
            {{1.0, layers, n, n * layers}, o.measured_step_s, o.simulated_step_s});
    }
    std::vector<LayerCostFit> out;
    for (const auto& [key, points] : groups) {
        if (points.size() < static_cast<std::size_t>(K)) continue;
        // The normal equations XᵀX β = Xᵀy, for the measured and the simulated times at once,
        // by Gaussian elimination with partial pivoting.
        std::array<std::array<double, K + 2>, K> m{};
        for (const Point& p : points)
            for (int i = 0; i < K; ++i) {
                for (int j = 0; j < K; ++j) m[i][j] += p.x[i] * p.x[j];
                m[i][K] += p.x[i] * p.measured;
                m[i][K + 1] += p.x[i] * p.simulated;
            }
        double scale = 0;
        for (int i = 0; i < K; ++i) scale = std::max(scale, std::abs(m[i][i]));
        bool singular = false;
        for (int c = 0; c < K && !singular; ++c) {
            int pivot = c;
            for (int r = c + 1; r < K; ++r)
                if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
            // Every row with the same n (or L): the costs cannot be told apart.
            if (!(std::abs(m[pivot][c]) > 1e-9 * scale)) singular = true;
            std::swap(m[c], m[pivot]);
            for (int r = 0; r < K && !singular; ++r) {
                if (r == c) continue;
                const double f = m[r][c] / m[c][c];
                for (int j = c; j < K + 2; ++j) m[r][j] -= f * m[c][j];
            }
        }
        if (singular) continue;
        Vec meas{}, sim{};
        for (int i = 0; i < K; ++i) {
            meas[i] = m[i][K] / m[i][i];
            sim[i] = m[i][K + 1] / m[i][i];
        }
        const auto [h, tp, mb] = key;
        out.push_back({h, tp, mb, points.size(), meas[0], meas[1], meas[2], meas[3], sim[0], sim[1], sim[2], sim[3]});
    }
    return out;
}

bool dispatch_calibration_row(const Row& r) {
    return r.source == "vtrain" && r.data.at("tp") == 1 && r.data.at("pp") == 1 && r.data.at("mbs") == 1 && r.data.at("h") == 1024;
}

std::vector<SourceSummary> summarize(const std::vector<Outcome>& outcomes) {
    std::vector<SourceSummary> out;
    std::map<std::string, std::vector<double>> errors;
    // vTrain's rows again without the 48 that calibrated megatron-deepspeed's dispatch.
    std::vector<Outcome> held_out;
    for (const Outcome& o : outcomes)
        if (o.row.source == "vtrain" && !dispatch_calibration_row(o.row)) {
            held_out.push_back(o);
            held_out.back().row.source = kVtrainHeldOut;
        }
    std::vector<const Outcome*> all;
    for (const Outcome& o : outcomes) all.push_back(&o);
    for (const Outcome& o : held_out) all.push_back(&o);
    for (const Outcome* op : all) {
        const Outcome& o = *op;
        auto it = std::find_if(out.begin(), out.end(), [&](const SourceSummary& s) { return s.source == o.row.source; });
        if (it == out.end()) {
            out.push_back({});
            out.back().source = o.row.source;
            it = out.end() - 1;
        }
        SourceSummary& s = *it;
        ++s.rows;
        if (o.status == Status::simulated) {
            ++s.simulated;
            if (!o.fits) ++s.not_fitting;
            errors[s.source].push_back(o.error);
            const std::string& c = o.mapping.metric->description;
            if (std::find(s.compared.begin(), s.compared.end(), c) == s.compared.end()) s.compared.push_back(c);
        } else if (o.status == Status::failed) {
            ++s.failed;
        } else {
            const std::string& feature = o.mapping.gaps.front().feature;
            auto g = std::find_if(s.gaps.begin(), s.gaps.end(), [&](const auto& p) { return p.first == feature; });
            if (g == s.gaps.end()) {
                s.gaps.push_back({feature, {}});
                g = s.gaps.end() - 1;
            }
            g->second.push_back(o.row.id);
        }
    }
    for (SourceSummary& s : out) {
        s.stats = error_stats(errors[s.source]);
        std::stable_sort(s.gaps.begin(), s.gaps.end(), [](const auto& a, const auto& b) {
            return std::find(kGapOrder.begin(), kGapOrder.end(), a.first) <
                   std::find(kGapOrder.begin(), kGapOrder.end(), b.first);
        });
    }
    return out;
}

}  // namespace smol::bench
