// `smolcluster plot KIND INPUT -o OUT.png`: pictures of traces, sweeps, validations and kernel lists, drawn by
// tools/plot.py with Debian's python3 and python3-matplotlib. The script is looked for next to
// the binary (the build copies it there), then in ../share/smolcluster, then in the source tree.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <sys/wait.h>
#include <unistd.h>

#include "core/error.hpp"
#include "tools/commands.hpp"
#include "tools/output_file.hpp"

namespace smol::tools {

namespace {

namespace fs = std::filesystem;

/// Debian's interpreter, where python3-matplotlib installs (not a virtualenv's python3 on PATH).
constexpr const char* kPython = "/usr/bin/python3";

struct PlotFlags {
    std::string kind, input, output, window;
    bool svg = false, force = false;
};

fs::path find_script() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    std::vector<fs::path> candidates;
    if (!ec) {
        candidates.push_back(exe.parent_path() / "plot.py");
        candidates.push_back(exe.parent_path() / ".." / "share" / "smolcluster" / "plot.py");
    }
    candidates.push_back(fs::path(SMOL_SOURCE_DIR) / "tools" / "plot.py");
    for (const fs::path& p : candidates)
        if (fs::exists(p, ec)) return p;
    std::string where;
    for (const fs::path& p : candidates) where += "\n  " + p.string();
    throw Error(ErrorKind::internal, "tools/plot.py not found; looked in:" + where);
}

/// Runs argv[0] with `args`, waits, returns its exit status (127 when it cannot start).
int run_program(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw Error(ErrorKind::internal, "cannot start " + args[0]);
    if (pid == 0) {
        execv(argv[0], argv.data());
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int run_plot(const PlotFlags& f, const Io& io) {
    static const std::vector<std::string> kinds{"timeline", "memory", "sweep", "scaling", "validate", "kernels"};
    if (std::find(kinds.begin(), kinds.end(), f.kind) == kinds.end())
        fail_input("timeline, memory, sweep, scaling, validate or kernels", "'" + f.kind + "'" + did_you_mean(f.kind, kinds),
                   ErrorContext{"", "", "KIND"});
    {
        std::error_code ec;
        if (!fs::is_regular_file(f.input, ec))
            fail_input(f.input + (fs::exists(f.input, ec) ? " is not a regular file" : " does not exist"), {"", "", "INPUT"});
    }
    if (!f.window.empty()) {
        if (f.kind != "timeline" && f.kind != "memory")
            fail_input("--window applies to timeline and memory plots", ErrorContext{"", "", "--window"});
        double lo = 0, hi = 0;
        char tail = 0;
        if (std::sscanf(f.window.c_str(), "%lf,%lf%c", &lo, &hi, &tail) != 2 || !(hi > lo))
            fail_input("START,END in milliseconds with END above START, such as 10,25", "'" + f.window + "'",
                       ErrorContext{"", "", "--window"});
    }
    check_output_target(f.output, f.force, "-o");
    const fs::path script = find_script();
    if (!fs::exists(kPython) || run_program({kPython, "-c", "import matplotlib"}) != 0)
        throw Error(ErrorKind::internal,
                    "plots need Debian's python3 with matplotlib (/usr/bin/python3, package python3-matplotlib): "
                    "apt-get install python3-matplotlib");
    // plot.py writes a temporary file beside the picture (its format is given, not guessed from
    // the name); only a finished picture replaces the target.
    OutputFile out(f.output, f.force, "-o");
    std::vector<std::string> args{kPython, script.string(), f.kind, f.input, "-o", out.temp_path()};
    if (f.svg) args.push_back("--svg");
    if (!f.window.empty()) args.insert(args.end(), {"--window", f.window});
    const int rc = run_program(args);
    if (rc != 0) return rc == 2 ? 2 : 1;   // plot.py has said why on stderr; `out` removes its file
    out.commit();
    io.out << "wrote " << f.output << " (" << (f.svg ? "SVG" : "PNG, 1200 × 675 px") << ")\n";
    return 0;
}

}  // namespace

Command add_plot(CLI::App& parent) {
    auto f = std::make_shared<PlotFlags>();
    CLI::App* app = parent.add_subcommand("plot", "draw a timeline, memory, sweep, scaling, validate or kernels picture (matplotlib)");
    app->add_option("KIND", f->kind, "timeline, memory (from a trace), sweep, scaling (from sweep --json), validate, kernels (from simulate --kernels)")
        ->required();
    app->add_option("INPUT", f->input, "trace (.json or .json.gz), sweep JSON, validate JSON or kernels CSV")->required();
    app->add_option("-o,--output", f->output, "the picture to write (PNG, or SVG with --svg)")->required();
    app->add_flag("--svg", f->svg, "write SVG instead of PNG");
    app->add_option("--window", f->window, "timeline / memory: START,END in milliseconds");
    app->add_flag("--force", f->force, "overwrite an existing picture");
    return {app, [f](const Io& io) { return run_plot(*f, io); }};
}

}  // namespace smol::tools
