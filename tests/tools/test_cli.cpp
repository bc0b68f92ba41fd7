// The command line as users and scripts see it: exit codes, messages that name the place, the
// --json contract, and the trace file.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sys/wait.h>
#include <sstream>

#include "core/json.hpp"
#include "exec/executor.hpp"
#include "tools/cli_fixtures.hpp"
#include "topologies/profile.hpp"

using namespace smol;
using namespace smol::test;
namespace fs = std::filesystem;

TEST_CASE("simulate prints the contract's --json keys", "[tools][cli]") {
    const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--json"});
    REQUIRE(r.code == 0);
    const Json j = Json::parse(r.out);
    for (const char* key : {"iteration_time_s", "samples_per_s", "tokens_per_s", "model_flops_per_iteration",
                            "tflops_per_device", "mfu", "peak_memory_bytes", "fits", "oom", "exposed_comm_s",
                            "bubble_fraction", "per_device", "events", "sim_wall_s"})
        CHECK(j.contains(key));
    CHECK(j["fits"] == true);
    CHECK(j["oom"].is_null());
    REQUIRE(j["per_device"].size() == 4);
    for (const auto& d : j["per_device"])
        for (const char* key : {"rank", "device", "peak_memory_bytes", "busy_s"}) CHECK(d.contains(key));
    CHECK(j["per_device"][1]["device"] == "node1/cpu0");
    // Samples per second and tokens per second agree with the step time.
    CHECK(j["samples_per_s"].get<double>() == Approx(4 / j["iteration_time_s"].get<double>()));
    CHECK(j["tokens_per_s"].get<double>() == Approx(4 * 1024 / j["iteration_time_s"].get<double>()));
    CHECK(j["events"].get<std::uint64_t>() > 0);
}

TEST_CASE("a plan that does not fit exits 3 with fits false and names the device", "[tools][cli]") {
    const Result r = cli({"simulate", "--model", "gpt2-xl", "--cluster", "pi5-1gbe", "--json"});
    CHECK(r.code == 3);
    const Json j = Json::parse(r.out);
    CHECK(j["fits"] == false);
    REQUIRE(j["oom"].is_object());
    CHECK(j["oom"]["device"] == "node0/cpu0");
    CHECK(j["oom"]["tier"] == "device");
    CHECK(j["oom"]["requested_bytes"].get<std::int64_t>() > j["oom"]["free_bytes"].get<std::int64_t>());
    CHECK_THAT(r.err, Catch::Contains("node0/cpu0"));
}

TEST_CASE("bad input exits 2 with a message that names the place", "[tools][cli]") {
    SECTION("malformed JSON: line and column") {
        TempFile f("smol-malformed.json", "{\n  \"name\": \"x\",\n  \"node_groups\": [1, 2,]\n}\n");
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", f.path.string()});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("smol-malformed.json"));
        CHECK_THAT(r.err, Catch::Contains("line 3"));
        CHECK_THAT(r.err, Catch::Contains("column"));
    }
    SECTION("a negative bandwidth") {
        std::string text = read(fs::path(SMOL_SOURCE_DIR) / "topologies/presets/pi5-1gbe.json");
        text.replace(text.find("\"1 Gbit/s\""), 10, "\"-1 Gbit/s\"");
        TempFile f("smol-negative.json", text);
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", f.path.string()});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("/node_groups/0/nics/bandwidth"));
        CHECK_THAT(r.err, Catch::Contains("-1 Gbit/s"));
    }
    SECTION("an unknown unit") {
        std::string text = read(fs::path(SMOL_SOURCE_DIR) / "topologies/presets/pi5-1gbe.json");
        text.replace(text.find("\"1 Gbit/s\""), 10, "\"1 Gbit/h\"");
        TempFile f("smol-unit.json", text);
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", f.path.string()});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("/node_groups/0/nics/bandwidth"));
        CHECK_THAT(r.err, Catch::Contains("Gbit/h"));
    }
    SECTION("an unknown preset suggests the nearest name") {
        const Result r = cli({"simulate", "--model", "gpt2-smal", "--cluster", "pi5-1gbe"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("did you mean 'gpt2-small'"));
        const Result c = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gb"});
        CHECK(c.code == 2);
        CHECK_THAT(c.err, Catch::Contains("did you mean 'pi5-1gbe'"));
    }
    SECTION("micro-batch not dividing the per-replica batch") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "8",
                              "--micro-batch", "3"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--micro-batch"));
        CHECK_THAT(r.err, Catch::Contains("does not divide the per-replica batch 2"));
    }
    SECTION("zero nodes") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--nodes", "0"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--nodes"));
        const Result j = cli({"simulate", "--model", "gpt2-small", "--cluster", data("cluster-zero-nodes.json")});
        CHECK(j.code == 2);
        CHECK_THAT(j.err, Catch::Contains("/node_groups/0/count"));
    }
    SECTION("a flag that is not a number") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--tp", "two"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--tp"));
    }
    SECTION("an unknown network mode") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--network", "fluid"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--network"));
    }
    SECTION("a HuggingFace config with an unknown size key names it") {
        std::string text = read(data("hf/Qwen2-7B.json"));
        text.replace(text.find("\"vocab_size\""), 0, "\"num_nextn_predict_layers\": 1,\n  ");
        TempFile f("smol-qwen2-mtp.json", text);
        const Result r = cli({"simulate", "--model", f.path.string(), "--cluster", "dgx-a100"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("smol-qwen2-mtp.json: at /num_nextn_predict_layers: unknown key "
                                          "'num_nextn_predict_layers' for model_type 'qwen2'"));
    }
    SECTION("an unknown model_type lists what is read") {
        TempFile f("smol-mamba.json", R"({"model_type": "mamba", "hidden_size": 768})");
        const Result r = cli({"describe", "--model", f.path.string()});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("expected a model_type smolcluster reads: bloom, deepseek_v2"));
    }
    SECTION("a bad --attention, and flash where it does not run") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--attention", "fast"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--attention: expected flash or eager"));
        const Result v100 = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx2-v100", "--attention", "flash"});
        CHECK(v100.code == 2);
        CHECK_THAT(v100.err, Catch::Contains("have compute capability 7.0"));
        // CPUs run PyTorch's own flash kernel: flash on request (eager by default), FlashAttention-2's
        // backend only.
        const Result pi = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--attention", "flash", "--json"});
        CHECK(pi.code == 0);
        const Result pi_eager = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--json"});
        CHECK(pi_eager.code == 0);
        CHECK(Json::parse(pi.out)["peak_memory_bytes"] < Json::parse(pi_eager.out)["peak_memory_bytes"]);
        const Result cudnn = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--attention", "flash",
                                  "--attention-backend", "fused"});
        CHECK(cudnn.code == 2);
        CHECK_THAT(cudnn.err, Catch::Contains("--attention-backend fused runs on NVIDIA GPUs"));
        CHECK_THAT(cudnn.err, Catch::Contains("are CPUs"));
        const Result implied = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--attention-backend", "flash"});
        CHECK(implied.code == 2);
        CHECK_THAT(implied.err, Catch::Contains("are CPUs, which default to eager attention: add --attention flash"));
    }
}

