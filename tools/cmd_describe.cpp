// `smolcluster describe`, `models` and `clusters`: what smolcluster knows about a model and the presets.
#include <cstdio>
#include <memory>
#include <optional>

#include "strategies/data_parallel.hpp"
#include "strategies/plan.hpp"
#include "core/error.hpp"
#include "tools/commands.hpp"
#include "tools/plan_flags.hpp"
#include "tools/simulation.hpp"
#include "traces/summary.hpp"
#include "topologies/cluster.hpp"

namespace smol::tools {

namespace {

/// One strategy and offload choice, simulated: the device and host at their peaks.
struct MemoryRow {
    std::string strategy, offload;
    bool fits = false;
    Time step;
    Bytes capacity;
    MemoryBreakdown device, host, nvme;
};

/// A strategy the asked framework or recompute modules refuse, and why.
struct NotRun {
    std::string strategy, reason;
};

/// Every data-parallel strategy with each offload choice it has (zero3 to NVMe where the cluster
/// has drives), simulated with the analytic network: what each holds at its peak. An offload
/// choice a strategy does not have is left out; with `strict` false (--framework or
/// --recompute-modules given) a strategy refused outright is listed in `not_run` instead of
/// throwing, and only when every strategy is refused is ddp's refusal thrown.
std::vector<MemoryRow> memory_rows(const Model& model, const topo::Cluster& cluster, const strategies::Plan& base, bool strict,
                                   std::vector<NotRun>& not_run) {
    using strategies::DataParallel;
    using strategies::Offload;
    std::vector<MemoryRow> rows;
    sim::SimOptions quick;
    quick.network = sim::NetworkMode::analytic;
    quick.record_memory = false;
    const topo::Topology topology(cluster);
    std::optional<Error> first_refusal;
    for (DataParallel s : {DataParallel::ddp, DataParallel::zero1, DataParallel::zero2, DataParallel::zero3, DataParallel::fsdp})
        for (Offload o : {Offload::none, Offload::cpu, Offload::nvme}) {
            strategies::Plan p = base;
            p.strategy = s;
            p.offload = o;
            try {
                const strategies::Layout l = strategies::resolve(model, cluster, p);
                if (l.offload_ignored) continue;   // unified memory: the same as no offload
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::bad_input) throw;
                if (o == Offload::none && !strict) {
                    if (!first_refusal) first_refusal = e;
                    not_run.push_back({strategies::to_string(s), e.detail()});
                    break;   // nor any offload of it
                }
                continue;   // this strategy has no such offload (or does not run here)
            }
            std::optional<Simulation> sim;
            try {
                sim.emplace(simulate_plan(model, cluster, p, quick, &topology));
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::out_of_range) throw;
                continue;   // too large to simulate on this machine (simulate says why)
            }
            const Simulation& run = *sim;
            MemoryRow r{strategies::to_string(s), strategies::to_string(o), run.summary.fits(), run.summary.iteration,
                        run.timeline.capacity[static_cast<std::size_t>(run.summary.peak_rank)][static_cast<int>(Tier::device)],
                        run.summary.peak_device, run.summary.peak_host, run.summary.peak_nvme};
            rows.push_back(std::move(r));
        }
    if (rows.empty() && first_refusal) throw *first_refusal;
    return rows;
}

/// describe's flags.
struct DescribeFlags {
    std::string model, cluster;
    std::optional<int> nodes;
    bool json = false;
    std::optional<std::string> recompute, recompute_modules;
    std::optional<int> seq, micro_batch;
    std::string finetune = "full", optimizer = "adam", framework;
    int ep = 1;
};

