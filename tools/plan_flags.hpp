// The plan flags every plan-taking subcommand shares (simulate, run, validate, sweep, …), and the
// helpers that turn them into a cluster, a plan and simulator options. One definition, so a flag
// means the same thing everywhere and a new flag reaches every subcommand at once.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

namespace smol::tools {

/// The flags as typed. A flag left out keeps its default here (or stays unset, where the default
/// is derived from the plan); a flag given with 0 means 0, which is refused where it is no count
/// (--dp 0 is an error, not "derive dp"). The ranges are checked in resolve_plan and
/// strategies::resolve and listed in tools/README.md ("Input ranges and errors").
struct PlanFlags {
    std::string model, cluster;
    std::string cluster_network;         // composed clusters: how the groups are joined (empty: one switch)
    std::optional<int> nodes, devices;   // unset: the cluster as described
    std::string strategy = "ddp";
    int tp = 1, pp = 1, cp = 1;
    std::optional<int> dp;               // unset: devices / (tp · pp)
    std::string schedule = "1f1b";
    int virtual_stages = 1;
    std::vector<int> stage_layers;
    std::string partition;
    bool sp = false;
    std::string recompute = "none", offload = "none", offload_params = "none", offload_optimizer = "none";
    bool delayed_update = false;
    std::string offload_activations = "none";
    std::string finetune = "full", optimizer = "adam";
    std::string compress = "none";       // --compress: gradient compression (strategies/compression.hpp)
    std::optional<std::int64_t> global_batch;   // unset: dp × micro-batch
    int micro_batch = 1;
    std::optional<int> seq;              // unset: the model's
    std::optional<std::string> recompute_modules;   // unset: core_attn
    std::optional<std::string> recompute_method;    // --recompute-method; unset: uniform
    std::optional<int> recompute_num_layers;        // --recompute-num-layers; unset: 1
    std::string dtype;
    std::optional<double> bucket_mb, first_bucket_mb;   // unset: the framework's
    int ps_servers = 1, staleness = 4;
    std::optional<int> fsdp_group;       // unset: the devices of a node
    std::string fsdp_reduce_dtype;       // empty: the training dtype
    std::string fsdp_backward_prefetch = "pre";
    std::string ps_placement = "dedicated", fsdp_sharding = "full";
    std::string hybrid_variant = "all-gather";
    double fusion_mb = 64, cycle_ms = 5;
    std::string network = "flow", collective_algo = "auto";
    std::string framework;
    std::string dispatch_overhead;       // --dispatch-overhead "20 us"; empty: the framework's
    bool overlap_grad_reduce = false, overlap_p2p_comm = false, overlap_cpu_optimizer = false, overlap_param_gather = false,
         overlap_param_gather_with_optimizer_step = false, tp_comm_overlap = false;
    std::optional<double> optimizer_offload_fraction;
    bool zero_quantized_weights = false, zero_quantized_gradients = false, zeropp_loco = false;
    std::optional<int> zero_hpz_partition_size;
    std::optional<int> mics_shard_size;
    bool mics_hierarchical = false;
    bool fsdp_no_sync = false;
    std::string deepspeed_config;       // a ds_config.json
    const CLI::App* app = nullptr;      // the subcommand, to tell flags given from defaults
    /// Warnings for the user (keys of a DeepSpeed config that are not modelled), filled by resolve_plan.
    mutable std::vector<std::string> warnings;
    bool no_fold = false;
    int ep = 1;
    double expert_imbalance = 1, capacity_factor = 0;
    std::string cp_comm;                 // empty: p2p
    std::string attention;               // empty: flash on GPUs of compute capability ≥ 8.0, else eager
    std::string attention_backend;       // empty: the framework's (cuDNN under Megatron core on Hopper)
    std::string fp8;                     // empty: no FP8; delayed or tensorwise (--fp8)
    bool first_last_layers_bf16 = false;   // --first-last-layers-bf16
    bool fp8_param_gather = false;         // --fp8-param-gather
    std::optional<int> num_layers_at_start_in_bf16, num_layers_at_end_in_bf16;
    std::string cross_entropy_fusion;    // empty: none; native or te (--cross-entropy-fusion)
    std::optional<int> vocab_multiple;   // --make-vocab-size-divisible-by; unset: the framework's
    std::string profile;                 // --profile: a calibration profile applied to the cluster
    std::string slow;                    // --slow RANK:FACTOR[:nic=FACTOR],… (topo::Cluster::with_slow_devices)
    double jitter = 0;                   // --jitter PCT: seeded per-op variation of compute times
    std::uint64_t seed = 1;              // --seed N: the jitter's seed
    bool hogwild = false;                // --hogwild: ps-async's lock-free shared-memory updates
};

/// The model a --model names (core/model.hpp load_model), its reader's warnings written to `err`
/// as "smolcluster: warning: …".
Model load_model_warning(const std::string& spec, std::ostream& err);
/// The model, cluster and plan flags.
void add_plan_flags(CLI::App& app, PlanFlags& f);
/// The cluster the flags name (composed with --cluster-network when it is NAME:N,…), scaled by
/// --nodes, cut by --devices, with --profile's measured figures.
topo::Cluster resolve_cluster(const PlanFlags& f);
/// The plan the flags describe. A --deepspeed-config is read and applied here (its keys fill
/// what the flags leave unset; a conflict with a flag given is an error), its unmodelled keys
/// added to f.warnings. Refuses a value out of its range and a flag that has no effect in this
/// plan (--sp without --tp, --fusion-mb without ring, …), naming the flag and saying why; the few
/// flags scripts pass whatever the plan (--schedule with pp 1, --no-fold) get a warning instead.
strategies::Plan resolve_plan(const PlanFlags& f);
/// Prints f.warnings to `err` as "smolcluster: warning: …".
void print_warnings(const PlanFlags& f, std::ostream& err);
sim::SimOptions resolve_sim_options(const PlanFlags& f);
/// `run` and `validate` execute on real devices: --slow, --jitter, --seed and --hogwild (which
/// only the simulator models) are refused, naming the flag, and so are --fp8, --attention-backend
/// and (for run) --dispatch-overhead.
void refuse_simulation_only_flags(const PlanFlags& f, const char* command);

inline ErrorContext flag(const char* name) { return {"", "", name}; }

/// Refuses an integer flag below `lo` (0 is a value like any other: never "the default").
template <class T>
void check_at_least(const std::optional<T>& v, T lo, const char* name, const char* what) {
    if (v && *v < lo)
        fail_input("must be at least " + std::to_string(lo) + " (" + what + "), found " + std::to_string(*v), flag(name));
}

/// --dispatch-overhead TEXT ("20 us", 0 to 100 ms); unset when empty. Bad input names the flag.
std::optional<Time> parse_dispatch_overhead(const std::string& text);

/// Trace output flags (--trace, --trace-ranks, --force), shared by simulate, run and validate.
struct TraceFlags {
    std::string trace;
    std::string trace_ranks;
    bool force = false;
};
void add_trace_flags(CLI::App& app, TraceFlags& f);
/// Refuses, before any work is done, an output target that exists without --force, or that is
/// not a regular file (a directory, a device, a FIFO, a link) even with it (tools/output_file.hpp).
void check_trace_target(const std::string& path, bool force, const char* flag_name = "--trace");
/// Every trace flag checked before simulating: the file (check_trace_target) and --trace-ranks
/// against the cluster's `devices`. `kernels`: the command's --kernels FILE (simulate's), which
/// --trace-ranks also selects ranks for; null where the command has none.
void check_trace_flags(const TraceFlags& f, int devices, const std::string* kernels = nullptr);
/// Ranks named by --trace-ranks ("0,1,8", ranges "0-7,64-71"), sorted and without repeats;
/// empty text: all ranks up to 64 devices, else 0-7.
std::vector<int> parse_ranks(const std::string& text, int devices);
/// The ranks whose links a trace of `trace_ranks` shows (SimOptions::link_ranks): empty when it
/// traces every rank.
std::vector<int> link_ranks(const std::string& trace_ranks, int devices);
/// Writes the Chrome trace of `tl` to `path` through a temporary file renamed into place, so a
/// failure never leaves half a file; gzip-compressed when the name ends in ".gz". `cluster`
/// gives the routes of the link filter; `metadata` goes into the trace's "metadata" object.
void write_trace(const std::string& path, const std::string& trace_ranks, bool force,
                 const OpGraph& g, const Timeline& tl,
                 const std::vector<std::pair<std::string, std::string>>& metadata = {},
                 const char* flag_name = "--trace");
/// The run metadata a trace carries: smolcluster version, command line, model, cluster, plan.
std::vector<std::pair<std::string, std::string>> run_metadata(const std::string& command_line, const Model& model,
                                                               const topo::Cluster& cluster,
                                                               const strategies::Layout& layout,
                                                               const strategies::Plan& plan);

}  // namespace smol::tools