TEST_CASE("HuggingFace configs: warnings on stderr, the training length in the summary", "[tools][cli]") {
    SECTION("a key the reader does not know, naming no size, is a warning; the run goes on") {
        std::string text = read(data("hf/Mistral-7B-v0.1.json"));
        text.replace(text.find("\"vocab_size\""), 0, "\"my_note\": \"hello\",\n  ");
        TempFile f("smol-mistral-note.json", text);
        const Result r = cli({"describe", "--model", f.path.string()});
        CHECK(r.code == 0);
        CHECK_THAT(r.err, Catch::Contains("smolcluster: warning: "));
        CHECK_THAT(r.err, Catch::Contains("key 'my_note' is not read by the mistral reader"));
    }
    SECTION("a long-context config trains at its recorded length, and the summary says so") {
        const Result r = cli({"simulate", "--model", data("hf/Llama-3.1-8B.json"), "--cluster", "dgx-a100", "--strategy",
                              "fsdp", "--recompute", "selective"});
        CHECK(r.code == 0);
        CHECK_THAT(r.out, Catch::Contains("seq 8192, bf16, flash attention"));
        CHECK_THAT(r.out, Catch::Contains("seq 8192: max_position_embeddings 131072 is a long-context extension"));
        const Result j = cli({"simulate", "--model", data("hf/Llama-3.1-8B.json"), "--cluster", "dgx-a100", "--strategy",
                              "fsdp", "--seq", "2048", "--json"});
        const Json summary = Json::parse(j.out);
        CHECK(summary.at("seq") == 2048);
        CHECK(summary.at("seq_note") == "");
        CHECK(summary.at("attention") == "flash");
    }
    SECTION("a mixture of experts with --ep") {
        const Result r = cli({"simulate", "--model", data("hf/Mixtral-8x7B-v0.1.json"), "--cluster", "dgx-a100", "--nodes", "2",
                              "--ep", "8", "--pp", "2", "--stage-layers", "16,16", "--strategy", "zero1", "--recompute",
                              "full", "--seq", "4096", "--global-batch", "16", "--json"});
        CHECK(r.code == 0);
        const Json summary = Json::parse(r.out);
        CHECK(summary.at("ep") == 8);
        CHECK(summary.at("fits") == true);
    }
}

TEST_CASE("the trace file: contract fields, no overlaps, paired flows, byte-identical reruns", "[tools][trace]") {
    const fs::path a = fs::temp_directory_path() / "smol-trace-a.json";
    const fs::path b = fs::temp_directory_path() / "smol-trace-b.json";
    fs::remove(a);
    fs::remove(b);
    const std::vector<std::string> plan{"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "8"};
    auto with = [&](const fs::path& p) {
        auto v = plan;
        v.insert(v.end(), {"--trace", p.string()});
        return v;
    };
    // The same command twice gives the same bytes (the metadata holds the command line, so the
    // second run writes the same path after the first is moved away).
    REQUIRE(cli(with(a)).code == 0);
    fs::rename(a, b);
    REQUIRE(cli(with(a)).code == 0);
    const std::string text = read(a);
    CHECK(text == read(b));

    const Json t = Json::parse(text);
    CHECK(t["displayTimeUnit"] == "ns");
    std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
    std::map<long, int> flow_ends;
    std::set<std::string> processes;
    for (const auto& e : t["traceEvents"]) {
        const std::string ph = e["ph"];
        if (ph == "X") {
            for (const char* key : {"name", "ts", "dur", "pid", "tid", "args"}) REQUIRE(e.contains(key));
            CHECK(e["args"].contains("op"));
            CHECK(e["args"].contains("bytes"));
            CHECK(e["args"].contains("flops"));
            slices[{e["pid"], e["tid"]}].emplace_back(e["ts"], e["dur"]);
        } else if (ph == "s") {
            flow_ends[e["id"].get<long>()] += 1;
        } else if (ph == "t") {
            flow_ends[e["id"].get<long>()] += 0;
        } else if (ph == "f") {
            flow_ends[e["id"].get<long>()] += 10;
        } else if (ph == "C" && e["name"].get<std::string>().rfind("memory", 0) == 0) {
            CHECK(e["args"]["bytes"].get<std::int64_t>() >= 0);
        } else if (ph == "M" && e["name"] == "process_name") {
            processes.insert(e["args"]["name"].get<std::string>());
        }
    }
    CHECK(processes.count("node0/cpu0") == 1);
    CHECK(processes.count("node3/cpu0") == 1);
    CHECK(processes.count("network") == 1);
    for (auto& [thread, v] : slices) {
        std::sort(v.begin(), v.end());
        for (std::size_t i = 1; i < v.size(); ++i) CHECK(v[i].first >= v[i - 1].first + v[i - 1].second - 1e-6);
    }
    CHECK(!flow_ends.empty());
    for (const auto& [id, ends] : flow_ends) CHECK(ends == 11);  // exactly one start and one finish
    CHECK(t["metadata"]["model"] == "gpt2-small");
    CHECK(t["metadata"]["smolcluster-version"] == "0.1.0");
    CHECK(t["metadata"]["command-line"].get<std::string>().find("--trace " + a.string()) != std::string::npos);

    SECTION("an existing trace is not overwritten without --force") {
        const auto before = fs::last_write_time(a);
        const Result r = cli(with(a));
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--force"));
        CHECK(fs::last_write_time(a) == before);
        auto forced = with(a);
        forced.push_back("--force");
        CHECK(cli(forced).code == 0);
    }
    fs::remove(a);
    fs::remove(b);
}

TEST_CASE("describe, models and clusters list what they know", "[tools][cli]") {
    const Result d = cli({"describe", "--model", "llama2-7b", "--json"});
    REQUIRE(d.code == 0);
    const Json j = Json::parse(d.out);
    CHECK(j["parameters"].get<std::int64_t>() == Approx(6.74e9).epsilon(0.01));
    // 16 bytes per parameter of mixed-precision Adam model state.
    CHECK(j["model_state_bytes"]["ddp"].get<std::int64_t>() == 16 * j["parameters"].get<std::int64_t>());
    // With a cluster, each strategy's model states as its graph holds them: the ZeRO ladder
    // 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N (Rajbhandari et al. 2020) for N = 16.
    const Result z = cli({"describe", "--model", "gpt2-xl", "--cluster", "dgx-a100", "--nodes", "2", "--json"});
    REQUIRE(z.code == 0);
    const Json zj = Json::parse(z.out);
    const double psi = zj["parameters"].get<double>(), n = 16;
    CHECK(zj["model_state_bytes"]["ddp"].get<double>() == Approx(16 * psi));
    CHECK(zj["model_state_bytes"]["zero1"].get<double>() == Approx(4 * psi + 12 * psi / n).epsilon(0.001));
    CHECK(zj["model_state_bytes"]["zero2"].get<double>() == Approx(2 * psi + 14 * psi / n).epsilon(0.001));
    // ZeRO-3 keeps tensors under stage3_param_persistence_threshold (norms, biases) whole.
    CHECK(zj["model_state_bytes"]["zero3"].get<double>() == Approx(16 * psi / n).epsilon(0.005));
    // With LoRA (rank 16, Llama 3 8B's 41,943,040 adapters, test_finetune.cpp) and 8-bit AdamW: the
    // frozen 16-bit weights whole under ddp and a quarter under fsdp, the adapters' 2 + 2 bytes
    // and 8-bit AdamW's 2.0039 + 4 (master weights); ZeRO-3 does not train adapters, FSDP does.
    const Result l = cli({"describe", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--finetune", "lora:16",
                          "--optimizer", "adamw-8bit", "--seq", "512", "--json"});
    REQUIRE(l.code == 0);
    const Json lj = Json::parse(l.out);
    CHECK(lj["finetune"] == "lora:16");
    CHECK(lj["optimizer"] == "adamw-8bit");
    const double frozen = 2.0 * lj["parameters"].get<double>(), a = 41943040;
    const double opt = 2 + 2 * 4 / 2048.0 + 4;
    CHECK(lj["model_state_bytes"]["ddp"].get<double>() == Approx(frozen + a * (4 + opt)).epsilon(1e-6));
    CHECK(lj["model_state_bytes"]["fsdp"].get<double>() == Approx((frozen + a * (4 + opt)) / 4).epsilon(1e-4));
    CHECK_FALSE(lj["model_state_bytes"].contains("zero3"));
    CHECK(cli({"describe", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--finetune", "lora:x"}).code == 2);
    // --seq sets the figures without a cluster too (train FLOPs per token at 2,048: Llama 3 8B's
    // 6Ψ plus its attention, less than at the default 8,192); the steps' flags need a cluster, and
    // bad values are refused, not ignored.
    const Json s2k = Json::parse(cli({"describe", "--model", "llama3-8b", "--seq", "2048", "--json"}).out);
    const Json s8k = Json::parse(cli({"describe", "--model", "llama3-8b", "--json"}).out);
    CHECK(s2k["seq"] == 2048);
    CHECK(s2k["train_flops_per_token"].get<double>() < s8k["train_flops_per_token"].get<double>());
    for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
             {"--micro-batch", "2"}, {"--recompute", "full"}, {"--seq", "0"}, {"--cluster", "dgx-a100", "--micro-batch", "0"},
             {"--cluster", "dgx-a100", "--recompute", "most"}}) {
        std::vector<std::string> args{"describe", "--model", "gpt2-small"};
        args.insert(args.end(), bad.begin(), bad.end());
        const Result r = cli(args);
        CAPTURE(bad.front());
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains(bad[bad.size() - 2]));
    }
    // simulate names the fine-tuning and the optimizer on its heading line and in --json.
    const std::vector<std::string> qlora{"simulate", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--finetune",
                                         "qlora:16", "--optimizer", "adamw-8bit", "--strategy", "fsdp", "--seq", "512"};
    const Result t = cli(qlora);
    REQUIRE(t.code == 0);
    CHECK_THAT(t.out, Catch::Contains("fsdp, qlora:16 fine-tuning, tp 1") && Catch::Contains("bf16, adamw-8bit,"));
    std::vector<std::string> as_json = qlora;
    as_json.push_back("--json");
    const Json tj = Json::parse(cli(as_json).out);
    CHECK(tj["finetune"] == "qlora:16");
    CHECK(tj["optimizer"] == "adamw-8bit");
    const Result m = cli({"models"});
    CHECK(m.code == 0);
    CHECK_THAT(m.out, Catch::Contains("gpt3-175b"));
    const Result c = cli({"clusters"});
    CHECK(c.code == 0);
    CHECK_THAT(c.out, Catch::Contains("dgx-a100"));
    CHECK(cli({"--help"}).code == 0);
    CHECK(cli({"frobnicate"}).code == 2);
}

TEST_CASE("padding the vocabulary to Megatron's 128 speeds up an RTX 4090's head and costs an A100 its FLOPs",
          "[tools][cli]") {
    // GPT-2's 50,257 tokens leave the head's GEMMs on a leading dimension that is not a multiple
    // of 8: the RTX 4090 runs them at 0.714 of its aligned rate (pytorch/pytorch#181718), so the
    // padded 50,304 rows (nanoGPT pads to 50,304 for this) are faster there despite 0.09 % more
    // FLOPs; on the A100, with no measured factor, the fewer rows are the faster.
    const auto step = [](const std::string& cluster, const std::string& multiple) {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", cluster, "--devices", "1", "--framework", "megatron",
                              "--strategy", "ddp", "--global-batch", "8", "--micro-batch", "8",
                              "--make-vocab-size-divisible-by", multiple, "--json"});
        REQUIRE(r.code == 0);
        return Json::parse(r.out)["iteration_time_s"].get<double>();
    };
    CHECK(step("workstation-4gpu", "128") < step("workstation-4gpu", "1"));
    CHECK(step("dgx-a100", "128") > step("dgx-a100", "1"));
}

