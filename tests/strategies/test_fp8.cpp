// --fp8: where it runs (Transformer Engine under Megatron core, on FP8 tensor cores, in a 16-bit
// run), what the builders add (each block's weight cast at a step's first micro-batch, the FP8
// weight copies for the whole step), and what it does to a step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "core/json.hpp"
#include "core/model.hpp"
#include "dp_fixtures.hpp"
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

/// The bytes of rank 0's parameter buffers.
std::int64_t parameter_bytes(const Built& x) {
    std::int64_t n = 0;
    for (const Buffer& buf : x.graph.buffers())
        if (buf.rank == 0 && buf.label == static_cast<std::int32_t>(BufferLabel::parameters)) n += buf.bytes;
    return n;
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

TEST_CASE("FP8 parameters (--fp8-param-gather) are bucketed on their own from the model's end with every other parameter in the last",
          "[strategies][fp8]") {
    // Megatron's DDP with FP8 weights: a uint8 buffer of its own, and partition_buckets' case 3
    // (param_and_grad_buffer.py:1680-1690) merges the 16-bit buffer's buckets into the last FP8 one.
    std::vector<Block> blocks(5);
    const std::int64_t params[] = {100, 110, 110, 110, 10}, fp8[] = {0, 100, 100, 100, 0};   // embedding, 3 layers, head
    for (int i = 0; i < 5; ++i) {
        blocks[static_cast<std::size_t>(i)].index = i;
        blocks[static_cast<std::size_t>(i)].params = params[i];
        blocks[static_cast<std::size_t>(i)].fp8_params = fp8[i];
    }
    // 150 parameters a bucket (fp32 gradients): layer 3's 100 and half of layer 2's, then the rest
    // of layer 2 and layer 1; the 140 others (embedding, biases, head) join the second.
    const std::vector<Bucket> b = make_fp8_param_buckets(blocks, 4, Bytes(600));
    REQUIRE(b.size() == 2);
    CHECK(b[0].bytes == Bytes(600));
    CHECK(b[0].ready_after_block == 2);
    CHECK(b[0].fp8 == 150);
    CHECK(b[1].bytes == Bytes((150 + 140) * 4));
    CHECK(b[1].ready_after_block == 0);   // the embedding's gradient comes last
    CHECK(b[1].fp8 == 150);
    // Gathered: 2 bytes per 16-bit parameter, 1 per FP8 one.
    CHECK(gathered_bytes(b[0], 4, 2) == Bytes(150));
    CHECK(gathered_bytes(b[1], 4, 2) == Bytes(140 * 2 + 150));
    // Without an FP8 weight there is no FP8 buffer: the plain buckets.
    for (Block& x : blocks) x.fp8_params = 0;
    const std::vector<Bucket> plain = make_fp8_param_buckets(blocks, 4, Bytes(600));
    const std::vector<Bucket> expected = make_buckets(blocks, 4, Bytes(600), Bytes(600));
    REQUIRE(plain.size() == expected.size());
    for (std::size_t k = 0; k < plain.size(); ++k) {
        CHECK(plain[k].bytes == expected[k].bytes);
        CHECK(plain[k].fp8 == 0);
    }
}

TEST_CASE("FP8 parameters (--fp8-param-gather) are gathered at a byte with no 16-bit copy and the shard cast after the step",
          "[strategies][fp8]") {
    const Model gpt = model_preset("gpt2-medium");   // 24 layers of hidden 1,024
    // Its FP8 weights by hand: QKV 3h², projection h², the MLP's 4h² and 4h² a layer.
    const std::int64_t fp8_weights = 24 * 12 * std::int64_t{1024} * 1024;
    for (int pp : {1, 2}) {
        INFO("pp " << pp);
        const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(2 * pp);   // dp 2
        Plan p = fp8_plan();
        p.strategy = DataParallel::zero1;
        p.pp = pp;
        p.global_batch = 8;
        Plan kept = p;
        p.fp8_param_gather = true;
        const Built b = build(gpt, c, p), plain = build(gpt, c, kept);
        Plan sixteen = kept;
        sixteen.fp8 = Fp8Recipe::none;
        const Built bf16 = build(gpt, c, sixteen);
        // Every FP8 weight is gathered in one byte instead of two; the gradients are reduced as before.
        CHECK(test::declared_collective_bytes(plain.graph, CollectiveKind::all_gather) -
              test::declared_collective_bytes(b.graph, CollectiveKind::all_gather) == fp8_weights);
        CHECK(test::declared_collective_bytes(plain.graph, CollectiveKind::reduce_scatter) ==
              test::declared_collective_bytes(b.graph, CollectiveKind::reduce_scatter));
        // The parameters take what a 16-bit run's do (the FP8 weight and its transpose in the 16-bit
        // weight's two bytes): no FP8 copies beside them.
        CHECK(parameter_bytes(b) == parameter_bytes(bf16));
        CHECK(parameter_bytes(plain) > parameter_bytes(b));
        // Rank 0's forward at micro-batch 0 builds each FP8 weight's transpose (a byte read, a byte
        // written) instead of casting the 16-bit weight; after the step it casts its shard, fp32 to
        // 16 bits (6 bytes) then to FP8 (3), and all-reduces one amax per FP8 weight tensor (4 per
        // layer) over the group.
        std::int64_t transposed = 0, cast = 0, quantized = 0, amax = 0, amaxes = 0;
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.rank != 0) continue;
            if (op.kind == OpKind::collective && op.phase == Phase::opt) {
                const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
                if (col.kind == CollectiveKind::all_reduce) amax += col.bytes, ++amaxes;
            }
            if (op.kind != OpKind::compute) continue;
            for (const Kernel& k : b.graph.kernels_of(id)) {
                if (k.name == KernelName::quantize && op.phase == Phase::fwd && weight_cast(b, id)) transposed += k.bytes;
                if (k.name == KernelName::quantize && op.phase == Phase::opt) quantized += k.bytes;
                if (k.name == KernelName::cast && op.phase == Phase::opt) cast += k.bytes;
            }
        }
        const std::int64_t rank0_fp8 = fp8_weights / pp, shard = (rank0_fp8 + 1) / 2;
        CHECK(transposed == 2 * rank0_fp8);
        CHECK(cast == 6 * shard);
        CHECK(quantized == 3 * shard);
        CHECK(amaxes == 1);
        CHECK(amax == 4 * (4 * 24 / pp));
    }
}

