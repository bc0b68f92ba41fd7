#include "tools/plan_flags.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "topologies/profile.hpp"
#include "topologies/topology.hpp"
#include "traces/chrome_trace.hpp"

namespace smol::tools {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
    app.add_option("--model", f.model, "model preset or JSON file (smolcluster's own or a HuggingFace config.json)")
        ->required();
    app.add_option("--cluster", f.cluster, "cluster preset or JSON file")->required();
    app.add_option("--nodes", f.nodes, "scale the cluster to N nodes");
    app.add_option("--devices", f.devices, "use the first N devices of the cluster (default: all)");
    app.add_option("--strategy", f.strategy, "data-parallel flavour: ps, ps-async, ring, ddp, zero1, zero2, zero3, fsdp")->capture_default_str();
    app.add_option("--tp", f.tp, "tensor-parallel degree")->capture_default_str();
    app.add_option("--pp", f.pp, "pipeline-parallel degree")->capture_default_str();
    app.add_option("--dp", f.dp, "data-parallel degree (default: devices / (tp · pp))");
    app.add_option("--schedule", f.schedule, "pipeline schedule: gpipe, 1f1b, interleaved, zb-h1")->capture_default_str();
    app.add_option("--virtual-stages", f.virtual_stages, "model chunks per device (interleaved)")->capture_default_str();
    app.add_option("--stage-layers", f.stage_layers,
                   "layers per pipeline stage, e.g. 5,6,6,5 (pp × virtual stages entries; default: balanced by cost)")
        ->delimiter(',');
    app.add_flag("--sp", f.sp, "sequence parallelism (with --tp)");
    app.add_option("--recompute", f.recompute, "activation recompute: none, selective, full")->capture_default_str();
    app.add_option("--offload", f.offload, "optimizer offload: none")->capture_default_str();
    app.add_option("--global-batch", f.global_batch, "samples per step (default: dp × micro-batch)");
    app.add_option("--micro-batch", f.micro_batch, "samples per micro-batch")->capture_default_str();
    app.add_option("--seq", f.seq, "sequence length (default: the model's)");
    app.add_option("--dtype", f.dtype, "bf16, fp16 or fp32 (default: bf16 on GPUs, fp32 on CPUs)");
    app.add_option("--bucket-mb", f.bucket_mb, "DDP gradient bucket size in MiB")->capture_default_str();
    app.add_option("--first-bucket-mb", f.first_bucket_mb, "DDP's first (smaller) bucket in MiB")->capture_default_str();
    app.add_option("--ps-servers", f.ps_servers, "parameter-server shards (ps, ps-async)")->capture_default_str();
    app.add_option("--ps-placement", f.ps_placement,
                   "dedicated (servers are the last devices; dp = devices - servers) or colocated (on workers)")
        ->capture_default_str();
    app.add_option("--staleness", f.staleness, "ps-async: updates a worker may run ahead of the slowest")
        ->capture_default_str();
    app.add_option("--fusion-mb", f.fusion_mb, "ring (Horovod): tensor fusion buffer in MiB")->capture_default_str();
    app.add_option("--cycle-ms", f.cycle_ms, "ring (Horovod): background cycle time in ms")->capture_default_str();
    app.add_option("--fsdp-sharding", f.fsdp_sharding, "fsdp: full, grad-op, hybrid or none")->capture_default_str();
    app.add_option("--fsdp-group", f.fsdp_group, "fsdp hybrid: devices per shard group (default: a node)");
    app.add_option("--network", f.network, "flow (max-min fair sharing) or analytic (alpha-beta)")->capture_default_str();
    app.add_option("--collective-algo", f.collective_algo,
                   "auto, ring, tree, halving-doubling, hierarchical, direct")
        ->capture_default_str();
    app.add_option("--profile", f.profile,
                   "a calibration profile (smolcluster calibrate --out FILE) whose measured rates replace the cluster's leads");
    app.add_flag("--no-fold", f.no_fold, "simulate every data-parallel replica (by default identical replicas of a tensor/pipeline plan are folded into one)");
}

sim::SimOptions resolve_sim_options(const PlanFlags& f) {
    sim::SimOptions opt;
    opt.network = sim::parse_network_mode(f.network);
    opt.algo = sim::parse_collective_algo(f.collective_algo);
    return opt;
}

void add_trace_flags(CLI::App& app, TraceFlags& f) {
    app.add_option("--trace", f.trace, "write a Chrome trace (ui.perfetto.dev, chrome://tracing) to FILE");
    app.add_option("--trace-ranks", f.trace_ranks, "ranks to trace, e.g. 0,1,8 (default: all up to 64, else 0-7)");
    app.add_flag("--force", f.force, "overwrite an existing trace file");
}

void check_trace_target(const std::string& path, bool force, const char* flag_name) {
    if (!path.empty() && std::filesystem::exists(path) && !force)
        fail_input(path + " exists; pass --force to overwrite it", flag(flag_name));
}

topo::Cluster resolve_cluster(const PlanFlags& f) {
    topo::Cluster c = topo::load_cluster(f.cluster);
    if (f.nodes) c = c.with_nodes(*f.nodes);
    if (f.devices) c = c.first_devices(*f.devices);
    if (!f.profile.empty()) c = topo::apply_profile(c, topo::load_profile(f.profile), f.profile);
    return c;
}

