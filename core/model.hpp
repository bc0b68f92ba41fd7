// The model description: what a strategy needs to know about a network to lay it out on devices.
//
// A model is either a transformer (GPT-2 or Llama shape, generated from a handful of numbers) or
// a list of layers (CNN / MLP, with parameters, FLOPs and activation sizes given per sample).
// Both are turned into a list of Blocks for a given Workload (micro-batch, sequence length,
// tensor parallelism, recompute, dtype): the unit a strategy places on a device, in order.
//
// Sources for the arithmetic:
//  * FLOPs: every GEMM of m×k by k×n costs 2mnk; backward costs twice forward (Narayanan et al.
//    2021, §5.1). For a GPT layer that gives 24·b·s·h² + 4·b·s²·h forward.
//  * Activation bytes saved for backward: Korthikanti et al. 2022, Table 2 and §4, built from
//    its per-tensor terms (see model.cpp): s·b·h·(34 + 5·a·s/h) in 16-bit without parallelism.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/kernel.hpp"
#include "core/units.hpp"

namespace smol {

enum class DType { bf16, fp16, fp32 };
int dtype_bytes(DType d);
const char* to_string(DType d);
DType parse_dtype(const std::string& text, const ErrorContext& where);  // "bf16" | "fp16" | "fp32"

enum class Recompute { none, selective, full };
const char* to_string(Recompute r);
Recompute parse_recompute(const std::string& text, const ErrorContext& where);

/// A GPT-2 or Llama-style decoder-only transformer.
struct TransformerShape {
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int kv_heads = 0;         // = heads without grouped-query attention
    int ffn_hidden = 0;       // 4·hidden for GPT-2
    int vocab = 0;
    int max_seq = 0;
    bool tied_embeddings = true;    // GPT-2 ties the output layer to the token embedding
    bool gated_mlp = false;         // Llama's SwiGLU: three ffn matrices instead of two
    bool learned_positions = true;  // GPT-2: a max_seq × hidden position table; Llama: RoPE
    bool biases = true;             // GPT-2 has biases on every linear layer; Llama has none
    bool layer_norm = true;         // LayerNorm (weight + bias) vs RMSNorm (weight only)
};

/// One layer of a CNN or MLP, per sample (batch 1). Parameters and FLOPs are exact counts.
struct LayerSpec {
    std::string name;       // "conv1", "layer3.2.conv2", "fc"
    std::string kind;       // "conv", "fc", "pool", "norm", "act"
    std::int64_t params = 0;
    Flops fwd_flops;        // forward FLOPs for one sample
    Bytes activations;      // bytes saved for backward for one sample, in fp32
    Bytes output;           // output tensor bytes for one sample, in fp32
};

/// What one micro-batch asks of one block, on one tensor-parallel rank.
struct Block {
    enum class Kind { embedding, transformer, head, layer };
    Kind kind = Kind::layer;
    int index = 0;                 // position in the model, 0-based
    std::int64_t params = 0;       // parameters held by one tensor-parallel rank
    Flops fwd;                     // forward FLOPs
    Flops bwd;                     // backward FLOPs, without recompute (2× forward for GEMMs)
    Flops recompute;               // extra forward FLOPs redone during backward
    Bytes activations;             // saved for backward during the step
    Bytes output;                  // the output tensor (what a pipeline stage sends on)
    /// The kernels of one forward pass, in launch order (core/kernel.hpp); backward is derived
    /// from them (backward_kernels). `fwd` counts the FLOPs of their GEMM and attention kernels.
    std::vector<Kernel> fwd_kernels;
    /// What backward redoes first: nothing, the attention core (selective), or the whole forward (full).
    std::vector<Kernel> recompute_kernels;
    // Tensor-parallel communication per forward pass (backward has the same number):
    int tp_collectives_fwd = 0;    // all-reduces (or reduce-scatter + all-gather pairs with sp)
    Bytes tp_bytes_per_collective; // the full tensor each all-reduce covers: b·s·h elements
};

struct Workload {
    int micro_batch = 1;
    int seq = 0;            // 0: the model's max_seq (transformers); ignored for layer lists
    int tp = 1;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    DType dtype = DType::bf16;
};

class Model {
public:
    static Model transformer(std::string name, TransformerShape shape);
    static Model layer_list(std::string name, std::vector<LayerSpec> layers, int input_bytes_per_sample);

    const std::string& name() const { return name_; }
    bool is_transformer() const { return transformer_.has_value(); }
    const TransformerShape& shape() const;        // transformers only
    const std::vector<LayerSpec>& layers() const { return layers_; }
    /// Bytes of one input sample, in fp32 (layer lists; 0 for transformers, whose input is tokens).
    int input_bytes_per_sample() const { return input_bytes_per_sample_; }

    /// Total trainable parameters (tied embeddings counted once).
    std::int64_t parameters() const;
    /// Sequence length used when a workload leaves it at 0 (max_seq; 1 for layer lists).
    int default_seq() const;
    /// Blocks in model order: embedding, layers…, head for transformers; one per layer otherwise.
    /// Throws bad_input when tp does not divide heads, kv heads, ffn hidden or vocab.
    std::vector<Block> blocks(const Workload& w) const;
    /// Model FLOPs for one iteration of `global_batch` samples: 3× forward (4× with full
    /// recompute), as in Narayanan et al. 2021 eq. 3; selective recompute adds the attention core.
    Flops flops_per_iteration(std::int64_t global_batch, int seq, Recompute r) const;

private:
    std::string name_;
    std::optional<TransformerShape> transformer_;
    std::vector<LayerSpec> layers_;
    int input_bytes_per_sample_ = 0;
};

/// Preset names, sorted.
std::vector<std::string> model_preset_names();
/// A preset by name; unknown names are a bad_input error suggesting the nearest.
Model model_preset(const std::string& name);
/// Reads smolcluster's own JSON or a HuggingFace config.json (GPT-2 or Llama keys), told apart
/// by their keys.
Model model_from_json(const JsonView& json, const std::string& name);
/// `spec` is a preset name or a path to a JSON file.
Model load_model(const std::string& spec);

}  // namespace smol
