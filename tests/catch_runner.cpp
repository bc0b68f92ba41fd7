// Catch2's implementation without a main, for test executables with their own main (the exec
// and CUDA tests start MPI, or skip without a GPU, before Catch runs): compiled once for both.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.hpp"

int smol::test::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
