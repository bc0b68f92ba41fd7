// The model description: what a strategy needs to know about a network to lay it out on devices.
//
// A model is either a transformer (generated from the numbers of a config.json: GPT-2, Llama,
// mixtures of experts, DeepSeek's latent attention, T5's encoder–decoder) or a list of layers
// (CNN / MLP, with parameters, FLOPs and activation sizes given per sample). HuggingFace
// config.json files are read by core/hf_config.hpp, one reader per model_type.
// Both are turned into a list of Blocks for a given Workload (micro-batch, sequence length,
// tensor parallelism, recompute, dtype): the unit a strategy places on a device, in order.
//
// Sources for the arithmetic:
//  * FLOPs: every GEMM of m×k by k×n costs 2mnk; backward costs twice forward (Narayanan et al.
//    2021, §5.1). For a GPT layer that gives 24·b·s·h² + 4·b·s²·h forward.
//  * Activation bytes saved for backward: Korthikanti et al. 2022, Table 2 and §4, built from
//    its per-tensor terms (see model.cpp): s·b·h·(34 + 5·a·s/h) in 16-bit without parallelism
//    with eager attention; FlashAttention (Dao 2023) keeps no s² term, only its output and the
//    log-sum-exp per query and head.
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

/// What selective recompute drops in forward and redoes in backward: Megatron core's
/// --recompute-modules (megatron/core/transformer/transformer_config.py:560-585 at NVIDIA/
/// Megatron-LM d98e8a6; from core 0.12, 3b141a2471; shared_experts from core 0.14). Its default,
/// core_attn alone, is what --recompute selective has always meant.
///   core_attn        the attention core (normal checkpoint: attention.py:394)
///   mlp              a dense layer's MLP, its Transformer Engine pre-MLP norm included (normal
///                    checkpoint: transformer_layer.py:537-539; MoE layers are untouched)
///   moe_act          the experts' activation function: its output, the down projection's input,
///                    is discarded and recomputed (output-discarding: moe/experts.py:271)
///   layernorm        the norms that are modules of their own — under Transformer Engine's spec the
///                    MoE layers' pre-MLP norm and MLA's input norm; the others are fused into the
///                    linear layer after them (gpt_layer_specs.py:157, 259, 336; output-discarding:
///                    transformer_layer.py:475-530)
///   mla_up_proj      MLA's up projections and RoPE (output-discarding: multi_latent_attention.py:171, 983)
///   moe              an MoE layer after its norm: router, permutation, all-to-alls, experts (shared
///                    ones too), combine (normal checkpoint: moe/moe_layer.py:249)
///   shared_experts   an MoE layer's shared experts (normal checkpoint: moe/shared_experts.py:158)
enum class RecomputeModule : std::uint8_t {
    core_attn = 1, mlp = 2, moe_act = 4, layernorm = 8, mla_up_proj = 16, shared_experts = 32, moe = 64,
};
struct RecomputeModules {
    std::uint8_t bits = static_cast<std::uint8_t>(RecomputeModule::core_attn);
    bool has(RecomputeModule m) const { return (bits & static_cast<std::uint8_t>(m)) != 0; }
    bool operator==(const RecomputeModules&) const = default;
};
/// The modules of `m`, in Megatron's order.
std::vector<RecomputeModule> modules_in(RecomputeModules m);
/// "core_attn,moe_act" in Megatron's order.
std::string to_string(RecomputeModules m);
/// A comma-separated list of Megatron's module names (each once, at least one).
RecomputeModules parse_recompute_modules(const std::string& text, const ErrorContext& where);

/// How a transformer knows where a token is: a learned table (GPT-2, OPT), rotary embeddings
/// (Llama and most current models), ALiBi biases (BLOOM) or T5's bucketed relative bias.
enum class Positions : std::uint8_t { learned, rope, alibi, relative };
const char* to_string(Positions p);

