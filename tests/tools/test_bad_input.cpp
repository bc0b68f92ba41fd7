// The bad-input catalogue: every class of input that once crashed, hung, overflowed, ran away,
// surfaced a library exception, fell back to a default or was silently ignored — and every input
// kind (model JSON, HuggingFace config, cluster JSON, each flag) — each asserting the exit status
// (2: bad input) and that the message names the place: the file, the JSON path, or the flag.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <initializer_list>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "core/json.hpp"
#include "tools/cli_fixtures.hpp"

using namespace smol;
using namespace smol::test;
namespace fs = std::filesystem;

namespace {

/// Runs the command; checks it exits `code` and its message holds every `part`.
void refused(const std::vector<std::string>& args, std::initializer_list<std::string> parts, int code = 2) {
    const Result r = cli(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    INFO(line);
    INFO(r.err);
    CHECK(r.code == code);
    CHECK_THAT(r.err, Catch::StartsWith("smolcluster: error: "));
    for (const std::string& p : parts) CHECK_THAT(r.err, Catch::Contains(p));
}

/// `simulate` of gpt2-small on four Pis with extra flags.
std::vector<std::string> simulate(std::initializer_list<std::string> extra, const std::string& model = "gpt2-small",
                                  const std::string& cluster = "pi5-1gbe") {
    std::vector<std::string> a{"simulate", "--model", model, "--cluster", cluster};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

/// The pi5-1gbe preset with one replacement: `from` (which must occur) becomes `to`.
std::string pi5_with(const std::string& from, const std::string& to) {
    std::string text = read(fs::path(SMOL_SOURCE_DIR) / "topologies/presets/pi5-1gbe.json");
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}

const char* kTransformer =
    R"({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq": 32})";

std::string transformer_with(const std::string& from, const std::string& to) {
    std::string text = kTransformer;
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("bad input: model JSON", "[tools][bad_input]") {
    SECTION("a hidden size of 2^31 - 1 overflows the layer's parameters: an error naming the model") {
        TempFile f("smol-bad-hidden.json", transformer_with("\"hidden\": 64, \"heads\": 4", "\"hidden\": 2147483647, \"heads\": 1, \"ffn_hidden\": 1"));
        refused(simulate({}, f.path.string()), {"smol-bad-hidden", "parameters", "2^63"});
    }
    SECTION("the default ffn width 4 × hidden would pass 2^31") {
        TempFile f("smol-bad-ffn.json", transformer_with("\"hidden\": 64, \"heads\": 4", "\"hidden\": 1073741824, \"heads\": 1"));
        refused(simulate({}, f.path.string()), {"smol-bad-ffn.json", "at /hidden", "below 2^29"});
    }
    SECTION("a number beyond a double (1e309): line, column and path, not an internal error") {
        TempFile f("smol-bad-1e309.json", transformer_with("\"vocab\": 100", "\"vocab\": 1e309"));
        refused(simulate({}, f.path.string()), {"smol-bad-1e309.json", "at /vocab", "line 1, column", "1e309"});
    }
    SECTION("a duplicate key is an error naming it, not the last value silently") {
        TempFile f("smol-bad-dup.json", transformer_with("\"layers\": 2", "\"layers\": 2, \"layers\": 3"));
        refused(simulate({}, f.path.string()), {"smol-bad-dup.json", "at /layers", "duplicate key 'layers'"});
    }
    SECTION("JSON nested deeper than 64 levels") {
        TempFile f("smol-bad-deep.json", std::string(100, '[') + std::string(100, ']'));
        refused(simulate({}, f.path.string()), {"smol-bad-deep.json", "64 levels"});
    }
    SECTION("a million layers") {
        TempFile f("smol-bad-layers.json", transformer_with("\"layers\": 2", "\"layers\": 1000000"));
        refused(simulate({}, f.path.string()), {"smol-bad-layers", "at most 100000 layers"});
    }
    SECTION("a FIFO as --model is refused at once, not read forever") {
        const fs::path fifo = fs::temp_directory_path() / "smol-bad-fifo.json";
        fs::remove(fifo);
        REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
        const auto t0 = std::chrono::steady_clock::now();
        refused(simulate({}, fifo.string()), {"smol-bad-fifo.json", "FIFO"});
        CHECK(seconds_since(t0) < 5);
        fs::remove(fifo);
    }
    SECTION("/dev/zero as --model") { refused(simulate({}, "/dev/zero"), {"/dev/zero", "character device"}); }
    SECTION("a file over 16 MiB") {
        TempFile f("smol-bad-big.json", std::string(17 << 20, ' '));
        refused(simulate({}, f.path.string()), {"smol-bad-big.json", "at most 16.8 MB"});
    }
    SECTION("a missing path is a missing file, not an unknown preset") {
        refused(simulate({}, "models/none.json"), {"models/none.json", "no such file"});
    }
    SECTION("a layer list with a negative parameter count") {
        TempFile f("smol-bad-list.json", R"({"kind": "layers", "input_bytes_per_sample": 4, "layers": [
            {"name": "fc", "kind": "fc", "params": -1, "fwd_flops": 1, "activations": 4, "output": 4}]})");
        refused(simulate({}, f.path.string()), {"smol-bad-list.json", "at /layers/0/params"});
    }
}

