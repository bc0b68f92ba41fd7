// --recompute-modules through the plan: the plans Megatron core (or the model) would not run are
// refused with the reason, and a simulated step redoes what the modules hold — the MLP's
// tensor-parallel collective included — for less memory.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/json.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/plan.hpp"
#include "test_support.hpp"
#include "tools/simulation.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::strategies;
using Catch::Matchers::Contains;

namespace {

Model from_text(const std::string& text) { return test::model_from_text(text); }

/// Megatron's distributed optimizer on GPT-2 medium (24 layers), global batch 16, on one DGX A100:
/// the block-recompute tests' plan, with --recompute full --recompute-method block when `block`.
Plan megatron_zero1(bool block) {
    Plan p;
    p.framework = "megatron";
    p.strategy = DataParallel::zero1;
    p.global_batch = 16;
    if (block) {
        p.recompute = Recompute::full;
        p.recompute_method = RecomputeMethod::block;
    }
    return p;
}

/// Two layers, the first dense, the second MoE (8 experts, top 2).
Model small_moe() {
    return from_text(R"({"kind": "transformer", "name": "small-moe", "layers": 2, "hidden": 256, "heads": 4,
        "ffn_hidden": 1024, "vocab": 1000, "seq": 128, "gated_mlp": true, "biases": false, "norm": "rmsnorm",
        "positions": "rope", "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 512, "dense_layers": [0]}})");
}

Plan selective(const std::string& modules) {
    Plan p;
    p.strategy = DataParallel::zero1;
    p.framework = "megatron";
    p.recompute = Recompute::selective;
    p.recompute_modules = parse_recompute_modules(modules, {"", "", "--recompute-modules"});
    return p;
}

/// The collectives rank 0 runs in the recompute phase of `p`'s step, by kind.
std::map<CollectiveKind, int> recompute_collectives(const Model& m, const topo::Cluster& c, const Plan& p) {
    const Built b = build(m, c, p);
    std::map<CollectiveKind, int> n;
    for (const Op& op : b.graph.ops())
        if (op.rank == 0 && op.kind == OpKind::collective && op.phase == Phase::recompute)
            ++n[b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind];
    return n;
}

std::string refused(const Model& m, const Plan& p, const char* cluster = "dgx-a100") {
    return test::bad_input_message([&] { (void)resolve(m, topo::cluster_preset(cluster), p); });
}

}  // namespace

TEST_CASE("recompute modules: plans that cannot run are refused with the reason", "[strategies][recompute]") {
    const Model moe = small_moe();
    const Model dense = model_preset("gpt2-small");
    CHECK_NOTHROW(resolve(moe, topo::cluster_preset("dgx-a100"), selective("moe_act,layernorm")));
    SECTION("selective recompute only") {
        Plan p = selective("moe_act");
        p.recompute = Recompute::full;
        CHECK_THAT(refused(moe, p), Contains("needs --recompute selective, not full") && Contains("--recompute-modules"));
    }
    SECTION("Megatron core 0.12 and later; shared_experts from 0.14; the attention core alone elsewhere") {
        Plan p = selective("moe_act");
        p.framework = "megatron@0.11";
        CHECK_THAT(refused(moe, p), Contains("core 0.12 and later") && Contains("megatron@0.11 recomputes core_attn alone"));
        p.framework = "deepspeed";
        CHECK_THAT(refused(moe, p), Contains("deepspeed@0.16.2 recomputes core_attn alone"));
        const Model shared = from_text(R"({"kind": "transformer", "layers": 1, "hidden": 256, "heads": 4, "ffn_hidden": 1024,
            "vocab": 1000, "seq": 128, "gated_mlp": true, "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 512, "shared_experts": 1}})");
        Plan q = selective("shared_experts");
        CHECK_NOTHROW(resolve(shared, topo::cluster_preset("dgx-a100"), q));
        q.framework = "megatron@0.13";
        CHECK_THAT(refused(shared, q), Contains("shared_experts 0.14 and later") && Contains("megatron@0.13 recomputes core_attn,moe_act,layernorm,mla_up_proj,mlp,moe alone"));
        // The default, core_attn, is every framework's selective recompute.
        Plan d = selective("core_attn");
        d.framework = "pytorch";
        d.strategy = DataParallel::fsdp;
        CHECK_NOTHROW(resolve(dense, topo::cluster_preset("dgx-a100"), d));
    }
    SECTION("a module with nothing to redo in the model") {
        CHECK_THAT(refused(dense, selective("moe_act")), Contains("moe_act has nothing to recompute") && Contains("no MoE layers"));
        CHECK_THAT(refused(dense, selective("layernorm")), Contains("fuses each of its norms"));
        CHECK_THAT(refused(dense, selective("mla_up_proj")), Contains("only supported with multi_latent_attention"));
        CHECK_THAT(refused(moe, selective("shared_experts")), Contains("no shared experts"));
        const Model all_moe = from_text(R"({"kind": "transformer", "layers": 1, "hidden": 256, "heads": 4, "ffn_hidden": 1024,
            "vocab": 1000, "seq": 128, "gated_mlp": true, "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 512}})");
        CHECK_THAT(refused(all_moe, selective("mlp")), Contains("every layer is an MoE layer"));
    }
    SECTION("FP8's delayed scaling: Megatron core's own refusal") {
        Plan p = selective("moe_act");
        p.fp8 = Fp8Recipe::delayed;
        CHECK_THAT(refused(moe, p, "dgx-h100"), Contains("Delayed scaling does not support moe_act and layernorm recompute"));
        p.fp8 = Fp8Recipe::tensorwise;
        CHECK_NOTHROW(resolve(moe, topo::cluster_preset("dgx-h100"), p));
    }
    SECTION("not modelled: moe with LoRA") {
        Plan q = selective("moe");
        q.finetune = parse_finetune("lora:8");
        CHECK_THAT(refused(moe, q), Contains("moe with --finetune lora:8 is not modelled"));
        CHECK_THAT(refused(dense, selective("moe")), Contains("moe has nothing to recompute") && Contains("no MoE layers"));
    }
}

