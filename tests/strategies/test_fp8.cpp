// --fp8: where it runs (Transformer Engine under Megatron core, on FP8 tensor cores, in a 16-bit
// run), what the builders add (each block's weight cast at a step's first micro-batch, the FP8
// weight copies for the whole step), and what it does to a step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "core/json.hpp"
#include "core/model.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/simulation.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

Plan fp8_plan(Fp8Recipe r = Fp8Recipe::delayed) {
    Plan p;
    p.framework = "megatron";
    p.fp8 = r;
    return p;
}

/// GPT-3 175B's layer shape in 4 layers (a JSON model): GEMM-bound on one DGX H100 at tp 8, and
/// quick to simulate.
Model gpt3_four_layers() {
    const std::string text = R"({"kind": "transformer", "name": "gpt3-4l", "layers": 4, "hidden": 12288, "heads": 96,
        "kv_heads": 96, "ffn_hidden": 49152, "vocab": 50257, "seq": 2048, "norm": "layernorm", "positions": "learned",
        "biases": true, "gated_mlp": false, "tied_embeddings": true})";
    const Json doc = parse_json_text(text, "gpt3-4l.json");
    return model_from_json(JsonView(doc, "gpt3-4l.json"), "gpt3-4l");
}

/// Whether `id` runs only casts to FP8 (a weight cast: its own op).
bool weight_cast(const Built& b, OpId id) {
    const auto kernels = b.graph.kernels_of(id);
    return !kernels.empty() && std::all_of(kernels.begin(), kernels.end(), [](const Kernel& k) { return k.name == KernelName::quantize; });
}

}  // namespace

TEST_CASE("FP8 (--fp8) runs where Transformer Engine does, and says why not elsewhere", "[strategies][fp8]") {
    const Model gpt = model_preset("gpt2-medium");
    const topo::Cluster h100 = topo::cluster_preset("dgx-h100");
    SECTION("on the H100 under megatron it resolves") {
        CHECK(resolve(gpt, h100, fp8_plan()).fp8 == Fp8Recipe::delayed);
        CHECK(resolve(gpt, h100, fp8_plan(Fp8Recipe::tensorwise)).fp8 == Fp8Recipe::tensorwise);
        CHECK(resolve(gpt, h100, Plan{}).fp8 == Fp8Recipe::none);
    }
    SECTION("an A100 has no FP8 tensor cores") {
        const std::string e = test::bad_input_message([&] { resolve(gpt, topo::cluster_preset("dgx-a100"), fp8_plan()); });
        CHECK_THAT(e, Catch::Contains("--fp8") && Catch::Contains("no FP8 peak") && Catch::Contains("a100"));
    }
    SECTION("DeepSpeed's engine and PyTorch have no FP8 path here") {
        Plan p = fp8_plan();
        p.framework = "deepspeed";
        p.strategy = DataParallel::zero1;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt, h100, p); }), Catch::Contains("--framework megatron"));
        p.framework = "megatron@2.5";
        p.strategy = DataParallel::ddp;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt, h100, p); }), Catch::Contains("megatron@2.5"));
    }
    SECTION("fp32 runs, layer lists and adapters are refused") {
        Plan p = fp8_plan();
        p.dtype = DType::fp32;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt, h100, p); }), Catch::Contains("bf16 or fp16"));
        CHECK_THAT(test::bad_input_message([&] { resolve(model_preset("resnet50"), h100, fp8_plan()); }),
                   Catch::Contains("layer list"));
        Plan lora = fp8_plan();
        lora.finetune = parse_finetune("lora:8");
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt, h100, lora); }), Catch::Contains("full training"));
    }
}

