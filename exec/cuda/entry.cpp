// The CUDA entry points of executor.hpp (a build with CUDA, cuBLASLt and NCCL).
#include <cuda_runtime_api.h>

#include <mpi.h>

#include "exec/cuda/backend.hpp"
#include "exec/cuda/check.hpp"
#include "exec/executor.hpp"
#include "exec/mpi.hpp"
#include "exec/runner.hpp"

namespace smol::exec {

bool cuda_built() { return true; }

GpuMemory gpu_memory(Session& session, Bytes need) {
    Mpi& mpi = session.mpi();
    cuda::set_cuda_environment();
    const int device = cuda::device_for_rank(mpi.local_rank(), mpi.local_size(), cuda::visible_gpus(mpi.host_name()),
                                             mpi.host_name());
    cuda::check(cudaSetDevice(device), "cudaSetDevice");
    std::size_t free = 0, total = 0;
    cuda::check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    // The rank with the least to spare, found by a MINLOC over (spare, rank).
    struct {
        double spare;
        int rank;
    } local{static_cast<double>(free) - static_cast<double>(need.count()), mpi.rank()}, worst{};
    MPI_Allreduce(&local, &worst, 1, MPI_DOUBLE_INT, MPI_MINLOC, mpi.world());
    std::int64_t figures[2] = {need.count(), static_cast<std::int64_t>(free)};
    MPI_Bcast(figures, 2, MPI_INT64_T, worst.rank, mpi.world());
    char name[256] = {};
    if (mpi.rank() == worst.rank) cuda::device_description(device).copy(name, sizeof name - 1);
    MPI_Bcast(name, sizeof name, MPI_CHAR, worst.rank, mpi.world());
    GpuMemory out;
    out.rank = worst.rank;
    out.device = name;
    out.need = Bytes(figures[0]);
    out.available = Bytes(figures[1]);
    out.fits = worst.spare >= 0;
    return out;
}

Measured run_cuda(Session& session, const OpGraph& graph, const topo::Cluster& cluster, const ExecOptions& options) {
    cuda::CudaBackend backend(graph, session.mpi(), options);
    Runner runner(graph, cluster, session.mpi(), backend, options);
    return runner.run();
}

}  // namespace smol::exec
