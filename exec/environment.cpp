// The entry points of executor.hpp that read only the environment: built with or without MPI.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "exec/executor.hpp"

namespace smol::exec {

bool launched_by_mpirun() {
    // Open MPI's mpirun (ORTE, PRRTE), MPICH's and Intel MPI's hydra (PMI), PMIx launchers (Slurm).
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

std::optional<Fault> fault_from_env() {
    const char* v = std::getenv("SMOL_FAIL_AT");
    if (!v || !*v) return std::nullopt;
    const std::string text = v;
    Fault f;
    char mode[16] = {};
    long long op = -1;
    int consumed = 0;
    const int fields = std::sscanf(text.c_str(), "%d:%lld%n:%15s", &f.rank, &op, &consumed, mode);
    const bool plain = fields == 2 && static_cast<std::size_t>(consumed) == text.size();
    const bool hang = fields == 3 && std::string(mode) == "hang";
    if ((!plain && !hang) || f.rank < 0 || op < 0 || op > 0xfffffffeLL)
        fail_input("SMOL_FAIL_AT=RANK:OP or RANK:OP:hang, such as 1:40", "'" + text + "'");
    f.op = static_cast<OpId>(op);
    f.hang = hang;
    return f;
}

}  // namespace smol::exec
