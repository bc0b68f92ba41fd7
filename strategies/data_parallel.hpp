// The data-parallel family. Every replica runs the whole model on its share of the batch; the
// flavours differ in how gradients are synchronised and how model states are stored.
//
//  ddp — PyTorch DDP (Li et al. 2020): gradients packed into buckets in reverse layer order
//        (25 MB by default, a 1 MB first bucket as PyTorch does), each bucket all-reduced on the
//        comm stream as soon as the backward of its last gradient is done, overlapping the rest
//        of backward; gradient accumulation runs the earlier micro-batches under no_sync; then
//        the optimizer step. dp = 1 has no communication at all.
#pragma once

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// Bytes of model state per parameter for mixed-precision Adam (Rajbhandari et al. 2020, K = 12):
/// 16-bit parameters and gradients plus fp32 master weights, momentum and variance. In fp32
/// training the parameters are the master weights: 4 + 4 + 8, the same 16 bytes.
struct StateBytes {
    int params, grads, optimizer;
};
StateBytes state_bytes(DType dtype);

/// Gradient buckets in the order they become ready (reverse block order): each lists the blocks
/// whose gradients it holds, the bytes it holds, and the block whose backward completes it.
struct Bucket {
    Bytes bytes;
    int ready_after_block;  // backward of this block fills the bucket
};
std::vector<Bucket> make_buckets(const std::vector<Block>& blocks, int grad_bytes_per_param, Bytes cap, Bytes first_cap);

OpGraph build_data_parallel(const Model& model, const Layout& layout, const Plan& plan);

}  // namespace smol::strategies