TEST_CASE("recompute modules: mlp at tp 2: the MLP and its all-reduce again in backward, for less memory", "[strategies][recompute]") {
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(2);
    auto plan = [](const std::string& modules) {
        Plan p = selective(modules);
        p.tp = 2;
        p.micro_batch = 2;
        p.global_batch = 8;
        return p;
    };
    // Tensor-parallel collectives of the recompute phase on rank 0: one per layer and micro-batch
    // (the MLP's row-parallel all-reduce), none for the attention core alone.
    const int layers = 12, microbatches = 4;
    CHECK(recompute_collectives(m, c, plan("core_attn")).empty());
    CHECK(recompute_collectives(m, c, plan("core_attn,mlp")) ==
          std::map<CollectiveKind, int>{{CollectiveKind::all_reduce, layers * microbatches}});
    const tools::Simulation attn = tools::simulate_plan(m, c, plan("core_attn"));
    const tools::Simulation mlp = tools::simulate_plan(m, c, plan("core_attn,mlp"));
    CHECK(mlp.summary.iteration > attn.summary.iteration);
    CHECK(mlp.summary.peak_memory < attn.summary.peak_memory);
}

TEST_CASE("recompute modules: moe at ep 2 repeats the MoE layer's two all-to-alls in backward", "[strategies][recompute]") {
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(2);
    auto plan = [](const std::string& modules) {
        Plan p = selective(modules);
        p.ep = 2;
        p.micro_batch = 1;
        p.global_batch = 6;   // three micro-batches per replica
        return p;
    };
    auto recompute_all_to_alls = [&](const Plan& p) { return recompute_collectives(m, c, p)[CollectiveKind::all_to_all]; };
    CHECK(recompute_all_to_alls(plan("moe_act,layernorm")) == 0);
    CHECK(recompute_all_to_alls(plan("moe")) == 2 * 3);   // dispatch and combine, one MoE layer, three micro-batches
    Plan full = plan("core_attn");
    full.recompute = Recompute::full;
    CHECK(recompute_all_to_alls(full) == 2 * 3);
    const tools::Simulation act = tools::simulate_plan(m, c, plan("moe_act,layernorm"));
    const tools::Simulation whole = tools::simulate_plan(m, c, plan("moe,layernorm"));
    CHECK(whole.summary.iteration > act.summary.iteration);
    CHECK(whole.summary.peak_memory < act.summary.peak_memory);
}

