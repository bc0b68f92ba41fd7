// Framework behaviour as data: releases resolve to the latest row at or before them, and the
// behaviours change the graph the way the frameworks' code does.
#include <catch2/catch.hpp>

#include <array>
#include <fstream>
#include <set>
#include <sstream>

#include "core/json.hpp"
#include "core/model.hpp"
#include "sim/simulator.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/framework.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/simulation.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;

TEST_CASE("a release means the behaviour of the latest release at or before it", "[strategies][framework]") {
    CHECK(parse_framework("deepspeed@0.5.10").zero3_gather == GatherGranularity::per_tensor);
    CHECK(parse_framework("deepspeed@0.5.10").zero3_blocking_fetch);
    CHECK(parse_framework("deepspeed@0.6").zero3_gather == GatherGranularity::per_module);
    CHECK(parse_framework("deepspeed@0.14.2").zero3_gather == GatherGranularity::per_module);
    CHECK_FALSE(parse_framework("deepspeed").zero3_blocking_fetch);
    // A three-part release: Twin-Flow came with DeepSpeed v0.12.3 (PR #4636), ZeRO++ with v0.10.0.
    CHECK_FALSE(parse_framework("deepspeed@0.12.2").twin_flow);
    CHECK(parse_framework("deepspeed@0.12.2").zeropp);
    CHECK(parse_framework("deepspeed@0.12.3").twin_flow);
    CHECK(parse_framework("deepspeed").twin_flow);
    // MiCS came with v0.9.2, LoCo with v0.16.2, the latest row and so the default.
    CHECK_FALSE(parse_framework("deepspeed@0.9.1").mics);
    CHECK(parse_framework("deepspeed@0.9.2").mics);
    CHECK_FALSE(parse_framework("deepspeed@0.16.1").loco);
    CHECK(parse_framework("deepspeed@0.16.2").loco);
    CHECK(describe(parse_framework("deepspeed")) == "deepspeed@0.16.2");
    // Megatron-LM v2.x is older than megatron-core 0.x: only the latter can overlap.
    CHECK_FALSE(parse_framework("megatron@2.5").can_overlap_grad_reduce);
    CHECK(parse_framework("megatron@0.8").can_overlap_grad_reduce);
    CHECK(parse_framework("megatron").can_overlap_grad_reduce);
    CHECK(describe(parse_framework("megatron@2.5")) == "megatron@2.5");
    CHECK(parse_framework("pytorch").grad_reduce == GradReduce::overlapped);
    CHECK(parse_framework("megatron").grad_reduce == GradReduce::after_backward);
}

TEST_CASE("bad framework specs name --framework", "[strategies][framework]") {
    SECTION("unknown name") {
        const std::string m = test::bad_input_message([] { parse_framework("megatorn"); });
        CHECK_THAT(m, Catch::Contains("--framework") && Catch::Contains("did you mean 'megatron'"));
    }
    SECTION("not a release number") {
        CHECK_THAT(test::bad_input_message([] { parse_framework("deepspeed@latest"); }), Catch::Contains("release number"));
    }
    SECTION("older than every row") {
        CHECK_THAT(test::bad_input_message([] { parse_framework("pytorch@0.4"); }), Catch::Contains("older than"));
    }
    SECTION("a strategy the framework does not run") {
        const Model m = model_preset("gpt2-small");
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        Plan p;
        p.strategy = DataParallel::fsdp;
        p.framework = "deepspeed";
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("does not run on deepspeed"));
        p.strategy = DataParallel::ddp;
        p.framework = "pytorch";
        p.overlap_grad_reduce = true;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("--overlap-grad-reduce"));
    }
}

namespace {

/// When the first gradient collective starts and when the last backward ends, on rank 0.
std::pair<Time, Time> first_sync_and_last_backward(const Plan& p) {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const Built b = build(m, c, p);
    const Timeline tl = sim::simulate(b.graph, c);
    Time first_sync = Time::max(), last_bwd;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != 0) continue;
        if (op.kind == OpKind::collective && op.phase == Phase::comm) first_sync = std::min(first_sync, tl.start[id]);
        if (op.kind == OpKind::compute && op.phase == Phase::bwd) last_bwd = std::max(last_bwd, tl.end[id]);
    }
    return {first_sync, last_bwd};
}

/// vTrain's 24-layer, hidden-1024 GPT (validation/README.md), with the vocabulary Megatron pads to.
Model vtrain_gpt(int vocab) {
    const std::string text = R"({"kind": "transformer", "name": "gpt-l24-h1024", "layers": 24, "hidden": 1024, "heads": 16,
        "kv_heads": 16, "ffn_hidden": 4096, "vocab": )" + std::to_string(vocab) + R"(, "seq": 1024, "norm": "layernorm",
        "positions": "learned", "biases": true, "gated_mlp": false, "tied_embeddings": true})";
    return model_from_json(JsonView(parse_json_text(text, "vtrain.json"), "vtrain.json"), "gpt-l24-h1024");
}

