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
};

struct Command {
    CLI::App* app;                       // the subcommand, owned by the parent app
    std::function<int(const Io&)> run;   // exit status (see cli.hpp)
};

Command add_simulate(CLI::App& parent);
Command add_describe(CLI::App& parent);
Command add_sweep(CLI::App& parent);
Command add_plot(CLI::App& parent);
Command add_models(CLI::App& parent);
Command add_clusters(CLI::App& parent);

}  // namespace smol::tools