TEST_CASE("describe --framework and --recompute-modules simulate the strategies the framework runs", "[tools][cli]") {
    const std::vector<std::string> base{"describe", "--model",     "llama3-8b", "--cluster", "dgx-h100", "--seq",
                                        "4096",     "--recompute", "selective", "--json"};
    const auto run = [&](std::initializer_list<std::string> extra) {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra);
        return cli(args);
    };
    const Result r = run({"--framework", "megatron", "--recompute-modules", "core_attn,mlp"});
    REQUIRE(r.code == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["framework"] == "megatron");
    CHECK(j["recompute_modules"] == "core_attn,mlp");
    // Megatron runs DDP, its distributed optimizer (zero1) and Megatron-FSDP; ZeRO-2/3 are listed,
    // not run.
    std::set<std::string> ran, refused;
    for (const Json& m : j["memory"]) ran.insert(m["strategy"].get<std::string>());
    for (const Json& n : j["not_run"]) {
        refused.insert(n["strategy"].get<std::string>());
        CHECK_THAT(n["reason"].get<std::string>(), Catch::Contains("does not run on megatron"));
    }
    CHECK(ran == std::set<std::string>{"ddp", "zero1", "fsdp"});
    CHECK(refused == std::set<std::string>{"zero2", "zero3"});
    CHECK(j["model_state_bytes"].size() == 2);   // ddp and zero1: fsdp's states are zero3's, listed for DeepSpeed
    // Each row is simulate's step of the same plan.
    const auto zero1_peak = [](const Json& d) {
        for (const Json& m : d["memory"])
            if (m["strategy"] == "zero1" && m["offload"] == "none") return m["device"]["activations"].get<std::int64_t>();
        FAIL("no zero1 row");
        return std::int64_t{0};
    };
    const Result s = cli({"simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--seq", "4096", "--recompute", "selective",
                          "--recompute-modules", "core_attn,mlp", "--framework", "megatron", "--strategy", "zero1", "--network",
                          "analytic", "--json"});
    REQUIRE(s.code == 0);
    for (const Json& m : j["memory"])
        if (m["strategy"] == "zero1" && m["offload"] == "none")
            CHECK(m["device_peak_bytes"] == Json::parse(s.out)["peak_memory_bytes"]);
    // Recomputing the MLP too keeps fewer activations than attention's core alone.
    const Result core = run({"--framework", "megatron"});
    REQUIRE(core.code == 0);
    CHECK(zero1_peak(j) < zero1_peak(Json::parse(core.out)));
    // The text names both and lists the strategies not run.
    const Result text = cli({"describe", "--model", "llama3-8b", "--cluster", "dgx-h100", "--seq", "4096", "--recompute", "selective",
                             "--recompute-modules", "core_attn,mlp", "--framework", "megatron"});
    REQUIRE(text.code == 0);
    CHECK_THAT(text.out, Catch::Contains("recompute selective (core_attn,mlp), micro-batch 1, framework megatron)"));
    CHECK_THAT(text.out, Catch::Contains("    zero3                  not run: --strategy zero3 does not run on megatron"));
    // Refused: modules without selective recompute, either flag without a cluster, a framework
    // that refuses every strategy, a misspelt framework.
    const Result no_selective = cli({"describe", "--model", "llama3-8b", "--cluster", "dgx-h100", "--recompute-modules", "mlp"});
    CHECK(no_selective.code == 2);
    CHECK_THAT(no_selective.err, Catch::Contains("--recompute-modules: --recompute-modules picks what selective recompute redoes"));
    const Result no_cluster = cli({"describe", "--model", "llama3-8b", "--framework", "megatron"});
    CHECK(no_cluster.code == 2);
    CHECK_THAT(no_cluster.err, Catch::Contains("--framework: has no effect here"));
    const Result none = run({"--framework", "deepspeed", "--recompute-modules", "mlp"});
    CHECK(none.code == 2);
    CHECK_THAT(none.err, Catch::Contains("--recompute-modules: mlp is a module of Megatron core's"));
    const Result typo = run({"--framework", "megatrom"});
    CHECK(typo.code == 2);
    CHECK_THAT(typo.err, Catch::Contains("did you mean 'megatron'?"));
}