int run_describe(const DescribeFlags& f, std::ostream& out, std::ostream& err) {
    const std::string& model_spec = f.model;
    const std::string& cluster_spec = f.cluster;
    const std::optional<int> nodes = f.nodes, seq_flag = f.seq, micro_batch_flag = f.micro_batch;
    const std::optional<std::string>& recompute_spec = f.recompute;
    const bool json = f.json;
    const int ep = f.ep;
    const Model model = load_model_warning(model_spec, err);
    if (ep < 1) fail_input("--ep must be at least 1, found " + std::to_string(ep), flag("--ep"));
    if (ep > 1 && cluster_spec.empty())
        fail_input("has no effect here: expert parallelism spreads the experts over the cluster's ranks; give --cluster",
                   flag("--ep"));
    check_at_least(seq_flag, 1, "--seq", "leave it out for the model's");
    check_at_least(micro_batch_flag, 1, "--micro-batch", "leave it out for 1");
    const Recompute recompute = parse_recompute(recompute_spec.value_or("none"), flag("--recompute"));
    // The steps' recompute and micro-batch shape the simulated rows only.
    for (const auto& [given, name] : {std::pair{recompute_spec.has_value(), "--recompute"}, {micro_batch_flag.has_value(), "--micro-batch"},
                                      {f.recompute_modules.has_value(), "--recompute-modules"}, {!f.framework.empty(), "--framework"}})
        if (given && cluster_spec.empty())
            fail_input("has no effect here: it sets the steps simulated on a cluster; give --cluster", flag(name));
    // Megatron core's --recompute-modules (simulate's): what selective recompute redoes. resolve
    // checks them against each strategy's framework and the recompute (memory_rows: refused by
    // every strategy, ddp's reason is the error).
    const RecomputeModules modules = f.recompute_modules
                                         ? parse_recompute_modules(*f.recompute_modules, flag("--recompute-modules"))
                                         : RecomputeModules{};
    if (!f.framework.empty()) strategies::parse_framework(f.framework);   // refuses a bad name, naming --framework
    const int step_seq = seq_flag.value_or(0), micro_batch = micro_batch_flag.value_or(1);
    // What the steps train and with which optimizer (simulate's --finetune and --optimizer).
    const strategies::FineTune finetune = strategies::parse_finetune(f.finetune);
    const strategies::Optimizer optimizer = strategies::parse_optimizer(f.optimizer);
    const bool adapters = finetune.kind != strategies::FineTuneKind::full;
    const std::string trains = std::string(adapters ? strategies::to_string(finetune) + ", " : std::string()) +
                               (optimizer == strategies::Optimizer::adam ? "mixed-precision Adam"
                                                                         : std::string("mixed-precision ") + strategies::to_string(optimizer));
    const std::int64_t params = model.parameters();
    const std::int64_t active = model.active_parameters();
    const int seq = step_seq > 0 ? step_seq : model.default_seq();   // --seq, or the model's
    // FLOPs per token of a training step (forward + backward), from the model's own blocks.
    Workload w;
    w.seq = seq;
    const Flops per_sample = model.flops_per_iteration(1, seq, Recompute::none);
    Bytes activations, flash_activations;
    for (const Block& b : model.blocks(w)) activations += b.activations;
    w.attention = Attention::flash;
    if (model.is_transformer())
        for (const Block& b : model.blocks(w)) flash_activations += b.activations;
    const auto sb = strategies::state_bytes(DType::bf16);
    const Bytes states(params * (sb.params + sb.grads + sb.optimizer));
    Json j{{"model", model.name()},
           {"parameters", params},
           {"active_parameters", active},
           {"seq", seq},
           {"seq_note", step_seq > 0 ? std::string() : model.seq_note()},
           {"train_flops_per_token", per_sample.count() / seq},
           {"activation_bytes_per_sample", activations.count()},
           {"activation_bytes_per_sample_flash", flash_activations.count()},
           {"model_state_bytes", {{"ddp", states.count()}}}};
    if (adapters) j["finetune"] = strategies::to_string(finetune);
    if (optimizer != strategies::Optimizer::adam) j["optimizer"] = strategies::to_string(optimizer);
    if (ep > 1) j["ep"] = ep;
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
        // With adapters, FSDP too (it shards the frozen weights); ZeRO-3 does not train them. With
        // expert parallelism the strategies that shard experts: ddp, zero1 (Megatron's) and fsdp
        // (not with adapters).
        std::vector<strategies::DataParallel> flavours{strategies::DataParallel::ddp, strategies::DataParallel::zero1};
        if (ep > 1) {
            if (!adapters) flavours.push_back(strategies::DataParallel::fsdp);
        } else {
            flavours.push_back(strategies::DataParallel::zero2);
            flavours.push_back(adapters ? strategies::DataParallel::fsdp : strategies::DataParallel::zero3);
        }
        for (auto flavour : flavours) {
            strategies::Plan plan;
            plan.strategy = flavour;
            plan.ep = ep;
            plan.finetune = finetune;
            plan.optimizer = optimizer;
            plan.framework = f.framework;
            plan.dtype = DType::bf16;
            if (!cluster->device_kind(0).supports(DType::bf16)) plan.dtype = cluster->device_kind(0).default_dtype();
            std::optional<strategies::Layout> layout;
            try {
                layout = strategies::resolve(model, *cluster, plan);
            } catch (const Error& e) {
                // --framework runs some strategies only: the others are listed as not run below.
                if (e.kind() != ErrorKind::bad_input || f.framework.empty()) throw;
                continue;
            }
            check_simulable(*layout, plan);   // --nodes 10000000 is refused, not built
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
    std::vector<MemoryRow> rows;
    std::vector<NotRun> not_run;
    if (cluster) {
        strategies::Plan base;
        base.finetune = finetune;
        base.optimizer = optimizer;
        base.recompute = recompute;
        base.recompute_modules = modules;
        base.framework = f.framework;
        base.seq = step_seq;
        base.micro_batch = micro_batch;
        base.ep = ep;
        rows = memory_rows(model, *cluster, base, f.framework.empty() && !f.recompute_modules, not_run);
        if (!f.framework.empty()) j["framework"] = f.framework;
        if (f.recompute_modules) j["recompute_modules"] = to_string(modules);
        Json m = Json::array();
        for (const MemoryRow& r : rows)
            m.push_back({{"strategy", r.strategy},
                         {"offload", r.offload},
                         {"fits", r.fits},
                         {"step_time_s", r.step.to_seconds()},
                         {"device_capacity_bytes", r.capacity.count()},
                         {"device_peak_bytes", r.device.total().count()},
                         {"device", traces::breakdown_json(r.device)},
                         {"host_peak_bytes", r.host.total().count()},
                         {"host", traces::breakdown_json(r.host)},
                         {"nvme_peak_bytes", r.nvme.total().count()},
                         {"nvme", traces::breakdown_json(r.nvme)}});
        j["memory"] = std::move(m);
        Json refused = Json::array();
        for (const NotRun& n : not_run) refused.push_back({{"strategy", n.strategy}, {"reason", n.reason}});
        if (!not_run.empty()) j["not_run"] = std::move(refused);
    }
    if (json) {
        out << j.dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
        return 0;
    }
    char buf[128];
    out << model.name() << '\n';
    std::snprintf(buf, sizeof buf, "  parameters            %.4g (%lld)\n", static_cast<double>(params),
                  static_cast<long long>(params));
    out << buf;
    if (active != params) {
        std::snprintf(buf, sizeof buf, "  active parameters     %.4g per token (the routed experts it goes to)\n",
                      static_cast<double>(active));
        out << buf;
    }
    std::snprintf(buf, sizeof buf, "  train FLOPs / token   %.4g (forward + backward, seq %d)\n",
                  per_sample.count() / seq, seq);
    out << buf;
    if (step_seq == 0 && !model.seq_note().empty()) out << "  seq " << seq << ": " << model.seq_note() << '\n';
    out << "  activations / sample  " << to_string_binary(activations) << " (bf16, no recompute, eager attention)";
    if (model.is_transformer()) out << "; " << to_string_binary(flash_activations) << " with flash attention";
    out << '\n';
    if (cluster)
        out << "  on " << cluster->name << ": " << cluster->num_devices() << " devices of "
            << to_string_binary(cluster->device_kind(0).memory) << "; model states per device (" << trains
            << (ep > 1 ? ", ep " + std::to_string(ep) : std::string()) << "):\n";
    else
        out << "  model states per device (" << trains << "; --cluster for the sharded strategies):\n";
    for (const auto& [name, bytes] : per_strategy) out << "    " << name << std::string(10 - name.size(), ' ') << to_string_binary(bytes) << '\n';
    if (!rows.empty()) {
        out << "  one step simulated per strategy and offload (analytic network; recompute " << to_string(recompute)
            << (f.recompute_modules ? " (" + to_string(modules) + ")" : std::string()) << ", micro-batch " << micro_batch
            << (f.framework.empty() ? std::string() : ", framework " + f.framework) << "): the device and the host at their peaks\n";
        for (const MemoryRow& r : rows) {
            const std::string name = r.strategy + (r.offload == "none" ? "" : " --offload " + r.offload);
            std::snprintf(buf, sizeof buf, "    %-22s %-7s %s of %s\n", name.c_str(), r.fits ? "fits" : "no fit",
                          to_string_binary(r.device.total()).c_str(), to_string_binary(r.capacity).c_str());
            out << buf << "      device: " << traces::describe_breakdown(r.device) << '\n';
            if (r.host.total() > Bytes(0)) out << "      host:   " << traces::describe_breakdown(r.host) << '\n';
            if (r.nvme.total() > Bytes(0)) out << "      NVMe:   " << traces::describe_breakdown(r.nvme) << '\n';
        }
        for (const NotRun& n : not_run) {
            std::snprintf(buf, sizeof buf, "    %-22s not run: ", n.strategy.c_str());
            out << buf << n.reason << '\n';
        }
    }
    return 0;
}

}  // namespace

