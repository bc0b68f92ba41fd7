// Model description: parameter counts against published figures and Narayanan et al. 2021 eq. 2,
// FLOPs against Narayanan eq. 3, activation bytes against Korthikanti et al. 2022 Table 2,
// tensor-parallel bookkeeping, the JSON readers (own format, HuggingFace GPT-2 and Llama), and
// every bad input. The expected values are computed here from the papers' closed forms, not
// from model.cpp's per-term construction.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/model.hpp"
#include "test_support.hpp"

using namespace smol;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

const std::string data_dir = SMOL_TEST_DATA;

Model from_text(const std::string& text, const std::string& name = "inline") { return test::model_from_text(text, name); }

std::int64_t sum_params(const std::vector<Block>& blocks) {
    std::int64_t n = 0;
    for (const auto& b : blocks) n += b.params;
    return n;
}

/// Narayanan et al. 2021 eq. 2, plus the final layer norm (2h) the equation leaves out.
double narayanan_params(double l, double h, double V, double s) {
    return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + 2 * h;
}

}  // namespace

TEST_CASE("preset parameter counts match the published models", "[core][model]") {
    // Exact counts, from the published architectures (HuggingFace model cards).
    CHECK(model_preset("gpt2-small").parameters() == 124'439'808);
    CHECK(model_preset("gpt2-medium").parameters() == 354'823'168);
    CHECK(model_preset("gpt2-large").parameters() == 774'030'080);
    CHECK(model_preset("gpt2-xl").parameters() == 1'557'611'200);
    CHECK(model_preset("llama2-7b").parameters() == 6'738'415'616);
    CHECK(model_preset("llama3-8b").parameters() == 8'030'261'248);
    // 80 · (2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192) + 2·8192·vocab + 8192.
    CHECK(model_preset("llama2-70b").parameters() == 68'976'648'192);
    CHECK(model_preset("llama3-70b").parameters() == 70'553'706'496);

    // Rounded figures from the papers, within 1 %.
    auto near = [](const std::string& name, double published) {
        CAPTURE(name);
        CHECK(static_cast<double>(model_preset(name).parameters()) == Approx(published).epsilon(0.01));
    };
    near("gpt2-small", 124e6);
    near("gpt2-xl", 1.56e9);
    near("llama2-7b", 6.74e9);
    near("gpt3-175b", 174.6e9);
    near("llama3-8b", 8.03e9);
    near("llama3-70b", 70e9);
}

TEST_CASE("GPT parameter counts follow Narayanan et al. eq. 2", "[core][model]") {
    const std::string name = GENERATE("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b");
    const Model m = model_preset(name);
    const TransformerShape& s = m.shape();
    CAPTURE(name);
    CHECK(static_cast<double>(m.parameters()) ==
          Approx(narayanan_params(s.layers, s.hidden, s.vocab, s.max_seq)).epsilon(1e-12));
}

TEST_CASE("blocks: embedding, layers, head, parameters add up", "[core][model]") {
    for (const std::string name : {"gpt2-small", "llama2-7b", "llama3-8b"}) {
        CAPTURE(name);
        const Model m = model_preset(name);
        const auto blocks = m.blocks(Workload{});
        REQUIRE(blocks.size() == static_cast<std::size_t>(m.shape().layers) + 2);
        CHECK(blocks.front().kind == Block::Kind::embedding);
        CHECK(blocks.back().kind == Block::Kind::head);
        for (std::size_t i = 0; i < blocks.size(); ++i) CHECK(blocks[i].index == static_cast<int>(i));
        CHECK(sum_params(blocks) == m.parameters());
        for (const auto& b : blocks) CHECK(b.bwd.count() == Approx(2 * b.fwd.count()));
    }
}

TEST_CASE("layer FLOPs are 24bsh² + 4bs²h for GPT and split by tp", "[core][model]") {
    const Model m = model_preset("gpt2-medium");
    const double b = 4, s = 1024, h = 1024, V = 50257;
    const int tp = GENERATE(1, 2, 4, 8);
    Workload w;
    w.micro_batch = 4;
    w.tp = tp;
    const auto blocks = m.blocks(w);
    const Block& layer = blocks[1];
    CHECK(layer.fwd.count() == Approx((24 * b * s * h * h + 4 * b * s * s * h) / tp).epsilon(1e-12));
    // Each GEMM at its own shape (Megatron's column- and row-parallel splits).
    std::vector<std::array<std::int64_t, 3>> shapes;
    for (const Kernel& k : layer.fwd_kernels)
        if (k.op == KernelOp::gemm && k.cls == KernelClass::gemm) shapes.push_back({k.m, k.n, k.k});
    const std::int64_t t = tp;
    CHECK(shapes == std::vector<std::array<std::int64_t, 3>>{
                        {4096, 3 * 1024 / t, 1024}, {4096, 1024, 1024 / t}, {4096, 4096 / t, 1024}, {4096, 1024, 4096 / t}});
    // Vocab-parallel head, vocabulary padded to a multiple of tp (Megatron pads too).
    const double v_rank = std::ceil(V / tp);
    CHECK(blocks.back().fwd.count() == Approx(2 * b * s * h * v_rank).epsilon(1e-12));
    CHECK(blocks.front().fwd.count() == 0);
}

TEST_CASE("Megatron's vocabulary padding: 128 × tp rows, the table and the head at the padded width", "[core][model]") {
    // Megatron's _vocab_size_with_padding, by hand: GPT-2's 50,257 tokens at 128 × tp.
    CHECK(padded_vocab(50257, 1, 128) == 50304);   // 393 × 128
    CHECK(padded_vocab(50257, 2, 128) == 50432);   // 197 × 256
    CHECK(padded_vocab(50257, 4, 128) == 50688);   // 99 × 512
    CHECK(padded_vocab(50257, 8, 128) == 51200);   // 50 × 1,024
    CHECK(padded_vocab(51200, 8, 128) == 51200);   // already a multiple
    CHECK(padded_vocab(128256, 8, 128) == 129024); // Llama 3's at tp 8: 126 × 1,024
    CHECK(padded_vocab(50257, 2, 1) == 50258);     // a multiple of tp alone
    const Model m = model_preset("gpt2-medium");   // 1,024 wide, 1,024 positions, tied head
    const double b = 2, s = 1024, h = 1024;
    const int tp = GENERATE(1, 2, 4, 8);
    Workload w;
    w.micro_batch = 2;
    w.tp = tp;
    w.vocab_multiple = 128;
    const auto blocks = m.blocks(w);
    const double v = static_cast<double>(padded_vocab(50257, tp, 128));
    // The table's rows on this rank, and the learned positions replicated.
    CHECK(static_cast<double>(blocks.front().params) == v / tp * h + 1024 * h);
    CHECK(blocks.back().fwd.count() == Approx(2 * b * s * h * v / tp).epsilon(1e-12));
    CHECK(m.tied_table_params(tp, 128) == static_cast<std::int64_t>(v / tp * h));
    Workload unpadded = w;
    unpadded.vocab_multiple = 1;
    CHECK(blocks.front().params - m.blocks(unpadded).front().params ==
          (static_cast<std::int64_t>(v) - padded_vocab(50257, tp, 1)) / tp * 1024);
}

TEST_CASE("FLOPs per iteration match Narayanan et al. eq. 3", "[core][model]") {
    // Narayanan's eq. 3 is 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)): every layer's forward counted
    // 4× (forward, backward 2×, full recompute) and the logit layer 3× (6·B·s·h·V). Without
    // recompute the layers count 3×, the logit layer still 3×: 72·B·s·l·h²·(1 + s/(6h) +
    // V/(12·l·h)). (Writing V/(16lh) in the 72 form would undercount the logit layer by a quarter.)
    struct Case {
        const char* name;
        double B;
    };
    const Case c = GENERATE(Case{"gpt3-175b", 1536}, Case{"gpt2-small", 512}, Case{"gpt2-xl", 64});
    CAPTURE(c.name);
    const Model m = model_preset(c.name);
    const double l = m.shape().layers, h = m.shape().hidden, V = m.shape().vocab, s = m.shape().max_seq;
    const double B = c.B;
    const double plain = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    const double full = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const auto Bi = static_cast<std::int64_t>(B);
    CHECK(m.flops_per_iteration(Bi, 0, Recompute::none).count() == Approx(plain).epsilon(0.001));
    CHECK(m.flops_per_iteration(Bi, 0, Recompute::full).count() == Approx(full).epsilon(0.001));
    // Selective recompute redoes only the attention core: 4·B·s²·h per layer.
    CHECK(m.flops_per_iteration(Bi, 0, Recompute::selective).count() ==
          Approx(plain + 4 * B * s * s * h * l).epsilon(0.001));
    // The seq argument is honoured (half the sequence: less than half the FLOPs).
    CHECK(m.flops_per_iteration(Bi, static_cast<int>(s / 2), Recompute::none).count() < plain / 2);
}

TEST_CASE("activation bytes match Korthikanti et al. 2022", "[core][model]") {
    // GPT-3 175B at s = 2048, b = 1 (Korthikanti Table 2 and §4, 16-bit).
    const Model m = model_preset("gpt3-175b");
    const double s = 2048, b = 1, h = 12288, a = 96;
    const double sbh = s * b * h;
    auto layer_bytes = [&](int tp, bool sp, Recompute r, DType d = DType::bf16) {
        Workload w;
        w.tp = tp;
        w.sequence_parallel = sp;
        w.recompute = r;
        w.dtype = d;
        return m.blocks(w)[1].activations.as_double();
    };
    SECTION("no parallelism: sbh(34 + 5as/h)") {
        CHECK(layer_bytes(1, false, Recompute::none) == Approx(sbh * (34 + 5 * a * s / h)).epsilon(0.02));
    }
    SECTION("tp 8 without sp: sbh(10 + 24/t + 5as/(ht))") {
        CHECK(layer_bytes(8, false, Recompute::none) == Approx(sbh * (10 + 24.0 / 8 + 5 * a * s / (h * 8))).epsilon(0.02));
    }
    SECTION("tp 8 with sp: sbh(34 + 5as/h)/t") {
        CHECK(layer_bytes(8, true, Recompute::none) == Approx(sbh * (34 + 5 * a * s / h) / 8).epsilon(0.02));
    }
    SECTION("selective recompute, tp 8 with sp: 34sbh/t") {
        CHECK(layer_bytes(8, true, Recompute::selective) == Approx(sbh * 34 / 8).epsilon(0.02));
    }
    SECTION("selective recompute, tp 8 without sp: sbh(10 + 24/t)") {
        CHECK(layer_bytes(8, false, Recompute::selective) == Approx(sbh * (10 + 24.0 / 8)).epsilon(0.02));
    }
    SECTION("full recompute keeps the layer input: 2sbh, /t with sp") {
        CHECK(layer_bytes(1, false, Recompute::full) == Approx(2 * sbh).epsilon(0.02));
        CHECK(layer_bytes(8, false, Recompute::full) == Approx(2 * sbh).epsilon(0.02));
        CHECK(layer_bytes(8, true, Recompute::full) == Approx(2 * sbh / 8).epsilon(0.02));
    }
    SECTION("fp32 doubles the element terms, not the 1-byte dropout masks") {
        // 16-bit: masks are 2sbh + as²b of the total; the rest (32sbh + 4as²b) doubles.
        CHECK(layer_bytes(1, false, Recompute::none, DType::fp32) == Approx(sbh * (66 + 9 * a * s / h)).epsilon(0.02));
    }
    SECTION("output and the head") {
        Workload w;
        w.tp = 8;
        w.sequence_parallel = true;
        const auto blocks = m.blocks(w);
        CHECK(blocks[1].output.as_double() == Approx(2 * sbh / 8));
        // Korthikanti §4.3: 4sbh/t·(1 + v/h) with sp.
        CHECK(blocks.back().activations.as_double() == Approx(4 * sbh / 8 * (1 + 50257 / h)).epsilon(0.02));
    }
}

TEST_CASE("flash attention keeps the log-sum-exp, not the s² matrices (FlashAttention vs Korthikanti)", "[core][model]") {
    // GPT-3 175B at s = 2048, b = 1, 16-bit. Eager: Korthikanti's sbh(34 + 5as/h). Flash (Dao 2023,
    // Algorithm 1): the same 34sbh of projections, norms and masks, plus the log-sum-exp, one fp32
    // per query and head: 4·a·s·b bytes. Selective recompute drops it.
    const Model m = model_preset("gpt3-175b");
    const double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h;
    auto layer = [&](Attention attn, Recompute r, int tp = 1, bool sp = false) {
        Workload w;
        w.attention = attn;
        w.recompute = r;
        w.tp = tp;
        w.sequence_parallel = sp;
        return m.blocks(w)[1];
    };
    CHECK(layer(Attention::eager, Recompute::none).activations.as_double() == Approx(sbh * (34 + 5 * a * s / h)).epsilon(0.02));
    CHECK(layer(Attention::flash, Recompute::none).activations.as_double() == Approx(sbh * 34 + 4 * a * s * b).epsilon(0.02));
    CHECK(layer(Attention::flash, Recompute::selective).activations.as_double() == Approx(sbh * 34).epsilon(0.02));
    CHECK(layer(Attention::flash, Recompute::none, 8, true).activations.as_double() ==
          Approx((sbh * 34 + 4 * a * s * b) / 8).epsilon(0.02));
    // Model FLOPs do not depend on how attention runs; the kernels do: one FlashAttention-2 kernel
    // over the causal half of the scores (Σ min(i + 1, s) pairs), 2.5× that in backward.
    CHECK(layer(Attention::flash, Recompute::none).fwd == layer(Attention::eager, Recompute::none).fwd);
    const Block f = layer(Attention::flash, Recompute::none);
    std::vector<Kernel> flash;
    for (const Kernel& k : f.fwd_kernels)
        if (k.op == KernelOp::flash) flash.push_back(k);
    REQUIRE(flash.size() == 1);
    CHECK(flash[0].flops == Approx(4.0 * a * (s * (s + 1) / 2) * (h / a)));
    CHECK(backward_kernels(flash)[0].flops == Approx(2.5 * flash[0].flops));
    for (const Kernel& k : f.fwd_kernels) CHECK(k.op != KernelOp::softmax);
}

TEST_CASE("Llama 3 8B: eager attention keeps Korthikanti's 5·a·s²·b per layer where Megatron's fused softmax runs, 7·a·s²·b beyond 4,096 tokens, flash a tenth", "[core][model]") {
    // Korthikanti's s² term: the 16-bit softmax output, its dropout mask and the dropout output,
    // 5·a·s²·b bytes per layer (32 · 5 · 32 · 4096² = 86 GB at 4,096 tokens). Past 4,096 keys
    // Megatron's fused kernel does not run (fused_softmax.py:256) and the PyTorch softmax keeps
    // its fp32 output: 7·a·s²·b (32 · 7 · 32 · 8192² = 481 GB of 524 GB at 8,192 tokens).
    // FlashAttention keeps only the log-sum-exp, 4·a·s·b.
    const Model m = model_preset("llama3-8b");
    Workload w;
    auto per_sample = [&](int seq, Attention a, Recompute r) {
        w.seq = seq;
        w.attention = a;
        w.recompute = r;
        Bytes total;
        for (const Block& b : m.blocks(w)) total += b.activations;
        return total.as_double();
    };
    for (const auto& [seq, per_as2b] : {std::pair{4096, 5.0}, std::pair{8192, 7.0}}) {
        INFO("seq " << seq);
        const double s = seq;
        CHECK(per_sample(seq, Attention::eager, Recompute::none) - per_sample(seq, Attention::flash, Recompute::none) ==
              Approx(32 * (per_as2b * 32 * s * s - 4.0 * 32 * s)));
    }
    CHECK(per_sample(8192, Attention::eager, Recompute::none) == Approx(524e9).epsilon(0.01));
    const double flash = per_sample(8192, Attention::flash, Recompute::selective);
    CHECK(flash < 45e9);
    CHECK(flash < 80e9 - 16.1e9);  // fits an A100 80 GB beside FSDP's 16 B/param / 8 of model states
}

TEST_CASE("sliding windows cap flash attention's scores, eager keeps the whole matrix", "[core][model]") {
    // A Mistral-shaped layer (window 4,096) at s = 8,192: flash computes Σ min(i + 1, w) pairs per
    // head; the eager path multiplies all s² and masks (HuggingFace's eager_attention_forward).
    const Model m = from_text(R"({"kind": "transformer", "layers": 2, "hidden": 4096, "heads": 32, "kv_heads": 8,
        "ffn_hidden": 14336, "vocab": 32000, "seq": 8192, "gated_mlp": true, "biases": false, "norm": "rmsnorm",
        "positions": "rope", "sliding_window": 4096, "full_attention_layers": [1]})");
    Workload w;
    w.attention = Attention::flash;
    const auto blocks = m.blocks(w);
    const double s = 8192, win = 4096, d = 128, heads = 32;
    auto flash_flops = [](const Block& b) {
        for (const Kernel& k : b.fwd_kernels)
            if (k.op == KernelOp::flash) return k.flops;
        return 0.0;
    };
    CHECK(flash_flops(blocks[1]) == Approx(heads * 4 * d * (win * (win + 1) / 2 + (s - win) * win)));
    CHECK(flash_flops(blocks[2]) == Approx(heads * 4 * d * (s * (s + 1) / 2)));  // layer 1 attends to all
    // Model FLOPs count every key of the window: 4·s·min(s, w)·h per layer.
    CHECK(blocks[1].fwd.count() < blocks[2].fwd.count());
    w.attention = Attention::eager;
    const auto eager = m.blocks(w);
    CHECK(total_flops(eager[1].fwd_kernels) == Approx(total_flops(eager[2].fwd_kernels)));
}

TEST_CASE("mixture-of-experts blocks: experts split by ep, kernels split around the all-to-alls", "[core][model]") {
    const Model m = from_text(R"({"kind": "transformer", "layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 1024,
        "vocab": 1000, "seq": 128, "gated_mlp": true, "biases": false, "norm": "rmsnorm", "positions": "rope",
        "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 512, "dense_layers": [0]}})");
    const std::int64_t h = 256, fe = 512, E = 8;
    Workload w;
    w.micro_batch = 2;
    const auto one = m.blocks(w);
    CHECK_FALSE(one[1].moe);           // layer 0 keeps its dense MLP
    REQUIRE(one[2].moe);
    w.ep = 4;
    const auto four = m.blocks(w);
    const MoePass& p = *four[2].moe;
    CHECK(p.expert_params == 2 * 3 * h * fe);                            // E/ep = 2 experts per rank
    CHECK(one[2].params - four[2].params == (E - 2) * 3 * h * fe);
    CHECK(p.dispatch_bytes.count() == 2 * 128 * 2 * h * 2);              // b·s·K·h·e
    // Two experts on a rank: the tokens it receives sorted by local expert (and their fp32
    // probabilities), read and written, 2 · b·s·K · (h·e + 4) bytes, and put back in order before
    // the combine (Megatron's Permutation 2 and Unpermutation 2).
    const std::int64_t routed = 2 * 128 * 2;
    CHECK(four[2].fwd_kernels[static_cast<std::size_t>(p.dispatch_at)].bytes == 2 * routed * (h * 2 + 4));
    CHECK(four[2].fwd_kernels[static_cast<std::size_t>(p.combine_at - 1)].bytes == 2 * routed * h * 2);
    // The local experts' grouped GEMMs: 2 problems over b·s·K·ep/E = 128 tokens each.
    const Kernel& up = four[2].fwd_kernels[static_cast<std::size_t>(p.dispatch_at + 1)];
    CHECK((up.op == KernelOp::gemm && up.batch == 2 && up.m == 2 * 128 * 2 / 2 && up.n == 2 * fe && up.k == h));
    // With every expert on one rank there is nothing to sort: the GEMM comes first.
    w.ep = 8;
    const auto eight = m.blocks(w);
    CHECK(eight[2].fwd_kernels[static_cast<std::size_t>(eight[2].moe->dispatch_at)].op == KernelOp::gemm);
    w.ep = 4;
    // Model FLOPs do not depend on ep.
    CHECK(four[2].fwd == one[2].fwd);
    // A skewed router: the busiest expert takes 1.5× the mean; every rank is priced at it.
    w.expert_imbalance = 1.5;
    const auto skewed = m.blocks(w);
    CHECK(skewed[2].fwd_kernels[static_cast<std::size_t>(p.dispatch_at + 1)].m == 256 * 3 / 2);
    CHECK(skewed[2].fwd == four[2].fwd);   // model FLOPs count useful work
    CHECK(skewed[2].activations > four[2].activations);
    // GShard capacity 1.25: the dispatched buffer is padded to capacity.
    w.expert_imbalance = 1;
    w.capacity_factor = 1.25;
    CHECK(m.blocks(w)[2].moe->dispatch_bytes.count() == 2 * 128 * 2 * h * 2 * 5 / 4);
}

TEST_CASE("GQA and gated MLP shrink and grow the right terms", "[core][model]") {
    // Llama 3 8B: K and V are a quarter of Q; the gated MLP keeps gate, up and their product.
    const Model m = model_preset("llama3-8b");
    Workload w;
    w.seq = 4096;
    const Block layer = m.blocks(w)[1];
    const double s = 4096, h = 4096, a = 32, kv = 1024, f = 14336, e = 2;
    const double expected = s * h * e            // QKV input
                            + s * (h + kv) * e   // Q, K
                            + s * kv * e         // V
                            + s * h * e          // output projection input
                            + s * h              // dropout mask
                            + 5 * a * s * s      // softmax output, mask, dropout output
                            + s * h * e          // MLP input
                            + 3 * s * f * e      // gate, up, product
                            + s * h              // dropout mask
                            + 2 * s * h * e;     // two norms
    CHECK(layer.activations.as_double() == Approx(expected));
    // QKV: 2·s·h·(h + 2kv); scores and attention·V: 4·s²·h; output: 2·s·h²; MLP: 3 · 2·s·h·f.
    CHECK(layer.fwd.count() == Approx(2 * s * h * (h + 2 * kv) + 4 * s * s * h + 2 * s * h * h + 6 * s * h * f));
}

TEST_CASE("tensor-parallel collectives per block", "[core][model]") {
    const Model m = model_preset("gpt2-small");
    Workload w;
    w.micro_batch = 2;
    SECTION("none at tp 1") {
        for (const auto& b : m.blocks(w)) CHECK(b.tp_collectives_fwd == 0);
    }
    SECTION("two per layer, one for the embedding and one for the head at tp 4") {
        w.tp = 4;
        const auto blocks = m.blocks(w);
        CHECK(blocks.front().tp_collectives_fwd == 1);
        CHECK(blocks[1].tp_collectives_fwd == 2);
        CHECK(blocks.back().tp_collectives_fwd == 1);
        for (const auto& b : blocks) CHECK(b.tp_bytes_per_collective.count() == 2 * 1024 * 768 * 2);
        // Per-rank layer parameters: split weights and column biases, replicated norms and row biases.
        const std::int64_t h = 768, split = 3 * h * h + h * h + 8 * h * h + 3 * h + 4 * h, replicated = 4 * h + 2 * h;
        CHECK(blocks[1].params == split / 4 + replicated);
    }
    SECTION("sequence parallelism splits the replicated tensors") {
        w.tp = 4;
        const auto plain = m.blocks(w);
        w.sequence_parallel = true;
        const auto sp = m.blocks(w);
        CHECK(sp[1].output.count() == plain[1].output.count() / 4);
        CHECK(total_bytes(sp[1].fwd_kernels) < total_bytes(plain[1].fwd_kernels));
        CHECK(sp[1].fwd == plain[1].fwd);
    }
}

TEST_CASE("a layer's memory-bound kernels move what their tensors hold", "[core][model]") {
    // GPT-2 small, b = 1, bf16: outside the attention core the norms (2 × 2sbh·e), bias-dropout-adds
    // (2 × (3sbh·e + sbh)), the QKV bias (2·3sbh·e) and GeLU (2·4sbh·e) move 24·sbh·e + 2·sbh; the
    // softmax and its dropout move a·s²·(2e) and a·s²·(2e + 1), the context permute 2sbh·e.
    const Model m = model_preset("gpt2-small");
    const Block layer = m.blocks(Workload{})[1];
    const std::int64_t s = 1024, h = 768, a = 12, e = 2;
    std::int64_t core = 0, rest = 0;
    for (const Kernel& k : layer.fwd_kernels)
        if (k.op != KernelOp::gemm) (k.cls == KernelClass::attention ? core : rest) += k.bytes;
    CHECK(rest == 24 * s * h * e + 2 * s * h);
    CHECK(core == a * s * s * 2 * e + a * s * s * (2 * e + 1) + 2 * s * h * e);
}

TEST_CASE("eager attention: Megatron's fused softmax where its kernel takes the shape, five fp32 passes where not", "[core][model][kernel]") {
    // FusedScaleMaskSoftmax.is_kernel_available (Megatron-LM fused_softmax.py:238-270): 16-bit
    // scores, 16 < s ≤ 4096, and the b·a/t score matrices a multiple of the kernel's batches per
    // block (4 above 128 keys, 8 up to 128). Otherwise forward_torch_softmax: cast to fp32 (6 B
    // per score), scale by the layer number (8 B, with query-key layer scaling), masked_fill_
    // (8 B), softmax in fp32 (8 B), cast back (6 B); each pass's gradient is the same pass, the
    // fp32 softmax's reads y and dy and writes dx (12 B). vTrain's GPT (h 1024, 16 heads) on
    // tp 8 has 2 score matrices per sample: micro-batch 1 runs unfused, 2 runs fused.
    const Model m = from_text(R"({"kind": "transformer", "layers": 2, "hidden": 1024, "heads": 16,
        "ffn_hidden": 4096, "vocab": 50304, "seq": 1024, "positions": "rope"})");
    auto core = [&](int b, int tp, int seq, bool scaling, DType dt = DType::fp16) {
        Workload w;
        w.micro_batch = b;
        w.tp = tp;
        w.seq = seq;
        w.dtype = dt;
        w.qk_layer_scaling = scaling;
        std::vector<Kernel> out;
        const std::vector<Block> blocks = m.blocks(w);
        for (const Kernel& k : blocks[1].fwd_kernels)
            if (k.cls == KernelClass::attention && k.op != KernelOp::gemm && k.name != KernelName::context) out.push_back(k);
        return out;  // the softmax passes and the attention dropout
    };
    auto names = [](const std::vector<Kernel>& ks) {
        std::vector<KernelName> n;
        for (const Kernel& k : ks) n.push_back(k.name);
        return n;
    };
    using N = KernelName;
    const std::int64_t s = 1024;
    SECTION("tp 8, micro-batch 1: 2 matrices, unfused") {
        const std::int64_t n = 2 * s * s;
        const auto k = core(1, 8, 1024, true);
        CHECK(names(k) == std::vector<N>{N::cast, N::scale, N::mask, N::softmax, N::cast, N::softmax});
        std::vector<std::int64_t> bytes;
        for (const Kernel& x : k) bytes.push_back(x.bytes);
        CHECK(bytes == std::vector<std::int64_t>{6 * n, 8 * n, 8 * n, 8 * n, 6 * n, 5 * n});
        CHECK(k[3].elem_bytes == 4);
        const std::vector<Kernel> passes(k.begin(), k.end() - 1);
        std::vector<std::int64_t> grads;
        for (const Kernel& x : backward_kernels(passes)) grads.push_back(x.bytes);
        CHECK(grads == std::vector<std::int64_t>{6 * n, 12 * n, 8 * n, 8 * n, 6 * n});
        // Without query-key layer scaling (Megatron core's default) there is no scale pass.
        CHECK(names(core(1, 8, 1024, false)) == std::vector<N>{N::cast, N::mask, N::softmax, N::cast, N::softmax});
    }
    SECTION("tp 8, micro-batch 2: 4 matrices, the fused kernel") {
        const auto k = core(2, 8, 1024, true);
        REQUIRE(names(k) == std::vector<N>{N::softmax, N::softmax});
        CHECK(k[0].bytes == 4 * s * s * 2 * 2);
        CHECK(backward_kernels(std::vector<Kernel>{k[0]})[0].bytes == 4 * s * s * 2 * 3);
    }
    SECTION("up to 128 keys the kernel takes 8 matrices per block") {
        CHECK(names(core(1, 4, 64, false)).size() == 5);   // 4 matrices
        CHECK(names(core(2, 4, 64, false)).size() == 2);   // 8
        CHECK(names(core(1, 4, 256, false)).size() == 2);  // 4 matrices, 256 keys
    }
    SECTION("past 4,096 keys, or fp32 scores, the PyTorch path runs") {
        CHECK(names(core(4, 1, 4096, false)).size() == 2);
        CHECK(names(core(4, 1, 8192, false)).size() == 5);
        CHECK(names(core(4, 1, 1024, true, DType::fp32)) == std::vector<N>{N::scale, N::mask, N::softmax, N::softmax});
    }
}

TEST_CASE("the loss runs Megatron's cross-entropy pass by pass, and its own backward", "[core][model][kernel]") {
    // Megatron-DeepSpeed's _VocabParallelCrossEntropy (megatron/core/tensor_parallel/
    // cross_entropy.py) on output.float(): the cast (read 2, write 4 per logit), then max (read
    // 4), subtract (read 4, write 4), exp (read 4, write 4), sum (read 4) and the division that
    // keeps the probabilities (read 4, write 4): 38 bytes a logit in six passes. Its backward is
    // one mul_ over the probabilities (read 4, write 4), then the cast back (read 4, write 2):
    // 14 bytes, not the 2 × 38 of a derived backward. GPT-2's vocabulary 50,257 is split over tp
    // (padded to a multiple of it).
    const Model m = model_preset("gpt2-small");
    const int tp = GENERATE(1, 2);
    const DType dtype = GENERATE(DType::bf16, DType::fp32);
    Workload w;
    w.tp = tp;
    w.dtype = dtype;
    const Block head = m.blocks(w).back();
    REQUIRE(head.kind == Block::Kind::head);
    const std::int64_t e = dtype == DType::fp32 ? 4 : 2, v_rank = (50257 + tp - 1) / tp, logits = 1024 * v_rank;
    std::int64_t big = 0, small = 0, cast = 0;
    int passes = 0, small_passes = 0;
    for (const Kernel& k : head.fwd_kernels) {
        if (k.name == KernelName::cast) cast += k.bytes;
        if (k.name != KernelName::loss) continue;
        (k.bytes >= logits ? big : small) += k.bytes;
        ++(k.bytes >= logits ? passes : small_passes);
    }
    CHECK(cast == (e == 4 ? 0 : 6 * logits));
    CHECK(big == 32 * logits);
    CHECK(passes == 5);
    CHECK(small_passes == 22);       // per-token bookkeeping: launches, not traffic
    CHECK(small < 300 * 1024);
    // Backward: the loss's own first (11 per-token passes and the mul_), then the cast's
    // derivative, the GEMM's two gradients and the norm's.
    const std::vector<Kernel> bwd = block_backward(head);
    REQUIRE(bwd.size() >= 12);
    CHECK(bwd[11].bytes == 8 * logits);
    CHECK(std::all_of(bwd.begin(), bwd.begin() + 12, [](const Kernel& k) { return k.name == KernelName::loss; }));
    CHECK(bwd[12].name == (e == 4 ? KernelName::logits : KernelName::cast));
    if (e != 4) CHECK(bwd[12].bytes == 6 * logits);
    for (const Kernel& k : backward_kernels(head.fwd_kernels)) CHECK(k.name != KernelName::loss);
    // The weight gradient alone (zero-bubble's W pass) has no loss in it.
    for (const Kernel& k : block_backward(head, BackwardPart::weight)) CHECK(k.name != KernelName::loss);
}

TEST_CASE("PyTorch's models run F.cross_entropy: log_softmax and nll_loss, and their backward", "[core][model][kernel]") {
    // aten/src/ATen/native/cuda/SoftMax.cu cunn_SoftMaxForward on a row longer than shared
    // memory: max, sum of exponentials and the output pass read the row three times and write it
    // once (16 bytes a logit); nll_loss gathers one value per token. Backward: nll_loss zeroes the
    // gradient (4 bytes a logit) and scatters −1/n, cunn_SoftMaxBackward sums the row's gradient
    // and writes the input gradient from it and the output (16). With the cast and its backward:
    // 6 + 16 + 4 + 16 + 6 = 48 bytes a logit.
    const Model m = model_preset("gpt2-small");
    Workload w;
    w.loss = LossKernels::torch;
    const Block head = m.blocks(w).back();
    const std::int64_t logits = 1024 * 50257;
    std::int64_t fwd = 0;
    int launches = 0;
    for (const Kernel& k : head.fwd_kernels)
        if (k.name == KernelName::loss || k.name == KernelName::cast) fwd += k.bytes, ++launches;
    CHECK(launches == 3);
    CHECK(fwd == 22 * logits + 16 * 1024);
    const std::vector<Kernel> bwd = block_backward(head);
    REQUIRE(bwd.size() >= 5);
    std::int64_t back = 0;
    for (std::size_t i = 0; i < 5; ++i) back += bwd[i].bytes;
    CHECK(bwd[4].name == KernelName::cast);
    CHECK(back == 26 * logits + 20 * 1024);
}

TEST_CASE("Megatron core's fused cross-entropies move fewer bytes a logit, and keep the same fp32 tensor", "[core][model][kernel]") {
    // Per logit, by hand from the sources (bf16 logits, e = 2):
    //  - unfused: the cast 6, five passes 32, the mul_ 8, the cast back 6 = 52;
    //  - native (core/fusions/fused_cross_entropy.py, torch.compile'd): cast with max 2 + 4,
    //    subtract/exp/sum in place 4 + 4, divide in place 4 + 4; backward reads the probabilities
    //    and writes them in place and the bf16 gradient, 4 + 4 + 2 = 32;
    //  - te (Transformer Engine triton/cross_entropy.py): online softmax reads 2, the loss kernel
    //    reads 2 and writes the fp32 gradient 4; backward's element_mul 4 + 4 and autograd's cast
    //    to bf16 4 + 2 = 22. With fp32 logits (e = 4) te has no cast: 4 + 8 + 8 = 20.
    const Model m = model_preset("gpt2-small");
    const DType dtype = GENERATE(DType::bf16, DType::fp32);
    const std::int64_t e = dtype == DType::fp32 ? 4 : 2, logits = 1024 * 50257;
    struct Bytes {
        std::int64_t fwd = 0, bwd = 0;
        int fwd_big = 0, bwd_big = 0;
        std::int64_t activations = 0;
    };
    auto bytes = [&](LossKernels kind) {
        Workload w;
        w.dtype = dtype;
        w.loss = kind;
        const Block head = m.blocks(w).back();
        REQUIRE(head.kind == Block::Kind::head);
        Bytes b;
        b.activations = head.activations.count();
        const auto loss_part = [](const Kernel& k) { return k.name == KernelName::loss || k.name == KernelName::cast; };
        for (const Kernel& k : head.fwd_kernels)
            if (loss_part(k) && k.bytes >= logits) b.fwd += k.bytes, ++b.fwd_big;
        for (const Kernel& k : block_backward(head))
            if (loss_part(k) && k.bytes >= logits) b.bwd += k.bytes, ++b.bwd_big;
        return b;
    };
    const Bytes unfused = bytes(LossKernels::megatron), native = bytes(LossKernels::megatron_fused), te = bytes(LossKernels::te);
    CHECK(unfused.fwd + unfused.bwd == (e == 2 ? 52 : 40) * logits);
    CHECK(native.fwd == (e + 4 + 16) * logits);
    CHECK(native.bwd == (8 + e) * logits);
    CHECK(native.fwd_big == 3);
    CHECK(native.bwd_big == 1);
    CHECK(te.fwd == (2 * e + 4) * logits);
    CHECK(te.bwd == (e == 2 ? 14 : 8) * logits);
    CHECK(te.fwd_big == 2);
    CHECK(te.bwd_big == (e == 2 ? 2 : 1));
    // Each keeps one fp32 tensor a logit for backward (probabilities; te's gradient).
    CHECK(native.activations == unfused.activations);
    CHECK(te.activations == unfused.activations);
}

TEST_CASE("kernels: forward FLOPs are the model's, backward twice them", "[core][model][kernel]") {
    // The model's FLOPs (Narayanan) count the GEMMs; a layer list's pooling FLOPs ride on its
    // memory-bound pass. Softmax arithmetic is not model FLOPs.
    auto counted = [](const Kernel& k) { return k.op == KernelOp::softmax ? 0.0 : k.flops; };
    const std::string name = GENERATE(as<std::string>{}, "gpt2-small", "llama3-8b", "resnet50");
    const Model m = model_preset(name);
    Workload w;
    w.micro_batch = 2;
    w.seq = m.is_transformer() ? 512 : 0;
    for (const Block& b : m.blocks(w)) {
        double fwd = 0, bwd = 0, input = 0, weight = 0;
        for (const Kernel& k : b.fwd_kernels) fwd += counted(k);
        for (const Kernel& k : backward_kernels(b.fwd_kernels)) bwd += counted(k);
        for (const Kernel& k : backward_kernels(b.fwd_kernels, BackwardPart::input)) input += counted(k);
        for (const Kernel& k : backward_kernels(b.fwd_kernels, BackwardPart::weight)) weight += counted(k);
        CHECK(fwd == Approx(b.fwd.count()).epsilon(1e-12));
        CHECK(bwd == Approx(2 * fwd).epsilon(1e-12));
        CHECK(input + weight == Approx(bwd).epsilon(1e-12));
        if (b.kind == Block::Kind::transformer) CHECK(weight > 0);
    }
}

TEST_CASE("kernels: a GEMM's gradients are at the transposed shapes", "[core][kernel]") {
    // Y[m×n] = X[m×k]·W[k×n]: dX = dY·Wᵀ is (m, k, n); dW = Xᵀ·dY is (k, n, m).
    const Kernel w = gemm_kernel(KernelName::mlp_up, KernelClass::gemm, 4096, 3072, 768, 1, 2, true);
    const auto all = backward_kernels(std::span<const Kernel>(&w, 1));
    REQUIRE(all.size() == 2);
    CHECK((all[0].m == 4096 && all[0].n == 768 && all[0].k == 3072 && !all[0].weight));
    CHECK((all[1].m == 768 && all[1].n == 3072 && all[1].k == 4096 && all[1].weight));
    CHECK(backward_kernels(std::span<const Kernel>(&w, 1), BackwardPart::input).size() == 1);
    CHECK(backward_kernels(std::span<const Kernel>(&w, 1), BackwardPart::weight).size() == 1);
    // Activation × activation (attention scores): both gradients are data gradients.
    const Kernel qk = gemm_kernel(KernelName::scores, KernelClass::attention, 1024, 1024, 64, 12, 2, false);
    CHECK(backward_kernels(std::span<const Kernel>(&qk, 1), BackwardPart::input).size() == 2);
    CHECK(backward_kernels(std::span<const Kernel>(&qk, 1), BackwardPart::weight).empty());
    // FlashAttention-2: 4·q·kv·d forward FLOPs per head, 2.5× that in backward (Dao 2023).
    const Kernel fa = flash_kernel(8, 2048, 2048, 128, 2, false);
    CHECK(fa.flops == Approx(8 * 4.0 * 2048 * 2048 * 128));
    const auto fb = backward_kernels(std::span<const Kernel>(&fa, 1));
    REQUIRE(fb.size() == 1);
    CHECK(fb[0].flops == Approx(2.5 * fa.flops));
}

TEST_CASE("HuggingFace config.json files load to the preset shapes", "[core][model]") {
    auto same_shape = [](const Model& a, const Model& b) {
        const TransformerShape &x = a.shape(), &y = b.shape();
        CHECK(x.layers == y.layers);
        CHECK(x.hidden == y.hidden);
        CHECK(x.heads == y.heads);
        CHECK(x.kv_heads == y.kv_heads);
        CHECK(x.ffn_hidden == y.ffn_hidden);
        CHECK(x.vocab == y.vocab);
        CHECK(x.max_seq == y.max_seq);
        CHECK(x.tied_embeddings == y.tied_embeddings);
        CHECK(x.gated_mlp == y.gated_mlp);
        CHECK(x.positions == y.positions);
        CHECK(x.qkv_bias == y.qkv_bias);
        CHECK(x.attn_out_bias == y.attn_out_bias);
        CHECK(x.mlp_bias == y.mlp_bias);
        CHECK(x.layer_norm == y.layer_norm);
        CHECK(a.parameters() == b.parameters());
    };
    SECTION("GPT-2") {
        const Model m = load_model(data_dir + "/hf-gpt2-config.json");
        CHECK(m.name() == "hf-gpt2-config");
        same_shape(m, model_preset("gpt2-small"));
    }
    SECTION("Llama 2 7B") {
        same_shape(load_model(data_dir + "/hf-llama2-7b-config.json"), model_preset("llama2-7b"));
    }
    SECTION("GPT-2 with n_inner null means 4h") {
        const Model m = from_text(R"({"n_layer": 48, "n_embd": 1600, "n_head": 25, "n_positions": 1024,
                                      "vocab_size": 50257, "n_inner": null, "model_type": "gpt2"})");
        same_shape(m, model_preset("gpt2-xl"));
    }
    SECTION("Llama 3 with grouped-query attention") {
        const Model m = from_text(R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 8192, "tie_word_embeddings": false, "rope_theta": 500000.0})");
        same_shape(m, model_preset("llama3-8b"));
    }
}

TEST_CASE("smolcluster's own model JSON", "[core][model]") {
    SECTION("transformer") {
        const Model m = load_model(data_dir + "/model-tiny-transformer.json");
        CHECK(m.name() == "tiny");
        const TransformerShape& s = m.shape();
        CHECK(s.kv_heads == 2);
        CHECK(s.gated_mlp);
        CHECK_FALSE(s.layer_norm);
        CHECK(s.positions == Positions::rope);
        // Embedding 1000·64; per layer q 64², k and v 64·32 each, o 64², MLP 3·64·256, norms 2·64;
        // final norm 64; untied head 1000·64.
        CHECK(m.parameters() == 64000 + 2 * (4096 + 2048 + 2048 + 4096 + 49152 + 128) + 64 + 64000);
        CHECK(sum_params(m.blocks(Workload{})) == m.parameters());
    }
    SECTION("transformer defaults: kv_heads = heads, ffn_hidden = 4h, GPT-2 style") {
        const Model m = from_text(R"({"kind": "transformer", "layers": 12, "hidden": 768, "heads": 12,
                                      "vocab": 50257, "seq": 1024})");
        CHECK(m.parameters() == 124'439'808);
    }
    SECTION("layer list") {
        const Model m = load_model(data_dir + "/model-tiny-mlp.json");
        CHECK_FALSE(m.is_transformer());
        CHECK(m.name() == "tiny-mlp");
        CHECK(m.layers().size() == 3);
        CHECK(m.parameters() == 200960 + 2570);
        CHECK(m.default_seq() == 1);
        CHECK(m.input_bytes_per_sample() == 3136);
        CHECK(m.layers()[1].activations.count() == 1024);
        Workload w;
        w.micro_batch = 4;
        const auto blocks = m.blocks(w);
        REQUIRE(blocks.size() == 3);
        CHECK(blocks[0].kind == Block::Kind::layer);
        CHECK(blocks[0].fwd.count() == Approx(4 * 401408.0));
        CHECK(blocks[0].bwd.count() == Approx(8 * 401408.0));
        CHECK(blocks[0].activations.count() == 4 * 3136 / 2);  // fp32 spec, bf16 workload
        CHECK(blocks[0].output.count() == 4 * 1024 / 2);
        CHECK(blocks[0].fwd_kernels.front().m == 4);  // an fc layer: one output position per sample
        w.dtype = DType::fp32;
        w.recompute = Recompute::full;
        const auto full = m.blocks(w);
        CHECK(full[2].activations.count() == 4 * 1024);  // only the input of fc2 is kept
        CHECK(full[2].recompute == full[2].fwd);
        CHECK(m.flops_per_iteration(10, 0, Recompute::none).count() == Approx(10 * 3 * (401408.0 + 5120.0)));
    }
}

