// The published-measurement harness: reading validation/, mapping rows to command lines (checked
// against hand-written ones), Megatron's vocabulary padding, the metric conversions, that no row
// is dropped, that results do not depend on the thread count, and one SECTION per bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/published.hpp"
#include "sim/simulator.hpp"
#include "test_support.hpp"
#include "topologies/profile.hpp"
#include "topologies/topology.hpp"

using namespace smol;
using namespace smol::bench;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;
namespace fs = std::filesystem;

namespace {

const std::string kValidation = std::string(SMOL_SOURCE_DIR) + "/validation";

const std::vector<Row>& all_rows() {
    static const std::vector<Row> rows = read_validation(kValidation);
    return rows;
}

const Row& row(const std::string& id) {
    const auto& rows = all_rows();
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.id == id; });
    REQUIRE(it != rows.end());
    return *it;
}

/// Lines of a file that hold data: not empty, not the CSV header.
std::size_t data_lines(const std::string& path, bool header) {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line))
        if (!line.empty() && line != "\r") ++n;
    return header ? n - 1 : n;
}

bool has_args(const Mapping& m, const std::vector<std::string>& run) {
    return std::search(m.args.begin(), m.args.end(), run.begin(), run.end()) != m.args.end();
}

/// A scratch file, removed at the end of the test.
struct TempFile {
    fs::path path;
    TempFile(const std::string& name, const std::string& text) : path(fs::temp_directory_path() / name) {
        std::ofstream(path, std::ios::binary) << text;
    }
    ~TempFile() { fs::remove(path); }
};

}  // namespace

TEST_CASE("a vTrain row maps to the command line written by hand", "[bench][published]") {
    // validation/vtrain-single-node.csv line 5: 8 GPUs, global batch 8, micro-batch 2, hidden 2048,
    // 16 heads, 20 layers, seq 1024, tp 4, dp 1, pp 2, 160.6027 ms.
    const Row& r = row("V0004");
    CHECK(r.line == 5);
    const Mapping m = map_row(r, "/models");
    REQUIRE(m.representable());
    const std::vector<std::string> expected{
        "simulate", "--model", "/models/gpt-l20-h2048-a16-f8192-v50257-s1024.json", "--cluster", "hgx-a100-4hdr",
        "--devices", "8", "--tp", "4", "--pp", "2", "--dp", "1", "--micro-batch", "2", "--global-batch", "8",
        "--dtype", "fp16", "--recompute", "full", "--schedule", "1f1b", "--profile", kValidation + "/vtrain-a100-nccl.json",
        "--strategy", "ddp", "--framework", "megatron-deepspeed", "--attention", "eager", "--json"};
    CHECK(m.args == expected);
    CHECK(command_line(m.args).rfind("smolcluster simulate --model /models/", 0) == 0);
    REQUIRE(m.model);
    const Json model = model_json(*m.model);
    CHECK(model == Json::parse(R"({"kind": "transformer", "name": "gpt-l20-h2048-a16-f8192-v50257-s1024",
        "layers": 20, "hidden": 2048, "heads": 16, "kv_heads": 16, "ffn_hidden": 8192, "vocab": 50257, "seq": 1024,
        "tied_embeddings": true, "gated_mlp": false, "biases": true, "norm": "layernorm", "positions": "learned"})"));
    REQUIRE(m.metric);
    CHECK(m.metric->kind == MetricKind::step_time);
    CHECK(measured_step_seconds(m, 0) == Approx(0.1606027));
}

TEST_CASE("a multi-node vTrain row maps to whole 8-GPU nodes", "[bench][published]") {
    // validation/vtrain-multi-node.csv line 2: a 3.6 B model (30 layers, hidden 3072, 32 heads,
    // seq 2048) on 64 GPUs, global batch 512, micro-batch 8, tp 1, dp 64, pp 1, 3,566.5 ms. The
    // size in billions is a label: 12 · 30 · 3072² ≈ 3.4e9 in the layers plus the embeddings.
    const Row& r = row("M0001");
    CHECK(r.line == 2);
    CHECK(r.source == "vtrain-multi");
    const Mapping m = map_row(r, "/models");
    REQUIRE(m.representable());
    const std::vector<std::string> expected{
        "simulate", "--model", "/models/gpt-l30-h3072-a32-f12288-v50257-s2048.json", "--cluster", "hgx-a100-4hdr",
        "--nodes", "8", "--tp", "1", "--pp", "1", "--dp", "64", "--micro-batch", "8", "--global-batch", "512",
        "--dtype", "fp16", "--recompute", "full", "--schedule", "1f1b", "--profile", kValidation + "/vtrain-a100-nccl.json",
        "--strategy", "ddp", "--framework", "megatron-deepspeed", "--attention", "eager", "--json"};
    CHECK(m.args == expected);
    REQUIRE(m.metric);
    CHECK(measured_step_seconds(m, 0) == Approx(3.5665));
    // The 175 B rows are GPT-3's shape: 96 layers of 12,288.
    const Mapping big = map_row(row("M0089"), "/models");
    // GPT-2's vocabulary as the tokenizer has it: Megatron-DeepSpeed pads it (to 512 at tp 4).
    CHECK(big.args[2] == "/models/gpt-l96-h12288-a96-f49152-v50257-s2048.json");
    CHECK(big.args[6] == "64");   // 512 GPUs
}