TEST_CASE("FP8 weights: cast once per step before a block's first forward, their copies held for the whole step", "[strategies][fp8]") {
    const Model gpt = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(2);
    for (int pp : {1, 2}) {
        INFO("pp " << pp);
        Plan p = fp8_plan();
        p.pp = pp;
        p.global_batch = 8;   // 8 micro-batches per replica at pp 2, 4 at dp 2
        const Built b = build(gpt, c, p);
        Plan plain_plan = p;
        plain_plan.fp8 = Fp8Recipe::none;
        const Built plain = build(gpt, c, plain_plan);
        const std::vector<Block> blocks = strategies::detail::replica_blocks(gpt, b.layout, p);
        // Per rank: one cast per block with FP8 weights, at micro-batch 0, before that block's
        // first forward (stream order: a smaller op id on the same rank).
        std::map<int, std::set<int>> cast_layers;
        std::map<std::pair<int, int>, OpId> first_fwd;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.kind != OpKind::compute) continue;
            if (weight_cast(b, id)) {
                CHECK(op.microbatch == 0);
                CHECK(op.phase == Phase::fwd);
                CHECK(cast_layers[op.rank].insert(op.layer).second);
            } else if (op.phase == Phase::fwd && op.microbatch == 0) {
                first_fwd.emplace(std::pair{op.rank, op.layer}, id);
            }
        }
        std::int64_t fp8_params_rank0 = 0;
        for (const auto& [rank, layers] : cast_layers)
            for (int layer : layers) {
                REQUIRE(blocks[static_cast<std::size_t>(layer)].fp8_params > 0);
                if (rank == 0) fp8_params_rank0 += blocks[static_cast<std::size_t>(layer)].fp8_params;
                const auto f = first_fwd.find({rank, layer});
                REQUIRE(f != first_fwd.end());
                bool before = false;
                for (OpId id = 0; id < f->second; ++id)
                    before = before || (b.graph.op(id).rank == rank && b.graph.op(id).layer == layer && weight_cast(b, id));
                CHECK(before);
            }
        // Every layer a rank runs is cast there (the folded replica's ranks only): GPT-2 medium's 24
        // layers over the stages, nothing else.
        std::size_t casts = 0, layers_run = 0;
        for (const auto& [rank, layers] : cast_layers) casts += layers.size();
        for (const auto& [at, id] : first_fwd) layers_run += blocks[static_cast<std::size_t>(at.second)].fp8_params > 0;
        CHECK(casts == layers_run);
        CHECK(casts == static_cast<std::size_t>(24 * (b.layout.folded ? 1 : b.layout.dp)));
        // The copies: 2 bytes per FP8 parameter more in rank 0's parameter buffers.
        auto parameter_bytes = [](const Built& x) {
            std::int64_t n = 0;
            for (const Buffer& buf : x.graph.buffers())
                if (buf.rank == 0 && buf.label == static_cast<std::int32_t>(BufferLabel::parameters)) n += buf.bytes;
            return n;
        };
        CHECK(parameter_bytes(b) - parameter_bytes(plain) == 2 * fp8_params_rank0);
        CHECK(b.layout.estimated_ops >= static_cast<std::int64_t>(b.graph.size()));
    }
}

TEST_CASE("an FP8 step of a GEMM-bound plan is faster, by less than the peaks' ratio", "[strategies][fp8]") {
    // GPT-3 175B's layer shape on one DGX H100 node, tp 8: the GEMMs set the step.
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan p = fp8_plan();
    p.tp = 8;
    p.sequence_parallel = true;
    p.recompute = Recompute::full;
    Plan bf16 = p;
    bf16.fp8 = Fp8Recipe::none;
    const Model small = gpt3_four_layers();
    const double fp8 = tools::simulate_plan(small, c, p).summary.iteration.to_seconds();
    const double plain = tools::simulate_plan(small, c, bf16).summary.iteration.to_seconds();
    CHECK(fp8 < plain);
    // Not more than the FP8 GEMMs' own speed-up: 1979 · 0.709 over 989 · 0.803.
    CHECK(plain / fp8 < 1979 * 0.709 / (989 * 0.803));
}

TEST_CASE("FP8 with sequence parallelism: the forward all-gathers move the FP8 copy, the rest stays 16-bit", "[strategies][fp8]") {
    // Transformer Engine quantizes the norm's output before gathering it (layernorm_linear.py:294-313).
    const Model gpt = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(2);
    Plan p = fp8_plan();
    p.tp = 2;
    p.sequence_parallel = true;
    p.global_batch = 2;
    Plan plain_plan = p;
    plain_plan.fp8 = Fp8Recipe::none;
    // The transformer layers (the blocks with FP8 linears), then the bytes of every tensor-parallel
    // collective op of one, by kind and phase.
    std::set<int> layers;
    {
        const std::vector<Block> blocks = strategies::detail::replica_blocks(gpt, resolve(gpt, c, p), p);
        for (std::size_t i = 0; i < blocks.size(); ++i)
            if (blocks[i].fp8_params > 0) layers.insert(static_cast<int>(i));
    }
    REQUIRE(layers.size() == 24);
    auto bytes_of = [&](const Plan& plan) {
        const Built b = build(gpt, c, plan);
        std::map<std::pair<CollectiveKind, Phase>, std::set<std::int64_t>> out;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.kind != OpKind::collective || !layers.count(op.layer)) continue;
            const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
            if (col.kind == CollectiveKind::all_gather || col.kind == CollectiveKind::reduce_scatter)
                out[{col.kind, op.phase}].insert(col.bytes);
        }
        return out;
    };
    const auto fp8 = bytes_of(p), bf16 = bytes_of(plain_plan);
    // One sample of 1,024 tokens × 1,024 features: 2 MiB in bf16 per gather.
    const std::int64_t sbh = 1024 * 1024 * 2;
    REQUIRE(bf16.at({CollectiveKind::all_gather, Phase::fwd}) == std::set<std::int64_t>{sbh});
    CHECK(fp8.at({CollectiveKind::all_gather, Phase::fwd}) == std::set<std::int64_t>{sbh / 2});
    CHECK(fp8.at({CollectiveKind::reduce_scatter, Phase::fwd}) == std::set<std::int64_t>{sbh});
    // Backward: the gradients' gathers in bf16, the weight gradient's re-gather of the input in
    // FP8 (layernorm_linear.py:773-791).
    CHECK(fp8.at({CollectiveKind::all_gather, Phase::bwd}) == std::set<std::int64_t>{sbh / 2, sbh});
    CHECK(bf16.at({CollectiveKind::all_gather, Phase::bwd}) == std::set<std::int64_t>{sbh});
    // Through userbuffers (--tp-comm-overlap) every all-gather moves FP8 (fp8_buf for
    // layers_all_gather_overlap, module/base.py:335-344), the gradients' too; the forward's
    // pipelined reduce-scatters stay 16-bit, in their 3/4 and 1/4 splits.
    Plan ub = p;
    ub.tp_comm_overlap = true;
    const auto overlapped = bytes_of(ub);
    CHECK(overlapped.at({CollectiveKind::all_gather, Phase::fwd}) == std::set<std::int64_t>{sbh / 2});
    CHECK(overlapped.at({CollectiveKind::all_gather, Phase::bwd}) == std::set<std::int64_t>{sbh / 2});
    CHECK(overlapped.at({CollectiveKind::reduce_scatter, Phase::fwd}) == std::set<std::int64_t>{sbh / 4, sbh * 3 / 4});
    CHECK(overlapped.at({CollectiveKind::reduce_scatter, Phase::bwd}) == std::set<std::int64_t>{sbh});
    CHECK(fp8.at({CollectiveKind::reduce_scatter, Phase::bwd}) == std::set<std::int64_t>{sbh});
}