TEST_CASE("presets and load_model", "[core][model]") {
    const auto names = model_preset_names();
    CHECK(std::is_sorted(names.begin(), names.end()));
    CHECK(names.size() == 11 + 7);  // transformers + the layer-list presets of core/cnn_presets.cpp
    for (const auto& n : names) CHECK(load_model(n).name() == n);
    CHECK(model_preset("gpt2-small").default_seq() == 1024);
}

TEST_CASE("dtype and recompute names", "[core][model]") {
    CHECK(dtype_bytes(DType::bf16) == 2);
    CHECK(dtype_bytes(DType::fp16) == 2);
    CHECK(dtype_bytes(DType::fp32) == 4);
    for (DType d : {DType::bf16, DType::fp16, DType::fp32}) CHECK(parse_dtype(to_string(d), {}) == d);
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
        CHECK(parse_recompute(to_string(r), {}) == r);
}

TEST_CASE("bad model inputs", "[core][model]") {
    SECTION("tp does not divide the attention heads") {
        Workload w;
        w.tp = 5;
        CHECK_THAT(bad_input_message([&] { model_preset("gpt2-small").blocks(w); }),
                   Contains("tp 5 does not divide the 12 attention heads of gpt2-small"));
    }
    SECTION("tp does not divide the key-value heads") {
        Workload w;
        w.tp = 16;
        CHECK_THAT(bad_input_message([&] { model_preset("llama3-8b").blocks(w); }),
                   Contains("tp 16 does not divide the 8 key-value heads of llama3-8b"));
    }
    SECTION("tp does not divide the ffn hidden size") {
        const Model m = from_text(R"({"kind": "transformer", "layers": 1, "hidden": 64, "heads": 8,
                                      "ffn_hidden": 100, "vocab": 10, "seq": 8})");
        Workload w;
        w.tp = 8;
        CHECK_THAT(bad_input_message([&] { m.blocks(w); }), Contains("tp 8 does not divide the ffn hidden size 100"));
    }
    SECTION("tp zero") {
        Workload w;
        w.tp = 0;
        CHECK_THAT(bad_input_message([&] { model_preset("gpt2-small").blocks(w); }), Contains("at least 1"));
    }
    SECTION("vocab not divisible by tp is padded, not an error") {
        Workload w;
        w.tp = 2;  // 50257 is odd
        const auto blocks = model_preset("gpt2-small").blocks(w);
        CHECK(blocks.front().params == 25129 * 768 + 1024 * 768);
    }
    SECTION("sequence longer than the learned positions") {
        Workload w;
        w.seq = 2048;
        CHECK_THAT(bad_input_message([&] { model_preset("gpt2-small").blocks(w); }),
                   Contains("sequence length 2048 exceeds the 1024 learned positions of gpt2-small"));
    }
    SECTION("zero micro-batch") {
        Workload w;
        w.micro_batch = 0;
        CHECK_THAT(bad_input_message([&] { model_preset("gpt2-small").blocks(w); }), Contains("micro-batch"));
    }
    SECTION("ep on a dense model, or not dividing the experts") {
        Workload w;
        w.ep = 2;
        CHECK_THAT(bad_input_message([&] { model_preset("gpt2-small").blocks(w); }), Contains("--ep 2 needs a mixture-of-experts"));
        const Model moe = from_text(R"({"kind": "transformer", "layers": 1, "hidden": 64, "heads": 4, "vocab": 10,
            "seq": 8, "moe": {"experts": 6, "top_k": 2, "ffn_hidden": 32}})");
        w.ep = 4;
        CHECK_THAT(bad_input_message([&] { moe.blocks(w); }), Contains("--ep 4 does not divide the 6 experts"));
    }
    SECTION("top-k above the experts") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": 1, "hidden": 64, "heads": 4,
            "vocab": 10, "seq": 8, "moe": {"experts": 2, "top_k": 3, "ffn_hidden": 32}})"); }),
                   Contains("a top-k of at most the 2 experts"));
    }
    SECTION("tp on a layer list") {
        Workload w;
        w.tp = 2;
        CHECK_THAT(bad_input_message([&] { load_model(data_dir + "/model-tiny-mlp.json").blocks(w); }),
                   Contains("tensor parallelism is not modelled"));
    }
    SECTION("unknown model suggests the nearest preset") {
        const std::string m = bad_input_message([] { load_model("gpt2-smal"); });
        CHECK_THAT(m, Contains("unknown model 'gpt2-smal' (did you mean 'gpt2-small'?); presets: alexnet, gpt-mini, gpt-tiny, gpt2-large"));
        CHECK_THAT(m, Contains("or give a path to a JSON file"));
    }
    SECTION("unknown preset") {
        CHECK_THAT(bad_input_message([] { model_preset("llama2-8b"); }), Contains("did you mean 'llama2-7b'"));
    }
    SECTION("unknown key in the own format") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": 2, "hiden": 64, "heads": 4,
                                                "vocab": 10, "seq": 8})", "typo"); }),
                   Contains("typo.json: at /hiden: unknown key 'hiden' (did you mean 'hidden'?)"));
    }
    SECTION("missing required key names the path") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4,
                                                "seq": 8})", "m"); }),
                   Contains("m.json: at /vocab: missing required key 'vocab'"));
    }
    SECTION("missing HuggingFace key names the path") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_positions": 8,
                                                "vocab_size": 10})", "hf"); }),
                   Contains("hf.json: at /n_head: missing required key 'n_head'"));
    }
    SECTION("negative size") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": -2, "hidden": 64, "heads": 4,
                                                "vocab": 10, "seq": 8})"); }),
                   Contains("at /layers: expected a positive integer, found -2"));
    }
    SECTION("zero size in a HuggingFace file") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 0,
            "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10,
            "max_position_embeddings": 8})"); }),
                   Contains("at /hidden_size: expected a positive integer, found 0"));
    }
    SECTION("hidden not a multiple of heads") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": 2, "hidden": 65, "heads": 4,
                                                "vocab": 10, "seq": 8})"); }),
                   Contains("hidden size 65 is not a multiple of the 4 attention heads"));
    }
    SECTION("heads not a multiple of kv heads") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4,
                                                "kv_heads": 3, "vocab": 10, "seq": 8})"); }),
                   Contains("not a multiple of the 3 key-value heads"));
    }
    SECTION("bad norm") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "transformer", "layers": 2, "hidden": 64, "heads": 4,
                                                "vocab": 10, "seq": 8, "norm": "batchnorm"})"); }),
                   Contains("at /norm: expected \"layernorm\" or \"rmsnorm\", found \"batchnorm\""));
    }
    SECTION("bad kind") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "cnn"})"); }),
                   Contains("at /kind: expected \"transformer\" or \"layers\", found \"cnn\""));
    }
    SECTION("neither own nor HuggingFace") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"foo": 1})"); }), Contains("HuggingFace config.json"));
    }
    SECTION("bad layer kind suggests the nearest") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "layers", "input_bytes_per_sample": 4,
            "layers": [{"name": "c", "kind": "conv2", "params": 1, "fwd_flops": 2, "activations": 4, "output": 4}]})"); }),
                   Contains("at /layers/0/kind: expected one of conv, fc"));
    }
    SECTION("negative layer activations") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "layers", "input_bytes_per_sample": 4,
            "layers": [{"name": "c", "kind": "fc", "params": 1, "fwd_flops": 2, "activations": -4, "output": 4}]})"); }),
                   Contains("at /layers/0/activations: expected a non-negative size in bytes, found -4"));
    }
    SECTION("empty layer list") {
        CHECK_THAT(bad_input_message([] { from_text(R"({"kind": "layers", "input_bytes_per_sample": 4, "layers": []})"); }),
                   Contains("at /layers: expected a non-empty array of layers"));
    }
    SECTION("bad dtype") {
        CHECK_THAT(bad_input_message([] { parse_dtype("fp8", {"", "", "--dtype"}); }),
                   Contains("--dtype: expected bf16, fp16 or fp32, found \"fp8\""));
    }
    SECTION("bad recompute") {
        CHECK_THAT(bad_input_message([] { parse_recompute("some", {"", "", "--recompute"}); }),
                   Contains("--recompute: expected none, selective or full, found \"some\""));
    }
    SECTION("malformed model file gives line and column") {
        const std::string path = (std::filesystem::temp_directory_path() / "smol_bad_model.json").string();
        { std::ofstream(path) << "{\n  \"kind\": \"transformer\",\n  \"layers\": 2,,\n}"; }
        CHECK_THAT(bad_input_message([&] { load_model(path); }), Contains(path + ": line 3, column"));
        std::filesystem::remove(path);
    }
}
