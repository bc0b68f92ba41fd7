// LoRA and QLoRA against Hu et al. 2021 and Dettmers et al. 2023: adapter parameters r·(k + n)
// per adapted linear layer (counted by hand from Llama 3 8B's modules), optimizer state and
// gradients for the adapters only, frozen weights in bf16 or 4.127-bit NF4, backward without the
// frozen weights' gradients, and what fits on four RTX 4090s.
#include <catch2/catch.hpp>

#include <cmath>

#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/finetune.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

std::int64_t held(const OpGraph& g, int rank, Tier tier, BufferLabel label) {
    std::int64_t n = 0;
    for (const Buffer& b : g.buffers())
        if (b.rank == rank && b.tier == tier && static_cast<BufferLabel>(b.label) == label) n += b.bytes;
    return n;
}

Plan lora(int rank, FineTuneKind kind = FineTuneKind::lora) {
    Plan p;
    p.strategy = DataParallel::ddp;
    p.finetune = parse_finetune((kind == FineTuneKind::lora ? "lora:" : "qlora:") + std::to_string(rank));
    p.recompute = Recompute::full;
    p.seq = 2048;
    return p;
}

/// Llama 3 8B's adapted modules, by hand (Hugging Face LlamaDecoderLayer): q_proj 4096→4096,
/// k_proj and v_proj 4096→1024, o_proj 4096→4096, gate_proj and up_proj 4096→14336,
/// down_proj 14336→4096; LoRA adds r·(in + out) each.
std::int64_t llama3_8b_adapters(std::int64_t r) {
    const std::int64_t h = 4096, kv = 1024, f = 14336;
    return 32 * r * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + f) + (f + h));
}

/// The frozen weights of `p`'s fine-tuning as DDP holds them whole on a rank (its parameter
/// buffers less the adapters' 2 bytes each; the QLoRA test counts them by hand).
double frozen_bytes(const Model& m, const topo::Cluster& c, Plan p, double adapters) {
    p.strategy = DataParallel::ddp;
    p.offload = Offload::none;
    return static_cast<double>(held(build(m, c, p).graph, 0, Tier::device, BufferLabel::parameters)) - 2 * adapters;
}

}  // namespace

TEST_CASE("LoRA's optimizer state and gradients scale with the adapters only", "[strategies][finetune]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    for (const int r : {8, 16, 64}) {
        const Built b = build(m, c, lora(r));
        const double adapters = static_cast<double>(llama3_8b_adapters(r));
        INFO("rank " << r);
        // Mixed-precision Adam over the adapters: 12 bytes each of state, 2 of gradient.
        CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::optimizer_state)) == Approx(12 * adapters).epsilon(1e-9));
        CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::gradients)) == Approx(2 * adapters).epsilon(1e-9));
        // The frozen weights stay, in bf16; the adapters are added in bf16.
        CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::parameters)) ==
              Approx(2.0 * static_cast<double>(m.parameters()) + 2 * adapters).epsilon(1e-9));
    }
    SECTION("fewer targets, fewer adapters") {
        Plan p = lora(16);
        p.finetune = parse_finetune("lora:16:qkv");
        const Built b = build(m, c, p);
        const std::int64_t qkv = 32 * 16 * ((4096 + 4096) + 2 * (4096 + 1024));
        CHECK(held(b.graph, 0, Tier::device, BufferLabel::optimizer_state) == 12 * qkv);
    }
}

