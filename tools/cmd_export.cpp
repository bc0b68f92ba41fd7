// `smolcluster export`: a plan's op graph in another tool's format — MLCommons Chakra execution
// traces, one file per rank, and the communicator groups, for ASTRA-sim to replay (traces/chakra.hpp).
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "tools/commands.hpp"
#include "tools/output_file.hpp"
#include "tools/plan_flags.hpp"
#include "tools/simulation.hpp"
#include "traces/chakra.hpp"

namespace smol::tools {

namespace {

struct ExportFlags {
    PlanFlags plan;
    std::string format, out, prefix = "smolcluster";
    bool force = false;
    bool durations = false;
};

std::string trace_path(const ExportFlags& f, int rank) {
    return (std::filesystem::path(f.out) / (f.prefix + "." + std::to_string(rank) + ".et")).string();
}
std::string group_path(const ExportFlags& f) {
    return (std::filesystem::path(f.out) / (f.prefix + ".comm_group.json")).string();
}

int run_export(const ExportFlags& f, const Io& io) {
    if (f.format != "chakra") fail_input("a format: chakra", "'" + f.format + "'" + did_you_mean(f.format, {"chakra"}), flag("--format"));
    if (f.prefix.empty() || f.prefix.find('/') != std::string::npos || f.prefix == "." || f.prefix == "..")
        fail_input("a file name prefix without '/'", "'" + f.prefix + "'", flag("--prefix"));
    const Model model = load_model_warning(f.plan.model, io.err);
    const topo::Cluster cluster = resolve_cluster(f.plan);
    const strategies::Plan plan = resolve_plan(f.plan);
    print_warnings(f.plan, io.err);
    const strategies::Layout layout = strategies::resolve(model, cluster, plan);
    check_simulable(layout, plan);
    // Every target checked before anything is built or written.
    for (int r = 0; r < layout.devices; ++r) check_output_target(trace_path(f, r), f.force, "--out");
    check_output_target(group_path(f), f.force, "--out");

    // With --durations the plan is simulated, as `simulate` does, for each op's duration.
    std::optional<Simulation> run;
    std::optional<strategies::Built> graph_only;
    if (f.durations)
        run = simulate_plan(model, cluster, plan, resolve_sim_options(f.plan));
    else
        graph_only = strategies::build(model, cluster, plan);
    const strategies::Built& built = run ? run->built : *graph_only;
    const traces::ChakraWriter writer(built.graph, run ? &run->timeline : nullptr);
    traces::ChakraRankStats total;
    for (int r = 0; r < built.graph.ranks(); ++r) {
        OutputFile file(trace_path(f, r), f.force, "--out");
        std::ofstream out(file.temp_path(), std::ios::binary | std::ios::trunc);
        if (!out) file.fail_write("cannot open it");
        const traces::ChakraRankStats s = writer.write_rank(out, r);
        out.close();
        if (!out) file.fail_write("the write failed");
        file.commit();
        total.nodes += s.nodes;
        total.ctrl_deps += s.ctrl_deps;
        total.data_deps += s.data_deps;
        total.without_node += s.without_node;
    }
    write_text_file(group_path(f), writer.comm_group_json(), f.force, "--out");

    const int ranks = built.graph.ranks();
    io.out << "wrote " << ranks << " Chakra trace" << (ranks == 1 ? "" : "s") << " to " << f.out << ": " << f.prefix
           << ".0.et" << (ranks > 1 ? " … " + f.prefix + "." + std::to_string(ranks - 1) + ".et" : std::string()) << "\n"
           << "  " << total.nodes << " nodes, " << total.ctrl_deps << " ctrl deps (stream order), " << total.data_deps
           << " data deps (other edges)" << (built.graph.folded() ? "; folded replicas written out rank by rank" : "")
           << (run ? "; durations simulated (" + to_string(run->summary.iteration) + " step)" : std::string())
           << "\n  " << writer.groups().size() << " process group" << (writer.groups().size() == 1 ? "" : "s") << " in "
           << group_path(f) << "\n";
    if (total.without_node > 0)
        io.out << "  " << total.without_node << " allocs, frees and timers have no Chakra node; their dependencies pass through\n";
    if (writer.cross_rank_edges() > 0)
        io.out << "  " << writer.cross_rank_edges()
               << " graph edges between ranks are not in the traces (a trace names only its own nodes)\n";
    io.out << "  ASTRA-sim flags: --workload-configuration=" << (std::filesystem::path(f.out) / f.prefix).string()
           << " --comm-group-configuration=" << group_path(f) << "\n";
    // Workload::initialize_comm_groups (astra-sim/workload/Workload.cc) skips a file whose path
    // contains "empty", taking it as "no groups given".
    if (group_path(f).find("empty") != std::string::npos)
        io.err << "smolcluster: warning: ASTRA-sim ignores a --comm-group-configuration whose path contains \"empty\" ("
               << group_path(f) << "); choose another --out or --prefix\n";
    if (run && run->timeline.oom) {
        const OutOfMemory& oom = *run->timeline.oom;
        io.err << "smolcluster: the plan does not fit: " << oom.device << " could not allocate " << to_string_binary(oom.requested)
               << " of " << to_string(oom.tier) << " memory with " << to_string_binary(oom.free)
               << " free; ops after that allocation have no duration in the traces\n";
        return 3;
    }
    return 0;
}

}  // namespace

Command add_export(CLI::App& parent) {
    auto f = std::make_shared<ExportFlags>();
    CLI::App* app = parent.add_subcommand("export", "write a plan's op graph as Chakra execution traces (one per rank) for ASTRA-sim");
    add_plan_flags(*app, f->plan);
    app->add_option("--format", f->format, "the format: chakra")->required();
    app->add_option("--out", f->out, "the folder to write the traces into (created if missing)")->required();
    app->add_option("--prefix", f->prefix, "file names: PREFIX.RANK.et and PREFIX.comm_group.json (default smolcluster)");
    app->add_flag("--force", f->force, "overwrite existing files");
    app->add_flag("--durations", f->durations,
                  "simulate the plan and give every node its simulated duration (duration_micros), which ASTRA-sim "
                  "replays when its roofline model is off");
    return {app, [f](const Io& io) { return run_export(*f, io); }};
}

}  // namespace smol::tools
