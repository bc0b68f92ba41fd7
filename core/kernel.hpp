// Kernels: what a compute op runs, one entry per launch, as a profiler would list them.
//
// A compute op of the op graph (the forward of a transformer layer for one micro-batch, an Adam
// step over a shard) refers to a *recipe*: the list of kernels the framework launches for it, in
// order, each at its own shape. The simulator prices every kernel on its own roofline (a GEMM by
// its shape's efficiency, a memory-bound pass by its bytes) and adds the launch cost per kernel;
// the executors run exactly these kernels (BLAS or cuBLAS GEMMs, softmax, streaming passes, a
// real Adam). So the simulated and the measured timelines describe the same work, and the
// per-class error of a validation (gemm, attention, elementwise, optimizer) compares like with like.
//
// Recipes are interned per graph (OpGraph::intern_recipe): the thousands of identical layer
// passes of a run share one, so an op stays a small value record.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace smol {

/// What a kernel reports to in a profile: the attention core (scores, softmax, context) is
/// `attention` whatever kernels implement it; norms, activations, residual adds, dropout, casts
/// and the loss are `elementwise`.
enum class KernelClass : std::uint8_t { gemm, attention, elementwise, optimizer };
inline constexpr int kKernelClasses = 4;

/// What a kernel computes, which decides how it is priced and executed.
enum class KernelOp : std::uint8_t {
    gemm,       // `batch` independent products C[m×n] = A[m×k]·B[k×n] (a batched GEMM when batch > 1)
    softmax,    // `batch` rows of `n` elements: max, exp, sum, scale (reads and writes each element)
    flash,      // fused attention (FlashAttention-2 or -3 or cuDNN's, `Kernel::backend`): `batch` heads of m
                // queries over n keys, head dim k; forward when `backward` is false
    stream,     // a memory-bound pass reading and writing `bytes` in total (norm, activation, residual,
                // dropout, bias add, cast, embedding gather, cross-entropy)
    adam,       // Adam over `elements` parameters: fp32 master weight, moments and gradient
};

/// Which part of the model a kernel is, for labels in traces and reports.
enum class KernelName : std::uint8_t {
    other, embedding, norm, qkv, scores, softmax, context, attn_proj, bias_dropout_residual, mlp_up, activation,
    mlp_down, logits,
    // The loss after the logits (the cross-entropy, the loss function's reduction): its forward
    // passes have no derivatives of their own, backward runs the function's own backward instead
    // (Block::loss_backward), so backward_kernels skips them.
    loss,
    optimizer, layer,
    // Gradient compression (strategies/compression.hpp): 1-bit SGD's worker compression, server
    // step and decompression; top-k's selection and scatter-add; PowerSGD's factor products and
    // orthogonalisation.
    onebit_compress, onebit_server, onebit_decompress, topk_compress, topk_decompress, powersgd,
    // Context parallelism's layout copies around an all-to-all (Transformer Engine's
    // flash_attn_a2a_communicate): a permutation, whose gradient is the same copy back.
    cp_permute,
    // Megatron's unfused scale-mask-softmax (FusedScaleMaskSoftmax.forward_torch_softmax): the
    // scores cast to fp32 and back, scaled by the layer number, masked. Each is linear in its
    // input, so its gradient is the same pass again.
    cast, scale, mask,
    // A parameter's gradient added to what earlier micro-batches left (PyTorch's AccumulateGrad,
    // Megatron's main_grad hook): strategies/data_parallel.hpp accumulation_kernel.
    grad_accumulate,
    // A tensor cast to FP8 for an FP8 GEMM (Transformer Engine's quantizers), with the amax
    // reduction of current scaling: quantize_kernels. Its input's gradient is the GEMM's, so it
    // has no backward of its own. Also ZeRO++'s int8 quantization of a parameter partition before
    // its gather (strategies/zero.cpp).
    quantize,
    // PowerSGD's Gram–Schmidt over a factor's columns (`elements` rows, `m` columns), which the
    // CPU executor runs for real (exec/cpu/compression.hpp); its other kernels are `powersgd`.
    powersgd_orthogonalize,
    // An MoE layer's router (its logits over the experts) and Qwen-MoE's shared-expert gate: weight
    // GEMMs that are not an MLP's projections, adapted by LoRA's `router` target alone.
    router,
    // ZeRO++ (strategies/zero.cpp build_zero3): qwZ's gathered int8 parameters back to the
    // training dtype; hpZ's copy of a rank's slice of a gathered parameter into its secondary
    // partition.
    dequantize, secondary_partition,
};