TEST_CASE("FP8 parameters (--fp8-param-gather) fit what the 16-bit copies did not and their halved gathers shorten an exposed step",
          "[strategies][fp8]") {
    // Llama 3 8B at 8,192 tokens, zero1 on two DGX H100s, FP8 tensorwise.
    const Model llama = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("dgx-h100").with_nodes(2);
    Plan p = fp8_plan(Fp8Recipe::tensorwise);
    p.strategy = DataParallel::zero1;
    p.seq = 8192;
    p.global_batch = 64;
    Plan gathered = p;
    gathered.fp8_param_gather = true;
    // tp 1: 8 B parameters' FP8 copies (2 bytes each) are what takes it past 80 GB.
    const auto one = tools::simulate_plan(llama, c, p), one_gathered = tools::simulate_plan(llama, c, gathered);
    CHECK_FALSE(one.summary.fits());
    CHECK(one_gathered.summary.fits());
    // tp 2: the gathers after the step cross the nodes; at a byte per FP8 weight they end sooner.
    p.tp = gathered.tp = 2;
    const double before = tools::simulate_plan(llama, c, p).summary.iteration.to_seconds();
    const double after = tools::simulate_plan(llama, c, gathered).summary.iteration.to_seconds();
    CHECK(after < before);
}

TEST_CASE("FP8 parameters (--fp8-param-gather) say why where Megatron refuses them or where they are not modelled",
          "[strategies][fp8][plan]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan p = fp8_plan();
    p.strategy = DataParallel::zero1;
    p.fp8_param_gather = true;
    CHECK(resolve(m, c, p).fp8_param_gather);
    SECTION("without FP8") {
        p.fp8 = Fp8Recipe::none;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("has no effect without --fp8"));
    }
    SECTION("before core 0.9") {
        p.framework = "megatron@0.8";
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("megatron@0.8 has no --fp8-param-gather"));
    }
    SECTION("without the distributed optimizer") {
        p.strategy = DataParallel::ddp;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("only supported with distributed optimizer") && Catch::Contains("not ddp"));
    }
    SECTION("Megatron-FSDP: accepted, but not yet with context parallelism") {
        p.strategy = DataParallel::fsdp;
        CHECK(resolve(m, c, p).fp8_param_gather);
        p.cp = 2;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("Megatron-FSDP under context parallelism") &&
                                                Catch::Contains("not modelled yet"));
    }
    SECTION("the optimizer on the host") {
        p.offload = Offload::cpu;
        CHECK_THROWS_WITH(resolve(m, c, p), Catch::Contains("optimizer on the host is not modelled"));
    }
}