TEST_CASE("bad input: HuggingFace config.json", "[tools][bad_input]") {
    const std::string gpt2 = read(data("hf-gpt2-config.json"));
    auto with = [&](const std::string& from, const std::string& to) {
        std::string text = gpt2;
        const std::size_t at = text.find(from);
        REQUIRE(at != std::string::npos);
        return text.replace(at, from.size(), to);
    };
    SECTION("n_embd whose default n_inner (4 × n_embd) passes 2^31") {
        TempFile f("smol-hf-embd.json", with("\"n_embd\": 768", "\"n_embd\": 1073741824"));
        refused(simulate({}, f.path.string()), {"smol-hf-embd.json", "at /n_embd"});
    }
    SECTION("zero layers") {
        TempFile f("smol-hf-zero.json", with("\"n_layer\": 12", "\"n_layer\": 0"));
        refused(simulate({}, f.path.string()), {"smol-hf-zero.json", "at /n_layer", "a positive integer"});
    }
    SECTION("a vocabulary of 1e309") {
        TempFile f("smol-hf-vocab.json", with("\"vocab_size\": 50257", "\"vocab_size\": 1e309"));
        refused(simulate({}, f.path.string()), {"smol-hf-vocab.json", "at /vocab_size", "beyond the range of a double"});
    }
    SECTION("a duplicate key") {
        TempFile f("smol-hf-dup.json", with("\"n_head\": 12", "\"n_head\": 12, \"n_head\": 16"));
        refused(simulate({}, f.path.string()), {"smol-hf-dup.json", "at /n_head", "duplicate key"});
    }
}

TEST_CASE("bad input: cluster JSON", "[tools][bad_input]") {
    SECTION("a NIC of 1 B/s or 1e-300 B/s is out of the documented range, not an engine error") {
        for (const char* bw : {"\"1 B/s\"", "\"1e-300 B/s\"", "1e-300", "\"2 PB/s\""}) {
            TempFile f("smol-cl-nic.json", pi5_with("\"1 Gbit/s\"", bw));
            refused(simulate({}, "gpt2-small", f.path.string()), {"smol-cl-nic.json", "at /node_groups/0/nics/bandwidth", "1 KB/s to 1 PB/s"});
        }
    }
    SECTION("a launch overhead of 9e6 s") {
        TempFile f("smol-cl-launch.json", pi5_with("\"launch_overhead\": \"10 us\"", "\"launch_overhead\": 9e6"));
        refused(simulate({}, "gpt2-small", f.path.string()),
                {"smol-cl-launch.json", "at /device_kinds/pi5-8gb/launch_overhead", "from 0 to 1 s"});
    }
    SECTION("a FLOP rate of 1 FLOP/s") {
        TempFile f("smol-cl-peak.json", pi5_with("\"60.4 GFLOP/s\"", "\"1 FLOP/s\""));
        refused(simulate({}, "gpt2-small", f.path.string()), {"at /device_kinds/pi5-8gb/peak/fp32", "1 MFLOP/s"});
    }
    SECTION("a number beyond a double, with its path") {
        const std::string text = pi5_with("\"gemm_efficiency\": 0.9", "\"gemm_efficiency\": 1e309");
        TempFile f("smol-cl-1e309.json", text);
        // The line the number is on, counted in the file itself.
        const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(text.find("1e309")), '\n');
        refused(simulate({}, "gpt2-small", f.path.string()),
                {"at /device_kinds/pi5-8gb/gemm_efficiency", "line " + std::to_string(line) + ","});
    }
    SECTION("a duplicate key names the key where it repeats") {
        TempFile f("smol-cl-dup.json", pi5_with("\"count\": 4,", "\"count\": 4, \"count\": 5,"));
        refused(simulate({}, "gpt2-small", f.path.string()), {"at /node_groups/0/count:", "duplicate key 'count'"});
    }
    SECTION("more than ten million devices") {
        TempFile f("smol-cl-huge.json", R"({"name": "huge", "device_kinds": {"cpu": {"cpu": true, "peak": {"fp32": "1 TFLOP/s"},
            "memory": "8 GB", "memory_bandwidth": "10 GB/s", "launch_overhead": "1 us"}},
          "node_groups": [{"name": "n", "count": 10000, "device": "cpu", "devices_per_node": 4096, "host_memory": "8 GB",
            "host_memory_bandwidth": "10 GB/s", "intra": {"kind": "pcie", "bandwidth": "1 GB/s", "latency": "1 us"},
            "host_link": {"bandwidth": "1 GB/s", "latency": "1 us"}, "nics": {"bandwidth": "1 GB/s", "latency": "1 us"}}],
          "network": {"fabric": "switch", "switch_latency": "1 us"}})");
        refused(simulate({}, "gpt2-small", f.path.string()), {"smol-cl-huge.json", "at /node_groups", "10 million devices"});
    }
    SECTION("a FIFO and /dev/zero as --cluster") {
        const fs::path fifo = fs::temp_directory_path() / "smol-cl-fifo.json";
        fs::remove(fifo);
        REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
        refused(simulate({}, "gpt2-small", fifo.string()), {"smol-cl-fifo.json", "FIFO"});
        fs::remove(fifo);
        refused(simulate({}, "gpt2-small", "/dev/zero"), {"/dev/zero", "character device"});
    }
}