TEST_CASE("QLoRA keeps the blocks' linear weights in 4-bit NF4 and dequantises them at every use", "[strategies][finetune]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    const Built b = build(m, c, lora(64, FineTuneKind::qlora));
    // Per layer: 4096·(4096 + 1024 + 1024 + 4096) + 3·4096·14336 linear weights in NF4 with double
    // quantisation (4 + 8/64 + 32/(64·256) bits), norms (2 × 4096) in bf16; the embedding and
    // the untied head (128256 × 4096 each) and the final norm in bf16; adapters in bf16.
    const double linear = 32.0 * (4096.0 * (4096 + 1024 + 1024 + 4096) + 3.0 * 4096 * 14336);
    const double bf16 = 32.0 * 2 * 4096 + 2.0 * 128256 * 4096 + 4096;
    const double nf4 = (4 + 8.0 / 64 + 32.0 / (64 * 256)) / 8;
    CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::parameters)) ==
          Approx(linear * nf4 + 2 * bf16 + 2.0 * static_cast<double>(llama3_8b_adapters(64))).epsilon(1e-6));
    // A layer's forward dequantises each of its weights (read 4-bit, write bf16); its backward
    // dequantises them again for the data gradients and has no weight gradient of a frozen weight
    // (a weight GEMM both of whose sides exceed the adapter rank).
    const std::int64_t down = 14336ll * 4096;
    const auto dequant = static_cast<std::int64_t>(std::ceil(static_cast<double>(down) * nf4)) + 2 * down;
    int fwd_dequant = 0, bwd_dequant = 0, frozen_weight_grads = 0;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.kind != OpKind::compute || op.rank != 0 || op.layer != 5 || op.microbatch != 0) continue;
        for (const Kernel& k : b.graph.kernels_of(id)) {
            const bool d = k.op == KernelOp::stream && k.name == KernelName::mlp_down && k.bytes == dequant;
            if (op.phase == Phase::fwd && d) ++fwd_dequant;
            if (op.phase == Phase::bwd && d) ++bwd_dequant;
            if (op.phase == Phase::bwd && k.op == KernelOp::gemm && k.weight && std::min(k.m, k.n) > 64) ++frozen_weight_grads;
        }
    }
    CHECK(fwd_dequant == 1);
    CHECK(bwd_dequant == 1);
    CHECK(frozen_weight_grads == 0);
}

TEST_CASE("LoRA on a mixture of experts adapts every expert's projections, each on its own tokens", "[strategies][finetune]") {
    // Qwen3-30B-A3B (its config.json): 48 layers, hidden 2048, 32 query heads and 4 key-value
    // heads of width 128 (not hidden / heads), 128 experts of width 768, 8 a token, untied
    // vocabulary of 151,936, q and k norms. PEFT wraps q_proj 2048→4096, k_proj and v_proj
    // 2048→512, o_proj 4096→2048, and every expert's gate_proj and up_proj 2048→768 and down_proj
    // 768→2048; the router (2048→128) stays frozen.
    const Model m = load_model(std::string(SMOL_TEST_DATA) + "/hf/Qwen3-30B-A3B.json");
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(1);
    const std::int64_t r = 16, h = 2048, q = 4096, kv = 512, fe = 768, E = 128, K = 8, s = 2048;
    const std::int64_t attention = r * ((h + q) + 2 * (h + kv) + (q + h)), expert = r * 3 * (h + fe);
    const std::int64_t adapters = 48 * (attention + E * expert);
    REQUIRE(adapters == 843'841'536);
    Plan p = lora(16);
    p.seq = static_cast<int>(s);
    const Built b = build(m, c, p);
    CHECK(held(b.graph, 0, Tier::device, BufferLabel::optimizer_state) == 12 * adapters);
    CHECK(held(b.graph, 0, Tier::device, BufferLabel::gradients) == 2 * adapters);
    CHECK(held(b.graph, 0, Tier::device, BufferLabel::parameters) == 2 * (m.parameters() + adapters));
    // A layer's forward adds 2·tokens·r·(in + out) FLOPs an adapter: the attention's on the
    // sequence's tokens, each expert's on the tokens routed to it (s·K/E of them, balanced).
    Plan full = p;
    full.finetune = parse_finetune("full");
    auto fwd_flops = [&](const Plan& plan) {
        const Built built = build(m, c, plan);
        double f = 0;
        for (const Op& op : built.graph.ops())
            if (op.kind == OpKind::compute && op.rank == 0 && op.phase == Phase::fwd && op.layer == 7 && op.microbatch == 0) f += op.flops;
        return f;
    };
    const double extra = 2.0 * static_cast<double>(s * attention + (s * K / E) * E * expert);
    CHECK(fwd_flops(p) - fwd_flops(full) == Approx(extra).epsilon(1e-9));
    SECTION("the router target adapts each layer's router, 2048→128, too") {
        const std::int64_t routers = 48 * r * (h + E);
        for (const auto& [spec, want] : {std::pair{"lora:16:router", routers},
                                          {"lora:16:qkv,attn_proj,mlp_up,mlp_down,router", adapters + routers}}) {
            CAPTURE(spec);
            Plan q = p;
            q.finetune = parse_finetune(spec);
            CHECK(held(build(m, c, q).graph, 0, Tier::device, BufferLabel::optimizer_state) == 12 * want);
        }
        Plan dense = lora(16);
        dense.finetune = parse_finetune("lora:16:router");
        CHECK_THAT(test::bad_input_message([&] { (void)build(model_preset("llama3-8b"), c, dense); }),
                   Catch::Contains("the router target adapts a mixture of experts' routers, and llama3-8b has none"));
    }
    SECTION("QLoRA stores every expert's weights in NF4") {
        // Per layer in NF4: the attention's 2048·(4096 + 512 + 512) + 4096·2048, the router's
        // 2048·128 and 128 experts' 3·2048·768; in bf16: two norms of 2048 and the q and k norms
        // of 128; the embedding, the head and the final norm in bf16; the adapters in bf16.
        const double nf4 = (4 + 8.0 / 64 + 32.0 / (64 * 256)) / 8;
        const double linear = 48.0 * (2048.0 * (4096 + 512 + 512) + 4096.0 * 2048 + 2048.0 * 128 + 128.0 * 3 * 2048 * 768);
        const double bf16 = 48.0 * (2 * 2048 + 2 * 128) + 2.0 * 151936 * 2048 + 2048;
        REQUIRE(linear + bf16 == Approx(static_cast<double>(m.parameters())).epsilon(1e-12));
        p.finetune = parse_finetune("qlora:16");
        CHECK(static_cast<double>(held(build(m, c, p).graph, 0, Tier::device, BufferLabel::parameters)) ==
              Approx(linear * nf4 + 2 * bf16 + 2.0 * static_cast<double>(adapters)).epsilon(1e-6));
    }
}

