// The out-of-memory answer through the command line: exit 3 names the buffer by what it holds,
// the peak is broken down, every listed change fits when simulated again; bad offload and
// fine-tuning plans exit 2 with the reason; describe breaks the peak down per strategy and
// offload; a DeepSpeed config's offload devices become the plan's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "core/json.hpp"
#include "tools/cli.hpp"
#include "tools/fit_advice.hpp"

using namespace smol;
namespace fs = std::filesystem;

namespace {

struct Result {
    int code;
    std::string out, err;
};

Result cli(std::vector<std::string> args) {
    args.insert(args.begin(), "smolcluster");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = tools::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
}

/// "--strategy zero3 --offload cpu" as arguments.
std::vector<std::string> words(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream s(text);
    std::string w;
    while (s >> w) out.push_back(w);
    return out;
}

struct TempFile {
    fs::path path;
    TempFile(const std::string& name, const std::string& text) : path(fs::temp_directory_path() / name) {
        std::ofstream(path) << text;
    }
    ~TempFile() { fs::remove(path); }
};

// The ZeRO-Offload paper's 10 B GPT-2 (50 layers of 4096, as DeepSpeed's tutorial configures it).
const char* kGpt10b = R"({"kind": "transformer", "layers": 50, "hidden": 4096, "heads": 32, "kv_heads": 32,
  "ffn_hidden": 16384, "vocab": 50304, "seq": 1024, "tied_embeddings": true, "gated_mlp": false, "biases": true,
  "norm": "layernorm", "positions": "learned"})";

}  // namespace

TEST_CASE("a 10 B GPT on one V100: ddp exits 3 naming the buffer, zero2 with CPU offload fits", "[tools][fit_advice]") {
    TempFile model("gpt-10b-test.json", kGpt10b);
    const std::vector<std::string> base{"simulate", "--model", model.path.string(), "--cluster", "dgx2-v100",
                                        "--devices", "1", "--recompute", "full", "--network", "analytic", "--json"};
    auto with = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> a = base;
        a.insert(a.end(), extra.begin(), extra.end());
        return cli(a);
    };
    const Result ddp = with({"--strategy", "ddp"});
    REQUIRE(ddp.code == 3);
    const Json j = Json::parse(ddp.out);
    CHECK_FALSE(j["fits"].get<bool>());
    const Json& oom = j["oom"];
    for (const char* key : {"device", "rank", "tier", "op", "requested_bytes", "free_bytes", "buffer", "label", "layer",
                            "microbatch", "capacity_bytes", "peak_bytes", "breakdown", "fits"})
        CHECK(oom.contains(key));
    CHECK(oom["label"] == "gradients");   // 2Ψ of fp16 parameters fit, another 2Ψ of gradients do not
    CHECK(oom["capacity_bytes"].get<std::int64_t>() == 32ll << 30);
    CHECK(oom["breakdown"]["optimizer_state"].get<double>() == Approx(12 * 10.3e9).epsilon(0.01));
    CHECK(oom["breakdown"]["cuda_context"].get<std::int64_t>() == 1343ll << 20);
    CHECK_THAT(ddp.err, Catch::Contains("(gradients)"));
    // Every listed change fits when simulated on its own.
    REQUIRE_FALSE(oom["fits"].empty());
    for (const Json& f : oom["fits"]) {
        INFO(f["change"].get<std::string>());
        std::vector<std::string> change = words(f["change"].get<std::string>());
        if (std::find(change.begin(), change.end(), "--strategy") == change.end()) change.insert(change.begin(), {"--strategy", "ddp"});
        const Result again = with(change);
        CHECK(again.code == 0);
        CHECK(Json::parse(again.out)["peak_memory_bytes"] == f["peak_memory_bytes"]);
    }
    const Result off = with({"--strategy", "zero2", "--offload", "cpu"});
    CHECK(off.code == 0);
}