/// Kernels the compute ops of one layer run on rank 0, every pass and micro-batch together.
std::size_t layer_kernels_on_rank0(const Built& b, int layer) {
    std::size_t kernels = 0;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.kind == OpKind::compute && op.layer == layer && op.rank == 0) kernels += b.graph.kernels_of(id).size();
    }
    return kernels;
}

}  // namespace

TEST_CASE("gradients: PyTorch DDP overlaps backward, Megatron reduces after it unless asked", "[strategies][framework]") {
    Plan p;
    SECTION("pytorch DDP: the first bucket goes out during backward") {
        const auto [sync, bwd] = first_sync_and_last_backward(p);
        CHECK(sync < bwd);
    }
    SECTION("megatron: after the whole backward (megatron/training.py all-reduces after backward)") {
        p.framework = "megatron";
        const auto [sync, bwd] = first_sync_and_last_backward(p);
        CHECK(sync >= bwd);
        p.overlap_grad_reduce = true;
        const auto [sync2, bwd2] = first_sync_and_last_backward(p);
        CHECK(sync2 < bwd2);
    }
    SECTION("with a pipeline: megatron's buckets wait for the rank's last backward") {
        p.tp = 2;
        p.pp = 2;
        p.global_batch = 8;
        const auto [sync, bwd] = first_sync_and_last_backward(p);
        CHECK(sync >= bwd);
    }
}

TEST_CASE("the mixed-precision optimizer step moves the framework's bytes per parameter", "[strategies][framework]") {
    // Megatron's step: unscale 8 + norm and clip 12 + Adam 28 + master copy 6 + zeroing 4 = 58 B,
    // over GPT-2's parameters with its 50,257-token table padded to 50,304 rows (128 × tp 1).
    const Model m = model_preset("gpt2-small");
    const std::int64_t params = m.parameters() + (50304 - 50257) * 768;
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p;
    p.framework = "megatron";
    const Built b = build(m, c, p);
    bool found = false;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank == 0 && op.phase == Phase::opt && op.kind == OpKind::compute) {
            CHECK(op.bytes == 58 * params);
            found = true;
        }
    }
    CHECK(found);
}

TEST_CASE("megatron-deepspeed's dispatch per kernel is what vTrain's host-bound rows measure", "[strategies][framework]") {
    // The calibration (strategies/framework.cpp kMegatronDeepSpeedDispatch), redone: the rows of
    // validation/vtrain-single-node.csv with tp = pp = 1, micro-batch 1 and hidden 1024; least
    // squares of t = a + n·b + n·L·c (n micro-batches per replica, L layers); c over the kernels
    // smolcluster runs per layer and micro-batch, less the preset's driver launch.
    std::ifstream in(std::string(SMOL_SOURCE_DIR) + "/validation/vtrain-single-node.csv");
    REQUIRE(in);
    std::string line;
    std::getline(in, line);   // header
    std::array<std::array<double, 4>, 3> normal{};   // [XᵀX | Xᵀy]
    int rows = 0;
    while (std::getline(in, line)) {
        std::vector<double> v;
        std::stringstream cells(line);
        for (std::string cell; std::getline(cells, cell, ',');) v.push_back(std::stod(cell));
        REQUIRE(v.size() == 11);
        // GPUs, global batch, micro batch, hidden, heads, layers, seq, tp, dp, pp, iteration ms
        if (v[2] != 1 || v[3] != 1024 || v[7] != 1 || v[9] != 1) continue;
        const double n = v[1] / v[8], x[3] = {1, n, n * v[5]};
        for (int i = 0; i < 3; ++i) {
            for (int j = 0; j < 3; ++j) normal[i][j] += x[i] * x[j];
            normal[i][3] += x[i] * v[10];
        }
        ++rows;
    }
    CHECK(rows == 48);
    for (int i = 0; i < 3; ++i)   // Gauss-Jordan on the 3 × 3 normal equations
        for (int k = 0; k < 3; ++k)
            if (k != i) {
                const double f = normal[k][i] / normal[i][i];
                for (int j = 0; j < 4; ++j) normal[k][j] -= f * normal[i][j];
            }
    const double per_layer_ms = normal[2][3] / normal[2][2];
    CHECK(per_layer_ms == Approx(3.034).margin(0.0005));

    // Kernels of one layer and micro-batch: forward, recomputed forward and backward on rank 0.
    const Model m = vtrain_gpt(50304);
    const topo::Cluster c = topo::cluster_preset("hgx-a100-4hdr").first_devices(1);
    Plan p;
    p.framework = "megatron-deepspeed";
    p.recompute = Recompute::full;
    p.dtype = DType::fp16;
    p.attention = Attention::eager;
    p.global_batch = 1;
    const Built b = build(m, c, p);
    const std::size_t kernels = layer_kernels_on_rank0(b, 12);
    CHECK(kernels == 51);
    // Every micro-batch after the first also accumulates the layer's fp16 gradients (autograd's
    // AccumulateGrad: read both, write the sum), a device-bound pass without the framework's
    // dispatch: 12·h² + 13·h parameters of a GPT layer with biases.
    const topo::DeviceKind& dev = c.groups[0].device;
    const double h = 1024, layer_params = 12 * h * h + 13 * h;
    const double accumulate_s = 6 * layer_params / (dev.memory_bandwidth.bytes_per_second() * dev.memory_efficiency);
    CHECK(accumulate_s == Approx(43.6e-6).epsilon(0.005));
    const Time launch = dev.launch_overhead;
    const Time dispatch = parse_framework("megatron-deepspeed").dispatch_per_kernel;
    CHECK((dispatch + launch).to_seconds() ==
          Approx((per_layer_ms * 1e-3 - accumulate_s) / static_cast<double>(kernels)).epsilon(0.005));
    CHECK(b.graph.dispatch_overhead() == dispatch);
    // Other frameworks were not measured: nothing beyond the driver's launch.
    CHECK(parse_framework("megatron").dispatch_per_kernel == Time::zero());
    CHECK(parse_framework("pytorch").dispatch_per_kernel == Time::zero());
}

