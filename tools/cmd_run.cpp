// `smolcluster run`: executes one training step of a plan for real (mpirun, one process per
// device), after `--warmup` steps, and prints the same summary as `simulate`, measured.
#include <memory>

#include "tools/commands.hpp"
#include "tools/execution.hpp"
#include "tools/plan_flags.hpp"

namespace smol::tools {

namespace {

struct RunFlags {
    PlanFlags plan;
    TraceFlags trace;
    ExecFlags exec;
    bool json = false;
};

int run_in_session(const RunFlags& f, const topo::Cluster& cluster, exec::Session& session, const Io& io);

int run_run(const RunFlags& f, const Io& io) {
    refuse_simulation_only_flags(f.plan, "run");
    const topo::Cluster cluster = resolve_cluster(f.plan);
    if (auto refused = refuse_without_mpirun(io, "run", cluster.num_devices())) return *refused;
    check_trace_flags(f.trace, cluster.num_devices());
    return in_session(io, [&](exec::Session& session) { return run_in_session(f, cluster, session, io); });
}

int run_in_session(const RunFlags& f, const topo::Cluster& cluster, exec::Session& session, const Io& io) {
    std::unique_ptr<Execution> e;
    if (const int status = execute_plan(session, f.plan, f.exec, cluster, io, e)) return status;
    if (!session.root()) return 0;
    const bool tracing = !f.trace.trace.empty();
    if (tracing) write_trace(f.trace.trace, f.trace.trace_ranks, f.trace.force, e->built.graph, e->measured.timeline,
                             run_metadata(io.command_line, e->model, cluster, e->built.layout, e->plan));
    if (f.json) {
        Json j = to_json(e->summary);
        add_execution_json(j, *e);
        io.out << j.dump(2) << '\n';
    } else {
        traces::print_table(io.out, e->summary);
        print_execution(io.out, *e);
        if (tracing) io.out << "\n  trace written to " << f.trace.trace << " (open in ui.perfetto.dev)\n";
    }
    return 0;
}

}  // namespace

Command add_run(CLI::App& parent) {
    auto f = std::make_shared<RunFlags>();
    CLI::App* app = parent.add_subcommand(
        "run", "run one training step for real (under mpirun, one process per device) and summarise it");
    add_plan_flags(*app, f->plan);
    add_trace_flags(*app, f->trace);
    add_exec_flags(*app, f->exec);
    app->add_flag("--json", f->json, "print the summary as one JSON object");
    return {app, [f](const Io& io) { return run_run(*f, io); }};
}

}  // namespace smol::tools