TEST_CASE("FP8 parameters (--fp8-param-gather) under Megatron-FSDP: every gather at a byte and a transpose before each backward",
          "[strategies][fp8]") {
    const Model gpt = model_preset("gpt2-medium");
    const std::int64_t fp8_weights = 24 * 12 * std::int64_t{1024} * 1024;   // QKV, projection, MLP: 12h² a layer
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(2);
    Plan p = fp8_plan();
    p.strategy = DataParallel::fsdp;
    p.global_batch = 8;
    Plan kept = p;
    p.fp8_param_gather = true;
    const Built b = build(gpt, c, p), plain = build(gpt, c, kept);
    const std::int64_t mbs = b.layout.microbatches;
    REQUIRE(mbs > 1);
    // Each layer is gathered before its forward and again before its backward, every micro-batch:
    // a byte saved per FP8 weight each time. The gradients are reduce-scattered as before.
    CHECK(test::declared_collective_bytes(plain.graph, CollectiveKind::all_gather) -
              test::declared_collective_bytes(b.graph, CollectiveKind::all_gather) == fp8_weights * 2 * mbs);
    CHECK(test::declared_collective_bytes(plain.graph, CollectiveKind::reduce_scatter) ==
              test::declared_collective_bytes(b.graph, CollectiveKind::reduce_scatter));
    // Rank 0 holds its shard of the FP8 weights at a byte, and no FP8 copies of the whole model.
    const std::int64_t shard = (fp8_weights + 1) / 2;
    CHECK(parameter_bytes(plain) - parameter_bytes(b) == 2 * fp8_weights + shard);
    // Megatron-FSDP builds the transposes before each layer's backward alone, a byte read and one
    // written per FP8 weight; nothing is cast in the forward. After the step the shard is cast
    // (fp32 → 16 bits → FP8: 6 + 3 bytes) and one amax per weight tensor all-reduced.
    std::int64_t fwd_casts = 0, transposes = 0, transposed = 0, cast = 0, quantized = 0, amax = 0;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != 0) continue;
        if (op.kind == OpKind::collective && op.phase == Phase::opt) {
            const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
            if (col.kind == CollectiveKind::all_reduce) amax += col.bytes;
        }
        if (op.kind != OpKind::compute) continue;
        if (weight_cast(b, id) && op.phase == Phase::fwd) ++fwd_casts;
        if (weight_cast(b, id) && op.phase == Phase::bwd) {
            ++transposes;
            for (const Kernel& k : b.graph.kernels_of(id)) transposed += k.bytes;
        }
        if (op.phase == Phase::opt)
            for (const Kernel& k : b.graph.kernels_of(id)) {
                if (k.name == KernelName::cast) cast += k.bytes;
                if (k.name == KernelName::quantize) quantized += k.bytes;
            }
    }
    CHECK(fwd_casts == 0);
    CHECK(transposes == 24 * mbs);
    CHECK(transposed == 2 * fp8_weights * mbs);
    CHECK(cast == 6 * shard);
    CHECK(quantized == 3 * shard);
    CHECK(amax == 4 * 4 * 24);
}
