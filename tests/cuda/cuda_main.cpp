// The CUDA tests' main. Without a GPU it prints "skipped: no GPU (…)" and exits 77, which CTest
// counts as skipped (SKIP_RETURN_CODE 77, tests/CMakeLists.txt), not passed and not failed.
// Under mpirun (tests tagged [mpi]) every rank needs a GPU of its own: a host with fewer GPUs
// than ranks skips the same way. Listing tests (--list-tests and the like) needs no GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "catch_runner.hpp"
#include "cuda_support.hpp"
#include "exec/cuda/backend.hpp"
#include "topologies/localhost.hpp"

namespace {
std::unique_ptr<smol::exec::Session> the_session;
}

smol::exec::Session& smol::test::session() {
    if (!the_session) FAIL("this test runs under mpirun (tagged [mpi])");
    return *the_session;
}

int main(int argc, char** argv) {
    bool listing = false;
    for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
    if (!listing) {
        smol::exec::cuda::set_cuda_environment();
        int count = 0;
        const cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0) {
            std::printf("skipped: no GPU (cudaGetDeviceCount: %s)\n",
                        e != cudaSuccess ? smol::exec::cuda::describe(e).c_str() : "0 devices");
            return 77;
        }
        const int ranks = smol::topo::mpi_local_size_from_env();
        if (ranks > count) {
            std::printf("skipped: %d GPUs needed on this host (one per rank), found %d\n", ranks, count);
            return 77;
        }
    }
    if (smol::exec::launched_by_mpirun()) the_session = std::make_unique<smol::exec::Session>();
    const int failed = smol::test::run_catch(argc, argv);
    the_session.reset();
    return failed == 0 ? 0 : 1;   // never 77, which means skipped
}