strategies::Plan resolve_plan(const PlanFlags& f) {
    strategies::Plan p;
    p.strategy = strategies::parse_data_parallel(f.strategy);
    p.tp = f.tp;
    p.pp = f.pp;
    p.dp = f.dp;
    p.schedule = strategies::parse_schedule(f.schedule);
    p.virtual_stages = f.virtual_stages;
    p.stage_layers = f.stage_layers;
    p.sequence_parallel = f.sp;
    p.recompute = parse_recompute(f.recompute, flag("--recompute"));
    p.offload = strategies::parse_offload(f.offload);
    if (f.global_batch < 0)
        fail_input("--global-batch must be at least 1, found " + std::to_string(f.global_batch), flag("--global-batch"));
    p.global_batch = f.global_batch;
    p.micro_batch = f.micro_batch;
    if (f.seq < 0) fail_input("--seq must be at least 1, found " + std::to_string(f.seq), flag("--seq"));
    p.seq = f.seq;
    if (!f.dtype.empty()) p.dtype = parse_dtype(f.dtype, flag("--dtype"));
    p.bucket_mb = f.bucket_mb;
    p.first_bucket_mb = f.first_bucket_mb;
    p.fold = !f.no_fold;
    p.ps_servers = f.ps_servers;
    p.ps_placement = strategies::parse_ps_placement(f.ps_placement);
    p.staleness = f.staleness;
    p.fusion_mb = f.fusion_mb;
    p.cycle_ms = f.cycle_ms;
    p.fsdp_sharding = strategies::parse_fsdp_sharding(f.fsdp_sharding);
    p.fsdp_group = f.fsdp_group;
    return p;
}

std::vector<int> parse_ranks(const std::string& text, int devices) {
    std::vector<int> out;
    if (text.empty()) {
        for (int r = 0; r < std::min(devices, devices <= 64 ? 64 : 8); ++r) out.push_back(r);
        return out;
    }
    std::stringstream s(text);
    std::string item;
    while (std::getline(s, item, ',')) {
        std::size_t used = 0;
        int r = -1;
        try {
            r = std::stoi(item, &used);
        } catch (const std::exception&) {
        }
        if (used != item.size() || r < 0 || r >= devices)
            fail_input("rank numbers from 0 to " + std::to_string(devices - 1) + " separated by commas",
                       "'" + item + "'", flag("--trace-ranks"));
        out.push_back(r);
    }
    return out;
}

namespace {

/// The links that traffic to or from `ranks` crosses: routes to every peer of their sends,
/// receives and collectives, and to their host memory and NVMe (copies).
std::vector<bool> links_of(const OpGraph& g, const topo::Topology& topology, const std::vector<int>& ranks) {
    std::vector<bool> traced(static_cast<std::size_t>(g.ranks()), false), keep(topology.links().size(), false);
    for (int r : ranks) traced[static_cast<std::size_t>(r)] = true;
    auto mark = [&](topo::VertexId a, topo::VertexId b) {
        if (a < 0 || b < 0 || a == b) return;
        for (topo::LinkId l : topology.route(a, b)) keep[static_cast<std::size_t>(l)] = true;
        for (topo::LinkId l : topology.route(b, a)) keep[static_cast<std::size_t>(l)] = true;
    };
    std::set<std::pair<int, int>> pairs;
    for (const P2P& p : g.p2ps())
        if (traced[static_cast<std::size_t>(p.src)] || traced[static_cast<std::size_t>(p.dst)]) pairs.insert({p.src, p.dst});
    for (const auto& members : g.communicators())
        for (int m : members)
            if (traced[static_cast<std::size_t>(m)])
                for (int o : members) pairs.insert({m, o});
    for (const auto& [a, b] : pairs) mark(topology.device_vertex(a), topology.device_vertex(b));
    for (int r : ranks) {
        mark(topology.device_vertex(r), topology.host_vertex(r));
        mark(topology.host_vertex(r), topology.nvme_vertex(r));
    }
    return keep;
}

}  // namespace

/// Writes the trace next to its final name, then renames it, so a crash never leaves half a file.
void write_trace(const std::string& file, const std::string& trace_ranks, bool force, const topo::Cluster& cluster,
                 const OpGraph& g, const Timeline& tl, const char* flag_name) {
    namespace fs = std::filesystem;
    const fs::path path(file);
    check_trace_target(file, force, flag_name);
    if (path.has_parent_path()) fs::create_directories(path.parent_path());
    const fs::path tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary);
        if (!out) fail_input("cannot write " + tmp.string(), flag(flag_name));
        traces::TraceOptions opt;
        opt.ranks = parse_ranks(trace_ranks, g.ranks());
        if (static_cast<int>(opt.ranks.size()) < g.ranks()) opt.link_filter = links_of(g, topo::Topology(cluster), opt.ranks);
        traces::write_chrome_trace(out, g, tl, opt);
        if (!out) fail_input("cannot write " + tmp.string() + " (disk full?)", flag(flag_name));
    }
    fs::rename(tmp, path);
}

}  // namespace smol::tools
