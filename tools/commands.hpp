// The subcommands of `smolcluster`. Each lives in its own file (cmd_<name>.cpp), registers its
// flags on the parent app and returns how to run it once parsed; cli.cpp only dispatches.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace smol::tools {

struct Io {
    std::ostream& out;
    std::ostream& err;
    bool err_is_terminal = false;   // progress bars draw only on a terminal
    std::string command_line;       // as typed, for the run metadata of traces
    std::vector<std::string> argv;       // the command line as given, program name first
};

struct Command {
    CLI::App* app;                       // the subcommand, owned by the parent app
    std::function<int(const Io&)> run;   // exit status (see cli.hpp)
};

/// Prints an error as the command line does and returns its exit status (2 bad input, else 1).
int print_error(const std::exception& e, std::ostream& err);

Command add_simulate(CLI::App& parent);
Command add_describe(CLI::App& parent);
Command add_sweep(CLI::App& parent);
Command add_plot(CLI::App& parent);
Command add_models(CLI::App& parent);
Command add_clusters(CLI::App& parent);
Command add_run(CLI::App& parent);
Command add_validate(CLI::App& parent);
Command add_calibrate(CLI::App& parent);
Command add_export(CLI::App& parent);

}  // namespace smol::tools
