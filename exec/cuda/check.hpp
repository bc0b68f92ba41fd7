// Every CUDA runtime call of the backend goes through check(): an error becomes smol::Error with
// the operation named ("cudaMemcpyAsync of 12 MB, device to host, for op 'copy L3 mb0': …"),
// never a silent failure or a crash later.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace smol::exec::cuda {

/// "cudaErrorMemoryAllocation (out of memory)".
std::string describe(cudaError_t e);
/// Throws Error(internal) "WHAT failed: cudaErrorX (text)" unless e is cudaSuccess.
void check(cudaError_t e, const std::string& what);

}  // namespace smol::exec::cuda