#ifdef SMOLCLUSTER_BIN
TEST_CASE("the installed binary returns the same exit codes", "[tools][cli]") {
    const std::string bin = SMOLCLUSTER_BIN;
    auto status = [](const std::string& cmd) {
        const int s = std::system((cmd + " > /dev/null 2>&1").c_str());
        return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
    };
    CHECK(status(bin + " simulate --model gpt2-small --cluster pi5-1gbe") == 0);
    CHECK(status(bin + " simulate --model gpt2-small --cluster nowhere") == 2);
    CHECK(status(bin + " simulate --model gpt2-xl --cluster pi5-1gbe") == 3);
}
#endif

TEST_CASE("a trace of some ranks shows only the links their traffic crosses", "[tools][trace]") {
    // tp 8 · pp 2 on two DGX nodes: rank 0 sends to GPU 1 and receives from GPU 7 in its tensor
    // group's ring (node 0's NVSwitch), and talks to rank 8 (node 1, GPU 0) for the pipeline; the
    // links between the switch and GPUs 2-6 carry the rest of the ring, none of rank 0's traffic.
    const fs::path p = fs::temp_directory_path() / "smol-trace-links.json";
    fs::remove(p);
    REQUIRE(cli({"simulate", "--model", "gpt2-medium", "--cluster", "dgx-a100", "--nodes", "2", "--tp", "8", "--pp", "2",
                 "--global-batch", "4", "--trace", p.string(), "--trace-ranks", "0"})
                .code == 0);
    std::set<std::string> links;
    const Json trace = Json::parse(read(p));
    for (const auto& e : trace["traceEvents"])
        if (e["ph"] == "C" && e["args"].contains("utilisation")) links.insert(e["name"].get<std::string>());
    fs::remove(p);
    CHECK(links.count("node0/gpu0->node0/nvswitch") == 1);
    CHECK(links.count("node0/nvswitch->node0/gpu1") == 1);
    CHECK(links.count("node0/gpu7->node0/nvswitch") == 1);
    CHECK(links.count("node0/nvswitch->node0/gpu0") == 1);
    bool node1_gpu0 = false;
    for (const auto& l : links) {
        CHECK(l.find("node1/gpu5") == std::string::npos);
        CHECK(l.find("node0/gpu3") == std::string::npos);
        node1_gpu0 = node1_gpu0 || l.find("node1/gpu0") != std::string::npos;
    }
    CHECK(node1_gpu0);
}

TEST_CASE("a cluster composed on the command line simulates, a bad one exits 2 naming it", "[tools][cli]") {
    const Result ok = cli({"simulate", "--model", "gpt2-small", "--cluster", "jetson-agx-orin:4,workstation-4gpu:1",
                           "--pp", "2", "--global-batch", "8", "--json"});
    REQUIRE(ok.code == 0);
    const Json j = Json::parse(ok.out);
    CHECK(j["devices"] == 8);
    CHECK(j["per_device"][4]["device"] == "node4/gpu0");
    const Result text = cli({"simulate", "--model", "gpt2-small", "--cluster", "jetson-agx-orin:4,workstation-4gpu:1",
                             "--pp", "2", "--global-batch", "8"});
    CHECK(text.out.find("one switch") != std::string::npos);   // the default network is printed

    const Result bad = cli({"simulate", "--model", "gpt2-small", "--cluster", "jetson-agx-orin:4,workstation-4gpu:zero"});
    CHECK(bad.code == 2);
    CHECK(bad.err.find("'workstation-4gpu:zero'") != std::string::npos);
    const Result not_composed = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--cluster-network", "switch"});
    CHECK(not_composed.code == 2);
    CHECK(not_composed.err.find("--cluster-network") != std::string::npos);
}

TEST_CASE("a trace named .json.gz is gzip and trace ranks take ranges checked before simulating", "[tools][trace]") {
    const fs::path gz = fs::temp_directory_path() / "smol-trace.json.gz";
    fs::remove(gz);
    const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "2", "--global-batch", "16",
                          "--trace", gz.string(), "--trace-ranks", "0-1,8-9"});
    REQUIRE(r.code == 0);
    const std::string bytes = read(gz);
    REQUIRE(bytes.size() > 18);
    CHECK(static_cast<unsigned char>(bytes[0]) == 0x1f);   // gzip magic
    CHECK(static_cast<unsigned char>(bytes[1]) == 0x8b);
    // Decompressed with the system's gzip, it is the trace of ranks 0, 1, 8 and 9.
    const std::string cmd = "gzip -dc '" + gz.string() + "'";
    FILE* pipe = popen(cmd.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string text;
    char buf[65536];
    for (std::size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) text.append(buf, n);
    CHECK(pclose(pipe) == 0);
    const Json t = Json::parse(text);
    std::set<int> pids;
    for (const auto& e : t["traceEvents"])
        if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
    CHECK(pids == std::set<int>{0, 1, 8, 9});
    fs::remove(gz);

    SECTION("a bad range exits 2 before simulating, and writes nothing") {
        for (const std::string ranks : {"0-", "7-3", "0-16", "a", "1,,2", "-1"}) {
            const Result bad = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "2",
                                    "--global-batch", "16", "--trace", gz.string(), "--trace-ranks", ranks});
            INFO(ranks);
            CHECK(bad.code == 2);
            CHECK_THAT(bad.err, Catch::Contains("--trace-ranks"));
            CHECK_FALSE(fs::exists(gz));
        }
    }
}