/// Mixture of experts (Shazeer et al. 2017, GShard: Lepikhin et al. 2020): in an MoE layer a
/// router sends each token to `top_k` of `experts` feed-forward networks; `shared_experts` see
/// every token (DeepSeekMoE, Qwen-MoE). `experts` = 0: a dense model.
struct MoeShape {
    int experts = 0;                 // routed experts E
    int top_k = 0;                   // experts per token K
    int ffn_hidden = 0;              // each routed expert's ffn width
    int shared_experts = 0;          // experts every token goes through
    int shared_ffn_hidden = 0;       // the ffn width of one shared expert
    bool shared_expert_gate = false; // Qwen2-MoE: sigmoid(Linear(h → 1)) scales the shared experts
    bool router_bias = false;        // GPT-OSS's router has a bias
    bool expert_biases = false;      // GPT-OSS's experts have biases on both projections
    std::vector<int> dense_layers;   // layers (0-based, sorted) that keep the dense MLP
    bool operator==(const MoeShape&) const = default;
};

/// DeepSeek-V2/V3 multi-head latent attention (DeepSeek-AI 2024, §2.1): queries and keys/values
/// through low-rank bottlenecks; each query/key head is `head_dim` = nope + rope wide, of which
/// `rope_head_dim` carries RoPE and is shared by all heads for the keys. kv_lora_rank 0: not MLA.
struct MlaShape {
    int q_lora_rank = 0;             // 0: queries projected straight from the hidden state
    int kv_lora_rank = 0;
    int rope_head_dim = 0;
    bool operator==(const MlaShape&) const = default;
};

/// A decoder-only transformer (or, with `encoder_layers` > 0, T5's encoder–decoder), generated
/// from the numbers a config.json gives. Layer i < encoder_layers is an encoder layer; the
/// layers after it are decoder layers with cross-attention over the encoder's output.
struct TransformerShape {
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int kv_heads = 0;         // = heads without grouped-query attention
    int head_dim = 0;         // query/key width per head; 0: hidden / heads
    int v_head_dim = 0;       // value width per head; 0: head_dim
    int ffn_hidden = 0;       // the dense MLP's width (4·hidden for GPT-2)
    int vocab = 0;
    int max_seq = 0;          // positions the model knows (the learned table's rows)
    int train_seq = 0;        // the sequence a plan uses by default; 0: max_seq
    bool tied_embeddings = true;    // the output layer is the token embedding (GPT-2, Gemma, T5)
    bool gated_mlp = false;         // SwiGLU / GeGLU: three ffn matrices instead of two
    Positions positions = Positions::learned;
    int position_offset = 0;        // extra rows of the learned table (OPT: 2)
    bool qkv_bias = true;           // biases on the query, key and value projections
    bool attn_out_bias = true;      // bias on the attention output projection
    bool mlp_bias = true;           // biases on the MLP (or experts') projections
    bool layer_norm = true;         // LayerNorm (weight + bias) vs RMSNorm (weight only)
    int norms_per_layer = 2;        // Gemma 2: 4 (pre and post norms); Falcon-7B: 1 (shared by both branches)
    bool qk_norm = false;           // Qwen3: RMSNorm over each query and key head
    bool embedding_norm = false;    // BLOOM: a LayerNorm right after the token embedding
    bool final_norm = true;
    bool parallel_residual = false; // GPT-NeoX, Falcon: attention and MLP read the same input
    bool attention_sinks = false;   // GPT-OSS: one learned logit per head
    int sliding_window = 0;         // keys per query in sliding-window layers; 0: none
    std::vector<int> full_attention_layers;  // with a window: the layers (0-based) that attend to all
    int encoder_layers = 0;         // T5: the first encoder_layers layers are the encoder
    int relative_attention_buckets = 0;  // T5: a buckets × heads bias table in each stack's first layer
    MoeShape moe;
    MlaShape mla;

