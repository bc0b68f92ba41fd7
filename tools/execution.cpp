#include "tools/execution.hpp"

#include <unistd.h>

#include <cstdio>

#include "sim/simulator.hpp"
#include "tools/pipeline_split.hpp"
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
    app.add_option("--backend", f.backend,
                   "auto (the cluster's device kind: cuda for GPUs, cpu for CPU boards), cpu (MPI + BLAS) or cuda "
                   "(CUDA + NCCL, one GPU per rank)")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
        ->capture_default_str();
    app.add_flag("--tf32", f.tf32, "cuda: run fp32 GEMMs on TF32 tensor cores (off, as in PyTorch by default)");
}

BackendKind pick_backend(const std::string& choice, const topo::Cluster& cluster) {
    if (choice == "cpu") return BackendKind::cpu;
    if (choice == "cuda") return BackendKind::cuda;
    bool gpus = false, cpus = false;
    for (const topo::NodeGroup& g : cluster.groups) (g.device.is_cpu ? cpus : gpus) = true;
    if (gpus && cpus)
        fail_input("--backend auto cannot pick one backend for " + cluster.name +
                       ", which has both GPUs and CPU boards: pass --backend cpu or --backend cuda",
                   flag("--backend"));
    return gpus ? BackendKind::cuda : BackendKind::cpu;
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
    const BackendKind backend = pick_backend(exec_flags.backend, cluster);
    if (backend == BackendKind::cuda && !exec::cuda_built())
        fail_input("this plan runs on GPUs (" + cluster.name + "), and smolcluster was built without the CUDA backend "
                   "(CMake found no CUDA toolkit with cuBLASLt and NCCL): rebuild where they are installed, or pass "
                   "--backend cpu to run it on this host's CPUs", flag("--backend"));
    if (exec_flags.tf32 && backend != BackendKind::cuda)
        fail_input("--tf32 puts fp32 GEMMs on a GPU's TF32 tensor cores, and this run uses the CPU backend", flag("--tf32"));
    Model model = load_model(plan_flags.model);
    // The pipeline split `simulate` uses (speed-balanced on stages of mixed device kinds).
    strategies::Plan plan = with_pipeline_split(model, cluster, resolve_plan(plan_flags));
    plan.fold = false;   // the executor runs every rank's own ops
    strategies::Built built = strategies::build(model, cluster, plan);
    exec::check_same_graph(session, built.graph);

    // Memory first: the simulated peak of this rank and the executor's workspace against what
    // the machine has. CPU backend: every tier in DRAM (NVMe is disk), summed over the host's
    // ranks. CUDA backend: the device tier and the backend's workspace on each rank's GPU, the
    // host tier in the host's DRAM.
    sim::SimOptions quick;
    quick.network = sim::NetworkMode::analytic;
    quick.record_memory = false;
    const Timeline predicted = sim::simulate(built.graph, cluster, quick);
    const auto& peak = predicted.peak[static_cast<std::size_t>(session.rank())];
    const bool gpu = backend == BackendKind::cuda;
    const Bytes host_need = gpu ? peak[static_cast<int>(Tier::host)]
                                : peak[static_cast<int>(Tier::device)] + peak[static_cast<int>(Tier::host)] +
                                      exec::cpu_workspace(built.graph, session.rank());
    const exec::HostMemory host = exec::host_memory(session, host_need);
    exec::GpuMemory device;
    if (gpu) device = exec::gpu_memory(session, peak[static_cast<int>(Tier::device)] + exec::cuda_workspace(built.graph, session.rank()));
    if (predicted.oom || !host.fits || !device.fits) {
        if (root) {
            if (predicted.oom)
                io.err << "smolcluster: the plan does not fit: " << predicted.oom->device << " could not allocate "
                       << to_string_binary(predicted.oom->requested) << " of " << to_string(predicted.oom->tier)
                       << " memory with " << to_string_binary(predicted.oom->free) << " free\n";
            else if (!device.fits)
                io.err << "smolcluster: the plan does not fit this GPU: rank " << device.rank << " needs "
                       << to_string_binary(device.need) << " of device memory (simulated peak plus the CUDA backend's workspace) "
                       << "and its " << device.device << " has " << to_string_binary(device.available) << " free\n";
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
    options.allow_tf32 = exec_flags.tf32;
    exec::Measured measured = gpu ? exec::run_cuda(session, built.graph, cluster, options)
                                  : exec::run_cpu(session, built.graph, cluster, options);

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
        resident += (r ? ", " : "") + to_string_binary(m.resident_peak[r]);
    if (m.resident_peak.size() > 8) resident += ", …";
    row("resident (VmHWM)", resident + " per rank; workspace " + to_string_binary(m.workspace));
    bool device_peaks = false;
    for (Bytes b : m.device_peak) device_peaks = device_peaks || b > Bytes(0);
    if (device_peaks) {
        std::string peaks;
        for (std::size_t r = 0; r < m.device_peak.size() && r < 8; ++r) peaks += (r ? ", " : "") + to_string_binary(m.device_peak[r]);
        if (m.device_peak.size() > 8) peaks += ", …";
        row("device pool peak", peaks + " per rank (the GPU allocator's high-water mark)");
    }
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
    Json device = Json::array();
    for (Bytes b : m.device_peak) device.push_back(b.count());
    j["device_pool_peak_bytes"] = device;
}

}  // namespace smol::tools