TEST_CASE("recompute modules under context parallelism: the ring's core again, the MLP after it", "[strategies][recompute][cp]") {
    const Model m = model_preset("llama3-8b");
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(2);
    auto plan = [](const std::string& modules) {
        Plan p = selective(modules);
        p.cp = 2;
        p.seq = 8192;
        p.micro_batch = 1;
        p.global_batch = 2;
        return p;
    };
    // On rank 0, layer 1 in the recompute phase of both micro-batches: the ring's sends (cp − 1
    // each with the core redone) and the kernels after it.
    auto recompute_ops = [&](const Plan& p) {
        const Built b = build(m, c, p);
        std::map<OpKind, int> n;
        for (const Op& op : b.graph.ops())
            if (op.rank == 0 && op.phase == Phase::recompute && op.layer == 1) ++n[op.kind];
        return n;
    };
    const auto core = recompute_ops(plan("core_attn")), both = recompute_ops(plan("core_attn,mlp")), mlp = recompute_ops(plan("mlp"));
    CHECK(core.at(OpKind::send) == 2);
    CHECK(both.at(OpKind::send) == 2);
    CHECK(both.at(OpKind::compute) > core.at(OpKind::compute));   // the MLP's segment after the ring
    CHECK(mlp.count(OpKind::send) == 0);                          // the MLP alone: no ring again
    CHECK(mlp.at(OpKind::compute) >= 1);
    const tools::Simulation a = tools::simulate_plan(m, c, plan("core_attn"));
    const tools::Simulation b = tools::simulate_plan(m, c, plan("core_attn,mlp"));
    CHECK(b.summary.iteration > a.summary.iteration);
    CHECK(b.summary.peak_memory < a.summary.peak_memory);
}

TEST_CASE("recompute modules: moe under context parallelism: the ring for the core, the all-to-alls for the experts", "[strategies][recompute][cp]") {
    const Model m = small_moe();
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(2);
    const int microbatches = 3;
    auto plan = [&](const std::string& modules) {
        Plan p = selective(modules);
        p.cp = 2;
        p.ep = 2;   // the experts spread over the two context-parallel ranks
        p.micro_batch = 1;
        p.global_batch = microbatches;
        return p;
    };
    // Rank 0's recompute phase: the ring's sends, the all-to-alls and the FLOPs redone.
    struct Redone {
        int sends = 0, all_to_alls = 0;
        double flops = 0;
    };
    auto redone = [&](const Plan& p) {
        const Built b = build(m, c, p);
        Redone r;
        for (const Op& op : b.graph.ops()) {
            if (op.rank != 0 || op.phase != Phase::recompute) continue;
            if (op.kind == OpKind::send) ++r.sends;
            if (op.kind == OpKind::collective &&
                b.graph.collectives()[static_cast<std::size_t>(op.ref)].kind == CollectiveKind::all_to_all)
                ++r.all_to_alls;
            if (op.kind == OpKind::compute) r.flops += op.flops;
        }
        return r;
    };
    const Redone core = redone(plan("core_attn")), moe = redone(plan("moe")), both = redone(plan("core_attn,moe"));
    // The ring again (cp − 1 = 1 send per layer and micro-batch) only with the core; the MoE
    // layer's dispatch and combine again only with moe.
    const int layers = 2;
    CHECK(core.sends == layers * microbatches);
    CHECK(core.all_to_alls == 0);
    CHECK(moe.sends == 0);
    CHECK(moe.all_to_alls == 2 * microbatches);
    CHECK(both.sends == layers * microbatches);
    CHECK(both.all_to_alls == 2 * microbatches);
    // The two modules share no kernel: together they redo what each redoes alone, nothing twice.
    CHECK(core.flops > 0);
    CHECK(moe.flops > 0);
    CHECK(both.flops == Approx(core.flops + moe.flops).epsilon(1e-12));
    const tools::Simulation a = tools::simulate_plan(m, c, plan("core_attn"));
    const tools::Simulation b = tools::simulate_plan(m, c, plan("core_attn,moe"));
    CHECK(b.summary.iteration > a.summary.iteration);
    CHECK(b.summary.peak_memory < a.summary.peak_memory);
}