/// FP8 training as Transformer Engine runs it (Megatron core's --fp8-format hybrid with
/// --fp8-recipe): the linear layers' GEMMs take FP8 operands (E4M3 forward, E5M2 gradients),
/// everything else stays in the training dtype. `delayed` scales each tensor by an amax history
/// (TE's DelayedScaling: the cast computes the new amax as it goes); `tensorwise` by the tensor's
/// own amax (Float8CurrentScaling: an amax reduction pass before each cast).
enum class Fp8Recipe : std::uint8_t { none, delayed, tensorwise };
const char* to_string(Fp8Recipe r);

/// Whose cross-entropy the head runs (strategies/framework.hpp Framework::loss): Megatron's
/// vocab-parallel one (_VocabParallelCrossEntropy, in Megatron-LM, Megatron-DeepSpeed and the
/// Megatron models DeepSpeed's examples train); Megatron core's fused ones under
/// --cross-entropy-loss-fusion, `megatron_fused` its own (--cross-entropy-fusion-impl native:
/// core/fusions/fused_cross_entropy.py) and `te` Transformer Engine's Triton kernels
/// (--cross-entropy-fusion-impl te: transformer_engine/pytorch/triton/cross_entropy.py); or
/// PyTorch's F.cross_entropy on the fp32 logits (log_softmax and nll_loss: HuggingFace models,
/// torchtitan). core/transformer.cpp loss_forward_kernels lists each one's passes.
enum class LossKernels : std::uint8_t { megatron, megatron_fused, te, torch };

/// Which library's fused attention kernel runs (Megatron core's --attention-backend, whose
/// AttnBackend names the first two `flash` and `fused`): FlashAttention-2 (the flash-attn package,
/// also PyTorch SDPA's flash backend), cuDNN's fused attention (Transformer Engine's
/// FusedAttention, its F16_arbitrary_seqlen sub-backend), or FlashAttention-3 (flash-attn's
/// Hopper build, `flash_attn_interface`; what Transformer Engine's FlashAttention runs on sm90
/// when it is installed). Same work, same traffic; their rates differ
/// (topologies/attention_rates.hpp).
enum class AttentionBackend : std::uint8_t { flash, fused, flash3 };
const char* to_string(AttentionBackend b);
/// "flash" | "fused" | "flash3"; bad_input naming the flag `flag` otherwise.
AttentionBackend parse_attention_backend(const std::string& text, const std::string& flag);

/// A pass whose gradient is the same pass again (a permutation, a cast, a scaling, a mask):
/// backward_kernels prices it as the forward kernel, not as the generic two-input backward.
bool same_pass_gradient(KernelName name);

const char* to_string(KernelClass k);
const char* to_string(KernelOp k);
const char* to_string(KernelName k);

struct Kernel {
    KernelOp op = KernelOp::stream;
    KernelClass cls = KernelClass::elementwise;
    KernelName name = KernelName::other;
    bool backward = false;          // flash: the backward kernel (recomputes the scores)
    bool causal = false;            // flash: under a causal (or sliding-window) mask, whose skipped blocks `flops` leaves out
    AttentionBackend backend = AttentionBackend::flash;  // flash: whose kernel
    bool weight = false;            // gemm: B is a parameter (its gradient is a weight gradient)
    /// The framework's per-kernel host time (OpGraph::dispatch_overhead) precedes its launch; false
    /// for kernels autograd's C++ engine launches with no Python in between (AccumulateGrad).
    bool dispatched = true;
    /// gemm: FP8 operands (1 byte each) at the device's FP8 rate, the output in `elem_bytes`;
    /// backward_kernels quantizes the incoming gradient under the same recipe.
    Fp8Recipe fp8 = Fp8Recipe::none;
    std::uint8_t elem_bytes = 2;    // gemm / softmax / flash: bytes per element of the operands (fp8 gemm: of its output)
    /// gemm: a leading dimension is not a multiple of 16 bytes, so cuBLAS runs it on kernels of
    /// narrower alignment (align1). The leading dimensions of a forward C = A·B (row-major, as
    /// PyTorch stores them) are k and n — a linear layer's in and out features, an attention
    /// GEMM's head width or key length — never m (its tokens); its two backward GEMMs keep the
    /// forward's (backward_kernels), whatever their own m, n, k.
    bool unaligned = false;
    std::int32_t batch = 1;         // gemm / flash: independent problems; softmax: rows
    std::int64_t m = 0, n = 0, k = 0;
    std::int64_t elements = 0;      // adam: parameters stepped
    std::int64_t bytes = 0;         // bytes read + written (for a gemm: A, B and C once each)
    double flops = 0;               // floating-point operations, batch included

    bool operator==(const Kernel&) const = default;
};

/// C[m×n] = A[m×k]·B[k×n], `batch` times, elements of `elem_bytes`: 2·m·n·k FLOPs each; A, B read
/// and C written once. `weight`: B is a parameter matrix (a linear layer), not an activation.
Kernel gemm_kernel(KernelName name, KernelClass cls, std::int64_t m, std::int64_t n, std::int64_t k,
                   std::int64_t batch, int elem_bytes, bool weight);
