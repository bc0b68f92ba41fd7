// The published-measurement harness: every row of validation/ (vTrain's 1,440 measured
// iteration times and the throughput figures of published.jsonl) turned into a
// `smolcluster simulate … --json` command line, run in-process through the public CLI
// (tools::run_cli), and compared with what was measured.
//
// One small function per source maps a row to flags (or to the features the simulator lacks to
// represent it: FP8, context parallelism, MoE, offload …). Nothing is dropped: a row is either
// simulated, or reported with its reasons, or reported as a simulator failure with the message.
// Measured figures are compared as step times: a throughput is turned into the step time it
// implies with the source's own convention (see `Metric`), so every error reads the same way,
// simulated / measured − 1, negative when the simulator is too fast.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/accuracy.hpp"
#include "core/json.hpp"

namespace smol::bench {

/// One measured row: which file and line it came from, its source, and its fields. A vTrain CSV
/// row is an object with the keys gpus, gbs, mbs, h, heads, L, seq, tp, dp, pp, iter_ms;
/// a published.jsonl row is its object with "same" sources and model references resolved.
struct Row {
    std::string id;      // "V0001" … for the CSV, the row's own id ("P05") for published.jsonl
    std::string source;  // "vtrain", "llama3-herd", "dgxc-benchmarking", …
    std::string file;    // file name, for messages
    int line = 0;        // 1-based line in the file
    Json data;
    std::string folder;  // the folder the file was read from (where a row's other files are)
};

/// vTrain's CSV (VIA-Research/vTrain data/ground_truth_single.csv; UTF-8 byte-order mark, CRLF
/// line ends and its "# GPUs,…" header are accepted). Bad input names the file and line.
std::vector<Row> read_vtrain_csv(const std::string& path);
/// published.jsonl, one object per line; each row's source is named from its "src" (a source
/// this harness does not know is an error naming the line, never a silent skip).
std::vector<Row> read_published_jsonl(const std::string& path);
/// Both files of a validation/ folder, CSV first, each in file order.
std::vector<Row> read_validation(const std::string& dir);

/// A feature the simulator lacks (or a fact the source does not give) that keeps a row from
/// being simulated. `feature` is one of the fixed names in published.cpp (kGapOrder), in which
/// order the first gap of a row is the one it is grouped by.
struct Gap {
    std::string feature;  // "FP8", "context parallelism", "offload", "unknown model shape", …
    std::string detail;   // what the row says
};

/// How the source's figure becomes a measured step time.
enum class MetricKind {
    step_time,             // seconds (or milliseconds) per iteration, as measured
    tokens_per_s_per_gpu,  // step = global batch · seq / (value · GPUs)
    model_tflops_per_gpu,  // step = model FLOPs per step / (value · 10¹² · GPUs), recompute not counted
    /// step = the source's FLOPs per step (Megatron's 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)),
    /// recompute counted: Narayanan et al. 2021 eq. 3) / (value · 10¹² · GPUs).
    hardware_tflops_per_gpu,
};

struct Metric {
    std::string key;   // the row's field: "iter_ms", "sec_per_iter", "tflops_per_gpu", …
    MetricKind kind = MetricKind::step_time;
    double value = 0;  // as reported
    double seconds_per_unit = 1;  // step_time only: 1e-3 for milliseconds
    std::string description;      // what is compared, for the report
    double flops_per_step = 0;    // hardware_tflops_per_gpu only: the FLOPs the source counts per step
};

/// The model shape a row names, written as smolcluster's own model JSON.
struct ModelShape {
    bool llama = false;  // Llama style (RoPE, RMSNorm, SwiGLU, no biases, untied) or GPT-2 style
    int layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab = 0, seq = 0;
    bool operator==(const ModelShape&) const = default;
};
/// {"kind": "transformer", …}: learned positions, LayerNorm, biases and tied embeddings for
/// GPT; RoPE, RMSNorm, gated MLP, no biases, untied for Llama.
Json model_json(const ModelShape& m);
/// A file name that identifies the shape: "gpt-l24-h1024-a16-f4096-v50304-s1024.json".
std::string model_file_name(const ModelShape& m);

/// A row as a command line, or the gaps that keep it from being one.
struct Mapping {
    std::vector<std::string> args;  // "simulate", "--model", …, "--json" (empty when there are gaps)
    std::optional<ModelShape> model;
    std::optional<Metric> metric;
    std::int64_t gpus = 0, global_batch = 0;
    int seq = 0;
    /// A model the harness ships as a HuggingFace config.json (a shape ModelShape cannot say, such
    /// as a mixture of experts): its file name in model_dir and its contents.
    std::optional<std::pair<std::string, Json>> model_config;
    std::vector<Gap> gaps;           // sorted by kGapOrder; empty when representable
    std::vector<std::string> notes;  // assumptions the mapping makes, for the report
    /// Files the command line reads besides the model (a DeepSpeed config), written into the
    /// model directory with it: file name → JSON.
    std::vector<std::pair<std::string, Json>> files;
    bool representable() const { return gaps.empty(); }
};

/// Maps one row. `model_dir` is where the model JSON files live (the args name
/// model_dir/model_file_name(shape)).
Mapping map_row(const Row& row, const std::string& model_dir);

/// The step time the source's figure implies (see MetricKind); `flops_per_token` is the model's
/// training FLOPs per token without recompute (`smolcluster describe`), used by model TFLOP/s.
double measured_step_seconds(const Mapping& m, double flops_per_token);

/// The command line as a user would type it: "smolcluster simulate --model … --json".
std::string command_line(const std::vector<std::string>& args);

enum class Status { simulated, not_representable, failed };
const char* to_string(Status s);

/// A row after the harness ran it.
struct Outcome {
    Row row;
    Mapping mapping;
    Status status = Status::not_representable;
    double measured_step_s = 0, simulated_step_s = 0;
    double error = 0;      // simulated / measured − 1
    bool fits = true;      // the simulator's memory verdict (exit 3: false; the step time still counts)
    std::string failure;   // the CLI's message when it failed (exit 1 or 2)
    double wall_s = 0;     // time the simulation took here; varies run to run, so never written to files
};

/// Writes the model files into `model_dir`, then runs every representable row through
/// tools::run_cli on `jobs` threads (run_cli keeps no state between calls: every call builds
/// its own CLI app, model, cluster, topology and simulator). Results are in row order whatever
/// `jobs` is.
std::vector<Outcome> run_rows(const std::vector<Row>& rows, const std::string& model_dir, int jobs);

/// One source's rows: counts, the error statistics of its simulated rows, and its rows that
/// could not be simulated grouped by their first gap (in kGapOrder).
struct SourceSummary {
    std::string source;
    std::size_t rows = 0, simulated = 0, not_fitting = 0, failed = 0;
    ErrorStats stats;
    std::vector<std::pair<std::string, std::vector<std::string>>> gaps;  // feature → row ids
    std::vector<std::string> compared;  // the metric descriptions of its simulated rows
};
/// The vTrain rows that calibrated megatron-deepspeed's dispatch per kernel (tp = pp = 1,
/// micro-batch 1, hidden 1024: strategies/framework.cpp kMegatronDeepSpeedDispatch).
bool dispatch_calibration_row(const Row& r);
/// The summary of vTrain's other rows, after the sources.
inline constexpr const char* kVtrainHeldOut = "vtrain (held out)";
/// Sources in the order they first appear, then vTrain's rows without the calibration rows.
std::vector<SourceSummary> summarize(const std::vector<Outcome>& outcomes);

/// vTrain's rows with pp = 1 grouped by (hidden, tp, micro-batch), each group's iteration times
/// fitted by least squares to t = a + L·d + n·b + n·L·c (n micro-batches per replica, L layers):
/// c is what one layer costs per micro-batch (its forward, recompute and backward, with the host's
/// dispatch), b what a micro-batch costs besides its layers (embedding, head, loss), d what a
/// layer adds once per step (its gradients' all-reduce and optimizer step), a the rest. Fitted to
/// the measured and to the simulated times alike, it shows which cost departs (bench/README.md):
/// the measurements make a layer cheaper at a larger micro-batch in some cells, which no model
/// that gives more work more time can follow.
struct LayerCostFit {
    int hidden = 0, tp = 0, micro_batch = 0;
    std::size_t rows = 0;
    double measured_a = 0, measured_d = 0, measured_b = 0, measured_c = 0;      // seconds
    double simulated_a = 0, simulated_d = 0, simulated_b = 0, simulated_c = 0;  // seconds
};
/// Groups with fewer than 4 rows, or whose (1, L, n, n·L) do not span four dimensions, are left
/// out; groups in order of (hidden, tp, micro-batch).
std::vector<LayerCostFit> vtrain_layer_costs(const std::vector<Outcome>& outcomes);

}  // namespace smol::bench
