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
    const std::vector<Command> commands{add_simulate(app), add_sweep(app), add_plot(app), add_describe(app), add_models(app),
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
    const Io io{out, err, &err == &std::cerr && isatty(STDERR_FILENO) == 1, command_line};
    try {
        for (const Command& c : commands)
            if (c.app->parsed()) return c.run(io);
    } catch (const Error& e) {
        err << "smolcluster: error: " << e.what() << '\n';
        return e.kind() == ErrorKind::bad_input ? 2 : 1;
    } catch (const std::exception& e) {
        err << "smolcluster: internal error: " << e.what() << '\n';
        return 1;
    }
    return 0;
}

}  // namespace smol::tools