TEST_CASE("gradient accumulation: autograd after the first micro-batch, Megatron's hook on every one, none when fused", "[strategies][framework]") {
    // Four micro-batches of one sample. A GPT layer with biases holds 12·h² + 13·h parameters
    // (on one tensor rank of two: the 12·h² + 7·h split ones halved, the 6·h of the row-parallel
    // biases and the two layer norms whole).
    const Model m = vtrain_gpt(50304);
    const std::int64_t h = 1024, whole = 12 * h * h + 13 * h, half = (12 * h * h + 7 * h) / 2 + 6 * h;
    struct Seen {
        std::vector<int> microbatches;
        std::int64_t bytes = -1;
        bool dispatched = false;
    };
    const auto accumulations = [&](const std::string& framework, int tp, DType dtype, int pp = 1, int layer = 12) {
        Plan p;
        p.framework = framework;
        p.tp = tp;
        p.pp = pp;
        p.dtype = dtype;
        p.global_batch = 4;
        const topo::Cluster c = topo::cluster_preset("hgx-a100-4hdr").first_devices(tp * pp);
        const Built b = build(m, c, p);
        Seen seen;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.kind != OpKind::compute || op.layer != layer || op.rank != tp * (pp - 1)) continue;
            for (const Kernel& k : b.graph.kernels_of(id))
                if (k.name == KernelName::grad_accumulate) {
                    seen.microbatches.push_back(op.microbatch);
                    seen.bytes = k.bytes;
                    seen.dispatched = k.dispatched;
                }
        }
        return seen;
    };
    SECTION("PyTorch's AccumulateGrad: the first micro-batch hands its gradient over, each later one adds") {
        for (const char* framework : {"pytorch", "megatron-deepspeed", "deepspeed"}) {
            const Seen s = accumulations(framework, 1, DType::bf16);
            CHECK(s.microbatches == std::vector<int>{1, 2, 3});
            CHECK(s.bytes == 3 * 2 * whole);   // read the sum so far and the new gradient, write the sum
            CHECK_FALSE(s.dispatched);         // autograd's C++ engine launches it
        }
        CHECK(accumulations("pytorch", 1, DType::fp32).bytes == 3 * 4 * whole);
        CHECK(accumulations("megatron-deepspeed", 2, DType::fp16).microbatches == std::vector<int>{1, 2, 3});
    }
    SECTION("Megatron-LM's LocalDDP hook adds every micro-batch into main_grad, from Python") {
        const Seen s = accumulations("megatron@2.5", 2, DType::fp16);
        CHECK(s.microbatches == std::vector<int>{0, 1, 2, 3});
        CHECK(s.bytes == 3 * 2 * half);
        CHECK(s.dispatched);
    }
    SECTION("the last pipeline stage's copy of a tied table accumulates with the head") {
        // Block 25 is the head: its final LayerNorm (2·h) and, on the last of two stages, the
        // word-embedding table's copy (50,304 × h) that Megatron keeps for the tied output layer.
        const Seen s = accumulations("megatron-deepspeed", 1, DType::fp16, 2, 25);
        CHECK(s.microbatches == std::vector<int>{1, 2, 3});
        CHECK(s.bytes == 3 * 2 * (2 * h + 50304 * h));
    }
    SECTION("without pipeline stages a tied table's two gradients are summed every micro-batch") {
        // The lookup's gradient and the output layer's meet in the embedding block's backward:
        // one pass over the 50,304 × h table (read both, write the sum) in each micro-batch; with
        // two stages the table's uses sit on different ranks and nothing is summed.
        const auto sums = [&](int pp) {
            Plan p;
            p.framework = "megatron-deepspeed";
            p.pp = pp;
            p.dtype = DType::fp16;
            p.global_batch = 4;
            const topo::Cluster c = topo::cluster_preset("hgx-a100-4hdr").first_devices(pp);
            const Built b = build(m, c, p);
            std::vector<int> mbs;
            for (OpId id = 0; id < b.graph.size(); ++id) {
                const Op& op = b.graph.op(id);
                if (op.kind != OpKind::compute || op.layer != 0 || op.rank != 0) continue;
                for (const Kernel& k : b.graph.kernels_of(id))
                    if (k.name == KernelName::grad_accumulate && k.bytes == 3 * 2 * 50304 * h) mbs.push_back(op.microbatch);
            }
            return mbs;
        };
        CHECK(sums(1) == std::vector<int>{0, 1, 2, 3});
        CHECK(sums(2).empty());
    }
    SECTION("Megatron core's weight-gradient GEMMs accumulate into main_grad themselves") {
        CHECK(accumulations("megatron", 2, DType::bf16).microbatches.empty());
    }
}

