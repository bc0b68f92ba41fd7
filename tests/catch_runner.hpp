// Runs the Catch2 session of an executable with its own main (catch_runner.cpp holds Catch's
// implementation, so each main stays a small file).
#pragma once

namespace smol::test {

/// Catch::Session().run(argc, argv): the number of failed test cases.
int run_catch(int argc, char** argv);

}  // namespace smol::test