TEST_CASE("Llama 3 8B on four RTX 4090s: zero3 runs out of optimizer state and a suggested plan fits", "[tools][fit_advice]") {
    const Result r = cli({"simulate", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--strategy", "zero3",
                          "--recompute", "full", "--seq", "2048"});
    REQUIRE(r.code == 3);
    CHECK_THAT(r.out, Catch::Contains("the optimizer state (22.4 GiB) did not fit"));
    CHECK_THAT(r.out, Catch::Contains("memory at its peak") && Catch::Contains("of 24.0 GiB"));
    CHECK_THAT(r.out, Catch::Contains("plans that fit") && Catch::Contains("--offload-optimizer cpu"));
    CHECK_THAT(r.err, Catch::Contains("it fits with --offload-optimizer cpu"));
    const Result fixed = cli({"simulate", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--strategy", "zero3",
                              "--recompute", "full", "--seq", "2048", "--offload-optimizer", "cpu"});
    CHECK(fixed.code == 0);
}

TEST_CASE("Twin-Flow that does not fit is offered more of the optimizer on the host", "[tools][fit_advice][offload]") {
    // Llama 3 70B on a DGX H100: a rank's 8.8 B elements of weights in 9 sub-groups of 1e9 and its
    // norms in a tenth; ratio 0.5 steps 5 on the CPU and leaves 4 weight sub-groups' fp32 weights,
    // moments and gradients (16 bytes an element) on an 80 GB GPU. The fractions offered each move
    // whole sub-groups (0.6 → 6, 0.7 → 7, 0.8 → 8); 0.9 would leave only the norms on the device,
    // as 1 does.
    const std::vector<std::string> plan{"simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--strategy", "zero3",
                                        "--offload-optimizer", "cpu", "--recompute", "full", "--seq", "4096",
                                        "--global-batch", "8"};
    auto with = [&](const std::string& fraction) {
        std::vector<std::string> args = plan;
        args.insert(args.end(), {"--optimizer-offload-fraction", fraction});
        return cli(args);
    };
    const Result r = with("0.5");
    REQUIRE(r.code == 3);
    CHECK_THAT(r.out, Catch::Contains("Twin-Flow: 5 of 10 optimizer sub-groups"));
    CHECK_THAT(r.out, Catch::Contains("plans that fit") && Catch::Contains("--optimizer-offload-fraction 0.6") &&
                          Catch::Contains("--optimizer-offload-fraction 1") &&
                          !Catch::Contains("--optimizer-offload-fraction 0.9"));
    CHECK(with("0.6").code == 0);
}

TEST_CASE("Llama 2 70B with QLoRA on two RTX 4090s: FSDP alone runs out, FSDP's CPU offload fits", "[tools][fit_advice][finetune]") {
    // Answer.AI's headline (fsdp_qlora, --use_cpu_offload) and ms-swift's 2 × 24 GB example
    // (examples/pytorch/llm/scripts/llama2_70b_chat/qlora_fsdp): the NF4 weights alone are
    // 80 · 855.6 M · 4.127 / 8 B ≈ 35.3 GB, 17.7 GB a GPU, before the gathered units and the
    // activations of two sequences of 2,048.
    const std::vector<std::string> plan{"simulate", "--model", "llama2-70b", "--cluster", "workstation-4gpu", "--devices", "2",
                                        "--strategy", "fsdp", "--finetune", "qlora:8", "--seq", "2048",
                                        "--recompute", "full", "--global-batch", "4", "--micro-batch", "2"};
    const Result r = cli(plan);
    REQUIRE(r.code == 3);
    CHECK_THAT(r.err, Catch::Contains("it fits with --offload cpu"));
    std::vector<std::string> offloaded = plan;
    offloaded.insert(offloaded.end(), {"--offload", "cpu", "--json"});
    const Result fixed = cli(offloaded);
    REQUIRE(fixed.code == 0);
    const Json j = Json::parse(fixed.out);
    // On the host, each GPU's half of: the layers' linear weights in NF4 (4 bits, an fp8 absmax
    // per 64, an fp32 one per 256 of those: QLoRA's double quantisation), their norms, the
    // embedding and head in bf16, and the rank-8 adapters' fp32 master weights (8 · (in + out) for
    // q, k, v, o, gate, up and down). Nothing of the model states stays on the device.
    const double linears = 80.0 * (2 * 8192.0 * 8192 + 2 * 8192.0 * 1024 + 3 * 8192.0 * 28672);
    const double nf4 = linears * (4 + 8.0 / 64 + 32.0 / (64 * 256)) / 8;
    const double sixteen_bit = 2 * (80 * 2 * 8192.0 + 2 * 32000.0 * 8192 + 8192);
    const double adapters = 80 * 8 * (2 * (8192.0 + 8192) + 2 * (8192 + 1024) + 3 * (8192 + 28672));
    CHECK(j["memory"]["host"]["parameters"].get<double>() == Approx((nf4 + sixteen_bit) / 2 + 4 * adapters / 2).epsilon(1e-4));
    CHECK(j["memory"]["device"]["parameters"].get<double>() == 0);
}