TEST_CASE("LoRA's backward computes the frozen weights' input gradients only", "[strategies][finetune]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(1);
    Plan full;
    Plan adapted;
    adapted.finetune = parse_finetune("lora:8");
    auto bwd_flops = [&](const Plan& p) {
        const Built b = build(m, c, p);
        double f = 0;
        for (const Op& op : b.graph.ops())
            if (op.kind == OpKind::compute && op.phase == Phase::bwd && op.layer == 3) f += op.flops;
        return f;
    };
    // A linear layer's backward is its data and weight gradients (2 × 2mnk); frozen, it is the
    // data gradient alone: the weight gradients' FLOPs, the layer's forward GEMM FLOPs (24·s·h²
    // for GPT-2, Narayanan et al. 2021), are saved; the adapters' backward (both gradients, twice
    // their forward 2·s·r·(k + n) over c_attn 768→2304, c_proj 768→768, c_fc 768→3072, c_proj
    // 3072→768) is added.
    const double s = 1024, h = 768, r = 8, gemm = 24 * s * h * h;
    const double adapters = 2 * (2 * s * r * ((768 + 2304) + (768 + 768) + (768 + 3072) + (3072 + 768)));
    CHECK(bwd_flops(full) - bwd_flops(adapted) == Approx(gemm - adapters).epsilon(1e-6));
}

TEST_CASE("LoRA's frozen head still runs the loss's own backward before its data gradient", "[strategies][finetune]") {
    // GPT-2 small under PyTorch: F.cross_entropy's backward zeroes the fp32 gradient (4 bytes a
    // logit) and log_softmax's backward moves 16, then the cast back to bf16 moves 6 — 26 bytes
    // a logit before the frozen logits GEMM's data gradient (about 2 more). Without the loss's
    // backward the op would move about 8.
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(1);
    Plan adapted;
    adapted.finetune = parse_finetune("lora:8");
    const Built b = build(m, c, adapted);
    const std::int32_t head = 13;   // embedding 0, layers 1–12
    std::int64_t bytes = 0;
    for (const Op& op : b.graph.ops())
        if (op.kind == OpKind::compute && op.phase == Phase::bwd && op.layer == head) bytes += op.bytes;
    const double logits = 1024.0 * 50257;
    CHECK(static_cast<double>(bytes) >= 26 * logits);
    CHECK(static_cast<double>(bytes) < 30 * logits);
}