TEST_CASE("whose cross-entropy each framework's models run", "[strategies][framework]") {
    // PyTorch's models (HuggingFace's ForCausalLMLoss, torchtitan's cross_entropy_loss) call
    // F.cross_entropy; Megatron's, Megatron-DeepSpeed's and the Megatron GPT DeepSpeed's examples
    // train run _VocabParallelCrossEntropy.
    CHECK(parse_framework("pytorch").loss == LossKernels::torch);
    for (const char* f : {"megatron", "megatron@2.5", "megatron-deepspeed", "deepspeed", "deepspeed@0.5"})
        CHECK(parse_framework(f).loss == LossKernels::megatron);
}

TEST_CASE("Megatron core's fused cross-entropy by release: native from 0.8, Transformer Engine's from 0.12 to 0.18", "[strategies][framework]") {
    CHECK_FALSE(parse_framework("megatron@0.7").cross_entropy_fusion_native);
    CHECK(parse_framework("megatron@0.8").cross_entropy_fusion_native);
    CHECK_FALSE(parse_framework("megatron@0.11").cross_entropy_fusion_te);
    CHECK(parse_framework("megatron@0.12").cross_entropy_fusion_te);
    CHECK(parse_framework("megatron@0.18").cross_entropy_fusion_te);
    CHECK_FALSE(parse_framework("megatron").cross_entropy_fusion_te);
    CHECK(parse_framework("megatron").cross_entropy_fusion_te_refused);
    CHECK(parse_framework("megatron").cross_entropy_fusion_native);
    CHECK_FALSE(parse_framework("megatron-deepspeed").cross_entropy_fusion_native);
    CHECK_FALSE(parse_framework("megatron@2.5").cross_entropy_fusion_native);

    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    auto plan = [](const char* framework, CrossEntropyFusion f) {
        Plan p;
        p.strategy = DataParallel::zero1;
        p.framework = framework;
        p.cross_entropy_fusion = f;
        p.seq = 8192;
        p.global_batch = 16;
        return p;
    };
    auto refused = [&](const Plan& p) { return test::bad_input_message([&] { (void)resolve(m, c, p); }); };
    using Catch::Matchers::Contains;
    CHECK_THAT(refused(plan("megatron", CrossEntropyFusion::te)),
               Contains("disabled due to stability issues") && Contains("--framework megatron@0.18"));
    CHECK_THAT(refused(plan("megatron@0.11", CrossEntropyFusion::te)), Contains("core 0.12 to 0.18"));
    CHECK_THAT(refused(plan("megatron@0.7", CrossEntropyFusion::native)), Contains("core 0.8 and later"));
    CHECK_THAT(refused(plan("deepspeed", CrossEntropyFusion::native)), Contains("deepspeed@0.16.2 has no fused cross-entropy"));
    CHECK(resolve(m, c, plan("megatron@0.16", CrossEntropyFusion::te)).framework.loss == LossKernels::te);
    CHECK(resolve(m, c, plan("megatron", CrossEntropyFusion::native)).framework.loss == LossKernels::megatron_fused);
    CHECK(resolve(m, c, plan("megatron", CrossEntropyFusion::none)).framework.loss == LossKernels::megatron);
    // Llama 3's 128,256-token vocabulary at sequence 8,192: a billion logits a micro-batch, so
    // the fewer bytes show in the step; the memory is the same fp32 tensor a logit.
    const traces::Summary none = tools::simulate_plan(m, c, plan("megatron@0.16", CrossEntropyFusion::none)).summary;
    const traces::Summary native = tools::simulate_plan(m, c, plan("megatron@0.16", CrossEntropyFusion::native)).summary;
    const traces::Summary te = tools::simulate_plan(m, c, plan("megatron@0.16", CrossEntropyFusion::te)).summary;
    CHECK(native.iteration < none.iteration);
    CHECK(te.iteration < native.iteration);
    CHECK(native.peak_memory == none.peak_memory);
    CHECK(te.peak_memory == none.peak_memory);
}