TEST_CASE("a mixture of experts that does not fit is offered more expert parallelism", "[tools][fit_advice][moe]") {
    // Mixtral-8x7B with DeepSpeed's ZeRO-1 on two DGX A100: every rank holds all 8 experts' 16-bit
    // weights and gradients (87 GiB of parameters alone); with --ep 8 each holds one.
    const Result r = cli({"simulate", "--model", std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json", "--cluster",
                          "dgx-a100", "--nodes", "2", "--strategy", "zero1", "--recompute", "full", "--seq", "4096",
                          "--global-batch", "16"});
    REQUIRE(r.code == 3);
    CHECK_THAT(r.out, Catch::Contains("\n    --ep 8 "));
    CHECK_THAT(r.out, Catch::Contains("--strategy fsdp --ep 8"));
}

TEST_CASE("Megatron core's plans are offered the recompute modules with something to redo, between the core and whole layers", "[tools][fit_advice]") {
    auto offered = [](const Model& m, const std::string& framework) {
        strategies::Plan p;
        p.strategy = strategies::DataParallel::zero1;
        p.tp = 2;
        p.sequence_parallel = true;
        p.framework = framework;
        p.micro_batch = 2;
        p.global_batch = 8;
        std::vector<std::string> flags;
        for (const tools::PlanChange& c : tools::memory_saving_changes(m, topo::cluster_preset("dgx-h100"), p))
            if (c.changes == 1 && c.flags.rfind("--recompute", 0) == 0) flags.push_back(c.flags);
        return flags;
    };
    // Llama 3 8B, dense with its norms fused: the core and the MLP.
    CHECK(offered(model_preset("llama3-8b"), "megatron") ==
          std::vector<std::string>{"--recompute selective", "--recompute selective --recompute-modules core_attn,mlp",
                                   "--recompute full"});
    // A mixture of experts with a dense first layer: its experts' activation and norm too.
    const Json doc = parse_json_text(R"({"kind": "transformer", "name": "moe", "layers": 2, "hidden": 256, "heads": 4,
        "ffn_hidden": 1024, "vocab": 1000, "seq": 128, "gated_mlp": true, "moe": {"experts": 8, "top_k": 2,
        "ffn_hidden": 512, "dense_layers": [0]}})", "moe.json");
    const Model moe = model_from_json(JsonView(doc, "moe.json"), "moe");
    CHECK(offered(moe, "megatron") ==
          std::vector<std::string>{"--recompute selective", "--recompute selective --recompute-modules core_attn,moe_act,layernorm,mlp",
                                   "--recompute selective --recompute-modules core_attn,layernorm,mlp,moe", "--recompute full"});
    // Before core 0.12, the attention core alone.
    CHECK(offered(model_preset("llama3-8b"), "megatron@0.11") == std::vector<std::string>{"--recompute selective", "--recompute full"});
}

TEST_CASE("the changes tried save memory and the plan's checks accept them", "[tools][fit_advice]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    strategies::Plan p;
    p.strategy = strategies::DataParallel::ddp;
    p.micro_batch = 2;
    p.global_batch = 8;
    const std::vector<tools::PlanChange> changes = tools::memory_saving_changes(m, c, p);
    REQUIRE_FALSE(changes.empty());
    for (std::size_t i = 1; i < changes.size(); ++i) CHECK(changes[i - 1].changes <= changes[i].changes);
    bool smaller_micro_batch = false;
    for (const tools::PlanChange& ch : changes) {
        CHECK_NOTHROW(strategies::resolve(m, c, ch.plan));
        CHECK(ch.plan.strategy != strategies::DataParallel::ps);
        if (ch.plan.micro_batch == 1) {
            smaller_micro_batch = true;
            CHECK(strategies::resolve(m, c, ch.plan).global_batch == 8);   // the same batch, more accumulation
        }
    }
    CHECK(smaller_micro_batch);
}