TEST_CASE("a DeepSpeed config sets the plan, reports unmodelled keys and refuses contradictions", "[tools][cli][deepspeed]") {
    TempFile cfg("ds_config_test.json", R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
        "zero_optimization": {"stage": 2, "overlap_comm": false}, "scheduler": {"type": "WarmupLR"}})");
    const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                          cfg.path.string(), "--json"});
    REQUIRE(r.code == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["strategy"] == "zero2");
    CHECK(j["micro_batch"] == 2);
    CHECK(j["global_batch"] == 8 * 2 * 3);
    CHECK(j["framework"].get<std::string>().rfind("deepspeed", 0) == 0);
    CHECK_THAT(r.err, Catch::Contains("warning") && Catch::Contains("/scheduler is not modelled"));
    const Result bad = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                            cfg.path.string(), "--micro-batch", "4"});
    CHECK(bad.code == 2);
    CHECK_THAT(bad.err, Catch::Contains("--micro-batch 4 contradicts") && Catch::Contains("train_micro_batch_size_per_gpu"));
    // reduce_bucket_size sizes DeepSpeed's buckets at every stage: at stage 2 its IPG buffer of
    // that many 16-bit gradients is live during backward (stage_1_and_2.py:2049), so 2e7
    // elements peak about 2 × (5e8 − 2e7) bytes lower than the default 5e8 (within 1 %: the peaks
    // fall at slightly different moments of backward).
    TempFile stage2("ds_config_bucket.json", R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e7}})");
    TempFile stage2_default("ds_config_bucket_default.json", R"({"zero_optimization": {"stage": 2}})");
    const Result small = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                              stage2.path.string(), "--json"});
    const Result large = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                              stage2_default.path.string(), "--json"});
    REQUIRE(small.code == 0);
    REQUIRE(large.code == 0);
    CHECK_THAT(small.err, !Catch::Contains("reduce_bucket_size"));
    const double peak_small = Json::parse(small.out)["peak_memory_bytes"].get<double>();
    const double peak_large = Json::parse(large.out)["peak_memory_bytes"].get<double>();
    CHECK(peak_large - peak_small == Approx(2.0 * (5e8 - 2e7)).epsilon(0.01));
    TempFile stage3("ds_config_bucket3.json", R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": 2e8}})");
    const Result quiet = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                              stage3.path.string(), "--json"});
    REQUIRE(quiet.code == 0);
    CHECK_THAT(quiet.err, !Catch::Contains("reduce_bucket_size"));
}

TEST_CASE("ZeRO++ from a DeepSpeed config or flags: said in the header, contradictions refused", "[tools][cli][deepspeed][zeropp]") {
    TempFile cfg("ds_config_zeropp.json", R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true,
        "zero_hpz_partition_size": 8}})");
    const std::vector<std::string> base{"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "2"};
    auto with = [&](const std::vector<std::string>& extra) { return cli(plus(base, extra)); };
    const Result from_file = with({"--deepspeed-config", cfg.path.string()});
    REQUIRE(from_file.code == 0);
    CHECK_THAT(from_file.out, Catch::Contains("as deepspeed@0.16.2") && Catch::Contains("(qwZ)") &&
                                  Catch::Contains("groups of 8 ranks"));
    const Result from_flags = with({"--strategy", "zero3", "--zero-quantized-weights", "--zero-hpz-partition-size", "8"});
    REQUIRE(from_flags.code == 0);
    // The same plan, the same figures (all but the line timing the simulator itself).
    auto figures = [](const std::string& out) {
        std::istringstream in(out);
        std::string line, kept;
        while (std::getline(in, line))
            if (line.find("events in") == std::string::npos) kept += line + "\n";
        return kept;
    };
    CHECK(figures(from_flags.out) == figures(from_file.out));
    const Result contradicts = with({"--deepspeed-config", cfg.path.string(), "--zero-hpz-partition-size", "4"});
    CHECK(contradicts.code == 2);
    CHECK_THAT(contradicts.err, Catch::Contains("--zero-hpz-partition-size 4 contradicts"));
    const Result zero = with({"--strategy", "zero3", "--zero-hpz-partition-size", "0"});
    CHECK(zero.code == 2);
    CHECK_THAT(zero.err, Catch::Contains("--zero-hpz-partition-size"));
    // LoCo: with qgZ said in the header; in a config without qgZ, a warning (DeepSpeed ignores it).
    const Result loco = with({"--strategy", "zero3", "--zero-quantized-gradients", "--zeropp-loco"});
    REQUIRE(loco.code == 0);
    CHECK_THAT(loco.out, Catch::Contains("with LoCo's int8 error feedback"));
    TempFile idle("ds_config_loco.json", R"({"zero_optimization": {"stage": 3, "zeropp_loco_param": {"err_beta": 0.8}}})");
    const Result ignored = with({"--deepspeed-config", idle.path.string()});
    REQUIRE(ignored.code == 0);
    CHECK_THAT(ignored.err, Catch::Contains("zeropp_loco_param has no effect without zero_quantized_gradients"));
    CHECK_THAT(ignored.out, !Catch::Contains("LoCo"));
}

TEST_CASE("MiCS from a DeepSpeed config or the flag: said in the header, contradictions refused", "[tools][cli][deepspeed][mics]") {
    TempFile cfg("ds_config_mics.json", R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})");
    const std::vector<std::string> base{"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "2"};
    auto with = [&](const std::vector<std::string>& extra) { return cli(plus(base, extra)); };
    const Result from_file = with({"--deepspeed-config", cfg.path.string()});
    REQUIRE(from_file.code == 0);
    CHECK_THAT(from_file.out, Catch::Contains("MiCS: model states sharded over 2 groups of 8 consecutive ranks") &&
                                  Catch::Contains("other 1 group"));
    const Result from_flag = with({"--strategy", "zero3", "--mics-shard-size", "8"});
    REQUIRE(from_flag.code == 0);
    CHECK_THAT(from_flag.out, Catch::Contains("MiCS: model states sharded over 2 groups of 8"));
    const Result contradicts = with({"--deepspeed-config", cfg.path.string(), "--mics-shard-size", "4"});
    CHECK(contradicts.code == 2);
    CHECK_THAT(contradicts.err, Catch::Contains("--mics-shard-size 4 contradicts") && Catch::Contains("mics_shard_size 8"));
    const Result zero = with({"--strategy", "zero3", "--mics-shard-size", "0"});
    CHECK(zero.code == 2);
    CHECK_THAT(zero.err, Catch::Contains("--mics-shard-size"));
    const Result two_levels = with({"--strategy", "zero3", "--mics-shard-size", "16", "--mics-hierarchical-gather"});
    REQUIRE(two_levels.code == 0);
    CHECK_THAT(two_levels.out, Catch::Contains("in two levels") && Catch::Contains("(one group: plain ZeRO-3)"));
    const Result one_node = with({"--strategy", "zero3", "--mics-shard-size", "8", "--mics-hierarchical-gather"});
    CHECK(one_node.code == 2);
    CHECK_THAT(one_node.err, Catch::Contains("--mics-hierarchical-gather") && Catch::Contains("sharding spans on single node"));
    const Result old = with({"--strategy", "zero3", "--mics-shard-size", "8", "--framework", "deepspeed@0.9"});
    CHECK(old.code == 2);
    CHECK_THAT(old.err, Catch::Contains("0.9.2 and later"));
}