TEST_CASE("Megatron pads the vocabulary to 128 × tp, PyTorch and DeepSpeed keep the model's", "[strategies][framework]") {
    for (const char* f : {"megatron", "megatron@2.5", "megatron@0.16", "megatron-deepspeed"}) CHECK(parse_framework(f).vocab_multiple == 128);
    for (const char* f : {"pytorch", "deepspeed", "deepspeed@0.5"}) CHECK(parse_framework(f).vocab_multiple == 1);

    const Model m = model_preset("gpt2-small");   // 50,257 tokens, 768 wide
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto plan = [](const char* framework, std::optional<int> multiple) {
        Plan p;
        p.framework = framework;
        p.tp = 2;
        p.vocab_multiple = multiple;
        return p;
    };
    CHECK(resolve(m, c, plan("megatron", std::nullopt)).framework.vocab_multiple == 128);
    CHECK(resolve(m, c, plan("megatron", 1)).framework.vocab_multiple == 1);
    CHECK(resolve(m, c, plan("megatron-deepspeed", 64)).framework.vocab_multiple == 64);
    CHECK(resolve(m, c, plan("pytorch", std::nullopt)).framework.vocab_multiple == 1);
    using Catch::Matchers::Contains;
    auto refused = [&](const Plan& p) { return test::bad_input_message([&] { (void)resolve(m, c, p); }); };
    CHECK_THAT(refused(plan("pytorch", 128)), Contains("is Megatron's") && Contains("vocabulary of 50257 as it is"));
    CHECK_THAT(refused(plan("megatron", 0)), Contains("from 1 to 65536"));
    CHECK_THAT(test::bad_input_message([&] { (void)resolve(model_preset("resnet50"), c, plan("megatron", 128)); }),
               Contains("layer list"));

    // The padded rows are trained parameters: the optimizer steps them. At tp 2 each rank holds
    // (50,432 - 50,258) / 2 = 87 more rows of 768 than with the vocabulary padded to tp alone.
    auto step_bytes = [&](std::optional<int> multiple) {
        const Built b = build(m, c, plan("megatron", multiple));
        std::int64_t bytes = 0;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.rank == 0 && op.phase == Phase::opt && op.kind == OpKind::compute) bytes += op.bytes;
        }
        return bytes;
    };
    CHECK(step_bytes(std::nullopt) - step_bytes(1) == 58 * 87 * 768);
}

TEST_CASE("query-key layer scaling by release, and what it costs on the unfused softmax path", "[strategies][framework]") {
    // Megatron-LM's default flipped twice: --no-query-key-layer-scaling (on by default) from
    // 9acc895 (2021-01-06) until 94a3749 (2023-11-02) made it --apply-query-key-layer-scaling;
    // Megatron-DeepSpeed kept the old default (megatron/arguments.py:1129-1131 at f4157be).
    CHECK(parse_framework("megatron-deepspeed").qk_layer_scaling);
    CHECK(parse_framework("megatron@2.5").qk_layer_scaling);
    CHECK_FALSE(parse_framework("megatron").qk_layer_scaling);
    CHECK_FALSE(parse_framework("pytorch").qk_layer_scaling);
    // vTrain's GPT at tp 8, micro-batch 1: 2 score matrices per rank, too few for the fused
    // kernel, so each of forward, recompute and backward runs 5 softmax passes for 1 (4 more each)
    // under Megatron-DeepSpeed, 4 for 1 (3 more) without the scaling: 51 + 12 and 51 + 9 kernels
    // per layer and micro-batch, against the 51 of micro-batch 2 (4 matrices, fused).
    const Model m = vtrain_gpt(50432);
    const topo::Cluster c = topo::cluster_preset("hgx-a100-4hdr");
    auto layer_kernels = [&](const char* framework, int micro_batch) {
        Plan p;
        p.framework = framework;
        p.tp = 8;
        p.recompute = Recompute::full;
        p.dtype = DType::fp16;
        p.attention = Attention::eager;
        p.micro_batch = micro_batch;
        p.global_batch = micro_batch;
        const Built b = build(m, c, p);
        return layer_kernels_on_rank0(b, 12);
    };
    CHECK(layer_kernels("megatron-deepspeed", 1) == 51 + 12);
    CHECK(layer_kernels("megatron", 1) == 51 + 9);
    CHECK(layer_kernels("megatron-deepspeed", 2) == 51);
}

