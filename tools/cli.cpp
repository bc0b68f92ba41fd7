#include "tools/cli.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "sim/simulator.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/plan.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/summary.hpp"
#include "tools/simulation.hpp"
#include "topologies/topology.hpp"

namespace smol::tools {

namespace {

/// Everything `simulate` (and later `run`, `validate`, `sweep`) reads from the command line.
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
    std::string trace;
    std::string trace_ranks;
    bool force = false;
    bool no_fold = false;
    bool json = false;
};

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
    app.add_option("--trace", f.trace, "write a Chrome trace (chrome://tracing, Perfetto) to FILE");
    app.add_option("--trace-ranks", f.trace_ranks, "ranks to trace, e.g. 0,1,8 (default: all up to 64, else 0-7)");
    app.add_flag("--force", f.force, "overwrite an existing trace file");
    app.add_flag("--no-fold", f.no_fold, "simulate every data-parallel replica (by default identical replicas of a tensor/pipeline plan are folded into one)");
    app.add_flag("--json", f.json, "print the summary as one JSON object");
}

ErrorContext flag(const char* name) { return {"", "", name}; }

topo::Cluster resolve_cluster(const PlanFlags& f) {
    topo::Cluster c = topo::load_cluster(f.cluster);
    if (f.nodes) c = c.with_nodes(*f.nodes);
    if (f.devices) c = c.first_devices(*f.devices);
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

/// Writes the trace next to its final name, then renames it, so a crash never leaves half a file.
void write_trace(const PlanFlags& f, const topo::Cluster& cluster, const OpGraph& g, const Timeline& tl) {
    namespace fs = std::filesystem;
    const fs::path path(f.trace);
    if (fs::exists(path) && !f.force)
        fail_input(f.trace + " exists; pass --force to overwrite it", flag("--trace"));
    if (path.has_parent_path()) fs::create_directories(path.parent_path());
    const fs::path tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary);
        if (!out) fail_input("cannot write " + tmp.string(), flag("--trace"));
        traces::TraceOptions opt;
        opt.ranks = parse_ranks(f.trace_ranks, g.ranks());
        if (static_cast<int>(opt.ranks.size()) < g.ranks()) opt.link_filter = links_of(g, topo::Topology(cluster), opt.ranks);
        traces::write_chrome_trace(out, g, tl, opt);
        if (!out) fail_input("cannot write " + tmp.string() + " (disk full?)", flag("--trace"));
    }
    fs::rename(tmp, path);
}

int cmd_simulate(const PlanFlags& f, std::ostream& out, std::ostream& err) {
    const Model model = load_model(f.model);
    const topo::Cluster cluster = resolve_cluster(f);
    const strategies::Plan plan = resolve_plan(f);
    sim::SimOptions opt;
    opt.network = sim::parse_network_mode(f.network);
    opt.algo = sim::parse_collective_algo(f.collective_algo);
    opt.record_links = !f.trace.empty();
    opt.record_memory = !f.trace.empty();
    if (!f.trace.empty() && std::filesystem::exists(f.trace) && !f.force)
        fail_input(f.trace + " exists; pass --force to overwrite it", flag("--trace"));

    const Simulation run = simulate_plan(model, cluster, plan, opt);
    const traces::Summary& s = run.summary;

    if (!f.trace.empty()) write_trace(f, cluster, run.built.graph, run.timeline);
    if (f.json)
        out << to_json(s).dump(2) << '\n';
    else {
        traces::print_table(out, s);
        if (!f.trace.empty()) out << "\n  trace written to " << f.trace << " (open in chrome://tracing or ui.perfetto.dev)\n";
    }
    if (!s.fits()) {
        err << "smolcluster: the plan does not fit: " << s.oom->device << " needs " << to_string(s.oom->requested)
            << " more " << to_string(s.oom->tier) << " memory with " << to_string(s.oom->free) << " free\n";
        return 3;
    }
    return 0;
}