TEST_CASE("Twin-Flow from a DeepSpeed config or the flag: said in the header, contradictions refused",
          "[tools][cli][deepspeed][offload]") {
    TempFile cfg("ds_config_twin_flow.json", R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e8,
        "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 0.5}}})");
    const std::vector<std::string> base{"simulate", "--model", "gpt2-xl", "--cluster", "dgx-a100"};
    auto with = [&](const std::vector<std::string>& extra) { return cli(plus(base, extra)); };
    // GPT-2 XL over 8 GPUs: 195 M elements a rank, the weights' in two sub-groups of 1e8 and the
    // biases' and norms' in a third: int(0.5 × 3) = 1 on the CPU.
    const Result from_file = with({"--deepspeed-config", cfg.path.string()});
    REQUIRE(from_file.code == 0);
    CHECK_THAT(from_file.out, Catch::Contains("Twin-Flow: 1 of 3 optimizer sub-groups stepped on the CPU"));
    CHECK_THAT(from_file.err, Catch::Contains("pin_memory is not modelled") && !Catch::Contains("ratio"));
    const Result contradicts = with({"--deepspeed-config", cfg.path.string(), "--optimizer-offload-fraction", "0.25"});
    CHECK(contradicts.code == 2);
    CHECK_THAT(contradicts.err, Catch::Contains("--optimizer-offload-fraction 0.25 contradicts") &&
                                    Catch::Contains("offload_optimizer.ratio 0.5"));
    TempFile bad("ds_config_twin_flow_bad.json", R"({"zero_optimization": {"stage": 3,
        "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})");
    const Result out_of_range = with({"--deepspeed-config", bad.path.string()});
    CHECK(out_of_range.code == 2);
    CHECK_THAT(out_of_range.err, Catch::Contains("/zero_optimization/offload_optimizer/ratio") && Catch::Contains("1.5"));
    // The default sub_group_size (1e9) holds a rank's weights in one sub-group and its biases and
    // norms in another: int(0.5 × 2) = 1 puts every weight on the CPU, and the header says why.
    // Those 1-D tensors: per layer two LayerNorms (2 × 2 × 1,600) and the biases of QKV (4,800),
    // the projection (1,600), fc (6,400) and fc2 (1,600); 48 layers and the final LayerNorm
    // (3,200) make 1,001,600, an eighth a rank.
    const Result whole = with({"--strategy", "zero3", "--offload-optimizer", "cpu", "--optimizer-offload-fraction", "0.5"});
    REQUIRE(whole.code == 0);
    CHECK_THAT(whole.out, Catch::Contains("Twin-Flow: 1 of 2 optimizer sub-groups stepped on the CPU") &&
                              Catch::Contains("1 on the device (125 thousand)") && Catch::Contains("sub_group_size"));
}

TEST_CASE("run, validate and calibrate say how to start them, or that MPI was not built in", "[tools][cli]") {
    for (const char* command : {"run", "validate"}) {
        INFO(command);
        const Result r = cli({command, "--model", "gpt-tiny", "--cluster", "pi5-1gbe"});
        CHECK(r.code == 2);
        if (exec::available()) {
            // Not under mpirun (this test is one plain process): the exact command for 4 devices.
            CHECK_THAT(r.err, Catch::Contains("started by mpirun"));
            CHECK_THAT(r.err, Catch::Contains("-np 4 smolcluster " + std::string(command) + " --model gpt-tiny --cluster pi5-1gbe"));
        } else {
            CHECK_THAT(r.err, Catch::Contains("built without MPI"));
        }
    }
    if (!exec::available()) CHECK_THAT(cli({"calibrate", "--out", "x.json"}).err, Catch::Contains("built without MPI"));
    const Result gpu = cli({"calibrate", "--out", "x.json", "--backend", "gpu"});
    CHECK(gpu.code == 2);
    CHECK_THAT(gpu.err, Catch::Contains("--backend"));
    CHECK_THAT(gpu.err, Catch::Contains("cuda"));
}

TEST_CASE("stragglers: --slow, a cluster file's speed and seeded --jitter", "[tools][cli][speed]") {
    const std::vector<std::string> ddp{"simulate", "--model", "resnet50", "--cluster", "pi5-1gbe", "--nodes", "8", "--json"};
    auto with = [&](std::initializer_list<std::string> extra) {
        auto v = ddp;
        v.insert(v.end(), extra);
        return v;
    };
    auto step = [](const Result& r) {
        INFO(r.err);
        REQUIRE(r.code == 0);
        return Json::parse(r.out)["iteration_time_s"].get<double>();
    };
    SECTION("a node group's speed in a cluster file is the same as --slow") {
        // Seven Pis, then one at half speed in a group of its own: rank 7 either way.
        Json doc = load_json_file(std::string(SMOL_SOURCE_DIR) + "/topologies/presets/pi5-1gbe.json");
        doc["node_groups"][0]["count"] = 7;
        Json slow_group = doc["node_groups"][0];
        slow_group["name"] = "pi5-throttled";
        slow_group["count"] = 1;
        slow_group["speed"] = 0.5;
        doc["node_groups"].push_back(slow_group);
        const TempFile file("smol-pi5-throttled.json", doc.dump());
        const Result by_file = cli({"simulate", "--model", "resnet50", "--cluster", file.path.string(), "--json"});
        const Result by_flag = cli(with({"--slow", "7:0.5"}));
        CHECK(step(by_file) == step(by_flag));
        const Json j = Json::parse(by_flag.out);
        CHECK(j["folded"] == false);   // a slow replica is no mirror of the others
        CHECK(Json::parse(cli(ddp).out)["folded"] == true);
        REQUIRE(j.contains("notes"));
        CHECK_THAT(j["notes"].dump(), Catch::Contains("rank 7 (node7/cpu0) at 0.5× compute"));
        CHECK_THAT(j["notes"].dump(), Catch::Contains("replicas not folded"));
    }
    SECTION("the same seed gives a byte-identical trace; another seed another step") {
        const fs::path a = fs::temp_directory_path() / "smol-jitter-a.json";
        const fs::path b = fs::temp_directory_path() / "smol-jitter-b.json";
        fs::remove(a);
        fs::remove(b);
        const auto jittered = [&](const std::string& seed) {
            return with({"--jitter", "5", "--seed", seed, "--trace", a.string()});
        };
        const Result first = cli(jittered("7"));
        fs::rename(a, b);
        const Result second = cli(jittered("7"));
        CHECK(read(a) == read(b));
        // The summaries too, but for the simulator's own wall time.
        Json j1 = Json::parse(first.out), j2 = Json::parse(second.out);
        j1.erase("sim_wall_s");
        j2.erase("sim_wall_s");
        CHECK(j1 == j2);
        fs::remove(a);
        const double other = step(cli(jittered("8")));
        CHECK(other != step(first));
        // ±5 % per op: the step moves by less than 5 % from the unjittered one.
        CHECK(other == Approx(step(cli(ddp))).epsilon(0.05));
        fs::remove(a);
        fs::remove(b);
    }
}

TEST_CASE("a profile of measured all-reduces slows a tensor-parallel step and is said in the summary", "[tools][cli]") {
    // vTrain's nccl-tests tables of its A100 node: slower than the preset's NCCL model at every
    // size (a 2 MiB all-reduce over 8 GPUs: 93 us measured), so a tp 8 step gets longer.
    const std::string profile = (fs::path(SMOL_SOURCE_DIR) / "validation/vtrain-a100-nccl.json").string();
    auto step = [](std::vector<std::string> extra) {
        std::vector<std::string> args{"simulate", "--model", "gpt2-medium", "--cluster", "hgx-a100-4hdr", "--tp", "8",
                                      "--global-batch", "8", "--json"};
        args.insert(args.end(), extra.begin(), extra.end());
        const Result r = cli(args);
        REQUIRE(r.code == 0);
        return Json::parse(r.out);
    };
    // Megatron, the default, pads GPT-2's vocabulary to 50 × 1,024 at tp 8: a note of both runs;
    // only the profile's run says it was measured.
    const Json lead = step({}), measured = step({"--profile", profile});
    CHECK(lead["notes"] == Json::array({"vocabulary padded from 50257 to 51200 rows, a multiple of 128 × tp 8 (Megatron's "
                                        "--make-vocab-size-divisible-by)"}));
    REQUIRE(measured.contains("notes"));
    CHECK(measured["notes"][0].get<std::string>() == "profile " + profile + ": measured all_reduce over 2-8 ranks on 1 host");
    CHECK(measured["iteration_time_s"].get<double>() > lead["iteration_time_s"].get<double>());
    CHECK(measured["total_comm_s"].get<double>() > lead["total_comm_s"].get<double>());
}

