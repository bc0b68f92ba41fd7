// `smolcluster calibrate --out PROFILE.json`: measures this machine (and, under mpirun, its
// network) through the executor's own kernels and paths, and writes a profile that `simulate`,
// `validate` (and `--profile` anywhere) read in place of the cluster's datasheet leads.
#include <filesystem>
#include <fstream>
#include <memory>

#include "exec/calibrate.hpp"
#include "tools/commands.hpp"
#include "tools/output_file.hpp"
#include "tools/execution.hpp"
#include "tools/plan_flags.hpp"
#include "topologies/profile.hpp"

namespace smol::tools {

namespace {

struct CalibrateFlags {
    std::string out;
    bool quick = false, force = false;
    std::string scratch;
    std::string backend = "cpu";
};

int run_calibrate(const CalibrateFlags& f, const Io& io) {
    exec::require_available("calibrate");
    check_output_target(f.out, f.force, "--out");
    return in_session(io, [&](exec::Session& session) {
        exec::CalibrateOptions options;
        options.quick = f.quick;
        options.scratch = f.scratch;
        options.cuda = f.backend == "cuda";
        const topo::Profile profile = exec::calibrate(session, options, io.out);
        if (!session.root()) return 0;
        write_text_file(f.out, topo::to_json(profile).dump(1) + '\n', f.force, "--out");
        io.out << "profile written to " << f.out << " (use it: smolcluster simulate … --profile " << f.out << ")\n";
        return 0;
    });
}

}  // namespace

Command add_calibrate(CLI::App& parent) {
    auto f = std::make_shared<CalibrateFlags>();
    CLI::App* app = parent.add_subcommand(
        "calibrate", "measure this machine (under mpirun: and its network) and write a profile for --profile");
    app->add_option("--out", f->out, "the profile JSON file to write")->required();
    app->add_flag("--quick", f->quick, "fewer shapes and message sizes (seconds instead of about a minute)");
    app->add_option("--scratch", f->scratch, "directory for the file I/O benchmark (default: the temporary directory)");
    app->add_option("--backend", f->backend,
                    "cpu: this host's cores through the CPU executor (default); cuda: each rank's GPU and NCCL "
                    "(cuBLASLt GEMMs per dtype, the CUDA backend's kernels, pinned copies), a GPU's profile")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    app->add_flag("--force", f->force, "overwrite an existing profile");
    return {app, [f](const Io& io) { return run_calibrate(*f, io); }};
}

}  // namespace smol::tools