TEST_CASE("bad input: each plan flag", "[tools][bad_input]") {
    SECTION("crash: --global-batch 2^35 truncated the micro-batch count to 0") {
        refused(simulate({"--global-batch", "34359738368"}), {"--global-batch", "micro-batches per replica"});
    }
    SECTION("crash: --tp 65536 --pp 65536 overflowed tp · pp to 0") {
        refused(simulate({"--tp", "65536", "--pp", "65536"}, "gpt2-small", "dgx-a100"), {"--tp", "larger than the 8 devices"});
        refused(simulate({"--pp", "65536"}, "gpt2-small", "dgx-a100"), {"--pp", "larger than the 8 devices"});
    }
    SECTION("overflow: --micro-batch 2^31 - 1 makes sizes beyond 64 bits") {
        refused(simulate({"--micro-batch", "2147483647", "--global-batch", "8589934588"}), {"--micro-batch"});
    }
    SECTION("overflow: --seq beyond the model's positions") {
        refused(simulate({"--seq", "1000000000"}), {"--seq", "exceeds the 1024 positions"});
    }
    SECTION("runaway: bucket sizes of 1e-9, 1e308, inf or nan MiB") {
        for (const char* v : {"1e-9", "1e308", "inf", "nan", "0", "-1"}) {
            refused(simulate({"--bucket-mb", v}), {"--bucket-mb", "in MiB from 0.0009765625 (1 KiB) to 1048576 (1 TiB)"});
            refused(simulate({"--first-bucket-mb", v}), {"--first-bucket-mb", "1 TiB"});
            refused(simulate({"--strategy", "ring", "--fusion-mb", v}), {"--fusion-mb", "1 TiB"});
        }
        refused(simulate({"--strategy", "ring", "--cycle-ms", "1e12"}), {"--cycle-ms", "60000"});
        refused(simulate({"--strategy", "ring", "--cycle-ms", "-1"}), {"--cycle-ms", "60000"});
    }
    SECTION("--recompute-modules: Megatron's names, with selective recompute, where the model has the module") {
        refused(simulate({"--recompute", "selective", "--recompute-modules", "mlp,attn"}), {"--recompute-modules", "\"attn\""});
        refused(simulate({"--recompute-modules", "mlp", "--framework", "megatron"}), {"--recompute-modules", "needs --recompute selective"});
        refused(simulate({"--recompute", "selective", "--recompute-modules", "moe_act", "--framework", "megatron"}),
                {"--recompute-modules", "moe_act has nothing to recompute in gpt2-small"});
        const Result ok = cli(simulate({"--recompute", "selective", "--recompute-modules", "core_attn,mlp", "--framework", "megatron",
                                        "--strategy", "zero1"}));
        CHECK(ok.code == 0);
    }
    SECTION("0 means 0, not the default") {
        refused(simulate({"--dp", "0"}), {"--dp", "at least 1", "found 0"});
        refused(simulate({"--global-batch", "0"}), {"--global-batch", "at least 1", "found 0"});
        refused(simulate({"--seq", "0"}), {"--seq", "at least 1", "found 0"});
        refused(simulate({"--nodes", "0"}), {"--nodes"});
        refused(simulate({"--devices", "0"}), {"--devices"});
        refused(simulate({"--micro-batch", "0"}), {"--micro-batch"});
        refused(simulate({"--strategy", "fsdp", "--fsdp-sharding", "hybrid", "--fsdp-group", "0"}, "gpt2-small", "dgx-a100"),
                {"--fsdp-group", "at least 1"});
        refused(simulate({"--strategy", "ps", "--ps-servers", "0"}), {"--ps-servers"});
        refused(simulate({"--tp", "0"}), {"--tp"});
        refused(simulate({"--pp", "0"}), {"--pp"});
        refused({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "4", "--jobs", "0"}, {"--jobs"});
        refused({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "4", "--seq", "0"}, {"--seq"});
    }
    SECTION("a flag with no effect in the plan is an error saying why") {
        refused(simulate({"--sp"}), {"--sp", "no effect", "--tp 2"});
        refused(simulate({"--virtual-stages", "3"}), {"--virtual-stages", "interleaved"});
        refused(simulate({"--stage-layers", "6,6"}), {"--stage-layers", "--pp 2"});
        refused(simulate({"--schedule", "gpipe"}), {"--schedule", "--pp 2"});
        refused(simulate({"--fusion-mb", "32"}), {"--fusion-mb", "Horovod"});
        refused(simulate({"--cycle-ms", "2"}), {"--cycle-ms", "Horovod"});
        refused(simulate({"--cp-comm", "all-gather"}), {"--cp-comm", "no effect", "--cp 2"});
        refused(simulate({"--cp", "2", "--cp-comm", "ulysses"}, "llama3-8b", "dgx-h100"), {"--cp-comm", "p2p, all-gather or a2a", "\"ulysses\""});
        refused({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "8", "--cp-comm", "all-gather"},
                {"--cp-comm", "no effect", "--cp size of 2"});
        refused({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "8", "--cp", "1,2", "--cp-comm", "a2a+p2p"},
                {"--cp-comm", "a2a+p2p is not modelled", "\"a2a+p2p\""});
        refused(simulate({"--ps-servers", "2"}), {"--ps-servers", "parameter servers"});
        refused(simulate({"--strategy", "ps", "--staleness", "2"}), {"--staleness", "ps-async"});
        refused(simulate({"--fsdp-sharding", "grad-op"}), {"--fsdp-sharding", "fsdp"});
        refused(simulate({"--strategy", "fsdp", "--fsdp-group", "2"}), {"--fsdp-group", "hybrid"});
        refused(simulate({"--fsdp-reduce-dtype", "fp32"}), {"--fsdp-reduce-dtype", "no effect", "--strategy fsdp"});
        refused(simulate({"--strategy", "fsdp", "--fsdp-reduce-dtype", "fp16"}, "gpt2-small", "dgx-a100"),
                {"--fsdp-reduce-dtype", "fp16 with bf16 parameters is not modelled"});
        refused(simulate({"--strategy", "fsdp", "--fsdp-reduce-dtype", "fp64"}), {"--fsdp-reduce-dtype", "\"fp64\""});
        refused(simulate({"--strategy", "fsdp", "--fsdp-sharding", "grad-op", "--fsdp-backward-prefetch", "post"}),
                {"--fsdp-backward-prefetch", "no effect", "full and hybrid"});
        refused(simulate({"--strategy", "fsdp", "--fsdp-backward-prefetch", "backward_post"}),
                {"--fsdp-backward-prefetch", "found 'backward_post'"});
        refused(simulate({"--fsdp-no-sync"}), {"--fsdp-no-sync", "no effect", "--strategy fsdp"});
        refused(simulate({"--strategy", "fsdp", "--fsdp-no-sync", "--offload", "cpu"}, "gpt2-small", "dgx-a100"),
                {"--fsdp-no-sync", "CPU offload"});
        refused(simulate({"--hybrid-variant", "broadcast"}), {"--hybrid-variant", "hybrid-cnn"});
        refused(simulate({"--strategy", "hybrid-cnn", "--hybrid-variant", "ring"}, "vgg16", "dgx-a100"),
                {"--hybrid-variant", "all-gather, broadcast, chunked"});
        refused(simulate({"--strategy", "ring", "--bucket-mb", "10"}), {"--bucket-mb", "--fusion-mb"});
        refused(simulate({"--strategy", "zero2", "--bucket-mb", "10"}), {"--bucket-mb", "reduce_bucket_size", "--deepspeed-config"});
        refused(simulate({"--strategy", "zero2", "--first-bucket-mb", "2"}), {"--first-bucket-mb", "DDP"});
        // DeepSpeed's engine builds zero2 with tensor parallelism too (Megatron-DeepSpeed's layers).
        refused(simulate({"--strategy", "zero2", "--tp", "2", "--bucket-mb", "10"}, "gpt2-small", "dgx-a100"),
                {"--bucket-mb", "reduce_bucket_size"});
        // zero1 with --ep is Megatron's distributed optimizer, which buckets by --bucket-mb when it
        // overlaps the reduction: accepted; reducing after backward it takes its whole buffer at once.
        const std::string mixtral = std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json";
        const Result ep = cli(simulate({"--strategy", "zero1", "--ep", "8", "--bucket-mb", "10", "--seq", "256", "--nodes", "2",
                                        "--overlap-grad-reduce"},
                                       mixtral, "dgx-a100"));
        CHECK(ep.code == 0);
        CHECK_THAT(ep.err, !Catch::Contains("--bucket-mb"));
        refused(simulate({"--strategy", "zero1", "--ep", "8", "--bucket-mb", "10", "--seq", "256", "--nodes", "2"}, mixtral,
                         "dgx-a100"),
                {"--bucket-mb", "has no effect", "whole gradient buffer", "--overlap-grad-reduce"});
        refused(simulate({"--tp", "2", "--first-bucket-mb", "2"}, "gpt2-small", "dgx-a100"), {"--first-bucket-mb", "PyTorch DDP"});
        refused(simulate({"--seq", "128"}, "resnet50"), {"--seq", "layer list"});
        refused(simulate({"--recompute", "selective"}, "resnet50"), {"--recompute", "attention core"});
        refused(simulate({"--attention", "eager"}, "resnet50"), {"--attention", "no effect", "has no attention"});
        refused(simulate({"--trace-ranks", "0"}), {"--trace-ranks", "--trace FILE or --kernels FILE"});
        refused(simulate({"--partition", "balanced"}), {"--partition", "no effect", "--pp 2"});
        refused(simulate({"--strategy", "zero3", "--overlap-grad-reduce"}), {"--overlap-grad-reduce", "no effect", "stage 3"});
    }
    SECTION("flags scripts pass whatever the plan get a warning") {
        const Result r = cli(simulate({"--schedule", "1f1b", "--no-fold"}));
        CHECK(r.code == 0);
        CHECK_THAT(r.err, Catch::Contains("warning: --schedule has no effect"));
        CHECK_THAT(r.err, !Catch::Contains("--no-fold"));   // data-parallel plans fold: it has an effect
        const Result ps = cli(simulate({"--strategy", "ps", "--no-fold"}));
        CHECK(ps.code == 0);
        CHECK_THAT(ps.err, Catch::Contains("warning: --no-fold has no effect"));
    }
    SECTION("each plan error names the flag that is wrong") {
        refused(simulate({"--pp", "3"}, "gpt2-small", "dgx-a100"), {"--pp:", "tp × pp = 3"});
        refused(simulate({"--tp", "3"}, "gpt2-small", "dgx-a100"), {"--tp:", "tp × pp = 3"});
        refused(simulate({"--tp", "4", "--pp", "3", "--devices", "6"}, "gpt2-small", "dgx-a100"), {"--tp:", "tp × pp = 12"});
        refused(simulate({"--tp", "2", "--pp", "2", "--devices", "6"}, "gpt2-small", "dgx-a100"), {"--pp:", "tp × pp = 4"});
        refused(simulate({"--dp", "3"}, "gpt2-small", "dgx-a100"), {"--dp:"});
        refused(simulate({"--strategy", "zero3", "--framework", "pytorch"}), {"--framework:"});
        refused(simulate({"--framework", "nonsense"}), {"--framework"});
    }
    SECTION("unknown flags and subcommands suggest the nearest") {
        refused(simulate({"--tpp", "2"}), {"unknown flag --tpp", "did you mean --tp?"});
        refused(simulate({"--global_batch", "8"}), {"unknown flag --global_batch", "did you mean --global-batch?"});
        refused({"simulat", "--model", "gpt2-small"}, {"unknown subcommand 'simulat'", "did you mean 'simulate'?"});
        refused({"swep"}, {"unknown subcommand 'swep'", "did you mean 'sweep'?"});
    }
    SECTION("composed clusters and their network") {
        refused(simulate({}, "gpt2-small", "pi5-1gbe:0"), {"--cluster", "node count of at least 1"});
        refused(simulate({}, "gpt2-small", "pi5-1gbe:x,pi4-1gbe:2"), {"--cluster"});
        refused(simulate({}, "gpt2-small", "pi5-1gbe:2,nowhere:2"), {"--cluster", "nowhere"});
        refused(simulate({"--cluster-network", "mesh"}, "gpt2-small", "pi5-1gbe:2,pi4-1gbe:2"), {"--cluster-network"});
        refused(simulate({"--cluster-network", "switch"}), {"--cluster-network", "composed"});
    }
    SECTION("too many nodes") { refused(simulate({"--nodes", "100000000"}), {"--nodes", "10 million devices"}); }
    SECTION("gradient compression: a method it knows, on a strategy that all-reduces whole gradients") {
        refused(simulate({"--compress", "2bit"}), {"--compress:", "topk:RATIO", "powersgd:RANK"});
        refused(simulate({"--compress", "powersgd"}), {"--compress:", "rank is required"});
        refused(simulate({"--compress", "powersgd:0"}), {"--compress:", "at least 1"});
        refused(simulate({"--compress", "topk:0"}), {"--compress:", "(0, 1]"});
        refused(simulate({"--compress", "1bit", "--strategy", "zero1"}), {"--compress:", "use --strategy ddp or ring"});
        CHECK(cli(simulate({"--compress", "topk:0.01", "--strategy", "ring"})).code == 0);
    }
}

