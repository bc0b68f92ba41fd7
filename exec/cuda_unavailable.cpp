// The CUDA entry points of executor.hpp in a build with MPI but without CUDA, cuBLASLt or NCCL:
// each says so (exit 2); the CPU backend is unaffected.
#include "core/error.hpp"
#include "exec/cuda/measure.hpp"
#include "exec/executor.hpp"

namespace smol::exec {

namespace {
[[noreturn]] void unavailable() {
    fail_input("smolcluster was built without the CUDA backend: CMake found no CUDA toolkit with cuBLASLt and NCCL "
               "when it configured (install them, or point CMake at them with -DCUDAToolkit_ROOT=… and -DNCCL_ROOT=…, "
               "and rebuild); --backend cpu runs the plan on this host's CPUs");
}
}  // namespace

bool cuda_built() { return false; }
GpuMemory gpu_memory(Session&, Bytes) { unavailable(); }
Measured run_cuda(Session&, const OpGraph&, const topo::Cluster&, const ExecOptions&) { unavailable(); }
cuda::GpuFigures cuda::measure_session(Session&, const MeasureOptions&) { unavailable(); }

}  // namespace smol::exec
