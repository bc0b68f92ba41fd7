#include "tools/cli.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <new>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "tools/commands.hpp"

namespace smol::tools {

namespace {

/// Every flag name of a subcommand ("--tp", "-o"), for did-you-mean.
std::vector<std::string> flag_names(const CLI::App& app) {
    std::vector<std::string> out;
    for (const CLI::Option* o : app.get_options()) {
        for (const std::string& n : o->get_lnames()) out.push_back("--" + n);
        for (const std::string& n : o->get_snames()) out.push_back("-" + n);
    }
    return out;
}

/// "unknown flag --tpp (did you mean --tp?)" for each argument CLI11 did not expect, from the
/// subcommand that was being parsed; empty when none is a flag (a stray value says itself).
std::string unknown_flags(const std::vector<Command>& commands) {
    for (const Command& c : commands) {
        if (!c.app->parsed()) continue;
        std::string out;
        const std::vector<std::string> names = flag_names(*c.app);
        for (const std::string& arg : c.app->remaining()) {
            if (arg.size() < 2 || arg[0] != '-') continue;
            const std::string name = arg.substr(0, arg.find('='));
            out += (out.empty() ? "" : "; ") + ("unknown flag " + name) + " for '" + c.app->get_name() + "'";
            const std::string near = nearest_name(name, names);
            if (!near.empty()) out += " (did you mean " + near + "?)";
        }
        if (!out.empty()) return out;
    }
    return "";
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
    CLI::App app{"smolcluster: which parallelism strategy, how long per step, does it fit in memory?"};
    app.name("smolcluster");
    app.require_subcommand(1);
    const std::vector<Command> commands{add_simulate(app), add_run(app),      add_validate(app), add_calibrate(app),
                                        add_sweep(app),    add_plot(app),     add_describe(app), add_models(app),
                                        add_clusters(app), add_export(app)};

    // An unknown subcommand, before CLI11 answers it with "A subcommand is required".
    if (argc > 1 && argv[1][0] != '-') {
        std::vector<std::string> names;
        for (const Command& c : commands) names.push_back(c.app->get_name());
        const std::string first = argv[1];
        if (std::find(names.begin(), names.end(), first) == names.end()) {
            std::string list;
            for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
            err << "smolcluster: error: unknown subcommand '" << first << "'" << did_you_mean(first, names)
                << "; subcommands: " << list << "\n(run 'smolcluster --help')\n";
            return 2;
        }
    }

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        out << app.help();
        return 0;
    } catch (const CLI::CallForAllHelp&) {
        out << app.help("", CLI::AppFormatMode::All);
        return 0;
    } catch (const CLI::ParseError& e) {
        // Help for a subcommand arrives as CallForHelp from the subcommand's parse.
        if (e.get_exit_code() == 0) {
            for (const Command& c : commands)
                if (c.app->parsed()) {
                    out << c.app->help();
                    return 0;
                }
            out << app.help();
            return 0;
        }
        const std::string unknown = dynamic_cast<const CLI::ExtrasError*>(&e) ? unknown_flags(commands) : "";
        err << "smolcluster: error: " << (unknown.empty() ? std::string(e.what()) : unknown) << "\n(run 'smolcluster --help')\n";
        return 2;
    }

    std::string command_line;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        command_line += (i ? " " : "") + (a.find_first_of(" \t\"'") == std::string::npos ? a : "'" + a + "'");
    }
    const Io io{out, err, &err == &std::cerr && isatty(STDERR_FILENO) == 1, command_line,
                std::vector<std::string>(argv, argv + argc)};
    // One error path (print_error): the project's errors by kind; the library exceptions that input
    // can cause (a file system refusal, memory running out) as bad input naming what to change;
    // anything else is a bug (exit 1).
    try {
        for (const Command& c : commands)
            if (c.app->parsed()) return c.run(io);
    } catch (const std::exception& e) {
        return print_error(e, err);
    }
    return 0;
}

int print_error(const std::exception& e, std::ostream& err) {
    if (const auto* se = dynamic_cast<const Error*>(&e)) {
        err << "smolcluster: error: " << se->what() << std::endl;
        return exit_status(se->kind());
    }
    if (const auto* fe = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
        err << "smolcluster: error: " << fe->path1().string() << ": " << fe->code().message() << std::endl;
        return 2;
    }
    if (dynamic_cast<const std::bad_alloc*>(&e)) {
        err << "smolcluster: error: out of memory: the plan needs more memory than this machine has; fewer devices "
               "(--nodes, --devices) or fewer micro-batches (--global-batch, --micro-batch)"
            << std::endl;
        return 2;
    }
    err << "smolcluster: internal error: " << e.what() << std::endl;
    return 1;
}

}  // namespace smol::tools
