// Plan search: every valid plan of a model on a cluster, simulated and ranked.
//
//  1. Enumerate. The plan dimensions of strategies/plan.hpp are a table (sweep.cpp, kDimensions):
//     each row expands a partial plan into its values for that dimension, in order strategy, tp,
//     cp (only the values --cp lists), pp, partition (only where the pipeline's stages sit on different device kinds: balanced by
//     FLOPs, or by speed, tools/pipeline_split.hpp), micro-batch, schedule, virtual stages,
//     recompute, sp; then, for each resolved pipeline over mixed stages, the same plan on the
//     other device orders (device_orders), right after it. After every row each partial plan
//     is checked by strategies::resolve itself (later dimensions at their defaults, which are
//     always valid), so an impossible choice is pruned once, with resolve's own message, before
//     its later dimensions multiply it.
//     Offload (--offload) is tried only where a plan cannot fit without it: a resolved plan
//     of a strategy that can offload (ZeRO 1-3, FSDP) whose memory bound exceeds what the
//     devices allow is followed by its offload choices (fit_advice.hpp offload_choices, the
//     tiers --offload lists). Offload only adds copies and host steps to the same plan, so where
//     the plan fits without it, the variant cannot be faster, and it is never listed.
//  2. Bound memory. A lower bound on the device memory a plan's busiest device needs (model
//     states and one chunk of activations, both alive at the first backward; see
//     memory_lower_bound) prunes plans that cannot fit before any simulation. It never exceeds
//     the simulated peak (tested on every simulated plan).
//  3. Simulate the rest on `jobs` threads, each with its own Topology (its route cache is not
//     shared). Results go to the plan's slot, so they are the same for any number of threads.
//  4. With the analytic network, the best `refine` plans are simulated again flow-level and
//     ranked first by their flow-level figures.
//
// Plans are numbered in enumeration order; `shard_index` / `shard_count` simulate the plans whose
// number is shard_index modulo shard_count, so workers can split one sweep by index and the
// results be gathered by number (merge_shards in one process; export_plans / import_plans
// between the processes of `mpirun smolcluster sweep`, tools/cmd_sweep.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