TEST_CASE("bad offload and fine-tuning plans exit 2 with the reason", "[tools][fit_advice]") {
    SECTION("offload without ZeRO or FSDP") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--offload", "cpu"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--offload needs a strategy that shards model states"));
    }
    SECTION("NVMe offload on a cluster without NVMe") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "jetson-agx-orin", "--strategy", "zero3",
                              "--offload", "nvme"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("NVMe offload needs an NVMe drive"));
    }
    SECTION("LoRA on a layer-list model") {
        const Result r = cli({"simulate", "--model", "resnet50", "--cluster", "dgx-a100", "--finetune", "lora:8"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("is a layer list"));
    }
    SECTION("an unknown offload device") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--strategy", "zero3",
                              "--offload-params", "disk"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--offload-params") && Catch::Contains("one of none, cpu, nvme"));
    }
    SECTION("an unknown optimizer") {
        const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--optimizer", "lion"});
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--optimizer"));
    }
}

TEST_CASE("unified memory: CPU offload is refused nothing but changes nothing, and says so", "[tools][fit_advice]") {
    const std::vector<std::string> plan{"simulate", "--model", "gpt2-large", "--cluster", "jetson-orin-nano",
                                        "--strategy", "zero2", "--json"};
    const Result plain = cli(plan);
    std::vector<std::string> off = plan;
    off.insert(off.end(), {"--offload", "cpu"});
    const Result offloaded = cli(off);
    CHECK(offloaded.code == plain.code);
    CHECK(Json::parse(offloaded.out)["peak_memory_bytes"] == Json::parse(plain.out)["peak_memory_bytes"]);
    CHECK_THAT(offloaded.err, Catch::Contains("unified memory") && Catch::Contains("moves nothing"));
}

TEST_CASE("describe breaks the peak down per strategy and offload", "[tools][fit_advice]") {
    const Result r = cli({"describe", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--seq", "2048",
                          "--recompute", "full", "--json"});
    REQUIRE(r.code == 0);
    const Json j = Json::parse(r.out);
    REQUIRE(j.contains("memory"));
    std::map<std::string, bool> fits;
    for (const Json& row : j["memory"]) {
        fits[row["strategy"].get<std::string>() + "/" + row["offload"].get<std::string>()] = row["fits"].get<bool>();
        std::int64_t sum = 0;
        for (const auto& [k, v] : row["device"].items()) sum += v.get<std::int64_t>();
        CHECK(sum == row["device_peak_bytes"].get<std::int64_t>());
    }
    CHECK_FALSE(fits.at("ddp/none"));
    CHECK_FALSE(fits.at("zero3/none"));
    CHECK(fits.at("zero3/cpu"));
    CHECK(fits.at("zero3/nvme"));   // the workstation's 2 TB drive
    CHECK(fits.at("fsdp/cpu"));
    CHECK(fits.count("ddp/cpu") == 0);   // ddp has no offload
    const Result text = cli({"describe", "--model", "llama3-8b", "--cluster", "workstation-4gpu", "--seq", "2048",
                             "--recompute", "full"});
    CHECK_THAT(text.out, Catch::Contains("zero3 --offload cpu") && Catch::Contains("host:"));
}