Command add_describe(CLI::App& parent) {
    auto f = std::make_shared<DescribeFlags>();
    CLI::App* app = parent.add_subcommand("describe", "parameters, FLOPs per token and memory of a model");
    app->add_option("--model", f->model, "model preset or JSON file")->required();
    app->add_option("--cluster", f->cluster, "cluster preset or JSON file");
    app->add_option("--nodes", f->nodes, "scale the cluster to N nodes");
    app->add_flag("--json", f->json, "print one JSON object");
    app->add_option("--recompute", f->recompute, "with --cluster: activation recompute of the simulated steps (default: none)");
    app->add_option("--recompute-modules", f->recompute_modules,
                    "with --recompute selective: what it redoes, Megatron core's modules as simulate's (with --framework "
                    "megatron)");
    app->add_option("--seq", f->seq, "sequence length of the figures and of the simulated steps (default: the model's)");
    app->add_option("--micro-batch", f->micro_batch, "with --cluster: micro-batch of the simulated steps (default: 1)");
    app->add_option("--finetune", f->finetune, "with --cluster: what the steps train, full, lora:RANK[:TARGETS] or qlora:RANK[:TARGETS]")
        ->capture_default_str();
    app->add_option("--optimizer", f->optimizer, "with --cluster: adam, adamw-8bit, sgd or lamb")->capture_default_str();
    app->add_option("--ep", f->ep, "with --cluster: expert parallelism of the strategies (a mixture of experts)")
        ->capture_default_str();
    app->add_option("--framework", f->framework,
                    "with --cluster: every strategy on this framework, NAME[@VERSION] as simulate's (default: each "
                    "strategy's); those it does not run are listed as not run");
    return {app, [f](const Io& io) { return run_describe(*f, io.out, io.err); }};
}

Command add_models(CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("models", "list model presets");
    return {app, [](const Io& io) {
                for (const auto& name : model_preset_names()) {
                    const Model m = model_preset(name);
                    char buf[128];
                    std::snprintf(buf, sizeof buf, "%-16s %8.3g parameters\n", name.c_str(), static_cast<double>(m.parameters()));
                    io.out << buf;
                }
                return 0;
            }};
}

Command add_clusters(CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("clusters", "list cluster presets");
    return {app, [](const Io& io) {
                for (const auto& name : topo::cluster_preset_names()) {
                    const topo::Cluster c = topo::cluster_preset(name);
                    char buf[256];
                    std::snprintf(buf, sizeof buf, "%-18s %3d × %-16s %s\n", name.c_str(), c.num_devices(),
                                  c.device_kind(0).name.c_str(), c.description.c_str());
                    io.out << buf;
                }
                return 0;
            }};
}

}  // namespace smol::tools
