// HuggingFace config.json files, read by their model_type (or, without one, by `architectures`).
//
// Each family has its reader in core/hf/<family>.cpp, written from transformers' own
// configuration_<family>.py and modeling_<family>.py (cited there). A reader turns the keys it
// knows into a TransformerShape. No key is ignored silently: a key the reader does not know is a
// bad-input error naming it when its name says it is a size or a count (`num_…`, `n_…`,
// `…_size`, `…_dim`, `…_rank`, `…experts…`) — reading the model without it could be wrong — and a
// warning otherwise, returned with the model (Model::warnings) for the command line to print.
//
// Training length: a config whose max_position_embeddings is a long-context extension (≥ 32,768)
// defaults to the length the model was pretrained at, where the config records it
// (rope_scaling.original_max_position_embeddings, original_max_position_embeddings,
// initial_context_length), else to 8,192 (Llama 3's pretraining length, Dubey et al. 2024 §3.4.1;
// also Gemma 2's context); Model::seq_note says which.
#pragma once

#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/model.hpp"

namespace smol {

/// A HuggingFace config.json as a model; bad_input names the file, the key and what was expected
/// (an unknown model_type lists the supported ones).
Model model_from_hf_config(const JsonView& json, const std::string& name);

/// The model_type values a reader exists for, sorted.
std::vector<std::string> hf_model_types();

/// The training length a long-context config defaults to when it does not record its own.
inline constexpr int kDefaultLongContextTrainingSeq = 8192;
/// max_position_embeddings from which a config counts as a long-context extension.
inline constexpr int kLongContextSeq = 32768;

}  // namespace smol