TEST_CASE("flash attention's kernel: cuDNN's under Megatron core on Hopper, FlashAttention-2 elsewhere", "[strategies][framework][attention]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster h100 = topo::cluster_preset("dgx-h100"), a100 = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::ddp;
    p.framework = "megatron";
    // Transformer Engine prefers FusedAttention on compute capability 9.0 (utils.py:1647-1653).
    CHECK(resolve(m, h100, p).attention_backend == AttentionBackend::fused);
    CHECK(resolve(m, a100, p).attention_backend == AttentionBackend::flash);
    p.framework = "pytorch";
    CHECK(resolve(m, h100, p).attention_backend == AttentionBackend::flash);
    p.attention_backend = AttentionBackend::fused;   // --attention-backend fused (SDPA's cuDNN backend)
    CHECK(resolve(m, h100, p).attention_backend == AttentionBackend::fused);
    // The blocks' attention kernels carry it, and their mask.
    Workload w;
    w.seq = 1024;
    w.attention = Attention::flash;
    w.attention_backend = AttentionBackend::fused;
    int kernels = 0;
    for (const Block& b : m.blocks(w))
        for (const Kernel& k : b.fwd_kernels)
            if (k.op == KernelOp::flash) {
                ++kernels;
                CHECK(k.backend == AttentionBackend::fused);
                CHECK(k.causal);
            }
    CHECK(kernels == 12);
    // Eager attention runs no fused kernel: naming one is refused.
    p.attention = Attention::eager;
    CHECK_THAT(test::bad_input_message([&] { resolve(m, h100, p); }), Catch::Contains("--attention-backend"));
}

TEST_CASE("FlashAttention-3 runs on Hopper alone", "[strategies][framework][attention]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster h100 = topo::cluster_preset("dgx-h100"), h200 = topo::cluster_preset("hgx-h200"),
                        a100 = topo::cluster_preset("dgx-a100");
    Plan p;
    p.strategy = DataParallel::ddp;
    p.attention_backend = AttentionBackend::flash3;
    CHECK(resolve(m, h100, p).attention_backend == AttentionBackend::flash3);
    CHECK(resolve(m, h200, p).attention_backend == AttentionBackend::flash3);
    // sm80: refused, naming the devices, their compute capability and what runs there instead.
    const std::string msg = test::bad_input_message([&] { resolve(m, a100, p); });
    CHECK_THAT(msg, Catch::Contains("--attention-backend"));
    CHECK_THAT(msg, Catch::Contains("Hopper"));
    CHECK_THAT(msg, Catch::Contains("compute capability 8.0"));
    CHECK(parse_attention_backend("flash3", "--attention-backend") == AttentionBackend::flash3);
    CHECK(std::string(to_string(AttentionBackend::flash3)) == "flash3");
    CHECK_THAT(test::bad_input_message([] { parse_attention_backend("flash4", "--attention-backend"); }),
               Catch::Contains("flash3"));
}

namespace {

/// Rank 0's zero1 parameter all-gathers, and for each whether it ended before the first forward
/// op (micro-batch 0) of the block it is indexed by started: (count, all before, all in forward).
struct ParamGatherCheck {
    int gathers = 0;
    bool before_use = true, in_forward = true;
    Time first_start = Time::max();   // of its gathers
    Time step;
};
ParamGatherCheck param_gathers(const Plan& p, int rank = 0) {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const Built b = build(m, c, p);
    const Timeline tl = sim::simulate(b.graph, c);
    ParamGatherCheck out;
    out.step = tl.makespan;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != rank || op.kind != OpKind::collective ||
            b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind != CollectiveKind::all_gather)
            continue;
        ++out.gathers;
        if (op.phase != Phase::fwd) {
            out.in_forward = false;
            continue;
        }
        out.first_start = std::min(out.first_start, tl.start[id]);
        for (OpId f = 0; f < b.graph.size(); ++f) {
            const Op& u = b.graph.op(f);
            if (u.rank == rank && u.kind == OpKind::compute && u.phase == Phase::fwd && u.microbatch == 0 && u.layer == op.layer &&
                tl.start[f] < tl.end[id])
                out.before_use = false;
        }
    }
    return out;
}

}  // namespace