TEST_CASE("Llama 3 8B on four RTX 4090s: LoRA fits, full fine-tuning only with zero3 and CPU offload", "[strategies][finetune]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    sim::SimOptions o;
    o.network = sim::NetworkMode::analytic;
    o.record_memory = false;
    CHECK(test::dp_run(m, c, lora(16), o).summary.fits());
    CHECK(test::dp_run(m, c, lora(64, FineTuneKind::qlora), o).summary.fits());
    Plan z3 = lora(16);
    z3.finetune = FineTune{};
    z3.strategy = DataParallel::zero3;
    const test::DpRun plain = test::dp_run(m, c, z3, o);
    CHECK_FALSE(plain.summary.fits());
    REQUIRE(plain.summary.oom_report);
    CHECK(plain.summary.oom_report->label == "optimizer_state");   // 12 bytes × 8 B / 4 = 24 GB of 24 GiB
    z3.offload = Offload::cpu;
    CHECK(test::dp_run(m, c, z3, o).summary.fits());
}

TEST_CASE("fine-tuning plans that cannot run are refused with the reason", "[strategies][finetune]") {
    SECTION("LoRA on a layer list") {
        Plan p;
        p.finetune = parse_finetune("lora:8");
        CHECK_THAT(test::bad_input_message([&] { resolve(model_preset("resnet50"), topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("resnet50 is a layer list"));
    }
    SECTION("a rank that is not a number") {
        CHECK_THAT(test::bad_input_message([] { parse_finetune("lora:x"); }), Catch::Contains("adapter rank"));
    }
    SECTION("no rank") {
        CHECK_THAT(test::bad_input_message([] { parse_finetune("qlora"); }), Catch::Contains("the rank is required"));
    }
    SECTION("an unknown target") {
        CHECK_THAT(test::bad_input_message([] { parse_finetune("lora:8:qkv,mlp_upp"); }),
                   Catch::Contains("did you mean 'mlp_up'?"));
    }
    SECTION("an unknown kind") {
        CHECK_THAT(test::bad_input_message([] { parse_finetune("lorra:8"); }), Catch::Contains("did you mean 'lora'?"));
    }
    SECTION("LoRA with sharded parameters") {
        Plan p;
        p.strategy = DataParallel::zero3;
        p.finetune = parse_finetune("lora:8");
        CHECK_THAT(test::bad_input_message([&] { resolve(model_preset("gpt2-small"), topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("not with zero3"));
    }
}

TEST_CASE("FSDP with LoRA and QLoRA shards the frozen weights, gathers them with the adapters, reduces the adapters only",
          "[strategies][finetune][fsdp]") {
    // Answer.AI's FSDP + QLoRA, PyTorch FSDP2: every unit's frozen weights (bf16, or NF4 for
    // QLoRA's block linears) are sharded over the 4 ranks with its adapters and gathered whole
    // before its forward and backward; only the adapters have gradients, so only they are
    // reduce-scattered and stepped. Llama 3 8B on four RTX 4090s, one micro-batch per rank.
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    const FineTuneKind kind = GENERATE(FineTuneKind::lora, FineTuneKind::qlora);
    Plan p = lora(16, kind);
    p.strategy = DataParallel::fsdp;
    p.global_batch = 4;
    sim::SimOptions o;
    o.network = sim::NetworkMode::analytic;
    const test::DpRun r = test::dp_run(m, c, p, o);
    const Built& b = r.built;
    INFO(to_string(p.finetune));
    const double adapters = static_cast<double>(llama3_8b_adapters(16));
    const double frozen = frozen_bytes(m, c, p, adapters);
    // Model states: a quarter of the frozen weights and of the adapters' 2 + 2 + 12 bytes.
    CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::parameters)) == Approx((frozen + 2 * adapters) / 4).epsilon(1e-4));
    CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::optimizer_state)) == Approx(12 * adapters / 4).epsilon(1e-4));
    CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::gradients)) == Approx(2 * adapters / 4).epsilon(1e-4));
    double gathered = 0, reduced = 0;
    int reduce_scatters = 0;
    for (const Op& op : b.graph.ops()) {
        if (op.rank != 0 || op.kind != OpKind::collective) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        if (col.kind == CollectiveKind::all_gather) gathered += static_cast<double>(col.bytes);
        if (col.kind == CollectiveKind::reduce_scatter) {
            reduced += static_cast<double>(col.bytes);
            ++reduce_scatters;
        }
    }
    // Gathered: every unit before its forward, the 32 layers again before backward (the root's
    // embedding and head stay gathered): everything once, plus the layers' share again.
    const double embedding_head = 2.0 * 2 * 128256 * 4096 + 2 * 4096;   // bf16 tables and the final norm
    CHECK(gathered == Approx(2 * (frozen + 2 * adapters) - embedding_head).epsilon(1e-4));
    // Reduced: the 32 layers' adapter gradients (bf16), nothing of the frozen embedding and head.
    CHECK(reduce_scatters == 32);
    CHECK(reduced == Approx(2 * adapters).epsilon(1e-9));
    CHECK(r.summary.fits());
}

