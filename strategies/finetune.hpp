// What a step trains (--finetune): every weight, or LoRA / QLoRA adapters on frozen weights.
//
// LoRA (Hu et al. 2021, §4): each targeted linear layer y = x·W keeps W frozen and learns a
// low-rank update, y = x·W + s·(x·A)·B with A: k×r and B: r×n — r·(k + n) trainable parameters per
// layer. The adapters go on the layers as Hugging Face's modules split them (PEFT wraps each
// nn.Linear): Llama's q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; GPT-2's fused
// c_attn, c_proj, c_fc, c_proj. Targets are named by the block's weight GEMMs (KernelName: qkv,
// attn_proj, mlp_up, mlp_down). Default: all four — every linear layer of a block, PEFT's
// target_modules="all-linear" and what QLoRA uses, because "LoRA on all linear transformer block
// layers is required to match full finetuning performance" (Dettmers et al. 2023 §4); PEFT's
// older q,v default trains a fused QKV GEMM only in part, which the kernel list does not split.
// In a mixture of experts every routed expert's projections are adapted apart (PEFT wraps each
// expert's nn.Linear: Mixtral's w1, w3, w2, Qwen-MoE's gate_proj, up_proj, down_proj): E times an
// expert's adapters a layer, each run on the tokens routed to its expert (grouped, as the experts'
// GEMMs are). The router stays frozen unless the `router` target is named (Megatron-Bridge's
// LoRATopKRouter; PEFT's "all-linear" wraps it too, ms-swift's leaves it out): r·(h + E) a layer,
// and r·(h + 1) for Qwen-MoE's shared-expert gate.
//
// Per adapted layer the forward adds x·A (tok×k by k×r), (x·A)·B (tok×r by r×n) and the scaled add
// into y (PEFT's `result + lora_B(lora_A(x)) * scaling`: read and write y for the scale, read two
// and write one for the add: 5·tok·n elements); x·A is kept for B's weight gradient (tok·r
// elements a layer). Backward runs the adapters' data and weight gradients and, for every frozen
// weight, its data gradient only (core/kernel.hpp BackwardPart::input): no weight gradient, no
// gradient buffer, no optimizer state. Activations are still kept through the frozen layers (the
// gradient flows through them to the adapters below). The embedding is frozen and first, so its
// backward is empty; norms and the head are frozen, their input gradients still computed.
//
// QLoRA (Dettmers et al. 2023 §3): the frozen linear weights of the blocks are stored in 4-bit
// NormalFloat with double quantisation — 4 bits plus 0.127 bits of quantisation constants a
// parameter (blocks of 64 with an 8-bit constant, second-level blocks of 256 with fp32:
// 8/64 + 32/(64·256)) — and dequantised to the compute dtype before every use (bitsandbytes
// functional.dequantize_4bit: read the 4-bit block and its constant, write the 16-bit weight; in
// backward again for the data gradient, autograd/_functions.py MatMul4Bit.backward). Embedding,
// head and norms stay 16-bit (the head is in llm_int8_skip_modules).
//
// Under tensor parallelism LoRA runs as PEFT's LoraParallelLinear on Megatron's parallel linears
// (peft/tuners/lora/tp_layer.py): a column-parallel linear's A is whole and its B split by
// outputs (a ColumnParallelLinear: its input gradient all-reduced in backward); a row-parallel
// linear's A is split by inputs (a RowParallelLinear: its rank-r output all-reduced in forward)
// and its B whole. A rank holds r·(k + n/tp) or r·(k/tp + n) of each adapter, and each layer
// adds those all-reduces of tok × r elements (Block::tp_adapter_fwd, tp_adapter_bwd).
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernel.hpp"
#include "core/model.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// The kernels of one block's passes as the step trains it.
struct BlockKernels {
    std::vector<Kernel> fwd, bwd, bwd_input, bwd_weight, recompute;
    /// An MoE layer's backward in the three parts of its forward (core/model.hpp MoePass), last
    /// part first: bwd[0, bwd_at[0]) is the backward of what runs after the combine,
    /// [bwd_at[0], bwd_at[1]) the experts', the rest that of what runs before the dispatch; the
    /// same for bwd_input. The block's MoePass indexes fwd.
    int bwd_at[2] = {0, 0};
    int bwd_input_at[2] = {0, 0};
};

struct Training {
    /// Per block (by index): its passes. Empty in full fine-tuning (the blocks' own kernels).
    std::vector<BlockKernels> kernels;
    /// Bytes of frozen weights over all blocks (0 in full fine-tuning), and per block (by index;
    /// empty in full fine-tuning): what FSDP gathers of a unit beside its adapters.
    Bytes frozen;
    std::vector<Bytes> frozen_by_block;
    std::int64_t frozen_params = 0;
    std::int64_t trainable_params = 0;
};

/// Bytes of frozen weights per parameter: the compute dtype for LoRA; 4-bit NF4 with double
/// quantisation, (4 + 0.127)/8, for QLoRA's block linear weights.
constexpr double kNf4BytesPerParam = (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;

/// Applies the layout's fine-tuning to `blocks` (one replica's, from replica_blocks): with LoRA or
/// QLoRA each block's `params` becomes its trainable (adapter) parameters and its activations
/// grow by the adapters' kept intermediates; the frozen weights are returned apart. An MoE
/// layer's MoePass then indexes the fine-tuned forward, and its expert_params are the local
/// experts' adapters. In full fine-tuning the blocks are left as they are.
Training apply_finetune(const Model& model, const Layout& layout, std::vector<Block>& blocks);

}  // namespace smol::strategies
