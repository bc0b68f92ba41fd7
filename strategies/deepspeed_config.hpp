// DeepSpeed's own configuration file (ds_config.json), read as DeepSpeed reads it
// (deepspeed/runtime/config.py, runtime/zero/config.py v0.19.6): the keys smolcluster models
// change the plan and the framework's behaviour; every other key is reported back, never
// silently ignored. Pure: the caller loads the JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/model.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

struct DeepSpeedConfig {
    std::optional<int> zero_stage;                       // zero_optimization.stage (0-3)
    std::optional<bool> overlap_comm;                    // zero_optimization.overlap_comm
    std::optional<std::int64_t> reduce_bucket_size;      // elements
    std::optional<std::int64_t> allgather_bucket_size;   // elements (stages 1-2)
    std::optional<std::int64_t> prefetch_bucket_size;    // stage3_prefetch_bucket_size
    std::optional<std::int64_t> max_live_parameters;     // stage3_max_live_parameters
    std::optional<std::int64_t> max_reuse_distance;      // stage3_max_reuse_distance
    std::optional<std::int64_t> param_persistence_threshold;  // stage3_param_persistence_threshold
    std::optional<std::string> offload_optimizer;        // offload_optimizer.device: none | cpu | nvme
    std::optional<std::string> offload_param;            // offload_param.device
    std::optional<std::int64_t> sub_group_size;          // zero_optimization.sub_group_size
    std::optional<std::int64_t> optimizer_buffer_count;  // offload_optimizer.buffer_count
    std::optional<double> offload_ratio;                 // offload_optimizer.ratio (Twin-Flow, 0-1)
    std::optional<std::int64_t> param_buffer_count;      // offload_param.buffer_count
    std::optional<std::int64_t> param_buffer_size;       // offload_param.buffer_size (elements)
    std::optional<bool> zero_quantized_weights;          // zero_optimization.zero_quantized_weights (ZeRO++ qwZ)
    std::optional<int> zero_hpz_partition_size;          // zero_optimization.zero_hpz_partition_size (ZeRO++ hpZ)
    std::optional<bool> zero_quantized_gradients;        // zero_optimization.zero_quantized_gradients (ZeRO++ qgZ)
    bool zeropp_loco = false;                            // zero_optimization.zeropp_loco_param given (LoCo, with qgZ)
    std::optional<int> mics_shard_size;                  // zero_optimization.mics_shard_size (MiCS; 0: off)
    std::optional<bool> mics_hierarchical;               // zero_optimization.mics_hierarchical_params_gather
    std::optional<bool> cpu_checkpointing;               // activation_checkpointing.cpu_checkpointing
    std::optional<Optimizer> optimizer;                  // optimizer.type: Adam, AdamW, FusedAdam → adam; Lamb → lamb
    std::optional<std::int64_t> train_batch_size;
    std::optional<int> micro_batch;                      // train_micro_batch_size_per_gpu
    std::optional<int> gradient_accumulation_steps;
    std::optional<DType> dtype;                          // fp16.enabled / bf16.enabled
    /// JSON paths of keys read but not modelled ("/scheduler", "/zero_optimization/round_robin_gradients"):
    /// what the caller reports as warnings.
    std::vector<std::string> unmodelled;
};

/// Reads a ds_config.json document. Bad values are bad_input errors naming the file and path.
DeepSpeedConfig read_deepspeed_config(const JsonView& root);

}  // namespace smol::strategies