namespace smol::tools {

enum class Objective { time, tokens, memory };
const char* to_string(Objective o);
Objective parse_objective(const std::string& text);   // bad_input names --objective

/// Restrictions of the search space; an empty list means every value the dimension generates.
struct SearchSpace {
    std::vector<strategies::DataParallel> strategies;   // empty: ddp, ring, zero1, zero2, zero3, fsdp
    std::vector<int> tp, pp, micro_batch;
    std::vector<int> cp;                                // empty: 1 (context parallelism only when asked)
    std::vector<CpComm> cp_comm;                        // with cp > 1; empty: p2p
    std::vector<int> ep;                                // empty: for a mixture of experts every power of two dividing dp and the experts, else 1
    /// FSDP's sharding; empty: full, and hybrid (a node a shard group) on clusters of several nodes.
    std::vector<strategies::FsdpSharding> fsdp_sharding;
    /// Where states may go for plans that cannot fit without (cpu, nvme; none: nowhere); empty: cpu.
    std::vector<strategies::Offload> offload;
    /// Gradient compressions to try (--compress none,powersgd:4,…); empty: none. The strategies
    /// that do not compress are pruned by resolve where one is asked.
    std::vector<strategies::Compression> compress;
    /// --zeropp: zero3 plans on several GPU nodes also try ZeRO++ — hpZ over a node, and hpZ with
    /// qwZ and qgZ (whose quantization changes the numbers, so only when asked).
    bool zeropp = false;
    /// --mics: zero3 plans on several GPU nodes also try MiCS over a node (its shard groups).
    bool mics = false;
    /// --recompute-modules: on Megatron core (0.12 on), selective recompute also of the module
    /// sets strategies::recompute_module_tiers gives for the model.
    bool recompute_modules = false;
};

struct SweepOptions {
    std::int64_t global_batch = 0;      // required (> 0)
    int seq = 0;                        // 0: the model's
    std::optional<DType> dtype;         // unset: the device's default
    /// --fp8: every plan's linear layers in FP8 (Transformer Engine), each plan then on Megatron
    /// core, the framework that runs them; none: 16-bit plans.
    Fp8Recipe fp8 = Fp8Recipe::none;
    /// --cross-entropy-fusion: every plan's loss as Megatron core's fused cross-entropy, each plan
    /// then on Megatron core; none: the framework's unfused loss.
    strategies::CrossEntropyFusion cross_entropy_fusion = strategies::CrossEntropyFusion::none;
    /// --attention: every plan's attention (flash or eager); unset: the devices' default (flash on
    /// GPUs from Ampere on, eager elsewhere).
    std::optional<Attention> attention;
    /// --attention-backend: every plan's flash attention kernel; unset: each plan's framework's.
    std::optional<AttentionBackend> attention_backend;
    /// --finetune and --optimizer: what every plan trains, and with which optimizer.
    strategies::FineTune finetune;
    strategies::Optimizer optimizer = strategies::Optimizer::adam;
    bool fold = true;
    sim::NetworkMode network = sim::NetworkMode::flow;
    sim::CollectiveAlgo algo = sim::CollectiveAlgo::automatic;
    Objective objective = Objective::time;
    std::optional<Bytes> max_memory;    // peak device memory allowed per device
    std::optional<double> min_headroom; // fraction of each device's memory left free at the peak
    std::optional<Time> dispatch;       // --dispatch-overhead: every plan's framework dispatch per kernel
    /// --framework and --overlap-grad-reduce: the frameworks every plan is tried on (the
    /// strategies one does not run are pruned naming --framework); empty: each plan's default.
    std::vector<std::string> frameworks;
    bool overlap_grad_reduce = false;
    /// --overlap-param-gather: every zero1 plan on Megatron core (its distributed optimizer, more
    /// than one data-parallel rank, no experts) gathers its parameters under the forward.
    bool overlap_param_gather = false;
    /// --tp-comm-overlap: every plan with sequence parallelism on Megatron core 0.4 or later runs
    /// its tensor-parallel collectives through Transformer Engine's userbuffers, where the graph
    /// models them (not with --cp or experts).
    bool tp_comm_overlap = false;
    /// --fp8-param-gather: with --fp8, every zero1 or Megatron-FSDP plan on Megatron core 0.9 or
    /// later keeps its FP8 weights in FP8 and gathers them so (not with context parallelism under
    /// Megatron-FSDP, or the optimizer offloaded).
    bool fp8_param_gather = false;
    /// --make-vocab-size-divisible-by: every plan on Megatron or Megatron-DeepSpeed pads the
    /// vocabulary to a multiple of this × tp; plans on PyTorch and DeepSpeed train the model's
    /// vocabulary. Unset: each framework's.
    std::optional<int> vocab_multiple;
    int jobs = 1;
    int refine = 10;                    // analytic network: the best N re-simulated flow-level
    SearchSpace space;
    int shard_index = 0, shard_count = 1;
    /// Called from the calling thread while plans are simulated: plans done, plans to simulate.
    std::function<void(std::size_t done, std::size_t total)> progress;
};

enum class PlanStatus {
    pending,       // not simulated (another shard's)
    pruned,        // impossible (strategies::resolve) or above the memory bound: never simulated
    ranked,        // simulated, fits and within --max-memory / --min-headroom
    out_of_memory, // simulated, an allocation did not fit
    over_limit,    // simulated, fits the devices but not --max-memory / --min-headroom
    failed,        // the simulation raised an error (deadlock, internal)
};
const char* to_string(PlanStatus s);

/// What a sweep keeps of one simulation.
struct Outcome {
    sim::NetworkMode network = sim::NetworkMode::flow;
    Time iteration;
    double samples_per_s = 0, tokens_per_s = 0, mfu = 0, bubble_fraction = 0;
    Bytes peak_memory;
    double min_headroom = 0;            // min over devices of 1 − peak / capacity
    Time exposed_comm;
    bool fits = true;
    std::string oom;                    // "node0/gpu3 needs 2 GB more device memory with 1 GB free"
    std::uint64_t events = 0;
};

/// An order of a mixed cluster's node groups, which sets the devices each pipeline stage gets
/// (ranks are numbered group by group): the order given, and the orders that put the group with
/// the most device memory first and last, where they differ.
struct DeviceOrder {
    std::string name;                   // "as given", "memory first", "memory last"
    topo::Cluster cluster;              // the groups in that order
};
/// The orders a sweep tries on `cluster`: only "as given" unless its groups have different device kinds.
std::vector<DeviceOrder> device_orders(const topo::Cluster& cluster);

struct PlanResult {
    std::size_t index = 0;
    strategies::Plan plan;
    int order = 0;                      // index into SweepResult::orders: the devices' order
    strategies::Layout layout;          // set unless pruned by resolve
    PlanStatus status = PlanStatus::pending;
    std::string reason;                 // pruned / over_limit / failed / out_of_memory: why
    std::string reason_key;             // pruned: the flag resolve named ("--tp"), "model", or "memory bound"
    Bytes memory_bound;                 // memory_lower_bound (0 when pruned by resolve)
    std::optional<Outcome> screen;      // the analytic screen, when refined flow-level
    std::optional<Outcome> result;      // the figures the plan is ranked by
};

struct SweepResult {
    std::vector<DeviceOrder> orders;     // device_orders of the cluster; plans of pipelines over mixed stages try each
    std::vector<PlanResult> plans;       // enumeration order, pruned ones included
    std::vector<std::size_t> ranking;    // indices into plans of the ranked ones, best first
    std::size_t refined = 0;             // plans re-simulated flow-level
    std::size_t count(PlanStatus s) const;
    /// Pruned plans by reason key, with the first message seen for each.
    std::map<std::string, std::pair<std::size_t, std::string>> pruned_by_reason() const;
};

/// "ddp tp 2 pp 4 1f1b mb 2 recompute none" — what a table row or a CSV cell shows.
std::string describe_plan(const PlanResult& p);
/// The `simulate` flags of a plan's offload ("--offload-optimizer cpu"); empty without offload.
std::string offload_flags(const strategies::Plan& plan);
/// "--zero-quantized-weights --zero-hpz-partition-size 8 --zero-quantized-gradients", or "".
std::string zeropp_flags(const strategies::Plan& plan);

/// A lower bound on the device-tier bytes of the busiest device of a resolved plan: the model
/// states every strategy allocates for the whole step (Rajbhandari et al. 2020: 16Ψ for DDP,
/// 4Ψ + 12Ψ/N for ZeRO-1, 2Ψ + 14Ψ/N for ZeRO-2, 16Ψ/N for ZeRO-3 and FSDP full sharding; with
/// tp·pp, Ψ is a pipeline's parameters per tensor rank over pp devices) plus the activations of one
/// (chunk, micro-batch), which are all alive when the chunk's first backward starts. Averages over
/// devices stand in for the busiest one, so the bound can only be low. States a plan offloads
/// (its optimizer state and gradients, or its parameters too) are left out of it. The optimizer's
/// 12 bytes are --optimizer's own (with fp32 master weights in 16-bit training); with LoRA or
/// QLoRA Ψ is the adapters, and the frozen weights are added whole (sharded under FSDP).
Bytes memory_lower_bound(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                         const strategies::Layout& layout);

SweepResult sweep(const Model& model, const topo::Cluster& cluster, const SweepOptions& options);

/// With the analytic network and options.refine > 0: the best options.refine ranked plans of
/// `result`, simulated again flow-level (their analytic figures kept as `screen`). A shard
/// re-simulates the ones at positions shard_index, shard_index + shard_count, … of that list taken
/// in enumeration order; every shard sets `refined` to the whole list's size. Returns the plans
/// this shard re-simulated. sweep() calls it itself when shard_count is 1.
/// Each plan runs on its device order's cluster (result.orders).
std::vector<std::size_t> refine(const Model& model, SweepResult& result, const SweepOptions& options);

/// The ranked plans of `plans`, best first: those simulated flow-level by refine before the
/// analytic rest, each part by the objective, ties in enumeration order.
std::vector<std::size_t> ranking(const std::vector<PlanResult>& plans, Objective objective);

/// The plans a shard simulates: its indices (index % shard_count == shard_index) not pruned.
std::vector<std::size_t> shard_plans(const SweepResult& result, const SweepOptions& options);

/// What another process needs to take the plans `which` of `result` over: each one's index,
/// status, reason and figures (result and screen), as JSON text; doubles as their bit patterns,
/// so a plan taken over compares, ranks and prints exactly as where it was simulated.
std::string export_plans(const SweepResult& result, const std::vector<std::size_t>& which);
/// Takes over the plans of an export_plans text of the same sweep (same model, cluster and
/// options, so the same enumeration): their status, reason and figures replace `into`'s.
/// Does not rank (see ranking).
void import_plans(SweepResult& into, const std::string& text);

/// Gathers the shards of one sweep (each from sweep() with the same options but its own
/// shard_index) into one result, ranked again: plan i comes from shard i % shards.size().
SweepResult merge_shards(std::vector<SweepResult> shards, const SweepOptions& options);

}  // namespace smol::tools
