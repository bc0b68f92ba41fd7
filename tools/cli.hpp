// The `smolcluster` command line, as a function so tests can run it in-process.
#pragma once

#include <ostream>

namespace smol::tools {

/// Exit status: 0 success; 2 bad input; 3 the plan does not fit in memory; 1 anything else.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace smol::tools
