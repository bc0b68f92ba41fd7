// `smolcluster validate`: simulate a plan (with --profile's measured rates), run it for real
// under mpirun, line the two timelines up op by op, and report the error per op class and per
// step; exit 1 when the step's error exceeds --tolerance.
#include <cmath>
#include <memory>

#include "sim/simulator.hpp"
#include "tools/commands.hpp"
#include "tools/execution.hpp"
#include "tools/plan_flags.hpp"
#include "traces/compare.hpp"

namespace smol::tools {

namespace {

struct ValidateFlags {
    PlanFlags plan;
    ExecFlags exec;
    double tolerance = 0.10;
    std::string trace_sim, trace_real, trace_ranks;
    bool force = false, json = false;
};

int validate_in_session(const ValidateFlags& f, const topo::Cluster& cluster, exec::Session& session, const Io& io) {
    std::unique_ptr<Execution> e;
    if (const int status = execute_plan(session, f.plan, f.exec, cluster, io, e)) return status;
    if (!session.root()) return 0;
    // The same graph (folding off), simulated on the cluster with the profile's figures.
    sim::SimOptions options = resolve_sim_options(f.plan);
    options.record_kernel_classes = true;
    options.record_links = !f.trace_sim.empty();
    if (options.record_links) options.link_ranks = link_ranks(f.trace_ranks, cluster.num_devices());
    const Timeline simulated = sim::simulate(e->built.graph, cluster, options);
    const traces::Comparison c = traces::compare(e->built.graph, simulated, e->measured.timeline);
    const bool passed = std::fabs(c.step_error) <= f.tolerance;

    const auto metadata = run_metadata(io.command_line, e->model, cluster, e->built.layout, e->plan);
    if (!f.trace_sim.empty())
        write_trace(f.trace_sim, f.trace_ranks, f.force, e->built.graph, simulated, metadata, "--trace-sim");
    if (!f.trace_real.empty())
        write_trace(f.trace_real, f.trace_ranks, f.force, e->built.graph, e->measured.timeline, metadata,
                    "--trace-real");
    if (f.json) {
        Json j = traces::to_json(e->built.graph, c);
        j["tolerance"] = f.tolerance;
        j["passed"] = passed;
        j["profile"] = cluster.profile.empty() ? Json(nullptr) : Json(cluster.profile);
        j["measured"] = to_json(e->summary);
        add_execution_json(j["measured"], *e);
        io.out << j.dump(2) << '\n';
    } else {
        const traces::StepInfo& i = e->summary.info;
        io.out << i.model << " on " << i.cluster << " (" << i.devices << (i.devices == 1 ? " device): " : " devices): ") << i.strategy << ", tp " << i.tp
               << " · pp " << i.pp << " · dp " << i.dp << ", " << i.microbatches << " micro-batches of " << i.micro_batch
               << ", seq " << i.seq << "; simulated "
               << (cluster.profile.empty() ? std::string("with the cluster's leads (no --profile)") : "with profile " + cluster.profile)
               << ", measured after " << f.exec.warmup << " warm-up step" << (f.exec.warmup == 1 ? "" : "s") << "\n\n";
        traces::print_comparison(io.out, e->built.graph, c);
        print_execution(io.out, *e);
        char buf[128];
        std::snprintf(buf, sizeof buf, "\n  %s: |step error| %.1f %% %s tolerance %.1f %%\n", passed ? "passed" : "FAILED",
                      std::fabs(c.step_error) * 100, passed ? "within" : "above", f.tolerance * 100);
        io.out << buf;
    }
    return passed ? 0 : 1;
}

int run_validate(const ValidateFlags& f, const Io& io) {
    if (!(f.tolerance >= 0)) fail_input("--tolerance must be a fraction of at least 0, such as 0.10", flag("--tolerance"));
    refuse_simulation_only_flags(f.plan, "validate");
    const topo::Cluster cluster = resolve_cluster(f.plan);
    if (auto refused = refuse_without_mpirun(io, "validate", cluster.num_devices())) return *refused;
    check_trace_target(f.trace_sim, f.force, "--trace-sim");
    check_trace_target(f.trace_real, f.force, "--trace-real");
    if (!f.trace_ranks.empty()) (void)parse_ranks(f.trace_ranks, cluster.num_devices());
    return in_session(io, [&](exec::Session& session) { return validate_in_session(f, cluster, session, io); });
}

}  // namespace

Command add_validate(CLI::App& parent) {
    auto f = std::make_shared<ValidateFlags>();
    CLI::App* app = parent.add_subcommand(
        "validate", "simulate a plan, run it for real (under mpirun), and compare the two op by op");
    add_plan_flags(*app, f->plan);
    add_exec_flags(*app, f->exec);
    app->add_option("--tolerance", f->tolerance, "largest |step error| that passes (a fraction)")->capture_default_str();
    app->add_option("--trace-sim", f->trace_sim, "write the simulated Chrome trace to FILE");
    app->add_option("--trace-real", f->trace_real, "write the measured Chrome trace to FILE");
    app->add_option("--trace-ranks", f->trace_ranks, "ranks to trace, e.g. 0,1 (default: all up to 64, else 0-7)");
    app->add_flag("--force", f->force, "overwrite existing trace files");
    app->add_flag("--json", f->json, "print the comparison as one JSON object");
    return {app, [f](const Io& io) { return run_validate(*f, io); }};
}

}  // namespace smol::tools