TEST_CASE("bad input: plans too large to represent or to simulate", "[tools][bad_input]") {
    SECTION("a simulated step beyond 106 days names the op and the inputs that make it") {
        // GPT-3's layers at 1 MFLOP/s: each forward takes days; the step passes Time's range.
        TempFile f("smol-slow.json", pi5_with("\"60.4 GFLOP/s\"", "\"1 MFLOP/s\""));
        refused(simulate({"--global-batch", "4"}, "gpt3-175b", f.path.string()),
                {"simulated time out of range", "on node0/cpu0", "beyond the 106 days", "peak FLOP/s", "--global-batch"});
    }
    SECTION("a transfer beyond 106 days names the network's slowest link") {
        TempFile f("smol-slow-nic.json", pi5_with("\"1 Gbit/s\"", "\"1 KB/s\""));
        refused(simulate({"--global-batch", "4"}, "gpt3-175b", f.path.string()),
                {"simulated time out of range", "slowest link", "1.00 KB/s"});
    }
    SECTION("a plan beyond 2^31 ops is refused before building, with the figure and what to change") {
        refused(simulate({"--global-batch", "1000000000"}, "gpt3-175b", "pi5-1gbe"),
                {"--global-batch", "ops, more than the 2.1e+09 an op graph holds", "a smaller --global-batch"});
    }
    SECTION("a plan whose graph would not fit in this machine's memory is refused before building") {
        // About 1.4e9 ops: some 180 GB to simulate, beyond the machines the suite runs on.
        // (--no-fold: folded, the one replica's graph is small and the step overflows simulated time.)
        const Result r = cli(simulate({"--global-batch", "4000000", "--nodes", "64", "--no-fold"}, "gpt2-xl", "pi5-1gbe"));
        INFO(r.err);
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--global-batch"));
        CHECK_THAT(r.err, Catch::Contains("of memory this machine has available") || Catch::Contains("an op graph holds"));
    }
}