    int q_head_dim() const { return head_dim > 0 ? head_dim : hidden / heads; }
    int value_head_dim() const { return v_head_dim > 0 ? v_head_dim : q_head_dim(); }
    int default_seq() const { return train_seq > 0 ? train_seq : max_seq; }
    bool is_moe() const { return moe.experts > 0; }
    /// Layer i (0-based) routes its tokens to experts.
    bool moe_layer(int i) const;
    /// Keys per query that layer i attends to at sequence s (the window caps it).
    int attended_keys(int i, int s) const;
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

/// How attention runs (--attention): `eager` materialises the scores and the softmax (Megatron's
/// unfused path, HuggingFace's "eager"); `flash` is FlashAttention-2 (Dao 2023), which never writes
/// the s × s matrices, keeps its output and log-sum-exp, and recomputes the scores in backward.
enum class Attention : std::uint8_t { eager, flash };
const char* to_string(Attention a);
Attention parse_attention(const std::string& text, const ErrorContext& where);  // "eager" | "flash"
/// Whether eager attention's softmax runs as Megatron's fused kernel for `score_matrices`
/// (b · a/t) matrices of sq × sk scores of `elem_bytes` each, as FusedScaleMaskSoftmax
/// decides (core/transformer.cpp); otherwise PyTorch's unfused path runs.
bool megatron_fused_softmax(std::int64_t score_matrices, std::int64_t sq, std::int64_t sk, int elem_bytes, bool causal);

/// How context-parallel attention exchanges keys and values (--cp-comm), Transformer Engine's
/// cp_comm_type (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py):
/// `p2p` passes each rank's block round a ring under the attention steps (AttnFuncWithCPAndKVP2P);
/// `all_gather` all-gathers every rank's keys and values before attention and reduce-scatters
/// their gradients after it (AttnFuncWithCPAndKVAllGather; Llama 3's context parallelism,
/// Dubey et al. 2024 §3.3.2); `all_to_all` trades the sequence split for a head split by
/// all-to-alls of Q, K, V before attention and of its output after (AttnFuncWithCPAndQKVOA2A,
/// DeepSpeed-Ulysses, Jacobs et al. 2023).
enum class CpComm : std::uint8_t { p2p, all_gather, all_to_all };
const char* to_string(CpComm c);   // "p2p", "all-gather", "a2a" (Megatron's --cp-comm-type spells "allgather")
CpComm parse_cp_comm(const std::string& text, const ErrorContext& where);
/// --fp8: "delayed" or "tensorwise" (Megatron core's --fp8-recipe names; core/kernel.hpp Fp8Recipe).
Fp8Recipe parse_fp8_recipe(const std::string& text, const ErrorContext& where);

/// The expert part of an MoE layer on one rank, for a strategy that runs experts on other ranks
/// (strategies/moe.hpp). The block's forward kernels split in three: fwd_kernels[0, dispatch_at)
/// run before the dispatch all-to-all (attention, router, permutation, shared experts),
/// [dispatch_at, combine_at) are the local experts' GEMMs, the rest runs after the combine
/// all-to-all (un-permutation, weighted sum, residual).
struct MoePass {
    int dispatch_at = 0;
    int combine_at = 0;
    /// Selective recompute of moe (RecomputeModule): the same split points in recompute_kernels,
    /// its all-to-alls repeated between them; -1 where the recompute has no all-to-all.
    int recompute_dispatch_at = -1;
    int recompute_combine_at = -1;
    /// The token copies this rank routes, each all-to-all's buffer per rank: tokens on the rank
    /// (b·s, or b·s/t with sequence parallelism) × top-k × hidden × e (× the capacity factor
    /// with fixed capacity). An all-to-all over ep ranks sends (ep − 1)/ep of it.
    Bytes dispatch_bytes;
    /// With tp > 1: Megatron's dispatcher all-gathers the routed tokens over the tensor group after
    /// the dispatch and reduce-scatters them before the combine; the full gathered tensor.
    Bytes tp_gather_bytes;
    /// The collectives of the attention half on the tensor group (the layer's other tensor-parallel
    /// collectives are the gather and scatter above); the block's tp_collectives_fwd is 0.
    int attention_tp_collectives = 0;
    /// Parameters of this rank's experts: its E/ep routed experts (tensor-split with tp). Their
    /// gradients are reduced over the expert-data-parallel group, the rest over data parallelism.
    std::int64_t expert_params = 0;
    /// Of them, the weights its FP8 GEMMs read (--fp8; the experts' biases stay 16-bit): what
    /// --fp8-param-gather keeps in FP8.
    std::int64_t expert_fp8_params = 0;
    bool operator==(const MoePass&) const = default;
};

/// A transformer layer's attention under context parallelism (Workload::cp > 1), as Transformer
/// Engine's ring attention runs it (AttnFuncWithCPAndKVP2P): each of the cp ranks holds 1/cp of
/// the sequence; its queries meet every rank's keys and values in cp steps, one fused-attention
/// kernel per step, while the key-value block of the next step travels around the ring.
/// fwd_kernels[core_at, core_at + steps · per_step) are the steps' kernels, per_step each; the
/// rest of the layer runs before and after them as usual.
struct ContextPass {
    CpComm comm = CpComm::p2p;     // how the group exchanges keys and values (strategies/context_parallel.hpp)
    int core_at = 0;
    /// p2p: cp, the ring's steps; all_gather: 2, one per local chunk; all_to_all: 1, the reorders
    /// of Q, K and V after their all-to-alls, the head-split kernel, the output's reorder before its own.
    int steps = 0;
    int per_step = 1;              // kernels per step
    /// Selective recompute of core_attn: where core_at falls in recompute_kernels (the modules
    /// redone before the core precede it, those after follow its steps); -1: the core is not redone.
    int recompute_core_at = -1;
    /// One step's transfer in forward: K and V of one rank's chunk, b·(s/cp)·(kvh/t)·(hd + vd)·e.
    Bytes kv_bytes;
    Bytes k_bytes;                 // the keys' part of it (the all-gather variant gathers K and V apart)
    Bytes q_bytes, out_bytes;      // the rank's Q and attention output, b·(s/cp)·(a/t)·(hd or vd)·e
    /// Just past the core's steps when they start at kernel `at` (core_at, recompute_core_at).
    int core_end(int at) const { return at + steps * per_step; }
    bool operator==(const ContextPass&) const = default;
};

/// What one micro-batch asks of one block, on one tensor-parallel rank.
struct Block {
    enum class Kind { embedding, transformer, head, layer };
    Kind kind = Kind::layer;
    int index = 0;                 // position in the model, 0-based
    std::int64_t params = 0;       // parameters held by one tensor- (and expert-) parallel rank
    /// Model FLOPs (Narayanan et al. 2021: 2mnk per GEMM, attention scores over every key of the
    /// window, no saving from the causal mask); the kernels below are what runs.
    Flops fwd;                     // forward FLOPs
    Flops bwd;                     // backward FLOPs, without recompute (2× forward for GEMMs)
    Flops recompute;               // extra forward FLOPs redone during backward
    Bytes activations;             // saved for backward during the step
    Bytes output;                  // the output tensor (what a pipeline stage sends on)
    /// Backward only: a tied table's two gradients (the lookup's and the output layer's) meet
    /// here and are summed (autograd's InputBuffer, or Megatron core's main_grad hook for the
    /// lookup's), one pass reading both and writing the sum; set on the embedding block when one
    /// replica holds both uses (strategies/data_parallel.cpp replica_blocks).
    std::optional<Kernel> tied_grad_sum;
    /// Backward only, first: the loss's own backward (the head's; core/transformer.cpp
    /// loss_backward_kernels), in place of derivatives of its forward passes (KernelName::loss).
    std::vector<Kernel> loss_backward;
    /// Parameters of the block's FP8 linear layers on this rank: Transformer Engine casts each
    /// weight to FP8 with its transpose at a step's first micro-batch (its weight workspace, kept
    /// until the step's end: 2 bytes per parameter). The sum of k·n·batch over fwd_kernels'
    /// FP8 weight GEMMs (core/transformer.cpp); the cast's kernels are quantize_kernels
    /// (core/kernel.hpp), interned by strategies/data_parallel.hpp intern_fp8_weight_recipes.
    std::int64_t fp8_params = 0;
    /// The kernels of one forward pass, in launch order (core/kernel.hpp); backward is derived
    /// from them (backward_kernels).
    std::vector<Kernel> fwd_kernels;
    /// What backward redoes first: nothing, the selected modules' kernels in forward order
    /// (selective: the attention core by default), or the whole forward (full).
    std::vector<Kernel> recompute_kernels;
    /// Tensor-parallel collectives the recompute redoes (as tp_collectives_fwd counts them): all of
    /// them under full recompute, the MLP's under selective recompute of mlp.
    int tp_collectives_recompute = 0;
    // Tensor-parallel communication per forward pass (backward has the same number):
    int tp_collectives_fwd = 0;    // all-reduces (or reduce-scatter + all-gather pairs with sp)
    Bytes tp_bytes_per_collective; // the full tensor each all-reduce covers: b·s·h elements
    /// LoRA adapters under tensor parallelism (strategies/finetune.hpp): all-reduces of the
    /// rank-r activations, those of row-parallel layers' A in the forward (and its recompute),
    /// those of column-parallel layers' B input gradients in the backward.
    int tp_adapter_fwd = 0, tp_adapter_bwd = 0;
    Bytes tp_adapter_bytes;
    /// Set on the MoE layers of a mixture of experts (strategies/moe.hpp runs them).
    std::optional<MoePass> moe;
    /// Set on the layers of a context-parallel workload (strategies/context_parallel.hpp runs them).
    std::optional<ContextPass> cp;
};

/// A block's backward for one micro-batch: the loss's own backward (the head's), the
/// derivatives of its forward kernels (backward_kernels), and the tied table's gradient sum;
/// `part` as in backward_kernels (the loss's backward with the input gradients, the sum with
/// the weights').
std::vector<Kernel> block_backward(const Block& b, BackwardPart part = BackwardPart::all);

struct Workload {
    int micro_batch = 1;
    int seq = 0;            // 0: the model's default (transformers); ignored for layer lists
    int tp = 1;
    /// Context parallelism: the sequence is split over cp ranks (Megatron's --context-parallel-size);
    /// every block is then one rank's 1/cp of the tokens, and attention runs as a ring (ContextPass).
    int cp = 1;
    CpComm cp_comm = CpComm::p2p;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    RecomputeModules recompute_modules;   // what selective recompute redoes
    DType dtype = DType::bf16;
    Attention attention = Attention::eager;
    /// Whose kernel runs flash attention (Megatron core's --attention-backend; strategies/plan.cpp
    /// picks the framework's default).
    AttentionBackend attention_backend = AttentionBackend::flash;
    /// Megatron's apply_query_key_layer_scaling: eager attention's unfused softmax path scales the
    /// scores by the layer number, one more pass (Framework::qk_layer_scaling).
    bool qk_layer_scaling = false;
    LossKernels loss = LossKernels::megatron;
    /// The vocabulary is padded to a multiple of vocab_multiple × tp, so the vocab-parallel
    /// embedding and head split evenly: Megatron's --make-vocab-size-divisible-by (128;
    /// Framework::vocab_multiple); 1 pads to a multiple of tp alone.
    int vocab_multiple = 1;
    /// FP8 linear layers (Transformer Engine): their GEMMs in FP8, each input cast first, and the
    /// inputs they keep for backward kept in FP8 (core/transformer.cpp).
    Fp8Recipe fp8 = Fp8Recipe::none;
    /// With fp8, the first and the last this many transformer layers stay in the 16-bit dtype
    /// (Megatron core's --first-last-layers-bf16 with --num-layers-at-start-in-bf16 and
    /// --num-layers-at-end-in-bf16; megatron/core/fp8_utils.py is_first_last_bf16_layer).
    int fp8_bf16_first = 0, fp8_bf16_last = 0;
    /// With Recompute::full, whether each transformer layer recomputes (Megatron's
    /// --recompute-method block: the first N layers of each pipeline chunk); the others keep their
    /// activations. Empty: every layer.
    std::vector<bool> recomputed_layers;
    int ep = 1;                    // expert parallelism: each rank holds experts / ep routed experts
    /// Tokens the busiest expert receives over the mean (≥ 1; 1: balanced routing). Every rank
    /// waits for the busiest at the combine all-to-all, so each rank's experts are priced (and
    /// hold activations) for imbalance × their balanced share.
    double expert_imbalance = 1;
    /// GShard's expert capacity (Lepikhin et al. 2020 §2.2): each expert takes at most
    /// capacity_factor × its balanced share, padded to it (Megatron's --moe-expert-capacity-factor
    /// with --moe-pad-expert-input-to-capacity); 0: dropless (Megatron's default).
    double capacity_factor = 0;
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
    /// Parameters one token goes through: without the routed experts it is not sent to (equal to
    /// parameters() for dense models).
    std::int64_t active_parameters() const;
    /// The token embedding table on one of `tp` ranks, padded as Workload::vocab_multiple pads
    /// it (what a pipeline's last stage copies when the head is tied to it).
    std::int64_t tied_table_params(int tp, int vocab_multiple) const;
    /// Sequence length used when a workload leaves it at 0 (the training length; 1 for layer lists).
    int default_seq() const;
    /// Why default_seq() is what it is, for the summary ("max_position_embeddings 131072 is a
    /// long-context extension; …"); empty when it is simply the model's length.
    const std::string& seq_note() const { return seq_note_; }
    /// Things a reader accepted but wants the user to know (keys it does not model); the command
    /// line prints them on stderr. Library code never prints.
    const std::vector<std::string>& warnings() const { return warnings_; }
    /// The same model with a sequence note and reader warnings attached.
    Model with_notes(std::string seq_note, std::vector<std::string> warnings) &&;
    /// Blocks in model order: embedding, layers…, head for transformers; one per layer otherwise.
    /// Throws bad_input when tp does not divide heads, kv heads, ffn hidden or vocab.
    std::vector<Block> blocks(const Workload& w) const;
    /// Model FLOPs for one iteration of `global_batch` samples: 3× forward (4× with full
    /// recompute), as in Narayanan et al. 2021 eq. 3; selective recompute adds the attention core.
    Flops flops_per_iteration(std::int64_t global_batch, int seq, Recompute r, RecomputeModules modules = {}) const;

private:
    std::string name_;
    std::optional<TransformerShape> transformer_;
    std::vector<LayerSpec> layers_;
    int input_bytes_per_sample_ = 0;
    std::string seq_note_;
    std::vector<std::string> warnings_;
};

/// `vocab` rounded up to a multiple of vocab_multiple × tp: the rows of the vocab-parallel
/// embedding and head as Megatron pads them (NVIDIA/Megatron-LM d98e8a6
/// megatron/core/tokenizers/utils/build_tokenizer.py:133-146 vocab_size_with_padding:
/// `multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size`).
std::int64_t padded_vocab(std::int64_t vocab, int tp, int vocab_multiple);

/// Preset names, sorted.
std::vector<std::string> model_preset_names();
/// A preset by name; unknown names are a bad_input error suggesting the nearest.
Model model_preset(const std::string& name);
/// Reads smolcluster's own JSON (it has "kind") or a HuggingFace config.json (read by its
/// model_type, core/hf_config.hpp).
Model model_from_json(const JsonView& json, const std::string& name);
/// `spec` is a preset name or a path to a JSON file.
Model load_model(const std::string& spec);

}  // namespace smol
