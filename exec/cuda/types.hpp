// The few plain types the CUDA kernels (kernels.cu, compiled by nvcc) share with the planning
// code (plan.hpp): no other includes, so nvcc never parses the op graph's headers.
#pragma once

#include <cstdint>

namespace smol::exec::cuda {

/// The element type of a kernel's operands.
enum class Element : std::uint8_t { bf16, fp16, fp32 };

/// The tiles the flash kernels use (plan.hpp flash_tiles): a block of 16·warps query rows;
/// forward key tiles of kFlashKeyTile, backward key tiles as wide as the query tile.
struct FlashTiles {
    std::int64_t d = 0;        // head dimension, padded to a multiple of 16
    int warps = 0;             // 4 or 2
    std::int64_t fwd_smem = 0, bwd_smem = 0;   // bytes of dynamic shared memory per block
};
inline constexpr std::int64_t kFlashKeyTile = 64;

}  // namespace smol::exec::cuda