TEST_CASE("FSDP's CPU offload with LoRA and QLoRA keeps the frozen shards on the host and copies them in at every gather",
          "[strategies][finetune][fsdp][offload]") {
    // CPUOffload(offload_params=True), as Answer.AI's fsdp_qlora (--use_cpu_offload) and
    // ms-swift's 2 × 24 GB Llama 2 70B QLoRA example run it: every flat parameter's shard lives
    // in pinned host memory — the frozen weights' in their storage dtype, the adapters' in fp32
    // with their gradients and optimizer state — and each unshard copies the shard to the device
    // (the adapters' cast to bf16 there) before the all-gather. Only the adapters' gradient
    // shards go back. Llama 3 8B on four RTX 4090s.
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    const FineTuneKind kind = GENERATE(FineTuneKind::lora, FineTuneKind::qlora);
    Plan p = lora(16, kind);
    p.strategy = DataParallel::fsdp;
    p.offload = Offload::cpu;
    p.global_batch = 4;
    INFO(to_string(p.finetune));
    sim::SimOptions o;
    o.network = sim::NetworkMode::analytic;
    const test::DpRun r = test::dp_run(m, c, p, o);
    const Built& b = r.built;
    const double adapters = static_cast<double>(llama3_8b_adapters(16));
    const double frozen = frozen_bytes(m, c, p, adapters);
    // Nothing of the model states stays on the device.
    for (const BufferLabel l : {BufferLabel::parameters, BufferLabel::gradients, BufferLabel::optimizer_state})
        CHECK(held(b.graph, 0, Tier::device, l) == 0);
    // On the host, a quarter of: the frozen weights, and the adapters' fp32 weights, fp32
    // gradients and Adam's two fp32 moments.
    CHECK(static_cast<double>(held(b.graph, 0, Tier::host, BufferLabel::parameters)) == Approx((frozen + 4 * adapters) / 4).epsilon(1e-4));
    CHECK(static_cast<double>(held(b.graph, 0, Tier::host, BufferLabel::gradients)) == Approx(4 * adapters / 4).epsilon(1e-4));
    CHECK(static_cast<double>(held(b.graph, 0, Tier::host, BufferLabel::optimizer_state)) == Approx(8 * adapters / 4).epsilon(1e-4));
    double copied_in = 0, copied_out = 0, gathered = 0;
    for (const Op& op : b.graph.ops()) {
        if (op.rank != 0) continue;
        if (op.kind == OpKind::copy && op.copy_from() == Tier::host && op.copy_to() == Tier::device) copied_in += static_cast<double>(op.bytes);
        if (op.kind == OpKind::copy && op.copy_from() == Tier::device && op.copy_to() == Tier::host) copied_out += static_cast<double>(op.bytes);
        if (op.kind == OpKind::collective &&
            b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_gather)
            gathered += static_cast<double>(b.graph.collectives()[static_cast<std::size_t>(op.ref)].bytes);
    }
    // Every unit's shard comes in before its forward gather, the 32 layers' again before their
    // backward gather (the root's embedding and head stay gathered after forward).
    const double embedding_head = 2.0 * 2 * 128256 * 4096 + 2 * 4096;
    CHECK(copied_in == Approx((2 * (frozen + 4 * adapters) - embedding_head) / 4).epsilon(1e-4));
    CHECK(gathered == Approx(2 * (frozen + 2 * adapters) - embedding_head).epsilon(1e-4));
    // Out: the adapters' reduced gradient shards alone, in fp32.
    CHECK(copied_out == Approx(4 * adapters / 4).epsilon(1e-4));
    CHECK(r.summary.fits());
}