/// The FP8 GEMM of a linear layer: C[m×n] = A[m×k]·B[k×n], `batch` times, A and B in FP8 (one
/// byte per element), C written in the training dtype (`out_bytes`); 2·m·n·k FLOPs each.
Kernel fp8_gemm_kernel(KernelName name, KernelClass cls, std::int64_t m, std::int64_t n, std::int64_t k,
                       std::int64_t batch, int out_bytes, bool weight, Fp8Recipe recipe);
/// Transformer Engine's cast of `elements` elements of `src_bytes` to FP8 (Float8Quantizer,
/// Float8CurrentScalingQuantizer in transformer_engine/pytorch/tensor/float8_tensor.py): one
/// kernel reading the tensor and writing its FP8 copy and, `transpose`, the transposed copy a
/// later GEMM needs (TE's cast-transpose: a weight gradient reads the input column-wise); under
/// tensorwise scaling an amax reduction reads the tensor first (its scale is then known before
/// the cast). Two kernels or one.
std::vector<Kernel> quantize_kernels(std::int64_t elements, int src_bytes, bool transpose, Fp8Recipe recipe);
/// Softmax over `rows` rows of `cols` elements: read and write each element (about 5 FLOPs each:
/// max, subtract, exp, sum, scale).
Kernel softmax_kernel(std::int64_t rows, std::int64_t cols, int elem_bytes);
/// Query-key pairs a causal attention computes over `q` queries when each sees at most `keys`
/// keys: Σᵢ min(i + 1, keys). FlashAttention-2 skips the key blocks the causal or window mask
/// excludes (Dao 2023 §3.1.1), so its work is these pairs, not q × keys.
double causal_pairs(std::int64_t q, std::int64_t keys);
/// FlashAttention-2 over `heads` (batch × heads per rank) of `q` queries, `kv` keys, head dim `d`:
/// forward 4·q·kv·d FLOPs per head (QKᵀ and PV), backward 10·q·kv·d (2.5× forward: the scores are
/// recomputed, then dV, dP, dQ, dK — Dao 2023 §3.1); `causal`: query i sees keys 0…i, and the
/// FLOPs count causal_pairs(q, kv) pairs instead of q·kv. Traffic: Q, K, V, O (and their
/// gradients in backward) once, never the q×kv scores.
Kernel flash_kernel(std::int64_t heads, std::int64_t q, std::int64_t kv, std::int64_t d, int elem_bytes, bool backward,
                    bool causal = false);
/// The key rows a fused attention kernel's backward tiles over (FlashAttention-2 parallelises its
/// backward over blocks of keys, one thread block each, Dao 2023 §3.2): its `kv` keys, except
/// under a sliding window (causal with fewer keys per query than queries, as flash_kernel is
/// given a windowed layer), where each query sees `kv` of the sequence's `q` keys and the key
/// blocks span all q of them.
std::int64_t flash_key_rows(const Kernel& k);
/// A memory-bound pass moving `bytes` (reads + writes) with `flops` arithmetic.
Kernel stream_kernel(KernelName name, KernelClass cls, std::int64_t bytes, double flops = 0);
/// Adam over `params` parameters moving `bytes_per_param` bytes each, 12 FLOPs each
/// (torch.optim.Adam's update: two moment updates, bias corrections, sqrt, divide, step).
Kernel adam_kernel(std::int64_t params, int bytes_per_param);

/// Which gradients a backward pass computes: all of them; only the input (data) gradients — what
/// a zero-bubble schedule's B pass runs, and all there is for frozen weights; or only the weight
/// gradients (the zero-bubble W pass).
enum class BackwardPart : std::uint8_t { all, input, weight };

/// The backward of a forward kernel list, in reverse order. A GEMM C = A·B becomes its data
/// gradient dA = dC·Bᵀ ((m×n)·(n×k)) and dB = Aᵀ·dC ((k×m)·(m×n)), a weight gradient when B is a
/// parameter and a data gradient when it is an activation (attention scores and context); a
/// softmax reads its output and the incoming gradient and writes one gradient (1.5× the forward's
/// traffic); flash runs its backward kernel; a memory-bound pass reads its saved input and the
/// incoming gradient and writes a gradient (2× the forward's traffic, as the fused backward
/// kernels of norms, activations and dropout do). An FP8 GEMM's gradients are FP8 GEMMs after
/// the incoming gradient's cast (quantize_kernels, with its transpose; once, in the pass that
/// computes input gradients); a cast to FP8 has no backward of its own.
std::vector<Kernel> backward_kernels(std::span<const Kernel> forward, BackwardPart part = BackwardPart::all);

/// Totals of a kernel list.
double total_flops(std::span<const Kernel> kernels);
std::int64_t total_bytes(std::span<const Kernel> kernels);

}  // namespace smol