TEST_CASE("bad input: outputs never change what they should not", "[tools][bad_input]") {
    const fs::path dir = fs::temp_directory_path() / "smol-bad-outputs";
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto leftovers = [&] {
        std::size_t n = 0;
        for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().ends_with(".tmp");
        return n;
    };
    SECTION("--trace /dev/null --force: a device is not a regular file, and stays a device") {
        refused(simulate({"--trace", "/dev/null", "--force"}), {"--trace", "/dev/null is a character device", "regular files only"});
        CHECK(fs::is_character_file("/dev/null"));
    }
    SECTION("--trace naming a directory or a symbolic link") {
        refused(simulate({"--trace", dir.string(), "--force"}), {"--trace", "is a directory"});
        const fs::path target = dir / "real.json", link = dir / "link.json";
        std::ofstream(target) << "keep";
        fs::create_symlink(target, link);
        refused(simulate({"--trace", link.string(), "--force"}), {"--trace", "symbolic link"});
        CHECK(read(target) == "keep");
    }
    SECTION("an existing file without --force is left alone") {
        const fs::path t = dir / "t.json";
        std::ofstream(t) << "mine";
        refused(simulate({"--trace", t.string()}), {"--trace", "exists; pass --force"});
        CHECK(read(t) == "mine");
    }
    SECTION("a folder that cannot be made (its parent is a file): an error before simulating, no temporary file") {
        const fs::path file = dir / "plain";
        std::ofstream(file) << "x";
        refused(simulate({"--trace", (file / "t.json").string()}), {"--trace", "plain/t.json: Not a directory"});
        CHECK(leftovers() == 0);
    }
    SECTION("a plan that fails after the trace was checked leaves neither the trace nor a temporary file") {
        TempFile f("smol-slow-trace.json", pi5_with("\"60.4 GFLOP/s\"", "\"1 MFLOP/s\""));
        const fs::path t = dir / "t.json";
        refused(simulate({"--global-batch", "4", "--trace", t.string()}, "gpt3-175b", f.path.string()), {"out of range"});
        CHECK_FALSE(fs::exists(t));
        CHECK(leftovers() == 0);
    }
    SECTION("sweep --csv into a device") {
        refused({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "4", "--csv", "/dev/null", "--force"},
                {"--csv", "character device"});
    }
    fs::remove_all(dir);
}

