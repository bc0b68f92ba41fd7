// Running a plan for real, as `run` and `validate` both do it: one process per device started by
// mpirun, every rank building the same graph (checked), the plan's memory checked against what
// the hosts have before anything runs, then the executor's warm-up and measured steps.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/model.hpp"
#include "exec/executor.hpp"
#include "strategies/plan.hpp"
#include "tools/commands.hpp"
#include "tools/plan_flags.hpp"
#include "traces/summary.hpp"

namespace smol::tools {

struct ExecFlags {
    int warmup = 1;
    double timeout_s = 300;
    std::string scratch;
    std::string backend = "auto";   // auto | cpu | cuda
    bool tf32 = false;
};
/// --warmup, --timeout, --scratch, --backend, --tf32.
void add_exec_flags(CLI::App& app, ExecFlags& f);

/// The command that starts `argv` (program name first) on `ranks` processes of this machine:
/// "mpirun -np 2 ./smolcluster run --model …", with --allow-run-as-root for root and
/// --oversubscribe when there are more ranks than cores.
std::string mpirun_command(const std::vector<std::string>& argv, int ranks);

enum class BackendKind { cpu, cuda };
/// --backend: `cpu` or `cuda` as given; `auto` picks cuda when every device of the cluster is a
/// GPU and cpu when every one is a CPU board (bad_input for a mix: name one with --backend).
BackendKind pick_backend(const std::string& choice, const topo::Cluster& cluster);

/// Before MPI starts: the executor is built, and mpirun started this process. Otherwise prints
/// why (with the exact mpirun command for `devices` ranks) and returns exit status 2.
std::optional<int> refuse_without_mpirun(const Io& io, const char* command, int devices);

/// Runs `body` with MPI up. An error is printed on the rank that raises it, before MPI is shut
/// down, so every rank that fails says why; its exit status is returned (2 bad input, else 1).
int in_session(const Io& io, const std::function<int(exec::Session&)>& body);

struct Execution {
    Model model;
    topo::Cluster cluster;
    strategies::Plan plan;
    strategies::Built built;
    exec::Measured measured;          // timeline on rank 0 only
    traces::Summary summary;          // rank 0 only
};

/// Builds the plan (folding off), checks the world size, the graph on every rank and the hosts'
/// memory, and runs it. Returns 0 with `out` filled, or the exit status when it cannot run (2:
/// wrong world size; 3: the plan does not fit the hosts' memory), having printed why on rank 0.
/// `cluster` is the resolved cluster (validate passes one with a profile applied).
int execute_plan(exec::Session& session, const PlanFlags& plan_flags, const ExecFlags& exec_flags,
                 const topo::Cluster& cluster, const Io& io, std::unique_ptr<Execution>& out);

/// Rows after the summary table: the executor, clock alignment, resident memory.
void print_execution(std::ostream& out, const Execution& e);
/// The same as JSON members added to the summary's object.
void add_execution_json(Json& j, const Execution& e);

}  // namespace smol::tools
