// The plan flags every plan-taking subcommand shares (simulate, run, validate, sweep, …), and the
// helpers that turn them into a cluster, a plan and simulator options. One definition, so a flag
// means the same thing everywhere and a new flag reaches every subcommand at once.
#pragma once

#include <cstdint>
#include <optional>
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

struct PlanFlags {
    std::string model, cluster;
    std::optional<int> nodes, devices;   // unset: the cluster as described
    std::string strategy = "ddp";
    int tp = 1, pp = 1, dp = 0;
    std::string schedule = "1f1b";
    int virtual_stages = 1;
    std::vector<int> stage_layers;
    bool sp = false;
    std::string recompute = "none", offload = "none";
    std::int64_t global_batch = 0;
    int micro_batch = 1, seq = 0;
    std::string dtype;
    double bucket_mb = 25, first_bucket_mb = 1;
    int ps_servers = 1, staleness = 4, fsdp_group = 0;
    std::string ps_placement = "dedicated", fsdp_sharding = "full";
    double fusion_mb = 64, cycle_ms = 5;
    std::string network = "flow", collective_algo = "auto";
    bool no_fold = false;
    std::string profile;                 // --profile: a calibration profile applied to the cluster
};

/// The model, cluster and plan flags.
void add_plan_flags(CLI::App& app, PlanFlags& f);
/// The cluster the flags name, scaled by --nodes, cut by --devices, with --profile's figures.
topo::Cluster resolve_cluster(const PlanFlags& f);
strategies::Plan resolve_plan(const PlanFlags& f);
sim::SimOptions resolve_sim_options(const PlanFlags& f);

inline ErrorContext flag(const char* name) { return {"", "", name}; }

/// Trace output flags (--trace, --trace-ranks, --force), shared by simulate, run and validate.
struct TraceFlags {
    std::string trace;
    std::string trace_ranks;
    bool force = false;
};
void add_trace_flags(CLI::App& app, TraceFlags& f);
/// Refuses an existing trace file without --force, before any work is done.
void check_trace_target(const std::string& path, bool force, const char* flag_name = "--trace");
/// Ranks named by --trace-ranks ("0,1,8"); empty text: all ranks up to 64 devices, else 0-7.
std::vector<int> parse_ranks(const std::string& text, int devices);
/// Writes the Chrome trace of `tl` to `path` through a temporary file renamed into place, so a
/// failure never leaves half a file. `cluster` gives the routes of the link filter.
void write_trace(const std::string& path, const std::string& trace_ranks, bool force, const topo::Cluster& cluster,
                 const OpGraph& g, const Timeline& tl, const char* flag_name = "--trace");

}  // namespace smol::tools