TEST_CASE("bad input: fuzz findings stay fixed", "[tools][bad_input]") {
    SECTION("fuzz_plan timeout: 1.5 KB buckets of GPT-3's gradients on one device were 2.3e8 buckets for nothing") {
        // One replica synchronises nothing, so it makes no buckets; it then runs out of memory (exit 3).
        const Result r = cli(simulate({"--devices", "1", "--global-batch", "7", "--micro-batch", "7", "--bucket-mb", "0.00142272"},
                                      "gpt3-175b", "jetson-agx-orin"));
        INFO(r.err);
        CHECK(r.code == 3);
        // With replicas, so many buckets are refused before building, naming the bucket flag.
        refused(simulate({"--bucket-mb", "0.001"}, "gpt3-175b", "pi5-1gbe"), {"--bucket-mb:", "gradient buckets need a larger --bucket-mb"});
    }
    SECTION("activation checkpoints offloaded beside offloaded parameters built a cyclic graph (exit 1)") {
        refused(simulate({"--devices", "1", "--strategy", "zero3", "--recompute", "full", "--offload-activations", "cpu",
                          "--offload", "cpu"},
                         "gpt2-small", "workstation-4gpu"),
                {"--offload-activations:", "parameters offloaded (cpu", "not modelled yet"});
    }
    SECTION("fuzz_plan UBSan: hybrid-cnn's all-gather pass of dp × micro-batch samples overflowed an int") {
        refused(simulate({"--strategy", "hybrid-cnn", "--micro-batch", "536870912"}, "resnet50", "pi5-1gbe"),
                {"--micro-batch:", "2147483648 samples, more than the 2147483647 a pass can hold"});
    }
}

TEST_CASE("bad input: --dispatch-overhead", "[tools][bad_input]") {
    SECTION("not a duration") { refused(simulate({"--dispatch-overhead", "20 parsecs"}), {"--dispatch-overhead", "a duration such as"}); }
    SECTION("negative") { refused(simulate({"--dispatch-overhead", "-3 us"}), {"--dispatch-overhead", "from 0 to 100 ms"}); }
}