TEST_CASE("Megatron's overlap-param-gather runs zero1's parameter all-gathers under the forward and each bucket before its first block",
          "[strategies][framework]") {
    CHECK_FALSE(parse_framework("megatron@0.3").can_overlap_param_gather);
    CHECK(parse_framework("megatron@0.4").can_overlap_param_gather);
    CHECK(parse_framework("megatron").can_overlap_param_gather);
    CHECK_FALSE(parse_framework("megatron@2.5").can_overlap_param_gather);
    // Buckets in backward order, first blocks 5, 3, 3, 0: forward order is k = 3, 2, 1, 0. Bucket 3
    // (the first) is dispatched at its own block 0; each other when the one after it is waited for.
    const std::vector<Bucket> buckets{{Bytes(1), 5}, {Bytes(1), 3}, {Bytes(1), 3}, {Bytes(1), 0}};
    CHECK(param_gather_dispatch_block(buckets, 3) == 0);
    CHECK(param_gather_dispatch_block(buckets, 2) == 0);
    CHECK(param_gather_dispatch_block(buckets, 1) == 3);
    CHECK(param_gather_dispatch_block(buckets, 0) == 3);
    Plan p;
    p.strategy = DataParallel::zero1;
    p.framework = "megatron";
    p.overlap_grad_reduce = true;
    SECTION("data parallel alone (the ZeRO-1/2 engine's graph)") {
        const ParamGatherCheck after = param_gathers(p);
        REQUIRE(after.gathers > 1);
        CHECK_FALSE(after.in_forward);
        p.overlap_param_gather = true;
        const ParamGatherCheck under = param_gathers(p);
        CHECK(under.gathers == after.gathers);   // the same buckets, moved
        CHECK(under.in_forward);
        CHECK(under.before_use);
        CHECK(under.step < after.step);         // hidden under the forward
    }
    SECTION("under tensor and pipeline parallelism (Megatron's graph)") {
        p.tp = 2;
        p.pp = 2;
        p.global_batch = 8;
        const ParamGatherCheck after = param_gathers(p);
        REQUIRE(after.gathers > 1);
        CHECK_FALSE(after.in_forward);
        p.overlap_param_gather = true;
        const ParamGatherCheck under = param_gathers(p);
        CHECK(under.gathers == after.gathers);
        CHECK(under.in_forward);
        CHECK(under.before_use);
        // One chunk per stage: the first gather is dispatched at the first forward's pre-hook, so
        // on the second stage (rank 4: t 0, d 0, stage 1) after the first activation arrives.
        CHECK(under.first_start == Time::zero());
        const ParamGatherCheck second = param_gathers(p, 4);
        CHECK(second.before_use);
        CHECK(second.first_start > Time::zero());
        // Interleaved: Megatron aligns them (schedules.py): both chunks' buckets dispatched as the
        // step's schedule starts, on every stage.
        p.schedule = Schedule::interleaved;
        p.virtual_stages = 2;
        const ParamGatherCheck aligned = param_gathers(p, 4);
        CHECK(aligned.in_forward);
        CHECK(aligned.before_use);
        CHECK(aligned.first_start == Time::zero());
        // --overlap-param-gather-with-optimizer-step: the first chunk's gathers go out right after
        // its own optimizer step, beside the second chunk's (Megatron's chained optimizer); the
        // second chunk's stay in the forward, dispatched as the schedule starts.
        p.overlap_param_gather_with_optimizer_step = true;
        const Model m = model_preset("gpt2-medium");
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        const Built b = build(m, c, p);
        const Timeline tl = sim::simulate(b.graph, c);
        const int rank = 4;   // stage 1: chunks 0 and 1 hold virtual stages 1 and 3
        std::vector<OpId> steps, in_step, in_forward;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.rank != rank) continue;
            if (op.kind == OpKind::compute && op.phase == Phase::opt) steps.push_back(id);
            if (op.kind == OpKind::collective && op.stream == Stream::comm &&
                b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_gather)
                (op.phase == Phase::opt ? in_step : in_forward).push_back(id);
        }
        REQUIRE(steps.size() == 2);   // the first chunk's shard, then the rest
        CHECK(in_step.size() + in_forward.size() == static_cast<std::size_t>(aligned.gathers));
        REQUIRE(!in_step.empty());
        REQUIRE(!in_forward.empty());
        const Layout l = resolve(m, c, p);
        for (const OpId a : in_step) {
            CHECK(tl.start[a] >= tl.end[steps[0]]);   // after the first chunk's step
            CHECK(tl.start[a] < tl.end[steps[1]]);    // beside the rest of the step
        }
        // Both steps together update the rank's ZeRO-1 shard, as the single step without the flag
        // does, the first chunk's part first.
        const auto stepped = [&](const Built& x, const std::vector<OpId>& ops) {   // parameters each op steps, summed
            std::int64_t n = 0;
            for (const OpId id : ops) {
                std::int64_t most = 0;
                for (const Kernel& k : x.graph.kernels_of(id)) most = std::max(most, k.elements);
                n += most;
            }
            return n;
        };
        p.overlap_param_gather_with_optimizer_step = false;
        const Built one = build(m, c, p);
        std::vector<OpId> single;
        for (OpId id = 0; id < one.graph.size(); ++id)
            if (one.graph.op(id).rank == rank && one.graph.op(id).kind == OpKind::compute && one.graph.op(id).phase == Phase::opt)
                single.push_back(id);
        REQUIRE(single.size() == 1);
        CHECK(stepped(b, steps) == stepped(one, single));
        CHECK(stepped(b, {steps[0]}) > 0);
        CHECK(l.framework.overlap_param_gather_with_optimizer_step);
    }
    SECTION("interleaved: chunk c + 1's gathers go out pp-rank forwards before chunk c's first micro-batch") {
        // Megatron's forward_step_helper_preprocess (schedules.py:1341-1353): at virtual
        // micro-batch k, pipeline rank r dispatches the chunk after the one whose first micro-batch
        // is virtual micro-batch k + r. pp 2, 4 chunks, 4 micro-batches: stage 0 dispatches chunks
        // 2 and 3 at its forwards 2 and 4 (chunks 1 and 2, micro-batch 0), stage 1 at its forwards 1
        // and 3 (chunks 0 and 1, micro-batch 1), each once that forward's activation is received.
        p.tp = 2;
        p.pp = 2;
        p.global_batch = 8;
        p.schedule = Schedule::interleaved;
        p.virtual_stages = 4;
        p.overlap_param_gather = true;
        const Model m = model_preset("gpt2-medium");
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        const Built b = build(m, c, p);
        for (const int rank : {0, 4}) {
            INFO("rank " << rank);
            std::set<int> waited;   // the micro-batches of the receives the gathers wait for
            int after_receive = 0;
            for (OpId id = 0; id < b.graph.size(); ++id) {
                const Op& op = b.graph.op(id);
                if (op.rank != rank || op.kind != OpKind::collective || op.phase != Phase::fwd || op.stream != Stream::comm) continue;
                for (const OpId before : b.graph.predecessors(id))
                    if (b.graph.op(before).kind == OpKind::recv) {
                        waited.insert(b.graph.op(before).microbatch);
                        ++after_receive;
                    }
            }
            CHECK(after_receive > 0);
            CHECK(waited == std::set<int>{rank == 0 ? 0 : 1});
        }
    }
    SECTION("plans it cannot run are refused, naming the flag") {
        const Model m = model_preset("gpt2-medium");
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        p.overlap_param_gather = true;
        p.strategy = DataParallel::ddp;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("--overlap-param-gather") && Catch::Contains("zero1"));
        p.strategy = DataParallel::zero1;
        p.framework = "megatron@0.3";
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("Megatron core 0.4"));
        p.framework = "deepspeed";
        p.overlap_grad_reduce = false;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("--overlap-param-gather"));
        p.framework = "megatron";
        p.tp = 8;   // all of the node's 8 GPUs: dp 1
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("one data-parallel rank"));
        // --overlap-param-gather-with-optimizer-step: Megatron's asserts, and core 0.9 on.
        p.tp = 2;
        p.pp = 2;
        p.global_batch = 8;
        p.overlap_param_gather_with_optimizer_step = true;
        const auto with_step = [&] { return test::bad_input_message([&] { resolve(m, c, p); }); };
        CHECK_THAT(with_step(), Catch::Contains("--overlap-param-gather-with-optimizer-step") && Catch::Contains("interleaved"));
        p.schedule = Schedule::interleaved;
        p.virtual_stages = 2;
        CHECK_NOTHROW(resolve(m, c, p));
        p.framework = "megatron@0.8";
        CHECK_THAT(with_step(), Catch::Contains("core 0.9"));
        p.framework = "megatron";
        p.overlap_param_gather = false;
        CHECK_THAT(with_step(), Catch::Contains("needs --overlap-param-gather"));
    }
}

