// DeepSpeed's ds_config.json: modelled keys read, every other key reported, bad values named.
#include <catch2/catch.hpp>

#include "core/json.hpp"
#include "strategies/deepspeed_config.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {
DeepSpeedConfig read(const std::string& text) {
    const Json doc = parse_json_text(text, "ds_config.json");
    return read_deepspeed_config(JsonView(doc, "ds_config.json"));
}
}  // namespace

TEST_CASE("a DeepSpeed config's modelled keys are read, the others are reported", "[strategies][deepspeed]") {
    const DeepSpeedConfig c = read(R"({
        "train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
        "bf16": {"enabled": true},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "scheduler": {"type": "WarmupLR"},
        "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": 5e8,
                              "stage3_prefetch_bucket_size": 1e7, "stage3_max_live_parameters": 3e8,
                              "stage3_max_reuse_distance": 0, "stage3_param_persistence_threshold": 1e4,
                              "round_robin_gradients": true},
        "steps_per_print": 10})");
    CHECK(c.zero_stage == 3);
    CHECK(c.overlap_comm == true);
    CHECK(c.reduce_bucket_size == 500'000'000);
    CHECK(c.prefetch_bucket_size == 10'000'000);
    CHECK(c.max_live_parameters == 300'000'000);
    CHECK(c.max_reuse_distance == 0);
    CHECK(c.param_persistence_threshold == 10'000);
    CHECK(c.train_batch_size == 64);
    CHECK(c.micro_batch == 2);
    CHECK(c.gradient_accumulation_steps == 4);
    CHECK(c.dtype == DType::bf16);
    CHECK(c.optimizer == Optimizer::adam);   // AdamW: Adam's state and traffic
    CHECK(read(R"({"optimizer": {"type": "Lamb"}})").optimizer == Optimizer::lamb);
    const DeepSpeedConfig off = read(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme", "buffer_count": 4},
                                                                  "offload_param": {"device": "cpu"}}})");
    CHECK(off.offload_optimizer == "nvme");
    CHECK(off.offload_param == "cpu");
    const std::vector<std::string> expected{"/optimizer/params", "/zero_optimization/round_robin_gradients", "/scheduler",
                                            "/steps_per_print"};
    for (const auto& k : expected)
        CHECK(std::find(c.unmodelled.begin(), c.unmodelled.end(), k) != c.unmodelled.end());
    CHECK(c.unmodelled.size() == expected.size());
}

TEST_CASE("ZeRO++'s keys are read", "[strategies][deepspeed][zeropp]") {
    const DeepSpeedConfig c = read(R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true,
        "zero_hpz_partition_size": 8, "zero_quantized_gradients": true}})");
    CHECK(c.zero_quantized_weights == true);
    CHECK(c.zero_hpz_partition_size == 8);
    CHECK(c.zero_quantized_gradients == true);
    CHECK(c.unmodelled.empty());
    // DeepSpeed's Field(1, ge=0): 0 leaves hpZ off, as 1 does.
    CHECK(read(R"({"zero_optimization": {"zero_hpz_partition_size": 0}})").zero_hpz_partition_size == 1);
    CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"zero_hpz_partition_size": -2}})"); }),
               Catch::Contains("/zero_optimization/zero_hpz_partition_size"));
}

TEST_CASE("MiCS's keys are read", "[strategies][deepspeed][mics]") {
    const DeepSpeedConfig c = read(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8,
        "mics_hierarchical_params_gather": false}})");
    CHECK(c.mics_shard_size == 8);
    CHECK(c.mics_hierarchical == false);
    CHECK(c.unmodelled.empty());
    // config.py's default, -1, leaves MiCS off (the engine takes it above 0).
    CHECK(read(R"({"zero_optimization": {"mics_shard_size": -1}})").mics_shard_size == 0);
    const DeepSpeedConfig h = read(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 16,
        "mics_hierarchical_params_gather": true}})");
    CHECK(h.mics_hierarchical == true);
    CHECK(h.unmodelled.empty());
    CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"mics_shard_size": 2.5}})"); }),
               Catch::Contains("/zero_optimization/mics_shard_size") && Catch::Contains("2.5"));
}

TEST_CASE("LoCo's parameters are read", "[strategies][deepspeed][zeropp]") {
    const DeepSpeedConfig c = read(R"({"zero_optimization": {"stage": 3, "zero_quantized_gradients": true,
        "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}}})");
    CHECK(c.zeropp_loco);
    CHECK(c.unmodelled.empty());
    // config.py's default is None: null leaves it off; a key LoCo does not have is reported.
    CHECK_FALSE(read(R"({"zero_optimization": {"zeropp_loco_param": null}})").zeropp_loco);
    const DeepSpeedConfig odd = read(R"({"zero_optimization": {"zeropp_loco_param": {"err_beta": 0.8, "warmup": 3}}})");
    CHECK(odd.zeropp_loco);
    CHECK(odd.unmodelled == std::vector<std::string>{"/zero_optimization/zeropp_loco_param/warmup"});
    CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"zeropp_loco_param": 0.8}})"); }),
               Catch::Contains("/zero_optimization/zeropp_loco_param"));
}

TEST_CASE("Twin-Flow's ratio is read", "[strategies][deepspeed][offload]") {
    const DeepSpeedConfig c = read(R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e8,
        "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})");
    CHECK(c.offload_ratio == 0.3);
    CHECK(c.sub_group_size == 100'000'000);
    CHECK(c.unmodelled.empty());
    // offload_config.py: Field(1.0, ge=0.0, le=1.0).
    CHECK(read(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu", "ratio": 0}}})").offload_ratio == 0.0);
    CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"offload_optimizer": {"ratio": -0.1}}})"); }),
               Catch::Contains("/zero_optimization/offload_optimizer/ratio") && Catch::Contains("from 0 to 1"));
}

TEST_CASE("bad DeepSpeed config values name the file and the key", "[strategies][deepspeed]") {
    SECTION("stage out of range") {
        CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"stage": 4}})"); }),
                   Catch::Contains("ds_config.json") && Catch::Contains("/zero_optimization/stage"));
    }
    SECTION("a fractional bucket") {
        CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"reduce_bucket_size": 2.5}})"); }),
                   Catch::Contains("reduce_bucket_size") && Catch::Contains("whole number"));
    }
    SECTION("fp16 and bf16 together") {
        CHECK_THAT(test::bad_input_message([] { read(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"); }),
                   Catch::Contains("not both"));
    }
    SECTION("an unknown offload device") {
        CHECK_THAT(test::bad_input_message([] { read(R"({"zero_optimization": {"offload_param": {"device": "gpu"}}})"); }),
                   Catch::Contains("/zero_optimization/offload_param/device"));
    }
}