TEST_CASE("describe --ep shows the strategies that shard experts, with the experts spread", "[tools][fit_advice][moe]") {
    // Mixtral-8x7B on two DGX A100 with ep 8: each rank holds one of the 8 experts of every layer.
    // DDP keeps 16 bytes a parameter of the dense part and its one expert; zero1 (Megatron's)
    // shards the optimizer's 12 over dp (dense) and dp / ep (experts); FSDP shards all 16 that way.
    const std::string mixtral = std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json";
    const Result r = cli({"describe", "--model", mixtral, "--cluster", "dgx-a100", "--nodes", "2", "--ep", "8", "--seq",
                          "4096", "--recompute", "full", "--json"});
    REQUIRE(r.code == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["ep"] == 8);
    const double experts = 32.0 * 8 * 3 * 4096 * 14336, dense = 46'702'792'704.0 - experts;
    const Json& states = j["model_state_bytes"];
    CHECK(states.size() == 3);
    CHECK(states["ddp"].get<double>() == Approx(16 * (dense + experts / 8)).epsilon(1e-3));
    CHECK(states["zero1"].get<double>() == Approx(4 * (dense + experts / 8) + 12 * (dense / 16 + experts / 8 / 2)).epsilon(1e-3));
    CHECK(states["fsdp"].get<double>() == Approx(16 * (dense / 16 + experts / 8 / 2)).epsilon(1e-3));
    std::map<std::string, bool> fits;
    for (const Json& row : j["memory"]) fits[row["strategy"].get<std::string>() + "/" + row["offload"].get<std::string>()] = row["fits"].get<bool>();
    // zero1 also offloaded: Megatron's --optimizer-cpu-offload runs with expert parallelism.
    CHECK(fits == std::map<std::string, bool>{{"ddp/none", false}, {"zero1/none", true}, {"zero1/cpu", true}, {"fsdp/none", true}});
    CHECK(cli({"describe", "--model", "gpt2-small", "--ep", "2"}).code == 2);   // no cluster to spread experts over
    SECTION("with LoRA: ddp and zero1, whose frozen experts stay put and whose adapters' states zero1 shards") {
        // Each rank's frozen bf16 weights (dense and its expert) and its adapters' 2 + 2 + 12 bytes
        // (zero1: the 12 over dp for the dense adapters, over dp / ep for the experts'). Mixtral's
        // adapters at rank 8 (PEFT's, r·(in + out)): q, k, v, o 4096→4096, →1024, →1024, 4096→4096
        // and each expert's w1, w3 4096→14336 and w2 14336→4096, 32 layers.
        const Result l = cli({"describe", "--model", mixtral, "--cluster", "dgx-a100", "--nodes", "2", "--ep", "8", "--seq",
                              "4096", "--recompute", "full", "--finetune", "lora:8", "--json"});
        REQUIRE(l.code == 0);
        const Json lj = Json::parse(l.out);
        const Json& ls = lj["model_state_bytes"];
        CHECK(ls.size() == 2);
        const double a_dense = 32.0 * 8 * (2 * (4096 + 4096) + 2 * (4096 + 1024)), a_expert = 32.0 * 8 * 3 * (4096 + 14336);
        CHECK(ls["ddp"].get<double>() == Approx(2 * (dense + experts / 8) + 16 * (a_dense + a_expert)).epsilon(1e-3));
        CHECK(ls["zero1"].get<double>() ==
              Approx(2 * (dense + experts / 8) + 4 * (a_dense + a_expert) + 12 * (a_dense / 16 + a_expert / 2)).epsilon(1e-3));
    }
}

TEST_CASE("a DeepSpeed config's offload devices become the plan's", "[tools][fit_advice][deepspeed]") {
    TempFile cfg("ds_offload_test.json", R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
        "offload_param": {"device": "nvme"}}, "optimizer": {"type": "AdamW"}})");
    const Result r = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                          cfg.path.string(), "--json"});
    REQUIRE(r.code == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["strategy"] == "zero3");
    CHECK(j["memory"]["host"]["optimizer_state"].get<std::int64_t>() > 0);
    CHECK(j["memory"]["nvme"]["parameters"].get<std::int64_t>() > 0);
    SECTION("stage 2 with NVMe runs from CPU memory, as DeepSpeed does") {
        TempFile s2("ds_offload_s2.json", R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})");
        const Result r2 = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                               s2.path.string(), "--json"});
        REQUIRE(r2.code == 0);
        CHECK_THAT(r2.err, Catch::Contains("runs as cpu"));
        CHECK(Json::parse(r2.out)["memory"]["host"]["optimizer_state"].get<std::int64_t>() > 0);
    }
    SECTION("a flag that contradicts the config") {
        const Result bad = cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--deepspeed-config",
                                cfg.path.string(), "--offload-optimizer", "nvme"});
        CHECK(bad.code == 2);
        CHECK_THAT(bad.err, Catch::Contains("--offload-optimizer nvme contradicts"));
    }
}