TEST_CASE("the published rows map to the plans their sources describe", "[bench][published]") {
    SECTION("Llama 3 405B on 8,192 Grand Teton H100s") {
        const Mapping m = map_row(row("P01"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--cluster", "grand-teton-h100", "--nodes", "1024", "--tp", "8", "--pp", "16", "--dp", "64"}));
        CHECK(has_args(m, {"--micro-batch", "1", "--global-batch", "2048", "--dtype", "bf16"}));  // 32 per dp group × 64
        CHECK(model_file_name(*m.model) == "llama-l126-h16384-a128-kv8-f53248-v128256-s8192.json");
        CHECK(has_args(m, {"--make-vocab-size-divisible-by", "1"}));   // Meta's stack: 128,256 rows, not Megatron's 129,024
        CHECK(has_args(m, {"--dp", "64", "--sp"}));   // not stated; without it no row fits the GPUs' 80 GB
        CHECK(m.metric->kind == MetricKind::model_tflops_per_gpu);
    }
    SECTION("P02 names the model of P01") {
        const Mapping m = map_row(row("P02"), "/models");
        REQUIRE(m.representable());
        CHECK(*m.model == *map_row(row("P01"), "/models").model);
        CHECK(has_args(m, {"--nodes", "2048", "--tp", "8", "--pp", "16", "--dp", "128"}));
    }
    SECTION("GPT-3 175B in NeMo on DGX H100: interleaved, 12 virtual stages, sequence parallel") {
        const Mapping m = map_row(row("P05"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--cluster", "dgx-h100", "--nodes", "16", "--tp", "4", "--pp", "8", "--dp", "4", "--schedule",
                           "interleaved", "--virtual-stages", "12", "--sp"}));
        CHECK(model_file_name(*m.model) == "gpt-l96-h12288-a96-f49152-v51200-s2048.json");
        CHECK(has_args(m, {"--framework", "megatron", "--overlap-grad-reduce"}));   // the recipe's overlap_grad_sync
        CHECK(has_args(m, {"--bucket-mb", "220"}));                                 // its bucket_cap_mb
        CHECK(has_args(m, {"--overlap-param-gather"}));                             // its overlap_param_sync
        CHECK(measured_step_seconds(m, 0) == Approx(8.309));
    }
    SECTION("Llama 3.1 70B in NeMo on DGX H100: context parallelism 2 inside tp 4 · pp 4") {
        const Mapping m = map_row(row("P09"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--cluster", "dgx-h100", "--nodes", "8", "--tp", "4", "--pp", "4", "--dp", "2", "--schedule",
                           "interleaved", "--virtual-stages", "5", "--sp"}));
        CHECK(has_args(m, {"--cp", "2"}));
        CHECK(has_args(m, {"--tp-comm-overlap"}));   // llama3.1_70b.yaml:129 ub_tp_comm_overlap
        CHECK(model_file_name(*m.model) == "llama-l80-h8192-a64-kv8-f28672-v128256-s8192.json");
        CHECK(measured_step_seconds(m, 0) == Approx(14.72));
    }
    SECTION("GPT-3 175B in FP8 (P08): the BF16 rows' plan, Transformer Engine's delayed scaling") {
        const Mapping m = map_row(row("P08"), "/models");
        REQUIRE(m.representable());
        CHECK(*m.model == *map_row(row("P05"), "/models").model);
        CHECK(has_args(m, {"--virtual-stages", "12", "--sp"}));
        CHECK(has_args(m, {"--fp8", "delayed"}));
        CHECK(measured_step_seconds(m, 0) == Approx(5.626));
    }
    SECTION("NeMo's FP8 performance summary: the recipe's shape and settings, the row's layout") {
        // GPT3-5B: 5b_fp8_performance.yaml, 24 × 4096, 32 heads, GPT-2's vocabulary (NeMo pads it as
        // Megatron does, to 128 at tp 1: --framework megatron).
        const Mapping g = map_row(row("P12"), "/models");
        REQUIRE(g.representable());
        CHECK(model_file_name(*g.model) == "gpt-l24-h4096-a32-f16384-v50257-s2048.json");
        CHECK(has_args(g, {"--nodes", "8", "--tp", "1", "--pp", "1", "--dp", "64", "--strategy", "zero1"}));
        CHECK(has_args(g, {"--recompute", "selective"}));
        CHECK(has_args(g, {"--fp8", "delayed"}));
        CHECK_FALSE(has_args(g, {"--sp"}));   // tp 1
        // distributed_fused_adam's overlap_grad_sync, overlap_param_sync and bucket_cap_mb 400.
        CHECK(has_args(g, {"--overlap-grad-reduce", "--bucket-mb", "400"}));
        CHECK(has_args(g, {"--overlap-param-gather"}));
        // 2048 samples of 2048 tokens at 22,521 tokens/s on each of 64 GPUs.
        CHECK(measured_step_seconds(g, 0) == Approx(2048.0 * 2048 / (22521.0 * 64)));
        // Llama3-8B with context parallelism 2 on one node.
        const Mapping l = map_row(row("P17"), "/models");
        REQUIRE(l.representable());
        CHECK(model_file_name(*l.model) == "llama-l32-h4096-a32-kv8-f14336-v128256-s8192.json");
        CHECK(has_args(l, {"--cp", "2"}));
        CHECK(has_args(l, {"--bucket-mb", "125"}));
        CHECK(has_args(l, {"--recompute", "none"}));
        CHECK(has_args(l, {"--fp8", "delayed"}));
    }
    SECTION("Megatron-Bridge's Llama 3.1 405B in FP8 current scaling: 126 layers on 64 virtual stages") {
        const Mapping m = map_row(row("P19"), "/models");
        REQUIRE(m.representable());
        CHECK(model_file_name(*m.model) == "llama-l126-h16384-a128-kv8-f53248-v128256-s8192.json");
        CHECK(has_args(m, {"--tp", "8", "--pp", "8", "--dp", "8", "--cp", "2", "--sp"}));
        CHECK(has_args(m, {"--schedule", "interleaved", "--virtual-stages", "8"}));
        CHECK(has_args(m, {"--fp8", "tensorwise"}));
        // CommOverlapConfig(tp_comm_overlap=True) and, with dp > 1, its optimizer overlaps in buckets
        // of 128 Mi bf16 gradients; the scripts' overlap of the first chunk's gathers with the step.
        CHECK(has_args(m, {"--overlap-grad-reduce", "--bucket-mb", "256", "--overlap-param-gather",
                           "--overlap-param-gather-with-optimizer-step", "--tp-comm-overlap"}));
        // The embedding and the loss count as layers: 128 over 64 chunks, one layer on the first and the last.
        const auto at = std::find(m.args.begin(), m.args.end(), "--stage-layers");
        REQUIRE(at != m.args.end());
        const std::string stages = *(at + 1);
        CHECK(stages.rfind("1,2,2,", 0) == 0);
        CHECK(stages.size() == 2 * 64 - 1);
        CHECK(stages.substr(stages.size() - 4) == ",2,1");
        // 512 samples of 8,192 tokens at 292 tokens/s on each of 1,024 GPUs.
        CHECK(measured_step_seconds(m, 0) == Approx(512.0 * 8192 / (292.0 * 1024)));
    }
    SECTION("Llama 3 405B at 131,072 tokens: cp 16 over 16 nodes") {
        const Mapping m = map_row(row("P03"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--nodes", "2048", "--tp", "8", "--pp", "16", "--dp", "8"}));
        CHECK(has_args(m, {"--cp", "16", "--cp-comm", "all-gather"}));   // Llama 3 all-gathers K and V (§3.3.2)
        CHECK(model_file_name(*m.model) == "llama-l126-h16384-a128-kv8-f53248-v128256-s131072.json");
    }
    SECTION("GPT-OSS-120B on 64 H100s: pp 4, expert parallelism 8 inside dp 16, from its config.json, at its recipe's micro-batch") {
        const Mapping m = map_row(row("P20"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--model", "/models/gpt-oss-120b.json", "--cluster", "dgx-h100", "--nodes", "8", "--tp", "1",
                           "--pp", "4", "--dp", "16", "--ep", "8"}));
        // Megatron-Bridge v0.2.0's GPT_OSS_120B_H100_BF16_BASE_CONFIG: micro_batch_size 1 (the row's 4 is the B200 row's).
        CHECK(has_args(m, {"--micro-batch", "1", "--global-batch", "512", "--seq", "4096", "--dtype", "bf16"}));
        REQUIRE(m.model_config);
        CHECK(m.model_config->second.at("model_type") == "gpt_oss");
        CHECK_FALSE(m.model);
        // tokens/s per GPU: 512 × 4096 tokens over 64 GPUs at 5,630 tokens/s each.
        CHECK(measured_step_seconds(m, 0) == Approx(512.0 * 4096 / (5630.0 * 64)));
        // The same recipe in the 26.02 summary, at global batch 1,280 and the micro-batch it states.
        const Mapping v2 = map_row(row("P48"), "/models");
        REQUIRE(v2.representable());
        CHECK(has_args(v2, {"--pp", "4", "--dp", "16", "--ep", "8"}));
        CHECK(has_args(v2, {"--micro-batch", "1", "--global-batch", "1280", "--seq", "4096", "--dtype", "bf16"}));
        // The recipe's recompute_modules ["layernorm", "moe_act"]: selective from the 26.02 scripts
        // on (overrides.py sets the granularity with them); v0.2.0's left the granularity None.
        CHECK(has_args(v2, {"--recompute", "selective"}));
        CHECK(has_args(v2, {"--recompute-modules", "moe_act,layernorm"}));
        CHECK(has_args(m, {"--recompute", "none"}));
        CHECK(measured_step_seconds(v2, 0) == Approx(1280.0 * 4096 / (5993.0 * 64)));
        // Both releases' recipe overlaps the distributed optimizer's reduce-scatter and all-gather
        // (gpt_oss.py: DistributedDataParallelConfig overlap_grad_reduce, overlap_param_gather).
        for (const Mapping* x : {&m, &v2}) CHECK(has_args(*x, {"--strategy", "zero1", "--overlap-grad-reduce", "--overlap-param-gather"}));
    }
    SECTION("the vTrain samples of published.jsonl map like their CSV rows") {
        // P44 is line 45 of the CSV: 8,128,4,1024,16,20,1024,1,8,1,484.820972.
        const Row& csv = *std::find_if(all_rows().begin(), all_rows().end(), [](const Row& r) { return r.line == 45 && r.source == "vtrain"; });
        const Mapping a = map_row(row("P44"), "/models"), b = map_row(csv, "/models");
        CHECK(a.args == b.args);
        CHECK(measured_step_seconds(a, 0) == Approx(measured_step_seconds(b, 0)).epsilon(1e-4));
    }
    SECTION("ZeRO-Offload's 10 B GPT-2 on one V100, as DeepSpeed's tutorial runs it") {
        const Mapping m = map_row(row("P36"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--cluster", "dgx2-v100", "--devices", "1", "--strategy", "zero2", "--offload", "cpu",
                           "--recompute", "full", "--micro-batch", "10"}));
        CHECK(model_file_name(*m.model) == "gpt-l50-h4096-a32-f16384-v50304-s1024.json");
        // 40 TFLOP/s of Megatron's 96·B·s·l·h²·(1 + s/6h + V/16lh), recompute counted.
        const double flops = 96.0 * 10 * 1024 * 50 * 4096.0 * 4096 * (1 + 1024 / (6 * 4096.0) + 50304 / (16 * 50 * 4096.0));
        CHECK(measured_step_seconds(m, 0) == Approx(flops / 40e12));
    }
    SECTION("DeepSpeed on Azure: ZeRO-3 with the recipes' ds_config, the optimizer and checkpoints in host memory") {
        const Mapping m = map_row(row("P32"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--cluster", "ndm-a100-v4", "--nodes", "128"}));
        CHECK(has_args(m, {"--recompute", "full"}));
        CHECK(has_args(m, {"--global-batch", "8192"}));
        CHECK(has_args(m, {"--attention", "eager"}));   // no FlashAttention in Megatron-DeepSpeed before 2022-12
        REQUIRE(m.files.size() == 1);
        const Json& ds = m.files.front().second;
        CHECK(ds["zero_optimization"]["stage"] == 3);
        CHECK(ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu");
        CHECK(ds["activation_checkpointing"]["cpu_checkpointing"] == true);
        const double flops = 96.0 * 8192 * 1024 * 128 * 25600.0 * 25600 * (1 + 1024 / (6 * 25600.0) + 50304 / (16 * 128 * 25600.0));
        CHECK(measured_step_seconds(m, 0) == Approx(flops / (165.36e12 * 1024)));
    }
    SECTION("Megatron-Bridge's Llama 3 8B: Megatron-FSDP in FP8, five layers recomputed, as the 25.11 scripts run it") {
        const Mapping m = map_row(row("P18"), "/models");
        REQUIRE(m.representable());
        CHECK(has_args(m, {"--strategy", "fsdp"}));
        CHECK(has_args(m, {"--framework", "megatron@0.16"}));
        CHECK(has_args(m, {"--recompute", "full", "--recompute-method", "block", "--recompute-num-layers", "5"}));
        CHECK(has_args(m, {"--fp8", "tensorwise"}));
        CHECK(has_args(m, {"--global-batch", "128"}));
        CHECK_FALSE(has_args(m, {"--first-last-layers-bf16"}));   // the scripts turn the recipe's BF16 layers off
        // 14,451 tokens per second per GPU: 128 × 8,192 tokens over 8 GPUs.
        CHECK(measured_step_seconds(m, 0) == Approx(128.0 * 8192 / (14451.0 * 8)));
    }
    SECTION("rows the simulator cannot represent name their first missing feature") {
        CHECK(map_row(row("P23"), "/m").gaps.front().feature == "FP8");   // torchao's Float8, not Transformer Engine's
        CHECK(map_row(row("P31"), "/m").gaps.front().feature == "unknown batch");   // "1-8": the peak's not stated
        const Mapping opt = map_row(row("P04"), "/m");
        CHECK(opt.args.empty());
        CHECK(std::any_of(opt.gaps.begin(), opt.gaps.end(), [](const Gap& g) { return g.feature == "metric 'up to'"; }));
    }
}

TEST_CASE("every row of both files is simulated or reported with a reason", "[bench][published]") {
    const auto& rows = all_rows();
    // Counted apart from the reader: every data line of each file is a row.
    CHECK(rows.size() == data_lines(kValidation + "/vtrain-single-node.csv", true) +
                             data_lines(kValidation + "/vtrain-multi-node.csv", true) +
                             data_lines(kValidation + "/published.jsonl", false));
    CHECK(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.source == "vtrain"; }) == 1440);
    CHECK(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.source == "vtrain-multi"; }) == 109);
    std::set<std::string> ids, representable;
    for (const Row& r : rows) {
        INFO(r.id);
        CHECK(ids.insert(r.id).second);
        const Mapping m = map_row(r, "/models");
        if (m.representable()) {
            CHECK_FALSE(m.args.empty());
            CHECK((m.model || m.model_config));
            CHECK(m.metric);
            representable.insert(r.id);
        } else {
            CHECK(m.args.empty());
            for (const Gap& g : m.gaps) {
                CHECK_FALSE(g.feature.empty());
                CHECK_FALSE(g.detail.empty());
            }
        }
    }
    // By hand from published.jsonl: Llama 3 on 8K and 16K GPUs (P01, P02), GPT-3 175B in BF16 (P05-P07),
    // Llama 3 405B with context parallelism 16 (P03), Llama 3.1 70B with context parallelism 2
    // (P09-P11), GPT-OSS-120B with expert parallelism (P20, P48), DeepSpeed's ZeRO-3 with offload on
    // Azure at its stated micro-batches (P30, P32, P33), ZeRO-Offload's 10 B on one V100 (P36), the
    // two vTrain samples (P44, P45), and in FP8 GPT-3 175B (P08), NeMo's performance summary
    // (P12-P17) and Megatron-Bridge's Llama 3 8B under Megatron-FSDP (P18) and Llama 3.1 405B (P19);
    // the other 22 need hardware, batches, shapes or recipes the rows do not give.
    std::set<std::string> published;
    for (const std::string& id : representable)
        if (id[0] == 'P') published.insert(id);
    CHECK(published == std::set<std::string>{"P01", "P02", "P03", "P05", "P06", "P07", "P08", "P09", "P10", "P11", "P12",
                                             "P13", "P14", "P15", "P16", "P17", "P18", "P19", "P20", "P30", "P32", "P33",
                                             "P36", "P44", "P45", "P48"});
    CHECK(representable.size() == 1440 + 109 + 26);   // both vTrain files whole, and the rows above

    // Run the quick ones: every outcome is simulated or not representable, never lost or failed.
    std::vector<Row> quick;
    for (const Row& r : rows)
        if ((r.source == "vtrain" && quick.size() < 4) || r.id == "M0001" || r.id == "P05" || (r.id[0] == 'P' && !representable.count(r.id)) ||
            r.id == "P44" || r.id == "P45")
            quick.push_back(r);
    const auto outcomes = run_rows(quick, (fs::temp_directory_path() / "smolcluster-test-models").string(), 2);
    REQUIRE(outcomes.size() == quick.size());
    for (const Outcome& o : outcomes) {
        INFO(o.row.id << ": " << o.failure);
        CHECK(o.status == (representable.count(o.row.id) ? Status::simulated : Status::not_representable));
        if (o.status == Status::simulated) CHECK(o.simulated_step_s > 0);
    }
    const auto summary = summarize(outcomes);
    std::size_t counted = 0;
    for (const SourceSummary& s : summary) {
        std::size_t gaps = 0;
        for (const auto& [feature, ids] : s.gaps) gaps += ids.size();
        CHECK(s.simulated + s.failed + gaps == s.rows);
        if (s.source != kVtrainHeldOut) counted += s.rows;
    }
    CHECK(counted == quick.size());
    // The held-out summary: vTrain's rows but the dispatch calibration's.
    std::size_t held_out = 0;
    for (const Row& r : quick) held_out += r.source == "vtrain" && !dispatch_calibration_row(r);
    const auto h = std::find_if(summary.begin(), summary.end(), [](const SourceSummary& s) { return s.source == kVtrainHeldOut; });
    REQUIRE(h != summary.end());
    CHECK(h->rows == held_out);
}