TEST_CASE("LoRA's model FLOPs leave out the frozen weights' gradients and add the adapters'", "[strategies][finetune]") {
    // Full training: 3 × forward (Narayanan et al. eq. 3). LoRA computes no gradient of a frozen
    // weight: minus 2·T FLOPs per frozen GEMM weight (the 32 layers' linears and the untied head;
    // the embedding is a lookup), plus the adapters' 6·T per parameter (forward, and both
    // gradients). T tokens per step: global batch 8 × 2,048.
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    Plan p = lora(16);
    p.recompute = Recompute::none;
    p.global_batch = 8;
    const double tokens = 8.0 * 2048;
    const double weights = 32.0 * (4096.0 * (4096 + 1024 + 1024 + 4096) + 3.0 * 4096 * 14336) + 128256.0 * 4096;
    const double full = m.flops_per_iteration(8, 2048, Recompute::none).count();
    const double expected = full - 2 * tokens * weights + 6 * tokens * static_cast<double>(llama3_8b_adapters(16));
    CHECK(build(m, c, p).model_flops.count() == Approx(expected).epsilon(1e-3));
    // The model's FLOPs, whatever the plan splits them over.
    Plan split = p;
    split.tp = 2;
    CHECK(build(m, c, split).model_flops.count() == Approx(expected).epsilon(1e-3));
    // Full fine-tuning keeps the formula.
    p.finetune = FineTune{};
    CHECK(build(m, c, p).model_flops.count() == Approx(full).epsilon(1e-12));
}

TEST_CASE("LoRA under tensor parallelism splits each adapter as PEFT's LoraParallelLinear and all-reduces its rank-r activations",
          "[strategies][finetune]") {
    // Llama 3 8B, tp 2 · dp 2 on the four RTX 4090s, one sample of 2,048 tokens per replica.
    // PEFT (peft/tuners/lora/tp_layer.py): on a column-parallel linear (q, k, v, gate, up) A is
    // whole and B split by outputs; on a row-parallel one (o, down) A split by inputs and B whole.
    // Per rank and layer at rank 16: 16 · [(4096 + 2048) + 2 · (4096 + 512) + (2048 + 4096) +
    // 2 · (4096 + 7168) + (7168 + 4096)] = 884,736 adapter parameters.
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("workstation-4gpu");
    Plan p = lora(16);
    p.recompute = Recompute::none;
    p.tp = 2;
    p.global_batch = 2;
    const test::DpRun r = test::dp_run(m, c, p);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 2);
    const double adapters = 32.0 * 884736;
    // Mixed-precision Adam's 12 bytes over the rank's adapters only; the frozen weights its
    // tensor slice of the model (full training's parameters of one tensor rank), in bf16.
    double slice = 0;
    for (const Block& b : strategies::detail::replica_blocks(m, l, p)) slice += static_cast<double>(b.params);
    CHECK(static_cast<double>(held(r.built.graph, 0, Tier::device, BufferLabel::optimizer_state)) == Approx(12 * adapters));
    CHECK(static_cast<double>(held(r.built.graph, 0, Tier::device, BufferLabel::parameters)) == Approx(2 * slice + 2 * adapters));
    // Layer 5 of micro-batch 0 on rank 0: Megatron's two all-reduces each way, and the adapters'
    // 2048 × 16 bf16 all-reduces: o's and down's A outputs forward, the five column-parallel
    // B input gradients backward.
    std::map<Phase, std::map<std::int64_t, int>> by_size;
    for (const Op& op : r.built.graph.ops()) {
        if (op.rank != 0 || op.kind != OpKind::collective || op.layer != 5 || op.microbatch != 0) continue;
        const Collective& col = r.built.graph.collectives()[static_cast<std::size_t>(op.ref)];
        CHECK(col.kind == CollectiveKind::all_reduce);
        ++by_size[op.phase][col.bytes];
    }
    const std::int64_t rank_r = 2048 * 16 * 2, hidden = 2048ll * 4096 * 2;
    CHECK(by_size[Phase::fwd][hidden] == 2);
    CHECK(by_size[Phase::fwd][rank_r] == 2);
    CHECK(by_size[Phase::bwd][hidden] == 2);
    CHECK(by_size[Phase::bwd][rank_r] == 5);
    // The data-parallel all-reduce carries the adapters' gradients alone, over each tensor rank's replicas.
    const test::RankCollectives rc = test::rank_collectives(r.built.graph, l, 0, 0);
    CHECK(rc.dp_groups_one_tensor_rank);
    CHECK(rc.dp_bytes_sent == Approx(2 * adapters / 2).epsilon(1e-9));   // one all-reduce of 2 members: half of the bytes
}