TEST_CASE("a GPU's profile prices a GPU step from its tables on a node of any size, and is said in the summary", "[tools][cli]") {
    // One GPU measured (calibrate --backend cuda -np 1) at a flat 100 TFLOP/s for every 16-bit and
    // fp32 GEMM and flash kernel: a sixth of what the H100 preset reaches at GPT-2 medium's shapes,
    // so the step is longer; its HBM pass as the preset's. No NCCL curves (one rank).
    topo::Profile p;
    p.hosts = {"gpu0"};
    p.date = "2026-12-06T00:00:00Z";
    p.has_memory = false;
    topo::MeasuredCompute& c = p.compute;
    c.gpu = "NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs, 79.1 GiB)";
    c.sms = 132;
    topo::ShapeTable flat;
    flat.m = flat.n = flat.k = {256, 8192};
    flat.rate.assign(8, 100e12);
    c.gemm = c.gemm_bf16 = c.gemm_fp16 = flat;
    c.flash_fwd = c.flash_bwd = c.flash_fwd_causal = c.flash_bwd_causal = flat;
    c.stream = {{1e6, 1e9}, {1e12, 2.8e12}};
    c.softmax = {{1e6, 1e9}, {1e11, 1e11}};
    c.adam = {{1e6, 1e9}, {1e11, 1e11}};
    c.dispatch = Time::us(4);
    c.arithmetic = c.comm_slowdown = 0;
    const fs::path file = fs::temp_directory_path() / ("smol-gpu-profile-" + std::to_string(::getpid()) + ".json");
    {
        std::ofstream out(file);
        out << topo::to_json(p).dump(1);
    }
    auto step = [](std::vector<std::string> extra) {
        std::vector<std::string> args{"simulate", "--model", "gpt2-medium", "--cluster", "dgx-h100", "--dtype", "bf16", "--json"};
        args.insert(args.end(), extra.begin(), extra.end());
        const Result r = cli(args);
        INFO(r.err);
        REQUIRE(r.code == 0);
        return Json::parse(r.out);
    };
    const Json lead = step({}), measured = step({"--profile", file.string()});   // 8 GPUs a node, 1 measured
    REQUIRE(measured.contains("notes"));
    CHECK(measured["notes"][0].get<std::string>() == "profile " + file.string() +
                                                         ": measured GPU kernel rates (" + c.gpu + "); no measured transfers");
    CHECK(measured["iteration_time_s"].get<double>() > 2 * lead["iteration_time_s"].get<double>());
    const Result board = cli({"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--profile", file.string()});
    CHECK(board.code == 2);
    CHECK_THAT(board.err, Catch::Contains("was measured on a GPU"));
    fs::remove(file);
}

TEST_CASE("the host time per kernel from --dispatch-overhead slows the step and is said in the summary", "[tools][cli]") {
    auto step = [](std::vector<std::string> extra) {
        std::vector<std::string> args{"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--devices", "1", "--json"};
        args.insert(args.end(), extra.begin(), extra.end());
        const Result r = cli(args);
        REQUIRE(r.code == 0);
        return Json::parse(r.out);
    };
    const Json none = step({}), slow = step({"--dispatch-overhead", "1 ms"});
    CHECK_FALSE(none.contains("notes"));
    REQUIRE(slow.contains("notes"));
    CHECK(slow["notes"][0].get<std::string>().find("host dispatch 1.00 ms per GPU kernel") != std::string::npos);
    // At 1 ms a kernel every GEMM and pass of GPT-2 small waits for the host: its 12 layers issue
    // 11 kernels forward (norm, QKV, QKV bias, flash attention, output projection, residual, norm,
    // up, bias-GeLU, down, residual) and 15 backward (4 GEMMs × data and weight gradients, flash's
    // backward, 6 passes), 312 ms, and the embedding, the head, PyTorch's loss (F.cross_entropy:
    // the cast, log_softmax and nll_loss forward; seed, zeroing, scatter, log_softmax's backward and
    // the cast back) and the optimizer a few more.
    CHECK(slow["iteration_time_s"].get<double>() >= (12 * 26 + 15) * 1.005e-3);
    CHECK(slow["iteration_time_s"].get<double>() <= (12 * 26 + 30) * 1.005e-3);
    // Megatron's models run the vocab-parallel cross-entropy: 28 launches forward and 13 backward
    // (core/transformer.cpp loss_forward_kernels) where PyTorch's run 3 and 5, so 33 more at 1 ms.
    const Json megatron = step({"--dispatch-overhead", "1 ms", "--framework", "megatron"});
    CHECK(megatron["iteration_time_s"].get<double>() - slow["iteration_time_s"].get<double>() >= 33 * 1.005e-3);
    CHECK(none["iteration_time_s"].get<double>() < 0.1 * slow["iteration_time_s"].get<double>());
}

TEST_CASE("eager attention too small for Megatron's fused softmax is said in the summary, with the micro-batch that fixes it", "[tools][cli]") {
    // gpt2-medium's 16 heads over tp 8: 2 score matrices per sample, the fused kernel wants a
    // multiple of 4 (fused_softmax.py is_kernel_available).
    auto notes = [](const std::string& micro_batch, const std::string& dtype) {
        const Result r = cli({"simulate", "--model", "gpt2-medium", "--cluster", "hgx-a100-4hdr", "--tp", "8", "--attention",
                              "eager", "--dtype", dtype, "--micro-batch", micro_batch, "--global-batch", "4", "--json"});
        REQUIRE(r.code == 0);
        const Json j = Json::parse(r.out);
        return j.contains("notes") ? j["notes"].dump() : std::string();
    };
    const std::string one = notes("1", "bf16");
    CHECK_THAT(one, Catch::Contains("unfused softmax: Megatron's fused kernel does not take 2 score matrices of 1024 × 1024 bf16"));
    CHECK_THAT(one, Catch::Contains("(--micro-batch 2 would take it)"));
    CHECK_THAT(one, !Catch::Contains("layer-number scale"));   // Megatron core: no query-key layer scaling
    CHECK(notes("2", "bf16").find("unfused") == std::string::npos);
    CHECK(notes("1", "fp32").find("unfused") == std::string::npos);   // fp32 never fuses: nothing to say
}