TEST_CASE("bad input: slow devices, jitter and Hogwild!", "[tools][bad_input]") {
    SECTION("--slow: a rank beyond the cluster") { refused(simulate({"--slow", "4:0.5"}), {"--slow", "a rank from 0 to 3"}); }
    SECTION("--slow: a factor of 0 or below") {
        refused(simulate({"--slow", "1:0"}), {"--slow", "above 0"});
        refused(simulate({"--slow", "1:-2"}), {"--slow", "above 0"});
        refused(simulate({"--slow", "1:0.5:nic=0"}), {"--slow", "above 0"});
    }
    SECTION("--slow: not RANK:FACTOR") { refused(simulate({"--slow", "fast"}), {"--slow", "RANK:FACTOR"}); }
    SECTION("--jitter below 0, or 100 % and more") {
        refused(simulate({"--jitter", "-1"}), {"--jitter", "below 100"});
        refused(simulate({"--jitter", "100"}), {"--jitter", "below 100"});
        refused(simulate({"--jitter", "nan"}), {"--jitter"});
    }
    SECTION("--seed without --jitter") { refused(simulate({"--seed", "3"}), {"--seed", "--jitter"}); }
    SECTION("--hogwild without ps-async") {
        refused(simulate({"--hogwild"}), {"--hogwild", "--strategy ps-async"});
        refused(simulate({"--strategy", "ps", "--hogwild"}), {"--hogwild", "ps-async"});
    }
    SECTION("--hogwild across nodes") {
        refused(simulate({"--strategy", "ps-async", "--hogwild"}), {"--hogwild", "span 4 nodes", "share no memory"});
        refused(simulate({"--strategy", "ps-async", "--hogwild", "--nodes", "2"}, "gpt2-small", "dgx-a100"),
                {"--hogwild", "span 2 nodes"});
    }
    SECTION("--hogwild with a staleness bound or servers") {
        refused(simulate({"--strategy", "ps-async", "--hogwild", "--staleness", "2"}, "gpt2-small", "workstation-4gpu"),
                {"--staleness", "no staleness bound"});
        refused(simulate({"--strategy", "ps-async", "--hogwild", "--ps-servers", "2"}, "gpt2-small", "workstation-4gpu"),
                {"--ps-servers", "no server"});
    }
    SECTION("run and validate measure real devices") {
        refused({"run", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--slow", "1:0.5"}, {"--slow", "real devices"});
        refused({"validate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--jitter", "5"}, {"--jitter", "real devices"});
        refused({"run", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--dispatch-overhead", "20 us"},
                {"--dispatch-overhead", "measures the host's own dispatch"});
        refused({"validate", "--model", "gpt2-small", "--cluster", "dgx-h100", "--framework", "megatron", "--fp8", "delayed"},
                {"--fp8", "simulated only"});
        refused({"run", "--model", "gpt2-small", "--cluster", "dgx-h100", "--attention-backend", "fused"},
                {"--attention-backend", "the executor's own fused attention kernel"});
    }
    SECTION("--fp8: a recipe name, FP8 tensor cores, Megatron core") {
        const auto h100 = [](std::initializer_list<std::string> extra, const std::string& cluster = "dgx-h100") {
            return simulate(extra, "gpt2-small", cluster);
        };
        refused(h100({"--framework", "megatron", "--fp8", "hybrid"}), {"--fp8", "delayed", "tensorwise"});
        refused(h100({"--framework", "megatron", "--fp8", "delayed"}, "dgx-a100"), {"--fp8", "no FP8 peak"});
        refused(h100({"--fp8", "delayed"}), {"--fp8", "--framework megatron"});   // ddp at tp 1 runs on pytorch
        refused(h100({"--framework", "megatron", "--fp8", "delayed", "--dtype", "fp32"}), {"--fp8", "bf16 or fp16"});
        const Result ok = cli(h100({"--framework", "megatron", "--fp8", "tensorwise", "--json"}));
        REQUIRE(ok.code == 0);
        CHECK(Json::parse(ok.out)["fp8"] == "tensorwise");
        CHECK(Json::parse(cli(h100({"--framework", "megatron", "--json"})).out)["fp8"].is_null());
        // Megatron core's --first-last-layers-bf16 and its counts reach the plan from the command line.
        refused(h100({"--framework", "megatron", "--first-last-layers-bf16"}), {"--first-last-layers-bf16", "without --fp8"});
        refused(h100({"--framework", "megatron", "--fp8", "tensorwise", "--num-layers-at-end-in-bf16", "2"}),
                {"--num-layers-at-end-in-bf16", "without --first-last-layers-bf16"});
        refused(h100({"--framework", "megatron", "--fp8", "tensorwise", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "13"}),
                {"--num-layers-at-start-in-bf16", "(12), found 13"});
        // --fp8-param-gather: with FP8 and the distributed optimizer, it reaches the plan.
        refused(h100({"--framework", "megatron", "--strategy", "zero1", "--fp8-param-gather"}), {"--fp8-param-gather", "without --fp8"});
        refused(h100({"--framework", "megatron", "--fp8", "delayed", "--fp8-param-gather"}), {"--fp8-param-gather", "not ddp"});
        const Result zero1 = cli(h100({"--framework", "megatron", "--fp8", "delayed", "--strategy", "zero1", "--json"}));
        const Result fp8_params =
            cli(h100({"--framework", "megatron", "--fp8", "delayed", "--strategy", "zero1", "--fp8-param-gather", "--json"}));
        REQUIRE(zero1.code == 0);
        REQUIRE(fp8_params.code == 0);
        CHECK(Json::parse(fp8_params.out)["peak_memory_bytes"] != Json::parse(zero1.out)["peak_memory_bytes"]);
        CHECK(Json::parse(fp8_params.out)["fp8_param_gather"] == true);
        CHECK(Json::parse(zero1.out)["fp8_param_gather"] == false);
        const Result mixed = cli(h100({"--framework", "megatron", "--fp8", "tensorwise", "--first-last-layers-bf16", "--json"}));
        REQUIRE(mixed.code == 0);
        CHECK(Json::parse(mixed.out)["iteration_time_s"] != Json::parse(ok.out)["iteration_time_s"]);
    }
    SECTION("--recompute-method and --recompute-num-layers: Megatron's, with --recompute full") {
        const auto gpt = [](std::initializer_list<std::string> extra) {
            std::vector<std::string> args{"--framework", "megatron", "--strategy", "zero1", "--recompute", "full"};
            args.insert(args.end(), extra);
            std::vector<std::string> out{"simulate", "--model", "gpt2-medium", "--cluster", "dgx-a100"};
            out.insert(out.end(), args.begin(), args.end());
            return out;
        };
        refused(gpt({"--recompute-method", "blok"}), {"--recompute-method", "uniform", "block", "'blok'"});
        refused(gpt({"--recompute-num-layers", "4"}), {"--recompute-num-layers", "needs --recompute-method"});
        std::vector<std::string> block = gpt({"--recompute-method", "block", "--recompute-num-layers", "6", "--json"});
        const Result some = cli(block);
        REQUIRE(some.code == 0);
        const Result all = cli(gpt({"--json"}));
        REQUIRE(all.code == 0);
        CHECK(Json::parse(some.out)["iteration_time_s"].get<double>() < Json::parse(all.out)["iteration_time_s"].get<double>());
    }
    SECTION("--cross-entropy-fusion: native or te, on the Megatron core releases that have them") {
        const auto llama = [](std::initializer_list<std::string> extra) { return simulate(extra, "llama3-8b", "dgx-h100"); };
        refused(llama({"--framework", "megatron", "--cross-entropy-fusion", "fused"}), {"--cross-entropy-fusion", "native", "te", "'fused'"});
        refused(llama({"--cross-entropy-fusion", "native"}), {"--cross-entropy-fusion", "pytorch@", "no fused cross-entropy"});
        refused(llama({"--framework", "megatron", "--cross-entropy-fusion", "te"}),
                {"--cross-entropy-fusion", "disabled due to stability issues", "megatron@0.18"});
        refused(llama({"--framework", "megatron@0.11", "--cross-entropy-fusion", "te"}), {"--cross-entropy-fusion", "core 0.12 to 0.18"});
        refused(simulate({"--framework", "megatron", "--cross-entropy-fusion", "native"}, "resnet50", "dgx-h100"),
                {"--cross-entropy-fusion", "layer list"});
        refused({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "16", "--cross-entropy-fusion", "te"},
                {"--cross-entropy-fusion", "megatron@0.18"});
        refused({"sweep", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "16", "--cross-entropy-fusion", "native",
                 "--framework", "pytorch"},
                {"--framework", "no fused cross-entropy"});
        const Result ok =
            cli(llama({"--strategy", "zero1", "--seq", "2048", "--framework", "megatron@0.16", "--cross-entropy-fusion", "te", "--json"}));
        REQUIRE(ok.code == 0);
        CHECK(Json::parse(ok.out)["cross_entropy_fusion"] == "te");
        CHECK(Json::parse(cli(llama({"--strategy", "zero1", "--seq", "2048", "--framework", "megatron", "--json"})).out)["cross_entropy_fusion"]
                  .is_null());
    }
    SECTION("--make-vocab-size-divisible-by: Megatron's, a whole number from 1 to 65536") {
        const auto gpt2 = [](std::initializer_list<std::string> extra) { return simulate(extra, "gpt2-small", "dgx-a100"); };
        refused(gpt2({"--framework", "megatron", "--make-vocab-size-divisible-by", "0"}),
                {"--make-vocab-size-divisible-by", "from 1 to 65536", "found 0"});
        refused(gpt2({"--framework", "megatron", "--make-vocab-size-divisible-by", "65537"}),
                {"--make-vocab-size-divisible-by", "from 1 to 65536", "found 65537"});
        refused(gpt2({"--framework", "megatron", "--make-vocab-size-divisible-by", "many"}), {"--make-vocab-size-divisible-by", "many"});
        refused(gpt2({"--framework", "pytorch", "--make-vocab-size-divisible-by", "128"}),
                {"--make-vocab-size-divisible-by", "is Megatron's", "pytorch@", "50257"});
        refused(simulate({"--framework", "megatron", "--make-vocab-size-divisible-by", "128"}, "resnet50", "dgx-a100"),
                {"--make-vocab-size-divisible-by", "layer list"});
        const auto padded = [&](std::initializer_list<std::string> extra) {
            const Result r = cli(gpt2(extra));
            REQUIRE(r.code == 0);
            return Json::parse(r.out)["padded_vocab"];
        };
        CHECK(padded({"--framework", "megatron", "--json"}) == 50304);   // 393 × 128
        CHECK(padded({"--framework", "megatron", "--make-vocab-size-divisible-by", "1", "--json"}) == 50257);
        CHECK(padded({"--framework", "pytorch", "--json"}) == 50257);
        CHECK(Json::parse(cli(simulate({"--json"}, "resnet50", "dgx-a100")).out)["padded_vocab"].is_null());
    }
    SECTION("--attention-backend: a kernel library's name, flash attention only") {
        refused(simulate({"--attention-backend", "cudnn"}, "gpt2-small", "dgx-h100"),
                {"--attention-backend", "flash (FlashAttention-2), fused", "flash3", "\"cudnn\""});
        refused(simulate({"--attention-backend", "flash3"}, "gpt2-small", "dgx-a100"),
                {"--attention-backend", "Hopper", "compute capability 8.0"});
        refused(simulate({"--attention", "eager", "--attention-backend", "fused"}, "gpt2-small", "dgx-h100"),
                {"--attention-backend", "eager attention runs none"});
        const auto json = [](std::initializer_list<std::string> extra) {
            const Result r = cli(simulate(extra, "gpt2-small", "dgx-h100"));
            REQUIRE(r.code == 0);
            return Json::parse(r.out);
        };
        CHECK(json({"--framework", "megatron", "--json"})["attention_backend"] == "fused");
        CHECK(json({"--json"})["attention_backend"] == "flash");
        CHECK(json({"--attention-backend", "fused", "--json"})["attention_backend"] == "fused");
        CHECK(json({"--attention", "eager", "--json"})["attention_backend"].is_null());
        CHECK(json({"--attention-backend", "flash3", "--json"})["attention_backend"] == "flash3");
        const Result text = cli(simulate({"--attention-backend", "flash3"}, "gpt2-small", "dgx-h100"));
        REQUIRE(text.code == 0);
        CHECK_THAT(text.out, Catch::Contains("flash attention (FlashAttention-3)"));
    }
}