int cmd_describe(const std::string& model_spec, const std::string& cluster_spec, std::optional<int> nodes, bool json,
                 std::ostream& out) {
    const Model model = load_model(model_spec);
    const std::int64_t params = model.parameters();
    const int seq = model.default_seq();
    // FLOPs per token of a training step (forward + backward), from the model's own blocks.
    Workload w;
    w.seq = seq;
    const Flops per_sample = model.flops_per_iteration(1, seq, Recompute::none);
    Bytes activations;
    for (const Block& b : model.blocks(w)) activations += b.activations;
    const auto sb = strategies::state_bytes(DType::bf16);
    const Bytes states(params * (sb.params + sb.grads + sb.optimizer));
    Json j{{"model", model.name()},
           {"parameters", params},
           {"seq", seq},
           {"train_flops_per_token", per_sample.count() / seq},
           {"activation_bytes_per_sample", activations.count()},
           {"model_state_bytes", {{"ddp", states.count()}}}};
    std::optional<topo::Cluster> cluster;
    // With a cluster: each data-parallel strategy's model-state bytes per device, read from the
    // graph the strategy builds over all its devices (rank 0's parameter, gradient and
    // optimizer-state buffers), not from a formula.
    std::vector<std::pair<std::string, Bytes>> per_strategy{{"ddp", states}};
    if (!cluster_spec.empty()) {
        cluster = topo::load_cluster(cluster_spec);
        if (nodes) cluster = cluster->with_nodes(*nodes);
        j["cluster"] = cluster->name;
        j["device_memory_bytes"] = cluster->device_kind(0).memory.count();
        j["devices"] = cluster->num_devices();
        per_strategy.clear();
        for (auto flavour : {strategies::DataParallel::ddp, strategies::DataParallel::zero1, strategies::DataParallel::zero2,
                             strategies::DataParallel::zero3}) {
            strategies::Plan plan;
            plan.strategy = flavour;
            plan.dtype = DType::bf16;
            if (!cluster->device_kind(0).supports(DType::bf16)) plan.dtype = cluster->device_kind(0).default_dtype();
            const strategies::Built built = strategies::build(model, *cluster, plan);
            Bytes held;
            for (const Buffer& b : built.graph.buffers()) {
                const auto label = static_cast<BufferLabel>(b.label);
                if (b.rank == 0 && (label == BufferLabel::parameters || label == BufferLabel::gradients ||
                                    label == BufferLabel::optimizer_state))
                    held += Bytes(b.bytes);
            }
            per_strategy.emplace_back(strategies::to_string(flavour), held);
        }
        Json m;
        for (const auto& [name, bytes] : per_strategy) m[name] = bytes.count();
        j["model_state_bytes"] = m;
    }
    if (json) {
        out << j.dump(2) << '\n';
        return 0;
    }
    char buf[128];
    out << model.name() << '\n';
    std::snprintf(buf, sizeof buf, "  parameters            %.4g (%lld)\n", static_cast<double>(params),
                  static_cast<long long>(params));
    out << buf;
    std::snprintf(buf, sizeof buf, "  train FLOPs / token   %.4g (forward + backward, seq %d)\n",
                  per_sample.count() / seq, seq);
    out << buf;
    out << "  activations / sample  " << to_string(activations) << " (bf16, no recompute)\n";
    if (cluster)
        out << "  on " << cluster->name << ": " << cluster->num_devices() << " devices of "
            << to_string(cluster->device_kind(0).memory) << "; model states per device (mixed-precision Adam):\n";
    else
        out << "  model states per device (mixed-precision Adam; --cluster for the sharded strategies):\n";
    for (const auto& [name, bytes] : per_strategy) out << "    " << name << std::string(10 - name.size(), ' ') << to_string(bytes) << '\n';
    return 0;
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
    CLI::App app{"smolcluster: which parallelism strategy, how long per step, does it fit in memory?"};
    app.name("smolcluster");
    app.require_subcommand(1);

    PlanFlags sim_flags;
    CLI::App* simulate = app.add_subcommand("simulate", "simulate one training step and summarise it");
    add_plan_flags(*simulate, sim_flags);

    std::string d_model, d_cluster;
    bool d_json = false;
    CLI::App* describe = app.add_subcommand("describe", "parameters, FLOPs per token and memory of a model");
    describe->add_option("--model", d_model, "model preset or JSON file")->required();
    describe->add_option("--cluster", d_cluster, "cluster preset or JSON file");
    std::optional<int> d_nodes;
    describe->add_option("--nodes", d_nodes, "scale the cluster to N nodes");
    describe->add_flag("--json", d_json, "print one JSON object");

    CLI::App* models = app.add_subcommand("models", "list model presets");
    CLI::App* clusters = app.add_subcommand("clusters", "list cluster presets");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        out << app.help();
        return 0;
    } catch (const CLI::CallForAllHelp&) {
        out << app.help("", CLI::AppFormatMode::All);
        return 0;
    } catch (const CLI::ParseError& e) {
        // Help for a subcommand arrives as CallForHelp from the subcommand's parse.
        if (e.get_exit_code() == 0) {
            out << (simulate->parsed() ? simulate->help() : describe->parsed() ? describe->help() : app.help());
            return 0;
        }
        err << "smolcluster: error: " << e.what() << "\n(run 'smolcluster --help')\n";
        return 2;
    }

    try {
        if (simulate->parsed()) return cmd_simulate(sim_flags, out, err);
        if (describe->parsed()) return cmd_describe(d_model, d_cluster, d_nodes, d_json, out);
        if (models->parsed()) {
            for (const auto& name : model_preset_names()) {
                const Model m = model_preset(name);
                char buf[128];
                std::snprintf(buf, sizeof buf, "%-16s %8.3g parameters\n", name.c_str(), static_cast<double>(m.parameters()));
                out << buf;
            }
            return 0;
        }
        if (clusters->parsed()) {
            for (const auto& name : topo::cluster_preset_names()) {
                const topo::Cluster c = topo::cluster_preset(name);
                char buf[256];
                std::snprintf(buf, sizeof buf, "%-18s %3d × %-16s %s\n", name.c_str(), c.num_devices(),
                              c.device_kind(0).name.c_str(), c.description.c_str());
                out << buf;
            }
            return 0;
        }
    } catch (const Error& e) {
        err << "smolcluster: error: " << e.what() << '\n';
        return e.kind() == ErrorKind::bad_input ? 2 : 1;
    } catch (const std::exception& e) {
        err << "smolcluster: internal error: " << e.what() << '\n';
        return 1;
    }
    return 0;
}

}  // namespace smol::tools
