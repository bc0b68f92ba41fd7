#include "exec/cuda/check.hpp"

#include "core/error.hpp"

namespace smol::exec::cuda {

std::string describe(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

void check(cudaError_t e, const std::string& what) {
    if (e != cudaSuccess) throw Error(ErrorKind::internal, what + " failed: " + describe(e));
}

}  // namespace smol::exec::cuda