TEST_CASE("the summary says which replicas a folded plan keeps", "[tools][cli][folding]") {
    auto header = [](std::vector<std::string> plan) {
        std::vector<std::string> args{"simulate", "--model", "gpt2-medium", "--cluster", "dgx-a100"};
        args.insert(args.end(), plan.begin(), plan.end());
        const Result r = cli(args);
        REQUIRE(r.code == 0);
        return r.out.substr(0, r.out.find('\n'));
    };
    // tp 8: a replica per node, every other replica mirrors replica 0.
    CHECK_THAT(header({"--nodes", "2", "--tp", "8", "--global-batch", "8"}),
               Catch::EndsWith(", 2 data-parallel replicas folded into one"));
    // tp 4 · pp 2 on four nodes: each stage's first node keeps its two replicas.
    CHECK_THAT(header({"--nodes", "4", "--tp", "4", "--pp", "2", "--global-batch", "16"}),
               Catch::EndsWith(", 4 data-parallel replicas folded into each stage's first node's 2"));
    // tp 4 on two nodes, no pipeline: the first node's two.
    CHECK_THAT(header({"--nodes", "2", "--tp", "4", "--global-batch", "8"}),
               Catch::EndsWith(", 4 data-parallel replicas folded into the first node's 2"));
    // tp 4 · pp 2 on two nodes: a stage's two replicas are one node's, nothing to fold.
    CHECK_THAT(header({"--nodes", "2", "--tp", "4", "--pp", "2", "--global-batch", "8"}),
               !Catch::Contains("folded"));
}

namespace {

/// simulate --kernels's CSV as rows of named fields.
std::vector<std::map<std::string, std::string>> kernel_rows(const fs::path& p) {
    std::istringstream in(read(p));
    std::string line;
    std::getline(in, line);
    std::vector<std::string> header;
    {
        std::istringstream h(line);
        for (std::string f; std::getline(h, f, ',');) header.push_back(f);
    }
    std::vector<std::map<std::string, std::string>> rows;
    while (std::getline(in, line)) {
        std::map<std::string, std::string> row;
        std::istringstream l(line);
        std::size_t i = 0;
        for (std::string f; i < header.size(); ++i) {
            std::getline(l, f, ',');
            row[header[i]] = f;
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace

TEST_CASE("simulate --kernels lists each kernel as the simulator runs it", "[tools][cli]") {
    // gpt2-small (hidden 768, 1024 tokens, 12 heads) on one A100, eager attention: a layer's
    // forward GEMMs are Narayanan et al.'s 24·b·s·h² + 4·b·s²·h FLOPs, its backward's twice that.
    const fs::path k = fs::temp_directory_path() / "smol-kernels.csv", t = fs::temp_directory_path() / "smol-kernels-trace.json";
    fs::remove(k);
    fs::remove(t);
    const std::vector<std::string> plan{"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--devices", "1",
                                        "--global-batch", "2", "--attention", "eager"};
    auto with = [&](const std::vector<std::string>& extra) { return plus(plan, extra); };
    const Result r = cli(with({"--kernels", k.string(), "--trace", t.string()}));
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("kernels of micro-batch 0 and the step written to"));
    const auto rows = kernel_rows(k);
    const std::string first = read(k);
    REQUIRE(!rows.empty());

    const double b = 1, s = 1024, h = 768;
    double fwd = 0, bwd = 0;
    std::set<std::string> ops, phases;
    std::map<std::string, double> last_end, op_s;
    for (const auto& row : rows) {
        CHECK(row.at("rank") == "0");
        CHECK(row.at("device") == "node0/gpu0");
        CHECK(row.at("runs_on") == "device");
        CHECK(std::stoi(row.at("microbatch")) <= 0);   // micro-batch 0 and the step only
        phases.insert(row.at("phase"));
        const std::string& op = row.at("op");
        const double start = std::stod(row.at("start_s")), run = std::stod(row.at("run_s"));
        // Kernels of an op run one after another on the device, inside the op's time.
        if (ops.count(op)) CHECK(start >= last_end[op] * (1 - 1e-8));   // 9 significant digits in the file
        ops.insert(op);
        last_end[op] = start + run;
        op_s[op] = std::stod(row.at("op_s"));
        CHECK(start + run <= op_s[op] * (1 + 1e-8));
        if (row.at("layer") == "1" && row.at("kind") == "gemm") (row.at("phase") == "fwd" ? fwd : bwd) += std::stod(row.at("flops"));
    }
    CHECK(phases == std::set<std::string>{"fwd", "bwd", "opt"});
    CHECK(fwd == Approx(24 * b * s * h * h + 4 * b * s * s * h));
    CHECK(bwd == Approx(2 * fwd));

    // Each op lasts op_s in the simulated timeline: nothing else shares the one GPU.
    const Json trace = Json::parse(read(t));
    std::size_t matched = 0;
    for (const auto& e : trace["traceEvents"])
        if (e["ph"] == "X" && e["args"].contains("op") && op_s.count(std::to_string(e["args"]["op"].get<long>()))) {
            CHECK(e["dur"].get<double>() * 1e-6 == Approx(op_s[std::to_string(e["args"]["op"].get<long>())]).epsilon(1e-6));
            ++matched;
        }
    CHECK(matched == op_s.size());

    // The same plan writes the same file; an existing one needs --force.
    fs::remove(t);
    const Result again = cli(with({"--kernels", k.string()}));
    CHECK(again.code == 2);
    CHECK_THAT(again.err, Catch::Contains("--kernels"));
    REQUIRE(cli(with({"--kernels", k.string(), "--force"})).code == 0);
    CHECK(read(k) == first);

    // A host-bound op: at 1 ms of dispatch a kernel, the host issues each kernel 1 ms (and the
    // launch) after the one before, and the device, long done, waits for it.
    REQUIRE(cli(with({"--kernels", k.string(), "--force", "--dispatch-overhead", "1 ms"})).code == 0);
    std::map<std::string, std::vector<double>> starts;
    for (const auto& row : kernel_rows(k))
        if (row.at("phase") == "fwd" && row.at("layer") == "1") starts[row.at("op")].push_back(std::stod(row.at("start_s")));
    REQUIRE(starts.size() == 1);
    const std::vector<double>& st = starts.begin()->second;
    REQUIRE(st.size() > 3);
    for (std::size_t i = 1; i < st.size(); ++i) CHECK(st[i] - st[i - 1] == Approx(1e-3).epsilon(0.02));

    // Ranks: --trace-ranks picks them without a trace; one file cannot be both outputs.
    const Result two = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--devices", "2", "--global-batch", "2",
                            "--kernels", k.string(), "--force", "--trace-ranks", "1"});
    REQUIRE(two.code == 0);
    for (const auto& row : kernel_rows(k)) CHECK(row.at("rank") == "1");
    // A folded plan's mirrored replica lists the kernels of the replica it mirrors.
    const std::vector<std::string> folded{"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "8",
                                          "--kernels", k.string(), "--force", "--trace-ranks"};
    auto listed = [&](const std::string& rank) {
        std::vector<std::string> a = folded;
        a.push_back(rank);
        REQUIRE(cli(a).code == 0);
        std::vector<std::string> rows;
        for (auto row : kernel_rows(k)) {
            CHECK(row.at("rank") == rank);
            CHECK(row.at("device") == "node0/gpu" + rank);
            row.erase("rank");
            row.erase("device");
            std::string line;
            for (const auto& [key, value] : row) line += value + ",";
            rows.push_back(line);
        }
        return rows;
    };
    const std::vector<std::string> replica0 = listed("0"), mirror = listed("5");
    CHECK(!replica0.empty());
    CHECK(mirror == replica0);
    const Result same = cli(with({"--kernels", k.string(), "--trace", k.string(), "--force"}));
    CHECK(same.code == 2);
    CHECK_THAT(same.err, Catch::Contains("same file"));
    fs::remove(k);
}
