#include "tools/execution.hpp"

#include <unistd.h>

#include <cstdio>

#include "sim/simulator.hpp"
#include "tools/simulation.hpp"

namespace smol::tools {

namespace {

std::string shell_quote(const std::string& a) {
    if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@") ==
                          std::string::npos)
        return a;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string us(Time t) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g us", t.to_us());
    return buf;
}

}  // namespace

void add_exec_flags(CLI::App& app, ExecFlags& f) {
    app.add_option("--warmup", f.warmup, "steps run before the measured one")->capture_default_str();
    app.add_option("--timeout", f.timeout_s,
                   "seconds a rank may go without finishing an op before the run is stopped as hung")
        ->capture_default_str();
    app.add_option("--scratch", f.scratch, "directory for the NVMe tier's files (default: the temporary directory)");
}

std::string mpirun_command(const std::vector<std::string>& argv, int ranks) {
    std::string cmd = "mpirun";
    if (geteuid() == 0) cmd += " --allow-run-as-root";
    if (ranks > std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))) cmd += " --oversubscribe";
    cmd += " -np " + std::to_string(ranks);
    for (const std::string& a : argv) cmd += " " + shell_quote(a);
    return cmd;
}

std::optional<int> refuse_without_mpirun(const Io& io, const char* command, int devices) {
    exec::require_available(command);
    if (exec::launched_by_mpirun()) return std::nullopt;
    io.err << "smolcluster: error: '" << command << "' runs one process per device, started by mpirun; for this plan ("
           << devices << " device" << (devices == 1 ? "" : "s") << "):\n  " << mpirun_command(io.argv, devices) << '\n';
    return 2;
}

int in_session(const Io& io, const std::function<int(exec::Session&)>& body) {
    exec::Session session;
    int code = 0;
    try {
        code = body(session);
    } catch (const std::exception& e) {
        code = print_error(e, io.err);
        session.leave_with_error(code);
    }
    io.out.flush();
    return code;
}

int execute_plan(exec::Session& session, const PlanFlags& plan_flags, const ExecFlags& exec_flags,
                 const topo::Cluster& cluster, const Io& io, std::unique_ptr<Execution>& out) {
    const bool root = session.root();
    if (exec_flags.warmup < 0) fail_input("--warmup must be at least 0, found " + std::to_string(exec_flags.warmup), flag("--warmup"));
    if (!(exec_flags.timeout_s > 0)) fail_input("--timeout must be above 0 seconds", flag("--timeout"));
    const int devices = cluster.num_devices();
    if (session.size() != devices) {
        if (root)
            io.err << "smolcluster: error: mpirun started " << session.size() << " processes but the plan runs on "
                   << devices << " devices of " << cluster.name << "; run:\n  " << mpirun_command(io.argv, devices) << '\n';
        return 2;
    }
    Model model = load_model(plan_flags.model);
    strategies::Plan plan = resolve_plan(plan_flags);
    plan.fold = false;   // the executor runs every rank's own ops
    strategies::Built built = strategies::build(model, cluster, plan);
    exec::check_same_graph(session, built.graph);

    // Memory first: the simulated peak of this rank (every tier in DRAM; NVMe is disk) and the
    // executor's workspace, summed over the host's ranks, against what the host has.
    sim::SimOptions quick;
    quick.network = sim::NetworkMode::analytic;
    quick.record_memory = false;
    const Timeline predicted = sim::simulate(built.graph, cluster, quick);
    const auto& peak = predicted.peak[static_cast<std::size_t>(session.rank())];
    const Bytes need = peak[static_cast<int>(Tier::device)] + peak[static_cast<int>(Tier::host)] +
                       exec::cpu_workspace(built.graph, session.rank());
    const exec::HostMemory host = exec::host_memory(session, need);
    if (predicted.oom || !host.fits) {
        if (root) {
            if (predicted.oom)
                io.err << "smolcluster: the plan does not fit: " << predicted.oom->device << " needs "
                       << to_string(predicted.oom->requested) << " more " << to_string(predicted.oom->tier)
                       << " memory with " << to_string(predicted.oom->free) << " free\n";
            else
                io.err << "smolcluster: the plan does not fit this machine: its " << host.ranks << " ranks on "
                       << host.host << " need " << to_string(host.need)
                       << " (simulated peak memory plus the executor's workspace), and the host has "
                       << to_string(host.available) << " available (MemAvailable)\n";
        }
        return 3;
    }

    exec::ExecOptions options;
    options.warmup = exec_flags.warmup;
    options.timeout = Time::seconds(exec_flags.timeout_s);
    options.scratch = exec_flags.scratch;
    options.fault = exec::fault_from_env();
    exec::Measured measured = exec::run_cpu(session, built.graph, cluster, options);

    traces::Summary summary;
    if (root) {
        traces::StepInfo info = step_info(model, cluster, plan, built, "measured");
        info.measured = true;
        summary = summarize_plan(built, measured.timeline, info, plan);
    }
    out.reset(new Execution{std::move(model), cluster, std::move(plan), std::move(built), std::move(measured),
                            std::move(summary)});
    return 0;
}

void print_execution(std::ostream& out, const Execution& e) {
    const exec::Measured& m = e.measured;
    auto row = [&](const std::string& k, const std::string& v) {
        out << "  " << k << std::string(k.size() < 22 ? 22 - k.size() : 1, ' ') << v << '\n';
    };
    out << '\n';
    row("executor", m.backend);
    std::string clocks = std::to_string(m.clocks.hosts) + (m.clocks.hosts == 1 ? " host, one clock" : " hosts");
    for (int h = 1; h < m.clocks.hosts; ++h)
        clocks += "; host " + std::to_string(h) + " offset " + us(m.clocks.offset[static_cast<std::size_t>(h)]) + " ± " +
                  us(m.clocks.uncertainty[static_cast<std::size_t>(h)]) + ", drift " +
                  us(m.clocks.drift[static_cast<std::size_t>(h)]);
    clocks += "; ping-pong residual " + us(m.clocks.residual);
    row("clocks", clocks);
    std::string resident;
    for (std::size_t r = 0; r < m.resident_peak.size() && r < 8; ++r)
        resident += (r ? ", " : "") + to_string(m.resident_peak[r]);
    if (m.resident_peak.size() > 8) resident += ", …";
    row("resident (VmHWM)", resident + " per rank; workspace " + to_string(m.workspace));
}

void add_execution_json(Json& j, const Execution& e) {
    const exec::Measured& m = e.measured;
    j["executor"] = m.backend;
    Json clocks{{"hosts", m.clocks.hosts}, {"residual_s", m.clocks.residual.to_seconds()}};
    Json offsets = Json::array(), uncertainty = Json::array(), drift = Json::array();
    for (int h = 0; h < m.clocks.hosts; ++h) {
        offsets.push_back(m.clocks.offset[static_cast<std::size_t>(h)].to_seconds());
        uncertainty.push_back(m.clocks.uncertainty[static_cast<std::size_t>(h)].to_seconds());
        drift.push_back(m.clocks.drift[static_cast<std::size_t>(h)].to_seconds());
    }
    clocks["offset_s"] = offsets;
    clocks["uncertainty_s"] = uncertainty;
    clocks["drift_s"] = drift;
    j["clocks"] = clocks;
    Json resident = Json::array();
    for (Bytes b : m.resident_peak) resident.push_back(b.count());
    j["resident_peak_bytes"] = resident;
    j["workspace_bytes"] = m.workspace.count();
}

}  // namespace smol::tools
