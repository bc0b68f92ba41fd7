// `smolcluster simulate`: one training step of a plan, simulated and summarised.
#include <memory>

#include "tools/commands.hpp"
#include "tools/fit_advice.hpp"
#include "tools/kernel_table.hpp"
#include "tools/output_file.hpp"
#include "tools/plan_flags.hpp"
#include "tools/simulation.hpp"
#include "traces/summary.hpp"

namespace smol::tools {

namespace {

struct SimulateFlags {
    PlanFlags plan;
    TraceFlags trace;
    std::string kernels;
    bool json = false;
};

int run_simulate(const SimulateFlags& f, const Io& io) {
    const Model model = load_model_warning(f.plan.model, io.err);
    const topo::Cluster cluster = resolve_cluster(f.plan);
    const strategies::Plan plan = resolve_plan(f.plan);
    print_warnings(f.plan, io.err);
    sim::SimOptions opt = resolve_sim_options(f.plan);
    const bool tracing = !f.trace.trace.empty();
    opt.record_memory = tracing;
    // Every output flag is checked before the simulation, which may take minutes.
    check_trace_flags(f.trace, cluster.num_devices(), &f.kernels);
    check_output_target(f.kernels, f.trace.force, "--kernels");
    if (!f.kernels.empty() && f.kernels == f.trace.trace)
        fail_input("--kernels and --trace name the same file " + f.kernels + "; give each its own", flag("--kernels"));
    opt.record_links = tracing;
    if (tracing) opt.link_ranks = link_ranks(f.trace.trace_ranks, cluster.num_devices());

    Simulation run = simulate_plan(model, cluster, plan, opt);
    if (run.built.layout.offload_ignored)
        io.err << "smolcluster: warning: " << cluster.name << " has unified memory: the device's memory is the host's, "
               << "so CPU offload moves nothing and frees nothing; the plan runs without it\n";
    // Out of memory: what would fit, each change simulated — for plans small enough to simulate
    // a few dozen times over here (kFitSearchOps ops).
    if (run.summary.oom_report) {
        if (run.built.graph.size() <= kFitSearchOps) {
            run.summary.oom_report->fits = fitting_changes(model, cluster, plan);
            run.summary.oom_report->fits_network = "analytic";
        } else {
            run.summary.oom_report->fits_skipped = "the plan has " + std::to_string(run.built.graph.size()) +
                                                   " ops, too many to search changes here; smolcluster describe lists "
                                                   "each strategy and offload for a cluster";
        }
    }
    const traces::Summary& s = run.summary;

    if (tracing)
        write_trace(f.trace.trace, f.trace.trace_ranks, f.trace.force, run.built.graph, run.timeline,
                    run_metadata(io.command_line, model, cluster, run.built.layout, plan));
    if (!f.kernels.empty())
        write_text_file(f.kernels, kernel_table_csv(run.built.graph, cluster, parse_ranks(f.trace.trace_ranks, run.built.graph.ranks())),
                        f.trace.force, "--kernels");
    if (f.json)
        io.out << to_json(s).dump(2, ' ', false, Json::error_handler_t::replace) << '\n';
    else {
        traces::print_table(io.out, s);
        if (cluster.groups.size() > 1 && !cluster.description.empty())
            io.out << "\n  cluster: " << cluster.description << "\n";
        if (tracing) io.out << "\n  trace written to " << f.trace.trace << " (open it in https://ui.perfetto.dev)\n";
        if (!f.kernels.empty()) io.out << "\n  kernels of micro-batch 0 and the step written to " << f.kernels << "\n";
    }
    if (!s.fits()) {
        io.err << "smolcluster: the plan does not fit: " << s.oom->device << " could not allocate "
               << to_string_binary(s.oom->requested) << " of " << to_string(s.oom->tier) << " memory with "
               << to_string_binary(s.oom->free) << " free"
               << (s.oom_report ? " (" + s.oom_report->buffer + ")" : std::string()) << '\n';
        if (s.oom_report && !s.oom_report->fits.empty())
            io.err << "smolcluster: it fits with " << s.oom_report->fits.front().change << '\n';
        return 3;
    }
    return 0;
}

}  // namespace

Command add_simulate(CLI::App& parent) {
    auto f = std::make_shared<SimulateFlags>();
    CLI::App* app = parent.add_subcommand("simulate", "simulate one training step and summarise it");
    add_plan_flags(*app, f->plan);
    add_trace_flags(*app, f->trace);
    app->add_option("--kernels", f->kernels,
                    "write every kernel of micro-batch 0 and of the step (optimizer) as the simulator prices it, per "
                    "rank of --trace-ranks, to FILE (CSV: shape, FLOPs, bytes, start and run time, achieved rates)");
    app->add_flag("--json", f->json, "print the summary as one JSON object");
    return {app, [f](const Io& io) { return run_simulate(*f, io); }};
}

}  // namespace smol::tools
