#include "strategies/deepspeed_config.hpp"

#include <cmath>

#include <algorithm>

#include "core/error.hpp"

namespace smol::strategies {

namespace {

/// DeepSpeed sizes may be written as numbers (5e8) or integers; both must be whole and ≥ 0.
std::int64_t elements(const JsonView& j, const std::string& key) {
    const double v = j.number(key);
    if (!(v >= 0) || v > 9.0e18 || v != static_cast<double>(static_cast<std::int64_t>(v)))
        j.fail_member(key, "a whole number of elements, at least 0", describe_json(j.raw().at(key)));
    return static_cast<std::int64_t>(v);
}

/// Keys of an object not in `modelled`, as JSON paths: what DeepSpeed reads and smolcluster
/// does not model.
void report_others(const JsonView& j, std::initializer_list<const char*> modelled, std::vector<std::string>& out) {
    for (const std::string& k : j.keys())
        if (std::none_of(modelled.begin(), modelled.end(), [&](const char* m) { return k == m; }))
            out.push_back((j.path() == "/" ? "" : j.path()) + "/" + k);
}

std::string device(const JsonView& section) {
    section.expect_object();
    const std::string d = section.string_or("device", "none");
    if (d != "none" && d != "cpu" && d != "nvme")
        section.fail_member("device", "\"none\", \"cpu\" or \"nvme\"", describe_json(section.raw().at("device")));
    return d;
}

}  // namespace

DeepSpeedConfig read_deepspeed_config(const JsonView& root) {
    root.expect_object();
    DeepSpeedConfig c;
    // runtime/config.py: batch sizes; runtime/zero/config.py: the zero_optimization section.
    if (root.has("train_batch_size")) c.train_batch_size = root.positive_integer("train_batch_size");
    if (root.has("train_micro_batch_size_per_gpu")) {
        const std::int64_t m = root.positive_integer("train_micro_batch_size_per_gpu");
        if (m > 1'000'000) root.fail_member("train_micro_batch_size_per_gpu", "a micro-batch of at most 1,000,000", std::to_string(m));
        c.micro_batch = static_cast<int>(m);
    }
    if (root.has("gradient_accumulation_steps")) {
        const std::int64_t a = root.positive_integer("gradient_accumulation_steps");
        if (a > 1'000'000) root.fail_member("gradient_accumulation_steps", "at most 1,000,000 steps", std::to_string(a));
        c.gradient_accumulation_steps = static_cast<int>(a);
    }
    const bool fp16 = root.has("fp16") && root.at("fp16").boolean_or("enabled", false);
    const bool bf16 = (root.has("bf16") && root.at("bf16").boolean_or("enabled", false)) ||
                      (root.has("bfloat16") && root.at("bfloat16").boolean_or("enabled", false));
    if (fp16 && bf16) root.fail("fp16 or bf16 enabled, not both", "both enabled");
    if (fp16) c.dtype = DType::fp16;
    if (bf16) c.dtype = DType::bf16;
    for (const char* section : {"fp16", "bf16", "bfloat16"})
        if (root.has(section)) report_others(root.at(section), {"enabled"}, c.unmodelled);
    if (root.has("optimizer")) {
        const JsonView opt = root.at("optimizer");
        const std::string type = opt.string_or("type", "Adam");
        std::string lower(type.size(), ' ');
        std::transform(type.begin(), type.end(), lower.begin(), ::tolower);
        // runtime/config.py's optimizer names (ADAM_OPTIMIZER, ADAMW_OPTIMIZER, LAMB_OPTIMIZER …).
        if (lower == "adam" || lower == "adamw" || lower == "fusedadam") c.optimizer = Optimizer::adam;
        else if (lower == "lamb" || lower == "fusedlamb") c.optimizer = Optimizer::lamb;
        else c.unmodelled.push_back(opt.path() + "/type (" + type + ": priced as Adam)");
        report_others(opt, {"type"}, c.unmodelled);
    }
    if (root.has("zero_optimization")) {
        const JsonView z = root.at("zero_optimization");
        z.expect_object();
        if (z.has("stage")) {
            const std::int64_t s = z.integer("stage");
            if (s < 0 || s > 3) z.fail_member("stage", "a ZeRO stage from 0 to 3", std::to_string(s));
            c.zero_stage = static_cast<int>(s);
        }
        if (z.has("overlap_comm")) c.overlap_comm = z.boolean("overlap_comm");
        if (z.has("reduce_bucket_size")) c.reduce_bucket_size = elements(z, "reduce_bucket_size");
        if (z.has("allgather_bucket_size")) c.allgather_bucket_size = elements(z, "allgather_bucket_size");
        if (z.has("stage3_prefetch_bucket_size")) c.prefetch_bucket_size = elements(z, "stage3_prefetch_bucket_size");
        if (z.has("stage3_max_live_parameters")) c.max_live_parameters = elements(z, "stage3_max_live_parameters");
        if (z.has("stage3_max_reuse_distance")) c.max_reuse_distance = elements(z, "stage3_max_reuse_distance");
        if (z.has("stage3_param_persistence_threshold"))
            c.param_persistence_threshold = elements(z, "stage3_param_persistence_threshold");
        if (z.has("sub_group_size")) c.sub_group_size = elements(z, "sub_group_size");
        // ZeRO++ (config.py: zero_hpz_partition_size ge=0; 0 and 1 both leave it off, as
        // partition_parameters.py:977 creates the secondary group only above 1).
        if (z.has("zero_quantized_weights")) c.zero_quantized_weights = z.boolean("zero_quantized_weights");
        if (z.has("zero_quantized_gradients")) c.zero_quantized_gradients = z.boolean("zero_quantized_gradients");
        // LoCo (config.py: zeropp_loco_param, default None; e.g. {"err_beta": 0.8, "reset_T": 1024}):
        // given, qgZ's reduction keeps error feedback. Its two values change the numbers, not the
        // work (reset_T's zeroing is priced as the dequantization it replaces).
        if (z.has("zeropp_loco_param") && !z.raw().at("zeropp_loco_param").is_null()) {
            const JsonView loco = z.at("zeropp_loco_param");
            loco.expect_object();
            report_others(loco, {"err_beta", "reset_T"}, c.unmodelled);
            c.zeropp_loco = true;
        }
        if (z.has("zero_hpz_partition_size")) {
            const std::int64_t n = elements(z, "zero_hpz_partition_size");
            if (n > 1'000'000) z.fail_member("zero_hpz_partition_size", "at most 1,000,000 ranks", std::to_string(n));
            c.zero_hpz_partition_size = static_cast<int>(std::max<std::int64_t>(n, 1));
        }
        // MiCS (config.py: mics_shard_size, default -1; the engine takes MiCS_Optimizer above 0;
        // mics_hierarchical_params_gather, default false).
        if (z.has("mics_shard_size")) {
            const double n = z.number("mics_shard_size");
            if (!(n == std::floor(n)) || n > 1'000'000)
                z.fail_member("mics_shard_size", "a whole number of ranks (-1 or 0: off), at most 1,000,000",
                              describe_json(z.raw().at("mics_shard_size")));
            c.mics_shard_size = static_cast<int>(std::max(n, 0.0));
        }
        if (z.has("mics_hierarchical_params_gather")) c.mics_hierarchical = z.boolean("mics_hierarchical_params_gather");
        if (z.has("offload_optimizer")) {
            const JsonView o = z.at("offload_optimizer");
            c.offload_optimizer = device(o);
            if (o.has("buffer_count")) c.optimizer_buffer_count = elements(o, "buffer_count");
            // offload_config.py: ratio: float = Field(1.0, ge=0.0, le=1.0).
            if (o.has("ratio")) {
                const double r = o.number("ratio");
                if (!(r >= 0 && r <= 1)) o.fail_member("ratio", "a share of the optimizer from 0 to 1", describe_json(o.raw().at("ratio")));
                c.offload_ratio = r;
            }
            report_others(o, {"device", "buffer_count", "ratio"}, c.unmodelled);
        }
        if (z.has("offload_param")) {
            const JsonView o = z.at("offload_param");
            c.offload_param = device(o);
            if (o.has("buffer_count")) c.param_buffer_count = elements(o, "buffer_count");
            if (o.has("buffer_size")) c.param_buffer_size = elements(o, "buffer_size");
            report_others(o, {"device", "buffer_count", "buffer_size"}, c.unmodelled);
        }
        // contiguous_gradients and reduce_scatter are DeepSpeed's defaults (true), which is how
        // smolcluster lays ZeRO out; false is not modelled.
        for (const char* flag : {"contiguous_gradients", "reduce_scatter"})
            if (z.has(flag) && !z.boolean(flag)) c.unmodelled.push_back(z.path() + "/" + flag + " (false)");
        report_others(z,
                      {"stage", "overlap_comm", "reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                       "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_param_persistence_threshold",
                       "sub_group_size", "offload_optimizer", "offload_param", "contiguous_gradients", "reduce_scatter",
                       "zero_quantized_weights", "zero_hpz_partition_size", "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
                       "mics_hierarchical_params_gather"},
                      c.unmodelled);
    }
    if (root.has("activation_checkpointing")) {
        // deepspeed/runtime/activation_checkpointing/config.py: cpu_checkpointing moves the
        // checkpoints to CPU memory; which layers are checkpointed is the model's (--recompute).
        const JsonView a = root.at("activation_checkpointing");
        a.expect_object();
        if (a.has("cpu_checkpointing")) c.cpu_checkpointing = a.boolean("cpu_checkpointing");
        report_others(a, {"cpu_checkpointing"}, c.unmodelled);
    }
    report_others(root,
                  {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "fp16", "bf16",
                   "bfloat16", "optimizer", "zero_optimization", "activation_checkpointing"},
                  c.unmodelled);
    return c;
}

}  // namespace smol::strategies
