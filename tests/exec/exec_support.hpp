// Shared by the exec tests: the MPI session of a test process started by mpirun (tests tagged
// [mpi] run under `mpirun -np 2` and `-np 4`; the others run as one plain process).
#pragma once

#include "exec/executor.hpp"

namespace smol::test {

/// The process's MPI session; only for tests tagged [mpi] (fails the test when not under mpirun).
exec::Session& session();

}  // namespace smol::test
