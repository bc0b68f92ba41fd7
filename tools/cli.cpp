#include "tools/cli.hpp"

#include <iostream>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "core/error.hpp"
#include "tools/commands.hpp"

namespace smol::tools {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
    CLI::App app{"smolcluster: which parallelism strategy, how long per step, does it fit in memory?"};
    app.name("smolcluster");
    app.require_subcommand(1);
    const std::vector<Command> commands{add_simulate(app), add_run(app),      add_validate(app), add_calibrate(app),
                                        add_sweep(app),    add_plot(app),     add_describe(app), add_models(app),
                                        add_clusters(app)};

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
        err << "smolcluster: error: " << e.what() << "\n(run 'smolcluster --help')\n";
        return 2;
    }

    std::string command_line;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        command_line += (i ? " " : "") + (a.find_first_of(" \t\"'") == std::string::npos ? a : "'" + a + "'");
    }
    const Io io{out, err, &err == &std::cerr && isatty(STDERR_FILENO) == 1, command_line,
                std::vector<std::string>(argv, argv + argc)};
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
        return se->kind() == ErrorKind::bad_input ? 2 : 1;
    }
    err << "smolcluster: internal error: " << e.what() << std::endl;
    return 1;
}

}  // namespace smol::tools