TEST_CASE("recompute method block: the first N layers recompute in full, the others keep their activations",
          "[strategies][recompute]") {
    // Megatron's --recompute-method block --recompute-num-layers N (megatron/core/recompute.py
    // checkpointed_forward: "Checkpoint the input activation of only a set number of individual
    // layers and skip the rest"): a layer recomputes exactly as under full recompute,
    // or exactly as without.
    const Model m = model_preset("gpt2-medium");   // 24 layers
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const Plan p = megatron_zero1(false);
    const auto blocks = [&](const Plan& plan) { return strategies::detail::replica_blocks(m, resolve(m, c, plan), plan); };
    Plan none = p, full = p, block = p, uniform = p;
    full.recompute = block.recompute = uniform.recompute = Recompute::full;
    block.recompute_method = RecomputeMethod::block;
    block.recompute_num_layers = 5;
    uniform.recompute_method = RecomputeMethod::uniform;
    const std::vector<Block> b_none = blocks(none), b_full = blocks(full), b_block = blocks(block), b_uniform = blocks(uniform);
    REQUIRE(b_block.size() == b_full.size());
    int recomputed = 0;
    for (std::size_t i = 0; i < b_block.size(); ++i) {
        const Block& b = b_block[i];
        const Block& like = b.kind == Block::Kind::transformer && b.index <= 5 ? b_full[i] : b_none[i];
        CHECK(b.recompute == like.recompute);
        CHECK(b.activations == like.activations);
        CHECK(b_uniform[i].recompute == b_full[i].recompute);   // uniform in groups of one: --recompute full
        recomputed += b.recompute > Flops{} ? 1 : 0;
    }
    CHECK(recomputed == 5);
    // So a step sits between the two, in time and in memory.
    const auto run = [&](const Plan& plan) { return tools::simulate_plan(m, c, plan).summary; };
    const auto s_none = run(none), s_full = run(full), s_block = run(block);
    CHECK(s_none.iteration < s_block.iteration);
    CHECK(s_block.iteration < s_full.iteration);
    CHECK(s_full.peak_memory < s_block.peak_memory);
    CHECK(s_block.peak_memory < s_none.peak_memory);
}

TEST_CASE("recompute method: what Megatron refuses or smolcluster does not model says why", "[strategies][recompute][plan]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = megatron_zero1(true);
    SECTION("without full recompute") {
        p.recompute = Recompute::selective;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("give --recompute full, not selective"));
    }
    SECTION("a count without a method") {
        p.recompute_method.reset();
        p.recompute_num_layers = 4;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("needs --recompute-method"));
    }
    SECTION("uniform groups of more than one layer") {
        p.recompute_method = RecomputeMethod::uniform;
        p.recompute_num_layers = 2;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("a group of 2 keeps fewer checkpoints"));
    }
    SECTION("more layers than the model has") {
        p.recompute_num_layers = 25;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("between 0 and the layers of a pipeline chunk (24), found 25"));
    }
    SECTION("chunks cut by cost") {
        p.pp = 2;
        p.partition = Partition::balanced;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("give the chunks with --stage-layers"));
    }
    SECTION("more layers than a chunk holds") {
        p.pp = 2;
        p.schedule = Schedule::interleaved;
        p.virtual_stages = 2;
        p.recompute_num_layers = 7;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("the layers of a pipeline chunk (6), found 7"));
    }
    SECTION("PyTorch") {
        p.framework = "pytorch";
        p.strategy = DataParallel::ddp;
        CHECK_THROWS_WITH(resolve(m, c, p), Contains("is Megatron's"));
    }
    SECTION("an unknown method") { CHECK_THROWS_WITH(parse_recompute_method("blocks"), Contains("did you mean 'block'")); }
}

TEST_CASE("recompute method block under pipeline stages: the first N layers of each chunk, as Megatron's TransformerBlock",
          "[strategies][recompute]") {
    // megatron/core/recompute.py:167-181 runs per TransformerBlock, one virtual stage's layers:
    // virtual stage v of pipeline stage s holds chunk v·pp + s of the layers in order.
    const Model m = model_preset("gpt2-medium");   // 24 layers
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = megatron_zero1(true);
    p.pp = 2;
    p.recompute_num_layers = 2;
    const auto recomputed = [&](const Plan& plan) {
        std::set<int> layers;   // 0-based transformer layers that recompute
        for (const Block& b : strategies::detail::replica_blocks(m, resolve(m, c, plan), plan))
            if (b.kind == Block::Kind::transformer && b.recompute > Flops{}) layers.insert(b.index - 1);
        return layers;
    };
    CHECK(recomputed(p) == std::set<int>{0, 1, 12, 13});   // 1F1B: two chunks of 12
    Plan interleaved = p;
    interleaved.schedule = Schedule::interleaved;
    interleaved.virtual_stages = 2;
    CHECK(recomputed(interleaved) == std::set<int>{0, 1, 6, 7, 12, 13, 18, 19});   // four chunks of 6
    Plan cut = p;
    cut.stage_layers = {10, 14};
    CHECK(recomputed(cut) == std::set<int>{0, 1, 10, 11});
    // The pipeline step sits between no recompute and full recompute.
    Plan none = p, full = p;
    none.recompute = Recompute::none;
    none.recompute_method.reset();
    none.recompute_num_layers.reset();
    full.recompute_method.reset();
    full.recompute_num_layers.reset();
    const auto step = [&](const Plan& plan) { return tools::simulate_plan(m, c, plan).summary.iteration; };
    CHECK(step(none) < step(p));
    CHECK(step(p) < step(full));
}