TEST_CASE("LoRA under pipeline stages holds each stage's frozen weights and a frozen copy of a tied table", "[strategies][finetune]") {
    // GPT-2 medium on one DGX A100, pp 2 · dp 4: its tied table's copy on the last stage is
    // frozen too, so no all-reduce sums it between the stages.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = lora(8);
    p.pp = 2;
    p.seq = 1024;
    p.global_batch = 8;
    const test::DpRun r = test::dp_run(m, c, p);
    const Layout& l = r.built.layout;
    REQUIRE(l.dp == 4);
    std::int64_t tied_sums = 0;
    for (const Op& op : r.built.graph.ops()) {
        if (op.kind != OpKind::collective) continue;
        const Collective& col = r.built.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const auto& members = r.built.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        tied_sums += members.size() == 2 && l.rank(0, 0, 0) == members[0] && l.rank(0, 0, 1) == members[1];
    }
    CHECK(tied_sums == 0);
    // Frozen: the model's weights once over the two stages, and the table again on the last,
    // its 50,257 rows padded to 50,304 (Megatron's 128 × tp 1).
    const double table = 50304.0 * 1024, padding = (50304.0 - 50257.0) * 1024, adapters = 24.0 * 8 * ((1024 + 3072) + (1024 + 1024) + (1024 + 4096) + (4096 + 1024));
    const double first = static_cast<double>(held(r.built.graph, l.rank(0, 0, 0), Tier::device, BufferLabel::parameters));
    const double last = static_cast<double>(held(r.built.graph, l.rank(0, 0, 1), Tier::device, BufferLabel::parameters));
    CHECK(first + last == Approx(2.0 * (static_cast<double>(m.parameters()) + padding + table) + 2 * adapters).epsilon(1e-9));
}

TEST_CASE("fine-tuning with model parallelism refuses what it does not model", "[strategies][finetune][plan]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto message = [&](Plan p) { return test::bad_input_message([&] { (void)build(m, c, p); }); };
    Plan p = lora(16);
    p.tp = 2;
    SECTION("QLoRA") {
        p.finetune = parse_finetune("qlora:16");
        CHECK_THAT(message(p), Catch::Contains("bitsandbytes' Linear4bit"));
    }
    SECTION("sequence parallelism") {
        p.sequence_parallel = true;
        CHECK_THAT(message(p), Catch::Contains("leave out --sp"));
    }
    SECTION("fsdp") {
        p.strategy = DataParallel::fsdp;
        CHECK_THAT(message(p), Catch::Contains("with ddp and zero1"));
    }
    SECTION("zero1 on DeepSpeed's engine") {
        p.strategy = DataParallel::zero1;
        p.framework = "megatron-deepspeed";
        CHECK_THAT(message(p), Catch::Contains("--framework megatron"));
    }
    SECTION("expert parallelism: fsdp, QLoRA, and a mixture of experts with tensor parallelism") {
        const Model moe = load_model(std::string(SMOL_TEST_DATA) + "/hf/Qwen3-30B-A3B.json");
        auto refused = [&](Plan q) { return test::bad_input_message([&] { (void)build(moe, topo::cluster_preset("workstation-4gpu"), q); }); };
        Plan q = lora(16);
        q.ep = 4;
        q.global_batch = 8;
        q.strategy = DataParallel::fsdp;
        CHECK_THAT(refused(q), Catch::Contains("with FSDP and expert parallelism is not modelled"));
        q.strategy = DataParallel::zero1;
        q.finetune = parse_finetune("qlora:16");
        CHECK_THAT(refused(q), Catch::Contains("expert-parallel layers are not"));
        q = lora(16);
        q.tp = 2;
        q.sequence_parallel = true;
        q.global_batch = 8;
        CHECK_THAT(refused(q), Catch::Contains("of a mixture of experts with tensor parallelism is not modelled"));
    }
}