TEST_CASE("the results do not depend on the number of threads", "[bench][published]") {
    std::vector<Row> rows(all_rows().begin(), all_rows().begin() + 6);
    const std::string dir = (fs::temp_directory_path() / "smolcluster-test-models").string();
    const auto one = run_rows(rows, dir, 1), three = run_rows(rows, dir, 3);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        CHECK(one[i].row.id == three[i].row.id);
        CHECK(one[i].simulated_step_s == three[i].simulated_step_s);  // exactly: same input, same output
        CHECK(one[i].error == three[i].error);
    }
}

TEST_CASE("metric conversions to a measured step time", "[bench][published]") {
    Mapping m;
    m.gpus = 8;
    m.global_batch = 16;
    m.seq = 8192;
    SECTION("tokens per second per GPU") {
        m.metric = Metric{"tokens_per_s_per_gpu", MetricKind::tokens_per_s_per_gpu, 5762, 1, ""};
        CHECK(measured_step_seconds(m, 0) == Approx(16.0 * 8192 / (5762.0 * 8)));  // 2.843 s
    }
    SECTION("model TFLOP/s per GPU, with the model's FLOPs per token") {
        m.metric = Metric{"tflops_per_gpu", MetricKind::model_tflops_per_gpu, 430, 1, ""};
        const double flops_per_token = 6 * 405e9;  // about 6 N for a 405B model
        CHECK(measured_step_seconds(m, flops_per_token) == Approx(flops_per_token * 16 * 8192 / (430e12 * 8)));
    }
    SECTION("milliseconds per iteration") {
        m.metric = Metric{"iter_ms", MetricKind::step_time, 372.160408, 1e-3, ""};
        CHECK(measured_step_seconds(m, 0) == Approx(0.372160408));
    }
}

