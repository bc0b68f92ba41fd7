// The exec tests' main: MPI comes up only when mpirun started the process (the [mpi] tests), so
// the same executable also runs the plain tests and lists tests for CTest without MPI.
#include <catch2/catch.hpp>

#include <memory>

#include "catch_runner.hpp"
#include "exec_support.hpp"

namespace {
std::unique_ptr<smol::exec::Session> the_session;
}

smol::exec::Session& smol::test::session() {
    if (!the_session) FAIL("this test runs under mpirun (tagged [mpi])");
    return *the_session;
}

int main(int argc, char** argv) {
    if (smol::exec::launched_by_mpirun()) the_session = std::make_unique<smol::exec::Session>();
    const int failed = smol::test::run_catch(argc, argv);
    the_session.reset();
    return failed;
}