TEST_CASE("gradient buckets are the framework's: PyTorch's 25 MiB, Megatron's max(4e7, 1e6 x dp) parameters or its whole buffer",
          "[strategies][framework]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(16);   // 128 GPUs
    const std::int64_t grads = state_bytes(DType::bf16).grads;
    Plan p;
    // PyTorch DDP (torch/nn/parallel/distributed.py bucket_cap_mb, _DEFAULT_FIRST_BUCKET_BYTES).
    Layout l = resolve(m, c, p);
    CHECK(l.bucket == Bytes::mib(25));
    CHECK(l.first_bucket == Bytes::mib(1));
    // Megatron overlapping: distributed_data_parallel.py:134, over dp (tp 2: 64 replicas).
    p.framework = "megatron";
    p.tp = 2;
    p.overlap_grad_reduce = true;
    l = resolve(m, c, p);
    CHECK(l.bucket == Bytes(64'000'000 * grads));
    CHECK(l.first_bucket == l.bucket);
    p.tp = 8;   // 16 replicas: the 4e7 floor
    CHECK(resolve(m, c, p).bucket == Bytes(40'000'000 * grads));
    p.bucket_mb = 10;
    CHECK(resolve(m, c, p).bucket == Bytes::mib(10));
    // Megatron after backward: its whole buffer, one reduction per stage on each rank.
    p.bucket_mb.reset();
    p.overlap_grad_reduce = false;
    p.tp = 2;
    p.pp = 2;
    p.global_batch = 64;
    const Built b = build(m, c, p);
    int reductions = 0;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        // Gradient buckets carry their index (the tied table's all-reduce between the first and
        // the last stage does not).
        if (op.rank == 0 && op.kind == OpKind::collective && op.phase == Phase::comm && op.index >= 0 &&
            b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_reduce)
            ++reductions;
    }
    CHECK(reductions == 1);
}