TEST_CASE("bad validation files are errors that name the file and line", "[bench][published]") {
    const std::string header =
        "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
        "data parallelism,pipeline parallelism,iteration time (ms)\n";
    SECTION("a CSV whose header is not vTrain's") {
        TempFile f("smol-bad-header.csv", "gpus,batch\n2,16\n");
        const std::string m = bad_input_message([&] { read_vtrain_csv(f.path.string()); });
        CHECK_THAT(m, Contains("smol-bad-header.csv") && Contains("header"));
    }
    SECTION("a CSV row with too few fields") {
        TempFile f("smol-short-row.csv", header + "2,16,8\n");
        CHECK_THAT(bad_input_message([&] { read_vtrain_csv(f.path.string()); }), Contains("line 2") && Contains("found 3"));
    }
    SECTION("a CSV cell that is not a positive integer") {
        TempFile f("smol-bad-cell.csv", header + "2,16,8,1024,16,24,1024,1,1,2,372.1\n2,16,x,1024,16,24,1024,1,1,2,372.1\n");
        CHECK_THAT(bad_input_message([&] { read_vtrain_csv(f.path.string()); }),
                   Contains("'mbs' on line 3") && Contains("'x'"));
    }
    SECTION("a CSV row whose parallel degrees do not multiply to its GPUs") {
        TempFile f("smol-bad-degrees.csv", header + "8,16,8,1024,16,24,1024,1,1,2,372.1\n");
        const auto rows = read_vtrain_csv(f.path.string());
        CHECK_THAT(bad_input_message([&] { map_row(rows.at(0), "/m"); }), Contains("smol-bad-degrees.csv:2") && Contains("8 GPUs"));
    }
    SECTION("a multi-node CSV row whose size is not a number, or whose GPUs are not whole nodes") {
        const std::string multi =
            "Parameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
            "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n";
        TempFile f("smol-bad-size.csv", multi + "big,64,512,8,3072,32,30,2048,1,64,1,3566.5\n");
        CHECK_THAT(bad_input_message([&] { read_vtrain_csv(f.path.string()); }),
                   Contains("smol-bad-size.csv") && Contains("'Parameters (billion)' on line 2") && Contains("'big'"));
        TempFile g("smol-part-node.csv", multi + "3.6,12,48,8,3072,32,30,2048,1,12,1,3566.5\n");
        const auto rows = read_vtrain_csv(g.path.string());
        REQUIRE(rows.size() == 1);
        CHECK(rows[0].source == "vtrain-multi");
        CHECK_THAT(bad_input_message([&] { map_row(rows.at(0), "/m"); }), Contains("whole nodes of 8 GPUs") && Contains("12 GPUs"));
    }
    SECTION("a missing file") {
        CHECK_THAT(bad_input_message([] { read_validation("/nonexistent-validation"); }), Contains("cannot read"));
    }
    SECTION("a jsonl row from a source the harness does not know") {
        TempFile f("smol-unknown-src.jsonl", R"({"id": "X1", "src": "Somebody's blog", "metric": {}})" "\n");
        CHECK_THAT(bad_input_message([&] { read_published_jsonl(f.path.string()); }),
                   Contains("smol-unknown-src.jsonl:1") && Contains("/src") && Contains("Somebody's blog"));
    }
    SECTION("a first jsonl row that says 'same'") {
        TempFile f("smol-same-first.jsonl", R"({"id": "X1", "src": "same", "metric": {}})" "\n");
        CHECK_THAT(bad_input_message([&] { read_published_jsonl(f.path.string()); }), Contains("first row"));
    }
    SECTION("a jsonl line that is not JSON") {
        TempFile f("smol-not-json.jsonl", "{\"id\": \n");
        CHECK_THAT(bad_input_message([&] { read_published_jsonl(f.path.string()); }), Contains("smol-not-json.jsonl:1"));
    }
}

TEST_CASE("the dispatch calibration rows are vTrain's 48 host-bound rows", "[bench][published]") {
    std::size_t n = 0;
    for (const Row& r : all_rows()) n += dispatch_calibration_row(r);
    CHECK(n == 48);   // tests/strategies/test_framework.cpp recomputes the calibration from them
}

TEST_CASE("vTrain's rows take their all-reduces from vTrain's nccl-tests tables", "[bench][published]") {
    // validation/vtrain-nccl/AR_GPU<n>_1M_1024M_LUT, read here apart from make_profile.py: the
    // in-place time (ns, 6th column) of one message size.
    const auto lut_seconds = [](int gpus, std::int64_t bytes) {
        std::ifstream in(kValidation + "/vtrain-nccl/AR_GPU" + std::to_string(gpus) + "_1M_1024M_LUT");
        std::string line;
        std::getline(in, line);
        while (std::getline(in, line)) {
            std::vector<std::string> cells;
            std::stringstream s(line);
            for (std::string c; std::getline(s, c, ',');) cells.push_back(c);
            if (cells.size() == 7 && std::stoll(cells[0]) == bytes) return std::stod(cells[5]) * 1e-9;
        }
        return -1.0;
    };
    const std::string file = kValidation + "/vtrain-a100-nccl.json";
    const topo::Cluster node = topo::cluster_preset("hgx-a100-4hdr");
    for (const auto& [gpus, bytes] : {std::pair<int, std::int64_t>{8, 2 << 20}, {4, 16 << 20}, {2, 512 << 20}}) {
        INFO(gpus << " GPUs, " << bytes << " bytes");
        // As the harness runs a row: --devices first, then the profile (which keeps compute leads).
        const topo::Cluster c = topo::apply_profile(node.first_devices(gpus), topo::load_profile(file), file);
        CHECK(c.groups[0].device.launch_overhead == node.groups[0].device.launch_overhead);
        const topo::Topology topology(c);
        std::vector<int> members(static_cast<std::size_t>(gpus));
        for (int r = 0; r < gpus; ++r) members[static_cast<std::size_t>(r)] = r;
        OpGraph g(gpus);
        g.add_collective(CollectiveKind::all_reduce, members, Bytes(bytes), Stream::comm, Phase::comm);
        g.finalize();
        const double expected = lut_seconds(gpus, bytes);
        REQUIRE(expected > 0);
        CHECK(sim::simulate(g, c, topology, {}).makespan.to_seconds() == Approx(expected).epsilon(1e-9));
    }
}

TEST_CASE("vTrain's per-layer cost is recovered by least squares from each cell's rows", "[bench][published]") {
    // Rows made from known costs, t = a + L·d + n·b + n·L·c: the fit gives them back, per cell and for
    // the measured and the simulated times apart; cells it cannot solve are left out.
    auto outcome = [](int h, int tp, int pp, int mbs, int dp, int gbs, int layers, double measured, double simulated) {
        Outcome o;
        o.row.source = "vtrain";
        o.row.data = Json{{"h", h}, {"tp", tp}, {"pp", pp}, {"mbs", mbs}, {"dp", dp}, {"gbs", gbs}, {"L", layers}};
        o.status = Status::simulated;
        o.measured_step_s = measured;
        o.simulated_step_s = simulated;
        return o;
    };
    std::vector<Outcome> outcomes;
    const double a = 0.010, d = 0.0004, b = 0.002, c = 0.003;
    for (const auto& [dp, gbs, layers] :
         std::vector<std::tuple<int, int, int>>{{1, 4, 12}, {2, 16, 16}, {1, 8, 24}, {2, 32, 20}, {1, 16, 12}}) {
        const double n = static_cast<double>(gbs) / (2 * dp);
        outcomes.push_back(outcome(1024, 2, 1, 2, dp, gbs, layers, a + layers * d + n * b + n * layers * c,
                                   2 * a + layers * 2 * d + n * b + n * layers * 1.5 * c));
    }
    // Left out: a pipeline-parallel row, another source's row, a cell of two rows, a cell whose
    // rows all have the same n (the costs cannot be told apart).
    outcomes.push_back(outcome(1024, 2, 2, 2, 1, 8, 12, 1.0, 1.0));
    outcomes.push_back(outcome(1024, 2, 1, 2, 1, 8, 12, 1.0, 1.0));
    outcomes.back().row.source = "llama3-herd";
    for (int i = 0; i < 3; ++i) outcomes.push_back(outcome(2048, 1, 1, 1, 1, 4 * (i + 1), 12 + i, 0.1, 0.1));
    for (int i = 0; i < 5; ++i) outcomes.push_back(outcome(2048, 4, 1, 1, 1, 4, 12 + 4 * i, 0.1 + i, 0.1 + i));

    const std::vector<LayerCostFit> fits = vtrain_layer_costs(outcomes);
    REQUIRE(fits.size() == 1);
    const LayerCostFit& f = fits[0];
    CHECK(f.hidden == 1024);
    CHECK(f.tp == 2);
    CHECK(f.micro_batch == 2);
    CHECK(f.rows == 5);
    CHECK(f.measured_a == Approx(a));
    CHECK(f.measured_d == Approx(d));
    CHECK(f.simulated_d == Approx(2 * d));
    CHECK(f.measured_b == Approx(b));
    CHECK(f.measured_c == Approx(c));
    CHECK(f.simulated_a == Approx(2 * a));
    CHECK(f.simulated_b == Approx(b));
    CHECK(f.simulated_c == Approx(1.5 * c));
}
