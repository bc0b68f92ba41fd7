// The summary of a step: the contract's --json keys (README.md, "--json") and the human table.
//
// Definitions (per rank; the step-level figure is the worst rank unless said otherwise):
//   busy        — time the rank's compute ops run (compute ops on a stream never overlap)
//   comm        — time covered by the rank's collectives (from arrival, so waiting for a slow
//                 peer counts, as a profiler shows it) and its sends and receives (from the
//                 rendezvous: waiting for a pipeline neighbour is bubble)
//   exposed     — comm time during which no compute op runs
//   bubble      — time with neither compute nor comm, as a fraction of the step (mean over ranks)
//   mfu         — model FLOPs / (step time × Σ peak FLOP/s of the devices) (Narayanan et al. 2021)
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"

namespace smol::traces {

/// What the summary needs to know about the plan; filled by the caller.
struct StepInfo {
    /// The data-parallel flavour, or "none" where the plan has none (dp = 1 for the replicated
    /// and sharded flavours: a tensor / pipeline plan on one replica is not DDP).
    std::string model, cluster, strategy, network;
    std::string framework;              // "megatron@0.19": whose behaviour the graph follows
    int devices = 1, tp = 1, pp = 1, dp = 1, microbatches = 1, micro_batch = 1;
    int cp = 1;                         // context-parallel ranks (each dp replica is tp · cp · pp ranks)
    std::string cp_comm = "p2p";         // how their attention exchanges keys and values: p2p or all-gather
    std::int64_t global_batch = 1;
    int seq = 1;
    /// Where a default sequence length came from ("max_position_embeddings 131072 is a long-context
    /// extension; …"); empty when it is the model's own length or --seq gave it.
    std::string seq_note;
    int ep = 1;                         // expert-parallel ranks (mixtures of experts)
    std::string attention;              // "flash" or "eager"
    std::string attention_backend;      // flash attention's kernel: "flash" (FlashAttention-2), "fused" (cuDNN) or "flash3"; "" for eager
    bool sequence = true;               // false for layer lists (CNN / MLP): no seq, no tokens/s
    bool async_updates = false;         // ps-async: the step is `microbatches` rounds of updates per worker
    std::string dtype;
    std::string fp8 = "none";           // --fp8: "none", "delayed", "tensorwise"
    int fp8_bf16_first = 0, fp8_bf16_last = 0;   // --first-last-layers-bf16's layers, kept in 16 bits
    bool fp8_param_gather = false;               // --fp8-param-gather
    std::string cross_entropy_fusion = "none";   // --cross-entropy-fusion: "none", "native", "te"
    /// Rows of the vocab-parallel embedding and head, padded (Megatron's --make-vocab-size-divisible-by);
    /// 0 for layer lists.
    std::int64_t padded_vocab = 0;
    std::string compression = "none";   // --compress: "none", "1bit", "topk:0.01"
    std::string finetune = "full";      // --finetune: "full", "lora:16", "qlora:64:qkv,mlp_up"
    std::string optimizer = "adam";     // --optimizer: "adam", "adamw-8bit", "sgd", "lamb"
    Flops model_flops;                  // per iteration
    std::vector<FlopRate> peak;         // per rank, in the plan's dtype
    bool folded = false;                // data-parallel replicas simulated as one
    bool folded_tp = false;             // and each stage's tensor ranks (analytic network)
    int fold_width = 1;                 // replicas kept when folded (a node's: the first, or each stage's first)
    /// What the run assumed beyond the plan, for people: slow devices and jitter (and
    /// that they keep replicas unfolded), Hogwild! updates. In to_json as "notes" when not empty.
    std::vector<std::string> notes;
    /// The timeline was measured by running the plan (smolcluster run), not simulated: the
    /// table says "executed" where it says "simulated"; the JSON keys are the same.
    bool measured = false;
};

struct DeviceSummary {
    int rank = 0;
    std::string device;
    Bytes peak_memory;                  // device tier
    Time busy, comm, exposed_comm;
};

/// One pipeline stage (ranks with the same stage index in the Megatron layout).
struct StageSummary {
    int stage = 0;
    Bytes peak_memory;                  // the largest device-tier peak over the stage's ranks
};

/// A change to the plan that fits, checked by simulating it (tools/fit_advice.hpp fills these).
struct FitOption {
    std::string change;        // the flags that change: "--strategy zero3 --offload-optimizer cpu"
    Bytes peak;                // the changed plan's device peak
    Bytes capacity;
    Time step;                 // its step time
    double slowdown = 0;       // its step time / the failing plan's, both simulated the same way
};

/// The out-of-memory answer: the buffer that did not fit named by what it holds, the device's
/// memory at its peak by what it holds, and the cheapest changes that fit.
struct OomReport {
    std::string buffer;        // "optimizer state", "activations of layer 3, micro-batch 0", "the runtime's own memory"
    std::string label;         // its BufferLabel ("optimizer_state"; "runtime")
    int layer = -1, microbatch = -1;
    MemoryBreakdown peak;      // the OOM rank's tier at its peak
    Bytes capacity;
    std::vector<FitOption> fits;
    std::string fits_network;  // how the options and the baseline were simulated ("analytic")
    std::string fits_skipped;  // why no change was searched (empty: searched)
};

struct Summary {
    StepInfo info;
    Time iteration;
    double samples_per_s = 0, tokens_per_s = 0, tflops_per_device = 0, mfu = 0;
    Bytes peak_memory;                  // the largest device-tier peak over ranks
    std::optional<OutOfMemory> oom;
    std::optional<OomReport> oom_report;    // with oom: what it means (summarize) and what would fit (the caller)
    /// The rank with the largest device peak: its device and host at their peaks, by what they hold.
    int peak_rank = 0;
    MemoryBreakdown peak_device, peak_host, peak_nvme;
    Time exposed_comm, total_comm;      // worst rank
    double bubble_fraction = 0;
    std::vector<DeviceSummary> per_device;
    std::vector<StageSummary> per_stage;   // pp > 1 only
    std::uint64_t events = 0;
    double sim_wall_s = 0;
    /// ps-async only: mean staleness of the updates (strategies::mean_staleness); in to_json
    /// as "mean_staleness" when set.
    std::optional<double> mean_staleness;
    /// ps-async only: updates per second, each worker at its own pace, summed
    /// (strategies::update_rate); in to_json as "update_rate_per_s" when set.
    std::optional<double> update_rate;

    bool fits() const { return !oom.has_value(); }
};

Summary summarize(const OpGraph& graph, const Timeline& timeline, const StepInfo& info);
/// "optimizer state 24.1 GiB · parameters 4.02 GiB · … · runtime 1.36 GiB (CUDA context 1.31 GiB, NCCL
/// 20.0 MiB, allocator rounding 30.7 MiB)": a tier's contents, largest first, in powers of 1024
/// (to_string_binary), as every memory figure smolcluster prints.
std::string describe_breakdown(const MemoryBreakdown& m);
/// The breakdown as JSON: {"parameters": bytes, …, "cuda_context": bytes, "nccl": …, "allocator": …}.
Json breakdown_json(const MemoryBreakdown& m);
/// The contract's keys; a layer list's seq and tokens_per_s are null (it has no tokens).
Json to_json(const Summary& s);
/// The human table. Ranks with identical figures share one row ("0-15  16 devices"); when there
/// are more rows than fit, the slowest rank and the one with the most memory are still shown.
void print_table(std::ostream& out, const Summary& s);

}  // namespace smol::traces