TEST_CASE("FP8 with --first-last-layers-bf16 keeps the first and last layers' GEMMs in 16 bits, as Megatron core does",
          "[strategies][fp8]") {
    // megatron/core/fp8_utils.py is_first_last_bf16_layer: layer_no < num_layers_at_start_in_bf16
    // or layer_no >= num_layers − num_layers_at_end_in_bf16 runs without FP8.
    const Model m = model_preset("gpt2-medium");   // 24 layers
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan p = fp8_plan(Fp8Recipe::tensorwise);
    p.first_last_layers_bf16 = true;
    const auto sixteen_bit = [&](const Plan& plan) {
        std::set<int> layers;   // transformer layers, 0-based, whose block has no FP8 weights
        const Layout l = resolve(m, c, plan);
        for (const Block& b : strategies::detail::replica_blocks(m, l, plan))
            if (b.kind == Block::Kind::transformer && b.fp8_params == 0) layers.insert(b.index - 1);
        return layers;
    };
    CHECK(sixteen_bit(p) == std::set<int>{0, 23});
    p.num_layers_at_start_in_bf16 = 2;
    p.num_layers_at_end_in_bf16 = 0;
    CHECK(sixteen_bit(p) == std::set<int>{0, 1});
    // Where the GEMMs set the step (GPT-3 175B's layer shape, 4 layers, tp 8, as above), one with
    // its first and last layers in 16 bits lies between the all-FP8 and the all-16-bit ones.
    const Model big = gpt3_four_layers();
    Plan all8 = fp8_plan(Fp8Recipe::tensorwise);
    all8.tp = 8;
    all8.sequence_parallel = true;
    Plan all16 = all8, mixed = all8;
    all16.fp8 = Fp8Recipe::none;
    mixed.first_last_layers_bf16 = true;
    const double t8 = tools::simulate_plan(big, c, all8).summary.iteration.to_seconds();
    const double t16 = tools::simulate_plan(big, c, all16).summary.iteration.to_seconds();
    const double t_mixed = tools::simulate_plan(big, c, mixed).summary.iteration.to_seconds();
    CHECK(t8 < t_mixed);
    CHECK(t_mixed < t16);
}

TEST_CASE("FP8 with --first-last-layers-bf16 says why where Megatron refuses it", "[strategies][fp8][plan]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan p = fp8_plan(Fp8Recipe::tensorwise);
    p.first_last_layers_bf16 = true;
    SECTION("delayed scaling") {
        p.fp8 = Fp8Recipe::delayed;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("Delayed scaling does not support first / last layer in BF16"));
    }
    SECTION("without FP8") {
        p.fp8 = Fp8Recipe::none;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("has no effect without --fp8"));
    }
    SECTION("before core 0.12") {
        p.framework = "megatron@0.11";
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("megatron@0.11 has no --first-last-layers-bf16"));
    }
    SECTION("more layers than a pipeline stage holds") {
        p.pp = 2;
        p.global_batch = 16;
        p.num_layers_at_end_in_bf16 = 13;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("between 0 and the layers of a pipeline stage (12), found 13"));
    }
    SECTION("a count without the flag") {
        p.first_last_layers_bf16 = false;
        p.num_layers_at_start_in_bf16 = 2;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("has no effect without --first-last-layers-bf16"));
    }
}
