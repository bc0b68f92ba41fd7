// The per-block arithmetic of a transformer (core/transformer.cpp): parameters, model FLOPs,
// activation bytes and the kernels Megatron-LM launches, for every shape TransformerShape
// describes (dense or mixture of experts, multi-head or latent attention, eager or flash).
// Model (core/model.hpp) is the interface; this is its engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.hpp"

namespace smol::detail {

/// Throws bad_input naming the model when a size is not positive or the shape is inconsistent
/// (heads not dividing hidden without an explicit head_dim, heads not a multiple of the kv heads,
/// experts without top-k, top-k above the experts, a layer index out of range, …).
void check_transformer_shape(const std::string& name, const TransformerShape& m);
/// Trainable parameters; `active`: only the routed experts one token goes through (top-k of E).
std::int64_t transformer_parameters(const TransformerShape& m, bool active);
/// Embedding, layers…, head for one micro-batch on one tensor- and expert-parallel rank.
std::vector<Block> transformer_blocks(const std::string& name, const TransformerShape& m, const Workload& w);

}  // namespace smol::detail
